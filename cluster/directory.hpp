// Inside a router process: the directory, the mesh's membership as
// heartbeats show it and the distributed ADMIN over it.
#pragma once

#include <caf/all.hpp>

#include <memory>

#include "actors/actors.hpp"
#include "cluster/bridge.hpp"
#include "cluster/subjects.hpp"

namespace kvmesh::detail {

// The distributed ADMIN: the mesh as heartbeats show it. It also keeps the
// local ROUTER's members and shards current.
using directory_actor = admin_actor::extend<
    caf::reacts_to<nats_atom, std::string, std::string, bytes>,
    caf::reacts_to<reply_atom, uint64_t, bytes>, caf::reacts_to<sweep_atom>,
    caf::reacts_to<flush_atom>, caf::reacts_to<tick_atom>>;

// The directory of a router process, whose ROUTER is `router`; calls to
// the agents and shards reply on `box`.
directory_actor spawn_directory(caf::actor_system& sys,
                                std::shared_ptr<inbox> box, mesh_options mesh,
                                router_actor router,
                                std::shared_ptr<mailbox_gate> gate);

}  // namespace kvmesh::detail
