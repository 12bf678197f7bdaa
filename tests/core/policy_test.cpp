// Tests of core/policy: the peers' rules on worked examples and at their
// thresholds.
#include "core/policy.hpp"

#include <gtest/gtest.h>

#include "core/engine.hpp"

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

// A worked example with the shipped weights and every tier: raw prefill
// (128 + 512) / 64 = 10 blocks; credit 1.0 * 4 + 0.75 * 2 + 0.25 * 4 = 6.5;
// prefill 3.5; decode 20 active + 6 new = 26; cost 29.5.
TEST(policy, dynamo_cost_with_tiers) {
  dynamo_inputs in;
  in.active_prefill_tokens = 128;
  in.request_tokens = 512;
  in.block_tokens = 64;
  in.device_blocks = 4;
  in.host_blocks = 2;
  in.disk_blocks = 4;
  in.active_blocks = 20;
  in.new_blocks = 6;
  EXPECT_DOUBLE_EQ(dynamo_cost(in), 29.5);
  in.device_blocks = 12;  // credit past the raw prefill is capped at zero
  EXPECT_DOUBLE_EQ(dynamo_cost(in), 26.0);
}

TEST(policy, sglang_thresholds_are_strict) {
  EXPECT_FALSE(sglang_imbalanced(100, 36));   // difference 64: not past it
  EXPECT_TRUE(sglang_imbalanced(101, 36));    // 65 and 101 > 54
  EXPECT_FALSE(sglang_imbalanced(201, 134));  // 67, but 201 = 1.5 * 134
  EXPECT_TRUE(sglang_imbalanced(202, 134));
  EXPECT_FALSE(sglang_imbalanced(0, 0));
}

// Through the policy: requests sharing a prefix stay with the worker that
// has it until its in-flight count exceeds the other's by more than 64;
// the next request goes to the least loaded.
TEST(policy, sglang_turns_to_least_loaded_past_its_threshold) {
  policy_config cfg;
  cfg.workers = 2;
  cfg.block_tokens = 512;
  auto p = make_policy(policy_kind::sglang, cfg);
  ASSERT_TRUE(p);
  fleet_view v;
  // Request i: a shared 4-block prefix and a block of its own.
  std::vector<uint64_t> chain{1, 2, 3, 4, 0};
  auto route = [&](uint64_t id) {
    chain[4] = 100 + id;
    route_request r;
    r.id = id;
    r.blocks = chain.data();
    r.n = 5;
    r.input_tokens = 2560;
    return (*p)->route(r, v);
  };
  const uint32_t home = route(0);
  for (uint64_t id = 1; id <= 64; ++id)
    ASSERT_EQ(route(id), home) << "request " << id;
  // 65 in flight on home, 0 on the other: 65 > 64 and 65 > 1.5 * 0.
  EXPECT_NE(route(65), home);
  // Two requests end on home: 63 vs 1 is under the threshold again, and
  // request 2's prompt (4/5 cached on the other worker, 5/5 on home)
  // goes home.
  (*p)->finished(3, home, 1);
  (*p)->finished(4, home, 1);
  EXPECT_EQ(route(2), home);
}

TEST(policy, names_round_trip) {
  for (policy_kind k : all_policies()) {
    auto parsed = parse_policy(to_string(k));
    ASSERT_TRUE(parsed);
    EXPECT_EQ(*parsed, k);
  }
  auto bad = parse_policy("fastest");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().message.find("known: random"), std::string::npos);
  EXPECT_EQ(all_policies().size(), 10u);
}

TEST(policy, estimated_prefill_chunks_like_the_engine) {
  EXPECT_DOUBLE_EQ(estimated_prefill_ms(0, 8192), 0.0);
  EXPECT_DOUBLE_EQ(estimated_prefill_ms(10000, 8192),
                   prefill_ms(8192) + prefill_ms(1808));
}

}  // namespace
}  // namespace kvmesh
