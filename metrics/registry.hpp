// A process's Prometheus series, kept by prometheus-cpp (Debian's
// prometheus-cpp-dev): families registered by name, series by label values.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "core/error.hpp"

// What this adds to prometheus-cpp: errors as values where it throws (a
// bad or repeated name, label values that do not fit), label values given
// in the order of the family's label names, a counter that mirrors a count
// kept elsewhere, and NaN kept out of a histogram's sum.
namespace kvmesh::metrics {

using counter = prometheus::Counter;
using gauge = prometheus::Gauge;
using histogram = prometheus::Histogram;

// Raises `c` to `v`, a count another part of the process keeps (a router's
// decisions); a lower `v` leaves it, for a counter only goes up.
inline void mirror(counter& c, double v) {
  const double now = c.Value();
  if (v > now) c.Increment(v - now);
}

// A NaN is dropped: it would make the sum NaN for the process's life.
void observe(histogram& h, double v);

// One metric name, its label names and, for a histogram, its buckets.
template <class T>
class family {
 public:
  family(prometheus::Family<T>& f, std::vector<std::string> labels,
         std::vector<double> bounds = {})
      : f_(f), labels_(std::move(labels)), bounds_(std::move(bounds)) {}

  // The series of these label values, one per label name and in their
  // order; created on first use. It lives as long as the registry.
  expected<T*> with(const std::vector<std::string>& values);

 private:
  prometheus::Family<T>& f_;
  std::vector<std::string> labels_;
  std::vector<double> bounds_;  // histograms only
};

// Every family of a process. Names follow Prometheus' rules; a bad or
// repeated name is an invalid_argument error.
class registry {
 public:
  registry();

  expected<family<counter>*> add_counter(const std::string& name,
                                         const std::string& help,
                                         std::vector<std::string> labels = {});
  expected<family<gauge>*> add_gauge(const std::string& name,
                                     const std::string& help,
                                     std::vector<std::string> labels = {});
  // `bounds`: the buckets' upper bounds, finite and strictly increasing
  // (+Inf is implied).
  expected<family<histogram>*> add_histogram(
      const std::string& name, const std::string& help,
      std::vector<double> bounds, std::vector<std::string> labels = {});

  // What a scrape serves, for the exposer.
  std::shared_ptr<prometheus::Registry> shared() const { return reg_; }
  // The text format 0.0.4 (prometheus-cpp's TextSerializer).
  std::string render() const;

 private:
  std::shared_ptr<prometheus::Registry> reg_;
  // Stable addresses: callers keep pointers to families.
  std::deque<family<counter>> counters_;
  std::deque<family<gauge>> gauges_;
  std::deque<family<histogram>> histograms_;
};

}  // namespace kvmesh::metrics
