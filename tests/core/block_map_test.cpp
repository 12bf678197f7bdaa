// Tests of core/block_map against std::unordered_map under random churn.
#include "core/block_map.hpp"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace kvmesh {
namespace {

TEST(block_map, put_find_erase) {
  block_map m;
  EXPECT_EQ(m.find(7), block_map::npos);
  m.put(7, 1);
  m.put(0, 2);
  EXPECT_EQ(m.find(7), 1u);
  EXPECT_EQ(m.find(0), 2u);
  m.put(7, 3);
  EXPECT_EQ(m.find(7), 3u);
  EXPECT_EQ(m.size(), 2u);
  EXPECT_TRUE(m.erase(7));
  EXPECT_FALSE(m.erase(7));
  EXPECT_EQ(m.find(7), block_map::npos);
  EXPECT_EQ(m.size(), 1u);
}

// Backward-shift deletion must keep every other key reachable; compare with
// a reference map over many random operations on a small key space (long
// probe runs, wrap-around at the table's end).
TEST(block_map, agrees_with_reference_under_churn) {
  std::mt19937_64 rng(42);
  block_map m;
  std::unordered_map<uint64_t, uint32_t> ref;
  for (int i = 0; i < 200000; ++i) {
    const uint64_t key = rng() % 3000;
    const int op = static_cast<int>(rng() % 3);
    if (op == 0) {
      const uint32_t v = static_cast<uint32_t>(rng() % 1000);
      m.put(key, v);
      ref[key] = v;
    } else if (op == 1) {
      EXPECT_EQ(m.erase(key), ref.erase(key) == 1);
    } else {
      auto it = ref.find(key);
      EXPECT_EQ(m.find(key), it == ref.end() ? block_map::npos : it->second);
    }
  }
  EXPECT_EQ(m.size(), ref.size());
  for (const auto& [k, v] : ref)
    EXPECT_EQ(m.find(k), v);
}

}  // namespace
}  // namespace kvmesh
