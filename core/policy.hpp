// Routing policies: kvmesh's auction and the peers' rules (random,
// round_robin, least_loaded, prefix, dynamo, sglang, llmd, preble,
// mooncake, lmetric, sglang_events), each seeing only what its real system
// sees. Each policy is in core/policies/<name>.cpp; core/policy.cpp names and
// makes them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/block_hash.hpp"
#include "core/block_index.hpp"
#include "core/error.hpp"
#include "core/pricing.hpp"

namespace kvmesh {

enum class policy_kind : uint8_t {
  random,
  round_robin,
  least_loaded,
  prefix,
  dynamo,
  sglang,
  llmd,
  preble,
  mooncake,
  kvmesh,
  lmetric,
  sglang_events,
};

const char* to_string(policy_kind k);
expected<policy_kind> parse_policy(std::string_view name);
// Every policy, in the order reports list them.
const std::vector<policy_kind>& all_policies();

struct route_request {
  uint64_t id = 0;
  double now_ms = 0;
  const uint64_t* blocks = nullptr;  // chained block hashes (prefix ids)
  uint32_t n = 0;                    // prompt blocks
  uint32_t input_tokens = 0;
};

// What an engine's metrics endpoint says (vLLM: num_requests_waiting,
// num_requests_running, gpu_cache_usage_perc) plus its unprefilled tokens.
struct load_report {
  uint32_t waiting = 0;
  uint32_t running = 0;
  double kv_usage = 0;  // GPU blocks in use by running sequences / capacity
  uint64_t pending_prefill_tokens = 0;
};

// Bids pulled from workers' exact state at auction time (kvmesh only). The
// source holds a soft reservation at every bidder until award().
class bid_source {
 public:
  virtual ~bid_source() = default;
  virtual void call_for_bids(const route_request& r, bid* out) = 0;
};

// What a router can observe of the fleet when it routes.
struct fleet_view {
  const double* speeds = nullptr;      // per worker, as configured
  const block_index* kv = nullptr;     // learned from (delayed) KV events
  const load_report* loads = nullptr;  // latest (delayed) load reports
  bid_source* bids = nullptr;          // exact state, on request
};

struct policy_config {
  size_t workers = 0;
  uint32_t block_tokens = default_block_tokens;
  uint64_t gpu_blocks = 0;  // per worker (Preble mirrors GPU caches)
  double model_factor = 1;  // known from profiling (Preble, Mooncake)
  uint32_t max_batched_tokens = 8192;
  price_config price;  // kvmesh
  uint64_t seed = 1;
};

class router_policy {
 public:
  virtual ~router_policy() = default;
  // Picks a worker for the request.
  virtual uint32_t route(const route_request& r, const fleet_view& v) = 0;
  // The winner confirmed an award (kvmesh's auctions only); `count` is its
  // count of accepted requests with this one (award_reply::count).
  virtual void confirmed(uint64_t /*request*/, uint32_t /*worker*/,
                         uint64_t /*count*/) {}
  // The winner refused the award (its state moved since the bid); the
  // router auctions the request again.
  virtual void refused(uint64_t /*request*/, uint32_t /*worker*/) {}
  // The queue the router expects at the awardee (kvmesh), or -1.
  virtual double expected_queued(uint64_t /*request*/) const { return -1; }
  // A router sees each request's response stream: first token and end.
  virtual void first_token(uint64_t /*request*/, uint32_t /*worker*/) {}
  virtual void finished(uint64_t /*request*/, uint32_t /*worker*/,
                        uint32_t /*output_tokens*/) {}
  // The engine turned the request away: its stream ends with an error and
  // no token, and what the router tracks for it is freed as at an end.
  virtual void failed(uint64_t request, uint32_t worker) {
    first_token(request, worker);
    finished(request, worker, 0);
  }
};

expected<std::unique_ptr<router_policy>> make_policy(policy_kind kind,
                                                     const policy_config& cfg);

// --- peers' rules as pure functions (tested against worked examples) -----
// Defined with their policies (core/policies/dynamo.cpp, sglang.cpp);
// estimated_prefill_ms, which two policies share, in core/policy.cpp.

// Dynamo's KV router (lib/kv-router, default selector), per worker.
struct dynamo_inputs {
  double active_prefill_tokens = 0;  // router-tracked, until first token
  double request_tokens = 0;         // the request's input length
  double block_tokens = 1;
  double device_blocks = 0;  // overlap per tier (dynamo_tier_match)
  double host_blocks = 0;
  double disk_blocks = 0;
  double decay = 1;          // 1 / (1 + d * excess / request_blocks), d = 0
  double active_blocks = 0;  // router-tracked unique blocks on the worker
  double new_blocks = 0;     // complete request blocks not active there
  double active_requests = 0;
};
struct dynamo_weights {
  double prefill_load_scale = 1.0;
  double overlap_credit = 1.0;
  double host_hit = 0.75;
  double disk_hit = 0.25;
  double active_request_weight = 0;  // decode_active_request_weight
};
// max(0, (active prefill + input) / B - (credit device + 0.75 host + 0.25
// disk)): the adjusted prefill blocks.
double dynamo_prefill_blocks(const dynamo_inputs& in,
                             const dynamo_weights& w = {});
// Active blocks plus the request's new complete blocks.
double dynamo_decode_blocks(const dynamo_inputs& in);
// The linear cost: scale * prefill + decode + weight * active requests.
double dynamo_cost(const dynamo_inputs& in, const dynamo_weights& w = {});
// router_selection_policy = lmetric: prefill x (decode + 1).
double dynamo_lmetric_cost(const dynamo_inputs& in,
                           const dynamo_weights& w = {});
// Each worker's match of `chain` as Dynamo's indexer computes it: its
// device prefix, then the host blocks that continue it, then the disk
// blocks that continue those (a block in an earlier tier, or a missing one,
// ends the run).
void dynamo_tier_match(const block_index& kv, const uint64_t* chain, size_t n,
                       size_t workers, tier_match* out);

// SGLang cache_aware, classic form (sgl-router; SMG before August 2026):
// the load is imbalanced (route to least loaded) when max - min >
// abs_threshold and max > rel_threshold * min.
struct sglang_thresholds {
  double abs_threshold = 64;  // sglang_router Python defaults
  double rel_threshold = 1.5;
  double cache_threshold = 0.3;
};
bool sglang_imbalanced(double max_load, double min_load,
                       const sglang_thresholds& t = {});
// SMG's per-request gate (the form SGLang's gateway ships since August
// 2026): the affinity pick spills to the least loaded when its load is
// above rel_threshold x and abs_threshold + the fleet's mean load.
bool sglang_gate_spills(double load, double mean_load,
                        const sglang_thresholds& t = {});
// SMG's least-loaded pick: lowest load, then fewest processed requests,
// then lowest index.
uint32_t sglang_least_loaded(const std::vector<uint32_t>& loads,
                             const std::vector<uint64_t>& processed);

// llm-d's approximate prefix producer (llm-d-router v0.10.0, autoTune):
// its block size (the engine's, at least 64 tokens), in kvmesh blocks per
// chunk; how many chunks it matches (131072 tokens); its LRU entries per
// server (the engine's block count, else 31250).
struct llmd_geometry {
  uint32_t block_tokens = 64;
  uint32_t group = 1;
  uint32_t max_blocks = 2048;
  uint64_t lru_entries = 31250;
};
llmd_geometry llmd_geometry_for(uint32_t engine_block_tokens,
                                uint64_t engine_blocks);
// A server's score at the default weights: 3 prefix + 2 kv + 2 queue.
struct llmd_inputs {
  uint32_t matched_blocks = 0;  // the run's blocks it holds
  uint32_t prompt_blocks = 0;   // the prompt's (capped) blocks
  uint32_t waiting = 0, min_waiting = 0, max_waiting = 0;
  double kv_usage = 0;
};
double llmd_score(const llmd_inputs& in);

// Prefill time of `tokens` new tokens in chunks of max_batched (the engine
// polynomial), as profiled routers (Preble, Mooncake) estimate it.
double estimated_prefill_ms(double tokens, uint32_t max_batched);

}  // namespace kvmesh
