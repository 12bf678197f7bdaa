// What the policies of core/policies/ share: their makers (one per file),
// the tie-breaking pick and the in-flight count. Internal to core/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/policy.hpp"
#include "core/pricing.hpp"

namespace kvmesh::policies {

// One maker per policy, each in core/policies/<name>.cpp; make_policy
// (core/policy.cpp) checks the config before it calls one.
std::unique_ptr<router_policy> make_random(const policy_config& c);
std::unique_ptr<router_policy> make_round_robin(const policy_config& c);
std::unique_ptr<router_policy> make_least_loaded(const policy_config& c);
std::unique_ptr<router_policy> make_prefix(const policy_config& c);
std::unique_ptr<router_policy> make_dynamo(const policy_config& c);
std::unique_ptr<router_policy> make_sglang(const policy_config& c);
std::unique_ptr<router_policy> make_llmd(const policy_config& c);
std::unique_ptr<router_policy> make_preble(const policy_config& c);
std::unique_ptr<router_policy> make_mooncake(const policy_config& c);
std::unique_ptr<router_policy> make_kvmesh(const policy_config& c);
std::unique_ptr<router_policy> make_lmetric(const policy_config& c);
std::unique_ptr<router_policy> make_sglang_events(const policy_config& c);
// Dynamo's KV router, its linear cost or (lmetric) its LMetric selection.
std::unique_ptr<router_policy> make_dynamo_router(const policy_config& c,
                                                  bool lmetric);

// SGLang's approximate radix tree (SMG kv_index string_tree), over chained
// block ids: one node per block, shared by the workers (tenants) that were
// sent it, each with its last access time and its count of children it is
// also a tenant of. A tenant's nodes are always a prefix-closed set.
class sglang_tree {
 public:
  explicit sglang_tree(uint64_t cap_blocks) : cap_(cap_blocks) {}
  void insert(uint32_t worker, const uint64_t* chain, size_t n, double now);
  // How many leading blocks of `chain` are in the tree (any tenant); the
  // tenants of the deepest one into `tenants`, in insertion order.
  uint32_t deepest(const uint64_t* chain, size_t n,
                   std::vector<uint32_t>* tenants) const;
  // How many leading blocks of `chain` `worker` is a tenant of.
  uint32_t match(uint32_t worker, const uint64_t* chain, size_t n) const;
  // One eviction pass: least recently used (leaf, tenant) pairs go until
  // the tree's size (distinct nodes) is within the cap.
  void evict();
  uint64_t size() const { return nodes_.size(); }

 private:
  struct tenant {
    uint32_t worker;
    double last;
    uint32_t children;
  };
  struct node {
    uint64_t parent = 0;
    bool has_parent = false;
    std::vector<tenant> tenants;
  };
  static tenant* find(node& n, uint32_t worker);
  uint64_t cap_;
  std::unordered_map<uint64_t, node> nodes_;
};

// Picks uniformly among the indices where `cmp` says "equal" to the best;
// `cmp(a, b)` < 0 when a is better than b. Reservoir sampling, one pass.
template <class Cmp>
uint32_t argbest(size_t count, uint64_t& rng, Cmp cmp) {
  uint32_t best = 0;
  uint32_t ties = 1;
  for (uint32_t i = 1; i < count; ++i) {
    const int c = cmp(i, best);
    if (c < 0) {
      best = i;
      ties = 1;
    } else if (c == 0 && next_random(rng) % ++ties == 0) {
      best = i;
    }
  }
  return best;
}

template <class T>
int compare(T a, T b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

// In-flight requests per worker, as a router counts them from its own
// routing decisions and the ends of their streams.
class inflight {
 public:
  explicit inflight(size_t workers) : count_(workers, 0) {}
  void add(uint64_t request, uint32_t worker) {
    where_[request] = worker;
    ++count_[worker];
  }
  void finish(uint64_t request) {
    auto it = where_.find(request);
    if (it == where_.end()) return;
    --count_[it->second];
    where_.erase(it);
  }
  uint32_t operator[](size_t w) const { return count_[w]; }
  const std::vector<uint32_t>& counts() const { return count_; }

 private:
  std::vector<uint32_t> count_;
  std::unordered_map<uint64_t, uint32_t> where_;
};

}  // namespace kvmesh::policies
