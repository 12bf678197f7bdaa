// The dynamo policy: NVIDIA Dynamo's KV router and its cost (dynamo_cost).
#include "core/policy.hpp"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "core/policies/common.hpp"

namespace kvmesh {
namespace policies {
namespace {

// NVIDIA Dynamo's KV router: cache state from KV events, active prefill
// tokens and active blocks tracked router-side.
class dynamo_policy final : public router_policy {
 public:
  explicit dynamo_policy(const policy_config& c)
      : cfg_(c),
        rng_(c.seed),
        workers_(c.workers),
        match_(c.workers),
        cost_(c.workers) {}

  uint32_t route(const route_request& r, const fleet_view& v) override {
    v.kv->match(r.blocks, r.n, cfg_.workers, match_.data());
    const double bt = cfg_.block_tokens;
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      const worker_state& ws = workers_[w];
      uint32_t already = 0;
      for (uint32_t i = 0; i < r.n; ++i)
        already += ws.blocks.count(r.blocks[i]) > 0;
      dynamo_inputs in;
      in.active_prefill_tokens = ws.prefill_tokens;
      in.request_tokens = r.input_tokens;
      in.block_tokens = bt;
      in.device_blocks = match_[w].gpu;
      in.host_blocks = match_[w].host;
      in.disk_blocks = match_[w].disk;
      in.active_blocks = static_cast<double>(ws.blocks.size());
      in.new_blocks = r.n - already;
      cost_[w] = dynamo_cost(in);
    }
    const uint32_t w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
      return compare(cost_[a], cost_[b]);
    });
    // Track the request: its new tokens count as prefill until its first
    // token; its blocks are active until it ends.
    worker_state& ws = workers_[w];
    tracked t;
    t.worker = w;
    t.prefill_tokens =
        std::max(0.0, r.input_tokens - static_cast<double>(match_[w].gpu) * bt);
    t.blocks.assign(r.blocks, r.blocks + r.n);
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
  uint64_t rng_;
  std::vector<worker_state> workers_;
  std::unordered_map<uint64_t, tracked> requests_;
  std::vector<tier_match> match_;
  std::vector<double> cost_;
};

}  // namespace

std::unique_ptr<router_policy> make_dynamo(const policy_config& c) {
  return std::make_unique<dynamo_policy>(c);
}

}  // namespace policies

double dynamo_cost(const dynamo_inputs& in, const dynamo_weights& w) {
  const double raw =
      (in.active_prefill_tokens + in.request_tokens) / in.block_tokens;
  const double credit = w.overlap_credit * in.decay * in.device_blocks +
                        w.host_hit * in.host_blocks +
                        w.disk_hit * in.disk_blocks;
  const double prefill = w.prefill_load_scale * std::max(raw - credit, 0.0);
  return prefill + in.active_blocks + in.new_blocks;
}

}  // namespace kvmesh
