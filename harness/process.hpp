// Child processes and signals on POSIX, by hand: no Debian library fits.
// Debian 12 has no C++ library that starts a child in its own process
// group, with a reset signal mask and a parent-death signal (posix_spawn(3)
// has no PR_SET_PDEATHSIG), so spawn_child forks and execs itself, with only
// async-signal-safe calls in between. What it guarantees: no orphan when the
// parent dies, a Ctrl-C reaches only the parent, and an exec failure is told
// on the parent's stderr.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace kvmesh::harness {

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

// Sends `sig` to every pid > 0, waits up to `grace` for them, then sends
// SIGKILL to the rest and reaps them. Each reaped pid is set to -1; its wait
// status goes to `statuses` (same index; -1 when killed after the grace).
void stop_children(std::vector<pid_t>& pids, std::chrono::milliseconds grace,
                   std::vector<int>& statuses, int sig = SIGTERM);

// The path of the running binary (/proc/self/exe), to start its siblings.
expected<std::string> self_exe();

// A loopback port nobody listens on right now (the kernel's choice), and
// with it the `run` - 1 after it (a data-parallel engine's ranks take
// consecutive ports).
expected<int> free_loopback_port(uint32_t run = 1);

// Whether something accepts TCP connections on 127.0.0.1:`port`.
bool loopback_accepting(int port);

// A fresh directory (mkdtemp) under the system temp dir, named after `tag`.
expected<std::string> make_temp_dir(const std::string& tag);

// The last `lines` lines of a text file ("" if unreadable), for showing why
// a child failed.
std::string file_tail(const std::string& path, size_t lines);

// CPU seconds (user + system) process `pid` has used so far, or -1 when
// /proc does not tell (it exited).
double cpu_seconds(pid_t pid);

// Removes a data directory a command made for itself, whatever the way out.
struct temp_dir_guard {
  std::string path;
  ~temp_dir_guard();
};

}  // namespace kvmesh::harness
