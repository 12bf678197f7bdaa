// `kvmesh bench`: the NATS mesh as child processes, driven by a trace replay
// (the table of `kvmesh sim`) or by a closed-loop load generator, with what
// routing costs (auction latency, decisions per second, NATS messages per
// decision) and raw NATS baselines measured on the same server.
#include <sys/wait.h>
#include <unistd.h>

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "actors/replay.hpp"
#include "actors/router.hpp"
#include "cli/commands.hpp"
#include "cli/config.hpp"
#include "cli/html_report.hpp"
#include "cli/process.hpp"
#include "cli/report.hpp"
#include "cluster/bridge.hpp"
#include "cluster/mesh.hpp"
#include "cluster/nats_baseline.hpp"
#include "core/log.hpp"
#include "core/pricing.hpp"
#include "core/stats.hpp"
#include "core/trace.hpp"
#include "messages/codec.hpp"

namespace kvmesh::cli {

namespace {

using steady = std::chrono::steady_clock;

constexpr const char* cmd_name = "bench";

// Twenty processes starting on a small machine take seconds; a mesh that
// is not complete after this will not be.
constexpr auto ready_limit = std::chrono::seconds(60);
// A load-generator request unanswered this long is lost: the routers'
// own deadlines are tens of milliseconds.
constexpr auto request_timeout = std::chrono::seconds(5);
// Synthetic requests generate little, so that engines keep up with the
// routers and the measurement is of routing, not of a saturated fleet.
constexpr uint32_t synthetic_output_tokens = 16;
constexpr uint32_t synthetic_families = 100;
// How long an admin call may take while the mesh starts.
constexpr auto admin_timeout = std::chrono::milliseconds(1000);

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

double seconds(steady::duration d) {
  return std::chrono::duration<double>(d).count();
}

// -- the mesh's processes -------------------------------------------------

// Our nats-server and the mesh's processes, stopped in order however the
// run ends: the mesh first, while it can still say goodbye on NATS.
struct mesh_procs {
  sigset_t signals{};
  temp_dir_guard temp;  // first: removed after the children stopped
  std::string dir;
  std::string url;
  std::vector<child_proc> nats;
  std::vector<child_proc> procs;
  mesh_procs() = default;
  mesh_procs(const mesh_procs&) = delete;
  mesh_procs& operator=(const mesh_procs&) = delete;
  ~mesh_procs() { stop(); }
  void stop_mesh() { stop_procs(procs, SIGTERM, cmd_name); }
  // nats-server exits 1 on SIGTERM but 0 on SIGINT, its clean shutdown.
  void stop() {
    stop_mesh();
    stop_procs(nats, SIGINT, cmd_name);
  }
  std::string log_of(const child_proc& p) const {
    return dir + "/" + (p.role == "nats-server" ? p.role : p.name) + ".log";
  }
};

// Waits up to `ms` for SIGINT or SIGTERM and reaps children that ended:
// "" while all is well, else why the run must end.
std::string watch(mesh_procs& m, int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  const int sig = sigtimedwait(&m.signals, nullptr, &ts);
  if (sig == SIGINT || sig == SIGTERM)
    return std::string("interrupted (") + strsignal(sig) + ")";
  int st = 0;
  pid_t pid = 0;
  while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
    for (auto* list : {&m.procs, &m.nats})
      for (auto& p : *list)
        if (p.pid == pid) {
          p.pid = -1;
          const std::string tail = file_tail(m.log_of(p), 10);
          return p.role + " " + p.name + " (pid " + std::to_string(pid) + ") " +
                 describe_exit(st) +
                 (tail.empty() ? "" : "; its log ends:\n" + tail);
        }
  return {};
}

// Threads of each process the run starts. The bench's own process counts
// too: it drives the load.
uint32_t process_threads(const bench_options& o) {
  return host_share_threads(o.shards + o.agents + o.cfg.routers + 1, o.threads);
}

// Starts nats-server on a free loopback port (no JetStream: bench does not
// use the durable queue) and waits until it accepts connections.
std::string start_nats(mesh_procs& m, const bench_options& o) {
  auto port = free_loopback_port();
  if (!port) return port.err().message;
  child_proc p{"nats-server", "", -1};
  const std::string log = m.log_of(p);
  child_options co;
  co.env = nats_server_env(process_threads(o));
  auto pid = spawn_child({o.nats_server, "-a", "127.0.0.1", "-p",
                          std::to_string(*port), "-l", log},
                         co);
  if (!pid) return pid.err().message;
  p.pid = *pid;
  p.name = "nats://127.0.0.1:" + std::to_string(*port);
  m.nats.push_back(p);
  const auto deadline = steady::now() + std::chrono::seconds(10);
  while (!loopback_accepting(*port)) {
    if (auto why = watch(m, 50); !why.empty()) return why;
    if (steady::now() > deadline)
      return o.nats_server + " did not accept connections on port " +
             std::to_string(*port) + " within 10 s";
  }
  m.url = p.name;
  return {};
}

// Starts index shards, node agents and routers as children of this binary,
// with the flags that make their engines and auctions those of
// `kvmesh sim` for the same fleet (as `kvmesh up` starts them).
std::string start_mesh(mesh_procs& m, const bench_options& o,
                       const std::string& prefix) {
  auto exe = self_exe();
  if (!exe) return exe.err().message;
  const sim_config& cfg = o.cfg;
  const uint32_t threads = process_threads(o);
  auto start = [&](const std::string& role, const std::string& name,
                   std::vector<std::string> argv) -> std::string {
    argv.insert(argv.begin(), {*exe, role, "--nats", m.url, "--prefix", prefix,
                               "--heartbeat-ms", arg(o.heartbeat_ms),
                               "--threads", arg(threads)});
    child_proc p{role, name, -1};
    child_options co;
    co.output = m.log_of(p);
    auto pid = spawn_child(argv, co);
    if (!pid) return role + " " + name + ": " + pid.err().message;
    p.pid = *pid;
    m.procs.push_back(p);
    return {};
  };
  for (uint32_t i = 0; i < o.shards; ++i) {
    const std::string shard = std::to_string(i);
    if (auto why = start("index", "shard-" + shard,
                         {"--shard", shard + "/" + std::to_string(o.shards),
                          "--db", m.dir + "/shard-" + shard});
        !why.empty())
      return why;
  }
  // As `up` splits them: evenly, the first agents taking one more when
  // they do not divide; ids contiguous per agent. An agent builds worker
  // `id`'s engine with fleet_engine_config(cfg, id), as sim does.
  uint32_t first = 0;
  for (uint32_t a = 0; a < o.agents; ++a) {
    const uint32_t n = agent_share(cfg.workers, o.agents, a);
    const std::string name = "agent-" + std::to_string(first);
    if (auto why = start("agent", name,
                         sim_agent_args(cfg, name, first, n, o.time_scale));
        !why.empty())
      return why;
    first += n;
  }
  // Router r gets sim's seed of replica r; the price weights are passed
  // even where they are the defaults, so that both sides read one config.
  for (uint32_t r = 0; r < cfg.routers; ++r) {
    const std::string name = "router-" + std::to_string(r);
    if (auto why = start("router", name,
                         {"--name",
                          name,
                          "--fanout",
                          arg(o.fanout),
                          "--block-tokens",
                          arg(cfg.block_tokens),
                          "--max-auctions",
                          arg(cfg.max_auctions),
                          "--seed",
                          arg(router_seed(cfg.seed, r)),
                          "--beta",
                          arg(cfg.price.beta),
                          "--k",
                          arg(cfg.price.k),
                          "--overflow",
                          arg(cfg.price.overflow),
                          "--c-host",
                          arg(cfg.price.c_host),
                          "--c-disk",
                          arg(cfg.price.c_disk),
                          "--ceiling",
                          arg(cfg.price.overload_ceiling)});
        !why.empty())
      return why;
  }
  return {};
}

// -- routers' heartbeats ----------------------------------------------------

// Every RouterStatus heartbeat of the mesh with the time it arrived here:
// the counters `admin routers` serves, each with a time to delimit the run.
struct beat_log {
  struct beat {
    steady::time_point at;
    router_status s;
  };
  std::mutex mu;
  std::map<std::string, std::vector<beat>> by_router;

