// The NATS mesh's commands: the processes (`kvmesh agent`, `router`,
// `index`) and the clients (`kvmesh route`, `admin`, `top`) over
// cluster/mesh.hpp.
#include <unistd.h>

#include <caf/all.hpp>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/config.hpp"
#include "cli/process.hpp"
#include "cli/report.hpp"
#include "cli/top_view.hpp"
#include "cluster/engine_agent.hpp"
#include "cluster/kv_subscriber.hpp"
#include "cluster/mesh.hpp"
#include "cluster/mesh_metrics.hpp"
#include "cluster/openai_front.hpp"
#include "core/block_hash.hpp"
#include "core/log.hpp"
#include "messages/json.hpp"
#include "messages/limits.hpp"

namespace kvmesh::cli {

namespace {

// Long enough for an auction that waits in a router's overload queue, short
// enough that a dead mesh is noticed by a person at a terminal.
constexpr uint32_t default_timeout_ms = 5000;

// Validators whose messages say what is wanted (CLI11's print the range of
// a double); CLI11 prefixes the flag's name.
CLI::Validator number_check(const char* want, const char* desc,
                            bool (*good)(double)) {
  return CLI::Validator(
      [want, good](std::string& text) -> std::string {
        size_t used = 0;
        double v = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || !std::isfinite(v) || !good(v))
          return std::string("must be ") + want + ", got '" + text + "'";
        return {};
      },
      desc);
}

const CLI::Validator positive = number_check("a positive number", "POSITIVE",
                                             [](double v) { return v > 0; });
const CLI::Validator non_negative = number_check(
    "a number >= 0", "NONNEGATIVE", [](double v) { return v >= 0; });
const CLI::Validator credit =
    number_check("a number from 0 to 1", "[0 - 1]",
                 [](double v) { return v >= 0 && v <= 1; });

// The flags every command on the mesh has.
struct bus_flags {
  std::string nats;
  std::string prefix = "kvmesh";
  nats_options security;  // credentials and TLS (url unused)
};

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

// --metrics-port and --metrics-address, on every process of the mesh.
struct metrics_flags {
  uint32_t port = 0;  // 0: no endpoint
  std::string address = "0.0.0.0";
};

// --threads, on every serving process of the mesh.
void add_threads_flag(CLI::App& cmd, uint32_t& threads) {
  cmd.add_option("--threads", threads,
                 "threads running this process's actors (0: one per core); "
                 "processes sharing a host do best splitting its cores")
      ->check(CLI::Range(0u, max_threads))
      ->capture_default_str();
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

// --max-payload-bytes, --max-request-blocks, --max-call-workers and the
// mailbox bounds: the limits on what a process of the mesh takes from the
// wire (messages/limits.hpp, docs/reliability.md), one [limits] key each.
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
}

// Exit codes: 2 for a bad flag or value (as CLI11's errors, see main.cpp),
// 1 when the mesh could not do what was asked. The log names the command
// (a client's line is "kvmesh route: ..." as ever; a process's is an event
// in its --log-format).
int usage_error(const char*, const std::string& msg) {
  log::error(msg);
  return 2;
}

int run_error(const char*, const std::string& msg) {
  log::error(msg);
  return 1;
}

// Checks one --nats entry's form, [nats:// | tls://][user[:password]@]
// host[:port], so that a typo is a flag error naming the entry rather than
// libnats' "Invalid Argument" or "No server available".
status check_url(const std::string& url, size_t entry,
                 const std::string& text) {
  auto bad = [&](const std::string& why) {
    const std::string which =
        url == text ? "'" + url + "'"
                    : "entry " + std::to_string(entry) + " '" + url + "'";
    return make_error(ec::parse_error, "--nats: " + which + " " + why);
  };
  std::string rest = url;
  if (const size_t sep = rest.find("://"); sep != std::string::npos) {
    const std::string scheme = rest.substr(0, sep);
    if (scheme != "nats" && scheme != "tls")
      return bad("has scheme '" + scheme + "' (want nats:// or tls://)");
    rest = rest.substr(sep + 3);
  }
  if (const size_t at = rest.rfind('@'); at != std::string::npos)
    rest = rest.substr(at + 1);  // user and password: the server checks them
  if (rest.find_first_of(" \t/?#") != std::string::npos)
    return bad("is not [nats://]host[:port]");
  std::string host = rest, port;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:port
    const size_t close = rest.find(']');
    if (close == std::string::npos)
      return bad("has no ']' after its IPv6 host");
    host = rest.substr(0, close + 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return bad("is not [nats://]host[:port]");
      port = rest.substr(close + 2);
      if (port.empty()) return bad("has an empty port");
    }
  } else if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (port.empty()) return bad("has an empty port");
  }
  if (host.empty() || host == "[]") return bad("has no host");
  if (!port.empty() &&
      (port.size() > 5 ||
       port.find_first_not_of("0123456789") != std::string::npos ||
       std::stoul(port) == 0 || std::stoul(port) > 65535))
    return bad("has port '" + port + "' (want 1 to 65535)");
  return ok;
}

// Splits --nats into its URLs, each checked by check_url.
expected<std::vector<std::string>> split_urls(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    std::string url = text.substr(
        pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const auto first = url.find_first_not_of(" \t");
    const auto last = url.find_last_not_of(" \t");
    url = first == std::string::npos ? "" : url.substr(first, last - first + 1);
    if (url.empty())
      return make_error(ec::parse_error, "--nats: entry " +
                                             std::to_string(out.size() + 1) +
                                             " of '" + text + "' is empty");
    if (auto st = check_url(url, out.size() + 1, text); !st) return st.err();
    out.push_back(std::move(url));
    if (comma == std::string::npos) return out;
    pos = comma + 1;
  }
}

// The checked --nats list as nats_bus takes it: the servers of one cluster,
// among which libnats fails over (and reconnects).
std::string url_list(const std::string& text) {
  const auto urls = split_urls(text);
  std::string out;
  if (!urls) return out;
  for (const auto& url : *urls)
    out += (out.empty() ? "" : ",") + url;
  return out;
}

expected<std::unique_ptr<nats_bus>> connect_bus(const bus_flags& b,
                                                const std::string& name) {
  nats_options o = b.security;
  o.url = url_list(b.nats);
  o.name = name;
  auto bus = nats_bus::connect(o);
  // A refused credential or TLS says what to change; only an unreachable
  // server needs the hint about where the URL comes from.
  if (!bus && bus.err().code == ec::io_error)
    return make_error(bus.err().code,
                      bus.err().message +
                          " (is nats-server running there? the URL comes "
                          "from --nats, KVMESH_NATS_URL or nats.url)");
  return bus;
}

// Until SIGINT or SIGTERM, which the log records.
void serve_until_stopped() {
  const int sig = wait_for_stop();
  KVMESH_INFO("stopping (%s)", strsignal(sig));
}

// A node that refuses its options (invalid_argument) is a usage error, one
// that cannot start (a store, the server) a failure.
int start_error(const char* cmd, const error& e) {
  return e.code == ec::invalid_argument ? usage_error(cmd, e.message)
                                        : run_error(cmd, e.message);
}

int start_error(const char* cmd, const std::string& what, const error& e) {
  return start_error(cmd, make_error(e.code, what + ": " + e.message));
}

