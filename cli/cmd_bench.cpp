// `kvmesh bench`: the NATS mesh as child processes, driven by a trace replay
// (the table of `kvmesh sim`) or by a closed-loop load generator, with what
// routing costs (auction latency, decisions per second, NATS messages per
// decision) and raw NATS baselines measured on the same server. The mesh,
// the load and the accounting are harness/'s; here are the flags, the
// order of the steps and what is printed.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_view.hpp"
#include "cli/commands.hpp"
#include "cli/number_flags.hpp"
#include "cli/config.hpp"
#include "cli/html_report.hpp"
#include "cli/report.hpp"
#include "cluster/mesh.hpp"
#include "core/log.hpp"
#include "core/secret.hpp"
#include "core/trace.hpp"
#include "harness/accounting.hpp"
#include "harness/baselines.hpp"
#include "harness/closed_loop.hpp"
#include "harness/launcher.hpp"
#include "harness/replay.hpp"
#include "messages/codec.hpp"

namespace kvmesh::cli {

namespace {

using harness::arg;
using harness::seconds;
using harness::steady;
using namespace bench_view;

struct bench_options {
  std::string mode = "trace";
  sim_config cfg;  // fleet, engine and price settings shared with sim
  std::string trace;
  size_t limit = 0;
  double time_scale = 1;
  uint32_t shards = 1;
  uint32_t agents = 1;
  size_t fanout = 64;
  std::string nats;  // empty: start our own nats-server
  std::string nats_server = "nats-server";
  nats_options security;  // credentials and TLS for --nats's server
  std::string data_dir;   // empty: a temporary directory, removed at exit
  std::string prefix;     // empty: kvmesh-bench-<pid>
  uint32_t heartbeat_ms = 1000;
  uint32_t threads = 0;  // each started process's; 0: split the host
  double timeout_s = 0;  // 0: a default fitting the run
  std::string json_path;
  std::string report_path;  // trace mode: an HTML page of charts
  double rate = 0;  // throughput: requests per second at most (0: no cap)
  uint64_t requests = 50000;
  uint32_t outstanding = 256;
  size_t baseline_samples = 2000;
  // Given on the command line or not: the modes' defaults differ.
  CLI::Option* workers_opt = nullptr;
  CLI::Option* routers_opt = nullptr;
  CLI::Option* fanout_opt = nullptr;
  CLI::Option* time_scale_opt = nullptr;
  std::vector<CLI::Option*> trace_only;
  std::vector<CLI::Option*> throughput_only;
};

int usage(const std::string& msg) {
  log::error(msg);
  return 2;
}

int failure(const std::string& msg) {
  log::error(msg);
  return 1;
}

json config_json(const bench_options& o, const std::string& url,
                 const std::string& prefix) {
  const sim_config& c = o.cfg;
  json j{{"mode", o.mode},
         {"workers", c.workers},
         {"routers", c.routers},
         {"agents", o.agents},
         {"shards", o.shards},
         {"fanout", o.fanout},
         {"gpu_blocks", c.gpu_blocks},
         {"host_blocks", c.host_blocks},
         {"disk_blocks", c.disk_blocks},
         {"block_tokens", c.block_tokens},
         {"model_factor", c.model_factor},
         {"refuse_growth", c.refuse_growth},
         {"max_auctions", c.max_auctions},
         {"price",
          {{"beta", c.price.beta},
           {"k", c.price.k},
           {"overflow", c.price.overflow}}},
         {"seed", c.seed},
         {"time_scale", o.time_scale},
         {"heartbeat_ms", o.heartbeat_ms},
         {"threads", o.threads},
         {"nats", url},
         {"prefix", prefix},
         {"baseline_samples", o.baseline_samples}};
  if (o.mode == "trace") {
    j["trace"] = o.trace;
    j["limit"] = o.limit;
    j["speedup"] = c.speedup;
  } else {
    j["requests"] = o.requests;
    j["outstanding"] = o.outstanding;
    j["rate"] = o.rate;
    j["output_tokens"] = harness::synthetic_output_tokens;
  }
  return j;
}

// -- the command --------------------------------------------------------------

// Checks the flags and fills in the mode's defaults; "" when fine.
std::string check_options(bench_options& o) {
  const bool throughput = o.mode == "throughput";
  if (!throughput && o.mode != "trace")
    return "--mode " + o.mode + ": trace or throughput";
  // A config file may hold both modes' keys: only flags are refused.
  for (const CLI::Option* opt : throughput ? o.trace_only : o.throughput_only)
    if (from_command_line(opt))
      return opt->get_name() + ": only for --mode " +
             (throughput ? "trace" : "throughput");
  if (throughput) {
    // A bounded fan-out on a larger fleet, so that routers ask the index;
    // fast engines, so that they do not saturate.
    if (o.workers_opt->count() == 0) o.cfg.workers = 64;
    if (o.routers_opt->count() == 0) o.cfg.routers = 1;
    if (o.fanout_opt->count() == 0) o.fanout = 16;
    if (o.time_scale_opt->count() == 0) o.time_scale = 1000;
    if (o.requests == 0) return "--requests must be at least 1";
    if (o.outstanding == 0) return "--outstanding must be at least 1";
    if (!(o.rate >= 0) || !std::isfinite(o.rate))
      return "--rate must be a number >= 0";
  } else if (o.trace.empty()) {
    return "--trace FILE is required in --mode trace";
  }
  if (auto st = validate(o.cfg); !st) return st.err().message;
  if (o.prefix.empty()) o.prefix = "kvmesh-bench-" + std::to_string(getpid());
  if (auto st = check_prefix(o.prefix); !st) return st.err().message;
  if (auto why = harness::check_layout(o.shards, o.agents, o.cfg.workers);
      !why.empty())
    return why;
  if (o.baseline_samples == 0) return "--baseline-samples must be at least 1";
  if (!(o.time_scale > 0) || !std::isfinite(o.time_scale))
    return "--time-scale must be a positive number";
  if (!(o.timeout_s >= 0) || !std::isfinite(o.timeout_s))
    return "--timeout must be a positive number";
  return {};
}

// What a run sends: the synthetic requests or the trace, the raw
// baselines' payload, and how long the run may take.
struct bench_input {
  std::shared_ptr<std::vector<trace_request>> trace =
      std::make_shared<std::vector<trace_request>>();
  std::vector<route_request_msg> requests;
  size_t payload = 0;
  double timeout_s = 0;
};

// The mode's requests; "" when they are there, else why not (bad usage).
std::string load_input(const bench_options& o, bench_input& in) {
  in.timeout_s = o.timeout_s;
  if (o.mode == "throughput") {
    in.requests =
        harness::synthetic_requests(o.requests, o.cfg.block_tokens, o.cfg.seed);
    in.payload = harness::median_payload(std::vector<route_request_msg>(
        in.requests.begin(),
        in.requests.begin() + std::min<size_t>(in.requests.size(), 10000)));
    if (in.timeout_s == 0) in.timeout_s = 600;
    return {};
  }
  auto t = load_trace(o.trace);
  if (!t) return t.err().message;
  *in.trace = std::move(*t);
  if (o.limit > 0 && o.limit < in.trace->size()) in.trace->resize(o.limit);
  in.payload = harness::trace_payload(*in.trace);
  // The replay's own length on the wall clock, and room for its tail
  // and a slow start.
  if (in.timeout_s == 0)
    in.timeout_s = in.trace->back().arrival_ms / o.cfg.speedup / o.time_scale /
                       1000 * 1.5 +
                   120;
  return {};
}

// The run's directory for logs and the index: a temporary one, or a new
// one under --data-dir, so that shards do not find an earlier run's index
// in RocksDB. "" when made.
std::string make_run_dir(harness::child_mesh& m, const bench_options& o) {
  if (o.data_dir.empty()) {
    auto dir = harness::make_temp_dir("kvmesh-bench");
    if (!dir) return dir.err().message;
    m.dir = m.temp.path = *dir;
    return {};
  }
  std::error_code ec;
  std::filesystem::create_directories(o.data_dir, ec);
  std::string d = o.data_dir + "/kvmesh-bench-XXXXXX";
  if (ec || !mkdtemp(d.data()))
    return "--data-dir " + o.data_dir + ": " +
           (ec ? ec.message() : std::strerror(errno));
  m.dir = d;
  KVMESH_INFO("logs and index in %s", d.c_str());
  return {};
}

// Threads of each process the run starts. The bench's own process counts
// too: it drives the load.
uint32_t process_threads(const bench_options& o) {
  return harness::host_share_threads(o.shards + o.agents + o.cfg.routers + 1,
                                     o.threads);
}

// Our own nats-server (no JetStream: bench does not use the durable
// queue), or --nats's with our credentials for the children; `security` is
// what this process's own connections use. "" when there is a server.
std::string start_server(harness::child_mesh& m, const bench_options& o,
                         nats_options& security) {
  if (!o.nats.empty()) {
    m.url = o.nats;
    // The children connect to that server with our credentials, read
    // from these variables beneath their own flags.
    if (auto st = check_security(o.security); !st) return st.err().message;
    export_nats_security(o.security);
    security = o.security;
    return {};
  }
  auto n = harness::start_nats(m, o.nats_server, false, process_threads(o));
  if (!n) return n.err().message;
  switch (n->what) {
    case harness::nats_start::ready:
      break;
    case harness::nats_start::stopped:
      return std::string("interrupted (") + strsignal(n->signal) + ")";
    case harness::nats_start::ended:
      return harness::why_ended(m, n->child);
    case harness::nats_start::timed_out:
      return o.nats_server + " did not accept connections on port " +
             std::to_string(n->port) + " within 10 s";
  }
  // Our own nats-server has no authorization and no TLS: the children
  // must not try what KVMESH_NATS_* of our environment may say.
  security = nats_options{};
  export_nats_security(security);
  return {};
}

// The children's command lines as `bench` has them: the tiers' credits
// and the ceiling passed to the routers, --heartbeat-ms with the common
// flags, every child's output in its log under the run's directory.
harness::launch_options launch_of(const bench_options& o,
                                  const std::string& exe,
                                  const harness::child_mesh& m) {
  harness::launch_options lo = harness::launch_for(exe, m, o.prefix, o.cfg);
  lo.shards = o.shards;
  lo.agents = o.agents;
  lo.fanout = o.fanout;
  lo.time_scale = o.time_scale;
  lo.heartbeat_ms = o.heartbeat_ms;
  lo.threads = process_threads(o);
  lo.price_costs = true;
  lo.heartbeat_first = true;
  lo.logs_in_dir = true;
  return lo;
}

// This client's connection to the mesh's server, every router heartbeat
// going to `beats`.
expected<std::unique_ptr<nats_bus>> connect_client(const std::string& url,
                                                   const nats_options& security,
                                                   const subjects& subj,
                                                   harness::beat_log& beats) {
  nats_options no = security;
  no.url = url;
  no.name = "kvmesh-bench";
  auto bus = nats_bus::connect(no);
  if (!bus) return bus.err();
  auto beat_sub =
      (*bus)->subscribe(subj.router_beat(), "", [&beats](nats_message msg) {
        if (auto s = decode<router_status>(msg.payload))
          beats.add(std::move(*s));
      });
  if (!beat_sub) return beat_sub.err();
  return bus;
}

// What the driven part of the run measured at the client.
struct bench_run {
  steady::time_point start, end;
  uint64_t client_decisions = 0;
  sim_result result;                   // trace
  harness::error_counts trace_errors;  // trace
  harness::closed_loop_result load;    // throughput
  // Raw rounds at the trace's arrivals during the replay.
  expected<baseline_result> sg_during = make_error(ec::not_found, "not run");
};

std::string drive_throughput(nats_bus& bus, const subjects& subj,
                             const bench_options& o, const bench_input& in,
                             harness::child_mesh& m, bench_run& run) {
  KVMESH_INFO("%" PRIu64 " requests, %u outstanding, rate %s", o.requests,
              o.outstanding,
              o.rate > 0 ? (arg(o.rate) + "/s").c_str() : "unlimited");
  harness::closed_loop_options lo;
  lo.outstanding = o.outstanding;
  lo.rate = o.rate;
  lo.timeout_s = in.timeout_s;
  auto r = harness::generate_load(bus, subj, lo, in.requests, m);
  if (!r) return r.err().message;
  run.load = std::move(*r);
  run.start = run.load.start;
  run.end = run.load.end;
  run.client_decisions = run.load.decided;
  return {};
}

std::string drive_trace(nats_bus& bus, const bench_options& o,
                        const bench_input& in, const nats_options& bo,
                        size_t fanout, harness::child_mesh& m, bench_run& run) {
  const auto& trace = *in.trace;
  KVMESH_INFO(
      "replaying %zu requests (speedup %g, time "
      "scale %g: about %.0f s)",
      trace.size(), o.cfg.speedup, o.time_scale,
      trace.back().arrival_ms / o.cfg.speedup / o.time_scale / 1000);
  // The queues are sampled with or without --report: the imbalance column
  // is computed from the samples. About queued_max_samples polls over the
  // arrivals, but no more than one per heartbeat: the ADMIN knows the
  // workers' queues from their heartbeats, and polling faster only repeats
  // them.
  const double span =
      (trace.back().arrival_ms - trace.front().arrival_ms) / o.cfg.speedup;
  queued_sampler sampler(
      std::max(o.heartbeat_ms * o.time_scale,
               span / static_cast<double>(o.cfg.queued_max_samples)),
      o.cfg.queued_max_samples, trace.front().arrival_ms / o.cfg.speedup);
  // A raw scatter-gather round at each arrival, beside the replay: the
  // trace's bursts and the busy host hit it as they hit the auctions,
  // which rounds before or after the run never see. Its responders live
  // in this process: their CPU is in the bench client's row.
  auto rounds = scatter_gather_rounds::open(bo, fanout, in.payload, in.payload);
  if (!rounds) return rounds.err().message;
  harness::replay_run_options ro;
  ro.prefix = o.prefix;
  ro.workers = o.cfg.workers;
  ro.speedup = o.cfg.speedup;
  ro.time_scale = o.time_scale;
  ro.heartbeat_ms = o.heartbeat_ms;
  ro.timeout_s = in.timeout_s;
  auto r = harness::replay_trace(bus, ro, in.trace, m, &sampler, rounds->get());
  if (!r) return r.err().message;
  run.sg_during = (*rounds)->finish(std::chrono::seconds(2));
  rounds->reset();
  run.result = std::move(r->result);
  // The replay cannot see every queue change as the simulator does: the
  // imbalance comes from the polled samples, NaN ("-") when too few.
  run.result.imbalance = imbalance_of(sampler.samples());
  run.result.queued_over_time = sampler.take();
  run.trace_errors = std::move(r->errors);
  run.start = r->start;
  run.end = r->end;
  run.client_decisions = run.result.requests - run.result.refused;
  return {};
}

// The load's table and JSON; whether requests were lost.
bool print_throughput(const bench_options& o, const bench_run& run, json& doc) {
  const harness::closed_loop_result& load = run.load;
  std::printf(
      "load: %" PRIu64
      " synthetic requests (8-64 blocks, half in %u "
      "prefix families), %u outstanding, rate %s; %u workers on %u "
      "agent(s), %u router(s), %u shard(s), fan-out %zu, time scale %g\n",
      o.requests, harness::synthetic_families, o.outstanding,
      o.rate > 0 ? (arg(o.rate) + "/s").c_str() : "unlimited", o.cfg.workers,
      o.agents, o.cfg.routers, o.shards, o.fanout, o.time_scale);
  print_rows(
      {{"sent", "decided", "errors", "timed_out", "late", "wall_s",
        "decisions/s", "steady_decisions/s", "rtt_p50_us", "rtt_p99_us"},
       {std::to_string(load.sent), std::to_string(load.decided),
        std::to_string(load.errors), std::to_string(load.timed_out),
        std::to_string(load.late), fmt("%.2f", seconds(run.end - run.start)),
        fmt("%.0f", load.decisions_per_s),
        fmt("%.0f", load.steady_decisions_per_s), fmt("%.0f", load.rtt_us.p50),
        fmt("%.0f", load.rtt_us.p99)}});
  std::printf(
      "steady: decisions after the first 10%% of requests were answered, "
      "per second; rtt: publish to reply at this client\n");
  print_errors(load.error_kinds);
  doc["throughput"] = {{"requests", load.requests},
                       {"sent", load.sent},
                       {"decided", load.decided},
                       {"errors", load.errors},
                       {"timed_out", load.timed_out},
                       {"late", load.late},
                       {"error_kinds", errors_json(load.error_kinds)},
                       {"wall_s", seconds(run.end - run.start)},
                       {"decisions_per_s", load.decisions_per_s},
                       {"steady_decisions_per_s", load.steady_decisions_per_s},
                       {"rtt_us", to_json(load.rtt_us)}};
  return load.errors + load.timed_out > 0;
}

// The simulator's table against the oracle, and its JSON; whether
// requests failed to route.
bool print_trace(const bench_options& o, const bench_input& in,
                 const bench_run& run, json& doc, report_page& report) {
  const oracle_result orc = oracle(o.cfg, *in.trace);
  print_table(orc, {run.result});
  doc["oracle"] = {{"ttft_ms", to_json(orc.ttft_ms)},
                   {"hit_ratio", orc.hit_ratio}};
  if (run.result.refused > 0)
    KVMESH_WARN("%" PRIu64 " requests failed to route", run.result.refused);
  print_errors(run.trace_errors);
  doc["results"].push_back(result_json(run.result));
  doc["errors"] = errors_json(run.trace_errors);
  report.oracle = orc;
  return run.result.refused > 0;
}

// The HTML report (--report) and the JSON (--json); "" when written.
std::string write_files(const bench_options& o, const std::string& url,
                        const harness::overhead_result& h,
                        const harness::baseline_report& b, const json& cpu,
                        const bench_run& run, json& doc, report_page& report) {
  if (!o.report_path.empty()) {
    report.title = "kvmesh bench";
    report.scenario = config_json(o, url, o.prefix);
    report.results = {run.result};
    report.queued_note =
        "Read work queued at each worker (blocks) as of its last "
        "heartbeat, polled from the mesh's ADMIN once per heartbeat "
        "(--heartbeat-ms " +
        std::to_string(o.heartbeat_ms) +
        " on the wall clock; lower it for a finer chart). Time on the "
        "replay's clock (the wall clock times --time-scale).";
    report.extra = report_extra(h, b, run.trace_errors);
    if (auto st = write_report(o.report_path, report); !st)
      return st.err().message;
    std::fflush(stdout);  // after the tables it describes
    KVMESH_INFO("report in %s", o.report_path.c_str());
  }
  if (!o.json_path.empty()) {
    doc["overhead"] = overhead_json(h);
    doc["cpu"] = cpu;
    doc["baseline"] = baseline_json(b);
    doc["config"] = config_json(o, url, o.prefix);
    std::ofstream out(o.json_path);
    out << doc.dump(1) << "\n";
    if (!out) return o.json_path + ": cannot write the JSON file";
  }
  return {};
}

int run_bench(bench_options o) {
  if (auto why = check_options(o); !why.empty()) return usage(why);
  const bool throughput = o.mode == "throughput";
  bench_input in;
  if (auto why = load_input(o, in); !why.empty()) return usage(why);

  // From here on only sigtimedwait takes these: no Ctrl-C lands half-way
  // through starting a child, and a child's death wakes the waits. They
  // are blocked before any thread exists (CAF, libnats), so that none of
  // those takes them either.
  std::signal(SIGCHLD, SIG_DFL);  // an inherited SIG_IGN would auto-reap
  harness::child_mesh m;
  m.signals = harness::block_signals({SIGINT, SIGTERM, SIGCHLD});
  if (auto why = make_run_dir(m, o); !why.empty()) return failure(why);
  nats_options security;
  if (auto why = start_server(m, o, security); !why.empty())
    return failure(why);
  auto exe = harness::self_exe();
  if (!exe) return failure(exe.err().message);
  const harness::launch_options launch = launch_of(o, *exe, m);
  if (auto why = harness::start_mesh(m, launch); !why.empty())
    return failure(why);

  // Declared first: it outlives the bus and its callbacks.
  harness::beat_log beats;
  subjects subj;
  subj.prefix = o.prefix;
  auto bus = connect_client(m.url, security, subj, beats);
  if (!bus) return failure(bus.err().message);
  auto close_bus = [&] { bus->reset(); };
  std::string ready = harness::wait_ready(**bus, subj, launch, m);
  if (ready.empty())
    ready = harness::wait_idle_beats(beats, m, o.cfg.routers, o.heartbeat_ms);
  if (!ready.empty()) {
    close_bus();
    return failure(ready);
  }

  // The raw baselines' connections: to the mesh's server, as this client.
  nats_options bo = security;
  bo.url = m.url;
  bo.name = "kvmesh-bench";
  const size_t fanout = std::min<size_t>(o.cfg.workers, o.fanout);
  bench_run run;
  const harness::cpu_use cpu_before = harness::cpu_now(m);
  if (auto why = throughput ? drive_throughput(**bus, subj, o, in, m, run)
                            : drive_trace(**bus, o, in, bo, fanout, m, run);
      !why.empty()) {
    close_bus();
    return failure(why);
  }
  const harness::cpu_use cpu_after = harness::cpu_now(m);
  if (auto why =
          harness::wait_end_beats(beats, m, o.cfg.routers, o.heartbeat_ms,
                                  run.start, run.end, run.client_decisions);
      !why.empty()) {
    close_bus();
    return failure(why);
  }
  const harness::overhead_result h =
      harness::overhead_of(beats, run.start, run.end);
  close_bus();
  // The baselines measure the server alone, the floor under the mesh.
  m.stop_mesh();

  json doc{{"results", json::array()}};
  report_page report;
  const bool lost = throughput ? print_throughput(o, run, doc)
                               : print_trace(o, in, run, doc, report);
  print_overhead(h);
  const json cpu = print_cpu(m, cpu_before, cpu_after, h.decisions);
  std::fflush(stdout);
  if (h.decisions != run.client_decisions)
    KVMESH_WARN("the routers counted %" PRIu64
                " decisions, the client got %" PRIu64,
                h.decisions, run.client_decisions);

  harness::baseline_report b;
  b.payload = in.payload;
  b.fanout = fanout;
  b.sg_during = std::move(run.sg_during);
  // A throughput run without --rate sends back to back: nothing to pace.
  const double rate = throughput ? o.rate : h.decisions_per_s;
  if (auto why = harness::measure_baselines(b, bo, o.baseline_samples, rate, m);
      !why.empty())
    return failure(why);
  print_baseline(b, h, redact_url(m.url));
  if (auto why = write_files(o, redact_url(m.url), h, b, cpu, run, doc, report);
      !why.empty())
    return failure(why);
  if (lost)
    KVMESH_ERROR(
        "requests failed: the mesh did not keep up on "
        "this host (see the errors above); a lower %s gives it more "
        "time per request",
        throughput ? "--outstanding or --rate" : "--time-scale");
  // Lost requests or a failed baseline make the numbers incomplete.
  return lost || !b.complete() ? 1 : 0;
}
}  // namespace

void add_bench(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<bench_options>();
  auto* cmd = app.add_subcommand(
      "bench",
      "run the mesh on NATS as child processes, drive it with a trace replay "
      "(the table of sim) or a load generator, and measure routing: auction "
      "latency, decisions per second, NATS messages per decision, and raw "
      "NATS latency on the same server");
  cmd->add_option("--mode", o->mode,
                  "trace: replay --trace on the wall clock; throughput: "
                  "synthetic requests as fast as the routers decide")
      ->check(CLI::IsMember({"trace", "throughput"}))
      ->capture_default_str();
  add_fleet_options(*cmd, o->cfg);
  o->workers_opt = cmd->get_option("--workers");
  o->routers_opt = cmd->get_option("--routers");
  o->fanout_opt =
      cmd->add_option("--fanout", o->fanout,
                      "above this many workers, bids come from the index's "
                      "holders plus the least loaded (throughput default 16)")
          ->check(positive)
          ->capture_default_str();
  cmd->add_option("--shards", o->shards, "index shard processes")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--agents", o->agents,
                  "node agent processes; the workers are split evenly")
      ->check(positive)
      ->capture_default_str();
  o->time_scale_opt =
      cmd->add_option("--time-scale", o->time_scale,
                      "run arrivals and engines X times faster than real "
                      "time (throughput default 1000)")
          ->check(positive)
          ->capture_default_str();
  cmd->add_option("--nats", o->nats,
                  "use this NATS server; default: start nats-server on a "
                  "free loopback port");
  cmd->add_option("--nats-server", o->nats_server,
                  "the nats-server program to start")
      ->capture_default_str();
  add_nats_security(*cmd, o->security);
  cmd->add_option("--prefix", o->prefix,
                  "subject prefix of the mesh (default kvmesh-bench-<pid>, "
                  "apart from any other mesh on the server)");
  cmd->add_option("--data-dir", o->data_dir,
                  "keep the children's logs and the shards' RocksDB in a new "
                  "directory under this one (default: a temporary directory "
                  "removed at exit)");
  cmd->add_option("--heartbeat-ms", o->heartbeat_ms,
                  "heartbeat period of agents, routers and shards")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--threads", o->threads,
                  "threads running each started process's actors, and the "
                  "started nats-server's GOMAXPROCS unless set (0: the "
                  "host's cores split among the processes, at least one)")
      ->check(CLI::Range(0u, harness::max_threads))
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout_s,
                  "give up the run after X s (default: the trace's length "
                  "at this speed x 1.5 + 120 s; throughput 600 s)")
      ->check(positive);
  cmd->add_option("--json", o->json_path, "also write the results as JSON");
  cmd->add_option("--baseline-samples", o->baseline_samples,
                  "round trips of each raw NATS baseline (those paced at "
                  "the run's rate: at most 15 s of them, at least 100)")
      ->check(positive)
      ->capture_default_str();
  o->trace_only = {
      cmd->add_option("--trace", o->trace, "JSONL trace (Mooncake format)"),
      cmd->add_option("--limit", o->limit, "replay only the first N requests")
          ->check(positive),
      cmd->add_option("--report", o->report_path,
                      "also write an HTML page of charts here "
                      "(self-contained); its queued-work chart has a sample "
                      "per heartbeat (--heartbeat-ms)")};
  o->throughput_only = {
      cmd->add_option("--rate", o->rate,
                      "at most R requests per second (default: no cap)")
          ->check(positive),
      cmd->add_option("--requests", o->requests, "requests to send")
          ->check(positive)
          ->capture_default_str(),
      cmd->add_option("--outstanding", o->outstanding,
                      "requests in flight at most")
          ->check(positive)
          ->capture_default_str()};
  cmd->footer(
      "Trace mode's imbal_max/mean is the time-averaged max/mean of the read "
      "work queued at the workers as their heartbeats report it, polled "
      "once per heartbeat (--heartbeat-ms); \"-\" when the run ended before "
      "two polls.\n"
      "Exit status: 0 measured, 1 the mesh failed or lost requests, 2 bad "
      "flag or value.");
  cmd->callback([o, &run] { run = [o] { return run_bench(*o); }; });
}

}  // namespace kvmesh::cli
