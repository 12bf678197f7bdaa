// Reports shared by the commands: the comparison table and the JSON form of
// a result, and the fleet's JSON of admin and top.
#include "cli/report.hpp"

#include <cmath>
#include <cstdio>
#include <iterator>

namespace kvmesh::cli {

json to_json(const summary& s) {
  return json{{"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}};
}

namespace {

// A price for JSON: null when there is none (NaN, which JSON lacks).
json price_json(double price) {
  return std::isnan(price) ? json(nullptr) : json(price);
}

// A worker's models: [{"name": ..., "parent": ...}], parent only for a
// LoRA adapter.
json models_json(const std::vector<served_model>& models) {
  json list = json::array();
  for (const auto& m : models) {
    json e{{"name", m.name}};
    if (!m.parent.empty()) e["parent"] = m.parent;
    list.push_back(std::move(e));
  }
  return list;
}

}  // namespace

json workers_json(const std::vector<worker_status>& ws) {
  json list = json::array();
  for (const auto& w : ws) {
    json e = worker_load_json(w);
    e["speed"] = w.speed;
    e["endpoint"] = w.endpoint;
    e["engine"] = w.engine;
    e["engine_rank"] = w.engine_rank >= 0 ? json(w.engine_rank) : json(nullptr);
    e["models"] = models_json(w.models);
    e["host_capacity_blocks"] = w.host_capacity;
    e["disk_capacity_blocks"] = w.disk_capacity;
    e["awards"] = w.awards;
    e["last_price"] = price_json(w.last_price);
    list.push_back(std::move(e));
  }
  return list;
}

json routers_json(const std::vector<router_status>& rs) {
  json list = json::array();
  for (const auto& x : rs)
    list.push_back({{"name", x.name},
                    {"decisions", x.decisions},
                    {"reauctions", x.reauctions},
                    {"held", x.held},
                    {"overloaded", x.overloaded},
                    {"live_workers", x.live_workers},
                    {"workers", x.workers},
                    {"auction_p50_us", x.auction_p50_us},
                    {"auction_p99_us", x.auction_p99_us},
                    {"nats_in", x.nats_in},
                    {"nats_out", x.nats_out},
                    {"text_requests", x.text_requests},
                    {"block_mismatches", x.block_mismatches},
                    {"reauctions_by_cause", reauctions_by_cause(x)},
                    {"rounds", x.rounds},
                    {"bids", x.bids},
                    {"runner_up_awards", x.runner_up_awards}});
  return list;
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
              {"imbalance",  // null: the run was too short to measure it
               std::isfinite(r.imbalance) ? json(r.imbalance) : json(nullptr)},
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
  // Every header names its unit; "max/mean" is the imbalance's ratio.
  std::vector<std::vector<std::string>> rows{
      {"policy", "ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms",
       "e2e_p50_ms", "itl_mean_ms", "gpu%", "host%", "disk%", "hit%",
       "prefill_blocks", "tok/s", "imbal_max/mean"}};
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
         // A run too short to measure it has none, never a ratio below 1.
         std::isfinite(r.imbalance) ? cell("%.2f", r.imbalance) : "-"});
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
  static const int width[] = {-13, 12, 11, 11, 11, 10, 11,
                              5,   5,  5,  5,  14, 9,  14};
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