// The process's metrics endpoint, when --metrics-port asks for one: bound
// before the node joins the mesh, so that a port in use stops the process
// before anybody counts on it. Scrapes ask the node once watch() is called.
expected<std::unique_ptr<metrics::http_server>> start_metrics(
    const metrics_flags& m, process_metrics* pm) {
  if (!pm) return std::unique_ptr<metrics::http_server>();
  metrics::http_server_options o;
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

// What a process of the mesh (agent, router, index shard) runs its node on:
// its metrics, actor system, bus and metrics endpoint, made by
// start_process. Members are destroyed in the reverse order; the node,
// made after, goes first.
struct process_base {
  std::unique_ptr<process_metrics> pm;  // null without --metrics-port
  std::unique_ptr<caf::actor_system_config> sys_cfg;  // outlives sys
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<nats_bus> bus;
  std::unique_ptr<metrics::http_server> server;
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
};

// Starts what a process's node runs on, in the order each needs: its
// metrics (when --metrics-port asks; make_metrics gives the node's options
// their meters), SIGINT and SIGTERM blocked before the actor system's
// threads start, the bus (its connection called `name`), the endpoint. A
// failure's code says how the process exits (start_error).
template <class MakeMetrics>
expected<process_base> start_process(const bus_flags& b, const metrics_flags& m,
                                     uint32_t threads, const std::string& name,
                                     MakeMetrics make_metrics) {
  process_base p;
  if (m.port != 0) {
    auto pm = make_metrics();
    if (!pm) return pm.err();
    p.pm = std::move(*pm);
  }
  block_signals({SIGINT, SIGTERM});
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

// Names an agent or router, by --name or `fallback`, in its subjects and
// its log.
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

// Checks what every command on the mesh shares; "" when fine.
std::string check_bus_flags(const bus_flags& b) {
  if (auto urls = split_urls(b.nats); !urls) return urls.err().message;
  if (auto st = check_prefix(b.prefix); !st) return st.err().message;
  if (auto st = check_security(b.security); !st) return st.err().message;
  return {};
}

// The prompt's chained block hashes, as parse_route_json makes them from
// "tokens": the same function, so a JSON client and this one agree.
expected<std::vector<uint64_t>> chain_of(const std::vector<uint32_t>& tokens,
                                         uint32_t block_tokens,
                                         const std::string& salt) {
  auto hashes = hash_blocks(tokens, block_tokens, salt);
  if (!hashes)
    return make_error(ec::invalid_argument,
                      "--tokens: " + hashes.err().message);
  if (hashes->empty())
    return make_error(ec::invalid_argument,
                      "--tokens: " + std::to_string(tokens.size()) +
                          " tokens make no full block of " +
                          std::to_string(block_tokens) + " (--block-tokens)");
  std::vector<uint64_t> chain;
  for (const auto& h : *hashes)
    chain.push_back(h.seq);
  return chain;
}

// -- tables -------------------------------------------------------------------

std::string fixed(double v, int digits = 2) {
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

bool numeric(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::strchr("0123456789.-+e/", c)) return false;
  return true;
}

using table = std::vector<std::vector<std::string>>;

// Prints rows (the first one the header) as aligned columns; a column of
// numbers is right-aligned so that digits line up.
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

// -- kvmesh agent -------------------------------------------------------------

struct agent_flags {
  bus_flags bus;
  metrics_flags metrics;
  uint32_t threads = 0;  // the actor system's; 0: one per core
  wire_limits limits;
  std::string engine;
  std::string name;
  uint32_t workers = 0;
  uint32_t first_id = 0;
  uint32_t heartbeat_ms = 1000;
  double time_scale = 1;
  double speed = 1;
  sim_config cfg;  // one GPU's engine: tiers, block size, model factor
  // Real engines (vllm, sglang).
  std::string kv_events;
  std::string kv_replay;
  std::string kv_topic;
  std::string engine_url;
  uint32_t dp_size = 1;
  std::string front_host = "0.0.0.0";
  std::string advertise_host;
  uint32_t front_port = 0;
  uint32_t metrics_ms = 1000;
  uint32_t unhealthy_after = 3;
  uint32_t award_ttl_ms = 60000;
  CLI::Option* workers_opt = nullptr;
  CLI::Option* gpu_blocks_opt = nullptr;
  CLI::Option* block_tokens_opt = nullptr;
  std::vector<CLI::Option*> sim_only;  // meaningless for a real engine
};

// `kvmesh agent --engine vllm|sglang`: one worker per data-parallel rank,
// following the engine's KV events and fronting its OpenAI API.
int run_engine_agent(agent_flags& f) {
  const char* cmd = "agent";
  const std::string e = "--engine " + f.engine;
  if (f.kv_events.empty())
    return usage_error(cmd, e + ": needs --kv-events tcp://HOST:PORT (the "
                                "engine's KV event publisher)");
  // A config file may serve sim agents too: only flags are refused.
  if (from_command_line(f.workers_opt))
    return usage_error(cmd, e + ": --workers is for sim; a real engine has "
                                "one worker per rank (--data-parallel-size)");
  for (CLI::Option* o : f.sim_only)
    if (from_command_line(o))
      return usage_error(cmd, e + ": " + o->get_name() + " is for sim only");
  if (f.block_tokens_opt->count() == 0)
    return usage_error(cmd, e + ": needs --block-tokens, the engine's block "
                                "size (vLLM --block-size, SGLang "
                                "--page-size)");
  if (auto st =
          take_name("agent", f.name, "agent-" + std::to_string(f.first_id));
      !st)
    return usage_error(cmd, st.err().message);
  if (f.front_port + uint64_t{f.dp_size} - 1 > 65535)
    return usage_error(cmd, "--front-port: the fronts' ports pass 65535");
  engine_agent_options o;
  o.mesh = make_mesh_options(f.bus.prefix, f.heartbeat_ms);
  o.name = f.name;
  o.engine = f.engine;
  o.kv_events = f.kv_events;
  o.kv_replay = f.kv_replay;
  o.kv_topic = f.kv_topic;
  o.engine_url = f.engine_url;
  o.dp_size = f.dp_size;
  o.first_id = f.first_id;
  o.state.block_tokens = f.cfg.block_tokens;
  o.state.gpu_blocks = f.gpu_blocks_opt->count() > 0 ? f.cfg.gpu_blocks : 0;
  o.state.ledger.speed = f.speed;
  o.state.ledger.refuse_growth = f.cfg.refuse_growth;
  o.state.award_ttl_ms = f.award_ttl_ms;
  o.front_host = f.front_host;
  o.advertise_host = f.advertise_host;
  o.front_port = static_cast<int>(f.front_port);
  o.poll = std::chrono::milliseconds(f.metrics_ms);
  o.unhealthy_after = f.unhealthy_after;
  for (const auto& [flag, url] :
       {std::pair<const char*, const std::string*>{"--kv-events", &f.kv_events},
        {"--kv-replay", &f.kv_replay}})
    if (!url->empty())
      if (auto ep = endpoint_of_rank(*url, f.dp_size - 1); !ep)
        return usage_error(cmd, std::string(flag) + ": " + ep.err().message);
  if (!f.engine_url.empty())
    if (auto st = check_engine_url(f.engine_url); !st)
      return usage_error(cmd, "--engine-url: " + st.err().message);
  auto p = start_process(f.bus, f.metrics, f.threads, f.name,
                         [&] { return process_metrics::for_agent(o); });
  if (!p) return start_error(cmd, p.err());
  auto node = engine_agent::start(*p->sys, *p->bus, o);
  if (!node) return start_error(cmd, f.name, node.err());
  p->watch(**node);
  for (uint32_t r = 0; r < f.dp_size; ++r)
    KVMESH_INFO(
        "serves worker %u (engine %s rank %u, KV "
        "events %s%s%s, blocks of %u tokens, front %s) on %s, "
        "prefix %s",
        f.first_id + r, f.engine.c_str(), r,
        endpoint_of_rank(f.kv_events, r)->c_str(),
        f.kv_topic.empty() ? "" : " topic ", f.kv_topic.c_str(),
        f.cfg.block_tokens,
        f.engine_url.empty() ? "none (no --engine-url)"
                             : (*node)->endpoint(r).c_str(),
        p->url.c_str(), f.bus.prefix.c_str());
  return p->serve(*node);
}

int run_agent(agent_flags f) {
  const char* cmd = "agent";
  set_wire_limits(f.limits);
  if (auto why = check_bus_flags(f.bus); !why.empty())
    return usage_error(cmd, why);
  if (f.engine == "vllm" || f.engine == "sglang") return run_engine_agent(f);
  if (f.engine != "sim")
    return usage_error(
        cmd, "--engine " + f.engine + ": unknown engine (sim, vllm or sglang)");
  if (f.workers_opt->count() == 0)
    return usage_error(cmd, "--engine sim: needs --workers N");
  const uint64_t last = uint64_t{f.first_id} + f.workers - 1;
  if (last >= max_worker_id)
    return usage_error(cmd, "--worker-id/--workers: worker ids " +
                                std::to_string(f.first_id) + ".." +
                                std::to_string(last) + " exceed " +
                                std::to_string(max_worker_id - 1));
  if (auto st =
          take_name("agent", f.name, "agent-" + std::to_string(f.first_id));
      !st)
    return usage_error(cmd, st.err().message);
  f.cfg.workers = f.workers;
  if (auto st = validate(f.cfg); !st) return usage_error(cmd, st.err().message);
  agent_options ao;
  ao.mesh = make_mesh_options(f.bus.prefix, f.heartbeat_ms);
  ao.name = f.name;
  for (uint32_t id = f.first_id; id <= last; ++id) {
    worker_options wo;
    wo.engine = fleet_engine_config(f.cfg, id);
    wo.engine.speed = f.speed;
    auto probe = engine::make(wo.engine);
    if (!probe) return usage_error(cmd, probe.err().message);
    wo.ledger = fleet_worker_config(f.cfg, id, *probe);
    wo.time_scale = f.time_scale;
    ao.workers.push_back(std::move(wo));
  }
  auto p = start_process(f.bus, f.metrics, f.threads, f.name,
                         [&] { return process_metrics::for_agent(ao); });
  if (!p) return start_error(cmd, p.err());
  auto node = agent_node::start(*p->sys, *p->bus, ao);
  if (!node) return start_error(cmd, f.name, node.err());
  p->watch(**node);
  KVMESH_INFO(
      "serves workers %u-%u (engine sim, speed %g, "
      "%" PRIu64 "/%" PRIu64 "/%" PRIu64
      " GPU/host/disk blocks of %u tokens, time scale %g) on %s, "
      "prefix %s",
      f.first_id, static_cast<uint32_t>(last), f.speed, f.cfg.gpu_blocks,
      f.cfg.host_blocks, f.cfg.disk_blocks, f.cfg.block_tokens, f.time_scale,
      p->url.c_str(), f.bus.prefix.c_str());
  return p->serve(*node);
}

}  // namespace

void add_agent(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<agent_flags>();
  auto* cmd = app.add_subcommand(
      "agent",
      "run a node agent: WORKERs served on NATS, bidding for requests, "
      "pushing heartbeats and KV events; simulated GPUs (--engine sim) or "
      "a real engine's ranks (--engine vllm|sglang: its KV events over ZMQ, "
      "its OpenAI API fronted); until SIGINT/SIGTERM");
  add_bus_flags(*cmd, f->bus);
  add_metrics_flags(*cmd, f->metrics);
  add_threads_flag(*cmd, f->threads);
  add_limit_flags(*cmd, f->limits);
  cmd->add_option("--engine", f->engine, "the GPUs' engine: sim, vllm, sglang")
      ->required();
  f->workers_opt =
      cmd->add_option("--workers", f->workers,
                      "WORKERs (simulated GPUs) on this node (sim)")
          ->check(positive);
  cmd->add_option("--worker-id", f->first_id,
                  "id of the first worker; the others follow (ids are "
                  "unique across the mesh)")
      ->capture_default_str();
  cmd->add_option("--name", f->name,
                  "the agent's name in its subjects, unique in the mesh "
                  "(default agent-<first worker id>)");
  cmd->add_option("--heartbeat-ms", f->heartbeat_ms,
                  "push each worker's status this often")
      ->check(positive)
      ->capture_default_str();
  f->sim_only.push_back(
      cmd->add_option("--time-scale", f->time_scale,
                      "run the simulated engines X times faster than real "
                      "time (sim)")
          ->check(positive)
          ->capture_default_str());
  cmd->add_option("--speed", f->speed,
                  "prefill speed of these GPUs relative to the reference")
      ->check(positive)
      ->capture_default_str();
  sim_config& c = f->cfg;
  f->gpu_blocks_opt =
      cmd->add_option("--gpu-blocks", c.gpu_blocks,
                      "GPU KV blocks per worker (vllm, sglang: default "
                      "learnt from the engine's metrics)")
          ->check(positive)
          ->capture_default_str();
  f->sim_only.push_back(
      cmd->add_option("--host-blocks", c.host_blocks,
                      "host-memory blocks per worker (0: no tier) (sim)")
          ->capture_default_str());
  f->sim_only.push_back(
      cmd->add_option("--disk-blocks", c.disk_blocks,
                      "disk blocks per worker (0: no tier) (sim)")
          ->capture_default_str());
  f->block_tokens_opt =
      cmd->add_option("--block-tokens", c.block_tokens,
                      "tokens per block (the routers' and clients' too; for "
                      "vllm and sglang the engine's block or page size)")
          ->check(positive)
          ->capture_default_str();
  f->sim_only.push_back(cmd->add_option("--model-factor", c.model_factor,
                                        "scale every engine step time by X "
                                        "(sim)")
                            ->check(positive)
                            ->capture_default_str());
  cmd->add_option("--refuse-growth", c.refuse_growth,
                  "refuse an award when the queue grew by more than X "
                  "request sizes beyond what the router priced (0: never)")
      ->check(non_negative)
      ->capture_default_str();
  auto* real = "Real engines (--engine vllm|sglang)";
  cmd->add_option("--kv-events", f->kv_events,
                  "the engine's KV event publisher of rank 0, tcp://HOST:PORT "
                  "(rank r at PORT + r)")
      ->group(real);
  cmd->add_option("--kv-replay", f->kv_replay,
                  "its replay endpoint of rank 0 (replay_endpoint of "
                  "--kv-events-config): lost events are asked again instead "
                  "of forgetting the worker's cache")
      ->group(real);
  cmd->add_option("--kv-topic", f->kv_topic,
                  "the publisher's topic (\"topic\" of --kv-events-config)")
      ->group(real)
      ->capture_default_str();
  cmd->add_option("--engine-url", f->engine_url,
                  "the engine's OpenAI API, http://HOST:PORT: fronted per "
                  "rank, its /health and /metrics followed")
      ->group(real);
  cmd->add_option("--data-parallel-size", f->dp_size,
                  "the engine's data-parallel ranks: one worker each, ids "
                  "from --worker-id")
      ->check(CLI::Range(1, 1024))
      ->group(real)
      ->capture_default_str();
  cmd->add_option("--front-host", f->front_host,
                  "address the OpenAI fronts listen on")
      ->group(real)
      ->capture_default_str();
  cmd->add_option("--front-port", f->front_port,
                  "port of rank 0's front, rank r at PORT + r (0: free ports)")
      ->check(CLI::Range(0, 65535))
      ->group(real)
      ->capture_default_str();
  cmd->add_option("--advertise-host", f->advertise_host,
                  "host named in decisions (default: --front-host, or this "
                  "host's name when that is a wildcard)")
      ->group(real);
  cmd->add_option("--metrics-ms", f->metrics_ms,
                  "read the engine's /health and /metrics this often")
      ->check(positive)
      ->group(real)
      ->capture_default_str();
  cmd->add_option("--award-ttl-ms", f->award_ttl_ms,
                  "an awarded request whose client has not called the front "
                  "within this is dropped from the queue")
      ->check(positive)
      ->group(real)
      ->capture_default_str();
  cmd->add_option("--unhealthy-after", f->unhealthy_after,
                  "failed /health reads in a row before the workers refuse "
                  "awards")
      ->check(positive)
      ->group(real)
      ->capture_default_str();
  cmd->callback([f, &run] { run = [f] { return run_agent(*f); }; });
}

namespace {

// -- kvmesh router ------------------------------------------------------------

struct router_flags {
  bus_flags bus;
  std::string name;
  bool durable = false;
  uint32_t durable_ack_wait_ms = 5000;
  uint32_t durable_replicas = 1;
  uint32_t durable_deliveries = 10;
  metrics_flags metrics;
  uint32_t threads = 0;  // the actor system's; 0: one per core
  wire_limits limits;
  uint32_t heartbeat_ms = 1000;
  uint32_t missed_beats = 3;
  router_options router;  // pricing, fan-out, auctions, seed
};

void add_price_flags(CLI::App& cmd, price_config& p) {
  cmd.add_option("--c-host", p.c_host,
                 "credit of a block in host memory, for workers that do not "
                 "measure their own")
      ->check(credit)
      ->capture_default_str();
  cmd.add_option("--c-disk", p.c_disk,
                 "credit of a block on disk, for workers that do not measure "
                 "their own")
      ->check(credit)
      ->capture_default_str();
  cmd.add_option("--beta", p.beta, "weight of occupancy")
      ->check(non_negative)
      ->capture_default_str();
  cmd.add_option("--k", p.k, "GPU credit decay with excess queue")
      ->check(non_negative)
      ->capture_default_str();
  cmd.add_option("--overflow", p.overflow, "price per block beyond capacity")
      ->check(non_negative)
      ->capture_default_str();
  cmd.add_option("--ceiling", p.overload_ceiling,
                 "cheapest price per request block above which the fleet is "
                 "saturated and requests wait (0: never)")
      ->check(non_negative)
      ->capture_default_str();
}

int run_router(router_flags f) {
  const char* cmd = "router";
  set_wire_limits(f.limits);
  if (auto why = check_bus_flags(f.bus); !why.empty())
    return usage_error(cmd, why);
  if (auto st =
          take_name("router", f.name, "router-" + std::to_string(getpid()));
      !st)
    return usage_error(cmd, st.err().message);
  router_node_options rn;
  rn.mesh = make_mesh_options(f.bus.prefix, f.heartbeat_ms);
  rn.mesh.missed_beats = f.missed_beats;
  rn.name = f.name;
  rn.router = f.router;
  rn.router.name = f.name;
  rn.router.heartbeat = rn.mesh.heartbeat;
  rn.router.missed_beats = f.missed_beats;
  rn.durable = f.durable;
  rn.durable_ack_wait = std::chrono::milliseconds(f.durable_ack_wait_ms);
  rn.durable_replicas = static_cast<int>(f.durable_replicas);
  rn.durable_deliveries = f.durable_deliveries;
  auto p = start_process(f.bus, f.metrics, f.threads, f.name,
                         [&] { return process_metrics::for_router(rn); });
  if (!p) return start_error(cmd, p.err());
  auto node = router_node::start(*p->sys, *p->bus, rn);
  if (!node) return start_error(cmd, f.name, node.err());
  p->watch(**node);
  KVMESH_INFO(
      "routes on %s, prefix %s (fanout %zu, max inflight %zu, "
      "max held %zu, durable queue %s)",
      p->url.c_str(), f.bus.prefix.c_str(), f.router.fanout,
      f.router.max_inflight, f.router.max_held, f.durable ? "on" : "off");
  return p->serve(*node);
}

}  // namespace

void add_router(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<router_flags>();
  auto* cmd = app.add_subcommand(
      "router",
      "run a router: auctions route requests among the workers it hears "
      "heartbeats from, and serves `kvmesh admin`; until SIGINT/SIGTERM");
  add_bus_flags(*cmd, f->bus);
  cmd->add_option("--name", f->name,
                  "the router's name, unique in the mesh (default "
                  "router-<pid>)");
  cmd->add_flag("--durable", f->durable,
                "also take requests from the durable JetStream queue "
                "(needs nats-server -js)");
  cmd->add_option("--durable-ack-wait-ms", f->durable_ack_wait_ms,
                  "a durable request not acked within this (its router "
                  "died) is handed to another router; the last router to "
                  "start sets it for all")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--durable-deliveries", f->durable_deliveries,
                  "a durable request no worker could take (none live, "
                  "none answered, overloaded) is handed back to the queue "
                  "for a heartbeat until delivered this often, then "
                  "answered with the error")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--durable-replicas", f->durable_replicas,
                  "copies of the durable queue and its decision records in "
                  "a NATS cluster (3: survives one server of three), when "
                  "this router creates them")
      ->check(CLI::Range(1, 5))
      ->capture_default_str();
  add_metrics_flags(*cmd, f->metrics);
  add_threads_flag(*cmd, f->threads);
  add_limit_flags(*cmd, f->limits);
  cmd->add_option("--heartbeat-ms", f->heartbeat_ms,
                  "push this router's status this often; workers' beats are "
                  "expected as often")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--missed-beats", f->missed_beats,
                  "count a worker out after missing this many heartbeats")
      ->check(positive)
      ->capture_default_str();
  router_options& r = f->router;
  cmd->add_option("--fanout", r.fanout,
                  "above this many workers, bids come from the index's "
                  "holders plus the least loaded")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--max-auctions", r.max_auctions,
                  "auctions per request at most (refusals re-auction)")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--max-inflight", r.max_inflight,
                  "auctions in flight at once; later requests wait")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--max-held", r.max_held,
                  "requests waiting or held at most; beyond, 'overloaded'")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--block-tokens", r.block_tokens,
                  "tokens per block, for the output-length estimate")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--seed", r.seed, "seed of the tie-breaking")
      ->capture_default_str();
  add_price_flags(*cmd, r.price);
  cmd->callback([f, &run] { run = [f] { return run_router(*f); }; });
}

namespace {

// -- kvmesh index -------------------------------------------------------------

struct index_flags {
  bus_flags bus;
  metrics_flags metrics;
  uint32_t threads = 0;  // the actor system's; 0: one per core
  wire_limits limits;
  std::string shard;
  std::string db;
  uint32_t heartbeat_ms = 1000;
};

// "I/N": shard I of N, 0 <= I < N. Digits only, so "+1/2" or "1/2x" fail.
expected<std::pair<uint32_t, uint32_t>> parse_shard(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return make_error(ec::parse_error,
                      "--shard: '" + text + "' " + why +
                          " (expected I/N: shard I of N, 0 <= I < N)");
  };
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return bad("has no '/'");
  auto number = [](const std::string& s, uint32_t& out) {
    if (s.empty() || s.size() > 9 ||
        s.find_first_not_of("0123456789") != std::string::npos)
      return false;
    out = static_cast<uint32_t>(std::stoul(s));
    return true;
  };
  uint32_t i = 0, n = 0;
  if (!number(text.substr(0, slash), i)) return bad("has no shard number I");
  if (!number(text.substr(slash + 1), n)) return bad("has no shard count N");
  if (n == 0) return bad("has no shards (N must be at least 1)");
  if (i >= n) return bad("names a shard past the last one");
  return std::make_pair(i, n);
}

int run_index(const index_flags& f) {
  const char* cmd = "index";
  set_wire_limits(f.limits);
  if (auto why = check_bus_flags(f.bus); !why.empty())
    return usage_error(cmd, why);
  auto shard = parse_shard(f.shard);
  if (!shard) return usage_error(cmd, shard.err().message);
  log::set_proc("index shard-" + std::to_string(shard->first));
  if (f.db.empty()) return usage_error(cmd, "--db: the directory is empty");
  shard_node_options so;
  so.mesh = make_mesh_options(f.bus.prefix, f.heartbeat_ms);
  so.shard.shard = shard->first;
  so.shard.dir = f.db;
  so.shards = shard->second;
  const std::string name = "index-" + std::to_string(shard->first);
  auto p = start_process(f.bus, f.metrics, f.threads, name,
                         [&] { return process_metrics::for_shard(so); });
  if (!p) return start_error(cmd, p.err());
  auto node = shard_node::start(*p->sys, *p->bus, so);
  if (!node) return start_error(cmd, "--db " + f.db, node.err());
  p->watch(**node);
  KVMESH_INFO("shard %u/%u (RocksDB %s) serves on %s, prefix %s", shard->first,
              shard->second, f.db.c_str(), p->url.c_str(),
              f.bus.prefix.c_str());
  return p->serve(*node);
}

}  // namespace

