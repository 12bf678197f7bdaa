// The mesh as child processes: command lines, start, watch, stop.
#include "harness/launcher.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "actors/router.hpp"
#include "core/log.hpp"
#include "core/secret.hpp"
#include "messages/limits.hpp"

namespace kvmesh::harness {

namespace {

using steady = std::chrono::steady_clock;

// Twenty processes starting on a small machine take seconds; a mesh that
// is not complete after this will not be.
constexpr auto ready_limit = std::chrono::seconds(60);

// A router's flags after the common ones: identity and auction first, then
// the price weights.
std::vector<std::string> router_args(const launch_options& o, uint32_t r,
                                     const std::string& name) {
  const sim_config& cfg = o.fleet;
  std::vector<std::string> argv{
      "--name",         name,
      "--fanout",       arg(o.fanout),
      "--block-tokens", arg(cfg.block_tokens),
      "--max-auctions", arg(cfg.max_auctions),
      "--seed",         arg(router_seed(cfg.seed, r))};
  if (!o.heartbeat_first)
    argv.insert(argv.end(), {"--heartbeat-ms", arg(o.heartbeat_ms)});
  argv.insert(argv.end(),
              {"--beta", arg(cfg.price.beta), "--k", arg(cfg.price.k),
               "--overflow", arg(cfg.price.overflow)});
  if (o.price_costs)
    argv.insert(argv.end(), {"--c-host", arg(cfg.price.c_host), "--c-disk",
                             arg(cfg.price.c_disk), "--ceiling",
                             arg(cfg.price.overload_ceiling)});
  if (o.durable) argv.push_back("--durable");
  // Simulated agents may host more workers than a GPU host has.
  const uint64_t per_agent =
      (uint64_t{cfg.workers} + std::max(o.agents, 1u) - 1) /
      std::max(o.agents, 1u);
  if (per_agent > current_wire_limits().max_workers_per_agent)
    argv.insert(argv.end(), {"--max-workers-per-agent", arg(per_agent)});
  return argv;
}

// `kvmesh engine --serve` for agent `first`'s `n` GPUs: the engines of
// `kvmesh sim`'s fleet (worker `first`'s; a fleet of mixed speeds gets its
// first rank's), one data-parallel rank each.
std::vector<std::string> served_engine_args(const launch_options& o,
                                            const std::string& http,
                                            const std::string& kv,
                                            uint32_t first, uint32_t n) {
  const sim_config& cfg = o.fleet;
  const engine_config e = fleet_engine_config(cfg, first);
  return {o.exe,
          "engine",
          "--serve",
          http,
          "--model",
          o.model,
          "--data-parallel-size",
          arg(n),
          "--kv-events",
          kv,
          "--block-tokens",
          arg(cfg.block_tokens),
          "--gpu-blocks",
          arg(e.cache.gpu_blocks),
          "--host-blocks",
          arg(e.cache.host_blocks),
          "--disk-blocks",
          arg(e.cache.disk_blocks),
          "--speed",
          arg(e.speed),
          "--model-factor",
          arg(cfg.model_factor),
          "--time-scale",
          arg(o.time_scale)};
}

}  // namespace

std::string arg(double v) {
  char buf[64];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

uint32_t host_share_threads(uint32_t procs, uint32_t requested) {
  if (requested != 0) return requested;
  const uint32_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1u, cores / (procs + 1));  // + 1: the nats-server
}

std::vector<std::string> nats_server_env(uint32_t threads) {
  if (std::getenv("GOMAXPROCS") != nullptr) return {};
  return {"GOMAXPROCS=" + std::to_string(std::max(1u, threads))};
}

std::vector<std::string> sim_agent_args(const sim_config& cfg,
                                        const std::string& name, uint32_t first,
                                        uint32_t n, double time_scale) {
  return {"--engine",        "sim",
          "--name",          name,
          "--workers",       arg(n),
          "--worker-id",     arg(first),
          "--gpu-blocks",    arg(cfg.gpu_blocks),
          "--host-blocks",   arg(cfg.host_blocks),
          "--disk-blocks",   arg(cfg.disk_blocks),
          "--block-tokens",  arg(cfg.block_tokens),
          "--model-factor",  arg(cfg.model_factor),
          "--refuse-growth", arg(cfg.refuse_growth),
          "--time-scale",    arg(time_scale)};
}

std::string check_layout(uint32_t shards, uint32_t agents, uint32_t workers) {
  if (shards == 0) return "--shards must be at least 1";
  if (agents == 0) return "--agents must be at least 1";
  if (agents > workers)
    return "--agents: " + std::to_string(agents) + " agents for " +
           std::to_string(workers) +
           " workers (--workers): each agent needs one at least";
  if (workers > max_worker_id)
    return "--workers: at most " + std::to_string(max_worker_id);
  return {};
}

std::vector<planned_child> mesh_commands(const launch_options& o) {
  std::vector<planned_child> out;
  auto add = [&](const std::string& role, const std::string& name,
                 std::vector<std::string> own, const std::string& hosts) {
    std::vector<std::string> argv{o.exe, role,       "--nats",
                                  o.url, "--prefix", o.prefix};
    if (o.heartbeat_first)
      argv.insert(argv.end(), {"--heartbeat-ms", arg(o.heartbeat_ms)});
    argv.insert(argv.end(), {"--threads", arg(o.threads)});
    argv.insert(argv.end(), own.begin(), own.end());
    out.push_back({role, name, std::move(argv), hosts});
  };
  // Where the role's own flags end, when it does not come first.
  const std::vector<std::string> beat =
      o.heartbeat_first
          ? std::vector<std::string>{}
          : std::vector<std::string>{"--heartbeat-ms", arg(o.heartbeat_ms)};
  for (uint32_t i = 0; i < o.shards; ++i) {
    const std::string shard = std::to_string(i);
    std::vector<std::string> own{"--shard",
                                 shard + "/" + std::to_string(o.shards), "--db",
                                 o.dir + "/shard-" + shard};
    own.insert(own.end(), beat.begin(), beat.end());
    add("index", "shard-" + shard, std::move(own), "");
  }
  uint32_t first = 0;
  for (uint32_t a = 0; a < o.agents; ++a) {
    const uint32_t n = agent_share(o.fleet.workers, o.agents, a);
    const std::string name = "agent-" + std::to_string(first);
    std::vector<std::string> own;
    if (a < o.engines.size()) {
      const auto& e = o.engines[a];
      const std::string http = "127.0.0.1:" + arg(e.http_port);
      const std::string kv = "tcp://127.0.0.1:" + arg(e.kv_port);
      out.push_back({"engine", "engine-" + std::to_string(first),
                     served_engine_args(o, http, kv, first, n),
                     "workers " + std::to_string(first) + "-" +
                         std::to_string(first + n - 1)});
      own = {"--engine",
             "vllm",
             "--name",
             name,
             "--engine-url",
             "http://" + http,
             "--kv-events",
             kv,
             "--data-parallel-size",
             arg(n),
             "--worker-id",
             arg(first),
             "--block-tokens",
             arg(o.fleet.block_tokens),
             "--front-host",
             "127.0.0.1"};
    } else {
      own = sim_agent_args(o.fleet, name, first, n, o.time_scale);
    }
    own.insert(own.end(), beat.begin(), beat.end());
    add("agent", name, std::move(own),
        "workers " + std::to_string(first) + "-" +
            std::to_string(first + n - 1));
    first += n;
  }
  for (uint32_t r = 0; r < o.fleet.routers; ++r) {
    const std::string name = "router-" + std::to_string(r);
    add("router", name, router_args(o, r, name), "");
  }
  if (!o.gateway_listen.empty()) {
    // Not add(): the gateway's threads are its --http-threads.
    std::vector<std::string> argv{o.exe,
                                  "gateway",
                                  "--nats",
                                  o.url,
                                  "--prefix",
                                  o.prefix,
                                  "--name",
                                  "gateway-0",
                                  "--listen",
                                  o.gateway_listen,
                                  "--block-tokens",
                                  arg(o.fleet.block_tokens),
                                  "--heartbeat-ms",
                                  arg(o.heartbeat_ms)};
    out.push_back({"gateway", "gateway-0", std::move(argv), ""});
  }
  return out;
}

std::vector<std::string> nats_command(const std::string& program, int port,
                                      const std::string& dir, bool jetstream) {
  std::vector<std::string> argv{program, "-a", "127.0.0.1", "-p",
                                std::to_string(port)};
  if (jetstream) argv.insert(argv.end(), {"-js", "-sd", dir + "/jetstream"});
  argv.insert(argv.end(), {"-l", dir + "/nats-server.log"});
  return argv;
}

void stop_procs(std::vector<child_proc>& procs, int sig) {
  std::vector<pid_t> pids;
  for (const auto& p : procs)
    pids.push_back(p.pid);
  std::vector<int> statuses;
  stop_children(pids, std::chrono::seconds(5), statuses, sig);
  for (size_t i = 0; i < procs.size(); ++i) {
    if (procs[i].pid <= 0) continue;
    const int st = statuses[i];
    if (st == -1)
      KVMESH_WARN("%s %s (pid %d) did not stop within 5 s: killed",
                  procs[i].role.c_str(), procs[i].name.c_str(), procs[i].pid);
    else if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) &&
             !(WIFSIGNALED(st) && WTERMSIG(st) == sig))
      KVMESH_WARN("%s %s (pid %d) %s while stopping", procs[i].role.c_str(),
                  procs[i].name.c_str(), procs[i].pid,
                  describe_exit(st).c_str());
    procs[i].pid = -1;
  }
}

