// The HTML report of a trace replay: settings, the result table and SVG
// charts of latency, queues, reuse and placement, in one file.
#include "cli/html_report.hpp"

#include <algorithm>
#include <fstream>

#include "cli/svg_chart.hpp"

namespace kvmesh::cli {

namespace {

using svg::escape;

// Inline and small: the page must open without any other file.
const char* style = R"(<style>
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1200px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin-top: 28px; }
p.note { color: #555; font-size: 13px; max-width: 760px; }
table { border-collapse: collapse; font-size: 13px; }
td, th { padding: 3px 8px; border-bottom: 1px solid #ddd; }
th { text-align: left; background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.settings td:first-child { color: #555; }
.small-multiples { display: flex; flex-wrap: wrap; gap: 8px; }
svg.chart { font-size: 12px; background: #fff; }
svg .title { font-size: 14px; font-weight: bold; }
svg .tick, svg .legend { font-size: 11px; fill: #333; }
svg .cell { font-size: 11px; }
svg .label { font-size: 12px; fill: #333; }
svg .no-data { font-size: 13px; fill: #a33; }
svg .grid { stroke: #e6e6e6; stroke-width: 1; }
svg .frame { fill: none; stroke: #999; stroke-width: 1; }
svg .reference { stroke: #222; stroke-width: 1.5; stroke-dasharray: 5 3; }
</style>
)";

// key = value rows of a JSON object; nested objects as "outer.inner".
void flatten(const json& j, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(),
              out);
    return;
  }
  out.emplace_back(prefix, j.is_string() ? j.get<std::string>() : j.dump());
}

// Numbers are right-aligned, words left.
bool numeric(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789.-+e") == s.npos;
}

std::string table_html(const std::vector<std::vector<std::string>>& rows,
                       const char* cls = "") {
  std::string out = "<table class=\"" + std::string(cls) + "\">";
  for (size_t r = 0; r < rows.size(); ++r) {
    out += "<tr>";
    for (size_t c = 0; c < rows[0].size(); ++c) {
      const std::string v = c < rows[r].size() ? rows[r][c] : "";
      if (r == 0)
        out += "<th>" + escape(v) + "</th>";
      else
        out +=
            std::string(c > 0 && numeric(v) ? "<td class=\"num\">" : "<td>") +
            escape(v) + "</td>";
    }
    out += "</tr>";
  }
  return out + "</table>\n";
}

std::string ttft_chart(const report_page& p) {
  svg::line_chart c;
  c.id = "ttft-cdf";
  c.title = "TTFT distribution per policy";
  c.x_label = "time to first token (ms, log scale)";
  c.y_label = "fraction of requests";
  c.log_x = true;
  c.y_max = 1;
  for (const sim_result& r : p.results) {
    svg::series s;
    s.name = to_string(r.policy);
    // The router under test, read against its peers.
    s.highlight = r.policy == policy_kind::kvmesh;
    const size_t n = r.ttft_cdf_ms.size();
    for (size_t i = 0; i < n; ++i) {
      s.x.push_back(r.ttft_cdf_ms[i]);
      s.y.push_back(n > 1 ? static_cast<double>(i) / (n - 1) : 1);
    }
    c.lines.push_back(std::move(s));
  }
  // The physical bound, as a reference for the policies' curves.
  if (!p.results.empty() && !p.oracle.ttft_cdf_ms.empty()) {
    svg::series s;
    s.name = "oracle";
    s.dashed = true;
    const size_t n = p.oracle.ttft_cdf_ms.size();
    for (size_t i = 0; i < n; ++i) {
      s.x.push_back(p.oracle.ttft_cdf_ms[i]);
      s.y.push_back(n > 1 ? static_cast<double>(i) / (n - 1) : 1);
    }
    c.lines.push_back(std::move(s));
  }
  return svg::render(c);
}

std::string queued_charts(const report_page& p) {
  // Read side by side, so on one scale: on scales of their own, a policy
  // that piles work on a worker would look as calm as one that spreads it.
  std::vector<svg::line_chart> charts;
  for (const sim_result& r : p.results) {
    svg::line_chart c;
    c.id = std::string("queued-") + to_string(r.policy);
    c.title = to_string(r.policy);
    c.x_label = "time (s)";
    c.y_label = "queued (blocks)";
    c.legend = false;
    c.width = 380;
    c.height = 220;
    const auto& q = r.queued_over_time;
    const double t0 = q.empty() ? 0 : q.front().time_ms;
    size_t workers = 0;
    for (const auto& s : q)
      workers = std::max(workers, s.queued.size());
    for (size_t w = 0; w < workers; ++w) {
      svg::series s;
      s.name = "worker " + std::to_string(w);
      for (const auto& sample : q) {
        if (w >= sample.queued.size()) continue;
        s.x.push_back((sample.time_ms - t0) / 1000);
        s.y.push_back(sample.queued[w]);
      }
      c.lines.push_back(std::move(s));
    }
    charts.push_back(std::move(c));
  }
  // But a policy whose queues peak above outlier times the median
  // policy's would flatten every other chart to a line: it keeps a scale of
  // its own, and its title says so.
  constexpr double outlier = 10;
  std::vector<double> peaks;
  for (const svg::line_chart& c : charts)
    peaks.push_back(svg::shared_max({c}));
  std::vector<double> sorted = peaks;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  const auto apart = [&](double peak) {
    return median > 0 && peak > outlier * median;
  };
  double shared = 0;
  for (double peak : peaks)
    if (!apart(peak)) shared = std::max(shared, peak);
  std::string out = "<div class=\"small-multiples\">";
  for (size_t i = 0; i < charts.size(); ++i) {
    svg::line_chart& c = charts[i];
    if (apart(peaks[i]))
      c.title += " (own scale)";
    else
      c.y_max = shared;
    out += svg::render(c);
  }
  return out + "</div>\n";
}

std::string hit_chart(const report_page& p) {
  svg::stacked_bars c;
  c.id = "hit-ratio";
  c.title = "Prompt blocks reused, by the tier they came from";
  c.value_label = "share of prompt blocks (%)";
  c.parts = {"GPU", "host", "disk"};
  double longest = 100 * p.oracle.hit_ratio;
  for (const sim_result& r : p.results) {
    c.bars.push_back(to_string(r.policy));
    c.values.push_back({100 * r.hit_ratio.gpu, 100 * r.hit_ratio.host,
                        100 * r.hit_ratio.disk});
    longest = std::max(longest, 100 * r.hit_ratio.total);
  }
  c.max = std::min(100.0, std::max(longest * 1.05, 1.0));
  if (!p.results.empty() && p.oracle.hit_ratio > 0) {
    c.reference = 100 * p.oracle.hit_ratio;
    char buf[64];
    std::snprintf(buf, sizeof(buf), "oracle %.1f%%", c.reference);
    c.reference_label = buf;
  }
  return svg::render(c);
}

std::string requests_chart(const report_page& p) {
  svg::heatmap c;
  c.id = "requests";
  c.title = "Where requests went: requests per worker";
  c.x_label = "worker";
  c.y_label = "policy";
  c.unit = "requests";
  size_t workers = 0;
  for (const sim_result& r : p.results)
    workers = std::max(workers, r.assigned.size());
  for (size_t w = 0; w < workers; ++w)
    c.columns.push_back(std::to_string(w));
  for (const sim_result& r : p.results) {
    c.rows.push_back(to_string(r.policy));
    std::vector<double> row(workers, 0);
    for (size_t w = 0; w < r.assigned.size(); ++w)
      row[w] = static_cast<double>(r.assigned[w]);
    c.values.push_back(std::move(row));
  }
  return svg::render(c);
}

}  // namespace

std::string html_report(const report_page& p) {
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>" +
      escape(p.title) + " report</title>\n" + style + "</head><body>\n";
  out += "<h1>" + escape(p.title) + " report</h1>\n";
  std::vector<std::pair<std::string, std::string>> settings;
  flatten(p.scenario, "", settings);
  for (const auto& [k, v] : settings)
    if (k == "trace") out += "<p>trace: <code>" + escape(v) + "</code></p>\n";
  out += "<h2>Results</h2>\n";
  out += "<p class=\"note\">The table <code>" + escape(p.title) +
         "</code> prints: TTFT and end-to-end latency in ms, reuse per tier "
         "in % of prompt blocks, prefill in blocks computed, imbalance as "
         "the time-averaged max/mean of queued work. The oracle is the "
         "physical bound.</p>\n";
  out += table_html(table_cells(p.oracle, p.results), "results");
  if (!p.extra.empty()) {
    std::vector<std::vector<std::string>> rows{{"measure", "value"}};
    for (const auto& [k, v] : p.extra)
      rows.push_back({k, v});
    out += table_html(rows, "extra");
  }

  out +=
      "<h2>Time to first token</h2>\n<p class=\"note\">The share of "
      "requests whose first token came within a time: the further left "
      "and the steeper, the better. The heavy line is kvmesh; dashed: the "
      "oracle's bound.</p>\n";
  out += ttft_chart(p) + "\n";
  out += "<h2>Queued work per worker over time</h2>\n<p class=\"note\">" +
         escape(p.queued_note) +
         " One line per worker (colours repeat after 10), one chart per "
         "policy, all on one scale but for a policy whose queues peak above "
         "10 times the median policy's (its title says \"own scale\"): "
         "lines far apart mean unbalanced queues.</p>\n";
  out += queued_charts(p);
  out +=
      "<h2>Reuse by tier</h2>\n<p class=\"note\">Blocks of every prompt "
      "found cached, by tier; the dashed line is the oracle's reuse "
      "(every block any earlier request computed).</p>\n";
  out += hit_chart(p) + "\n";
  out +=
      "<h2>Where requests went</h2>\n<p class=\"note\">Requests each "
      "worker was given, per policy: an even row spreads load, a "
      "concentrated one follows the cache.</p>\n";
  out += requests_chart(p) + "\n";

  out += "<h2>Settings</h2>\n";
  std::vector<std::vector<std::string>> rows{{"setting", "value"}};
  for (auto& [k, v] : settings)
    rows.push_back({k, v});
  out += table_html(rows, "settings");
  return out + "</body></html>\n";
}

status write_report(const std::string& path, const report_page& page) {
  std::ofstream out(path, std::ios::binary);
  out << html_report(page);
  out.close();
  if (!out)
    return make_error(ec::io_error,
                      "--report " + path + ": cannot write the HTML file");
  return ok;
}

}  // namespace kvmesh::cli
