// Mean and nearest-rank percentiles.
#include "core/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvmesh {

summary summarize(std::vector<double>& samples) {
  summary s;
  s.count = samples.size();
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) /
           static_cast<double>(samples.size());
  auto rank = [&](double q) {
    size_t r = static_cast<size_t>(std::ceil(q * samples.size()));
    return samples[r == 0 ? 0 : r - 1];
  };
  s.p50 = rank(0.50);
  s.p90 = rank(0.90);
  s.p99 = rank(0.99);
  return s;
}

}  // namespace kvmesh