  void add(router_status s) {
    std::lock_guard<std::mutex> g(mu);
    by_router[s.name].push_back({steady::now(), std::move(s)});
  }
  // How many routers have at least `n` beats that arrived at `t` or later.
  size_t routers_with(size_t n, steady::time_point t) {
    std::lock_guard<std::mutex> g(mu);
    size_t out = 0;
    for (auto& [name, beats] : by_router) {
      size_t k = 0;
      for (const auto& b : beats)
        k += b.at >= t;
      out += k >= n;
    }
    return out;
  }
};

uint64_t traffic(const router_status& s) {
  return s.nats_in + s.nats_out;
}

struct router_overhead {
  std::string name;
  uint64_t decisions = 0;
  uint64_t reauctions = 0;  // awards refused or unanswered, auctioned again
  router_status causes;     // the run's reauctions_* counts, by cause
  double auction_p50_us = 0;
  double auction_p99_us = 0;
  uint64_t nats_msgs = 0;       // in + out over the run
  double background_per_s = 0;  // in + out per second while idle
  double span_s = 0;            // between the two beats delimiting the run
};

struct overhead_result {
  std::vector<router_overhead> routers;
  uint64_t decisions = 0;
  uint64_t reauctions = 0;
  router_status causes;  // the routers' reauctions_* counts, summed
  double wall_s = 0;
  double decisions_per_s = 0;
  double auction_p50_us = 0;
  double auction_p99_us = 0;
  uint64_t nats_msgs = 0;
  double nats_msgs_per_decision = 0;
  double background_msgs = 0;  // heartbeats and the like over the run
  double nats_msgs_per_decision_net = 0;
  std::string warning;
};

// Adds to `to` the re-auctions by cause counted from `then` to `now`.
void add_causes(router_status& to, const router_status& now,
                const router_status& then) {
  to.reauctions_refused += now.reauctions_refused - then.reauctions_refused;
  to.reauctions_unanswered +=
      now.reauctions_unanswered - then.reauctions_unanswered;
  to.reauctions_no_bids += now.reauctions_no_bids - then.reauctions_no_bids;
  to.reauctions_saturated +=
      now.reauctions_saturated - then.reauctions_saturated;
  to.reauctions_no_live_worker +=
      now.reauctions_no_live_worker - then.reauctions_no_live_worker;
}

// The run's share of each router's counters: from its last beat before
// `start` to its last beat now (after `end`). The rate between its last
// two beats before the start is its idle traffic (heartbeats it hears and
// sends), which the net count takes out.
overhead_result overhead_of(beat_log& log, steady::time_point start,
                            steady::time_point end) {
  overhead_result out;
  out.wall_s = seconds(end - start);
  std::lock_guard<std::mutex> g(log.mu);
  double p50_weighted = 0;
  for (auto& [name, beats] : log.by_router) {
    router_overhead r;
    r.name = name;
    const beat_log::beat* before = nullptr;
    const beat_log::beat* idle = nullptr;
    for (const auto& b : beats)
      if (b.at <= start) {
        idle = before;
        before = &b;
      }
    const beat_log::beat& last = beats.back();
    if (last.at < end)
      out.warning += "router " + name + "'s last heartbeat came " +
                     arg(std::round(seconds(end - last.at) * 10) / 10) +
                     " s before the end of the run: its counts miss the "
                     "end; ";
    const router_status zero;
    const router_status& s0 = before ? before->s : zero;
    r.decisions = last.s.decisions - s0.decisions;
    r.reauctions = last.s.reauctions - s0.reauctions;
    add_causes(r.causes, last.s, s0);
    add_causes(out.causes, last.s, s0);
    r.nats_msgs = traffic(last.s) - traffic(s0);
    r.auction_p50_us = last.s.auction_p50_us;
    r.auction_p99_us = last.s.auction_p99_us;
    if (before) r.span_s = seconds(last.at - before->at);
    if (before && idle && before->at > idle->at)
      r.background_per_s = (traffic(before->s) - traffic(idle->s)) /
                           seconds(before->at - idle->at);
    out.decisions += r.decisions;
    out.reauctions += r.reauctions;
    out.nats_msgs += r.nats_msgs;
    out.background_msgs += r.background_per_s * r.span_s;
    p50_weighted += r.auction_p50_us * static_cast<double>(r.decisions);
    out.auction_p99_us = std::max(out.auction_p99_us, r.auction_p99_us);
    out.routers.push_back(r);
  }
  // The routers report percentiles, not samples: the total's p50 is their
  // decision-weighted mean, its p99 the worst router's.
  if (out.decisions > 0) {
    const auto d = static_cast<double>(out.decisions);
    out.auction_p50_us = p50_weighted / d;
    out.nats_msgs_per_decision = static_cast<double>(out.nats_msgs) / d;
    out.nats_msgs_per_decision_net =
        std::max(0.0,
                 static_cast<double>(out.nats_msgs) - out.background_msgs) /
        d;
  }
  if (out.wall_s > 0)
    out.decisions_per_s = static_cast<double>(out.decisions) / out.wall_s;
  return out;
}

// Waits until every router has beaten after `end` and, together, they
// count `expected` decisions since `start` (a beat in flight at the end
// may predate the last decisions), or until each has beaten three times
// since (what they count then is all they will). A router swamped by a
// backlog beats late: it gets 30 s.
std::string wait_end_beats(beat_log& log, mesh_procs& m, const bench_options& o,
                           steady::time_point start, steady::time_point end,
                           uint64_t expected) {
  const auto deadline = steady::now() + std::chrono::seconds(30) +
                        4 * std::chrono::milliseconds(o.heartbeat_ms);
  while (steady::now() < deadline) {
    if (auto why = watch(m, 50); !why.empty()) return why;
    if (log.routers_with(1, end) < o.cfg.routers) continue;
    if (log.routers_with(3, end) >= o.cfg.routers ||
        overhead_of(log, start, end).decisions >= expected)
      break;
  }
  return {};
}

// -- readiness --------------------------------------------------------------

// Until `admin workers` lists every worker live, `admin routers` every
// router (each with every worker live) and `admin shards` every shard.
std::string wait_ready(nats_bus& bus, const subjects& subj,
                       const bench_options& o, mesh_procs& m) {
  const auto t0 = steady::now();
  const auto deadline = t0 + ready_limit;
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
        complete += s.live_workers == o.cfg.workers;
    }
    if (auto s = call("shards")) shards = s->shards.size();
    if (live == o.cfg.workers && routers == o.cfg.routers &&
        complete == o.cfg.routers && shards == o.shards)
      break;
    if (steady::now() > deadline)
      return "the mesh was not ready within " +
             std::to_string(ready_limit.count()) +
             " s: " + std::to_string(live) + " of " +
             std::to_string(o.cfg.workers) + " workers live, " +
             std::to_string(routers) + " of " + std::to_string(o.cfg.routers) +
             " routers (" + std::to_string(complete) +
             " knowing every worker), " + std::to_string(shards) + " of " +
             std::to_string(o.shards) + " index shards" +
             (last_error.empty() ? "" : "; last error: " + last_error);
  }
  KVMESH_INFO(
      "mesh ready in %.1f s: %u workers on %u "
      "agent(s), %u router(s), %u index shard(s) on %s",
      seconds(steady::now() - t0), o.cfg.workers, o.agents, o.cfg.routers,
      o.shards, redact_url(m.url).c_str());
  return {};
}

