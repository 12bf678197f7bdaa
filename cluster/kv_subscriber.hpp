// The ZMQ side of a real engine's KV events: SUB sockets on the engine's
// publishers (one per data-parallel rank), sequence numbers checked, lost
// messages replayed from the engine's replay endpoint or the worker's
// cache forgotten, decoded batches handed to the WORKERs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/engine_worker.hpp"
#include "core/error.hpp"
#include "engines/kv_events.hpp"

namespace kvmesh {

struct kv_subscriber_options {
  // One publisher per data-parallel rank, as the engines bind them: rank r
  // at the port of rank 0 plus r. workers[r] gets rank r's events (or the
  // rank a batch names, when it names one of ours).
  std::vector<std::string> endpoints;
  // The engine's replay endpoints (ROUTER sockets), one per rank; "" none.
  std::vector<std::string> replay;
  std::string topic;  // a prefix, as ZMQ subscriptions are
  std::vector<engine_worker_actor> workers;
  // How long a replay may stay silent before the worker's cache is
  // forgotten instead.
  std::chrono::milliseconds replay_timeout{2000};
};

// What the subscriber saw, for operators and tests.
struct kv_subscriber_counters {
  kv_fault_counts faults;  // frames and events skipped, per kind
  uint64_t messages = 0;   // messages applied (from SUB or replay)
  uint64_t gaps = 0;       // lost sequence numbers noticed
  uint64_t replays = 0;    // replays that closed a gap
  uint64_t resyncs = 0;    // gaps no replay closed: the cache forgotten
  uint64_t restarts = 0;   // publishers that started over
};

class kv_subscriber {
 public:
  // Connects the sockets and starts the thread. Errors: no endpoint, a
  // malformed one, endpoints and workers of different counts.
  static expected<std::unique_ptr<kv_subscriber>> start(
      const kv_subscriber_options& opt);
  // Stops the thread and closes the sockets.
  ~kv_subscriber();
  kv_subscriber(const kv_subscriber&) = delete;
  kv_subscriber& operator=(const kv_subscriber&) = delete;

  kv_subscriber_counters counters() const;

  struct impl;

 private:
  explicit kv_subscriber(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

// The endpoint of rank `rank` when rank 0 is at `endpoint`: the port plus
// the rank, as vLLM and SGLang offset them (tcp://host:5557 -> :5558 for
// rank 1). Errors: no port to offset, or beyond 65535.
expected<std::string> endpoint_of_rank(const std::string& endpoint,
                                       uint32_t rank);

}  // namespace kvmesh
