// Tests of core/stats: nearest-rank percentiles.
#include "core/stats.hpp"

#include <gtest/gtest.h>

#include <algorithm>

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

TEST(stats, quantiles_span_minimum_to_maximum) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i)
    v.push_back(i);
  const auto q = quantiles(v, 11);
  ASSERT_EQ(q.size(), 11u);
  EXPECT_DOUBLE_EQ(q.front(), 1);
  EXPECT_DOUBLE_EQ(q[5], 50);  // the median, as summarize's p50
  EXPECT_DOUBLE_EQ(q[9], 90);
  EXPECT_DOUBLE_EQ(q.back(), 100);
  EXPECT_TRUE(std::is_sorted(q.begin(), q.end()));
  EXPECT_TRUE(quantiles({}, 11).empty());
  EXPECT_TRUE(quantiles(v, 1).empty());
  EXPECT_EQ(quantiles({7}, 3), (std::vector<double>{7, 7, 7}));
}

}  // namespace
}  // namespace kvmesh
