// Mean, nearest-rank percentiles and quantiles.
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

std::vector<double> quantiles(const std::vector<double>& sorted,
                              size_t points) {
  std::vector<double> out;
  if (sorted.empty() || points < 2) return out;
  out.reserve(points);
  const double n = static_cast<double>(sorted.size());
  for (size_t i = 0; i < points; ++i) {
    const double q = static_cast<double>(i) / static_cast<double>(points - 1);
    const size_t r = static_cast<size_t>(std::ceil(q * n));
    out.push_back(sorted[r == 0 ? 0 : std::min(r, sorted.size()) - 1]);
  }
  return out;
}

}  // namespace kvmesh