// Two heartbeats more: agents that subscribed after a shard's last beat
// learn the index's shards, and each router's idle traffic gets measured.
std::string wait_idle_beats(beat_log& log, mesh_procs& m,
                            const bench_options& o) {
  const auto from = steady::now();
  const auto deadline = from + 4 * std::chrono::milliseconds(o.heartbeat_ms) +
                        std::chrono::seconds(1);
  while (log.routers_with(2, from) < o.cfg.routers) {
    if (auto why = watch(m, 50); !why.empty()) return why;
    if (steady::now() > deadline)
      return "routers stopped sending heartbeats (" +
             std::to_string(log.routers_with(2, from)) + " of " +
             std::to_string(o.cfg.routers) + " sent two in " +
             std::to_string(seconds(deadline - from)) + " s)";
  }
  return {};
}

// An error message without the numbers in it (request ids, worker ids),
// so that errors of one kind count together.
std::string error_kind(const std::string& msg) {
  std::string out;
  for (size_t i = 0; i < msg.size();) {
    if (std::isdigit(static_cast<unsigned char>(msg[i]))) {
      while (i < msg.size() && std::isdigit(static_cast<unsigned char>(msg[i])))
        ++i;
      out += 'N';
    } else {
      out += msg[i++];
    }
  }
  return out;
}

// Counts of errors by kind.
using error_counts = std::map<std::string, uint64_t>;

// A ROUTER in front of another that counts why route requests fail: the
// replay only counts that they did.
struct tally_state {
  static inline const char* name = "bench_tally";
  router_actor next;
  std::shared_ptr<error_counts> errors;
};

router_actor::behavior_type tally_router(
    router_actor::stateful_pointer<tally_state> self, router_actor next,
    std::shared_ptr<error_counts> errors) {
  self->state.next = std::move(next);
  self->state.errors = std::move(errors);
  return {
      [=](route_atom, route_request_msg& r) -> caf::result<decision> {
        auto rp = self->make_response_promise<decision>();
        self->request(self->state.next, caf::infinite, route_atom::value,
                      std::move(r))
            .then([rp](decision& d) mutable { rp.deliver(std::move(d)); },
                  [self, rp](caf::error& e) mutable {
                    ++(*self->state.errors)[error_kind(describe(e))];
                    rp.deliver(std::move(e));
                  });
        return rp;
      },
      [=](get_atom, weights_atom) -> caf::result<price_config> {
        return self->delegate(self->state.next, get_atom::value,
                              weights_atom::value);
      },
      [=](put_atom, weights_atom, const price_config&) {},
      [=](status_atom) -> caf::result<router_status> {
        return self->delegate(self->state.next, status_atom::value);
      },
      [=](put_atom, workers_atom, uint32_t, worker_actor, bidder_actor,
          double) {},
      [=](put_atom, shards_atom, std::vector<index_shard_actor>&) {},
      [=](tick_atom) {},
      [=](sweep_atom) {},
  };
}

// -- trace mode ---------------------------------------------------------------

struct trace_run {
  sim_result result;
  error_counts errors;  // why requests failed to route
  steady::time_point start, end;
};

// Asks the ADMIN for every worker's queued work when a sample is due by
// `now_ms()` (the replay's clock) and records it in `sampler`. Slots that
// pass while the call takes its time are skipped rather than given the
// same values; a failed call records nothing.
template <class Clock>
void sample_queues(nats_bus& bus, const subjects& subj, uint32_t workers,
                   Clock now_ms, queued_sampler& sampler) {
  if (sampler.next_ms() > now_ms()) return;
  auto r =
      admin_request_call(bus, subj, "workers", admin_request{}, admin_timeout);
  if (r && r->error.empty()) {
    std::vector<double> queued(workers, 0);
    for (const worker_status& w : r->workers)
      if (w.worker < workers && !w.gone) queued[w.worker] = w.queued;
    sampler.add(queued);
  }
  sampler.skip_to(now_ms());
}

