// The mooncake policy: Mooncake's Conductor, queueing plus prefill time.
#include "core/policy.hpp"

#include <algorithm>

#include "core/policies/common.hpp"

namespace kvmesh {
namespace policies {
namespace {

// Mooncake's Conductor (FAST'25), local-prefix form: the instance with the
// least queueing time plus prefill time given its cached prefix.
class mooncake_policy final : public router_policy {
 public:
  explicit mooncake_policy(const policy_config& c)
      : cfg_(c), rng_(c.seed), match_(c.workers), cost_(c.workers) {}
  uint32_t route(const route_request& r, const fleet_view& v) override {
    v.kv->match(r.blocks, r.n, cfg_.workers, match_.data());
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      const double speed = v.speeds ? v.speeds[w] : 1.0;
      const double queue = estimated_prefill_ms(
          static_cast<double>(v.loads[w].pending_prefill_tokens),
          cfg_.max_batched_tokens);
      const double cached = std::min<double>(
          match_[w].total() * static_cast<double>(cfg_.block_tokens),
          r.input_tokens);
      const double prefill = estimated_prefill_ms(r.input_tokens - cached,
                                                  cfg_.max_batched_tokens);
      cost_[w] = (queue + prefill) * cfg_.model_factor / speed;
    }
    return argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
      return compare(cost_[a], cost_[b]);
    });
  }

 private:
  policy_config cfg_;
  uint64_t rng_;
  std::vector<tier_match> match_;
  std::vector<double> cost_;
};

}  // namespace

std::unique_ptr<router_policy> make_mooncake(const policy_config& c) {
  return std::make_unique<mooncake_policy>(c);
}

}  // namespace policies

}  // namespace kvmesh
