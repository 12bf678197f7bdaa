// Tests of core/policy: the factory's names, and the prefill estimate the
// profiled policies share.
#include "core/policy.hpp"

#include <gtest/gtest.h>

#include <string>

#include "core/engine.hpp"

namespace kvmesh {
namespace {

TEST(policy, names_round_trip) {
  for (policy_kind k : all_policies()) {
    auto parsed = parse_policy(to_string(k));
    ASSERT_TRUE(parsed);
    EXPECT_EQ(*parsed, k);
  }
  auto bad = parse_policy("fastest");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().message.find("known: random"), std::string::npos);
  EXPECT_EQ(all_policies().size(), 12u);
  EXPECT_EQ(all_policies()[10], policy_kind::lmetric);
  EXPECT_EQ(all_policies().back(), policy_kind::sglang_events);
}

TEST(policy, estimated_prefill_chunks_like_the_engine) {
  EXPECT_DOUBLE_EQ(estimated_prefill_ms(0, 8192), 0.0);
  EXPECT_DOUBLE_EQ(estimated_prefill_ms(10000, 8192),
                   prefill_ms(8192) + prefill_ms(1808));
}

}  // namespace
}  // namespace kvmesh
