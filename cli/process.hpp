// Child processes and signals for the long-running commands: spawning,
// reaping and stopping children, waiting for SIGINT/SIGTERM, loopback ports.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/sim.hpp"

namespace kvmesh::cli {

// Blocks `signals` in the calling thread and so in every thread started
// after it (CAF's scheduler, libnats): a signal then never lands in a
// library's thread, and only sigwait/sigtimedwait on the returned set takes
// it. Call before any thread exists.
sigset_t block_signals(std::initializer_list<int> signals);

// Waits for SIGINT or SIGTERM (blocked with block_signals) and returns it.
int wait_for_stop();

// How a child ended, for a person: "exited with status 1", "killed by
// signal 9 (Killed)".
std::string describe_exit(int wait_status);

struct child_options {
  // Replaces stdout and stderr (appends); empty: inherit ours.
  std::string output;
  // The child gets this signal when the parent dies, so that a parent that
  // is killed (SIGKILL, crash) leaves no orphans.
  int parent_death_signal = SIGTERM;
  // "NAME=value" entries set in the child's environment (over ours).
  std::vector<std::string> env;
};

// Starts `argv` (argv[0] is looked up in PATH) as a child in its own
// process group, so that a Ctrl-C on the terminal reaches only the parent,
// which stops the children in order. Signal mask and dispositions are
// reset, so that the blocks of block_signals do not leak into it. An exec
// failure is written to our stderr and the child exits with 127.
expected<pid_t> spawn_child(const std::vector<std::string>& argv,
                            const child_options& opt = {});

// The environment of a nats-server started beside `threads`-thread kvmesh
// processes: Go's scheduler gets as many threads (GOMAXPROCS), unless our
// own environment sets GOMAXPROCS. On a host the mesh shares, a Go server
// with a thread per core spins its idle threads against the others.
std::vector<std::string> nats_server_env(uint32_t threads);

// Sends `sig` to every pid > 0, waits up to `grace` for them, then sends
// SIGKILL to the rest and reaps them. Each reaped pid is set to -1; its wait
// status goes to `statuses` (same index; -1 when killed after the grace).
void stop_children(std::vector<pid_t>& pids, std::chrono::milliseconds grace,
                   std::vector<int>& statuses, int sig = SIGTERM);

// The path of the running binary (/proc/self/exe), to start its siblings.
expected<std::string> self_exe();

// A loopback port nobody listens on right now (the kernel's choice).
expected<int> free_loopback_port();

// Whether something accepts TCP connections on 127.0.0.1:`port`.
bool loopback_accepting(int port);

// A fresh directory (mkdtemp) under the system temp dir, named after `tag`.
expected<std::string> make_temp_dir(const std::string& tag);

// The last `lines` lines of a text file ("" if unreadable), for showing why
// a child failed.
std::string file_tail(const std::string& path, size_t lines);

// A number as a flag value that reads back the same, as short as it can
// be: 0.05, not 0.050000000000000003.
std::string arg(double v);

template <class T>
std::string arg(T v) {
  return std::to_string(v);
}

// A child of a command that runs the mesh (up, bench), named for messages.
struct child_proc {
  std::string role;  // nats-server, index, agent, router
  std::string name;
  pid_t pid = -1;
};

// CPU seconds (user + system) process `pid` has used so far, or -1 when
// /proc does not tell (it exited).
double cpu_seconds(pid_t pid);

// Stops `procs` (`sig`, SIGKILL after 5 s), logging a warning for each
// that did not stop cleanly.
void stop_procs(std::vector<child_proc>& procs, int sig, const char* cmd);

// Removes a data directory a command made for itself, whatever the way out.
struct temp_dir_guard {
  std::string path;
  ~temp_dir_guard();
};

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

// `kvmesh agent`'s flags for `n` simulated GPUs with ids from `first`, each
// engine as `kvmesh sim` builds worker `id` of `cfg`.
std::vector<std::string> sim_agent_args(const sim_config& cfg,
                                        const std::string& name, uint32_t first,
                                        uint32_t n, double time_scale);

}  // namespace kvmesh::cli
