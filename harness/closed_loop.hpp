// The closed-loop load generator of `kvmesh bench --mode throughput`.
// Synthetic route requests published over NATS with a bounded number in
// flight (and an optional rate cap), every reply, error and timeout
// counted.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "cluster/mesh.hpp"
#include "core/stats.hpp"
#include "harness/accounting.hpp"
#include "harness/launcher.hpp"
#include "messages/types.hpp"

namespace kvmesh::harness {

// Synthetic requests generate little, so that engines keep up with the
// routers and the measurement is of routing, not of a saturated fleet.
constexpr uint32_t synthetic_output_tokens = 16;
constexpr uint32_t synthetic_families = 100;

// A load-generator request unanswered this long is lost: the routers'
// own deadlines are tens of milliseconds.
constexpr auto request_timeout = std::chrono::seconds(5);

// `n` synthetic requests, the same for the same seed: 8..64 blocks; half
// start with a prefix of one of synthetic_families families (so that the
// index has holders to find), the rest is unique. Ids are unique to the
// seed's run: a random high part, then a counter.
std::vector<route_request_msg> synthetic_requests(uint64_t n,
                                                  uint32_t block_tokens,
                                                  uint64_t seed);

struct closed_loop_options {
  uint32_t outstanding = 256;  // requests in flight at most
  double rate = 0;             // requests per second at most (0: no cap)
  double timeout_s = 600;      // the run fails past this
};

struct closed_loop_result {
  uint64_t requests = 0;
  uint64_t sent = 0;
  uint64_t decided = 0;
  uint64_t errors = 0;
  uint64_t timed_out = 0;
  uint64_t late = 0;  // replies after their request timed out
  error_counts error_kinds;
  steady::time_point start, end;
  double decisions_per_s = 0;         // all decisions over the whole run
  double steady_decisions_per_s = 0;  // after the first 10 %
  summary rtt_us;                     // publish to reply, at the client
};

// Publishes `requests` on subj.route() keeping `outstanding` in flight (and
// at most `rate` a second), replies coming to an inbox of its own, until
// each is answered or timed out (request_timeout). An error when the mesh
// failed (watch), a publish failed or the timeout passed.
expected<closed_loop_result> generate_load(
    nats_bus& bus, const subjects& subj, const closed_loop_options& o,
    const std::vector<route_request_msg>& requests, child_mesh& m);

}  // namespace kvmesh::harness
