// The preble policy: Preble's E2 scheduling (exploit or explore).
#include "core/policy.hpp"

#include <algorithm>
#include <deque>
#include <utility>

#include "core/engine.hpp"
#include "core/policies/common.hpp"
#include "core/routed_index.hpp"

namespace kvmesh {
namespace policies {
namespace {

// Preble (ICLR'25) E2 scheduling: exploit a long cached prefix, explore
// otherwise, over a load cost from a 3-minute window of its own decisions.
class preble_policy final : public router_policy {
 public:
  explicit preble_policy(const policy_config& c)
      : cfg_(c),
        rng_(c.seed),
        load_(c.workers),
        tree_(*routed_index::make(c.workers,
                                  std::max<uint64_t>(1, c.gpu_blocks))),
        window_(c.workers),
        window_sum_(c.workers, 0),
        match_(c.workers),
        cost_(c.workers),
        miss_(c.workers) {}

  uint32_t route(const route_request& r, const fleet_view& v) override {
    const double bt = cfg_.block_tokens;
    // Per-token decode time from the profiled engine at mid occupancy.
    const double per_token = decode_ms(0.5) * cfg_.model_factor;
    const double median_out = median_output();
    uint32_t best_match = 0;
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      expire(w, r.now_ms);
      match_[w] = tree_.match(w, r.blocks, r.n);
      best_match = std::max(best_match, match_[w]);
      const double speed = v.speeds ? v.speeds[w] : 1.0;
      cost_[w] = (window_sum_[w] + load_[w] * median_out * per_token) / speed;
    }
    const auto [mn, mx] = std::minmax_element(cost_.begin(), cost_.end());
    const bool imbalanced = *mx > 1.5 * *mn;
    // This request's prefill time on each worker, given what it caches.
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      const double cached = std::min<double>(match_[w] * bt, r.input_tokens);
      const double speed = v.speeds ? v.speeds[w] : 1.0;
      miss_[w] = estimated_prefill_ms(r.input_tokens - cached,
                                      cfg_.max_batched_tokens) *
                 cfg_.model_factor / speed;
    }
    const double cached = std::min<double>(best_match * bt, r.input_tokens);
    const bool exploit =
        !imbalanced && best_match > 0 && cached > r.input_tokens - cached;
    uint32_t w;
    if (imbalanced) {
      w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
        return compare(cost_[a], cost_[b]);
      });
    } else {
      w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
        if (exploit) {
          const bool ha = match_[a] == best_match, hb = match_[b] == best_match;
          if (ha != hb) return ha ? -1 : 1;
        }
        return compare(cost_[a] + miss_[a], cost_[b] + miss_[b]);
      });
    }
    const double prefill = miss_[w];
    window_[w].push_back({r.now_ms, prefill});
    window_sum_[w] += prefill;
    tree_.insert(w, r.blocks, r.n);
    load_.add(r.id, w);
    return w;
  }

  void finished(uint64_t request, uint32_t, uint32_t out) override {
    load_.finish(request);
    outputs_.push_back(out);
    if (outputs_.size() > 1024) outputs_.pop_front();
  }

 private:
  static constexpr double window_ms = 180000;

  void expire(uint32_t w, double now) {
    auto& q = window_[w];
    while (!q.empty() && q.front().first < now - window_ms) {
      window_sum_[w] -= q.front().second;
      q.pop_front();
    }
    if (q.empty()) window_sum_[w] = 0;
  }

  double median_output() {
    if (outputs_.empty()) return 0;
    scratch_.assign(outputs_.begin(), outputs_.end());
    auto mid = scratch_.begin() + scratch_.size() / 2;
    std::nth_element(scratch_.begin(), mid, scratch_.end());
    return *mid;
  }

  policy_config cfg_;
  uint64_t rng_;
  inflight load_;
  routed_index tree_;
  std::vector<std::deque<std::pair<double, double>>> window_;
  std::vector<double> window_sum_;
  std::deque<uint32_t> outputs_;
  std::vector<uint32_t> scratch_;
  std::vector<uint32_t> match_;
  std::vector<double> cost_;
  std::vector<double> miss_;
};

}  // namespace

std::unique_ptr<router_policy> make_preble(const policy_config& c) {
  return std::make_unique<preble_policy>(c);
}

}  // namespace policies

}  // namespace kvmesh
