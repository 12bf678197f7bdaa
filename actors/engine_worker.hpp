// The WORKER of a real engine (vLLM, SGLang): the worker interface over an
// engine_state that the engine's KV events, its front and its metrics
// drive from outside.
#pragma once

#include <array>
#include <chrono>
#include <vector>

#include "actors/actors.hpp"
#include "actors/worker.hpp"
#include "engines/engine_state.hpp"
#include "engines/kv_events.hpp"

// These travel only between threads of one process (the ZMQ subscriber, the
// HTTP front, the metrics poller) and the actor: never serialized.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvmesh::engine_kv_batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvmesh::front_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvmesh::engine_metrics)

namespace kvmesh {

using stats_atom = caf::atom_constant<caf::atom("stats")>;

// What a real engine's worker counts, for the front's /kvmesh/stats.
struct engine_worker_stats {
  worker_status status;
  engine_metrics metrics;
  std::array<uint64_t, mirror_fault_count> mirror_faults{};
  uint64_t kv_batches = 0;   // batches applied
  uint64_t resyncs = 0;      // times the cache was forgotten
  uint64_t abandoned = 0;    // awards whose client never called the front
  uint64_t bypassed = 0;     // requests that reached the front unrouted
  uint64_t approximate = 0;  // requests sized from text
  // Gateways' progress reports for requests not awaiting arrival here, and
  // requests a gateway sent whose end it did not report (lease, silence).
  uint64_t stray_progress = 0;
  uint64_t unreported = 0;
};

}  // namespace kvmesh

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvmesh::engine_worker_stats)

namespace kvmesh {

using engine_worker_actor = worker_actor::extend<
    // Applies a batch of the engine's KV events, in the engine's order.
    caf::reacts_to<kv_atom, engine_kv_batch>,
    // Forgets the engine's cache: events were lost beyond replay, or the
    // engine started over.
    caf::reacts_to<kv_atom, drop_atom>,
    // A request reached the front (arrival), got its first token, ended.
    caf::reacts_to<arrive_atom, front_request>,
    caf::reacts_to<first_atom, uint64_t>, caf::reacts_to<done_atom, uint64_t>,
    // The same from a gateway that calls the engine itself, for the request
    // of a reporter; and the end of every request of a reporter gone silent.
    caf::reacts_to<progress_atom, request_progress>,
    caf::reacts_to<drop_atom, uint64_t>,
    // What the engine's /health and /metrics said.
    caf::reacts_to<put_atom, engine_metrics>,
    // Counters and state, for operators.
    caf::replies_to<get_atom, stats_atom>::with<engine_worker_stats>>;

struct engine_worker_options {
  engine_state_config state;
  // Told of each request's first token (with its cached blocks per tier)
  // and end, as a simulated worker's listener is.
  listener_actor listener;
  // Index shards that get this worker's KV events (see worker_options).
  std::vector<index_shard_actor> shards;
  // How often awards that never reached the front are looked for.
  caf::timespan sweep = std::chrono::seconds(1);
  // Where it counts awards, hits and KV events (as a simulated worker);
  // null: nowhere.
  std::shared_ptr<const worker_meters> meters;
};

// Checks the options before spawning: a bad configuration is an error
// value, not a dead actor.
expected<engine_worker_actor> spawn_engine_worker(
    caf::actor_system& sys, const engine_worker_options& opt);

}  // namespace kvmesh
