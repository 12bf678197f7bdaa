// The dynamo policy: NVIDIA Dynamo's KV router (lib/kv-router, the default
// "linear" selector, DefaultWorkerScorer::worker_logit) at its current
// defaults: overlap_score_credit 1, prefill_load_scale 1,
// host_cache_hit_weight 0.75, disk_cache_hit_weight 0.25; credit decay,
// decode_active_request_weight and router_temperature 0 (minimum cost, ties
// at random); no router queue. The lmetric policy (core/policies/lmetric.cpp)
// is the same router with its lmetric selection.
//
// Per worker, in blocks of B tokens:
//   raw      = (active prefill tokens + input tokens) / B
//   credit   = device + 0.75 host + 0.25 disk   (blocks of the prompt)
//   prefill  = max(0, raw - credit)
//   decode   = active blocks + the prompt's complete blocks not active there
//   cost     = prefill + decode
// The tiers are continuations (query_lower_tiers): the device prefix, then
// host blocks after it, then disk blocks after those. Only complete blocks
// are hashed, so only they match and count as active. The winner's active
// prefill grows by input - (device + 0.75 host + 0.25 disk) x B tokens until
// its first token.
#include "core/policy.hpp"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "core/policies/common.hpp"

namespace kvmesh {
namespace policies {
namespace {

class dynamo_policy final : public router_policy {
 public:
  dynamo_policy(const policy_config& c, bool lmetric)
      : cfg_(c),
        lmetric_(lmetric),
        rng_(c.seed),
        workers_(c.workers),
        match_(c.workers),
        cost_(c.workers) {}

  uint32_t route(const route_request& r, const fleet_view& v) override {
    const double bt = cfg_.block_tokens;
    // Complete blocks only: Dynamo does not hash the partial tail.
    const uint32_t n =
        std::min<uint32_t>(r.n, r.input_tokens / cfg_.block_tokens);
    dynamo_tier_match(*v.kv, r.blocks, n, cfg_.workers, match_.data());
    const dynamo_weights wts;
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      const worker_state& ws = workers_[w];
      uint32_t already = 0;
      for (uint32_t i = 0; i < n; ++i)
        already += ws.blocks.count(r.blocks[i]) > 0;
      dynamo_inputs in;
      in.active_prefill_tokens = ws.prefill_tokens;
      in.request_tokens = r.input_tokens;
      in.block_tokens = bt;
      in.device_blocks = match_[w].gpu;
      in.host_blocks = match_[w].host;
      in.disk_blocks = match_[w].disk;
      in.active_blocks = static_cast<double>(ws.blocks.size());
      in.new_blocks = n - already;
      cost_[w] = lmetric_ ? dynamo_lmetric_cost(in, wts) : dynamo_cost(in, wts);
    }
    const uint32_t w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
      return compare(cost_[a], cost_[b]);
    });
    // Track the request: its uncached tokens count as prefill until its
    // first token; its complete blocks are active until it ends.
    worker_state& ws = workers_[w];
    tracked t;
    t.worker = w;
    const double credit = wts.overlap_credit * match_[w].gpu +
                          wts.host_hit * match_[w].host +
                          wts.disk_hit * match_[w].disk;
    t.prefill_tokens = std::max(0.0, r.input_tokens - credit * bt);
    t.blocks.assign(r.blocks, r.blocks + n);
    ws.prefill_tokens += t.prefill_tokens;
    for (uint64_t h : t.blocks)
      ++ws.blocks[h];
    requests_.emplace(r.id, std::move(t));
    return w;
  }

  void first_token(uint64_t request, uint32_t) override {
    auto it = requests_.find(request);
    if (it == requests_.end() || it->second.prefill_done) return;
    it->second.prefill_done = true;
    worker_state& ws = workers_[it->second.worker];
    ws.prefill_tokens =
        std::max(0.0, ws.prefill_tokens - it->second.prefill_tokens);
  }

  void finished(uint64_t request, uint32_t w, uint32_t out) override {
    first_token(request, w);
    (void)out;
    auto it = requests_.find(request);
    if (it == requests_.end()) return;
    worker_state& ws = workers_[it->second.worker];
    for (uint64_t h : it->second.blocks) {
      auto b = ws.blocks.find(h);
      if (b != ws.blocks.end() && --b->second == 0) ws.blocks.erase(b);
    }
    requests_.erase(it);
  }

 private:
  struct worker_state {
    double prefill_tokens = 0;
    std::unordered_map<uint64_t, uint32_t> blocks;  // refcounted, unique
  };
  struct tracked {
    uint32_t worker = 0;
    double prefill_tokens = 0;
    bool prefill_done = false;
    std::vector<uint64_t> blocks;
  };

  policy_config cfg_;
  bool lmetric_;
  uint64_t rng_;
  std::vector<worker_state> workers_;
  std::unordered_map<uint64_t, tracked> requests_;
  std::vector<tier_match> match_;
  std::vector<double> cost_;
};

}  // namespace

std::unique_ptr<router_policy> make_dynamo(const policy_config& c) {
  return make_dynamo_router(c, false);
}

std::unique_ptr<router_policy> make_dynamo_router(const policy_config& c,
                                                  bool lmetric) {
  return std::make_unique<dynamo_policy>(c, lmetric);
}

}  // namespace policies

void dynamo_tier_match(const block_index& kv, const uint64_t* chain, size_t n,
                       size_t workers, tier_match* out) {
  // Per worker, the tier its run is in (0 device, 1 host, 2 disk), or 3
  // once it ended.
  std::vector<uint8_t> phase(workers, 0);
  std::vector<uint8_t> seen(workers, 0);
  for (size_t w = 0; w < workers; ++w)
    out[w] = tier_match{};
  size_t alive = workers;
  for (size_t i = 0; i < n && alive > 0; ++i) {
    std::fill(seen.begin(), seen.end(), 0);
    kv.for_each_holder(chain[i], [&](uint32_t w, tier t) {
      if (w >= workers || phase[w] == 3) return;
      const uint8_t p = static_cast<uint8_t>(t);
      if (p < phase[w]) return;  // back up a tier: the run ended
      seen[w] = 1;
      phase[w] = p;
      out[w].add(t);
    });
    for (size_t w = 0; w < workers; ++w)
      if (phase[w] != 3 && !seen[w]) {
        phase[w] = 3;
        --alive;
      }
  }
}

double dynamo_prefill_blocks(const dynamo_inputs& in, const dynamo_weights& w) {
  const double raw =
      (in.active_prefill_tokens + in.request_tokens) / in.block_tokens;
  const double credit = w.overlap_credit * in.decay * in.device_blocks +
                        w.host_hit * in.host_blocks +
                        w.disk_hit * in.disk_blocks;
  return std::max(raw - credit, 0.0);
}

double dynamo_decode_blocks(const dynamo_inputs& in) {
  return in.active_blocks + in.new_blocks;
}

double dynamo_cost(const dynamo_inputs& in, const dynamo_weights& w) {
  return w.prefill_load_scale * dynamo_prefill_blocks(in, w) +
         dynamo_decode_blocks(in) +
         w.active_request_weight * in.active_requests;
}

double dynamo_lmetric_cost(const dynamo_inputs& in, const dynamo_weights& w) {
  return dynamo_prefill_blocks(in, w) * (dynamo_decode_blocks(in) + 1);
}

}  // namespace kvmesh
