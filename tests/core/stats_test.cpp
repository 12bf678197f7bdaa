// Tests of core/stats: nearest-rank percentiles.
#include "core/stats.hpp"

#include <gtest/gtest.h>

namespace kvmesh {
namespace {

TEST(stats, nearest_rank_percentiles) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i)
    v.push_back(i);
  summary s = summarize(v);
  EXPECT_EQ(s.count, 100u);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_DOUBLE_EQ(s.p50, 50);
  EXPECT_DOUBLE_EQ(s.p90, 90);
  EXPECT_DOUBLE_EQ(s.p99, 99);
}

TEST(stats, empty_and_single) {
  std::vector<double> none;
  EXPECT_EQ(summarize(none).count, 0u);
  std::vector<double> one{7};
  summary s = summarize(one);
  EXPECT_DOUBLE_EQ(s.p50, 7);
  EXPECT_DOUBLE_EQ(s.p99, 7);
}

}  // namespace
}  // namespace kvmesh
