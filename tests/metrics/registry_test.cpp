// Tests of metrics/registry: the text format 0.0.4 as Prometheus parses it
// (HELP and TYPE lines, escaping, histogram buckets), and bad names.
#include "metrics/registry.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

namespace kvmesh::metrics {
namespace {

TEST(registry, renders_help_type_and_samples_in_order) {
  registry r;
  auto c = r.add_counter("kvmesh_x_total", "Things counted.", {"kind"});
  ASSERT_TRUE(c);
  auto g = r.add_gauge("kvmesh_y", "A level.");
  ASSERT_TRUE(g);
  (*(*c)->with({"b"}))->inc(2);
  (*(*c)->with({"a"}))->inc();
  (*(*g)->with({}))->set(-1.5);
  EXPECT_EQ(r.render(),
            "# HELP kvmesh_x_total Things counted.\n"
            "# TYPE kvmesh_x_total counter\n"
            "kvmesh_x_total{kind=\"a\"} 1\n"
            "kvmesh_x_total{kind=\"b\"} 2\n"
            "# HELP kvmesh_y A level.\n"
            "# TYPE kvmesh_y gauge\n"
            "kvmesh_y -1.5\n");
}

TEST(registry, a_series_is_created_once) {
  registry r;
  auto c = *r.add_counter("c_total", "h", {"a", "b"});
  counter* x = *c->with({"1", "2"});
  EXPECT_EQ(*c->with({"1", "2"}), x);
  x->inc(3);
  EXPECT_EQ((*c->with({"1", "2"}))->value(), 3);
  EXPECT_NE(*c->with({"2", "1"}), x);
}

TEST(registry, label_values_and_help_are_escaped) {
  EXPECT_EQ(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(escape_help("a\\b\"c\nd"), "a\\\\b\"c\\nd");  // quotes stay
  registry r;
  auto g = *r.add_gauge("g", "line one\nline \\two", {"path", "who"});
  (*g->with({"C:\\dir", "say \"hi\"\n"}))->set(1);
  EXPECT_EQ(r.render(),
            "# HELP g line one\\nline \\\\two\n"
            "# TYPE g gauge\n"
            "g{path=\"C:\\\\dir\",who=\"say \\\"hi\\\"\\n\"} 1\n");
}

TEST(registry, utf8_label_values_pass_unchanged) {
  EXPECT_EQ(escape_label("d\xC3\xA9j\xC3\xA0"), "d\xC3\xA9j\xC3\xA0");
}

TEST(registry, values_are_shortest_and_special_values_are_named) {
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(42), "42");
  EXPECT_EQ(format_value(20), "20");  // not 2e+01
  EXPECT_EQ(format_value(-0.0), "0");
  EXPECT_EQ(format_value(1e20), "1e+20");
  EXPECT_EQ(format_value(0.25), "0.25");
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(1234567890123.0), "1234567890123");
  EXPECT_EQ(format_value(1e-5), "1e-05");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
  // Whatever it prints reads back as the same double.
  for (double v : {1.0 / 3, 2.0 / 3 * 1e300, 5e-324, 0.1 + 0.2})
    EXPECT_EQ(std::strtod(format_value(v).c_str(), nullptr), v);
}

TEST(registry, histogram_has_cumulative_buckets_inf_sum_and_count) {
  registry r;
  auto h = *r.add_histogram("lat_seconds", "Latency.", {0.1, 0.5, 1});
  histogram* x = *h->with({});
  for (double v : {0.05, 0.1, 0.3, 0.7, 5.0})
    x->observe(v);
  x->observe(std::nan(""));  // dropped
  EXPECT_EQ(r.render(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{le=\"0.1\"} 2\n"  // 0.1 itself is in le 0.1
            "lat_seconds_bucket{le=\"0.5\"} 3\n"
            "lat_seconds_bucket{le=\"1\"} 4\n"
            "lat_seconds_bucket{le=\"+Inf\"} 5\n"
            "lat_seconds_sum " +
                format_value(0.05 + 0.1 + 0.3 + 0.7 + 5.0) +  // their order
                "\n"
                "lat_seconds_count 5\n");
}

TEST(registry, histogram_labels_come_before_le) {
  registry r;
  auto h = *r.add_histogram("h", "x", {1}, {"route"});
  (*h->with({"a\"b"}))->observe(2);
  EXPECT_EQ(r.render(),
            "# HELP h x\n"
            "# TYPE h histogram\n"
            "h_bucket{route=\"a\\\"b\",le=\"1\"} 0\n"
            "h_bucket{route=\"a\\\"b\",le=\"+Inf\"} 1\n"
            "h_sum{route=\"a\\\"b\"} 2\n"
            "h_count{route=\"a\\\"b\"} 1\n");
}

TEST(registry, a_family_without_series_has_only_its_header) {
  registry r;
  ASSERT_TRUE(r.add_counter("none_total", "Nothing yet.", {"x"}));
  EXPECT_EQ(r.render(),
            "# HELP none_total Nothing yet.\n# TYPE none_total counter\n");
}

TEST(registry, bad_names_labels_and_bounds_are_errors) {
  registry r;
  EXPECT_FALSE(r.add_counter("", "h"));
  EXPECT_FALSE(r.add_counter("1abc", "h"));
  EXPECT_FALSE(r.add_counter("a-b", "h"));
  EXPECT_TRUE(r.add_counter("ns:a_b", "h"));  // colons are allowed
  EXPECT_FALSE(r.add_gauge("g1", "h", {"a:b"}));
  EXPECT_FALSE(r.add_gauge("g2", "h", {"__reserved"}));
  EXPECT_FALSE(r.add_gauge("g3", "h", {"x", "x"}));
  EXPECT_FALSE(r.add_histogram("h1", "h", {1, 2}, {"le"}));
  EXPECT_FALSE(r.add_histogram("h2", "h", {}));
  EXPECT_FALSE(r.add_histogram("h3", "h", {2, 1}));
  EXPECT_FALSE(r.add_histogram("h4", "h", {1, 1}));
  EXPECT_FALSE(
      r.add_histogram("h5", "h", {1, std::numeric_limits<double>::infinity()}));
  ASSERT_TRUE(r.add_gauge("dup", "h"));
  auto again = r.add_counter("dup", "h");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.err().code, ec::invalid_argument);
  EXPECT_NE(again.err().message.find("dup"), std::string::npos);
  auto c = *r.add_counter("two_total", "h", {"a", "b"});
  auto wrong = c->with({"only one"});
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.err().message.find("2 labels"), std::string::npos);
}

TEST(registry, threads_add_without_losing_counts) {
  registry r;
  counter* c = *(*r.add_counter("n_total", "h"))->with({});
  histogram* h = *(*r.add_histogram("d", "h", {0.5}))->with({});
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->inc(0.5);
        h->observe(1);
      }
    });
  for (auto& t : ts)
    t.join();
  EXPECT_EQ(c->value(), 20000);
  const auto s = h->read();
  EXPECT_EQ(s.cumulative.back(), 40000u);
  EXPECT_EQ(s.sum, 40000);
}

}  // namespace
}  // namespace kvmesh::metrics
