// What only the config layer's files share; not for the commands.
// The commands that take configuration, the keys they share, the scratch
// tree that checks values (config_file.cpp, config.cpp, cmd_config.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/config.hpp"

namespace kvmesh::cli::config_detail {

// The commands that take configuration. Processes and batch tools have a
// section of their own; clients only read the keys they share with them.
struct command_conf {
  const char* name;
  bool own_section;
  bool logs;  // --log-level, --log-format: the long-running processes
};

inline constexpr command_conf config_commands[] = {
    {"agent", true, true},   {"router", true, true},  {"index", true, true},
    {"gateway", true, true}, {"up", true, true},      {"bench", true, true},
    {"sim", true, false},    {"route", false, false}, {"admin", false, false},
    {"top", false, false}};

// Flags that mean one thing on every command: one key for all of them.
struct shared_key {
  const char* flag;
  const char* key;
  const char* help;
};

inline constexpr shared_key shared_keys[] = {
    {"--nats", "nats.url",
     "NATS server URL, or a comma-separated list of one cluster's servers; "
     "required by agent, router, index, gateway, route, admin and top; up "
     "and bench start a nats-server of their own when it is empty"},
    {"--prefix", "nats.prefix",
     "subject prefix: meshes sharing a NATS server differ in it"},
    {"--nats-user", "nats.user",
     "NATS user name (with nats.password); one way of authenticating of "
     "four: user and password, token, nkey, creds"},
    {"--nats-password", "nats.password",
     "NATS password of nats.user; secret: better in the file or "
     "KVMESH_NATS_PASSWORD than on a command line"},
    {"--nats-token", "nats.token", "NATS authentication token; secret"},
    {"--nats-nkey", "nats.nkey",
     "NATS user nkey: the public key (U...) the server lists; with "
     "nats.nkey_seed"},
    {"--nats-nkey-seed", "nats.nkey_seed",
     "file holding the seed (SU...) of nats.nkey, which signs the server's "
     "challenge"},
    {"--nats-creds", "nats.creds",
     "NATS credentials file: a user JWT and its seed (nsc, nats CLI)"},
    {"--nats-tls", "nats.tls",
     "connect to NATS over TLS (also implied by nats.tls_ca, nats.tls_cert "
     "or a tls:// URL)"},
    {"--nats-tls-ca", "nats.tls_ca",
     "PEM file of the CA that signed the NATS server's certificate"},
    {"--nats-tls-cert", "nats.tls_cert",
     "PEM file of this client's certificate, for servers that verify "
     "clients (with nats.tls_key)"},
    {"--nats-tls-key", "nats.tls_key",
     "PEM file of the private key of nats.tls_cert"},
    {"--metrics-port", "metrics.port",
     "serve Prometheus metrics on this port at /metrics (docs/metrics.md; "
     "0: none); read by agent, router, index and gateway"},
    {"--metrics-address", "metrics.address",
     "the address the metrics endpoint listens on"},
    {"--threads", "process.threads",
     "threads running the process's actors (0: one per core; for up and "
     "bench, each started process's and the GOMAXPROCS of the nats-server "
     "they start, 0: the host's cores split among them)"},
    {"--log-level", "log.level",
     "show events of this level and more severe: error, warn, info, debug"},
    {"--log-format", "log.format",
     "text (one line per event for people and journals) or json (one "
     "object per line: ts, level, proc, msg)"},
    {"--max-payload-bytes", "limits.max_payload_bytes",
     "refuse NATS payloads larger than this before decoding (counted per "
     "message kind as a decode error); read by agent, router, index and "
     "gateway"},
    {"--max-request-blocks", "limits.max_request_blocks",
     "refuse route requests of more blocks than this, binary or JSON (the "
     "client is answered with the error); read by agent, router and index"},
    {"--max-call-workers", "limits.max_call_workers",
     "refuse calls for bids and releases naming more workers than this (the "
     "router is answered with the error); read by agent, router and index"},
    {"--max-mailbox-messages", "limits.max_mailbox_messages",
     "refuse NATS messages for an actor while this many it was handed wait "
     "to be handled (answered \"overloaded\" when they await a reply, "
     "counted in kvmesh_nats_refused_total); read by agent, router and "
     "index"},
    {"--max-mailbox-bytes", "limits.max_mailbox_bytes",
     "the same bound in payload bytes (one message always fits); read by "
     "agent, router and index"},
    {"--max-worker-speed", "limits.max_worker_speed",
     "refuse bids and heartbeats claiming a speed outside [1/this, this] "
     "of the reference GPU (kvmesh_member_refusals_total); read by router"},
    {"--max-worker-blocks", "limits.max_worker_blocks",
     "refuse bids and heartbeats claiming more blocks than this in a tier; "
     "read by router"},
    {"--max-workers", "limits.max_workers",
     "workers a router keeps; a new one's heartbeats past it are refused "
     "(counted); read by router; the gateway keeps as many"},
    {"--max-workers-per-agent", "limits.max_workers_per_agent",
     "workers of one node agent a router keeps; read by router"},
    {"--max-routers", "limits.max_routers",
     "routers whose heartbeats a router keeps; read by router"}};

// -- the file (config_file.cpp) ----------------------------------------------

// What a key of `kind` takes, for messages: "an integer >= 0".
const char* want_of(value_kind k);

// "router.max_inflight" -> "router".
std::string section_of(const std::string& key);

std::string join(const std::vector<std::string>& items, const char* sep);

// (line, message) pairs as one text in line order, each line after `prefix`.
std::string errors_text(std::vector<std::pair<size_t, std::string>> errors,
                        const std::string& prefix);

// -- the commands' flags (config.cpp) ----------------------------------------

// A value as messages and `config show` may print it: secrets as "***",
// passwords out of URLs.
std::string shown_value(const std::string& key, const std::string& text);

// A tree of every command, never parsed: defaults as built, and values
// checked by the flags' own validators without touching the running
// command's.
struct scratch {
  CLI::App app;
  std::function<int()> run;
  std::vector<key_spec> keys;
  std::map<std::string, std::vector<CLI::Option*>> bindings;
};

// A scratch tree of every command (set_command_factory's) with its keys.
std::unique_ptr<scratch> make_scratch();

// Gives `o` the values `texts` as if on the command line and runs its
// validators and conversion; "" when fine, else what is wrong. `typed`: the
// texts come from TOML values of the key's type.
std::string apply_texts(CLI::Option* o, const std::vector<std::string>& texts,
                        bool typed);

// The file's keys, checked: types by read_config, values by the flags. A
// config_error names every problem, each line after `prefix`.
file_values load_checked(const std::string& path, const std::string& prefix);

// `path` made absolute, or as it is when that fails.
std::string absolute(const std::string& path);

// The variable's value; null when unset or empty.
const char* nonempty_env(const std::string& name);

}  // namespace kvmesh::cli::config_detail
