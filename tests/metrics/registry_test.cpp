// Tests of metrics/registry: prometheus-cpp behind errors as values, label
// values in the family's order, mirrored counters and NaN-free histograms.
#include "metrics/registry.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace kvmesh::metrics {
namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(registry, renders_help_type_and_samples) {
  registry r;
  auto c = r.add_counter("kvmesh_x_total", "Things counted.", {"kind"});
  ASSERT_TRUE(c) << c.err().message;
  auto g = r.add_gauge("kvmesh_y", "A level.");
  ASSERT_TRUE(g);
  (*(*c)->with({"b"}))->Increment(2);
  (*(*c)->with({"a"}))->Increment();
  (*(*g)->with({}))->Set(-1.5);
  const std::string text = r.render();
  EXPECT_TRUE(has(text, "# HELP kvmesh_x_total Things counted.\n")) << text;
  EXPECT_TRUE(has(text, "# TYPE kvmesh_x_total counter\n")) << text;
  EXPECT_TRUE(has(text, "\nkvmesh_x_total{kind=\"a\"} 1\n")) << text;
  EXPECT_TRUE(has(text, "\nkvmesh_x_total{kind=\"b\"} 2\n")) << text;
  EXPECT_TRUE(has(text, "# TYPE kvmesh_y gauge\nkvmesh_y -1.5\n")) << text;
}

TEST(registry, label_values_follow_the_label_names_and_a_series_is_made_once) {
  registry r;
  auto c = *r.add_counter("c_total", "h", {"b", "a"});
  counter* x = *c->with({"1", "2"});
  EXPECT_EQ(*c->with({"1", "2"}), x);
  x->Increment(3);
  EXPECT_EQ((*c->with({"1", "2"}))->Value(), 3);
  EXPECT_NE(*c->with({"2", "1"}), x);
  EXPECT_TRUE(has(r.render(), "c_total{a=\"2\",b=\"1\"} 3\n")) << r.render();
  auto wrong = c->with({"1"});
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.err().code, ec::invalid_argument);
  EXPECT_TRUE(has(wrong.err().message, "has 2 labels, given 1"));
}

TEST(registry, bad_and_repeated_names_are_errors) {
  registry r;
  ASSERT_TRUE(r.add_gauge("g", "h"));
  auto again = r.add_counter("g", "h");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.err().code, ec::invalid_argument);
  EXPECT_TRUE(has(again.err().message, "metric g")) << again.err().message;
  auto name = r.add_gauge("1abc", "h");
  ASSERT_FALSE(name);
  EXPECT_TRUE(has(name.err().message, "bad metric name '1abc'"));
  auto label = r.add_gauge("ok", "h", {"__reserved"});
  ASSERT_FALSE(label);
  EXPECT_TRUE(has(label.err().message, "bad label name '__reserved'"));
  auto twice = r.add_gauge("ok2", "h", {"a", "a"});
  ASSERT_FALSE(twice);
  EXPECT_TRUE(has(twice.err().message, "label 'a' twice"));
  auto bounds = r.add_histogram("h", "h", {1, 1});
  ASSERT_FALSE(bounds);
  EXPECT_TRUE(has(bounds.err().message, "strictly increasing"));
  EXPECT_FALSE(r.add_histogram("h2", "h", {1, INFINITY}));
}

TEST(registry, a_mirrored_counter_only_rises) {
  registry r;
  counter* c = *(*r.add_counter("m_total", "h"))->with({});
  mirror(*c, 5);
  EXPECT_EQ(c->Value(), 5);
  mirror(*c, 3);  // a count kept elsewhere never falls: a mistake, ignored
  EXPECT_EQ(c->Value(), 5);
  mirror(*c, 7.5);
  EXPECT_EQ(c->Value(), 7.5);
}

TEST(registry, a_histogram_keeps_nan_out_of_its_sum) {
  registry r;
  histogram* h = *(*r.add_histogram("lat_seconds", "h", {0.1, 1}))->with({});
  observe(*h, 0.05);
  observe(*h, std::nan(""));
  observe(*h, 2);
  const auto m = h->Collect().histogram;
  EXPECT_EQ(m.sample_count, 2u);
  EXPECT_DOUBLE_EQ(m.sample_sum, 2.05);
  ASSERT_EQ(m.bucket.size(), 3u);  // 0.1, 1, +Inf
  EXPECT_EQ(m.bucket[0].cumulative_count, 1u);
  EXPECT_EQ(m.bucket[1].cumulative_count, 1u);
  EXPECT_EQ(m.bucket[2].cumulative_count, 2u);
  const std::string text = r.render();
  EXPECT_TRUE(has(text, "lat_seconds_bucket{le=\"+Inf\"} 2\n")) << text;
  EXPECT_TRUE(has(text, "lat_seconds_count 2\n")) << text;
}

}  // namespace
}  // namespace kvmesh::metrics
