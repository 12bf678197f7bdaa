// The prefix policy: pure affinity to the longest prefix this router sent.
#include "core/policy.hpp"

#include "core/policies/common.hpp"
#include "core/routed_index.hpp"

namespace kvmesh {
namespace policies {
namespace {

// Pure affinity: the longest prefix this router sent somewhere wins; ties by
// in-flight load, then random. No balancing at all: the failure mode.
class prefix_policy final : public router_policy {
 public:
  explicit prefix_policy(const policy_config& c)
      : cfg_(c),
        rng_(c.seed),
        load_(c.workers),
        tree_(*routed_index::make(c.workers, routed_index::unbounded)),
        match_(c.workers) {}
  uint32_t route(const route_request& r, const fleet_view&) override {
    for (uint32_t w = 0; w < cfg_.workers; ++w)
      match_[w] = tree_.match(w, r.blocks, r.n);
    const uint32_t w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
      if (int c = compare(match_[b], match_[a])) return c;
      return compare(load_[a], load_[b]);
    });
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
  inflight load_;
  routed_index tree_;
  std::vector<uint32_t> match_;
};

}  // namespace

std::unique_ptr<router_policy> make_prefix(const policy_config& c) {
  return std::make_unique<prefix_policy>(c);
}

}  // namespace policies

}  // namespace kvmesh
