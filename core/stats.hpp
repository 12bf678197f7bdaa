// Summaries of latency samples: mean and percentiles.
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

}  // namespace kvmesh
