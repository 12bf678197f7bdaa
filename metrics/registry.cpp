// prometheus-cpp's registry behind errors as values (see registry.hpp).
#include "metrics/registry.hpp"

#include <cmath>
#include <exception>
#include <sstream>

#include <prometheus/check_names.h>
#include <prometheus/text_serializer.h>

namespace kvmesh::metrics {

namespace {

status check_labels(const std::string& name,
                    const std::vector<std::string>& labels) {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (!prometheus::CheckLabelName(labels[i]))
      return make_error(ec::invalid_argument,
                        "metric " + name + ": bad label name '" + labels[i] +
                            "'");
    for (size_t j = 0; j < i; ++j)
      if (labels[j] == labels[i])
        return make_error(ec::invalid_argument,
                          "metric " + name + ": label '" + labels[i] +
                              "' twice");
  }
  return ok;
}

// Registers a family of T; prometheus-cpp throws on a bad or repeated name.
template <class T, class Builder>
expected<prometheus::Family<T>*> add(prometheus::Registry& reg,
                                     Builder builder, const std::string& name,
                                     const std::string& help,
                                     const std::vector<std::string>& labels) {
  if (!prometheus::CheckMetricName(name))
    return make_error(ec::invalid_argument, "bad metric name '" + name + "'");
  if (auto s = check_labels(name, labels); !s) return s.err();
  try {
    return &builder.Name(name).Help(help).Register(reg);
  } catch (const std::exception& e) {
    return make_error(ec::invalid_argument,
                      "metric " + name + ": " + std::string(e.what()));
  }
}

}  // namespace

void observe(histogram& h, double v) {
  if (!std::isnan(v)) h.Observe(v);
}

template <class T>
expected<T*> family<T>::with(const std::vector<std::string>& values) {
  if (values.size() != labels_.size())
    return make_error(ec::invalid_argument,
                      "a metric has " + std::to_string(labels_.size()) +
                          " labels, given " + std::to_string(values.size()) +
                          " values");
  prometheus::Labels l;
  for (size_t i = 0; i < values.size(); ++i)
    l.emplace(labels_[i], values[i]);
  try {
    // Add returns the series already there for the same labels.
    if constexpr (std::is_same_v<T, histogram>)
      return &f_.Add(l, bounds_);
    else
      return &f_.Add(l);
  } catch (const std::exception& e) {
    return make_error(ec::invalid_argument, e.what());
  }
}

template class family<counter>;
template class family<gauge>;
template class family<histogram>;

// Throw: a name registered twice is a mistake here, not a merge.
registry::registry()
    : reg_(std::make_shared<prometheus::Registry>(
          prometheus::Registry::InsertBehavior::Throw)) {}

expected<family<counter>*> registry::add_counter(
    const std::string& name, const std::string& help,
    std::vector<std::string> labels) {
  auto f = add<counter>(*reg_, prometheus::BuildCounter(), name, help, labels);
  if (!f) return f.err();
  return &counters_.emplace_back(**f, std::move(labels));
}

expected<family<gauge>*> registry::add_gauge(const std::string& name,
                                             const std::string& help,
                                             std::vector<std::string> labels) {
  auto f = add<gauge>(*reg_, prometheus::BuildGauge(), name, help, labels);
  if (!f) return f.err();
  return &gauges_.emplace_back(**f, std::move(labels));
}

expected<family<histogram>*> registry::add_histogram(
    const std::string& name, const std::string& help,
    std::vector<double> bounds, std::vector<std::string> labels) {
  for (size_t i = 0; i < bounds.size(); ++i)
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
      return make_error(ec::invalid_argument,
                        "metric " + name +
                            ": bucket bounds must be finite and strictly "
                            "increasing");
  auto f =
      add<histogram>(*reg_, prometheus::BuildHistogram(), name, help, labels);
  if (!f) return f.err();
  return &histograms_.emplace_back(**f, std::move(labels), std::move(bounds));
}

std::string registry::render() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, reg_->Collect());
  return out.str();
}

}  // namespace kvmesh::metrics
