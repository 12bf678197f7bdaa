// The mesh as child processes of this one, for `kvmesh up` and `bench`.
// The children's command lines, starting nats-server and the mesh in
// order, watching them, and stopping them however the run ends.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cluster/mesh.hpp"
#include "core/error.hpp"
#include "core/sim.hpp"
#include "harness/process.hpp"

namespace kvmesh::harness {

// A number as a flag value that reads back the same, as short as it can
// be: 0.05, not 0.050000000000000003.
std::string arg(double v);

template <class T>
std::string arg(T v) {
  return std::to_string(v);
}

// The workers agent `a` of `agents` hosts when `workers` are split evenly
// (the first agents take one more when they do not divide).
inline uint32_t agent_share(uint32_t workers, uint32_t agents, uint32_t a) {
  return workers / agents + (a < workers % agents ? 1 : 0);
}

// --threads for each of `procs` processes that share this host with a
// nats-server: its cores split among them, at least one each. A thread per
// core in every process would make them hand messages to each other's
// sleeping threads (docs/benchmarks.md). A `requested` count (--threads)
// other than 0 is taken as it is.
uint32_t host_share_threads(uint32_t procs, uint32_t requested = 0);

// The most threads --threads takes: past it a typo (a million) would have
// CAF start threads until the system refuses one and the process aborts.
constexpr uint32_t max_threads = 1024;

// The environment of a nats-server started beside `threads`-thread kvmesh
// processes: Go's scheduler gets as many threads (GOMAXPROCS), unless our
// own environment sets GOMAXPROCS. On a host the mesh shares, a Go server
// with a thread per core spins its idle threads against the others.
std::vector<std::string> nats_server_env(uint32_t threads);

// `kvmesh agent`'s flags for `n` simulated GPUs with ids from `first`, each
// engine as `kvmesh sim` builds worker `id` of `cfg`.
std::vector<std::string> sim_agent_args(const sim_config& cfg,
                                        const std::string& name, uint32_t first,
                                        uint32_t n, double time_scale);

// -- command lines (pure) -----------------------------------------------------

// What to start, and the flags the children get.
struct launch_options {
  std::string exe;  // the kvmesh binary the children run
  std::string url;  // their NATS server
  std::string prefix;
  std::string dir;   // the shards' RocksDB go under it
  sim_config fleet;  // workers, routers, engines, auctions, price weights
  uint32_t shards = 1;
  uint32_t agents = 1;
  size_t fanout = 64;
  double time_scale = 1;
  uint32_t heartbeat_ms = 1000;
  uint32_t threads = 1;  // --threads of each child
  // Routers take the durable JetStream queue too (--durable).
  bool durable = false;
  // Routers also get the tiers' credits and the overload ceiling (--c-host,
  // --c-disk, --ceiling), not only --beta, --k and --overflow.
  bool price_costs = false;
  // --heartbeat-ms right after --prefix on every command line, rather than
  // with each role's own flags. The children read both orders the same;
  // each command keeps the order its command lines have always had, so that
  // they read the same in ps and in logs.
  bool heartbeat_first = false;
  // Each child's stdout and stderr go to DIR/NAME.log; else they are ours.
  bool logs_in_dir = false;
  // Non-empty: the mesh serves the OpenAI API. Each agent then drives a
  // simulated engine served as vLLM serves a GPU (`kvmesh engine --serve`,
  // one data-parallel rank per worker) on these loopback ports, one entry
  // per agent, as it would a real engine; a gateway listens on
  // gateway_listen.
  struct served_engine {
    int http_port = 0;
    int kv_port = 0;  // rank r publishes on kv_port + r
  };
  std::vector<served_engine> engines;
  std::string gateway_listen;
  std::string model = "kvmesh-sim";
};

// Whether `shards` index shards and `agents` agents can run `workers`
// workers: "" when they can, else why not, naming the flag.
std::string check_layout(uint32_t shards, uint32_t agents, uint32_t workers);

// One child of the mesh, as it will be started.
struct planned_child {
  std::string role;  // index, engine, agent, router, gateway
  std::string name;  // shard-0, agent-0, router-0
  std::vector<std::string> argv;
  std::string hosts;  // an agent's workers ("workers 0-3"), else empty
};

// The index shards, node agents and routers in the order they start, with
// the flags that make their engines and auctions those of `kvmesh sim` for
// the same fleet. Workers are split as agent_share says, ids contiguous per
// agent; agent a builds worker id's engine with fleet_engine_config(fleet,
// id), as sim does; router r gets sim's seed of replica r; the price weights
// are passed even where they are the defaults, so that both sides read one
// config.
std::vector<planned_child> mesh_commands(const launch_options& o);

// nats-server on 127.0.0.1:`port`, logging to DIR/nats-server.log, with
// JetStream (stored under DIR/jetstream) when `jetstream`, so that routers
// can take the durable queue.
std::vector<std::string> nats_command(const std::string& program, int port,
                                      const std::string& dir, bool jetstream);

// -- the running mesh
// -----------------------------------------------------------

// A child of the mesh, named for messages.
struct child_proc {
  std::string role;  // nats-server, index, agent, router
  std::string name;
  pid_t pid = -1;
};

// Stops `procs` (`sig`, SIGKILL after 5 s), logging a warning for each
// that did not stop cleanly.
void stop_procs(std::vector<child_proc>& procs, int sig);

// Our nats-server and the mesh's processes, stopped in order however the
// run ends: the mesh first, while it can still say goodbye on NATS.
struct child_mesh {
  // SIGINT, SIGTERM and SIGCHLD, blocked (block_signals) before any child
  // or thread exists: only the waits below take them.
  sigset_t signals{};
  temp_dir_guard temp;           // first: removed after the children stopped
  std::string dir;               // data and logs
  std::string url;               // the NATS server
  std::vector<child_proc> nats;  // our own nats-server, if any
  std::vector<child_proc> procs;

