// Tests of cli/html_report: the page's charts, table and escaping.
#include "cli/html_report.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace kvmesh::cli {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size()))
    ++n;
  return n;
}

// The text of the <svg> element with `id`, "" when there is none.
std::string chart(const std::string& page, const std::string& id) {
  const size_t at = page.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const size_t start = page.rfind("<svg", at);
  return page.substr(start, page.find("</svg>", at) + 6 - start);
}

sim_result result(policy_kind k, bool sampled) {
  sim_result r;
  r.policy = k;
  r.ttft_ms.mean = 123.4;
  r.ttft_ms.p99 = 999;
  r.hit_ratio = {0.4, 0.1, 0.05, 0.55};
  r.assigned = {5, 3, 0};
  for (int i = 0; i <= 10; ++i)
    r.ttft_cdf_ms.push_back(10.0 * (i + 1));
  if (sampled)
    for (int i = 0; i < 5; ++i)
      r.queued_over_time.push_back({100.0 * i, {1.0 * i, 2, 0}});
  return r;
}

report_page sample_page() {
  report_page p;
  p.title = "kvmesh sim";
  p.scenario = json{{"trace", "/tmp/<odd> & name.jsonl"},
                    {"workers", 3},
                    {"price", {{"beta", 0.5}}}};
  p.oracle.hit_ratio = 0.7;
  p.oracle.ttft_cdf_ms = {1, 2, 4, 8};
  p.results = {result(policy_kind::kvmesh, true),
               result(policy_kind::round_robin, false)};
  p.queued_note = "queued <blocks>";
  p.extra = {{"auction p99 (us)", "812"}};
  return p;
}

TEST(html_report, every_chart_draws_its_data) {
  const std::string page = html_report(sample_page());
  // Two policies and the oracle's bound, dashed.
  EXPECT_EQ(count(chart(page, "ttft-cdf"), "class=\"mark"), 3u);
  EXPECT_EQ(count(chart(page, "ttft-cdf"), "stroke-dasharray"), 2u);
  EXPECT_EQ(count(chart(page, "queued-kvmesh"), "class=\"mark\""), 3u);
  EXPECT_EQ(count(chart(page, "hit-ratio"), "class=\"mark\""), 6u);
  EXPECT_EQ(count(chart(page, "hit-ratio"), "class=\"reference\""), 1u);
  EXPECT_EQ(count(chart(page, "requests"), "class=\"mark\""), 6u);
  // A policy without samples says so rather than drawing empty axes.
  EXPECT_NE(chart(page, "queued-round_robin").find("no-data"),
            std::string::npos);
  EXPECT_NE(chart(page, "ttft-cdf").find(">round_robin</text>"),
            std::string::npos);
}

// The value of attribute `name` of the <svg> `svg` opens with.
std::string attribute(const std::string& svg, const std::string& name) {
  const size_t at = svg.find(" " + name + "=\"");
  if (at == std::string::npos || at > svg.find('>')) return "";
  const size_t from = at + name.size() + 3;
  return svg.substr(from, svg.find('"', from) - from);
}

TEST(html_report, kvmesh_stands_out_among_the_policies) {
  const std::string ttft = chart(html_report(sample_page()), "ttft-cdf");
  EXPECT_EQ(count(ttft, "class=\"mark highlight\""), 1u);
  const size_t kv = ttft.find("class=\"mark highlight\"");
  EXPECT_NE(ttft.find("<title>kvmesh</title>", kv), std::string::npos);
  EXPECT_EQ(ttft.find("<title>round_robin</title>", kv), std::string::npos);
  EXPECT_NE(ttft.find("font-weight=\"bold\">kvmesh</text>"), std::string::npos);
}

TEST(html_report, queued_charts_share_one_y_scale) {
  report_page p = sample_page();
  // round_robin's queues reach 40 blocks, kvmesh's 4.
  p.results[1].queued_over_time = {{0, {40, 0, 0}}, {100, {0, 10, 0}}};
  const std::string page = html_report(p);
  const std::string kv = chart(page, "queued-kvmesh");
  const std::string rr = chart(page, "queued-round_robin");
  EXPECT_EQ(attribute(kv, "data-y-max"), "40");
  EXPECT_EQ(attribute(rr, "data-y-max"), "40");
}

