// The trace simulator: replays a trace through N simulated GPUs and R router
// replicas in virtual time, for one policy at a time. Deterministic for a
// given seed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/block_hash.hpp"
#include "core/engine.hpp"
#include "core/error.hpp"
#include "core/policy.hpp"
#include "core/stats.hpp"
#include "core/trace.hpp"
#include "core/worker.hpp"

namespace kvmesh {

struct sim_config {
  uint32_t workers = 8;
  std::vector<double> worker_speeds;  // empty: all 1.0; else one per worker
  uint64_t gpu_blocks = 1024;
  uint64_t host_blocks = 4096;
  uint64_t disk_blocks = 16384;
  uint32_t block_tokens = default_block_tokens;
  double speedup = 1;       // arrival times are divided by this
  double model_factor = 1;  // scales every engine step
  uint32_t routers = 1;
  double state_delay_ms = 0;    // KV events and load reports reach routers late
  double auction_ms = 1;        // kvmesh: call for bids to award, round trip
  uint32_t max_auctions = 8;    // kvmesh: auctions per request at most
  double refuse_growth = 0.05;  // kvmesh: a worker refuses an award when its
                                // queue grew by more than this many request
                                // sizes since its bid
  uint64_t seed = 1;
  // For reports: every worker's queued work sampled every this many ms of
  // the run's clock (0: no samples, at no cost), at most
  // queued_max_samples of them (see queued_sampler).
  double queued_sample_ms = 0;
  size_t queued_max_samples = 256;
  engine_config engine;  // block size, tiers, speed and model factor are set
                         // from the fields above
  price_config price;
};

// Every worker's queued work, in blocks, at one time of a run (ms on the
// run's clock: arrivals divided by the speedup).
struct queued_sample {
  double time_ms = 0;
  std::vector<double> queued;  // by worker id
};

// Keeps samples of queued work every `interval_ms` from `start_ms`, at most
// `max` of them: when full it drops every other sample and doubles the
// interval, so a run of any length fits in bounded memory and stays evenly
// spaced. The simulator and `kvmesh bench` (which polls the mesh) share it.
class queued_sampler {
 public:
  queued_sampler(double interval_ms, size_t max, double start_ms = 0);
  // The time the next sample is due.
  double next_ms() const { return next_ms_; }
  // Records `queued` as the sample due at next_ms() (skipped when halving
  // moved next_ms() past it).
  void add(const std::vector<double>& queued);
  // Gives up the samples due by `now_ms` (their state is not known).
  void skip_to(double now_ms);
  const std::vector<queued_sample>& samples() const { return samples_; }
  std::vector<queued_sample> take() { return std::move(samples_); }

 private:
  double interval_ms_;
  size_t max_;
  double next_ms_ = 0;
  std::vector<queued_sample> samples_;
};

// sim_result::imbalance from samples rather than from every event: the
// time-averaged max/mean of queued work, each sample holding until the next
// one, intervals with nothing queued left out (as the simulator does). 1
// when no interval had work; NaN when fewer than two samples leave no
// interval to average over. `kvmesh bench` measures its runs' this way.
double imbalance_of(const std::vector<queued_sample>& samples);

// Points of a result's TTFT distribution (sim_result::ttft_cdf_ms).
constexpr size_t ttft_cdf_points = 201;

struct tier_hits {
  double gpu = 0, host = 0, disk = 0, total = 0;
};

struct sim_result {
  policy_kind policy = policy_kind::kvmesh;
  summary ttft_ms, e2e_ms, itl_ms;
  tier_hits hit_ratio;
  uint64_t prefill_blocks = 0;  // prompt blocks computed, not reused
  double throughput_tok_s = 0;
  double imbalance = 0;  // time-averaged max/mean of queued read work
  std::vector<uint64_t> assigned;
  std::vector<uint32_t> worker_of;  // per request, in trace order
  // TTFT at quantiles 0, 1/200, ..., 1 (see quantiles in core/stats.hpp).
  std::vector<double> ttft_cdf_ms;
  // Empty unless sim_config::queued_sample_ms asked for samples.
  std::vector<queued_sample> queued_over_time;
  uint64_t completed = 0;
  uint64_t requests = 0;
  uint64_t preemptions = 0;
  uint64_t refused = 0;     // requests an engine turned away (too large)
  uint64_t reauctions = 0;  // kvmesh: awards refused and auctioned again
};

struct oracle_result {
  summary ttft_ms;
  std::vector<double> ttft_cdf_ms;  // as sim_result's
  double hit_ratio = 0;
};

// What happened to one request, as its client saw it; times in ms from its
// arrival. Negative times: it never got there.
struct request_outcome {
  double arrival_ms = 0;  // on the run's clock
  double ttft_ms = -1;
  double e2e_ms = -1;
  uint32_t worker = 0;
  uint32_t prompt_blocks = 0;
  uint32_t output_tokens = 1;
  uint32_t hits[tier_count] = {0, 0, 0};
};

// Fills the latency, reuse and throughput fields of `res` (and worker_of)
// from every request's outcome: shared by the simulator and the live mesh.
void summarize_outcomes(const std::vector<request_outcome>& outcomes,
                        sim_result& res);

// One engine replaying a trace in virtual time (`kvmesh engine`).
struct engine_replay {
  std::vector<request_outcome> outcomes;  // by trace index
  uint64_t prompt_blocks = 0;             // of the requests it took
  uint64_t stored = 0, removed = 0;       // KV events
  std::vector<std::string> refused;       // why, for each one turned away
  double end_ms = 0;                      // virtual time of the last event
};

// Replays `trace`, arrivals divided by `speedup`, through `eng`; every
// arrival of an instant joins the step that starts then (engine::step_due).
engine_replay replay_engine(engine& eng,
                            const std::vector<trace_request>& trace,
                            double speedup = 1);

// Checks a configuration; errors name the bad field.
status validate(const sim_config& cfg);

// Worker w of the fleet `cfg` describes: its engine, and its ledger with the
// tier credits it measures on that engine. The simulator and the live mesh
// build their workers from these.
engine_config fleet_engine_config(const sim_config& cfg, uint32_t w);
worker_config fleet_worker_config(const sim_config& cfg, uint32_t w,
                                  const engine& eng);

// Seed of router replica r's policy for a run seeded with `seed` (the live
// mesh uses it to reproduce a simulated run).
uint64_t router_seed(uint64_t seed, uint32_t r);

// Runs one policy over the trace. `progress`, if set, is called now and then
// with the fraction of requests routed.
expected<sim_result> simulate(const sim_config& cfg,
                              const std::vector<trace_request>& trace,
                              policy_kind policy,
                              const std::function<void(double)>& progress = {});

// The physical limit: every request prefills only the blocks no earlier
// request had, on an idle GPU of the fleet's fastest speed.
oracle_result oracle(const sim_config& cfg,
                     const std::vector<trace_request>& trace);

}  // namespace kvmesh
