// Summaries of latency samples: mean, percentiles and a bounded
// distribution.
#pragma once

#include <cstddef>
#include <vector>

namespace kvmesh {

struct summary {
  double mean = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  size_t count = 0;
};

// Nearest-rank percentiles; all zero for no samples. Sorts `samples`.
summary summarize(std::vector<double>& samples);

// The distribution of sorted `samples` in `points` values: the nearest-rank
// quantile at q = i / (points - 1) for i = 0 .. points - 1, so the first is
// the minimum and the last the maximum. A report draws it as a CDF without
// keeping every sample. Empty for no samples or fewer than 2 points.
std::vector<double> quantiles(const std::vector<double>& sorted, size_t points);

}  // namespace kvmesh