void add_index(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<index_flags>();
  auto* cmd = app.add_subcommand(
      "index",
      "run an index shard: which worker holds which blocks, fed by KV events "
      "and kept in RocksDB, queried by routers; until SIGINT/SIGTERM");
  add_bus_flags(*cmd, f->bus);
  add_metrics_flags(*cmd, f->metrics);
  add_threads_flag(*cmd, f->threads);
  add_limit_flags(*cmd, f->limits);
  cmd->add_option("--shard", f->shard,
                  "I/N: this is shard I (from 0) of an index of N shards")
      ->required();
  cmd->add_option("--db", f->db, "RocksDB directory (created when missing)")
      ->required();
  cmd->add_option("--heartbeat-ms", f->heartbeat_ms,
                  "push this shard's status this often")
      ->check(positive)
      ->capture_default_str();
  cmd->callback([f, &run] { run = [f] { return run_index(*f); }; });
}

namespace {

// -- kvmesh route -------------------------------------------------------------

struct route_flags {
  bus_flags bus;
  bool durable = false;
  uint64_t request_id = 0;
  CLI::Option* request_id_opt = nullptr;
  uint32_t timeout_ms = default_timeout_ms;
  uint32_t block_tokens = 0;
  std::string tokens;
  std::string text;
  CLI::Option* tokens_opt = nullptr;
  CLI::Option* text_opt = nullptr;
  std::string salt;
  uint32_t output_tokens = 0;
  bool json = false;
};

// 63 bits, so that ids stay positive for clients with signed integers.
uint64_t random_request_id() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  return v & 0x7fffffffffffffffull;
}

void print_decision(const decision& d) {
  std::printf("request %" PRIu64 " -> worker %u%s%s (%u auction%s)\n",
              d.request, d.worker, d.endpoint.empty() ? "" : " at ",
              d.endpoint.c_str(), d.auctions, d.auctions == 1 ? "" : "s");
  if (d.prices.empty()) return;
  table rows{{"won", "worker", "read", "credit_gpu", "credit_host",
              "credit_disk", "space", "speed", "overflow", "price", "delta"}};
  for (const auto& p : d.prices)
    rows.push_back({p.worker == d.worker ? "*" : "", std::to_string(p.worker),
                    fixed(p.read), fixed(p.credit_gpu), fixed(p.credit_host),
                    fixed(p.credit_disk), fixed(p.space), general(p.speed),
                    fixed(p.overflow), fixed(p.price), fixed(p.delta)});
  print_columns(rows);
}

// Why a route request got no decision, for a person: the router's reason
// (it names the request) or the bus's, with what to check where the reason
// alone does not say. libnats' texts are matched because nats_bus reports
// every failed request as an io_error.
std::string route_failure(const route_flags& f, const subjects& subj,
                          const route_request_msg& r, const error& e) {
  const std::string id = std::to_string(r.id);
  const std::string& why = e.message;
  const std::string subject = f.durable ? subj.route_durable() : subj.route();
  auto ends_with = [&](const std::string& tail) {
    return why.size() >= tail.size() &&
           why.compare(why.size() - tail.size(), tail.size(), tail) == 0;
  };
  const bool no_responders =
      why.find("No responders available") != std::string::npos;
  // Durable: nobody answers JetStream's API on a server without it.
  if (f.durable && no_responders)
    return "request " + id + ": " + why +
           (why.find("JetStream is not enabled") != std::string::npos
                ? ""
                : " (the durable queue needs JetStream: is nats-server "
                  "running with -js?)");
  if (no_responders)
    return "request " + id + ": no router serves " + subject +
           " (is a router running on this NATS server with --prefix " +
           subj.prefix + "?)";
  if (e.code == ec::io_error && ends_with(": Timeout"))
    return "request " + id + ": no decision within " +
           std::to_string(f.timeout_ms) + " ms from the routers on " + subject;
  std::string msg = why;
  if (msg.find("request " + id) == std::string::npos)
    msg = "request " + id + ": " + msg;
  if (f.durable && e.code == ec::timeout)
    msg +=
        "; are routers with --durable running on this NATS server with "
        "--prefix " +
        subj.prefix + "?";
  // Every bidder refused the award, in every auction. A worker refuses a
  // prompt of more blocks than its tokens fill at the worker's block size,
  // which a smaller --block-tokens than the agents' makes, and one that
  // does not fit its GPU.
  if (why.find("no worker took request") != std::string::npos)
    msg += " (every worker refused it: check that --block-tokens " +
           std::to_string(f.block_tokens) +
           " matches the agents' --block-tokens, and that " +
           std::to_string(r.input_tokens) + " tokens fit a worker's GPU)";
  return msg;
}

