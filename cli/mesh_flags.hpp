// What the commands on the NATS mesh share: flags, exit codes, bus, process.
// Their common flags (bus, metrics, threads, wire limits) and validators,
// exit codes, the bus connection, the start and stop of a serving process,
// and aligned tables.
#pragma once

#include <CLI/CLI.hpp>
#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/number_flags.hpp"
#include "cluster/mesh.hpp"
#include "cluster/mesh_metrics.hpp"
#include "core/args.hpp"
#include "core/log.hpp"
#include "messages/limits.hpp"

namespace kvmesh::cli {

// Long enough for an auction that waits in a router's overload queue, short
// enough that a dead mesh is noticed by a person at a terminal.
constexpr uint32_t default_timeout_ms = 5000;

// -- the flags every command on the mesh has ---------------------------------

struct bus_flags {
  std::string nats;
  std::string prefix = "kvmesh";
  nats_options security;  // credentials and TLS (url unused)
};

// --nats (required), --prefix and the NATS credential and TLS flags.
void add_bus_flags(CLI::App& cmd, bus_flags& b);

// Checks what every command on the mesh shares; "" when fine.
std::string check_bus_flags(const bus_flags& b);

// --metrics-port and --metrics-address, on every process of the mesh.
struct metrics_flags {
  uint32_t port = 0;  // 0: no endpoint
  std::string address = "0.0.0.0";
};

void add_metrics_flags(CLI::App& cmd, metrics_flags& m);

// --threads, on every serving process of the mesh.
void add_threads_flag(CLI::App& cmd, uint32_t& threads);

// --max-payload-bytes, --max-request-blocks, --max-call-workers and the
// mailbox bounds: the limits on what a process of the mesh takes from the
// wire (messages/limits.hpp, docs/reliability.md), one [limits] key each.
void add_limit_flags(CLI::App& cmd, wire_limits& l);

// HOST:PORT, the host in brackets for IPv6 ([::1]:8080), the port 0 to
// 65535 (0: any free one): what --listen and --serve take.
bool split_listen(const std::string& s, std::string& host, int& port);

// -- exit codes --------------------------------------------------------------

// Exit codes: 2 for a bad flag or value (as CLI11's errors, see main.cpp),
// 1 when the mesh could not do what was asked. The log names the command
// (a client's line is "kvmesh route: ..." as ever; a process's is an event
// in its --log-format).
int usage_error(const char* cmd, const std::string& msg);
int run_error(const char* cmd, const std::string& msg);

// A node that refuses its options (invalid_argument) is a usage error, one
// that cannot start (a store, the server) a failure.
int start_error(const char* cmd, const error& e);
int start_error(const char* cmd, const std::string& what, const error& e);

// -- the bus and a serving process -------------------------------------------

// The connection settings of the flags, named `name` on the server.
nats_options bus_options(const bus_flags& b, const std::string& name);
// Connects to the checked --nats list as `name`; an unreachable server's
// error says where the URL comes from.
expected<std::unique_ptr<nats_bus>> connect_bus(const bus_flags& b,
                                                const std::string& name);

// What a process of the mesh (agent, router, index shard) runs its node on:
// its metrics, actor system, bus and metrics endpoint, made by
// start_process. Members are destroyed in the reverse order; the node,
// made after, goes first.
struct process_base {
  std::unique_ptr<process_metrics> pm;  // null without --metrics-port
  std::unique_ptr<caf::actor_system_config> sys_cfg;  // outlives sys
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<nats_bus> bus;
  std::unique_ptr<metrics::endpoint> server;
  std::string url;  // --nats for the log, passwords redacted

  // From now on scrapes ask the node.
  template <class Node>
  void watch(const Node& node) {
    if (pm) pm->watch(*sys, *bus, node);
  }

  // Serves until SIGINT or SIGTERM, then stops the node in the order its
  // parts depend on each other: the node sends its actors an exit; they may
  // still publish until they are gone, and the last one releases the reply
  // inbox, which unsubscribes from the bus; only then may the bus close.
  // The process's exit code.
  template <class Node>
  int serve(std::unique_ptr<Node>& node) {
    serve_until_stopped();
    server.reset();  // its scrapes ask the node's actors
    node.reset();
    sys->await_all_actors_done();
    bus.reset();
    KVMESH_INFO("stopped");
    return 0;
  }

 private:
  // Until SIGINT or SIGTERM, which the log records.
  static void serve_until_stopped();
};

// Starts what a process's node runs on, in the order each needs: `pm` (its
// metrics, made when --metrics-port asks), SIGINT and SIGTERM blocked
// before the actor system's threads start, the bus (its connection called
// `name`), the endpoint. A failure's code says how the process exits
// (start_error).
expected<process_base> start_process(const bus_flags& b, const metrics_flags& m,
                                     uint32_t threads, const std::string& name,
                                     std::unique_ptr<process_metrics> pm);

// The same, with the metrics made by make_metrics (which gives the node's
// options their meters) only when --metrics-port asks for them.
template <class MakeMetrics>
expected<process_base> start_process(const bus_flags& b, const metrics_flags& m,
                                     uint32_t threads, const std::string& name,
                                     MakeMetrics make_metrics) {
  std::unique_ptr<process_metrics> pm;
  if (m.port != 0) {
    auto made = make_metrics();
    if (!made) return made.err();
    pm = std::move(*made);
  }
  return start_process(b, m, threads, name, std::move(pm));
}

// Names an agent or router, by --name or `fallback`, in its subjects and
// its log.
status take_name(const char* role, std::string& name,
                 const std::string& fallback);

mesh_options make_mesh_options(const std::string& prefix,
                               uint32_t heartbeat_ms);

// -- tables ------------------------------------------------------------------

using table = std::vector<std::vector<std::string>>;

// `v` with `digits` decimals; nothing prints as -0.00.
std::string fixed(double v, int digits = 2);
// `v` as %g.
std::string general(double v);

// Prints rows (the first one the header) as aligned columns; a column of
// numbers is right-aligned so that digits line up.
void print_columns(const table& rows);

}  // namespace kvmesh::cli
