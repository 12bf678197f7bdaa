// `kvmesh sim`: replays a trace through simulated GPUs for several routing
// policies and compares them (text table, optional JSON and HTML report).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/number_flags.hpp"
#include "cli/html_report.hpp"
#include "cli/report.hpp"
#include "core/sim.hpp"

namespace kvmesh::cli {

namespace {

struct sim_options {
  std::string trace;
  std::string speeds;
  std::string policies = "all";
  std::string json_path;
  std::string report_path;
  bool quiet = false;
  sim_config cfg;
};

// Splits "a,b,c"; an empty item is an error naming its position.
expected<std::vector<std::string>> split_list(const std::string& text,
                                              const char* flag) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    std::string item = text.substr(
        pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (item.empty())
      return make_error(ec::parse_error, std::string(flag) + ": entry " +
                                             std::to_string(out.size() + 1) +
                                             " is empty");
    out.push_back(std::move(item));
    if (comma == std::string::npos) return out;
    pos = comma + 1;
  }
}

expected<std::vector<double>> parse_speeds(const std::string& text) {
  auto items = split_list(text, "--worker-speeds");
  if (!items) return items.err();
  std::vector<double> out;
  for (size_t i = 0; i < items->size(); ++i) {
    const std::string& s = (*items)[i];
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != s.size() || !(v > 0))
      return make_error(ec::parse_error, "--worker-speeds: entry " +
                                             std::to_string(i + 1) + " '" + s +
                                             "' is not a positive number");
    out.push_back(v);
  }
  return out;
}

expected<std::vector<policy_kind>> parse_policies(const std::string& text) {
  if (text == "all") return all_policies();
  auto items = split_list(text, "--policy");
  if (!items) return items.err();
  std::vector<policy_kind> out;
  for (const auto& name : *items) {
    auto k = parse_policy(name);
    if (!k)
      return make_error(ec::invalid_argument, "--policy: " + k.err().message);
    out.push_back(*k);
  }
  return out;
}

json scenario_json(const sim_options& o) {
  const sim_config& c = o.cfg;
  json speeds = json::array();
  for (double s : c.worker_speeds)
    speeds.push_back(s);
  return json{{"trace", o.trace},
              {"workers", c.workers},
              {"worker_speeds", speeds},
              {"gpu_blocks", c.gpu_blocks},
              {"host_blocks", c.host_blocks},
              {"disk_blocks", c.disk_blocks},
              {"block_tokens", c.block_tokens},
              {"speedup", c.speedup},
              {"model_factor", c.model_factor},
              {"routers", c.routers},
              {"state_delay_ms", c.state_delay_ms},
              {"auction_ms", c.auction_ms},
              {"refuse_growth", c.refuse_growth},
              {"max_auctions", c.max_auctions},
              {"policy", o.policies},
              {"price",
               {{"beta", c.price.beta},
                {"k", c.price.k},
                {"overflow", c.price.overflow}}},
              {"seed", c.seed}};
}

int run_sim(sim_options o) {
  // A bad flag, value or trace is a usage error (2); an output that cannot
  // be written, a failure (1).
  auto say = [](const std::string& msg, int code) {
    std::fprintf(stderr, "kvmesh sim: %s\n", msg.c_str());
    return code;
  };
  auto fail = [&](const std::string& msg) { return say(msg, 2); };
  auto failed = [&](const std::string& msg) { return say(msg, 1); };
  if (!o.speeds.empty()) {
    auto s = parse_speeds(o.speeds);
    if (!s) return fail(s.err().message);
    o.cfg.worker_speeds = *s;
  }
  auto policies = parse_policies(o.policies);
  if (!policies) return fail(policies.err().message);
  if (auto st = validate(o.cfg); !st) return fail(st.err().message);
  auto trace = load_trace(o.trace);
  if (!trace) return fail(trace.err().message);
  if (!o.report_path.empty() && !trace->empty()) {
    // About queued_max_samples samples over the arrivals; the sampler
    // halves them to fit the drain after the last arrival.
    const double span =
        (trace->back().arrival_ms - trace->front().arrival_ms) / o.cfg.speedup;
    o.cfg.queued_sample_ms =
        std::max(1.0, span / static_cast<double>(o.cfg.queued_max_samples));
  }
  const oracle_result orc = oracle(o.cfg, *trace);
  std::vector<sim_result> results;
  // Percentages overwrite each other on a terminal; a log gets one line per
  // policy.
  const bool tty = isatty(fileno(stderr)) != 0;
  for (policy_kind k : *policies) {
    const auto t0 = std::chrono::steady_clock::now();
    auto progress = [&](double f) {
      if (!o.quiet && tty && f < 1)
        std::fprintf(stderr, "\rsim: %-13s %3.0f%%", to_string(k), 100 * f);
    };
    auto r = simulate(o.cfg, *trace, k, progress);
    if (!r) return fail(r.err().message);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    if (!o.quiet)
      std::fprintf(stderr,
                   "%ssim: %-13s done in %.2f s (%lu preemptions, %lu "
                   "re-auctions, %lu refused)\n",
                   tty ? "\r" : "", to_string(k), secs,
                   static_cast<unsigned long>(r->preemptions),
                   static_cast<unsigned long>(r->reauctions),
                   static_cast<unsigned long>(r->refused));
    results.push_back(std::move(*r));
  }
  print_table(orc, results);
  if (!o.json_path.empty()) {
    json doc{
        {"scenario", scenario_json(o)},
        {"oracle",
         {{"ttft_ms", to_json(orc.ttft_ms)}, {"hit_ratio", orc.hit_ratio}}},
        {"results", json::array()}};
    for (const auto& r : results)
      doc["results"].push_back(result_json(r));
    std::ofstream out(o.json_path);
    out << doc.dump(1) << "\n";
    if (!out) return failed(o.json_path + ": cannot write JSON file");
  }
  if (!o.report_path.empty()) {
    report_page page;
    page.title = "kvmesh sim";
    page.scenario = scenario_json(o);
    page.oracle = orc;
    page.results = std::move(results);
    page.queued_note =
        "Prefill work waiting at each simulated GPU (prompt tokens not yet "
        "computed, in blocks), sampled at even steps of the simulated clock.";
    if (auto st = write_report(o.report_path, page); !st)
      return failed(st.err().message);
    if (!o.quiet)
      std::fprintf(stderr, "sim: report in %s\n", o.report_path.c_str());
  }
  return 0;
}

}  // namespace

