// The node agent: its WORKERs served on NATS (bids, awards, releases,
// withdraws, drains), their heartbeats, and the caches they announce again
// to a shard that lost them.
#pragma once

#include <caf/all.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/actors.hpp"
#include "actors/engine_worker.hpp"
#include "actors/worker.hpp"
#include "cluster/nats.hpp"
#include "cluster/subjects.hpp"
#include "core/error.hpp"

namespace kvmesh {

struct agent_options {
  mesh_options mesh;
  std::string name;  // unique per agent: its subjects carry it
  // One WORKER per entry; each one's ledger.id is its worker id.
  std::vector<worker_options> workers;
  // Workers of real engines, which the caller makes: spawn_external(id,
  // events) for each id, `events` being the agent's publisher of request
  // events (the workers' listener). Gateways that call their engines
  // themselves report to them on the agent's "progress" subject.
  std::vector<uint32_t> external;
  std::function<expected<engine_worker_actor>(uint32_t id,
                                              listener_actor events)>
      spawn_external;
};

// A running node agent: its WORKERs, served on NATS. Destroying it stops
// them and unsubscribes.
class agent_node {
 public:
  static expected<std::unique_ptr<agent_node>> start(caf::actor_system& sys,
                                                     nats_bus& bus,
                                                     const agent_options& opt);
  ~agent_node();
  const std::vector<worker_actor>& workers() const;
  // Announcements of the workers' caches to the shards: made, and deferred
  // because one was made less than mesh.announce_beats heartbeats before.
  struct announcements {
    uint64_t made = 0;
    uint64_t deferred = 0;
  };
  announcements announced() const;

  struct impl;

 private:
  explicit agent_node(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvmesh
