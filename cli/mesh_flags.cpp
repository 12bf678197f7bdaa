// What the commands on the NATS mesh share (cli/mesh_flags.hpp).
#include "cli/mesh_flags.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>

#include "cli/config.hpp"
#include "core/secret.hpp"
#include "harness/launcher.hpp"
#include "harness/process.hpp"

namespace kvmesh::cli {

namespace {

// The process's metrics endpoint, when --metrics-port asks for one: bound
// before the node joins the mesh, so that a port in use stops the process
// before anybody counts on it. Scrapes ask the node once watch() is called.
expected<std::unique_ptr<metrics::endpoint>> start_metrics(
    const metrics_flags& m, process_metrics* pm) {
  if (!pm) return std::unique_ptr<metrics::endpoint>();
  metrics::endpoint_options o;
  o.address = m.address;
  o.port = static_cast<uint16_t>(m.port);
  auto server = serve_metrics(*pm, o);
  if (server)
    KVMESH_INFO("serves metrics on http://%s:%u/metrics",
                m.address.find(':') != std::string::npos
                    ? ("[" + m.address + "]").c_str()
                    : m.address.c_str(),
                m.port);
  return server;
}

bool numeric(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::strchr("0123456789.-+e/", c)) return false;
  return true;
}

}  // namespace

void add_bus_flags(CLI::App& cmd, bus_flags& b) {
  cmd.add_option("--nats", b.nats,
                 "NATS server URL, or a comma-separated list of one "
                 "cluster's servers (the connection fails over among them)")
      ->required();
  cmd.add_option("--prefix", b.prefix,
                 "subject prefix: meshes sharing a NATS server differ in it")
      ->capture_default_str();
  add_nats_security(cmd, b.security);
}

std::string check_bus_flags(const bus_flags& b) {
  if (auto urls = split_urls(b.nats); !urls) return urls.err().message;
  if (auto st = check_prefix(b.prefix); !st) return st.err().message;
  if (auto st = check_security(b.security); !st) return st.err().message;
  return {};
}

void add_metrics_flags(CLI::App& cmd, metrics_flags& m) {
  cmd.add_option("--metrics-port", m.port,
                 "serve Prometheus metrics on this port at /metrics "
                 "(docs/metrics.md; 0: no endpoint)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd.add_option("--metrics-address", m.address,
                 "the address the metrics endpoint listens on")
      ->capture_default_str();
}

void add_threads_flag(CLI::App& cmd, uint32_t& threads) {
  cmd.add_option("--threads", threads,
                 "threads running this process's actors (0: one per core); "
                 "processes sharing a host do best splitting its cores")
      ->check(CLI::Range(0u, harness::max_threads))
      ->capture_default_str();
}

void add_limit_flags(CLI::App& cmd, wire_limits& l) {
  cmd.add_option("--max-payload-bytes", l.max_payload_bytes,
                 "refuse NATS payloads larger than this before decoding")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--max-request-blocks", l.max_request_blocks,
                 "refuse route requests of more blocks than this")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--max-call-workers", l.max_call_workers,
                 "refuse calls for bids (and releases) naming more workers "
                 "than this")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--max-mailbox-messages", l.max_mailbox_messages,
                 "refuse NATS messages (answered \"overloaded\") while this "
                 "many wait to be handled by the actor they are for")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--max-mailbox-bytes", l.max_mailbox_bytes,
                 "refuse NATS messages (answered \"overloaded\") while "
                 "this many payload bytes wait to be handled by the actor "
                 "they are for")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--max-worker-speed", l.max_worker_speed,
                 "refuse bids and heartbeats claiming a speed outside "
                 "[1/this, this] of the reference GPU")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--max-worker-blocks", l.max_worker_blocks,
                 "refuse bids and heartbeats claiming more blocks than this "
                 "in a tier")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--max-workers", l.max_workers,
                 "keep at most this many workers; refuse new ones' "
                 "heartbeats past it")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--max-workers-per-agent", l.max_workers_per_agent,
                 "keep at most this many workers of one node agent")
      ->check(positive)
      ->capture_default_str();
  cmd.add_option("--max-routers", l.max_routers,
                 "keep at most this many routers' heartbeats")
      ->check(positive)
      ->capture_default_str();
}

int usage_error(const char*, const std::string& msg) {
  log::error(msg);
  return 2;
}

int run_error(const char*, const std::string& msg) {
  log::error(msg);
  return 1;
}

int start_error(const char* cmd, const error& e) {
  return e.code == ec::invalid_argument ? usage_error(cmd, e.message)
                                        : run_error(cmd, e.message);
}

int start_error(const char* cmd, const std::string& what, const error& e) {
  return start_error(cmd, make_error(e.code, what + ": " + e.message));
}

nats_options bus_options(const bus_flags& b, const std::string& name) {
  nats_options o = b.security;
  o.url = url_list(b.nats);
  o.name = name;
  return o;
}

expected<std::unique_ptr<nats_bus>> connect_bus(const bus_flags& b,
                                                const std::string& name) {
  auto bus = nats_bus::connect(bus_options(b, name));
  // A refused credential or TLS says what to change; only an unreachable
  // server needs the hint about where the URL comes from.
  if (!bus && bus.err().code == ec::io_error &&
      bus.err().message.find(": cannot connect: ") != std::string::npos)
    return make_error(bus.err().code,
                      bus.err().message +
                          " (is nats-server running there? the URL comes "
                          "from --nats, KVMESH_NATS_URL or nats.url)");
  return bus;
}

void process_base::serve_until_stopped() {
  const int sig = harness::wait_for_stop();
  KVMESH_INFO("stopping (%s)", strsignal(sig));
}

expected<process_base> start_process(const bus_flags& b, const metrics_flags& m,
                                     uint32_t threads, const std::string& name,
                                     std::unique_ptr<process_metrics> pm) {
  process_base p;
  p.pm = std::move(pm);
  harness::block_signals({SIGINT, SIGTERM});
  p.sys_cfg = std::make_unique<caf::actor_system_config>();
  register_types(*p.sys_cfg);
  tune_for_latency(*p.sys_cfg, threads);
  p.sys = std::make_unique<caf::actor_system>(*p.sys_cfg);
  p.url = redact_url(url_list(b.nats));
  auto bus = connect_bus(b, name);
  if (!bus) return bus.err();
  p.bus = std::move(*bus);
  auto server = start_metrics(m, p.pm.get());
  if (!server)
    return make_error(server.err().code, "--metrics-port " +
                                             std::to_string(m.port) + ": " +
                                             server.err().message);
  p.server = std::move(*server);
  return p;
}

status take_name(const char* role, std::string& name,
                 const std::string& fallback) {
  if (name.empty()) name = fallback;
  if (auto st = check_name("--name", name); !st) return st;
  log::set_proc(std::string(role) + " " + name);
  return ok;
}

mesh_options make_mesh_options(const std::string& prefix,
                               uint32_t heartbeat_ms) {
  mesh_options m;
  m.subj.prefix = prefix;
  m.heartbeat = std::chrono::milliseconds(heartbeat_ms);
  return m;
}

std::string fixed(double v, int digits) {
  // Nothing prints as -0.00.
  if (std::fabs(v) < 0.5 * std::pow(10.0, -digits)) v = 0;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string general(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

void print_columns(const table& rows) {
  if (rows.empty()) return;
  const size_t cols = rows[0].size();
  std::vector<size_t> width(cols, 0);
  std::vector<bool> right(cols, rows.size() > 1);
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t c = 0; c < cols && c < rows[r].size(); ++c) {
      width[c] = std::max(width[c], rows[r][c].size());
      if (r > 0 && !rows[r][c].empty() && !numeric(rows[r][c]))
        right[c] = false;
    }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < cols; ++c) {
      const std::string& cell = c < row.size() ? row[c] : std::string();
      const std::string pad(width[c] - cell.size(), ' ');
      if (c > 0) line += "  ";
      line += right[c] ? pad + cell : cell + (c + 1 < cols ? pad : "");
    }
    std::printf("%s\n", line.c_str());
  }
}

bool split_listen(const std::string& s, std::string& host, int& port) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const std::string p = s.substr(colon + 1);
  if (p.empty() || p.size() > 5 ||
      p.find_first_not_of("0123456789") != std::string::npos)
    return false;
  port = std::stoi(p);
  return port <= 65535;
}

}  // namespace kvmesh::cli
