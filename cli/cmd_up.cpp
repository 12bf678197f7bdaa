// `kvmesh up`: the mesh on NATS as child processes (nats-server, index
// shards, node agents, routers) until Ctrl-C; with --embedded, the whole mesh
// (WORKERs with simulated GPUs and ROUTERs) in one process, where --trace
// replays a trace through it on the wall clock and prints the same table as
// `kvmesh sim`.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <thread>

#include "actors/index_shard.hpp"
#include "actors/replay.hpp"
#include "actors/router.hpp"
#include "actors/worker.hpp"
#include "cli/commands.hpp"
#include "cli/config.hpp"
#include "cli/mesh_flags.hpp"
#include "cli/number_flags.hpp"
#include "cli/report.hpp"
#include "core/log.hpp"
#include "core/secret.hpp"
#include "harness/launcher.hpp"

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
  // The mesh on NATS (without --embedded).
  std::string nats;  // empty: start our own nats-server
  std::string nats_server = "nats-server";
  nats_options security;  // credentials and TLS for --nats's server
  std::string prefix = "kvmesh";
  uint32_t agents = 1;
  uint32_t heartbeat_ms = 1000;
  uint32_t threads = 0;  // each started process's; 0: split the host
  bool durable = false;
  // HOST:PORT: the mesh serves the OpenAI API there (a gateway), its GPUs
  // simulated engines served as vLLM serves real ones.
  std::string gateway;
  std::string model = "kvmesh-sim";
  // Flags of one mode only, to reject them in the other.
  std::vector<CLI::Option*> replay_only;
  std::vector<CLI::Option*> mesh_only;
};

volatile std::sig_atomic_t interrupted = 0;

int run_up_mesh(const up_options& o);

// Bad usage exits 2; a mesh that could not run, 1.
int fail(const std::string& msg) {
  log::error(msg);
  return 2;
}

int die(const std::string& msg) {
  log::error(msg);
  return 1;
}

int run_up(const up_options& o) {
  if (!o.embedded) return run_up_mesh(o);
  // A config file may serve both modes: only flags are refused.
  for (const CLI::Option* opt : o.mesh_only)
    if (from_command_line(opt))
      return fail(opt->get_name() +
                  ": only for the NATS mesh (without "
                  "--embedded)");
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
  tune_for_latency(sys_cfg);
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
  KVMESH_INFO(
      "%u workers, %u routers, %u index shards in one "
      "process (time scale %g)",
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
    KVMESH_INFO("running; Ctrl-C stops");
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
  sim_result res = result.get();
  // The in-process replay does not sample the workers' queues: no
  // imbalance to show ("-"), rather than the 0.00 its definition forbids.
  res.imbalance = std::nan("");
  shutdown();
  print_table(oracle(cfg, *trace), {res});
  if (res.refused > 0)
    KVMESH_WARN("%lu requests failed to route",
                static_cast<unsigned long>(res.refused));
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << json{{"results", json::array({result_json(res)})}}.dump(1) << "\n";
    if (!out) return fail(o.json_path + ": cannot write JSON file");
  }
  return 0;
}

// -- the mesh on NATS, as child processes ---------------------------------

// The mesh mode's checks of the flags: "" when fine.
std::string check_mesh_options(const up_options& o) {
  const sim_config& cfg = o.cfg;
  for (const CLI::Option* opt : o.replay_only)
    if (from_command_line(opt))
      return opt->get_name() +
             ": replays run only --embedded so far (one process)";
  if (auto st = validate(cfg); !st) return st.err().message;
  if (auto st = check_prefix(o.prefix); !st) return st.err().message;
  std::string host;
  int port = 0;
  if (!o.gateway.empty() && !split_listen(o.gateway, host, port))
    return "--gateway: '" + o.gateway + "' is not HOST:PORT (port 0 to 65535)";
  if (o.model.empty()) return "--model: empty";
  return harness::check_layout(o.shards, o.agents, cfg.workers);
}

// --data-dir, made if missing, or a temporary directory removed at exit:
// "" when there is one.
std::string make_data_dir(harness::child_mesh& m, const up_options& o) {
  if (o.data_dir.empty()) {
    auto t = harness::make_temp_dir("kvmesh-up");
    if (!t) return t.err().message;
    m.dir = m.temp.path = *t;
    return {};
  }
  m.dir = o.data_dir;
  std::error_code ec;
  std::filesystem::create_directories(m.dir, ec);
  if (ec) return "--data-dir " + m.dir + ": " + ec.message();
  return {};
}