// The replay client in this process, its requests going over NATS to the
// routers' queue group through a remote router, its first tokens and ends
// coming from the agents' events. With a `sampler`, the workers' queues
// are polled through the ADMIN while the replay runs. With `rounds`, a raw
// scatter-gather round starts at each arrival instant of the trace beside
// the replay's route request.
expected<trace_run> replay_trace(
    nats_bus& bus, const bench_options& o, const std::string& prefix,
    std::shared_ptr<const std::vector<trace_request>> trace, mesh_procs& m,
    double timeout_s, queued_sampler* sampler, scatter_gather_rounds* rounds) {
  caf::actor_system_config sys_cfg;
  register_types(sys_cfg);
  tune_for_latency(sys_cfg);
  caf::actor_system sys{sys_cfg};
  auto promise = std::make_shared<std::promise<sim_result>>();
  auto result = promise->get_future();
  replay_options ro;
  ro.trace = trace;
  ro.workers = o.cfg.workers;
  ro.speedup = o.cfg.speedup;
  ro.time_scale = o.time_scale;
  ro.done = promise;
  auto client = sys.spawn(replay, ro);
  mesh_options mo;
  mo.subj.prefix = prefix;
  mo.heartbeat = std::chrono::milliseconds(o.heartbeat_ms);
  auto remote = spawn_remote_router(sys, bus, mo,
                                    caf::actor_cast<listener_actor>(client));
  auto errors = std::make_shared<error_counts>();
  router_actor front;
  if (remote) front = sys.spawn(tally_router, *remote, errors);
  auto stop = [&] {
    caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
    if (remote) caf::anon_send_exit(*remote, caf::exit_reason::user_shutdown);
    if (front) caf::anon_send_exit(front, caf::exit_reason::user_shutdown);
    sys.await_all_actors_done();
  };
  if (!remote) {
    stop();
    return make_error(remote.err().code,
                      "remote router: " + remote.err().message);
  }
  trace_run run;
  run.start = steady::now();
  // One handle is enough: whichever router of the queue group NATS picks
  // takes each request.
  caf::anon_send(client, start_atom::value, std::vector<router_actor>{front});
  // The rounds keep the replay's clock (arrivals over speedup, on the wall
  // time_scale times faster) from its start on a thread of their own.
  std::atomic<bool> stopping{false};
  std::thread pacer;
  if (rounds)
    pacer = std::thread([&] {
      for (const trace_request& t : *trace) {
        const auto at =
            run.start + std::chrono::duration_cast<steady::duration>(
                            std::chrono::duration<double, std::milli>(
                                t.arrival_ms / o.cfg.speedup / o.time_scale));
        while (!stopping && steady::now() < at)
          std::this_thread::sleep_until(
              std::min(at, steady::now() + std::chrono::milliseconds(50)));
        if (stopping) return;
        rounds->start();
      }
    });
  auto stop_rounds = [&] {
    stopping = true;
    if (pacer.joinable()) pacer.join();
  };
  const auto deadline =
      run.start + std::chrono::duration_cast<steady::duration>(
                      std::chrono::duration<double>(timeout_s));
  subjects subj;
  subj.prefix = prefix;
  while (result.wait_for(std::chrono::seconds(0)) !=
         std::future_status::ready) {
    std::string why = watch(m, 50);
    // The replay's clock starts with the run and runs time_scale times
    // faster than the wall's.
    if (why.empty() && sampler)
      sample_queues(
          bus, subj, o.cfg.workers,
          [&] {
            return seconds(steady::now() - run.start) * 1e3 * o.time_scale;
          },
          *sampler);
    if (why.empty() && steady::now() > deadline)
      why = "the replay did not end within " + arg(timeout_s) +
            " s (--timeout): requests or their events were lost";
    if (!why.empty()) {
      stop_rounds();
      stop();
      return make_error(ec::io_error, why);
    }
  }
  run.end = steady::now();
  stop_rounds();
  run.result = result.get();
  stop();  // the tally is done: it may be read
  run.errors = *errors;
  return run;
}

// -- throughput mode ----------------------------------------------------------

// Synthetic requests: 8..64 blocks; half start with a prefix of one of 100
// families (so that the index has holders to find), the rest is unique.
std::vector<route_request_msg> synthetic_requests(uint64_t n,
                                                  uint32_t block_tokens,
                                                  uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> length(8, 64);
  std::uniform_int_distribution<uint32_t> family(0, synthetic_families - 1);
  std::uniform_int_distribution<uint32_t> family_length(4, 32);
  std::vector<uint32_t> family_blocks(synthetic_families);
  for (auto& f : family_blocks)
    f = family_length(rng);
  // Ids unique to this run: a random high part, then a counter.
  const uint64_t base = (rng() & 0x7fffffffull) << 32;
  auto hash = [](uint64_t a, uint64_t b) {
    uint64_t s = a * 0x9e3779b97f4a7c15ull ^ b;
    return next_random(s);
  };
  std::vector<route_request_msg> out(n);
  for (uint64_t i = 0; i < n; ++i) {
    route_request_msg& r = out[i];
    r.id = base + i;
    const uint32_t len = length(rng);
    uint32_t shared = 0;
    uint64_t f = 0;
    if (rng() & 1) {
      f = family(rng);
      shared = std::min(len, family_blocks[f]);
    }
    r.blocks.reserve(len);
    for (uint32_t j = 0; j < len; ++j)
      r.blocks.push_back(j < shared ? hash(f + 1, j) : hash(r.id, j) | 1ull);
    r.input_tokens = len * block_tokens;
    r.output_tokens = synthetic_output_tokens;
  }
  return out;
}

struct load_result {
  uint64_t requests = 0;
  uint64_t sent = 0;
  uint64_t decided = 0;
  uint64_t errors = 0;
  uint64_t timed_out = 0;
  uint64_t late = 0;  // replies after their request timed out
  error_counts error_kinds;
  steady::time_point start, end;
  double decisions_per_s = 0;         // all decisions over the whole run
  double steady_decisions_per_s = 0;  // after the first 10 %
  summary rtt_us;                     // publish to reply, at the client
};

// The generator's books, shared with the reply handler (a libnats thread).
struct load_books {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<steady::time_point> sent_at;
  std::vector<uint8_t> state;  // 0 unsent, 1 in flight, 2 answered
  size_t in_flight = 0;
  uint64_t resolved = 0;
  load_result res;
  std::vector<steady::time_point> decided_at;   // in order of arrival
  std::vector<steady::time_point> resolved_at;  // decided, failed or lost
  std::vector<double> rtt_us;
};

