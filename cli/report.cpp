// Reports shared by the commands that replay traces: the comparison table
// and the JSON form of a result.
#include "cli/report.hpp"

#include <cstdio>

namespace kvmesh::cli {

json to_json(const summary& s) {
  return json{{"mean", s.mean}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}};
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

void print_table(const oracle_result& oracle,
                 const std::vector<sim_result>& results) {
  std::printf("%-13s %9s %9s %9s %9s %9s %9s  %5s %5s %5s %5s %9s %9s %6s\n",
              "policy", "ttft_mean", "ttft_p50", "ttft_p90", "ttft_p99",
              "e2e_p50", "itl_mean", "gpu%", "host%", "disk%", "hit%",
              "prefill", "tok/s", "imbal");
  for (const auto& r : results)
    std::printf(
        "%-13s %9.0f %9.0f %9.0f %9.0f %9.0f %9.1f  %5.1f %5.1f %5.1f %5.1f "
        "%9lu %9.0f %6.2f\n",
        to_string(r.policy), r.ttft_ms.mean, r.ttft_ms.p50, r.ttft_ms.p90,
        r.ttft_ms.p99, r.e2e_ms.p50, r.itl_ms.mean, 100 * r.hit_ratio.gpu,
        100 * r.hit_ratio.host, 100 * r.hit_ratio.disk, 100 * r.hit_ratio.total,
        static_cast<unsigned long>(r.prefill_blocks), r.throughput_tok_s,
        r.imbalance);
  std::printf("%-13s %9.0f %9.0f %9.0f %9.0f %9s %9s  %5s %5s %5s %5.1f\n",
              "oracle", oracle.ttft_ms.mean, oracle.ttft_ms.p50,
              oracle.ttft_ms.p90, oracle.ttft_ms.p99, "-", "-", "-", "-", "-",
              100 * oracle.hit_ratio);
}

}  // namespace kvmesh::cli
