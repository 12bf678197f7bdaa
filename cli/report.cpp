// Reports shared by the commands that replay traces: the comparison table
// and the JSON form of a result.
#include "cli/report.hpp"

#include <cstdio>
#include <iterator>

namespace kvmesh::cli {

json to_json(const summary& s) {
  return json{{"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}};
}

json reauctions_by_cause(const router_status& s) {
  return {{"refused", s.reauctions_refused},
          {"unanswered", s.reauctions_unanswered},
          {"no_bids", s.reauctions_no_bids},
          {"saturated", s.reauctions_saturated},
          {"no_live_worker", s.reauctions_no_live_worker}};
}

json result_json(const sim_result& r) {
  json assigned = json::array();
  for (uint64_t a : r.assigned)
    assigned.push_back(a);
  return json{{"policy", to_string(r.policy)},
              {"ttft_ms", to_json(r.ttft_ms)},
              {"e2e_ms", to_json(r.e2e_ms)},
              {"itl_ms", to_json(r.itl_ms)},
              {"hit_ratio",
               {{"gpu", r.hit_ratio.gpu},
                {"host", r.hit_ratio.host},
                {"disk", r.hit_ratio.disk},
                {"total", r.hit_ratio.total}}},
              {"prefill_blocks", r.prefill_blocks},
              {"throughput_tok_s", r.throughput_tok_s},
              {"imbalance", r.imbalance},
              {"assigned", assigned},
              {"completed", r.completed},
              {"requests", r.requests}};
}

namespace {

std::string cell(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

}  // namespace

std::vector<std::vector<std::string>> table_cells(
    const oracle_result& oracle, const std::vector<sim_result>& results) {
  std::vector<std::vector<std::string>> rows{
      {"policy", "ttft_mean", "ttft_p50", "ttft_p90", "ttft_p99", "e2e_p50",
       "itl_mean", "gpu%", "host%", "disk%", "hit%", "prefill", "tok/s",
       "imbal"}};
  for (const auto& r : results)
    rows.push_back(
        {to_string(r.policy), cell("%.0f", r.ttft_ms.mean),
         cell("%.0f", r.ttft_ms.p50), cell("%.0f", r.ttft_ms.p90),
         cell("%.0f", r.ttft_ms.p99), cell("%.0f", r.e2e_ms.p50),
         cell("%.1f", r.itl_ms.mean), cell("%.1f", 100 * r.hit_ratio.gpu),
         cell("%.1f", 100 * r.hit_ratio.host),
         cell("%.1f", 100 * r.hit_ratio.disk),
         cell("%.1f", 100 * r.hit_ratio.total),
         std::to_string(r.prefill_blocks), cell("%.0f", r.throughput_tok_s),
         cell("%.2f", r.imbalance)});
  rows.push_back({"oracle", cell("%.0f", oracle.ttft_ms.mean),
                  cell("%.0f", oracle.ttft_ms.p50),
                  cell("%.0f", oracle.ttft_ms.p90),
                  cell("%.0f", oracle.ttft_ms.p99), "-", "-", "-", "-", "-",
                  cell("%.1f", 100 * oracle.hit_ratio)});
  return rows;
}

void print_table(const oracle_result& oracle,
                 const std::vector<sim_result>& results) {
  // Column widths; the tier columns are narrower and set apart by a space.
  static const int width[] = {-13, 9, 9, 9, 9, 9, 9, 5, 5, 5, 5, 9, 9, 6};
  for (const auto& row : table_cells(oracle, results)) {
    std::string line;
    for (size_t c = 0; c < row.size() && c < std::size(width); ++c) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%*s", width[c], row[c].c_str());
      line += (c == 0 ? "" : c == 7 ? "  " : " ") + std::string(buf);
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace kvmesh::cli