// Publishes route requests keeping `outstanding` in flight (and at most
// `rate` a second), replies coming to an inbox of its own.
expected<load_result> generate_load(
    nats_bus& bus, const subjects& subj, const bench_options& o,
    const std::vector<route_request_msg>& requests, mesh_procs& m,
    double timeout_s) {
  const size_t n = requests.size();
  auto books = std::make_shared<load_books>();
  books->sent_at.resize(n);
  books->state.assign(n, 0);
  books->decided_at.reserve(n);
  books->resolved_at.reserve(n);
  books->rtt_us.reserve(n);
  books->res.requests = n;
  std::random_device rd;
  const std::string inbox = "_INBOX.kvmesh-bench." + std::to_string(getpid()) +
                            "-" + std::to_string(rd());
  const size_t skip = inbox.size() + 1;
  auto sub =
      bus.subscribe(inbox + ".>", "", [books, skip, n](nats_message msg) {
        const auto now = steady::now();
        const size_t i =
            msg.subject.size() > skip
                ? std::strtoull(msg.subject.c_str() + skip, nullptr, 10)
                : n;
        auto d = decode<decision>(msg.payload);
        std::lock_guard<std::mutex> g(books->mu);
        if (i >= n || books->state[i] != 1) {
          ++books->res.late;
          return;
        }
        books->state[i] = 2;
        --books->in_flight;
        ++books->resolved;
        books->resolved_at.push_back(now);
        if (!d || !d->error.empty()) {
          ++books->res.errors;
          ++books->res.error_kinds[error_kind(d ? d->error : d.err().message)];
        } else {
          ++books->res.decided;
          books->decided_at.push_back(now);
          books->rtt_us.push_back(
              std::chrono::duration<double, std::micro>(now - books->sent_at[i])
                  .count());
        }
        books->cv.notify_all();
      });
  if (!sub) return sub.err();
  if (auto f = bus.flush(std::chrono::seconds(2)); !f) {
    (void)bus.unsubscribe(*sub);
    return f.err();
  }
  std::deque<size_t> order;  // in flight, oldest first, for timeouts
  size_t next = 0;
  const auto start = steady::now();
  const auto deadline = start + std::chrono::duration_cast<steady::duration>(
                                    std::chrono::duration<double>(timeout_s));
  auto last_watch = start;
  std::string why;
  while (true) {
    const auto now = steady::now();
    if (now - last_watch > std::chrono::milliseconds(50)) {
      last_watch = now;
      why = watch(m, 0);
      if (why.empty() && now > deadline)
        why = "the load did not finish within " + arg(timeout_s) +
              " s (--timeout)";
      if (!why.empty()) break;
    }
    std::unique_lock<std::mutex> lock(books->mu);
    while (!order.empty() && books->state[order.front()] != 1)
      order.pop_front();
    while (!order.empty() &&
           now - books->sent_at[order.front()] > request_timeout) {
      books->state[order.front()] = 2;
      --books->in_flight;
      ++books->resolved;
      books->resolved_at.push_back(now);
      ++books->res.timed_out;
      order.pop_front();
    }
    if (books->resolved == n) break;
    const bool paced =
        o.rate > 0 &&
        now < start + std::chrono::duration_cast<steady::duration>(
                          std::chrono::duration<double>(next / o.rate));
    if (next < n && books->in_flight < o.outstanding && !paced) {
      books->state[next] = 1;
      books->sent_at[next] = now;
      ++books->in_flight;
      order.push_back(next);
      lock.unlock();
      if (auto st = bus.publish(subj.route(), encode(requests[next]),
                                inbox + "." + std::to_string(next));
          !st) {
        why = "publishing request " + std::to_string(next) + ": " +
              st.err().message;
        break;
      }
      ++next;
      continue;
    }
    books->cv.wait_for(lock, std::chrono::milliseconds(paced ? 1 : 20));
  }
  const auto end = steady::now();
  (void)bus.unsubscribe(*sub);
  if (!why.empty()) return make_error(ec::io_error, why);
  std::lock_guard<std::mutex> g(books->mu);
  load_result res = books->res;
  res.sent = next;
  res.start = start;
  res.end = end;
  const size_t k = books->decided_at.size();
  if (end > start)
    res.decisions_per_s = static_cast<double>(k) / seconds(end - start);
  // The first 10 % of requests ramp up (connections, caches, the index
  // filling): the steady part runs from the tenth of them resolved to the
  // last, and counts the decisions in it (failures take time, not credit).
  const auto& resolved = books->resolved_at;
  if (resolved.size() > 1) {
    const auto from = resolved[resolved.size() / 10];
    const double span = seconds(resolved.back() - from);
    const auto in =
        std::count_if(books->decided_at.begin(), books->decided_at.end(),
                      [from](steady::time_point t) { return t > from; });
    if (span > 0) res.steady_decisions_per_s = static_cast<double>(in) / span;
  }
  res.rtt_us = summarize(books->rtt_us);
  return res;
}

// -- reports ------------------------------------------------------------------

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// Prints rows (the first the header) as columns, the first left-aligned,
// the others right-aligned.
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

