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

// The value of attribute `name` of the chart's <svg>, "" when none.
std::string attribute(const std::string& svg, const std::string& name) {
  const size_t at = svg.find(" " + name + "=\"");
  if (at == std::string::npos || at > svg.find('>')) return "";
  const size_t from = at + name.size() + 3;
  return svg.substr(from, svg.find('"', from) - from);
}

TEST(svg_chart, axes_end_just_past_the_data) {
  // TTFT up to 11.8 s on a log axis: it ends at 20 s, not at 100 s.
  line_chart c;
  c.id = "ttft";
  c.log_x = true;
  c.lines = {{"a", {25, 400, 11800}, {0, 0.5, 1}}};
  std::string svg = render(c);
  EXPECT_EQ(attribute(svg, "data-x-max"), "20000");
  EXPECT_NE(svg.find(">20k</text>"), std::string::npos);  // the end labelled
  EXPECT_NE(svg.find(">1000</text>"), std::string::npos);
  EXPECT_NE(svg.find(">20</text>"), std::string::npos);  // from just below
  EXPECT_EQ(svg.find(">100k</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">10</text>"), std::string::npos);
  // Linear: time up to 11.7 s ends at 12 s; the y axis at 300 for 260.
  c.log_x = false;
  c.lines = {{"a", {0, 5, 11.7}, {0, 260, 10}}};
  svg = render(c);
  EXPECT_EQ(attribute(svg, "data-x-max"), "12");
  EXPECT_EQ(attribute(svg, "data-y-max"), "300");
}

TEST(svg_chart, charts_side_by_side_share_one_y_scale) {
  line_chart calm, busy;
  calm.id = "calm";
  busy.id = "busy";
  calm.lines = {{"w0", {0, 1, 2}, {1, 3, 2}}};
  busy.lines = {{"w0", {0, 1, 2}, {10, 470, 30}}, {"w1", {0, 1}, {0, 5}}};
  // On their own: scales of their own.
  EXPECT_EQ(attribute(render(calm), "data-y-max"), "3");
  EXPECT_EQ(attribute(render(busy), "data-y-max"), "500");
  EXPECT_EQ(shared_max({calm, busy}), 470);
  calm.y_max = busy.y_max = shared_max({calm, busy});
  EXPECT_EQ(attribute(render(calm), "data-y-max"), "500");
  EXPECT_EQ(attribute(render(busy), "data-y-max"), "500");
}

TEST(svg_chart, the_highlighted_series_stands_out) {
  line_chart c;
  c.id = "cdf";
  c.lines = {
      {"kvmesh", {1, 2}, {0, 1}}, {"a", {1, 3}, {0, 1}}, {"b", {1, 4}, {0, 1}}};
  c.lines[0].highlight = true;
  const std::string svg = render(c);
  EXPECT_EQ(count(svg, "class=\"mark highlight\""), 1u);
  EXPECT_EQ(count(svg, "class=\"mark\""), 2u);
  // Drawn last, on top: the last path is kvmesh's, in its own colour.
  const std::string last = svg.substr(svg.rfind("<path"));
  EXPECT_NE(last.find("<title>kvmesh</title>"), std::string::npos);
  EXPECT_NE(last.find("stroke=\"#c2185b\""), std::string::npos);
  EXPECT_NE(last.find("stroke-width=\"3.2\""), std::string::npos);
  // The others step back.
  EXPECT_EQ(count(svg, "stroke-opacity=\"0.55\""), 4u);  // paths, legend
  // The legend names it, in bold.
  EXPECT_NE(svg.find("font-weight=\"bold\">kvmesh</text>"), std::string::npos);
  // Without a highlight nothing is faded.
  c.lines[0].highlight = false;
  EXPECT_EQ(render(c).find("stroke-opacity"), std::string::npos);
  EXPECT_EQ(render(c).find("highlight"), std::string::npos);
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

TEST(svg_chart, a_heatmap_has_a_colour_key) {
  heatmap h;
  h.id = "requests";
  h.rows = {"a"};
  h.columns = {"0", "1"};
  h.values = {{40, 165}};
  h.unit = "requests";
  std::string svg = render(h);
  const size_t key = svg.find("<g class=\"key\">");
  ASSERT_NE(key, std::string::npos);
  const std::string k = svg.substr(key, svg.find("</g>", key) - key);
  EXPECT_NE(k.find(">0</text>"), std::string::npos);  // white: none
  EXPECT_NE(k.find(">165 requests</text>"), std::string::npos);
  EXPECT_GE(count(k, "<rect"), 10u);          // a ramp, not one colour
  EXPECT_EQ(count(k, "class=\"mark\""), 0u);  // not data: not counted
}

}  // namespace
}  // namespace kvmesh::cli::svg
