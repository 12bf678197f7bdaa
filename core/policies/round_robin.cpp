// The round_robin policy: workers in turn, from a seeded start.
#include "core/policy.hpp"

#include "core/policies/common.hpp"

namespace kvmesh {
namespace policies {
namespace {

class round_robin_policy final : public router_policy {
 public:
  explicit round_robin_policy(const policy_config& c)
      : cfg_(c), next_(static_cast<uint32_t>(c.seed % c.workers)) {}
  uint32_t route(const route_request&, const fleet_view&) override {
    const uint32_t w = next_;
    next_ = static_cast<uint32_t>((next_ + 1) % cfg_.workers);
    return w;
  }

 private:
  policy_config cfg_;
  uint32_t next_;
};

}  // namespace

std::unique_ptr<router_policy> make_round_robin(const policy_config& c) {
  return std::make_unique<round_robin_policy>(c);
}

}  // namespace policies

}  // namespace kvmesh
