// Tests of cli/svg_chart: escaping, one mark per datum, "no data" for none.
#include "cli/svg_chart.hpp"

#include <gtest/gtest.h>

#include <string>

namespace kvmesh::cli::svg {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size()))
    ++n;
  return n;
}

TEST(svg_chart, escape_makes_input_inert) {
  EXPECT_EQ(escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  EXPECT_EQ(escape("plain text 1.5"), "plain text 1.5");
  EXPECT_EQ(escape(""), "");
}

TEST(svg_chart, a_line_per_series_and_escaped_names) {
  line_chart c;
  c.id = "cdf";
  c.title = "TTFT";
  c.log_x = true;
  c.lines = {{"<script>alert(1)</script>", {1, 10, 100}, {0, 0.5, 1}},
             {"b", {2, 20}, {0, 1}},
             {"c", {5}, {1}}};
  const std::string svg = render(c);
  EXPECT_EQ(count(svg, "class=\"mark\""), 3u);
  EXPECT_EQ(count(svg, "<path"), 3u);
  EXPECT_NE(svg.find("id=\"cdf\""), std::string::npos);
  EXPECT_EQ(svg.find("<script>"), std::string::npos);
  EXPECT_NE(svg.find("&lt;script&gt;alert(1)&lt;/script&gt;"),
            std::string::npos);
  EXPECT_EQ(svg.find("no-data"), std::string::npos);
  // Decades on the log axis: 1 to 100.
  EXPECT_NE(svg.find(">100</text>"), std::string::npos);
}

TEST(svg_chart, log_axis_leaves_out_what_it_cannot_draw) {
  line_chart c;
  c.id = "x";
  c.log_x = true;
  c.lines = {{"zero only", {0, -1}, {0.5, 1}}, {"fine", {1, 2}, {0, 1}}};
  EXPECT_EQ(count(render(c), "class=\"mark\""), 1u);
  c.lines.pop_back();
  EXPECT_NE(render(c).find("class=\"no-data\""), std::string::npos);
}

TEST(svg_chart, empty_charts_say_no_data) {
  line_chart l;
  l.id = "l";
  l.title = "nothing <here>";
  const std::string a = render(l);
  EXPECT_NE(a.find("class=\"no-data\""), std::string::npos);
  EXPECT_NE(a.find("id=\"l\""), std::string::npos);
  EXPECT_NE(a.find("nothing &lt;here&gt;"), std::string::npos);
  EXPECT_EQ(count(a, "class=\"mark\""), 0u);
  l.lines = {{"empty", {}, {}}};
  EXPECT_NE(render(l).find("class=\"no-data\""), std::string::npos);

  stacked_bars b;
  b.id = "b";
  EXPECT_NE(render(b).find("class=\"no-data\""), std::string::npos);
  heatmap h;
  h.id = "h";
  h.rows = {"only rows"};
  EXPECT_NE(render(h).find("class=\"no-data\""), std::string::npos);
}

TEST(svg_chart, a_rect_per_nonzero_bar_segment) {
  stacked_bars b;
  b.id = "hits";
  b.parts = {"GPU", "host", "disk"};
  b.bars = {"kvmesh", "random"};
  b.values = {{50, 10, 5}, {20, 0, 0}};
  b.reference = 70;
  b.reference_label = "oracle";
  const std::string svg = render(b);
  EXPECT_EQ(count(svg, "class=\"mark\""), 4u);  // the zeros draw nothing
  EXPECT_EQ(count(svg, "class=\"reference\""), 1u);
  EXPECT_NE(svg.find(">kvmesh</text>"), std::string::npos);
  EXPECT_NE(svg.find(">host</text>"), std::string::npos);
}

TEST(svg_chart, a_cell_per_row_and_column) {
  heatmap h;
  h.id = "requests";
  h.rows = {"a", "b"};
  h.columns = {"0", "1", "2"};
  h.values = {{1, 2, 3}, {0, 0, 6}};
  const std::string svg = render(h);
  EXPECT_EQ(count(svg, "class=\"mark\""), 6u);
  EXPECT_NE(svg.find("fill=\"#1f4e8a\""), std::string::npos);  // the max
  EXPECT_NE(svg.find("fill=\"#ffffff\""), std::string::npos);  // a zero
}

}  // namespace
}  // namespace kvmesh::cli::svg
