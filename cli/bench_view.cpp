// `kvmesh bench`'s tables, JSON and report lines of a run.
#include "cli/bench_view.hpp"

#include <cinttypes>
#include <cstdio>
#include <thread>

#include "actors/router.hpp"
#include "core/log.hpp"

namespace kvmesh::cli::bench_view {

using harness::seconds;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

void print_rows(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      line += c == 0 ? row[c] + pad : "  " + pad + row[c];
    }
    std::printf("%s\n", line.c_str());
  }
}

void print_overhead(const harness::overhead_result& h) {
  std::printf("\nrouting overhead: %" PRIu64
              " decisions in %.2f s: %.1f "
              "decisions/s\n",
              h.decisions, h.wall_s, h.decisions_per_s);
  std::vector<std::vector<std::string>> rows{
      {"router", "decisions", "reauctions", "auction_p50_us", "auction_p99_us",
       "nats_msgs", "msgs/decision", "idle_msgs/s"}};
  for (const auto& r : h.routers)
    rows.push_back({r.name, std::to_string(r.decisions),
                    std::to_string(r.reauctions), fmt("%.0f", r.auction_p50_us),
                    fmt("%.0f", r.auction_p99_us), std::to_string(r.nats_msgs),
                    r.decisions
                        ? fmt("%.2f", static_cast<double>(r.nats_msgs) /
                                          static_cast<double>(r.decisions))
                        : "-",
                    fmt("%.1f", r.background_per_s)});
  rows.push_back({"total", std::to_string(h.decisions),
                  std::to_string(h.reauctions), fmt("%.0f", h.auction_p50_us),
                  fmt("%.0f", h.auction_p99_us), std::to_string(h.nats_msgs),
                  fmt("%.2f", h.nats_msgs_per_decision), ""});
  print_rows(rows);
  if (h.reauctions > 0) {
    std::string by;
    const json causes = reauctions_by_cause(h.causes);
    for (const auto& [cause, n] : causes.items())
      by += (by.empty() ? "" : ", ") + cause + " " +
            std::to_string(n.get<uint64_t>());
    std::printf("reauctions by cause: %s\n", by.c_str());
  }
  std::printf(
      "auction: a route request's arrival at a router to its decision, over "
      "each router's last %zu decisions; total p50: decision-weighted mean, "
      "p99: worst router\n",
      router_state::latency_window);
  std::printf(
      "NATS messages: in + out of the router processes' connections only "
      "(agents, shards and clients not counted), heartbeats included; "
      "without their idle rate: %.2f per decision\n",
      h.nats_msgs_per_decision_net);
  if (!h.warning.empty()) log::warn(h.warning);
}

json print_cpu(const harness::child_mesh& m, const harness::cpu_use& before,
               const harness::cpu_use& after, uint64_t decisions) {
  const double wall = seconds(after.at - before.at);
  std::vector<std::vector<std::string>> rows{
      {"process", "cpu_s", "cores", "cpu_us/decision"}};
  json out = json::array();
  for (const auto& r : harness::cpu_rows(m, before, after, decisions)) {
    rows.push_back({r.process, fmt("%.2f", r.cpu_s), fmt("%.2f", r.cores),
                    fmt("%.0f", r.us_per_decision)});
    out.push_back({{"process", r.process},
                   {"cpu_s", r.cpu_s},
                   {"cores", r.cores},
                   {"cpu_us_per_decision", r.us_per_decision}});
  }
  std::printf("\nCPU during the run (%.2f s of wall clock, %u cores):\n", wall,
              std::thread::hardware_concurrency());
  print_rows(rows);
  return out;
}

void print_baseline(const harness::baseline_report& b,
                    const harness::overhead_result& h, const std::string& url) {
  std::printf("\nraw NATS on %s (%zu-byte request and reply)\n", url.c_str(),
              b.payload);
  std::vector<std::vector<std::string>> rows{
      {"", "pacing", "rounds", "p50_us", "p99_us"}};
  auto row = [&](const std::string& name, const std::string& pacing,
                 const expected<baseline_result>& r) {
    if (r)
      rows.push_back({name, pacing, std::to_string(r->samples),
                      fmt("%.0f", r->p50_us), fmt("%.0f", r->p99_us)});
    else
      rows.push_back({name, pacing, "failed", "failed", "failed"});
  };
  const std::string sg = "scatter-gather x" + std::to_string(b.fanout);
  const std::string paced = fmt("%.0f/s", b.paced_rate);
  row("request/reply", "none", b.rr);
  row(sg, "none", b.sg);
  if (b.paced_rate > 0) {
    row("request/reply", paced, b.rr_paced);
    row(sg, paced, b.sg_paced);
  }
  const bool during = b.ran_during();
  if (during) row(sg, "trace", b.sg_during);
  print_rows(rows);
  std::printf(
      "pacing: none, rounds back to back (threads awake); N/s, rounds at the "
      "run's decision rate (threads woken as in the run)%s%s\n",
      b.paced_rate > 0 ? ""
                       : "; paced rounds not run: the load left no idle time",
      during ? "; trace, a round at each of the trace's arrivals during the "
               "run (its bursts, the host as busy)"
             : "");
  if (b.sg && b.sg->p99_us > 0) {
    std::printf("auction p99 / scatter-gather p99: %.1f",
                h.auction_p99_us / b.sg->p99_us);
    if (b.paced_rate > 0 && b.sg_paced && b.sg_paced->p99_us > 0)
      std::printf(" (paced: %.1f)", h.auction_p99_us / b.sg_paced->p99_us);
    if (b.sg_during && b.sg_during->p99_us > 0)
      std::printf(" (during the run: %.1f)",
                  h.auction_p99_us / b.sg_during->p99_us);
    std::printf("\n");
  }
  for (const auto* r : {&b.rr, &b.sg, &b.rr_paced, &b.sg_paced, &b.sg_during})
    if (!*r && r->err().code != ec::not_found) log::error(r->err().message);
}

