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

// Every node agent as a router process sees them: one actor is the bidder
// for all their workers, each call one NATS message to the agent that holds
// the call's workers. The directory tells it which agent holds which
// worker; the ROUTER keeps a bidder of its own per (this actor, agent). One
// actor, not one per agent: a name costs a map entry, not an actor, so
// heartbeats under many forged names cannot grow a router by kilobytes each.
// An agent's first worker sends the agent a probe, and the ROUTER hears of
// an answer (put_atom, answered_atom): a router that starts amid forged
// heartbeats knows the real agents before any auction asks them.
using agent_links_actor = bidder_actor::extend<
    // Worker `id` is now `agent`'s.
    caf::reacts_to<put_atom, workers_atom, uint32_t, std::string>,
    // Worker `id` is gone.
    caf::reacts_to<drop_atom, workers_atom, uint32_t>,
    caf::reacts_to<reply_atom, uint64_t, bytes>, caf::reacts_to<sweep_atom>,
    caf::reacts_to<flush_atom>>;

// A remote INDEX SHARD: KV batches are published, queries are calls; its
// status is its last heartbeat.
using remote_shard_actor = index_shard_actor::extend<
    caf::reacts_to<reply_atom, uint64_t, bytes>, caf::reacts_to<sweep_atom>,
    caf::reacts_to<flush_atom>, caf::reacts_to<put_atom, shard_status>>;

agent_links_actor spawn_agent_links(caf::actor_system& sys,
                                    std::shared_ptr<inbox> box,
                                    const mesh_options& mesh,
                                    router_actor router);

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