// Starts our own nats-server with JetStream (so that routers take the
// durable queue too) and says so; nullopt when it accepts connections,
// else the exit code (0 when a signal stopped us meanwhile).
std::optional<int> start_own_nats(harness::child_mesh& m, const up_options& o,
                                  uint32_t threads) {
  auto n = harness::start_nats(m, o.nats_server, true, threads);
  if (!n) return die(n.err().message);
  switch (n->what) {
    case harness::nats_start::ready:
      break;
    case harness::nats_start::ended: {
      const std::string tail = harness::file_tail(n->log, 10);
      return die(o.nats_server + " (pid " + std::to_string(n->child.proc.pid) +
                 ") " + harness::describe_exit(n->child.status) +
                 " before accepting connections" +
                 (tail.empty() ? "" : "; its log ends:\n" + tail));
    }
    case harness::nats_start::timed_out:
      m.stop();
      return die(o.nats_server + " did not accept connections on port " +
                 std::to_string(n->port) + " within 10 s (log: " + n->log +
                 ")");
    case harness::nats_start::stopped:
      m.stop();
      return 0;
  }
  std::printf("nats-server %s pid %d\n", m.url.c_str(), m.nats[0].pid);
  // Ours has no authorization and no TLS: the children must not try
  // what KVMESH_NATS_* of our environment may say.
  export_nats_security(nats_options{});
  return std::nullopt;
}

// The children's command lines as `up` has them: JetStream-capable routers
// (--durable), no tier credits, --heartbeat-ms among each role's flags.
harness::launch_options launch_of(const up_options& o, const std::string& exe,
                                  const harness::child_mesh& m,
                                  uint32_t threads) {
  harness::launch_options lo = harness::launch_for(exe, m, o.prefix, o.cfg);
  lo.shards = o.shards;
  lo.agents = o.agents;
  lo.fanout = o.fanout;
  lo.time_scale = o.time_scale;
  lo.heartbeat_ms = o.heartbeat_ms;
  lo.threads = threads;
  lo.durable = o.durable;
  return lo;
}

// With --gateway: the loopback ports of each agent's served engine (HTTP,
// and one KV event port per rank); "" when there are.
std::string plan_served_engines(const up_options& o,
                                harness::launch_options& lo) {
  if (o.gateway.empty()) return {};
  lo.gateway_listen = o.gateway;
  lo.model = o.model;
  for (uint32_t a = 0; a < o.agents; ++a) {
    auto http = harness::free_loopback_port();
    if (!http) return http.err().message;
    auto kv = harness::free_loopback_port(
        harness::agent_share(o.cfg.workers, o.agents, a));
    if (!kv) return kv.err().message;
    lo.engines.push_back({*http, *kv});
  }
  return {};
}

// Until a signal, or until a child ends: none should on its own. The exit
// code: 0 after a signal, 1 when a child ended.
int supervise(harness::child_mesh& m) {
  bool failed = false;
  while (!failed) {
    if (const int sig = harness::wait_signal(m, 200); sig != 0) {
      KVMESH_INFO("%s: stopping", strsignal(sig));
      break;
    }
    while (auto e = harness::reap_one(m)) {
      KVMESH_ERROR(
          "%s %s (pid %d) %s (its messages are above; the "
          "mesh stops)",
          e->proc.role.c_str(), e->proc.name.c_str(), e->proc.pid,
          harness::describe_exit(e->status).c_str());
      failed = true;
    }
  }
  if (failed) KVMESH_INFO("stopping the mesh");
  m.stop();
  return failed ? 1 : 0;
}

int run_up_mesh(const up_options& o) {
  if (auto why = check_mesh_options(o); !why.empty()) return fail(why);
  const sim_config& cfg = o.cfg;
  auto exe = harness::self_exe();
  if (!exe) return die(exe.err().message);

  // From here on only sigtimedwait takes these: no Ctrl-C lands half-way
  // through starting a child, and a child's death wakes the loop below.
  // Children start in their own process groups, so a Ctrl-C on the
  // terminal reaches only us, and we stop them in order.
  std::signal(SIGCHLD, SIG_DFL);  // an inherited SIG_IGN would auto-reap
  harness::child_mesh m;
  m.signals = harness::block_signals({SIGINT, SIGTERM, SIGCHLD});
  if (auto why = make_data_dir(m, o); !why.empty()) return die(why);

  const uint32_t threads =
      harness::host_share_threads(o.shards + o.agents + cfg.routers, o.threads);
  if (o.nats.empty()) {
    if (auto rc = start_own_nats(m, o, threads)) return *rc;
  } else {
    m.url = o.nats;
    std::printf("nats-server %s (not ours)\n", redact_url(m.url).c_str());
    // The children connect with our credentials, read from these
    // variables beneath their own flags (never on their command lines).
    if (auto st = check_security(o.security); !st) {
      m.stop();
      return fail(st.err().message);
    }
    export_nats_security(o.security);
  }
  std::fflush(stdout);

  const auto print = [](const harness::planned_child& c, pid_t pid) {
    std::printf("%s %s pid %d%s\n", c.role.c_str(), c.name.c_str(), pid,
                c.hosts.empty() ? "" : (" " + c.hosts).c_str());
    std::fflush(stdout);
  };
  harness::launch_options lo = launch_of(o, *exe, m, threads);
  if (auto why = plan_served_engines(o, lo); !why.empty()) {
    m.stop();
    return die(why);
  }
  if (auto why = harness::start_mesh(m, lo, print); !why.empty()) {
    KVMESH_ERROR("%s", why.c_str());
    m.stop();
    return 1;
  }
  KVMESH_INFO(
      "%u workers on %u agent(s), %u router(s), %u index "
      "shard(s) on %s (data %s%s); Ctrl-C stops",
      cfg.workers, o.agents, cfg.routers, o.shards, redact_url(m.url).c_str(),
      m.dir.c_str(), m.temp.path.empty() ? "" : ", removed at exit");
  if (!o.gateway.empty()) {
    std::printf("OpenAI API: http://%s/v1 (model %s)\n", o.gateway.c_str(),
                o.model.c_str());
    std::fflush(stdout);
  }
  return supervise(m);
}

}  // namespace

