// The kvmesh policy: an auction over the workers' bids (core/auction).
#include "core/policy.hpp"

#include "core/auction.hpp"
#include "core/policies/common.hpp"

namespace kvmesh {
namespace policies {
namespace {

// kvmesh: an auction over bids from the workers' exact state, priced in
// cache blocks (core/pricing).
class kvmesh_policy final : public router_policy {
 public:
  explicit kvmesh_policy(const policy_config& c)
      : auction_(c.workers, c.block_tokens, c.price, c.seed),
        bids_(c.workers),
        prices_(c.workers) {}
  uint32_t route(const route_request& r, const fleet_view& v) override {
    v.bids->call_for_bids(r, bids_.data());
    return static_cast<uint32_t>(
        auction_.decide(r.id, r.n, bids_.data(), bids_.size(), prices_.data()));
  }
  void refused(uint64_t request, uint32_t) override {
    auction_.settle(request);
  }
  double expected_queued(uint64_t request) const override {
    return auction_.expected_queued(request);
  }
  void confirmed(uint64_t request, uint32_t, uint64_t count) override {
    auction_.confirmed(request, count);
  }
  void finished(uint64_t, uint32_t, uint32_t out) override {
    auction_.finished(out);
  }
  // No output to learn from; the worker's ledger drops it itself.
  void failed(uint64_t, uint32_t) override {}

 private:
  auctioneer auction_;
  std::vector<bid> bids_;
  std::vector<price_breakdown> prices_;
};

}  // namespace

std::unique_ptr<router_policy> make_kvmesh(const policy_config& c) {
  return std::make_unique<kvmesh_policy>(c);
}

}  // namespace policies

}  // namespace kvmesh
