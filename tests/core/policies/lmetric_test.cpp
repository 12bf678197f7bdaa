// Tests of core/policies/lmetric: Dynamo's LMetric selection, where it
// parts from Dynamo's linear cost.
#include "core/policy.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "core/block_index.hpp"

namespace kvmesh {
namespace {

void store(block_index& kv, uint32_t w, uint64_t h) {
  cache_event e;
  e.hash = h;
  e.root = h;
  kv.apply(w, e);
}

// B = 16, 2 workers. Worker 0 holds on GPU blocks 100-119 and 1-6. Request
// 0 (320 tokens, blocks 100-119) is all cached there: prefill 0, worker 0.
// Its first token clears the prefill; worker 0 keeps 20 active blocks.
// Request 1 (128 tokens, blocks 1-8): worker 0 has prefill 8 - 6 = 2 and
// decode 20 + 8 = 28, worker 1 prefill 8 and decode 8. LMetric: 2 x 29 =
// 58 < 8 x 9 = 72, worker 0; Dynamo's linear cost: 2 + 28 = 30 > 16,
// worker 1.
TEST(policy, lmetric_multiplies_prefill_by_decode_load) {
  dynamo_inputs a;
  a.request_tokens = 128;
  a.block_tokens = 16;
  a.device_blocks = 6;
  a.active_blocks = 20;
  a.new_blocks = 8;
  dynamo_inputs b = a;
  b.device_blocks = 0;
  b.active_blocks = 0;
  EXPECT_DOUBLE_EQ(dynamo_lmetric_cost(a), 58.0);
  EXPECT_DOUBLE_EQ(dynamo_lmetric_cost(b), 72.0);
  EXPECT_DOUBLE_EQ(dynamo_cost(a), 30.0);
  EXPECT_DOUBLE_EQ(dynamo_cost(b), 16.0);

  block_index kv;
  for (uint64_t h = 100; h < 120; ++h)
    store(kv, 0, h);
  for (uint64_t h = 1; h <= 6; ++h)
    store(kv, 0, h);
  std::vector<uint64_t> c0, c1;
  for (uint64_t h = 100; h < 120; ++h)
    c0.push_back(h);
  for (uint64_t h = 1; h <= 8; ++h)
    c1.push_back(h);
  for (policy_kind k : {policy_kind::lmetric, policy_kind::dynamo}) {
    policy_config cfg;
    cfg.workers = 2;
    cfg.block_tokens = 16;
    auto p = make_policy(k, cfg);
    ASSERT_TRUE(p);
    fleet_view v;
    v.kv = &kv;
    route_request r;
    r.id = 0;
    r.blocks = c0.data();
    r.n = 20;
    r.input_tokens = 320;
    ASSERT_EQ((*p)->route(r, v), 0u) << to_string(k);
    (*p)->first_token(0, 0);
    r.id = 1;
    r.blocks = c1.data();
    r.n = 8;
    r.input_tokens = 128;
    EXPECT_EQ((*p)->route(r, v), k == policy_kind::lmetric ? 0u : 1u)
        << to_string(k);
  }
}

}  // namespace
}  // namespace kvmesh