TEST(html_report, a_policy_far_above_the_others_keeps_its_own_scale) {
  report_page p = sample_page();
  // kvmesh peaks at 4 blocks, round_robin at 5; prefix at 900 would
  // flatten both.
  p.results[1].queued_over_time = {{0, {5, 0, 0}}, {100, {0, 1, 0}}};
  p.results.push_back(result(policy_kind::prefix, false));
  p.results[2].queued_over_time = {{0, {900, 0, 0}}, {100, {0, 0, 0}}};
  const std::string page = html_report(p);
  EXPECT_EQ(attribute(chart(page, "queued-kvmesh"), "data-y-max"), "5");
  EXPECT_EQ(attribute(chart(page, "queued-round_robin"), "data-y-max"), "5");
  const std::string apart = chart(page, "queued-prefix");
  EXPECT_EQ(attribute(apart, "data-y-max"), "1000");
  EXPECT_NE(apart.find("prefix (own scale)"), std::string::npos);
  EXPECT_EQ(chart(page, "queued-kvmesh").find("own scale"), std::string::npos);
}

TEST(html_report, axes_follow_the_data) {
  // TTFT up to 110 ms (the oracle's 8): the axis ends at 200 ms, not 1000.
  EXPECT_EQ(
      attribute(chart(html_report(sample_page()), "ttft-cdf"), "data-x-max"),
      "200");
}

TEST(html_report, the_heatmap_has_a_key) {
  const std::string heat = chart(html_report(sample_page()), "requests");
  EXPECT_NE(heat.find("<g class=\"key\">"), std::string::npos);
  EXPECT_NE(heat.find(">5 requests</text>"), std::string::npos);
}

TEST(html_report, every_column_header_names_its_unit) {
  const report_page p = sample_page();
  const auto rows = table_cells(p.oracle, p.results);
  const std::string page = html_report(p);
  for (size_t c = 1; c < rows[0].size(); ++c) {
    const std::string& h = rows[0][c];
    bool unit = false;
    for (const char* u : {"_ms", "%", "_blocks", "tok/s", "max/mean"})
      unit = unit || h.find(u) != std::string::npos;
    EXPECT_TRUE(unit) << h;
    EXPECT_NE(page.find("<th>" + h + "</th>"), std::string::npos) << h;
  }
}

TEST(html_report, an_unmeasured_imbalance_is_a_dash_never_zero) {
  report_page p = sample_page();
  p.results[0].imbalance = 1.25;
  p.results[1].imbalance = std::nan("");  // a bench run too short to sample
  const auto rows = table_cells(p.oracle, p.results);
  EXPECT_EQ(rows[1].back(), "1.25");
  EXPECT_EQ(rows[2].back(), "-");
  EXPECT_TRUE(result_json(p.results[1])["imbalance"].is_null());
  EXPECT_EQ(result_json(p.results[0])["imbalance"], 1.25);
}

TEST(html_report, self_contained_and_escaped) {
  const std::string page = html_report(sample_page());
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find(" src="), std::string::npos);
  EXPECT_EQ(page.find(" href="), std::string::npos);
  EXPECT_NE(page.find("/tmp/&lt;odd&gt; &amp; name.jsonl"), std::string::npos);
  EXPECT_EQ(page.find("<odd>"), std::string::npos);
  EXPECT_NE(page.find("queued &lt;blocks&gt;"), std::string::npos);
  EXPECT_NE(page.find("<td>price.beta</td>"), std::string::npos);
  EXPECT_NE(page.find("<td>auction p99 (us)</td>"), std::string::npos);
}

TEST(html_report, the_table_shows_the_text_tables_numbers) {
  const report_page p = sample_page();
  const std::string page = html_report(p);
  for (const auto& row : table_cells(p.oracle, p.results))
    for (const auto& cell : row)
      EXPECT_NE(page.find(">" + cell + "<"), std::string::npos) << cell;
  EXPECT_NE(page.find(">123<"), std::string::npos);  // ttft_mean, as printed
}

TEST(html_report, no_results_is_a_page_of_no_data_notes) {
  report_page p;
  p.title = "kvmesh bench";
  const std::string page = html_report(p);
  EXPECT_NE(chart(page, "ttft-cdf").find("no-data"), std::string::npos);
  EXPECT_NE(chart(page, "hit-ratio").find("no-data"), std::string::npos);
  EXPECT_NE(chart(page, "requests").find("no-data"), std::string::npos);
  EXPECT_EQ(count(page, "class=\"mark\""), 0u);
}

TEST(html_report, write_report_names_a_path_it_cannot_write) {
  auto st = write_report("/nonexistent-dir/report.html", sample_page());
  ASSERT_FALSE(st);
  EXPECT_NE(st.err().message.find("/nonexistent-dir/report.html"),
            std::string::npos);
}

}  // namespace
}  // namespace kvmesh::cli