void add_fleet_options(CLI::App& cmd, sim_config& cfg) {
  cmd.add_option("--workers", cfg.workers, "simulated GPUs (WORKERs)")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--routers", cfg.routers, "router replicas")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--gpu-blocks", cfg.gpu_blocks, "GPU KV blocks per worker")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--host-blocks", cfg.host_blocks,
                 "host-memory blocks per worker (0: no tier)")
      ->capture_default_str();
  cmd.add_option("--disk-blocks", cfg.disk_blocks,
                 "disk blocks per worker (0: no tier)")
      ->capture_default_str();
  cmd.add_option("--block-tokens", cfg.block_tokens,
                 "tokens per block (512 for Mooncake traces)")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--speedup", cfg.speedup,
                 "compress arrivals: divide arrival times by X")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--seed", cfg.seed, "random seed")->capture_default_str();
}

void add_sim(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<sim_options>();
  auto* cmd = app.add_subcommand(
      "sim", "replay a trace through simulated GPUs under routing policies");
  cmd->add_option("--trace", o->trace, "JSONL trace (Mooncake format)")
      ->required();
  add_fleet_options(*cmd, o->cfg);
  cmd->add_option("--worker-speeds", o->speeds,
                  "speed factor per worker, comma-separated (default all 1)");
  cmd->add_option("--model-factor", o->cfg.model_factor,
                  "scale every engine step time by X")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--state-delay-ms", o->cfg.state_delay_ms,
                  "delay of KV events and load reports to routers")
      ->check(non_negative)
      ->capture_default_str();
  cmd->add_option("--auction-ms", o->cfg.auction_ms,
                  "kvmesh: time from call for bids to award")
      ->check(non_negative)
      ->capture_default_str();
  cmd->add_option("--refuse-growth", o->cfg.refuse_growth,
                  "kvmesh: a worker refuses an award when its queue grew by "
                  "more than X request sizes beyond what the router priced "
                  "(0: never)")
      ->check(non_negative)
      ->capture_default_str();
  cmd->add_option("--max-auctions", o->cfg.max_auctions,
                  "kvmesh: auctions per request at most (refusals re-auction)")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--policy", o->policies, "comma-separated policies, or all")
      ->capture_default_str();
  auto& price = o->cfg.price;
  cmd->add_option("--beta", price.beta, "kvmesh: weight of occupancy")
      ->check(non_negative)
      ->capture_default_str();
  cmd->add_option("--k", price.k, "kvmesh: GPU credit decay with excess queue")
      ->check(non_negative)
      ->capture_default_str();
  cmd->add_option("--overflow", price.overflow,
                  "kvmesh: price per block beyond capacity")
      ->check(non_negative)
      ->capture_default_str();
  cmd->add_option("--json", o->json_path, "also write results as JSON here");
  cmd->add_option("--report", o->report_path,
                  "also write an HTML page of charts here (self-contained)");
  cmd->add_flag("--quiet", o->quiet, "no progress on stderr");
  cmd->callback([o, &run] { run = [o] { return run_sim(*o); }; });
}

}  // namespace kvmesh::cli
