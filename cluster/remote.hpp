// Actors that stand in for actors of other processes: they implement the
// interfaces of actors/actors.hpp over NATS subjects, so that a ROUTER or a
// WORKER talks to a remote peer as to a local one.
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/actors.hpp"
#include "cluster/bridge.hpp"
#include "cluster/subjects.hpp"

namespace kvmesh {

// A node agent as a router process sees it: the bidder for all of the
// agent's workers, each call one NATS message.
using agent_link_actor =
    bidder_actor::extend<caf::reacts_to<put_atom, drain_atom, uint32_t, bool>,
                         caf::reacts_to<reply_atom, uint64_t, bytes>,
                         caf::reacts_to<sweep_atom>,
                         caf::reacts_to<flush_atom>>;

// A remote INDEX SHARD: KV batches are published, queries are calls; its
// status is its last heartbeat.
using remote_shard_actor = index_shard_actor::extend<
    caf::reacts_to<reply_atom, uint64_t, bytes>, caf::reacts_to<sweep_atom>,
    caf::reacts_to<flush_atom>, caf::reacts_to<put_atom, shard_status>>;

agent_link_actor spawn_agent_link(caf::actor_system& sys,
                                  std::shared_ptr<inbox> box,
                                  const mesh_options& mesh,
                                  const std::string& agent);

// `agent`: the node agent whose workers' KV events it publishes (on
// subjects::kv(shard, agent)); empty in a router process, which only asks.
remote_shard_actor spawn_remote_shard(caf::actor_system& sys,
                                      std::shared_ptr<inbox> box,
                                      const mesh_options& mesh, uint32_t shard,
                                      const std::string& agent = {});

// Publishes the first tokens and ends its workers report, batched per
// mailbox drain, on subjects::events().
using event_publisher_actor =
    listener_actor::extend<caf::reacts_to<flush_atom>>;

event_publisher_actor spawn_event_publisher(caf::actor_system& sys,
                                            nats_bus& bus,
                                            const subjects& subj);

}  // namespace kvmesh
