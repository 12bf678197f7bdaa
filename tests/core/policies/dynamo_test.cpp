// Tests of core/policies/dynamo: Dynamo's cost on its own worked example
// and on one with every tier.
#include "core/policy.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kvmesh
