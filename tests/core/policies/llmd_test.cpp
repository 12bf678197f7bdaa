// Tests of core/policies/llmd: llm-d-router v0.10.0's prefix producer
// geometry and its default scorer weights on a worked example.
#include "core/policy.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace kvmesh {
namespace {

// Block size: the engine's, at least 64 tokens; 131072 tokens matched; the
// LRU holds the engine's block count, else 31250 entries.
TEST(policy, llmd_geometry_follows_the_release) {
  const llmd_geometry vllm = llmd_geometry_for(16, 0);
  EXPECT_EQ(vllm.block_tokens, 64u);
  EXPECT_EQ(vllm.group, 4u);
  EXPECT_EQ(vllm.max_blocks, 2048u);
  EXPECT_EQ(vllm.lru_entries, 31250u);
  const llmd_geometry big = llmd_geometry_for(512, 1024);
  EXPECT_EQ(big.block_tokens, 512u);
  EXPECT_EQ(big.group, 1u);
  EXPECT_EQ(big.max_blocks, 256u);
  EXPECT_EQ(big.lru_entries, 1024u);
}

// A 1000-token prompt in 64-token blocks is 16 hashes. A holds 12, C 4, B
// none; waiting queues 4, 0, 2; KV usage 0.8, 0.2, 0.5. A = 3 x 0.75 + 2 x
// 0 + 2 x 0.2 = 2.65, B = 0 + 2 + 1.6 = 3.6, C = 0.75 + 1 + 1 = 2.75: B.
// With A's queue empty too: A = 2.25 + 2 + 0.4 = 4.65.
TEST(policy, llmd_score_on_a_worked_example) {
  llmd_inputs a{12, 16, 4, 0, 4, 0.8};
  llmd_inputs b{0, 16, 0, 0, 4, 0.2};
  llmd_inputs c{4, 16, 2, 0, 4, 0.5};
  EXPECT_DOUBLE_EQ(llmd_score(a), 2.65);
  EXPECT_DOUBLE_EQ(llmd_score(b), 3.6);
  EXPECT_DOUBLE_EQ(llmd_score(c), 2.75);
  a = {12, 16, 0, 0, 2, 0.8};  // queues 0, 0, 2
  EXPECT_DOUBLE_EQ(llmd_score(a), 4.65);
}

// Through the policy with a 16-token engine block: llm-d's 64-token chunk
// is 4 kvmesh blocks. A prompt that shares the first chunk of an earlier
// one goes to its server; one that shares only 3 of its 4 blocks does not
// match, and the loaded server loses.
TEST(policy, llmd_matches_whole_chunks) {
  policy_config cfg;
  cfg.workers = 3;
  cfg.block_tokens = 16;
  auto p = make_policy(policy_kind::llmd, cfg);
  ASSERT_TRUE(p);
  std::vector<load_report> loads(3);
  fleet_view v;
  v.loads = loads.data();
  auto route = [&](uint64_t id, const std::vector<uint64_t>& chain) {
    route_request r;
    r.id = id;
    r.blocks = chain.data();
    r.n = static_cast<uint32_t>(chain.size());
    r.input_tokens = r.n * 16;
    return (*p)->route(r, v);
  };
  const uint32_t x = route(0, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(route(1, {1, 2, 3, 4, 20, 21, 22, 23}), x);  // 1 of 2 chunks
  // x's queue is the longest: queue score 0 there, 1 elsewhere. A full
  // match (3) beats the queue (2); a one-chunk match (1.5) does not.
  loads[x].waiting = 1;
  EXPECT_EQ(route(2, {1, 2, 3, 4, 5, 6, 7, 8}), x);
  EXPECT_NE(route(4, {1, 2, 3, 4, 50, 51, 52, 53}), x);
  EXPECT_NE(route(3, {1, 2, 3, 40, 41, 42, 43, 44}), x);
}

}  // namespace
}  // namespace kvmesh
