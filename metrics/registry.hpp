// Prometheus metrics of one process: counters, gauges and histograms with
// labels, rendered in the text exposition format 0.0.4.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"

// prometheus-cpp is not packaged in Debian 12; this is the part of it
// kvmesh needs. Values are atomics so that actors update them on their own
// threads while the HTTP server's thread renders: no lock on the way of a
// request, a lock only where series are created and rendered.
namespace kvmesh::metrics {

// A double that several threads add to (C++17 has no atomic<double>
// fetch_add).
class atomic_double {
 public:
  void add(double v) {
    double cur = v_.load(std::memory_order_relaxed);
    while (!v_.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed))
      ;
  }
  void set(double v) { v_.store(v, std::memory_order_relaxed); }
  double get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

// Goes only up. set() mirrors a count another part of the process keeps
// (a router's decisions): the caller makes sure it never decreases.
class counter {
 public:
  void inc(double v = 1) { v_.add(v); }
  void set(double v) { v_.set(v); }
  double value() const { return v_.get(); }

 private:
  atomic_double v_;
};

class gauge {
 public:
  void set(double v) { v_.set(v); }
  void add(double v) { v_.add(v); }
  double value() const { return v_.get(); }

 private:
  atomic_double v_;
};

// Observations counted in buckets of upper bounds (le) plus +Inf, with
// their sum.
class histogram {
 public:
  explicit histogram(std::vector<double> bounds);
  // A NaN is dropped: it would make the sum NaN for the process's life.
  void observe(double v);

  struct snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf (= count)
    double sum = 0;
  };
  snapshot read() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds + 1 (+Inf)
  atomic_double sum_;
};

enum class kind { counter, gauge, histogram };

// One metric name: its help, its label names and a series per label
// values.
class family_base {
 public:
  family_base(std::string name, std::string help, kind k,
              std::vector<std::string> labels)
      : name_(std::move(name)),
        help_(std::move(help)),
        kind_(k),
        labels_(std::move(labels)) {}
  virtual ~family_base() = default;
  const std::string& name() const { return name_; }
  kind type() const { return kind_; }
  const std::vector<std::string>& label_names() const { return labels_; }
  // Appends HELP, TYPE and every series.
  virtual void render(std::string& out) const = 0;

 protected:
  std::string name_;
  std::string help_;
  kind kind_;
  std::vector<std::string> labels_;
};

template <class T>
class family final : public family_base {
 public:
  family(std::string name, std::string help, kind k,
         std::vector<std::string> labels, std::vector<double> bounds = {})
      : family_base(std::move(name), std::move(help), k, std::move(labels)),
        bounds_(std::move(bounds)) {}

  // The series of these label values, one per label name and in their
  // order; created on first use. It lives as long as the registry.
  expected<T*> with(const std::vector<std::string>& values);
  void render(std::string& out) const override;

 private:
  std::vector<double> bounds_;  // histograms only
  mutable std::mutex mu_;       // guards series_, not the values
  std::map<std::vector<std::string>, std::unique_ptr<T>> series_;
};

// Every family of a process. Names follow Prometheus' rules
// ([a-zA-Z_:][a-zA-Z0-9_:]*, labels [a-zA-Z_][a-zA-Z0-9_]* and not
// starting with "__"); a bad or repeated name is an invalid_argument error.
class registry {
 public:
  expected<family<counter>*> add_counter(std::string name, std::string help,
                                         std::vector<std::string> labels = {});
  expected<family<gauge>*> add_gauge(std::string name, std::string help,
                                     std::vector<std::string> labels = {});
  // `bounds`: the buckets' upper bounds, finite and strictly increasing
  // (+Inf is implied).
  expected<family<histogram>*> add_histogram(
      std::string name, std::string help, std::vector<double> bounds,
      std::vector<std::string> labels = {});

  // The text format 0.0.4, families in the order they were added, series
  // by label values.
  std::string render() const;

 private:
  status check(const std::string& name, const std::vector<std::string>& labels,
               kind k) const;

  mutable std::mutex mu_;  // guards families_
  std::vector<std::unique_ptr<family_base>> families_;
};

// -- the text format's pieces (exposed for tests) ----------------------------

// A sample value: shortest decimal that reads back the same, +Inf, -Inf,
// NaN.
std::string format_value(double v);
// A label value between quotes: \ " and newline escaped.
std::string escape_label(const std::string& v);
// A HELP text: \ and newline escaped.
std::string escape_help(const std::string& v);

// -- template definitions -----------------------------------------------------

template <class T>
expected<T*> family<T>::with(const std::vector<std::string>& values) {
  if (values.size() != labels_.size())
    return make_error(ec::invalid_argument,
                      "metric " + name_ + " has " +
                          std::to_string(labels_.size()) + " labels, given " +
                          std::to_string(values.size()) + " values");
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = series_[values];
  if (!slot) {
    if constexpr (std::is_same_v<T, histogram>)
      slot = std::make_unique<T>(bounds_);
    else
      slot = std::make_unique<T>();
  }
  return slot.get();
}

// Appends `{a="x",b="y"` (open: a histogram's le follows) for names and
// values; nothing when there are no labels and no extra.
void append_labels(std::string& out, const std::vector<std::string>& names,
                   const std::vector<std::string>& values,
                   const std::string& le = {});

void append_header(std::string& out, const std::string& name,
                   const std::string& help, kind k);

template <class T>
void family<T>::render(std::string& out) const {
  append_header(out, name_, help_, kind_);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, m] : series_) {
    if constexpr (std::is_same_v<T, histogram>) {
      const auto snap = m->read();
      for (size_t i = 0; i <= bounds_.size(); ++i) {
        out += name_;
        out += "_bucket";
        append_labels(out, labels_, values,
                      i < bounds_.size() ? format_value(bounds_[i]) : "+Inf");
        out += ' ';
        out += std::to_string(snap.cumulative[i]);
        out += '\n';
      }
      out += name_ + "_sum";
      append_labels(out, labels_, values);
      out += ' ' + format_value(snap.sum) + '\n';
      out += name_ + "_count";
      append_labels(out, labels_, values);
      out += ' ' + std::to_string(snap.cumulative.back()) + '\n';
    } else {
      out += name_;
      append_labels(out, labels_, values);
      out += ' ' + format_value(m->value()) + '\n';
    }
  }
}

}  // namespace kvmesh::metrics