void print_errors(const harness::error_counts& errors) {
  for (const auto& [what, count] : errors)
    KVMESH_WARN("%" PRIu64 " x %s", count, what.c_str());
}

json errors_json(const harness::error_counts& errors) {
  json out = json::object();
  for (const auto& [what, count] : errors)
    out[what] = count;
  return out;
}

json overhead_json(const harness::overhead_result& h) {
  json routers = json::array();
  for (const auto& r : h.routers)
    routers.push_back({{"name", r.name},
                       {"decisions", r.decisions},
                       {"reauctions", r.reauctions},
                       {"reauctions_by_cause", reauctions_by_cause(r.causes)},
                       {"auction_p50_us", r.auction_p50_us},
                       {"auction_p99_us", r.auction_p99_us},
                       {"nats_msgs", r.nats_msgs},
                       {"idle_msgs_per_s", r.background_per_s}});
  return json{{"decisions", h.decisions},
              {"reauctions", h.reauctions},
              {"reauctions_by_cause", reauctions_by_cause(h.causes)},
              {"wall_s", h.wall_s},
              {"decisions_per_s", h.decisions_per_s},
              {"auction_p50_us", h.auction_p50_us},
              {"auction_p99_us", h.auction_p99_us},
              {"nats_msgs", h.nats_msgs},
              {"nats_msgs_per_decision", h.nats_msgs_per_decision},
              {"nats_msgs_per_decision_net", h.nats_msgs_per_decision_net},
              {"routers", routers}};
}

json baseline_json(const harness::baseline_report& b) {
  auto one = [](const expected<baseline_result>& r) -> json {
    if (!r) return json{{"error", r.err().message}};
    return json{{"p50_us", r->p50_us},
                {"p99_us", r->p99_us},
                {"mean_us", r->mean_us},
                {"samples", r->samples}};
  };
  json paced = nullptr;
  if (b.paced_rate > 0)
    paced = json{{"rate", b.paced_rate},
                 {"request_reply", one(b.rr_paced)},
                 {"scatter_gather", one(b.sg_paced)}};
  json during = nullptr;
  if (b.ran_during()) during = one(b.sg_during);
  return json{{"fanout", b.fanout},
              {"payload_bytes", b.payload},
              {"request_reply", one(b.rr)},
              {"scatter_gather", one(b.sg)},
              {"paced", paced},
              {"scatter_gather_during_run", during}};
}

std::vector<std::pair<std::string, std::string>> report_extra(
    const harness::overhead_result& h, const harness::baseline_report& b,
    const harness::error_counts& errors) {
  std::vector<std::pair<std::string, std::string>> out{
      {"decisions", std::to_string(h.decisions)},
      {"decisions per second", fmt("%.1f", h.decisions_per_s)},
      {"re-auctions", std::to_string(h.reauctions)},
      {"auction p50 (us)", fmt("%.0f", h.auction_p50_us)},
      {"auction p99 (us)", fmt("%.0f", h.auction_p99_us)},
      {"NATS messages per decision (routers)",
       fmt("%.2f", h.nats_msgs_per_decision)}};
  auto raw = [&](const std::string& name, const expected<baseline_result>& r) {
    out.emplace_back(name + " p99 (us)", r ? fmt("%.0f", r->p99_us) : "failed");
  };
  const std::string sg = "raw NATS scatter-gather x" + std::to_string(b.fanout);
  raw("raw NATS request/reply", b.rr);
  raw(sg, b.sg);
  if (b.paced_rate > 0) {
    const std::string paced = fmt(", paced %.0f/s", b.paced_rate);
    raw("raw NATS request/reply" + paced, b.rr_paced);
    raw(sg + paced, b.sg_paced);
  }
  if (b.ran_during()) raw(sg + ", during the run", b.sg_during);
  for (const auto& [what, count] : errors)
    out.emplace_back("failed: " + what, std::to_string(count));
  return out;
}

}  // namespace kvmesh::cli::bench_view
