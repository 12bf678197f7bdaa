// `kvmesh up --embedded`: the whole mesh (WORKERs with simulated GPUs and
// ROUTERs) in one process; with --trace it replays a trace through it on
// the wall clock and prints the same table as `kvmesh sim`.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <future>
#include <thread>

#include "actors/index_shard.hpp"
#include "actors/replay.hpp"
#include "actors/router.hpp"
#include "actors/worker.hpp"
#include "cli/commands.hpp"
#include "cli/report.hpp"

namespace kvmesh::cli {

namespace {

struct up_options {
  bool embedded = false;
  uint32_t shards = 1;
  size_t fanout = 64;
  std::string data_dir;
  std::string trace;
  std::string json_path;
  double time_scale = 1;
  double timeout_s = 3600;
  sim_config cfg;  // fleet, engine and price settings shared with sim
};

volatile std::sig_atomic_t interrupted = 0;

int run_up(const up_options& o) {
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "kvmesh up: %s\n", msg.c_str());
    return 2;
  };
  if (!o.embedded)
    return fail(
        "only --embedded (one process, in-process bus) is available "
        "so far; the NATS mesh comes with `kvmesh agent` and "
        "`kvmesh router`");
  const sim_config& cfg = o.cfg;
  if (auto st = validate(cfg); !st) return fail(st.err().message);
  std::shared_ptr<std::vector<trace_request>> trace;
  if (!o.trace.empty()) {
    auto t = load_trace(o.trace);
    if (!t) return fail(t.err().message);
    trace = std::make_shared<std::vector<trace_request>>(std::move(*t));
  }
  caf::actor_system_config sys_cfg;
  register_types(sys_cfg);
  caf::actor_system sys{sys_cfg};

  auto promise = std::make_shared<std::promise<sim_result>>();
  auto result = promise->get_future();
  replay_actor client;
  if (trace) {
    replay_options ro;
    ro.trace = trace;
    ro.workers = cfg.workers;
    ro.speedup = cfg.speedup;
    ro.time_scale = o.time_scale;
    ro.done = promise;
    client = sys.spawn(replay, ro);
  }
  // Index shards: RocksDB under --data-dir, else in memory only.
  std::vector<index_shard_actor> shards;
  for (uint32_t i = 0; i < o.shards; ++i) {
    index_shard_options so;
    so.shard = i;
    if (!o.data_dir.empty())
      so.dir = o.data_dir + "/shard-" + std::to_string(i);
    auto s = spawn_index_shard(sys, so);
    if (!s)
      return fail("index shard " + std::to_string(i) + ": " + s.err().message);
    shards.push_back(*s);
  }
  std::vector<worker_actor> workers;
  for (uint32_t w = 0; w < cfg.workers; ++w) {
    worker_options wo;
    wo.engine = fleet_engine_config(cfg, w);
    auto probe = engine::make(wo.engine);
    if (!probe) return fail(probe.err().message);
    wo.ledger = fleet_worker_config(cfg, w, *probe);
    wo.time_scale = o.time_scale;
    wo.listener = client;
    wo.shards = shards;
    auto a = spawn_worker(sys, wo);
    if (!a) return fail(a.err().message);
    workers.push_back(*a);
  }
  std::vector<router_actor> routers;
  for (uint32_t r = 0; r < cfg.routers; ++r) {
    router_options ro;
    ro.workers = workers;
    for (uint32_t w = 0; w < cfg.workers; ++w)
      ro.speeds.push_back(cfg.worker_speeds.empty() ? 1.0
                                                    : cfg.worker_speeds[w]);
    ro.price = cfg.price;
    ro.max_auctions = cfg.max_auctions;
    ro.block_tokens = cfg.block_tokens;
    ro.seed = router_seed(cfg.seed, r);
    ro.shards = shards;
    // Heartbeats every second of engine time, whatever the time scale.
    ro.heartbeat = std::max<caf::timespan>(
        std::chrono::milliseconds(10),
        std::chrono::duration_cast<caf::timespan>(
            std::chrono::duration<double>(1.0 / o.time_scale)));
    ro.fanout = o.fanout;
    routers.push_back(sys.spawn(router, ro));
  }
  std::fprintf(stderr,
               "kvmesh up: %u workers, %u routers, %u index shards in one "
               "process (time scale %g)\n",
               cfg.workers, cfg.routers, o.shards, o.time_scale);
  auto shutdown = [&] {
    for (auto& w : workers)
      caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    for (auto& r : routers)
      caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
    for (auto& s : shards)
      caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    if (client) caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
  };
  std::signal(SIGINT, [](int) { interrupted = 1; });
  std::signal(SIGTERM, [](int) { interrupted = 1; });
  if (!trace) {
    std::fprintf(stderr, "kvmesh up: running; Ctrl-C stops\n");
    while (!interrupted)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    shutdown();
    return 0;
  }
  caf::anon_send(client, start_atom::value, routers);
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(o.timeout_s));
  while (result.wait_for(std::chrono::milliseconds(100)) !=
         std::future_status::ready) {
    if (interrupted || std::chrono::steady_clock::now() > deadline) {
      shutdown();
      return fail(interrupted ? "interrupted before the replay ended"
                              : "the replay did not end within --timeout");
    }
  }
  const sim_result res = result.get();
  shutdown();
  print_table(oracle(cfg, *trace), {res});
  if (res.refused > 0)
    std::fprintf(stderr, "kvmesh up: %lu requests failed to route\n",
                 static_cast<unsigned long>(res.refused));
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << json{{"results", json::array({result_json(res)})}}.dump(1) << "\n";
    if (!out) return fail(o.json_path + ": cannot write JSON file");
  }
  return 0;
}

}  // namespace

void add_up(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<up_options>();
  auto* cmd = app.add_subcommand(
      "up", "run the mesh; --embedded: workers and routers in this process");
  cmd->add_flag("--embedded", o->embedded,
                "one process on the in-process bus, simulated GPUs");
  o->cfg.workers = 4;  // up's default fleet is smaller than sim's
  add_fleet_options(*cmd, o->cfg);
  cmd->add_option("--fanout", o->fanout,
                  "above this many workers, bids come from the index's "
                  "holders plus the least loaded")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--shards", o->shards, "INDEX SHARD actors")
      ->capture_default_str();
  cmd->add_option("--data-dir", o->data_dir, "where shards keep RocksDB");
  cmd->add_option("--trace", o->trace, "replay this JSONL trace, then exit");
  cmd->add_option("--time-scale", o->time_scale,
                  "run arrivals and engines X times faster than real time")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout_s, "give up a replay after X s")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--json", o->json_path, "also write the result as JSON");
  cmd->callback([o, &run] { run = [o] { return run_up(*o); }; });
}

}  // namespace kvmesh::cli
