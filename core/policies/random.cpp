// The random policy: a uniform pick, seeded, blind to the fleet.
#include "core/policy.hpp"

#include "core/policies/common.hpp"

namespace kvmesh {
namespace policies {
namespace {

class random_policy final : public router_policy {
 public:
  explicit random_policy(const policy_config& c) : cfg_(c), rng_(c.seed) {}
  uint32_t route(const route_request&, const fleet_view&) override {
    return static_cast<uint32_t>(next_random(rng_) % cfg_.workers);
  }

 private:
  policy_config cfg_;
  uint64_t rng_;
};

}  // namespace

std::unique_ptr<router_policy> make_random(const policy_config& c) {
  return std::make_unique<random_policy>(c);
}

}  // namespace policies

}  // namespace kvmesh
