// The WORKER actor: one GPU's engine, cache tiers and read-work ledger.
#pragma once

#include <limits>
#include <memory>
#include <vector>

#include "actors/actors.hpp"
#include "core/engine.hpp"
#include "core/worker.hpp"
#include "metrics/registry.hpp"

namespace kvmesh {

// What a WORKER counts for the Prometheus series (docs/metrics.md), as
// handles into its process's registry: counted where the answer is known,
// as it is given, instead of state kept for a status to report.
struct worker_meters {
  // Awards by answer.
  enum award_result {
    accepted,
    draining,
    queue_grew,
    engine_refused,
    withdrawn  // came after its router withdrew it
  };
  metrics::counter* awards[5] = {};
  // Full prompt blocks of the accepted requests, and of those the prefix
  // blocks the worker held at the award, by tier (gpu, host, disk).
  metrics::counter* prompt_blocks = nullptr;
  metrics::counter* hit_blocks[3] = {};
  // KV events sent to the index shards (stored, removed): the node
  // agent's, shared by its workers.
  metrics::counter* kv_events[2] = {};
  // The agent's request latencies (seconds of engine time).
  metrics::histogram* ttft = nullptr;
  metrics::histogram* itl = nullptr;
  metrics::histogram* e2e = nullptr;
  // A request's latencies, into the histograms set: arrival, first token
  // and last token in engine milliseconds, and its output length.
  void finished(double arrival_ms, double first_ms, double end_ms,
                uint32_t generated) const;
};

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
  // Where it counts awards, hits and KV events; null: nowhere (a process
  // without a metrics endpoint).
  std::shared_ptr<const worker_meters> meters;
  // The models it serves (worker_status::models): a simulated GPU serves
  // what its agent is told to (--model).
  std::vector<served_model> models;
};

struct worker_state {
  static inline const char* name = "worker";
  std::unique_ptr<engine> eng;
  std::unique_ptr<worker_ledger> ledger;
  double time_scale = 1;
  caf::actor_clock::time_point origin;
  bool stepping = false;
  bool kicked = false;     // a step_atom to start the next step is on its way
  double step_end = 0;     // engine ms at which the step in progress ends
  double last_submit = 0;  // engine ms of the latest request's arrival
  uint64_t completed = 0;
  uint64_t awards = 0;  // accepted
  double last_price = std::numeric_limits<double>::quiet_NaN();
  bool draining = false;
  std::vector<served_model> models;
  std::vector<engine_event> events;
  listener_actor listener;
  std::vector<index_shard_actor> shards;
  std::vector<std::vector<cache_event>> kv_out;  // one batch per shard
  std::shared_ptr<const worker_meters> meters;   // null: not counted
  // Awards a router withdrew (docs/reliability.md, "Late awards"): their
  // request went elsewhere, so an award of one arriving late is refused.
  // A ring of the latest; a withdraw follows its award by milliseconds,
  // and an award this late is long past any router's deadline.
  static constexpr size_t withdrawn_window = 4096;
  std::vector<uint64_t> withdrawn;  // grows to withdrawn_window, then a ring
  size_t withdrawn_next = 0;
  // The latest accepted awards: a withdraw of one the engine started (or
  // even finished) answers "mine" with its count, and a durable request
  // handed out again is claimed (bid.holds). A ring, preallocated:
  // accepting stays allocation-free.
  struct taken_award {
    uint64_t request = 0;
    uint64_t stream_sequence = 0;  // route_request_msg::stream_sequence
    uint64_t count = 0;            // award_reply::count; 0: empty slot
  };
  static constexpr size_t taken_window = 4096;
  std::vector<taken_award> taken;
  size_t taken_next = 0;
  // Ring entries per hashed request id: every durable bid looks, and most
  // looks end here instead of scanning the ring. Built from the ring when
  // the first request that may be taken comes (may_be_taken): a mesh
  // without durable intake never holds its 128 KB per worker.
  static constexpr size_t taken_hint_slots = size_t{1} << 16;
  std::vector<uint16_t> taken_hint;
};

worker_actor::behavior_type worker(
    worker_actor::stateful_pointer<worker_state> self, worker_options opt);

// Checks the options (engine and ledger) before spawning, so that a bad
// configuration is an error value, not a dead actor.
expected<worker_actor> spawn_worker(caf::actor_system& sys,
                                    const worker_options& opt);

}  // namespace kvmesh