std::string child_mesh::log_of(const child_proc& p) const {
  return dir + "/" + (p.role == "nats-server" ? p.role : p.name) + ".log";
}

int wait_signal(child_mesh& m, int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  const int sig = sigtimedwait(&m.signals, nullptr, &ts);
  return sig == SIGINT || sig == SIGTERM ? sig : 0;
}

std::optional<ended_child> reap_one(child_mesh& m) {
  int st = 0;
  pid_t pid = 0;
  while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
    for (auto* list : {&m.procs, &m.nats})
      for (auto& p : *list)
        if (p.pid == pid) {
          ended_child e{p, st};
          p.pid = -1;
          return e;
        }
  return std::nullopt;
}

std::string why_ended(const child_mesh& m, const ended_child& e) {
  const std::string tail = file_tail(m.log_of(e.proc), 10);
  return e.proc.role + " " + e.proc.name + " (pid " +
         std::to_string(e.proc.pid) + ") " + describe_exit(e.status) +
         (tail.empty() ? "" : "; its log ends:\n" + tail);
}

std::string watch(child_mesh& m, int ms) {
  if (const int sig = wait_signal(m, ms); sig != 0)
    return std::string("interrupted (") + strsignal(sig) + ")";
  if (auto e = reap_one(m)) return why_ended(m, *e);
  return {};
}