void print_overhead(const overhead_result& h) {
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

// -- CPU per process ----------------------------------------------------------
// Where a run's CPU went: on a small host every process of the mesh shares
// the cores, so a router's capacity is its CPU per decision, not only the
// decisions per second the whole machine reached.

struct cpu_use {
  steady::time_point at;
  std::vector<double> procs;  // as m.procs, then m.nats, then this process
};

cpu_use cpu_now(const mesh_procs& m) {
  cpu_use u;
  u.at = steady::now();
  for (const auto* list : {&m.procs, &m.nats})
    for (const auto& p : *list)
      u.procs.push_back(p.pid > 0 ? cpu_seconds(p.pid) : -1);
  u.procs.push_back(cpu_seconds(getpid()));
  return u;
}

json print_cpu(const mesh_procs& m, const cpu_use& before, const cpu_use& after,
               uint64_t decisions) {
  std::vector<std::string> names;
  for (const auto* list : {&m.procs, &m.nats})
    for (const auto& p : *list)
      names.push_back(p.name.empty() || p.role == "nats-server" ? p.role
                                                                : p.name);
  names.push_back("bench client");
  const double wall = seconds(after.at - before.at);
  std::vector<std::vector<std::string>> rows{
      {"process", "cpu_s", "cores", "cpu_us/decision"}};
  json out = json::array();
  for (size_t i = 0;
       i < names.size() && i < before.procs.size() && i < after.procs.size();
       ++i) {
    if (before.procs[i] < 0 || after.procs[i] < 0) continue;
    const double s = after.procs[i] - before.procs[i];
    const double per = decisions ? s * 1e6 / static_cast<double>(decisions) : 0;
    rows.push_back({names[i], fmt("%.2f", s),
                    fmt("%.2f", wall > 0 ? s / wall : 0), fmt("%.0f", per)});
    out.push_back({{"process", names[i]},
                   {"cpu_s", s},
                   {"cores", wall > 0 ? s / wall : 0},
                   {"cpu_us_per_decision", per}});
  }
  std::printf("\nCPU during the run (%.2f s of wall clock, %u cores):\n", wall,
              std::thread::hardware_concurrency());
  print_rows(rows);
  return out;
}

struct baseline_report {
  size_t payload = 0;
  size_t fanout = 0;
  expected<baseline_result> rr = make_error(ec::not_found, "not run");
  expected<baseline_result> sg = make_error(ec::not_found, "not run");
  // Rounds paced at the run's decision rate (throughput: --rate); 0 when
  // not run (no rate, or one leaving the threads no time to fall asleep
  // between rounds).
  double paced_rate = 0;
  expected<baseline_result> rr_paced = make_error(ec::not_found, "not run");
  expected<baseline_result> sg_paced = make_error(ec::not_found, "not run");
  // Rounds at the trace's arrival instants while the mesh routed it (trace
  // mode): the same bursts and the same busy host as the auctions.
  expected<baseline_result> sg_during = make_error(ec::not_found, "not run");

  bool ran_during() const {
    return sg_during || sg_during.err().code != ec::not_found;
  }
  bool complete() const {
    return rr && sg && (paced_rate == 0 || (rr_paced && sg_paced)) &&
           (sg_during || !ran_during());
  }
};

// Seconds of rounds a paced baseline takes at most (capped by
// --baseline-samples): at a trace's few decisions per second, as many
// rounds as back to back would take minutes.
constexpr double paced_baseline_s = 15;

// A paced round's slack must be well above a round, or pacing changes
// nothing.
constexpr double paced_min_slack = 2;

void print_baseline(const baseline_report& b, const overhead_result& h,
                    const std::string& url) {
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

void print_errors(const error_counts& errors) {
  for (const auto& [what, count] : errors)
    KVMESH_WARN("%" PRIu64 " x %s", count, what.c_str());
}

json errors_json(const error_counts& errors) {
  json out = json::object();
  for (const auto& [what, count] : errors)
    out[what] = count;
  return out;
}

json overhead_json(const overhead_result& h) {
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

json baseline_json(const baseline_report& b) {
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
    j["output_tokens"] = synthetic_output_tokens;
  }
  return j;
}

// The encoded size of the middle request by prompt length: the payload of
// the raw baselines.
size_t median_payload(std::vector<route_request_msg> sample) {
  if (sample.empty()) return 0;
  const size_t mid = sample.size() / 2;
  std::nth_element(sample.begin(), sample.begin() + mid, sample.end(),
                   [](const route_request_msg& a, const route_request_msg& b) {
                     return a.blocks.size() < b.blocks.size();
                   });
  return encode(sample[mid]).size();
}

// The report's figures beyond the simulator's table: routing overhead,
// raw NATS latency and why requests failed.
std::vector<std::pair<std::string, std::string>> report_extra(
    const overhead_result& h, const baseline_report& b,
    const error_counts& errors) {
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
  if (o.shards == 0) return "--shards must be at least 1";
  if (o.agents == 0) return "--agents must be at least 1";
  if (o.agents > o.cfg.workers)
    return "--agents: " + std::to_string(o.agents) + " agents for " +
           std::to_string(o.cfg.workers) +
           " workers (--workers): each agent needs one at least";
  if (o.cfg.workers > max_worker_id)
    return "--workers: at most " + std::to_string(max_worker_id);
  if (o.baseline_samples == 0) return "--baseline-samples must be at least 1";
  if (!(o.time_scale > 0) || !std::isfinite(o.time_scale))
    return "--time-scale must be a positive number";
  if (!(o.timeout_s >= 0) || !std::isfinite(o.timeout_s))
    return "--timeout must be a positive number";
  return {};
}

int run_bench(bench_options o) {
  if (auto why = check_options(o); !why.empty()) return usage(why);
  const bool throughput = o.mode == "throughput";
  auto trace = std::make_shared<std::vector<trace_request>>();
  std::vector<route_request_msg> requests;
  size_t payload = 0;
  double timeout_s = o.timeout_s;
  if (throughput) {
    requests = synthetic_requests(o.requests, o.cfg.block_tokens, o.cfg.seed);
    payload = median_payload(std::vector<route_request_msg>(
        requests.begin(),
        requests.begin() + std::min<size_t>(requests.size(), 10000)));
    if (timeout_s == 0) timeout_s = 600;
  } else {
    auto t = load_trace(o.trace);
    if (!t) return usage(t.err().message);
    *trace = std::move(*t);
    if (o.limit > 0 && o.limit < trace->size()) trace->resize(o.limit);
    std::vector<route_request_msg> sample;
    for (const auto& r : *trace) {
      route_request_msg m;
      m.id = sample.size();
      m.blocks = r.blocks;
      m.input_tokens = r.input_tokens;
      m.output_tokens = std::max<uint32_t>(1, r.output_tokens);
      sample.push_back(std::move(m));
    }
    payload = median_payload(std::move(sample));
    // The replay's own length on the wall clock, and room for its tail
    // and a slow start.
    if (timeout_s == 0)
      timeout_s =
          trace->back().arrival_ms / o.cfg.speedup / o.time_scale / 1000 * 1.5 +
          120;
  }

  // From here on only sigtimedwait takes these: no Ctrl-C lands half-way
  // through starting a child, and a child's death wakes the waits. They
  // are blocked before any thread exists (CAF, libnats), so that none of
  // those takes them either.
  std::signal(SIGCHLD, SIG_DFL);  // an inherited SIG_IGN would auto-reap
  mesh_procs m;
  m.signals = block_signals({SIGINT, SIGTERM, SIGCHLD});
  if (o.data_dir.empty()) {
    auto dir = make_temp_dir("kvmesh-bench");
    if (!dir) return failure(dir.err().message);
    m.dir = m.temp.path = *dir;
  } else {
    // A directory of its own per run: shards must not find an earlier
    // run's index in RocksDB.
    std::error_code ec;
    std::filesystem::create_directories(o.data_dir, ec);
    std::string d = o.data_dir + "/kvmesh-bench-XXXXXX";
    if (ec || !mkdtemp(d.data()))
      return failure("--data-dir " + o.data_dir + ": " +
                     (ec ? ec.message() : std::strerror(errno)));
    m.dir = d;
    KVMESH_INFO("logs and index in %s", d.c_str());
  }
  if (o.nats.empty()) {
    if (auto why = start_nats(m, o); !why.empty()) return failure(why);
  } else {
    m.url = o.nats;
    // The children connect to that server with our credentials, read
    // from these variables beneath their own flags.
    if (auto st = check_security(o.security); !st)
      return failure(st.err().message);
    export_nats_security(o.security);
  }
  // Our own nats-server has no authorization and no TLS: the children
  // must not try what KVMESH_NATS_* of our environment may say.
  const nats_options security = o.nats.empty() ? nats_options{} : o.security;
  if (o.nats.empty()) export_nats_security(security);
  if (auto why = start_mesh(m, o, o.prefix); !why.empty()) return failure(why);

  beat_log beats;  // declared first: it outlives the bus and its callbacks
  nats_options no = security;
  no.url = m.url;
  no.name = "kvmesh-bench";
  auto bus = nats_bus::connect(no);
  if (!bus) return failure(bus.err().message);
  subjects subj;
  subj.prefix = o.prefix;
  auto beat_sub =
      (*bus)->subscribe(subj.router_beat(), "", [&beats](nats_message msg) {
        if (auto s = decode<router_status>(msg.payload))
          beats.add(std::move(*s));
      });
  if (!beat_sub) return failure(beat_sub.err().message);
  auto close_bus = [&] { bus->reset(); };
  if (auto why = wait_ready(**bus, subj, o, m); !why.empty()) {
    close_bus();
    return failure(why);
  }
  if (auto why = wait_idle_beats(beats, m, o); !why.empty()) {
    close_bus();
    return failure(why);
  }

  json doc{{"results", json::array()}};
  report_page report;
  steady::time_point start, end;
  uint64_t client_decisions = 0;
  sim_result result;
  error_counts trace_errors;
  load_result load;
  // The raw baselines' connections: to the mesh's server, as this client.
  nats_options bo = security;
  bo.url = m.url;
  bo.name = "kvmesh-bench";
  const size_t fanout = std::min<size_t>(o.cfg.workers, o.fanout);
  expected<baseline_result> sg_during = make_error(ec::not_found, "not run");
  const cpu_use cpu_before = cpu_now(m);
  if (throughput) {
    KVMESH_INFO("%" PRIu64 " requests, %u outstanding, rate %s", o.requests,
                o.outstanding,
                o.rate > 0 ? (arg(o.rate) + "/s").c_str() : "unlimited");
    auto r = generate_load(**bus, subj, o, requests, m, timeout_s);
    if (!r) {
      close_bus();
      return failure(r.err().message);
    }
    load = std::move(*r);
    start = load.start;
    end = load.end;
    client_decisions = load.decided;
  } else {
    KVMESH_INFO(
        "replaying %zu requests (speedup %g, time "
        "scale %g: about %.0f s)",
        trace->size(), o.cfg.speedup, o.time_scale,
        trace->back().arrival_ms / o.cfg.speedup / o.time_scale / 1000);
    std::unique_ptr<queued_sampler> sampler;
    if (!o.report_path.empty()) {
      // About queued_max_samples polls over the arrivals, but no more
      // than one per heartbeat: the ADMIN knows the workers' queues from
      // their heartbeats, and polling faster only repeats them.
      const double span =
          (trace->back().arrival_ms - trace->front().arrival_ms) /
          o.cfg.speedup;
      sampler = std::make_unique<queued_sampler>(
          std::max(o.heartbeat_ms * o.time_scale,
                   span / static_cast<double>(o.cfg.queued_max_samples)),
          o.cfg.queued_max_samples, trace->front().arrival_ms / o.cfg.speedup);
    }
    // A raw scatter-gather round at each arrival, beside the replay: the
    // trace's bursts and the busy host hit it as they hit the auctions,
    // which rounds before or after the run never see. Its responders live
    // in this process: their CPU is in the bench client's row.
    auto rounds = scatter_gather_rounds::open(bo, fanout, payload, payload);
    if (!rounds) {
      close_bus();
      return failure(rounds.err().message);
    }
    auto r = replay_trace(**bus, o, o.prefix, trace, m, timeout_s,
                          sampler.get(), rounds->get());
    if (!r) {
      close_bus();
      return failure(r.err().message);
    }
    sg_during = (*rounds)->finish(std::chrono::seconds(2));
    rounds->reset();
    result = std::move(r->result);
    if (sampler) result.queued_over_time = sampler->take();
    trace_errors = std::move(r->errors);
    start = r->start;
    end = r->end;
    client_decisions = result.requests - result.refused;
  }
  const cpu_use cpu_after = cpu_now(m);
  if (auto why = wait_end_beats(beats, m, o, start, end, client_decisions);
      !why.empty()) {
    close_bus();
    return failure(why);
  }
  const overhead_result h = overhead_of(beats, start, end);
  close_bus();
  // The baselines measure the server alone, the floor under the mesh.
  m.stop_mesh();

  bool lost = false;
  if (throughput) {
    std::printf(
        "load: %" PRIu64
        " synthetic requests (8-64 blocks, half in %u "
        "prefix families), %u outstanding, rate %s; %u workers on %u "
        "agent(s), %u router(s), %u shard(s), fan-out %zu, time scale %g\n",
        o.requests, synthetic_families, o.outstanding,
        o.rate > 0 ? (arg(o.rate) + "/s").c_str() : "unlimited", o.cfg.workers,
        o.agents, o.cfg.routers, o.shards, o.fanout, o.time_scale);
    print_rows(
        {{"sent", "decided", "errors", "timed_out", "late", "wall_s",
          "decisions/s", "steady_decisions/s", "rtt_p50_us", "rtt_p99_us"},
         {std::to_string(load.sent), std::to_string(load.decided),
          std::to_string(load.errors), std::to_string(load.timed_out),
          std::to_string(load.late), fmt("%.2f", seconds(end - start)),
          fmt("%.0f", load.decisions_per_s),
          fmt("%.0f", load.steady_decisions_per_s),
          fmt("%.0f", load.rtt_us.p50), fmt("%.0f", load.rtt_us.p99)}});
    std::printf(
        "steady: decisions after the first 10%% of requests were answered, "
        "per second; rtt: publish to reply at this client\n");
    print_errors(load.error_kinds);
    lost = load.errors + load.timed_out > 0;
    doc["throughput"] = {
        {"requests", load.requests},
        {"sent", load.sent},
        {"decided", load.decided},
        {"errors", load.errors},
        {"timed_out", load.timed_out},
        {"late", load.late},
        {"error_kinds", errors_json(load.error_kinds)},
        {"wall_s", seconds(end - start)},
        {"decisions_per_s", load.decisions_per_s},
        {"steady_decisions_per_s", load.steady_decisions_per_s},
        {"rtt_us", to_json(load.rtt_us)}};
  } else {
    const oracle_result orc = oracle(o.cfg, *trace);
    print_table(orc, {result});
    doc["oracle"] = {{"ttft_ms", to_json(orc.ttft_ms)},
                     {"hit_ratio", orc.hit_ratio}};
    if (result.refused > 0)
      KVMESH_WARN("%" PRIu64 " requests failed to route", result.refused);
    print_errors(trace_errors);
    lost = result.refused > 0;
    doc["results"].push_back(result_json(result));
    doc["errors"] = errors_json(trace_errors);
    report.oracle = orc;
  }
  print_overhead(h);
  const json cpu = print_cpu(m, cpu_before, cpu_after, h.decisions);
  std::fflush(stdout);
  if (h.decisions != client_decisions)
    KVMESH_WARN("the routers counted %" PRIu64
                " decisions, the client got %" PRIu64,
                h.decisions, client_decisions);

  baseline_report b;
  b.payload = payload;
  b.fanout = fanout;
  b.sg_during = std::move(sg_during);
  if (auto why = watch(m, 0); !why.empty()) return failure(why);
  b.rr = request_reply_latency(bo, b.payload, o.baseline_samples);
  if (auto why = watch(m, 0); !why.empty()) return failure(why);
  b.sg = scatter_gather_latency(bo, b.fanout, b.payload, b.payload,
                                o.baseline_samples);
  // At a trace's rate the mesh's threads sleep between decisions and each
  // auction pays for waking them; back-to-back rounds find them awake.
  // Rounds at the run's rate pay the same, and show what of the auction's
  // latency is the host's rather than kvmesh's.
  // A throughput run without --rate sends back to back: nothing to pace.
  const double rate = throughput ? o.rate : h.decisions_per_s;
  if (b.sg && rate > 0 && 1e6 / rate > paced_min_slack * b.sg->mean_us) {
    b.paced_rate = rate;
    const auto interval = std::chrono::microseconds(std::llround(1e6 / rate));
    const size_t rounds = std::min<size_t>(
        o.baseline_samples,
        std::max<size_t>(100, static_cast<size_t>(rate * paced_baseline_s)));
    if (auto why = watch(m, 0); !why.empty()) return failure(why);
    b.rr_paced = request_reply_latency(bo, b.payload, rounds, interval);
    if (auto why = watch(m, 0); !why.empty()) return failure(why);
    b.sg_paced = scatter_gather_latency(bo, b.fanout, b.payload, b.payload,
                                        rounds, interval);
  }
  print_baseline(b, h, redact_url(m.url));

  if (!o.report_path.empty()) {
    report.title = "kvmesh bench";
    report.scenario = config_json(o, redact_url(m.url), o.prefix);
    report.results = {result};
    report.queued_note =
        "Read work queued at each worker (blocks) as of its last "
        "heartbeat, polled from the mesh's ADMIN once per heartbeat "
        "(--heartbeat-ms " +
        std::to_string(o.heartbeat_ms) +
        " on the wall clock; lower it for a finer chart). Time on the "
        "replay's clock (the wall clock times --time-scale).";
    report.extra = report_extra(h, b, trace_errors);
    if (auto st = write_report(o.report_path, report); !st)
      return failure(st.err().message);
    std::fflush(stdout);  // after the tables it describes
    KVMESH_INFO("report in %s", o.report_path.c_str());
  }
  if (!o.json_path.empty()) {
    doc["overhead"] = overhead_json(h);
    doc["cpu"] = cpu;
    doc["baseline"] = baseline_json(b);
    doc["config"] = config_json(o, redact_url(m.url), o.prefix);
    std::ofstream out(o.json_path);
    out << doc.dump(1) << "\n";
    if (!out) return failure(o.json_path + ": cannot write the JSON file");
  }
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
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  cmd->add_option("--shards", o->shards, "index shard processes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--agents", o->agents,
                  "node agent processes; the workers are split evenly")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  o->time_scale_opt =
      cmd->add_option("--time-scale", o->time_scale,
                      "run arrivals and engines X times faster than real "
                      "time (throughput default 1000)")
          ->check(CLI::PositiveNumber)
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
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--threads", o->threads,
                  "threads running each started process's actors, and the "
                  "started nats-server's GOMAXPROCS unless set (0: the "
                  "host's cores split among the processes, at least one)")
      ->check(CLI::Range(0u, max_threads))
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout_s,
                  "give up the run after X s (default: the trace's length "
                  "at this speed x 1.5 + 120 s; throughput 600 s)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--json", o->json_path, "also write the results as JSON");
  cmd->add_option("--baseline-samples", o->baseline_samples,
                  "round trips of each raw NATS baseline (those paced at "
                  "the run's rate: at most 15 s of them, at least 100)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  o->trace_only = {
      cmd->add_option("--trace", o->trace, "JSONL trace (Mooncake format)"),
      cmd->add_option("--limit", o->limit, "replay only the first N requests")
          ->check(CLI::PositiveNumber),
      cmd->add_option("--report", o->report_path,
                      "also write an HTML page of charts here "
                      "(self-contained); its queued-work chart has a sample "
                      "per heartbeat (--heartbeat-ms)")};
  o->throughput_only = {
      cmd->add_option("--rate", o->rate,
                      "at most R requests per second (default: no cap)")
          ->check(CLI::PositiveNumber),
      cmd->add_option("--requests", o->requests, "requests to send")
          ->check(CLI::PositiveNumber)
          ->capture_default_str(),
      cmd->add_option("--outstanding", o->outstanding,
                      "requests in flight at most")
          ->check(CLI::PositiveNumber)
          ->capture_default_str()};
  cmd->footer(
      "Exit status: 0 measured, 1 the mesh failed or lost requests, 2 bad "
      "flag or value.");
  cmd->callback([o, &run] { run = [o] { return run_bench(*o); }; });
}

}  // namespace kvmesh::cli
