// The registry of a process's metrics and their text exposition.
#include "metrics/registry.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvmesh::metrics {

histogram::histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i)
    counts_[i].store(0, std::memory_order_relaxed);
}

void histogram::observe(double v) {
  if (std::isnan(v)) return;
  // le: the first bound at or above v.
  const size_t i = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.add(v);
}

histogram::snapshot histogram::read() const {
  snapshot s;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t total = 0;
  // Cumulated from one reading per bucket, so +Inf is the count even while
  // other threads observe.
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  s.sum = sum_.get();
  return s;
}

namespace {

bool valid_name(const std::string& s, bool colon) {
  if (s.empty()) return false;
  auto first = [&](char c) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' ||
           (colon && c == ':');
  };
  if (!first(s[0])) return false;
  for (char c : s)
    if (!(first(c) || std::isdigit(static_cast<unsigned char>(c))))
      return false;
  return true;
}

}  // namespace

status registry::check(const std::string& name,
                       const std::vector<std::string>& labels, kind k) const {
  if (!valid_name(name, true))
    return make_error(
        ec::invalid_argument,
        "metric name '" + name + "' is not [a-zA-Z_:][a-zA-Z0-9_:]*");
  for (size_t i = 0; i < labels.size(); ++i) {
    const auto& l = labels[i];
    if (!valid_name(l, false) || l.rfind("__", 0) == 0)
      return make_error(ec::invalid_argument,
                        "metric " + name + ": label name '" + l +
                            "' is not [a-zA-Z_][a-zA-Z0-9_]* or starts with "
                            "__ (reserved)");
    if (k == kind::histogram && l == "le")
      return make_error(ec::invalid_argument,
                        "histogram " + name + ": the label le is its buckets'");
    if (std::find(labels.begin(), labels.begin() + i, l) != labels.begin() + i)
      return make_error(ec::invalid_argument,
                        "metric " + name + ": label " + l + " given twice");
  }
  for (const auto& f : families_)
    if (f->name() == name)
      return make_error(ec::invalid_argument,
                        "metric " + name + " is registered twice");
  return ok;
}

expected<family<counter>*> registry::add_counter(
    std::string name, std::string help, std::vector<std::string> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto st = check(name, labels, kind::counter); !st) return st.err();
  auto f = std::make_unique<family<counter>>(std::move(name), std::move(help),
                                             kind::counter, std::move(labels));
  auto* p = f.get();
  families_.push_back(std::move(f));
  return p;
}

expected<family<gauge>*> registry::add_gauge(std::string name, std::string help,
                                             std::vector<std::string> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto st = check(name, labels, kind::gauge); !st) return st.err();
  auto f = std::make_unique<family<gauge>>(std::move(name), std::move(help),
                                           kind::gauge, std::move(labels));
  auto* p = f.get();
  families_.push_back(std::move(f));
  return p;
}

expected<family<histogram>*> registry::add_histogram(
    std::string name, std::string help, std::vector<double> bounds,
    std::vector<std::string> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto st = check(name, labels, kind::histogram); !st) return st.err();
  if (bounds.empty())
    return make_error(ec::invalid_argument,
                      "histogram " + name + " has no bucket bounds");
  for (size_t i = 0; i < bounds.size(); ++i)
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
      return make_error(ec::invalid_argument,
                        "histogram " + name +
                            ": bucket bounds must be finite and strictly "
                            "increasing");
  auto f = std::make_unique<family<histogram>>(
      std::move(name), std::move(help), kind::histogram, std::move(labels),
      std::move(bounds));
  auto* p = f.get();
  families_.push_back(std::move(f));
  return p;
}

std::string registry::render() const {
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& f : families_)
    f->render(out);
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  // Whole numbers in full (20, not 2e+01), as long as a double holds them
  // exactly.
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return std::strcmp(buf, "-0") == 0 ? "0" : buf;
  }
  // Else the shortest form that reads back as v: 0.1, not
  // 0.10000000000000001.
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string escape_label(const std::string& v) {
  std::string out;
  out.reserve(v.size() + 2);
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string escape_help(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void append_labels(std::string& out, const std::vector<std::string>& names,
                   const std::vector<std::string>& values,
                   const std::string& le) {
  if (names.empty() && le.empty()) return;
  out += '{';
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
    out += "=\"";
    out += escape_label(values[i]);
    out += '"';
  }
  if (!le.empty()) {
    if (!names.empty()) out += ',';
    out += "le=\"" + le + '"';
  }
  out += '}';
}

void append_header(std::string& out, const std::string& name,
                   const std::string& help, kind k) {
  out += "# HELP " + name + ' ' + escape_help(help) + '\n';
  out += "# TYPE " + name + ' ';
  out += k == kind::counter ? "counter"
         : k == kind::gauge ? "gauge"
                            : "histogram";
  out += '\n';
}

}  // namespace kvmesh::metrics