expected<nats_start> start_nats(child_mesh& m, const std::string& program,
                                bool jetstream, uint32_t threads) {
  auto port = free_loopback_port();
  if (!port) return port.err();
  nats_start out;
  out.port = *port;
  child_proc p{"nats-server", "", -1};
  out.log = m.log_of(p);
  child_options co;
  co.env = nats_server_env(threads);
  auto pid = spawn_child(nats_command(program, *port, m.dir, jetstream), co);
  if (!pid) return pid.err();
  p.pid = *pid;
  p.name = "nats://127.0.0.1:" + std::to_string(*port);
  m.nats.push_back(p);
  const auto deadline = steady::now() + std::chrono::seconds(10);
  while (!loopback_accepting(*port)) {
    if (const int sig = wait_signal(m, 50); sig != 0) {
      out.what = nats_start::stopped;
      out.signal = sig;
      return out;
    }
    if (auto e = reap_one(m)) {
      out.what = nats_start::ended;
      out.child = *e;
      return out;
    }
    if (steady::now() > deadline) {
      out.what = nats_start::timed_out;
      return out;
    }
  }
  m.url = p.name;
  return out;
}

launch_options launch_for(const std::string& exe, const child_mesh& m,
                          const std::string& prefix, const sim_config& fleet) {
  launch_options o;
  o.exe = exe;
  o.url = m.url;
  o.prefix = prefix;
  o.dir = m.dir;
  o.fleet = fleet;
  return o;
}

std::string start_mesh(
    child_mesh& m, const launch_options& o,
    const std::function<void(const planned_child&, pid_t)>& started) {
  for (const planned_child& c : mesh_commands(o)) {
    child_proc p{c.role, c.name, -1};
    child_options co;
    if (o.logs_in_dir) co.output = m.log_of(p);
    auto pid = spawn_child(c.argv, co);
    if (!pid) return c.role + " " + c.name + ": " + pid.err().message;
    p.pid = *pid;
    m.procs.push_back(p);
    if (started) started(c, *pid);
  }
  return {};
}

std::string wait_ready(nats_bus& bus, const subjects& subj,
                       const launch_options& o, child_mesh& m) {
  const auto t0 = steady::now();
  const auto deadline = t0 + ready_limit;
  const uint32_t workers = o.fleet.workers, routers_wanted = o.fleet.routers;
  size_t live = 0, routers = 0, complete = 0, shards = 0;
  std::string last_error;
  while (true) {
    if (auto why = watch(m, 250); !why.empty()) return why;
    auto call = [&](const char* verb) -> expected<admin_reply> {
      auto r =
          admin_request_call(bus, subj, verb, admin_request{}, admin_timeout);
      if (!r) last_error = std::string(verb) + ": " + r.err().message;
      return r;
    };
    if (auto w = call("workers")) {
      live = 0;
      for (const auto& s : w->workers)
        live += !s.gone && !s.draining;
    }
    if (auto r = call("routers")) {
      routers = r->routers.size();
      complete = 0;
      for (const auto& s : r->routers)
        complete += s.live_workers == workers;
    }
    if (auto s = call("shards")) shards = s->shards.size();
    if (live == workers && routers == routers_wanted &&
        complete == routers_wanted && shards == o.shards)
      break;
    if (steady::now() > deadline)
      return "the mesh was not ready within " +
             std::to_string(ready_limit.count()) +
             " s: " + std::to_string(live) + " of " + std::to_string(workers) +
             " workers live, " + std::to_string(routers) + " of " +
             std::to_string(routers_wanted) + " routers (" +
             std::to_string(complete) + " knowing every worker), " +
             std::to_string(shards) + " of " + std::to_string(o.shards) +
             " index shards" +
             (last_error.empty() ? "" : "; last error: " + last_error);
  }
  KVMESH_INFO(
      "mesh ready in %.1f s: %u workers on %u "
      "agent(s), %u router(s), %u index shard(s) on %s",
      std::chrono::duration<double>(steady::now() - t0).count(), workers,
      o.agents, routers_wanted, o.shards, redact_url(m.url).c_str());
  return {};
}

}  // namespace kvmesh::harness
