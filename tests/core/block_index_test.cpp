// Tests of core/block_index: holders by tier from KV events, prefix matches.
#include "core/block_index.hpp"

#include <gtest/gtest.h>

namespace kvmesh {
namespace {

cache_event stored(uint64_t h, tier t) {
  return cache_event{cache_event::stored, t, h};
}
cache_event removed(uint64_t h, tier t) {
  return cache_event{cache_event::removed, t, h};
}

TEST(block_index, follows_stores_moves_and_removals) {
  block_index idx;
  idx.apply(0, stored(1, tier::gpu));
  idx.apply(1, stored(1, tier::host));
  ASSERT_NE(idx.holders(1), nullptr);
  EXPECT_EQ(idx.holders(1)->size(), 2u);
  // Worker 0 offloads block 1: removed from GPU, stored in host.
  idx.apply(0, removed(1, tier::gpu));
  idx.apply(0, stored(1, tier::host));
  for (const auto& h : *idx.holders(1))
    EXPECT_EQ(h.where, tier::host);
  // A removal naming the wrong tier is stale and ignored.
  idx.apply(1, removed(1, tier::gpu));
  EXPECT_EQ(idx.holders(1)->size(), 2u);
  idx.apply(0, removed(1, tier::host));
  idx.apply(1, removed(1, tier::host));
  EXPECT_EQ(idx.holders(1), nullptr);
  EXPECT_EQ(idx.blocks(), 0u);
}

TEST(block_index, match_per_worker_stops_at_each_workers_gap) {
  block_index idx;
  // Worker 0: 10 11 12 (GPU, host, disk); worker 1: 10 only; worker 2: 11
  // 12 but not 10, so nothing.
  idx.apply(0, stored(10, tier::gpu));
  idx.apply(0, stored(11, tier::host));
  idx.apply(0, stored(12, tier::disk));
  idx.apply(1, stored(10, tier::gpu));
  idx.apply(1, stored(12, tier::gpu));
  idx.apply(2, stored(11, tier::gpu));
  idx.apply(2, stored(12, tier::gpu));
  std::vector<uint64_t> chain{10, 11, 12, 13};
  tier_match m[3];
  idx.match(chain.data(), chain.size(), 3, m);
  EXPECT_EQ(m[0].gpu, 1u);
  EXPECT_EQ(m[0].host, 1u);
  EXPECT_EQ(m[0].disk, 1u);
  EXPECT_EQ(m[1].total(), 1u);  // 12 lies past its gap at 11
  EXPECT_EQ(m[2].total(), 0u);
}

TEST(block_index, drop_worker_forgets_its_blocks) {
  block_index idx;
  idx.apply(0, stored(1, tier::gpu));
  idx.apply(0, stored(2, tier::gpu));
  idx.apply(1, stored(2, tier::gpu));
  idx.drop_worker(0);
  EXPECT_EQ(idx.holders(1), nullptr);
  ASSERT_NE(idx.holders(2), nullptr);
  EXPECT_EQ(idx.holders(2)->front().worker, 1u);
  EXPECT_EQ(idx.blocks(), 1u);
  // Freed slots are reused.
  idx.apply(3, stored(7, tier::gpu));
  EXPECT_EQ(idx.blocks(), 2u);
}

}  // namespace
}  // namespace kvmesh
