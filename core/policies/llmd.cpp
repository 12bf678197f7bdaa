// The llmd policy: llm-d's inference scheduler at its helm defaults.
#include "core/policy.hpp"

#include <algorithm>
#include <limits>

#include "core/policies/common.hpp"
#include "core/routed_index.hpp"

namespace kvmesh {
namespace policies {
namespace {

// llm-d inference scheduler at its helm defaults: weighted scorers over an
// approximate prefix index (LRU per server) and scraped engine metrics.
class llmd_policy final : public router_policy {
 public:
  // Approximate prefix plugin: 31,250 entries of 64-token blocks per server
  // (2,000,000 tokens), expressed in this trace's blocks.
  explicit llmd_policy(const policy_config& c)
      : cfg_(c),
        rng_(c.seed),
        tree_(*routed_index::make(
            c.workers, std::max<uint64_t>(1, 2000000 / c.block_tokens))),
        score_(c.workers) {}
  uint32_t route(const route_request& r, const fleet_view& v) override {
    uint32_t qmin = std::numeric_limits<uint32_t>::max(), qmax = 0;
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      qmin = std::min(qmin, v.loads[w].waiting);
      qmax = std::max(qmax, v.loads[w].waiting);
    }
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      const double prefix =
          r.n ? static_cast<double>(tree_.match(w, r.blocks, r.n)) / r.n : 0;
      const double kv = 1.0 - std::clamp(v.loads[w].kv_usage, 0.0, 1.0);
      const double queue =
          qmax == qmin ? 1.0
                       : static_cast<double>(qmax - v.loads[w].waiting) /
                             static_cast<double>(qmax - qmin);
      score_[w] = 3 * prefix + 2 * kv + 2 * queue;
    }
    const uint32_t w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
      return compare(score_[b], score_[a]);
    });
    tree_.insert(w, r.blocks, r.n);
    return w;
  }

 private:
  policy_config cfg_;
  uint64_t rng_;
  routed_index tree_;
  std::vector<double> score_;
};

}  // namespace

std::unique_ptr<router_policy> make_llmd(const policy_config& c) {
  return std::make_unique<llmd_policy>(c);
}

}  // namespace policies

}  // namespace kvmesh