int run_route(const route_flags& f) {
  const char* cmd = "route";
  if (auto why = check_bus_flags(f.bus); !why.empty())
    return usage_error(cmd, why);
  if ((f.tokens_opt->count() > 0) == (f.text_opt->count() > 0))
    return usage_error(cmd, "--tokens or --text: give exactly one");
  route_request_msg r;
  r.id = f.request_id_opt->count() > 0 ? f.request_id : random_request_id();
  r.output_tokens = f.output_tokens;
  r.block_tokens = f.block_tokens;  // the router refuses another size
  if (f.text_opt->count() > 0) {
    // No tokenizer here: the text's bytes in chunks stand for its blocks.
    auto chain = hash_text_blocks(f.text, f.block_tokens);
    if (!chain) return usage_error(cmd, "--text: " + chain.err().message);
    if (chain->empty())
      return usage_error(
          cmd, "--text: " + std::to_string(f.text.size()) +
                   " bytes make no full block of " +
                   std::to_string(f.block_tokens * text_bytes_per_token) +
                   " bytes (--block-tokens x " +
                   std::to_string(text_bytes_per_token) + ")");
    KVMESH_WARN(
        "--text is hashed in chunks of %u bytes, not tokens: the blocks are "
        "approximate and match no engine's cache",
        f.block_tokens * text_bytes_per_token);
    r.blocks = std::move(*chain);
    r.input_tokens = static_cast<uint32_t>(
        (f.text.size() + text_bytes_per_token - 1) / text_bytes_per_token);
  } else {
    auto tokens = parse_token_list(f.tokens);
    if (!tokens) return usage_error(cmd, tokens.err().message);
    auto chain = chain_of(*tokens, f.block_tokens, f.salt);
    if (!chain) return usage_error(cmd, chain.err().message);
    r.blocks = std::move(*chain);
    r.input_tokens = static_cast<uint32_t>(tokens->size());
  }
  auto bus = connect_bus(f.bus, "kvmesh-route");
  if (!bus) return run_error(cmd, bus.err().message);
  subjects subj;
  subj.prefix = f.bus.prefix;
  const std::chrono::milliseconds timeout(f.timeout_ms);
  // Both turn a router's "no decision" reply into an error.
  auto d = f.durable ? route_durable_once(**bus, subj, r, timeout)
                     : route_once(**bus, subj, r, timeout);
  if (!d) return run_error(cmd, route_failure(f, subj, r, d.err()));
  if (f.json)
    std::printf("%s\n", decision_json(*d).c_str());
  else
    print_decision(*d);
  return 0;
}

}  // namespace

void add_route(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<route_flags>();
  auto* cmd = app.add_subcommand(
      "route",
      "route one request through the mesh and print the decision: the "
      "winner and every bidder's price");
  add_bus_flags(*cmd, f->bus);
  cmd->add_flag("--durable", f->durable,
                "send through the durable JetStream queue: stored before a "
                "router takes it, so a router's death loses nothing (needs "
                "nats-server -js and routers started with --durable)");
  f->request_id_opt =
      cmd->add_option("--request-id", f->request_id,
                      "the request's id (default: random, 63 bits)");
  cmd->add_option("--timeout-ms", f->timeout_ms,
                  "wait this long for a decision")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--block-tokens", f->block_tokens,
                  "tokens per block, as the mesh's workers have it")
      ->required()
      ->check(positive);
  f->tokens_opt =
      cmd->add_option("--tokens", f->tokens, "the prompt's token ids: 1,2,3");
  f->text_opt = cmd->add_option(
      "--text", f->text,
      "the prompt as text, when its token ids are unknown: hashed in chunks "
      "of block-tokens x 4 bytes (approximate; a warning is printed)");
  cmd->add_option("--salt", f->salt, "salt or LoRA name of the block hashes");
  cmd->add_option("--output-tokens", f->output_tokens,
                  "expected output length (default: the router estimates)");
  cmd->add_flag("--json", f->json, "print the decision as JSON");
  cmd->footer(
      "Exit status: 0 decided, 1 no decision (the reason on stderr), 2 bad "
      "flag or value.");
  cmd->callback([f, &run] { run = [f] { return run_route(*f); }; });
}

