// Tests of core/policies/sglang: SGLang's model gateway (SMG, August 2026)
// on worked examples from its cache_aware.rs: the match-rate threshold and
// its least-loaded fallback, the per-request gate, the shared tree's
// eviction; and the classic fleet-wide balance rule.
#include "core/policy.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/policies/common.hpp"

namespace kvmesh {
namespace {

// The classic form (sgl-router, SMG before August 2026), CLI defaults.
TEST(policy, sglang_thresholds_are_strict) {
  EXPECT_FALSE(sglang_imbalanced(100, 36));   // difference 64: not past it
  EXPECT_TRUE(sglang_imbalanced(101, 36));    // 65 and 101 > 54
  EXPECT_FALSE(sglang_imbalanced(201, 134));  // 67, but 201 = 1.5 * 134
  EXPECT_TRUE(sglang_imbalanced(202, 134));
  EXPECT_FALSE(sglang_imbalanced(0, 0));
  EXPECT_TRUE(sglang_imbalanced(100, 10));
  EXPECT_FALSE(sglang_imbalanced(70, 10));
  EXPECT_FALSE(sglang_imbalanced(300, 210));
}

// SMG's gate, abs 64 and rel 1.5: loads A=100, B=C=10 (mean 40): 100 > 60
// but not > 104, A keeps it; A=110 (mean 43.3): 110 > 65 and > 107.3, it
// spills to the least loaded, B (ties with C on load and processed, lower
// index).
TEST(policy, sglang_gate_on_smgs_example) {
  EXPECT_FALSE(sglang_gate_spills(100, 40));
  EXPECT_TRUE(sglang_gate_spills(110, 130.0 / 3));
  EXPECT_EQ(sglang_least_loaded({110, 10, 10}, {5, 3, 3}), 1u);
  EXPECT_EQ(sglang_least_loaded({110, 10, 10}, {5, 4, 3}), 2u);
}

struct harness {
  explicit harness(uint32_t workers) {
    cfg.workers = workers;
    cfg.block_tokens = 1;  // one token a block: SMG's example in characters
    p = std::move(*make_policy(policy_kind::sglang, cfg));
  }
  uint32_t route(uint64_t id, const std::vector<uint64_t>& chain) {
    route_request r;
    r.id = id;
    r.blocks = chain.data();
    r.n = static_cast<uint32_t>(chain.size());
    r.input_tokens = r.n;
    return p->route(r, v);
  }
  policy_config cfg;
  std::unique_ptr<router_policy> p;
  fleet_view v;
};

// SMG's threshold example: the tree holds "abcdefgh"; "abcdefghij" matches
// 8/10 > 0.3 and goes to its tenant; "abcXYZWVUT" matches 3/10, not above
// 0.3, and goes to the least-loaded worker, which here has the larger tree
// (the old rule, smallest tree, would pick the other).
TEST(policy, sglang_at_most_threshold_goes_to_least_loaded) {
  harness h(2);
  const std::vector<uint64_t> abcdefgh{1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<uint64_t> abcdefghij{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(h.route(0, abcdefgh), 0u);      // empty tree: least loaded, index 0
  EXPECT_EQ(h.route(1, abcdefghij), 0u);    // 0.8: its tenant
  EXPECT_EQ(h.route(2, {50, 51, 52}), 1u);  // a miss: least loaded (2 vs 0)
  h.p->finished(0, 0, 1);
  h.p->finished(1, 0, 1);
  // Loads 0 vs 1, trees 10 vs 3 blocks.
  EXPECT_EQ(h.route(3, {1, 2, 3, 101, 102, 103, 104, 105, 106, 107}), 0u);
  h.p->finished(3, 0, 1);
  // Above the threshold the tenant wins although it is the more loaded
  // (1 vs 0; the gate is far): 2/5 of worker 1's prompt.
  EXPECT_EQ(h.route(4, {50, 51, 201, 202, 203}), 1u);  // 2/5 = 0.4
}

// The gate through the policy, 3 workers: requests sharing a prefix stay on
// its tenant while its load j satisfies j <= mean + 64 = j/3 + 64, i.e. up
// to 96 in flight; the 98th spills to the least loaded (worker 1), which
// becomes a tenant too, so the next one goes there (hot prefixes are
// replicated).
TEST(policy, sglang_gate_spills_and_replicates) {
  harness h(3);
  std::vector<uint64_t> chain{1, 2, 3, 4, 5, 6, 7, 8, 9, 0};
  auto route = [&](uint64_t id) {
    chain[9] = 1000 + id;
    return h.route(id, chain);
  };
  ASSERT_EQ(route(0), 0u);
  for (uint64_t id = 1; id <= 96; ++id)
    ASSERT_EQ(route(id), 0u) << "request " << id;
  EXPECT_EQ(route(97), 1u);
  EXPECT_EQ(route(98), 1u);
}

// Eviction: cap 10; worker 0 was sent "aaaaa" at t=1 and "bbbbbbbb" at t=2
// (13 nodes). One pass removes the least recently used leaves, the a's,
// until 10 are left. (SMG's radix node holds the whole "aaaaa" and goes at
// once, leaving 8; a node per block here evicts a block at a time.)
TEST(policy, sglang_tree_evicts_least_recent_leaves_to_its_cap) {
  policies::sglang_tree t(10);
  const std::vector<uint64_t> a{1, 2, 3, 4, 5};
  const std::vector<uint64_t> b{11, 12, 13, 14, 15, 16, 17, 18};
  t.insert(0, a.data(), a.size(), 1);
  t.insert(0, b.data(), b.size(), 2);
  t.insert(1, a.data(), 2, 3);  // worker 1 holds "aa", more recently
  EXPECT_EQ(t.size(), 13u);
  t.evict();
  EXPECT_EQ(t.size(), 10u);
  EXPECT_EQ(t.match(0, a.data(), a.size()), 2u);
  EXPECT_EQ(t.match(0, b.data(), b.size()), 8u);
  EXPECT_EQ(t.match(1, a.data(), a.size()), 2u);
  std::vector<uint32_t> tenants;
  EXPECT_EQ(t.deepest(a.data(), a.size(), &tenants), 2u);
  EXPECT_EQ(tenants, (std::vector<uint32_t>{0, 1}));
}

}  // namespace
}  // namespace kvmesh

namespace kvmesh {
namespace {

// SMG's event-driven example, block 16, a 64-token prompt (4 hashes):
// overlaps A=3, B=3, C=1 with loads A=3, B=2, C=0: B (score, then the
// lower load). A 15-token prompt has no complete block: the least loaded,
// C; so has a prompt nothing overlaps.
TEST(policy, sglang_events_most_overlap_then_load) {
  policy_config cfg;
  cfg.workers = 3;
  cfg.block_tokens = 16;
  auto p = make_policy(policy_kind::sglang_events, cfg);
  ASSERT_TRUE(p);
  block_index kv;
  auto store = [&](uint32_t w, uint64_t h) {
    cache_event e;
    e.hash = h;
    e.root = 1;
    kv.apply(w, e);
  };
  for (uint64_t h = 1; h <= 3; ++h) {
    store(0, h);
    store(1, h);
  }
  store(2, 1);
  fleet_view v;
  v.kv = &kv;
  auto route = [&](uint64_t id, std::vector<uint64_t> chain, uint32_t tokens) {
    route_request r;
    r.id = id;
    r.blocks = chain.data();
    r.n = static_cast<uint32_t>(chain.size());
    r.input_tokens = tokens;
    return (*p)->route(r, v);
  };
  // Nine prompts nothing overlaps: least loaded, ties by processed then
  // index, so 0, 1, 2, 0, 1, 2, ...
  for (uint64_t id = 0; id < 9; ++id)
    ASSERT_EQ(route(id, {1000 + 4 * id, 1001 + 4 * id}, 32), id % 3);
  (*p)->finished(1, 1, 1);
  for (uint64_t id : {2, 5, 8})
    (*p)->finished(id, 2, 1);
  EXPECT_EQ(route(20, {1, 2, 3, 4}, 64), 1u);  // loads were 3, 2, 0
  EXPECT_EQ(route(21, {1}, 15), 2u);           // loads 3, 3, 0
  EXPECT_EQ(route(22, {500, 501}, 32), 2u);    // loads 3, 3, 1
}

}  // namespace
}  // namespace kvmesh
