// Configuration of the commands: a TOML file and KVMESH_* environment
// variables beneath the flags, one key per flag, checked by the flags' own
// validators.
//
// Precedence: flag > environment > file > default. `--max-inflight` of
// `kvmesh router` is key router.max_inflight ([router] max_inflight = 128)
// and variable KVMESH_ROUTER_MAX_INFLIGHT; the flags every mesh command
// shares are one key for all of them: --nats is nats.url (KVMESH_NATS_URL),
// --prefix nats.prefix, --log-level log.level, --log-format log.format.
//
// CLI11 2.1 (Debian 12) has a config reader, but it reads the file before
// the environment (so a file would beat KVMESH_*), knows no lines, and
// CLI11 processes the environment of every subcommand, chosen or not (a bad
// KVMESH_ROUTER_* would stop `kvmesh agent`). So the file is read with
// toml++ and both are applied here, for the chosen command only, to the
// flags it has not been given.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/nats.hpp"
#include "core/error.hpp"

namespace kvmesh::cli {

// -- the key table and the file (no CLI11; config_file.cpp) ------------------

enum class value_kind { boolean, integer, unsigned_integer, floating, text };

struct key_spec {
  std::string key;  // "router.fanout", "nats.url"
  std::string env;  // "KVMESH_ROUTER_FANOUT"
  value_kind kind = value_kind::text;
  bool list = false;  // a TOML array of values (a flag taking several)
  std::string help;
  std::string default_text;  // as a flag takes it
  bool has_default = true;   // false: required, or unset by default
  // false when the flag's own check refuses its default (0 for "none" of
  // a flag that takes 1 to 65535): shown, but not a value to write.
  bool default_settable = true;
  std::vector<std::string> commands;  // the commands that read it
};

// One key's value in a file: the flag texts it stands for and where it is.
struct file_value {
  std::vector<std::string> texts;  // one, unless the key is a list
  std::string shown;               // as written, for messages
  size_t line = 0;
};

using file_values = std::map<std::string, file_value>;

// "--max-inflight" of section "router" -> "router.max_inflight".
std::string key_of(const std::string& section, const std::string& long_name);
// "router.max_inflight" -> "KVMESH_ROUTER_MAX_INFLIGHT".
std::string env_of(const std::string& key);

// Parses `text` as TOML (`path` names it in messages) and checks every key
// against `keys`: known and of the right type. Every problem is one line
// "PATH:LINE: KEY ...: what is wrong", all of them in the error.
expected<file_values> read_config(std::string_view text,
                                  const std::string& path,
                                  const std::vector<key_spec>& keys);
// Reads the file at `path`, then read_config.
expected<file_values> load_config(const std::string& path,
                                  const std::vector<key_spec>& keys);

// A key's default as the values a flag would take: a list's default as
// CLI11 prints it ("[]", "[a,b]", "a") split into its items.
std::vector<std::string> default_texts(const key_spec& k);

// The value as TOML: 8, 0.05, true, "kvmesh", [1, 2].
std::string toml_value(const key_spec& k,
                       const std::vector<std::string>& texts);

// The known key nearest to `key` by edit distance, "" when none is close.
std::string nearest_key(const std::string& key,
                        const std::vector<key_spec>& keys);

// -- on the command line (CLI11; config.cpp) ---------------------------------

// A bad file or variable: exit code 2, like any bad flag of the mesh.
class config_error : public CLI::ParseError {
 public:
  explicit config_error(std::string msg)
      : CLI::ParseError("ConfigError", std::move(msg), 2) {}
};

// Builds every command on an App, as main does: the key table and the
// checks of values come from a fresh tree, whose flags are never run.
using command_factory =
    std::function<void(CLI::App& app, std::function<int()>& run)>;
void set_command_factory(command_factory factory);

// Gives the commands of `app` that take configuration their --config (and
// the processes --log-level, --log-format). Call after every add_*, before
// parsing: the last option of a command applies the file and environment.
void enable_config(CLI::App& app);

// Whether `opt` got its value from the command line, not from a file or an
// environment variable (a flag of one mode may be in a file that serves
// several).
bool from_command_line(const CLI::Option* opt);

// Every key with its default, env name and help, in file order.
std::vector<key_spec> config_keys();

// The NATS credential and TLS flags (--nats-user, --nats-password,
// --nats-token, --nats-nkey, --nats-nkey-seed, --nats-creds, --nats-tls,
// --nats-tls-ca, --nats-tls-cert, --nats-tls-key: keys nats.user ...
// nats.tls_key) of a command that connects, bound to `o`'s fields.
void add_nats_security(CLI::App& cmd, nats_options& o);

// Sets (or clears) the KVMESH_NATS_* variables of those keys to `o`'s
// values, files as absolute paths, for the processes this one starts (up,
// bench): they read them beneath their own flags, and no secret lands on a
// command line where ps would show it.
void export_nats_security(const nats_options& o);

// `kvmesh config check FILE | show [--config FILE] | docs` (cmd_config.cpp).
void add_config(CLI::App& app, std::function<int()>& run);

}  // namespace kvmesh::cli
