// Tests of core/policies/sglang: the balance rule at its thresholds, alone
// and through the policy.
#include "core/policy.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace kvmesh {
namespace {

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

}  // namespace
}  // namespace kvmesh
