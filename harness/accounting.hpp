// The bench's accounting of a run: overhead, CPU per process, error kinds.
// What the routers' heartbeats count between the run's start and its end
// (decisions, re-auctions, auction latency, NATS messages less the idle
// traffic), where the CPU went, and why requests failed, by kind.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "harness/launcher.hpp"
#include "messages/types.hpp"

namespace kvmesh::harness {

using steady = std::chrono::steady_clock;

inline double seconds(steady::duration d) {
  return std::chrono::duration<double>(d).count();
}

// -- why requests failed
// --------------------------------------------------------

// An error message without the numbers in it (request ids, worker ids),
// so that errors of one kind count together.
std::string error_kind(const std::string& msg);

// Counts of errors by kind.
using error_counts = std::map<std::string, uint64_t>;

// -- routers' heartbeats ----------------------------------------------------

// Every RouterStatus heartbeat of the mesh with the time it arrived here:
// the counters `admin routers` serves, each with a time to delimit the run.
struct beat_log {
  struct beat {
    steady::time_point at;
    router_status s;
  };
  std::mutex mu;
  std::map<std::string, std::vector<beat>> by_router;

  void add(router_status s);
  // How many routers have at least `n` beats that arrived at `t` or later.
  size_t routers_with(size_t n, steady::time_point t);
};

// The messages in and out of a router's NATS connection.
inline uint64_t traffic(const router_status& s) {
  return s.nats_in + s.nats_out;
}

// Adds to `to` the re-auctions by cause counted from `then` to `now`.
void add_causes(router_status& to, const router_status& now,
                const router_status& then);

struct router_overhead {
  std::string name;
  uint64_t decisions = 0;
  uint64_t reauctions = 0;  // awards refused or unanswered, auctioned again
  router_status causes;     // the run's reauctions_* counts, by cause
  double auction_p50_us = 0;
  double auction_p99_us = 0;
  uint64_t nats_msgs = 0;       // in + out over the run
  double background_per_s = 0;  // in + out per second while idle
  double span_s = 0;            // between the two beats delimiting the run
};

struct overhead_result {
  std::vector<router_overhead> routers;
  uint64_t decisions = 0;
  uint64_t reauctions = 0;
  router_status causes;  // the routers' reauctions_* counts, summed
  double wall_s = 0;
  double decisions_per_s = 0;
  double auction_p50_us = 0;
  double auction_p99_us = 0;
  uint64_t nats_msgs = 0;
  double nats_msgs_per_decision = 0;
  double background_msgs = 0;  // heartbeats and the like over the run
  double nats_msgs_per_decision_net = 0;
  std::string warning;
};

// The run's share of each router's counters: from its last beat before
// `start` to its last beat now (after `end`). The rate between its last
// two beats before the start is its idle traffic (heartbeats it hears and
// sends), which the net count takes out. The routers report percentiles,
// not samples: the total's p50 is their decision-weighted mean, its p99
// the worst router's.
overhead_result overhead_of(beat_log& log, steady::time_point start,
                            steady::time_point end);

// Two heartbeats more: agents that subscribed after a shard's last beat
// learn the index's shards, and each router's idle traffic gets measured.
// "" when `routers` routers sent them, else why not.
std::string wait_idle_beats(beat_log& log, child_mesh& m, uint32_t routers,
                            uint32_t heartbeat_ms);

// Waits until every router has beaten after `end` and, together, they
// count `expected` decisions since `start` (a beat in flight at the end
// may predate the last decisions), or until each has beaten three times
// since (what they count then is all they will). A router swamped by a
// backlog beats late: it gets 30 s. "" unless the mesh failed meanwhile.
std::string wait_end_beats(beat_log& log, child_mesh& m, uint32_t routers,
                           uint32_t heartbeat_ms, steady::time_point start,
                           steady::time_point end, uint64_t expected);

// -- CPU per process ----------------------------------------------------------
// Where a run's CPU went: on a small host every process of the mesh shares
// the cores, so a router's capacity is its CPU per decision, not only the
// decisions per second the whole machine reached.

struct cpu_use {
  steady::time_point at;
  std::vector<double> procs;  // as m.procs, then m.nats, then this process
};

// Every child's CPU seconds so far (-1 for one that ended), then ours.
cpu_use cpu_now(const child_mesh& m);

// One process's CPU between two cpu_use.
struct cpu_row {
  std::string process;  // the child's name (nats-server), or "bench client"
  double cpu_s = 0;
  double cores = 0;  // cpu_s over the wall clock between them
  double us_per_decision = 0;
};

// The rows of the processes /proc told about both times, in cpu_now's
// order.
std::vector<cpu_row> cpu_rows(const child_mesh& m, const cpu_use& before,
                              const cpu_use& after, uint64_t decisions);

}  // namespace kvmesh::harness
