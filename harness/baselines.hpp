// The raw NATS baselines of `kvmesh bench`: the floor under the auctions.
// Request/reply and scatter-gather round trips on the mesh's own server,
// back to back and paced at the run's decision rate.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cluster/nats.hpp"
#include "cluster/nats_baseline.hpp"
#include "core/trace.hpp"
#include "harness/launcher.hpp"
#include "messages/types.hpp"

namespace kvmesh::harness {

struct baseline_report {
  size_t payload = 0;
  size_t fanout = 0;
  expected<baseline_result> rr = make_error(ec::not_found, "not run");
  expected<baseline_result> sg = make_error(ec::not_found, "not run");
  // Rounds paced at the run's decision rate (throughput: --rate); 0 when
  // not run (no rate, or one leaving the threads no time to fall asleep
  // between rounds).
  double paced_rate = 0;
  expected<baseline_result> rr_paced = make_error(ec::not_found, "not run");
  expected<baseline_result> sg_paced = make_error(ec::not_found, "not run");
  // Rounds at the trace's arrival instants while the mesh routed it (trace
  // mode): the same bursts and the same busy host as the auctions.
  expected<baseline_result> sg_during = make_error(ec::not_found, "not run");

  bool ran_during() const {
    return sg_during || sg_during.err().code != ec::not_found;
  }
  bool complete() const {
    return rr && sg && (paced_rate == 0 || (rr_paced && sg_paced)) &&
           (sg_during || !ran_during());
  }
};

// Seconds of rounds a paced baseline takes at most (capped by
// --baseline-samples): at a trace's few decisions per second, as many
// rounds as back to back would take minutes.
constexpr double paced_baseline_s = 15;

// A paced round's slack must be well above a round, or pacing changes
// nothing.
constexpr double paced_min_slack = 2;

// The encoded size of the middle request by prompt length: the payload of
// the raw baselines.
size_t median_payload(std::vector<route_request_msg> sample);

// median_payload of the route requests a trace's requests make.
size_t trace_payload(const std::vector<trace_request>& trace);

// Measures b.rr and b.sg (`samples` rounds each) on `server`, then, when
// `rate` leaves a round paced_min_slack times its mean as slack, both paced
// at `rate` (b.paced_rate). b.payload and b.fanout say what to send. ""
// unless a stop signal came or a child ended in between (watch).
std::string measure_baselines(baseline_report& b, const nats_options& server,
                              size_t samples, double rate, child_mesh& m);

}  // namespace kvmesh::harness
