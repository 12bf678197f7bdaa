// The WORKER actor: one GPU's engine, cache tiers and read-work ledger.
#pragma once

#include <memory>
#include <vector>

#include "actors/actors.hpp"
#include "core/engine.hpp"
#include "core/worker.hpp"

namespace kvmesh {

struct worker_options {
  engine_config engine;
  worker_config ledger;
  // Engine milliseconds per wall-clock millisecond: 10 runs a simulated
  // GPU ten times faster than real time.
  double time_scale = 1;
  // Told of each request's first token, (first_atom, id, gpu, host, disk
  // hit blocks), and end, (done_atom, id): what a client of the engine sees.
  listener_actor listener;
  // Index shards that get this worker's KV events, each batch to the shard
  // of its chains' first block (shard_of).
  std::vector<index_shard_actor> shards;
};

struct worker_state {
  static inline const char* name = "worker";
  std::unique_ptr<engine> eng;
  std::unique_ptr<worker_ledger> ledger;
  double time_scale = 1;
  caf::actor_clock::time_point origin;
  bool stepping = false;
  uint64_t completed = 0;
  bool draining = false;
  std::vector<engine_event> events;
  listener_actor listener;
  std::vector<index_shard_actor> shards;
  std::vector<std::vector<cache_event>> kv_out;  // one batch per shard
};

worker_actor::behavior_type worker(
    worker_actor::stateful_pointer<worker_state> self, worker_options opt);

// Checks the options (engine and ledger) before spawning, so that a bad
// configuration is an error value, not a dead actor.
expected<worker_actor> spawn_worker(caf::actor_system& sys,
                                    const worker_options& opt);

}  // namespace kvmesh
