// What keeps a mesh process from being ready (its /readyz): per role, what
// it needs from NATS and from its node's actors before it can do its job.
#pragma once

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cluster/agent_node.hpp"
#include "cluster/engine_agent.hpp"
#include "cluster/router_node.hpp"
#include "cluster/shard_node.hpp"

namespace kvmesh {

// Asks `h` (message xs...) and waits until `deadline`, at least 1 ms:
// the answer, or nothing, with the error in `why` when given. What a
// scrape and a probe ask the node's actors.
template <class T, class Handle, class... Ts>
std::optional<T> ask_until(caf::scoped_actor& self, const Handle& h,
                           std::chrono::steady_clock::time_point deadline,
                           std::string* why, Ts... xs) {
  std::optional<T> out;
  const auto left = std::max<caf::timespan>(
      std::chrono::duration_cast<caf::timespan>(
          deadline - std::chrono::steady_clock::now()),
      std::chrono::milliseconds(1));
  self->request(h, left, xs...)
      .receive([&](T& x) { out = std::move(x); },
               [&](caf::error& e) {
                 if (why) *why = self->system().render(e);
               });
  return out;
}

// Each unmet condition in words; empty: ready. Actors not answering by the
// deadline count as not ready.
using readiness = std::function<std::vector<std::string>(
    caf::scoped_actor&, std::chrono::steady_clock::time_point deadline)>;

// Every role: connected to NATS. An agent: each worker answers and none is
// unhealthy (for a real engine: the engine answers). A router: the ROUTER
// answers and knows a live worker to route to. An index shard: the shard
// (its RocksDB store) answers.
readiness readiness_of(const nats_bus& bus, const agent_node& node);
readiness readiness_of(const nats_bus& bus, const engine_agent& node);
readiness readiness_of(const nats_bus& bus, const router_node& node);
readiness readiness_of(const nats_bus& bus, const shard_node& node);

}  // namespace kvmesh