  child_mesh() = default;
  child_mesh(const child_mesh&) = delete;
  child_mesh& operator=(const child_mesh&) = delete;
  ~child_mesh() { stop(); }

  void stop_mesh() { stop_procs(procs, SIGTERM); }
  // nats-server exits 1 on SIGTERM but 0 on SIGINT, its clean shutdown.
  void stop() {
    stop_mesh();
    stop_procs(nats, SIGINT);
  }
  // Where a child's output goes with logs_in_dir (nats-server's own log).
  std::string log_of(const child_proc& p) const;
};

// A child of the mesh that ended and was reaped.
struct ended_child {
  child_proc proc;  // with the pid it had
  int status = 0;   // its wait status
};

// Waits up to `ms` for SIGINT or SIGTERM: the signal, or 0.
int wait_signal(child_mesh& m, int ms);

// Reaps ended children until one of the mesh's is among them; nullopt when
// none of them ended.
std::optional<ended_child> reap_one(child_mesh& m);

// Why the run ends with `e`: "ROLE NAME (pid N) exited with status 1",
// with the end of its log when it has one.
std::string why_ended(const child_mesh& m, const ended_child& e);

// Waits up to `ms` for SIGINT or SIGTERM and reaps children that ended:
// "" while all is well, else why the run must end (a child's with the end
// of its log).
std::string watch(child_mesh& m, int ms);

// How starting our nats-server went.
struct nats_start {
  enum outcome { ready, stopped, ended, timed_out };
  outcome what = ready;
  int port = 0;
  std::string log;
  int signal = 0;     // stopped: SIGINT or SIGTERM
  ended_child child;  // ended: the server, before accepting connections
};

// Starts `program` (nats_command) on a free loopback port with
// nats_server_env(threads), and waits up to 10 s until it accepts
// connections; m.url is its URL once it does.
expected<nats_start> start_nats(child_mesh& m, const std::string& program,
                                bool jetstream, uint32_t threads);

// Options for `fleet` with `exe` as the children's binary, `m`'s server and
// directory and subjects under `prefix`; the rest at their defaults.
launch_options launch_for(const std::string& exe, const child_mesh& m,
                          const std::string& prefix, const sim_config& fleet);

// Starts mesh_commands(o) in order, each told to `started` (may be empty);
// "" when all started, else "ROLE NAME: why" of the first that did not.
std::string start_mesh(
    child_mesh& m, const launch_options& o,
    const std::function<void(const planned_child&, pid_t)>& started = {});

// How long an admin call to the mesh may take (while it starts, or while a
// replay polls its queues).
constexpr auto admin_timeout = std::chrono::milliseconds(1000);

// Until `admin workers` lists every worker live, `admin routers` every
// router (each with every worker live) and `admin shards` every shard, or
// 60 s: "" when ready, else why not.
std::string wait_ready(nats_bus& bus, const subjects& subj,
                       const launch_options& o, child_mesh& m);

}  // namespace kvmesh::harness
