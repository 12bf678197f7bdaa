// Inside a router process: the ADMIN on NATS, its verbs answered from the
// directory, the workers listing in pages.
#pragma once

#include <caf/all.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "actors/actors.hpp"
#include "cluster/bridge.hpp"
#include "cluster/nats.hpp"

namespace kvmesh::detail {

// The "overloaded" answer of the ADMIN's subjects and of a router's own
// weights subjects, in the type their callers decode.
std::optional<bytes> admin_overloaded(const std::string& subject,
                                      const std::string& why);

// Serves `admin`'s verbs on NATS, waiting `timeout` for each answer; a
// workers page holds `page_bytes` (0: half the server's max payload).
caf::actor spawn_admin_front(caf::actor_system& sys, nats_bus* bus,
                             admin_actor admin, caf::timespan timeout,
                             size_t page_bytes,
                             std::shared_ptr<mailbox_gate> gate);

}  // namespace kvmesh::detail
