// The least_loaded policy: the fewest in-flight requests this router counts.
#include "core/policy.hpp"

#include "core/policies/common.hpp"

namespace kvmesh {
namespace policies {
namespace {

class least_loaded_policy final : public router_policy {
 public:
  explicit least_loaded_policy(const policy_config& c)
      : cfg_(c), rng_(c.seed), load_(c.workers) {}
  uint32_t route(const route_request& r, const fleet_view&) override {
    const uint32_t w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
      return compare(load_[a], load_[b]);
    });
    load_.add(r.id, w);
    return w;
  }
  void finished(uint64_t request, uint32_t, uint32_t) override {
    load_.finish(request);
  }

 private:
  policy_config cfg_;
  uint64_t rng_;
  inflight load_;
};

}  // namespace

std::unique_ptr<router_policy> make_least_loaded(const policy_config& c) {
  return std::make_unique<least_loaded_policy>(c);
}

}  // namespace policies

}  // namespace kvmesh
