// Tests of core/routed_index: per-worker prefix sets with LRU eviction.
#include "core/routed_index.hpp"

#include <gtest/gtest.h>

namespace kvmesh {
namespace {

TEST(routed_index, matches_what_was_routed_per_worker) {
  auto idx = routed_index::make(2, 100);
  ASSERT_TRUE(idx);
  std::vector<uint64_t> a{1, 2, 3};
  idx->insert(0, a.data(), a.size());
  std::vector<uint64_t> b{1, 2, 9};
  EXPECT_EQ(idx->match(0, b.data(), b.size()), 2u);
  EXPECT_EQ(idx->match(1, b.data(), b.size()), 0u);
  EXPECT_EQ(idx->size(0), 3u);
}

TEST(routed_index, eviction_trims_leaves_before_prefixes) {
  auto idx = routed_index::make(1, 4);
  ASSERT_TRUE(idx);
  std::vector<uint64_t> a{1, 2, 3};
  std::vector<uint64_t> b{1, 5, 6};
  idx->insert(0, a.data(), a.size());
  idx->insert(0, b.data(), b.size());  // 5 blocks into 4: evicts a's leaf
  EXPECT_EQ(idx->size(0), 4u);
  EXPECT_EQ(idx->match(0, a.data(), a.size()), 2u);
  EXPECT_EQ(idx->match(0, b.data(), b.size()), 3u);
}

TEST(routed_index, needs_workers_and_capacity) {
  EXPECT_FALSE(routed_index::make(0, 10));
  EXPECT_FALSE(routed_index::make(2, 0));
}

}  // namespace
}  // namespace kvmesh