void add_up(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<up_options>();
  auto* cmd = app.add_subcommand(
      "up",
      "run the mesh until Ctrl-C: nats-server (unless --nats), index shards, "
      "node agents with simulated GPUs and routers as child processes; "
      "--embedded: workers and routers in this process");
  cmd->add_flag("--embedded", o->embedded,
                "one process on the in-process bus, simulated GPUs");
  o->cfg.workers = 4;  // up's default fleet is smaller than sim's
  add_fleet_options(*cmd, o->cfg);
  cmd->add_option("--fanout", o->fanout,
                  "above this many workers, bids come from the index's "
                  "holders plus the least loaded")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--shards", o->shards, "INDEX SHARD actors (processes)")
      ->capture_default_str();
  cmd->add_option("--data-dir", o->data_dir,
                  "where shards keep RocksDB (and nats-server JetStream); "
                  "default without --embedded: a temporary directory "
                  "removed at exit");
  o->replay_only = {
      cmd->add_option("--trace", o->trace,
                      "replay this JSONL trace, then exit (--embedded)"),
      cmd->add_option("--timeout", o->timeout_s,
                      "give up a replay after X s (--embedded)")
          ->check(positive)
          ->capture_default_str(),
      cmd->add_option("--json", o->json_path,
                      "also write the result as JSON (--embedded)")};
  cmd->add_option("--time-scale", o->time_scale,
                  "run arrivals and engines X times faster than real time")
      ->check(positive)
      ->capture_default_str();
  o->mesh_only = {
      cmd->add_option("--nats", o->nats,
                      "use this NATS server (comma-separated URLs); default: "
                      "start nats-server with JetStream on a free loopback "
                      "port"),
      cmd->add_option("--nats-server", o->nats_server,
                      "the nats-server program to start")
          ->capture_default_str(),
      cmd->add_option("--agents", o->agents,
                      "node agents; the workers are split evenly among them")
          ->capture_default_str(),
      cmd->add_option("--prefix", o->prefix, "subject prefix of the mesh")
          ->capture_default_str(),
      cmd->add_option("--heartbeat-ms", o->heartbeat_ms,
                      "heartbeat period of agents, routers and shards")
          ->check(positive)
          ->capture_default_str(),
      cmd->add_option("--threads", o->threads,
                      "threads running each started process's actors, and "
                      "the started nats-server's GOMAXPROCS unless set (0: "
                      "the host's cores split among the processes, at "
                      "least one)")
          ->check(CLI::Range(0u, harness::max_threads))
          ->capture_default_str(),
      cmd->add_flag("--durable", o->durable,
                    "routers take the durable JetStream queue too (the "
                    "nats-server up starts has JetStream on)"),
      cmd->add_option("--gateway", o->gateway,
                      "HOST:PORT: serve the OpenAI API there (a gateway); "
                      "each agent then drives simulated GPUs served as "
                      "vLLM serves real ones (kvmesh engine --serve)"),
      cmd->add_option("--model", o->model,
                      "with --gateway: the model the simulated GPUs serve")
          ->capture_default_str()};
  // Of the mesh mode too: a config file serving both modes may hold them.
  add_nats_security(*cmd, o->security);
  cmd->footer(
      "A --trace replay's table has no imbal_max/mean (\"-\"): the "
      "in-process replay does not sample the workers' queues; kvmesh sim "
      "and kvmesh bench measure it.");
  cmd->callback([o, &run] { run = [o] { return run_up(*o); }; });
}

}  // namespace kvmesh::cli
