// Tests of core/policies/dynamo: Dynamo's cost on its own worked examples,
// its tier continuations, and what the router charges the winner.
#include "core/policy.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "core/block_index.hpp"

namespace kvmesh {
namespace {

// Dynamo's own selector test: 16 active prefill tokens plus a 96-token
// request make 112 / 16 = 7 raw prefill blocks; 6 device blocks of credit
// leave 1, scaled by 2; plus 2 active and 3 new decode blocks: 7.
TEST(policy, dynamo_cost_matches_dynamos_example) {
  dynamo_inputs in;
  in.active_prefill_tokens = 16;
  in.request_tokens = 96;
  in.block_tokens = 16;
  in.device_blocks = 6;
  in.active_blocks = 2;
  in.new_blocks = 3;
  dynamo_weights w;
  w.prefill_load_scale = 2;
  EXPECT_DOUBLE_EQ(dynamo_cost(in, w), 7.0);
}

// B = 16, a 128-token request (8 blocks), the current defaults. A: 6 device
// blocks, no active prefill, 10 active blocks: raw 8, prefill 2, decode 18,
// cost 20. B: 32 active prefill tokens, 4 active blocks: raw 10, decode 12,
// cost 22. With 6 host blocks B's credit is 4.5 (cost 17.5); with 6 disk
// blocks 1.5 (20.5). LMetric: A 2 x 19 = 38, B 10 x 13 = 130.
TEST(policy, dynamo_cost_on_the_default_weights) {
  dynamo_inputs a;
  a.request_tokens = 128;
  a.block_tokens = 16;
  a.device_blocks = 6;
  a.active_blocks = 10;
  a.new_blocks = 8;
  dynamo_inputs b = a;
  b.device_blocks = 0;
  b.active_prefill_tokens = 32;
  b.active_blocks = 4;
  EXPECT_DOUBLE_EQ(dynamo_cost(a), 20.0);
  EXPECT_DOUBLE_EQ(dynamo_cost(b), 22.0);
  EXPECT_DOUBLE_EQ(dynamo_lmetric_cost(a), 38.0);
  EXPECT_DOUBLE_EQ(dynamo_lmetric_cost(b), 130.0);
  b.host_blocks = 6;
  EXPECT_DOUBLE_EQ(dynamo_cost(b), 17.5);
  b.host_blocks = 0;
  b.disk_blocks = 6;
  EXPECT_DOUBLE_EQ(dynamo_cost(b), 20.5);
  // Credit past the raw prefill is capped at zero.
  a.device_blocks = 12;
  EXPECT_DOUBLE_EQ(dynamo_cost(a), 18.0);
  EXPECT_DOUBLE_EQ(dynamo_lmetric_cost(a), 0.0);
}

void store(block_index& kv, uint32_t w, uint64_t h, tier t) {
  cache_event e;
  e.where = t;
  e.hash = h;
  e.root = 1;
  kv.apply(w, e);
}

// Host blocks continue the device prefix and disk blocks the host run; a
// block back in an earlier tier, or missing, ends it.
TEST(policy, dynamo_tiers_are_continuations) {
  block_index kv;
  store(kv, 0, 1, tier::gpu);
  store(kv, 0, 2, tier::gpu);
  store(kv, 0, 3, tier::host);
  store(kv, 0, 4, tier::disk);
  store(kv, 0, 5, tier::gpu);  // after the disk run: not counted
  store(kv, 1, 1, tier::host);
  store(kv, 1, 2, tier::gpu);  // device after host: the run ended
  store(kv, 2, 1, tier::disk);
  store(kv, 2, 2, tier::disk);
  store(kv, 2, 3, tier::host);
  store(kv, 3, 1, tier::gpu);
  store(kv, 3, 3, tier::gpu);  // block 2 is missing
  const std::vector<uint64_t> chain{1, 2, 3, 4, 5};
  tier_match m[4];
  dynamo_tier_match(kv, chain.data(), chain.size(), 4, m);
  EXPECT_EQ(m[0].gpu, 2u);
  EXPECT_EQ(m[0].host, 1u);
  EXPECT_EQ(m[0].disk, 1u);
  EXPECT_EQ(m[1].gpu, 0u);
  EXPECT_EQ(m[1].host, 1u);
  EXPECT_EQ(m[2].disk, 2u);
  EXPECT_EQ(m[2].host, 0u);
  EXPECT_EQ(m[3].gpu, 1u);
  EXPECT_EQ(m[3].total(), 1u);
}

// Through the policy, B = 16. Worker 0 holds blocks 1-4 on host, worker 1
// block 1 on GPU. Request 0 (72 tokens: 4 complete blocks and a partial
// one) costs 4.5 - 3 + 4 = 5.5 on worker 0 and 4.5 - 1 + 4 = 7.5 on
// worker 1: worker 0, which is charged 72 - 0.75 x 4 x 16 = 24 prefill
// tokens and 4 active blocks (not the partial fifth). Request 1 (96 tokens,
// blocks 1-4 and two new) costs (24 + 96) / 16 - 3 + 4 + 2 = 10.5 on worker
// 0 and 6 - 1 + 6 = 11 on worker 1: worker 0. Charging 72 - 0 device
// tokens (13.5) or 5 active blocks (11.5) would send it to worker 1.
TEST(policy, dynamo_charges_credited_prefill_and_complete_blocks) {
  policy_config cfg;
  cfg.workers = 2;
  cfg.block_tokens = 16;
  auto p = make_policy(policy_kind::dynamo, cfg);
  ASSERT_TRUE(p);
  block_index kv;
  for (uint64_t h = 1; h <= 4; ++h)
    store(kv, 0, h, tier::host);
  store(kv, 1, 1, tier::gpu);
  fleet_view v;
  v.kv = &kv;
  const std::vector<uint64_t> c0{1, 2, 3, 4, 5};
  const std::vector<uint64_t> c1{1, 2, 3, 4, 50, 51};
  route_request r;
  r.id = 0;
  r.blocks = c0.data();
  r.n = 5;
  r.input_tokens = 72;
  EXPECT_EQ((*p)->route(r, v), 0u);
  r.id = 1;
  r.blocks = c1.data();
  r.n = 6;
  r.input_tokens = 96;
  EXPECT_EQ((*p)->route(r, v), 0u);
}

}  // namespace
}  // namespace kvmesh