namespace {

// -- kvmesh admin -------------------------------------------------------------

struct admin_flags {
  bus_flags bus;
  bool json = false;
  uint32_t timeout_ms = default_timeout_ms;
  std::string verb;  // the subject's verb (subjects::admin)
  uint32_t worker = 0;
  uint32_t block_tokens = 0;
  std::string tokens;
  price_config weights;  // weights set: the values given
  std::vector<std::pair<CLI::Option*, double price_config::*>> weight_opts;
};

// A price for JSON: null when there is none (NaN, which JSON lacks).
json price_json(double price) {
  return std::isnan(price) ? json(nullptr) : json(price);
}

const char* state_of(const worker_status& w) {
  return w.gone        ? "gone"
         : w.draining  ? "draining"
         : w.unhealthy ? "unhealthy"
                       : "live";
}

void print_admin(const admin_flags& f, const admin_reply& r) {
  const std::string& v = f.verb;
  if (f.json) {
    json out;
    if (v == "workers") {
      json list = json::array();
      for (const auto& w : r.workers)
        list.push_back({{"id", w.worker},
                        {"state", state_of(w)},
                        {"gpu_blocks", w.gpu_blocks},
                        {"host_blocks", w.host_blocks},
                        {"disk_blocks", w.disk_blocks},
                        {"queued_blocks", w.queued},
                        {"active_blocks", w.active},
                        {"capacity_blocks", w.capacity},
                        {"speed", w.speed},
                        {"endpoint", w.endpoint},
                        {"host_capacity_blocks", w.host_capacity},
                        {"disk_capacity_blocks", w.disk_capacity},
                        {"awards", w.awards},
                        {"last_price", price_json(w.last_price)}});
      out = {{"workers", list}};
    } else if (v == "routers") {
      json list = json::array();
      for (const auto& x : r.routers)
        list.push_back({{"name", x.name},
                        {"decisions", x.decisions},
                        {"reauctions", x.reauctions},
                        {"held", x.held},
                        {"overloaded", x.overloaded},
                        {"live_workers", x.live_workers},
                        {"workers", x.workers},
                        {"auction_p50_us", x.auction_p50_us},
                        {"auction_p99_us", x.auction_p99_us},
                        {"nats_in", x.nats_in},
                        {"nats_out", x.nats_out},
                        {"text_requests", x.text_requests},
                        {"block_mismatches", x.block_mismatches},
                        {"reauctions_by_cause", reauctions_by_cause(x)},
                        {"rounds", x.rounds},
                        {"bids", x.bids},
                        {"runner_up_awards", x.runner_up_awards}});
      out = {{"routers", list}};
    } else if (v == "shards") {
      json list = json::array();
      for (const auto& s : r.shards)
        list.push_back({{"shard", s.shard},
                        {"shards", s.shards},
                        {"blocks", s.blocks},
                        {"entries", s.entries},
                        {"disk_bytes", s.disk_bytes},
                        {"events", s.events},
                        {"errors", s.errors},
                        {"refused_events", s.refused_events}});
      out = {{"shards", list}};
    } else if (v == "prefix") {
      json list = json::array();
      for (const auto& h : r.holders)
        list.push_back({{"worker", h.worker},
                        {"gpu", h.gpu},
                        {"host", h.host},
                        {"disk", h.disk}});
      out = {{"holders", list}};
    } else if (v == "weights.get") {
      const price_config& w = r.weights;
      out = {{"weights",
              {{"c_host", w.c_host},
               {"c_disk", w.c_disk},
               {"beta", w.beta},
               {"k", w.k},
               {"overflow", w.overflow},
               {"overload_ceiling", w.overload_ceiling}}}};
    } else {
      out = {{"ok", true}, {"count", r.count}};
    }
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  table rows;
  if (v == "workers") {
    rows.push_back({"worker", "state", "agent", "gpu", "host", "disk", "queued",
                    "reserved", "active", "capacity", "waiting", "running",
                    "completed", "awards", "last_price", "speed", "endpoint"});
    for (const auto& w : r.workers)
      rows.push_back({std::to_string(w.worker), state_of(w), w.agent,
                      std::to_string(w.gpu_blocks),
                      std::to_string(w.host_blocks),
                      std::to_string(w.disk_blocks), fixed(w.queued, 1),
                      fixed(w.reserved, 1), std::to_string(w.active),
                      std::to_string(w.capacity), std::to_string(w.waiting),
                      std::to_string(w.running), std::to_string(w.completed),
                      std::to_string(w.awards),
                      std::isnan(w.last_price) ? "-" : fixed(w.last_price, 1),
                      general(w.speed), w.endpoint});
  } else if (v == "routers") {
    // Re-auctions by cause after their total (kvmesh.capnp's RouterStatus).
    rows.push_back({"router", "decisions", "reauctions", "refused",
                    "unanswered", "no_bids", "saturated", "no_live",
                    "bids/round", "runner_ups", "held", "overloaded",
                    "live_workers", "workers", "text_requests"});
    for (const auto& x : r.routers)
      rows.push_back(
          {x.name, std::to_string(x.decisions), std::to_string(x.reauctions),
           std::to_string(x.reauctions_refused),
           std::to_string(x.reauctions_unanswered),
           std::to_string(x.reauctions_no_bids),
           std::to_string(x.reauctions_saturated),
           std::to_string(x.reauctions_no_live_worker),
           x.rounds ? fixed(static_cast<double>(x.bids) / x.rounds, 1) : "-",
           std::to_string(x.runner_up_awards), std::to_string(x.held),
           std::to_string(x.overloaded), std::to_string(x.live_workers),
           std::to_string(x.workers), std::to_string(x.text_requests)});
  } else if (v == "shards") {
    rows.push_back(
        {"shard", "blocks", "entries", "disk_bytes", "events", "errors"});
    for (const auto& s : r.shards)
      rows.push_back({std::to_string(s.shard) + "/" + std::to_string(s.shards),
                      std::to_string(s.blocks), std::to_string(s.entries),
                      std::to_string(s.disk_bytes), std::to_string(s.events),
                      std::to_string(s.errors)});
  } else if (v == "prefix") {
    if (r.holders.empty()) {
      std::printf("no worker holds this prefix\n");
      return;
    }
    rows.push_back({"worker", "gpu", "host", "disk"});
    for (const auto& h : r.holders)
      rows.push_back({std::to_string(h.worker), std::to_string(h.gpu),
                      std::to_string(h.host), std::to_string(h.disk)});
  } else if (v == "weights.get") {
    const price_config& w = r.weights;
    rows = {{"weight", "value"},
            {"c_host", general(w.c_host)},
            {"c_disk", general(w.c_disk)},
            {"beta", general(w.beta)},
            {"k", general(w.k)},
            {"overflow", general(w.overflow)},
            {"overload_ceiling", general(w.overload_ceiling)}};
  } else if (v == "weights.set") {
    std::printf("weights set (count %u)\n", r.count);
    return;
  } else {
    std::printf("%s worker %u: ok (count %u)\n", v.c_str(), f.worker, r.count);
    return;
  }
  print_columns(rows);
}

int run_admin(const admin_flags& f) {
  const char* cmd = "admin";
  if (auto why = check_bus_flags(f.bus); !why.empty())
    return usage_error(cmd, why);
  if (f.verb.empty())
    return usage_error(cmd,
                       "which verb? workers, routers, shards, prefix, "
                       "weights [set], drain ID, undrain ID");
  admin_request req;
  if (f.verb == "prefix") {
    auto tokens = parse_token_list(f.tokens);
    if (!tokens) return usage_error(cmd, tokens.err().message);
    auto chain = chain_of(*tokens, f.block_tokens, "");
    if (!chain) return usage_error(cmd, chain.err().message);
    req.chain = std::move(*chain);
  } else if (f.verb == "drain" || f.verb == "undrain") {
    req.worker = f.worker;
    req.on = f.verb == "drain";
  }
  auto bus = connect_bus(f.bus, "kvmesh-admin");
  if (!bus) return run_error(cmd, bus.err().message);
  subjects subj;
  subj.prefix = f.bus.prefix;
  const std::chrono::milliseconds timeout(f.timeout_ms);
  auto call = [&](const std::string& verb,
                  const admin_request& q) -> expected<admin_reply> {
    auto r = admin_request_call(**bus, subj, verb, q, timeout);
    if (!r) return make_error(r.err().code, verb + ": " + r.err().message);
    if (!r->error.empty())
      return make_error(ec::invalid_argument, verb + ": " + r->error);
    return r;
  };
  if (f.verb == "weights.set") {
    // Weights not given keep their value: read them all, change some.
    auto current = call("weights.get", admin_request{});
    if (!current) return run_error(cmd, current.err().message);
    req.weights = current->weights;
    for (const auto& [opt, field] : f.weight_opts)
      if (opt->count() > 0) req.weights.*field = f.weights.*field;
  }
  auto r = call(f.verb, req);
  if (!r) return run_error(cmd, r.err().message);
  print_admin(f, *r);
  return 0;
}

}  // namespace

void add_admin(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<admin_flags>();
  auto* cmd = app.add_subcommand(
      "admin",
      "inspect and steer a running mesh: list workers, routers and index "
      "shards, show a prefix's holders, get or set price weights, drain a "
      "worker");
  add_bus_flags(*cmd, f->bus);
  cmd->add_flag("--json", f->json, "print the answer as JSON");
  cmd->add_option("--timeout-ms", f->timeout_ms, "wait this long for an answer")
      ->check(positive)
      ->capture_default_str();
  // A missing verb is checked in run_admin: CLI11 would call an unknown one
  // a missing subcommand.
  cmd->require_subcommand(0, 1);
  cmd->footer(
      "Exit status: 0 done, 1 no answer or an error answer (on stderr), 2 bad "
      "flag or value.");
  // The admin's flags may follow the verb: `admin workers --json`.
  auto verb = [&](const char* name, const char* wire, const char* help) {
    auto* v = cmd->add_subcommand(name, help);
    v->fallthrough();
    v->callback([f, wire] {
      // `weights set` sets its verb before `weights` runs its callback.
      if (f->verb.empty()) f->verb = wire;
    });
    return v;
  };
  verb("workers", "workers", "every worker's state, load and tiers");
  verb("routers", "routers", "every router's counters");
  verb("shards", "shards", "every index shard's size and counters");
  auto* prefix = verb("prefix", "prefix",
                      "which workers hold how much of a prompt's prefix, per "
                      "tier");
  prefix
      ->add_option("--block-tokens", f->block_tokens,
                   "tokens per block, as the mesh's workers have it")
      ->required()
      ->check(positive);
  prefix->add_option("--tokens", f->tokens, "the prompt's token ids: 1,2,3")
      ->required();
  auto* weights =
      verb("weights", "weights.get", "the routers' price weights; `set` them");
  weights->require_subcommand(0, 1);
  auto* set = weights->add_subcommand(
      "set", "set price weights on every router; those not given keep theirs");
  set->fallthrough();
  set->callback([f] { f->verb = "weights.set"; });
  price_config& w = f->weights;
  struct weight_flag {
    const char* flag;
    double price_config::*field;
    const char* help;
    bool unit;  // a credit: from 0 to 1
  };
  const weight_flag flags[] = {
      {"--c-host", &price_config::c_host, "credit of a host-memory block",
       true},
      {"--c-disk", &price_config::c_disk, "credit of a disk block", true},
      {"--beta", &price_config::beta, "weight of occupancy", false},
      {"--k", &price_config::k, "GPU credit decay with excess queue", false},
      {"--overflow", &price_config::overflow, "price per block beyond capacity",
       false},
      {"--ceiling", &price_config::overload_ceiling,
       "saturation price per request block (0: never)", false}};
  for (const auto& wf : flags) {
    auto* opt = set->add_option(wf.flag, w.*wf.field, wf.help);
    if (wf.unit)
      opt->check(credit);
    else
      opt->check(non_negative);
    f->weight_opts.emplace_back(opt, wf.field);
  }
  auto* drain = verb("drain", "drain",
                     "stop awarding requests to worker ID (it finishes what "
                     "it has)");
  drain->add_option("ID", f->worker, "worker id")->required();
  auto* undrain =
      verb("undrain", "undrain", "let worker ID win auctions again");
  undrain->add_option("ID", f->worker, "worker id")->required();
  cmd->callback([f, &run] { run = [f] { return run_admin(*f); }; });
}

namespace {

// -- kvmesh top ---------------------------------------------------------------

struct top_flags {
  bus_flags bus;
  uint32_t interval_ms = 1000;
  uint32_t timeout_ms = 2000;
  bool once = false;
};

// Asks the ADMIN for workers and routers; what it could not get is named
// in the snapshot's error.
fleet_snapshot take_snapshot(nats_bus& bus, const subjects& subj,
                             std::chrono::milliseconds timeout) {
  fleet_snapshot s;
  s.time_s = std::chrono::duration<double>(
                 std::chrono::steady_clock::now().time_since_epoch())
                 .count();
  auto note = [&](const std::string& verb, const std::string& why) {
    s.error += (s.error.empty() ? "" : "; ") + verb + ": " + why;
  };
  auto w = admin_request_call(bus, subj, "workers", admin_request{}, timeout);
  if (!w)
    note("workers", w.err().message);
  else if (!w->error.empty())
    note("workers", w->error);
  else
    s.workers = std::move(w->workers);
  auto r = admin_request_call(bus, subj, "routers", admin_request{}, timeout);
  if (!r)
    note("routers", r.err().message);
  else if (!r->error.empty())
    note("routers", r->error);
  else
    s.routers = std::move(r->routers);
  return s;
}

std::string top_title(const top_flags& f) {
  char clock[16] = "";
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  if (localtime_r(&t, &tm))
    std::strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
  return "kvmesh top  " + redact_url(url_list(f.bus.nats)) + "  prefix " +
         f.bus.prefix + "  " + clock + "  every " +
         std::to_string(f.interval_ms) + " ms" +
         (f.once ? "" : ", Ctrl-C quits");
}

int run_top(const top_flags& f) {
  const char* cmd = "top";
  if (auto why = check_bus_flags(f.bus); !why.empty())
    return usage_error(cmd, why);
  // Ctrl-C ends the wait between frames (sigtimedwait), not the process
  // half-way through drawing one.
  const sigset_t stop = block_signals({SIGINT, SIGTERM});
  auto bus = connect_bus(f.bus, "kvmesh-top");
  if (!bus) return run_error(cmd, bus.err().message);
  subjects subj;
  subj.prefix = f.bus.prefix;
  const std::chrono::milliseconds timeout(f.timeout_ms);
  // Waits one interval; false when a signal asked to stop.
  auto pause = [&] {
    timespec ts{static_cast<time_t>(f.interval_ms / 1000),
                static_cast<long>(f.interval_ms % 1000) * 1000000L};
    return sigtimedwait(&stop, nullptr, &ts) < 0;
  };
  fleet_snapshot prev = take_snapshot(**bus, subj, timeout);
  if (f.once) {
    // Rates need two readings: the one frame comes one interval later.
    if (prev.error.empty() && pause()) {
      fleet_snapshot now = take_snapshot(**bus, subj, timeout);
      std::fputs(render_top(top_title(f), now, &prev).c_str(), stdout);
      if (!now.error.empty()) return run_error(cmd, now.error);
      return 0;
    }
    if (!prev.error.empty()) return run_error(cmd, prev.error);
    return 0;
  }
  // On a terminal each frame replaces the last (cursor home, clear);
  // into a file or pipe frames follow each other.
  const bool tty = isatty(fileno(stdout)) != 0;
  const fleet_snapshot* before = nullptr;
  fleet_snapshot now = std::move(prev);
  while (true) {
    const std::string frame = render_top(top_title(f), now, before);
    std::fputs(tty ? ("\x1b[H\x1b[2J" + frame).c_str() : (frame + "\n").c_str(),
               stdout);
    std::fflush(stdout);
    if (!pause()) break;
    prev = std::move(now);
    before = &prev;
    now = take_snapshot(**bus, subj, timeout);
  }
  return 0;
}

}  // namespace

void add_top(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<top_flags>();
  auto* cmd = app.add_subcommand(
      "top",
      "a live view of a running mesh, refreshed in place: per worker its "
      "state, queued work, occupancy, tier fill, awards per second and the "
      "price of its last award; per router its decisions per second, "
      "auction latency and bids per round");
  add_bus_flags(*cmd, f->bus);
  cmd->add_option("--interval-ms", f->interval_ms, "time between frames")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--timeout-ms", f->timeout_ms,
                  "wait this long for each answer of the ADMIN")
      ->check(positive)
      ->capture_default_str();
  cmd->add_flag("--once", f->once,
                "print one frame (after one interval, to measure rates) and "
                "exit");
  cmd->footer(
      "Exit status: 0 done, 1 no answer from the mesh (--once), 2 bad flag "
      "or value.");
  cmd->callback([f, &run] { run = [f] { return run_top(*f); }; });
}

status check_prefix(const std::string& prefix) {
  auto bad = [&](const std::string& why) {
    return make_error(ec::invalid_argument,
                      "--prefix: '" + prefix + "' " + why);
  };
  if (prefix.empty()) return bad("is empty");
  size_t start = 0;
  while (true) {
    const size_t dot = prefix.find('.', start);
    const std::string token = prefix.substr(
        start, dot == std::string::npos ? std::string::npos : dot - start);
    if (token.empty()) return bad("has an empty subject token");
    for (char c : token)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' ||
            c == '_'))
        return bad(std::string("holds '") + c +
                   "': subject tokens are letters, digits, '-' and '_', "
                   "separated by '.'");
    if (dot == std::string::npos) return ok;
    start = dot + 1;
  }
}

}  // namespace kvmesh::cli
