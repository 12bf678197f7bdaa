// The sglang policy: SGLang's cache_aware router and its balance rule.
#include "core/policy.hpp"

#include <algorithm>

#include "core/policies/common.hpp"
#include "core/routed_index.hpp"

namespace kvmesh {
namespace policies {
namespace {

// SGLang's cache_aware router (sgl-router): approximate tree of routed
// prompts with LRU eviction, balancing on router-counted in-flight requests.
class sglang_policy final : public router_policy {
 public:
  // The tree is bounded by max_tree_size = 2^24 characters per worker; at
  // about 4 characters a token that is 2^22 tokens.
  explicit sglang_policy(const policy_config& c)
      : cfg_(c),
        rng_(c.seed),
        load_(c.workers),
        tree_(*routed_index::make(
            c.workers,
            std::max<uint64_t>(1, (uint64_t{1} << 22) / c.block_tokens))),
        match_(c.workers) {}
  uint32_t route(const route_request& r, const fleet_view&) override {
    const auto& counts = load_.counts();
    const auto [mn, mx] = std::minmax_element(counts.begin(), counts.end());
    uint32_t w;
    if (sglang_imbalanced(*mx, *mn, thresholds_)) {
      w = static_cast<uint32_t>(mn - counts.begin());
    } else {
      for (uint32_t i = 0; i < cfg_.workers; ++i)
        match_[i] = tree_.match(i, r.blocks, r.n);
      w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
        return compare(match_[b], match_[a]);
      });
      const double rate = r.n ? static_cast<double>(match_[w]) / r.n : 0;
      if (!(rate > thresholds_.cache_threshold)) {
        w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
          return compare(tree_.size(a), tree_.size(b));
        });
      }
    }
    tree_.insert(w, r.blocks, r.n);
    load_.add(r.id, w);
    return w;
  }
  void finished(uint64_t request, uint32_t, uint32_t) override {
    load_.finish(request);
  }

 private:
  policy_config cfg_;
  uint64_t rng_;
  sglang_thresholds thresholds_;
  inflight load_;
  routed_index tree_;
  std::vector<uint32_t> match_;  // per worker, this request's
};

}  // namespace

std::unique_ptr<router_policy> make_sglang(const policy_config& c) {
  return std::make_unique<sglang_policy>(c);
}

}  // namespace policies

bool sglang_imbalanced(double max_load, double min_load,
                       const sglang_thresholds& t) {
  return max_load - min_load > t.abs_threshold &&
         max_load > t.rel_threshold * min_load;
}

}  // namespace kvmesh
