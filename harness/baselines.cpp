// The raw NATS baselines: payload, back-to-back and paced rounds.
#include "harness/baselines.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "messages/codec.hpp"

namespace kvmesh::harness {

size_t median_payload(std::vector<route_request_msg> sample) {
  if (sample.empty()) return 0;
  const size_t mid = sample.size() / 2;
  std::nth_element(sample.begin(), sample.begin() + mid, sample.end(),
                   [](const route_request_msg& a, const route_request_msg& b) {
                     return a.blocks.size() < b.blocks.size();
                   });
  return encode(sample[mid]).size();
}

size_t trace_payload(const std::vector<trace_request>& trace) {
  std::vector<route_request_msg> sample;
  for (const auto& r : trace) {
    route_request_msg m;
    m.id = sample.size();
    m.blocks = r.blocks;
    m.input_tokens = r.input_tokens;
    m.output_tokens = std::max<uint32_t>(1, r.output_tokens);
    sample.push_back(std::move(m));
  }
  return median_payload(std::move(sample));
}

std::string measure_baselines(baseline_report& b, const nats_options& server,
                              size_t samples, double rate, child_mesh& m) {
  if (auto why = watch(m, 0); !why.empty()) return why;
  b.rr = request_reply_latency(server, b.payload, samples);
  if (auto why = watch(m, 0); !why.empty()) return why;
  b.sg =
      scatter_gather_latency(server, b.fanout, b.payload, b.payload, samples);
  // At a trace's rate the mesh's threads sleep between decisions and each
  // auction pays for waking them; back-to-back rounds find them awake.
  // Rounds at the run's rate pay the same, and show what of the auction's
  // latency is the host's rather than kvmesh's.
  if (b.sg && rate > 0 && 1e6 / rate > paced_min_slack * b.sg->mean_us) {
    b.paced_rate = rate;
    const auto interval = std::chrono::microseconds(std::llround(1e6 / rate));
    const size_t rounds = std::min<size_t>(
        samples,
        std::max<size_t>(100, static_cast<size_t>(rate * paced_baseline_s)));
    if (auto why = watch(m, 0); !why.empty()) return why;
    b.rr_paced = request_reply_latency(server, b.payload, rounds, interval);
    if (auto why = watch(m, 0); !why.empty()) return why;
    b.sg_paced = scatter_gather_latency(server, b.fanout, b.payload, b.payload,
                                        rounds, interval);
  }
  return {};
}

}  // namespace kvmesh::harness
