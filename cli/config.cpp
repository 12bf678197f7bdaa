// The config file and KVMESH_* variables under the flags: the key table,
// read from the commands' own flags, the TOML reader and the commands
// `kvmesh config check|show|docs`.
#include "cli/config.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "cluster/nats.hpp"
#include "core/log.hpp"
#include "core/secret.hpp"

namespace kvmesh::cli {

namespace {

// The commands that take configuration. Processes and batch tools have a
// section of their own; clients only read the keys they share with them.
struct command_conf {
  const char* name;
  bool own_section;
  bool logs;  // --log-level, --log-format: the long-running processes
};

constexpr command_conf config_commands[] = {
    {"agent", true, true},   {"router", true, true},  {"index", true, true},
    {"up", true, true},      {"bench", true, true},   {"sim", true, false},
    {"route", false, false}, {"admin", false, false}, {"top", false, false}};

// Flags that mean one thing on every command: one key for all of them.
struct shared_key {
  const char* flag;
  const char* key;
  const char* help;
};

constexpr shared_key shared_keys[] = {
    {"--nats", "nats.url",
     "NATS server URL, or a comma-separated list of one cluster's servers; "
     "required by agent, router, index, route, admin and top; up and bench "
     "start a nats-server of their own when it is empty"},
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
     "0: none); read by agent, router and index"},
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
     "message kind as a decode error); read by agent, router and index"},
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
     "agent, router and index"}};

// Keys whose values are secrets: shown as "***", never printed.
bool is_secret(const std::string& key) {
  return key == "nats.password" || key == "nats.token";
}

// A value as messages and `config show` may print it.
std::string shown_value(const std::string& key, const std::string& text) {
  if (is_secret(key)) return text.empty() ? text : "\"***\"";
  if (key == "nats.url") return redact_url(text);
  return text;
}

const command_conf* conf_of(const CLI::App& cmd) {
  const CLI::App* parent = cmd.get_parent();
  if (!parent || parent->get_parent()) return nullptr;  // top level only
  for (const auto& c : config_commands)
    if (cmd.get_name() == c.name) return &c;
  return nullptr;
}

std::optional<std::string> key_for(const CLI::App& cmd, const command_conf& c,
                                   const CLI::Option* o) {
  if (o->get_positional() || o->get_lnames().empty()) return std::nullopt;
  const std::string flag = "--" + o->get_lnames().front();
  if (flag == "--help" || flag == "--config") return std::nullopt;
  for (const auto& s : shared_keys)
    if (flag == s.flag) return std::string(s.key);
  if (!c.own_section) return std::nullopt;
  return key_of(cmd.get_name(), o->get_lnames().front());
}

value_kind kind_of(const CLI::Option* o) {
  if (o->get_expected_max() == 0) return value_kind::boolean;  // a flag
  std::string t = o->get_type_name();
  t = t.substr(0, t.find(':'));  // validators append ":DESCRIPTION"
  if (t == "UINT") return value_kind::unsigned_integer;
  if (t == "INT") return value_kind::integer;
  if (t == "FLOAT") return value_kind::floating;
  if (t == "BOOLEAN") return value_kind::boolean;
  return value_kind::text;
}

const char* want_of(value_kind k) {
  switch (k) {
    case value_kind::boolean:
      return "true or false";
    case value_kind::integer:
      return "an integer";
    case value_kind::unsigned_integer:
      return "an integer >= 0";
    case value_kind::floating:
      return "a number";
    case value_kind::text:
      return "a string";
  }
  return "a value";
}

// What the flag's default is, without changing what --help shows.
std::string default_of(CLI::Option* o) {
  if (o->get_expected_max() == 0) return "false";  // a flag: off
  const std::string shown = o->get_default_str();
  o->capture_default_str();
  std::string d = o->get_default_str();
  o->default_str(shown);
  return d;
}

// The options that a file or a variable set, for from_command_line.
std::set<const CLI::Option*>& configured() {
  static std::set<const CLI::Option*> s;
  return s;
}

command_factory& factory() {
  static command_factory f;
  return f;
}

// A tree of every command, never parsed: defaults as built, and values
// checked by the flags' own validators without touching the running
// command's.
struct scratch {
  CLI::App app;
  std::function<int()> run;
  std::vector<key_spec> keys;
  std::map<std::string, std::vector<CLI::Option*>> bindings;
};

std::string apply_texts(CLI::Option* o, const std::vector<std::string>& texts,
                        bool typed);

void collect(CLI::App& app, std::vector<key_spec>& keys,
             std::map<std::string, std::vector<CLI::Option*>>& bindings) {
  std::map<std::string, key_spec> found;
  std::vector<std::string> order;  // per section: flag order
  for (const auto& c : config_commands) {
    auto subs = app.get_subcommands(
        [&](CLI::App* s) { return s->get_name() == c.name; });
    if (subs.empty()) continue;
    CLI::App* cmd = subs.front();
    for (CLI::Option* o : cmd->get_options()) {
      auto key = key_for(*cmd, c, o);
      if (!key) continue;
      bindings[*key].push_back(o);
      auto it = found.find(*key);
      if (it == found.end()) {
        key_spec k;
        k.key = *key;
        k.env = env_of(*key);
        k.kind = kind_of(o);
        k.list = o->get_items_expected_max() > 1;
        k.help = o->get_description();
        for (const auto& s : shared_keys)
          if (k.key == s.key) k.help = s.help;
        k.default_text = default_of(o);
        k.has_default = !o->get_required() &&
                        !(k.default_text.empty() && k.kind != value_kind::text);
        // Never run: checking its default changes nothing that counts.
        k.default_settable =
            k.has_default && apply_texts(o, {k.default_text}, true).empty();
        it = found.emplace(*key, std::move(k)).first;
        order.push_back(*key);
      } else if (o->get_required()) {
        it->second.has_default = false;
      }
      it->second.commands.push_back(c.name);
    }
  }
  // The shared sections first, then the commands' in the table's order.
  for (const auto& s : shared_keys)
    if (auto it = found.find(s.key); it != found.end())
      keys.push_back(it->second);
  for (const auto& k : order) {
    const bool is_shared =
        std::any_of(std::begin(shared_keys), std::end(shared_keys),
                    [&](const shared_key& s) { return k == s.key; });
    if (!is_shared) keys.push_back(found.at(k));
  }
}

std::unique_ptr<scratch> make_scratch() {
  auto s = std::make_unique<scratch>();
  if (!factory()) return s;  // no commands known: no keys
  factory()(s->app, s->run);
  enable_config(s->app);
  collect(s->app, s->keys, s->bindings);
  return s;
}

// Gives `o` the values `texts` as if on the command line and runs its
// validators and conversion; "" when fine, else what is wrong.
std::string apply_texts(CLI::Option* o, const std::vector<std::string>& texts,
                        bool typed) {
  o->clear();
  for (const auto& t : texts)
    o->add_result(t);
  try {
    o->run_callback();
    return {};
  } catch (const CLI::ValidationError& e) {
    std::string why = e.what();
    const std::string name = o->get_name() + ": ";
    if (why.compare(0, name.size(), name) == 0) why = why.substr(name.size());
    return why;
  } catch (const CLI::ConversionError&) {
    const std::string want = want_of(kind_of(o));
    // A TOML value of the right type that does not convert is too large.
    return typed ? "out of range for this key"
                 : std::string("is not ") + want + " (or is out of range)";
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
}

// TOML basic strings take JSON's escapes, and must be UTF-8 as well.
std::string toml_quote(const std::string& s) {
  return "\"" + log::json_escape(s) + "\"";
}

// The shortest text that reads back as `v`; whole numbers in full (3600,
// not 3.6e+03).
std::string shortest(double v) {
  char buf[40];
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof(buf), "%.*g", p, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

const char* got_of(const toml::node& v) {
  switch (v.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    default:
      return "nothing";
  }
}

// One TOML scalar as a flag's text; "" when fine, else what is wrong.
std::string scalar_text(const key_spec& k, const toml::node& v,
                        std::string& text, std::string& shown) {
  const auto wrong = [&] {
    return std::string("want ") + want_of(k.kind) + ", got " + got_of(v);
  };
  switch (k.kind) {
    case value_kind::boolean:
      if (auto b = v.as_boolean()) {
        text = shown = b->get() ? "true" : "false";
        return {};
      }
      return wrong();
    case value_kind::integer:
    case value_kind::unsigned_integer:
      if (auto i = v.as_integer()) {
        text = shown = std::to_string(i->get());
        if (k.kind == value_kind::unsigned_integer && i->get() < 0)
          return "want an integer >= 0, got " + shown;
        return {};
      }
      return wrong();
    case value_kind::floating:
      if (auto i = v.as_integer()) {
        // As the number it becomes: an integer past 2^53 has no double of
        // its own, and its digits would not read back as written.
        text = shown = shortest(static_cast<double>(i->get()));
        return {};
      }
      if (auto f = v.as_floating_point()) {
        text = shown = shortest(f->get());
        if (!std::isfinite(f->get())) return "want a finite number";
        return {};
      }
      return wrong();
    case value_kind::text:
      if (auto s = v.as_string()) {
        text = s->get();
        shown = toml_quote(text);
        return {};
      }
      return wrong();
  }
  return wrong();
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min(
          {row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string nearest_of(const std::string& word,
                       const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& k : known) {
    const size_t d = edit_distance(word, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best;
}

std::string section_of(const std::string& key) {
  return key.substr(0, key.find('.'));
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& s : items)
    out += (out.empty() ? "" : sep) + s;
  return out;
}

// Checks the file's values with the flags' validators on a scratch tree:
// every key, whichever command reads it. One line per problem.
std::vector<std::pair<size_t, std::string>> check_values(
    scratch& s, const file_values& fv, const std::string& path) {
  std::vector<std::pair<size_t, std::string>> errors;
  for (const auto& [key, v] : fv) {
    for (CLI::Option* o : s.bindings[key]) {
      const std::string why = apply_texts(o, v.texts, true);
      if (why.empty()) continue;
      errors.emplace_back(v.line, path + ":" + std::to_string(v.line) + ": " +
                                      key + " = " + shown_value(key, v.shown) +
                                      ": " + why);
      break;
    }
  }
  return errors;
}

std::string errors_text(std::vector<std::pair<size_t, std::string>> errors,
                        const std::string& prefix) {
  std::stable_sort(
      errors.begin(), errors.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string out;
  for (const auto& [line, msg] : errors)
    out += (out.empty() ? "" : "\n") + prefix + msg;
  return out;
}

// The file's keys, checked: types by read_config, values by the flags.
file_values load_checked(const std::string& path, const std::string& prefix) {
  auto s = make_scratch();
  auto fv = load_config(path, s->keys);
  if (!fv) {
    std::string msg;
    std::istringstream lines(fv.err().message);
    for (std::string line; std::getline(lines, line);)
      msg += (msg.empty() ? "" : "\n") + prefix + line;
    throw config_error(msg);
  }
  auto errors = check_values(*s, *fv, path);
  if (!errors.empty()) throw config_error(errors_text(errors, prefix));
  return *fv;
}

std::string absolute(const std::string& path) {
  std::error_code ec;
  auto p = std::filesystem::absolute(path, ec);
  return ec ? path : p.string();
}

const char* nonempty_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v && *v ? v : nullptr;
}

// What --config, --log-level and --log-format of one command hold.
struct hook_state {
  std::string level = "info";
  std::string format = "text";
};

// Runs when the command's flags are parsed (the --config option's
// callback): the environment, then the file, fill the flags not given.
void apply_config(CLI::App& cmd, const command_conf& c,
                  const std::string& flag_path, const hook_state& st) {
  const std::string prefix = "kvmesh " + cmd.get_name() + ": ";
  std::string path = flag_path;
  if (path.empty())
    if (const char* e = nonempty_env("KVMESH_CONFIG")) path = e;
  file_values fv;
  if (!path.empty()) fv = load_checked(path, prefix);
  for (CLI::Option* o : cmd.get_options()) {
    auto key = key_for(cmd, c, o);
    if (!key || o->count() > 0) continue;  // a flag beats the rest
    const std::string env = env_of(*key);
    if (const char* v = nonempty_env(env)) {
      const std::string why = apply_texts(o, {v}, false);
      if (!why.empty())
        throw config_error(prefix + env + "=" + shown_value(*key, v) + ": " +
                           why + " (fix " + env + ", or give " + o->get_name() +
                           ")");
      configured().insert(o);
      continue;
    }
    if (auto it = fv.find(*key); it != fv.end()) {
      const std::string why = apply_texts(o, it->second.texts, true);
      if (!why.empty())
        throw config_error(
            prefix + path + ":" + std::to_string(it->second.line) + ": " +
            *key + " = " + shown_value(*key, it->second.shown) + ": " + why);
      configured().insert(o);
    }
  }
  log::set_proc(cmd.get_name());
  if (c.logs) {
    // Validated by the flags' checks: these parse.
    if (auto l = log::parse_level(st.level)) log::set_level(*l);
    if (auto f = log::parse_format(st.format)) log::set_format(*f);
    // The processes a command starts (up, bench) log alike and read the
    // same file; their own flags still win.
    ::setenv("KVMESH_LOG_LEVEL", st.level.c_str(), 1);
    ::setenv("KVMESH_LOG_FORMAT", st.format.c_str(), 1);
  }
  if (!path.empty()) ::setenv("KVMESH_CONFIG", absolute(path).c_str(), 1);
}

CLI::Validator parsed_by(expected<bool> (*check)(const std::string&),
                         const char* desc) {
  return CLI::Validator(
      [check](std::string& text) -> std::string {
        auto r = check(text);
        return r ? std::string() : r.err().message;
      },
      desc);
}

expected<bool> level_ok(const std::string& t) {
  auto l = log::parse_level(t);
  if (!l) return l.err();
  return true;
}

expected<bool> format_ok(const std::string& t) {
  auto f = log::parse_format(t);
  if (!f) return f.err();
  return true;
}

// The values in effect for every key: environment > file > default.
struct effective {
  std::string text;  // TOML
  std::string from;  // "", the variable or the file
  bool set = false;
  bool settable = true;  // false: a default no file may spell
};

}  // namespace

// -- the key table and the file ----------------------------------------------

std::string key_of(const std::string& section, const std::string& long_name) {
  std::string name = long_name;
  std::replace(name.begin(), name.end(), '-', '_');
  return section + "." + name;
}

std::string env_of(const std::string& key) {
  std::string out = "KVMESH_";
  for (char c : key)
    out += c == '.' || c == '-'
               ? '_'
               : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string nearest_key(const std::string& key,
                        const std::vector<key_spec>& keys) {
  std::vector<std::string> known;
  for (const auto& k : keys)
    known.push_back(k.key);
  return nearest_of(key, known);
}

expected<file_values> read_config(std::string_view text,
                                  const std::string& path,
                                  const std::vector<key_spec>& keys) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    return make_error(ec::parse_error,
                      path + ":" + std::to_string(at.line) + ":" +
                          std::to_string(at.column) +
                          ": not TOML: " + std::string(e.description()));
  }
  std::map<std::string, const key_spec*> by_key;
  std::vector<std::string> sections;
  for (const auto& k : keys) {
    by_key[k.key] = &k;
    const std::string s = section_of(k.key);
    if (std::find(sections.begin(), sections.end(), s) == sections.end())
      sections.push_back(s);
  }
  std::vector<std::pair<size_t, std::string>> errors;
  const auto fail = [&](size_t line, const std::string& msg) {
    errors.emplace_back(line, path + ":" + std::to_string(line) + ": " + msg);
  };
  file_values out;
  for (auto&& [sk, sv] : root) {
    const std::string section(sk.str());
    const size_t sline = static_cast<size_t>(sk.source().begin.line);
    const bool known =
        std::find(sections.begin(), sections.end(), section) != sections.end();
    if (!sv.is_table()) {
      fail(sline, "key '" + section +
                      "' is outside any section: keys belong in [" +
                      join(sections, "], [") + "]");
      continue;
    }
    if (!known) {
      const std::string near = nearest_of(section, sections);
      fail(sline, "unknown section [" + section + "]" +
                      (near.empty() ? "" : " (did you mean [" + near + "]?)") +
                      "; sections: " + join(sections, ", "));
      continue;
    }
    for (auto&& [kk, v] : *sv.as_table()) {
      const std::string key = section + "." + std::string(kk.str());
      const size_t line = static_cast<size_t>(kk.source().begin.line);
      auto spec = by_key.find(key);
      if (spec == by_key.end()) {
        const std::string near = nearest_key(key, keys);
        fail(line, "unknown key " + key +
                       (near.empty() ? "" : " (did you mean " + near + "?)") +
                       "; `kvmesh config show` lists every key");
        continue;
      }
      const key_spec& k = *spec->second;
      file_value fv;
      fv.line = line;
      std::string why;
      if (k.list) {
        if (auto arr = v.as_array()) {
          std::vector<std::string> shown;
          for (auto&& item : *arr) {
            std::string t, s;
            why = scalar_text(k, item, t, s);
            if (!why.empty()) break;
            fv.texts.push_back(t);
            shown.push_back(s);
          }
          fv.shown = "[" + join(shown, ", ") + "]";
        } else {
          why = std::string("want an array of ") + want_of(k.kind) + ", got " +
                got_of(v);
        }
      } else {
        std::string t;
        why = scalar_text(k, v, t, fv.shown);
        fv.texts.push_back(t);
      }
      if (!why.empty()) {
        fail(line, key + ": " + why);
        continue;
      }
      out[key] = std::move(fv);
    }
  }
  if (!errors.empty())
    return make_error(ec::parse_error, errors_text(std::move(errors), ""));
  return out;
}

expected<file_values> load_config(const std::string& path,
                                  const std::vector<key_spec>& keys) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_error(ec::io_error, path + ": cannot read the config file: " +
                                        std::strerror(errno) +
                                        " (check the path given by --config or "
                                        "KVMESH_CONFIG)");
  std::ostringstream text;
  text << in.rdbuf();
  return read_config(text.str(), path, keys);
}

std::string toml_value(const key_spec& k,
                       const std::vector<std::string>& texts) {
  std::vector<std::string> items;
  for (const auto& t : texts) {
    switch (k.kind) {
      case value_kind::boolean: {
        std::string l = t;
        for (auto& ch : l)
          ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        const bool on = l == "true" || l == "1" || l == "on" || l == "yes" ||
                        l == "y" || l == "t" || l == "+" || l == "enable";
        items.push_back(on ? "true" : "false");
        break;
      }
      case value_kind::integer:
      case value_kind::unsigned_integer:
        items.push_back(t);
        break;
      case value_kind::floating: {
        char* end = nullptr;
        const double v = std::strtod(t.c_str(), &end);
        std::string s = end && *end == '\0' ? shortest(v) : t;
        if (std::isfinite(v) && s.find_first_of(".eE") == std::string::npos)
          s += ".0";  // a TOML float, not an integer
        items.push_back(s);
        break;
      }
      case value_kind::text:
        items.push_back(toml_quote(t));
        break;
    }
  }
  if (k.list) return "[" + join(items, ", ") + "]";
  return items.empty() ? std::string() : items.front();
}

// -- on the command line -----------------------------------------------------

void set_command_factory(command_factory f) {
  factory() = std::move(f);
}

bool from_command_line(const CLI::Option* opt) {
  return opt->count() > 0 && configured().count(opt) == 0;
}

void enable_config(CLI::App& app) {
  for (CLI::App* cmd : app.get_subcommands([](CLI::App*) { return true; })) {
    const command_conf* c = conf_of(*cmd);
    if (!c) continue;
    // A new tree's options may sit where a freed one's were.
    for (const CLI::Option* o : cmd->get_options())
      configured().erase(o);
    auto st = std::make_shared<hook_state>();
    if (c->logs) {
      cmd->add_option("--log-level", st->level,
                      "show events of this level and more severe: error, "
                      "warn, info, debug")
          ->check(parsed_by(level_ok, "LEVEL"))
          ->capture_default_str();
      cmd->add_option("--log-format", st->format,
                      "text (a line per event) or json (an object per line)")
          ->check(parsed_by(format_ok, "FORMAT"))
          ->capture_default_str();
    }
    // Last of the command's options, and run even when not given: by now
    // every flag is in, and the rest may fill the others before CLI11
    // checks the required ones.
    cmd->add_option_function<std::string>(
           "--config",
           [cmd, c, st](const std::string& path) {
             if (cmd->parsed()) apply_config(*cmd, *c, path, *st);
           },
           "read settings from this TOML file (also KVMESH_CONFIG); flags "
           "and KVMESH_* variables override it (kvmesh config show)")
        ->type_name("FILE")
        ->force_callback();
  }
}

std::vector<key_spec> config_keys() {
  return make_scratch()->keys;
}

namespace {

struct config_flags {
  std::string verb;
  std::string file;
};

int config_fail(const config_error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}

int run_check(const config_flags& f) {
  try {
    const file_values fv = load_checked(f.file, "kvmesh config: ");
    std::printf("%s: ok (%zu key%s)\n", f.file.c_str(), fv.size(),
                fv.size() == 1 ? "" : "s");
    return 0;
  } catch (const config_error& e) {
    return config_fail(e);
  }
}

// Every key: environment > file > default, each checked.
std::map<std::string, effective> resolve(const config_flags& f) {
  const std::string prefix = "kvmesh config: ";
  std::string path = f.file;
  if (path.empty())
    if (const char* e = nonempty_env("KVMESH_CONFIG")) path = e;
  file_values fv;
  if (!path.empty()) fv = load_checked(path, prefix);
  auto s = make_scratch();
  std::map<std::string, effective> out;
  for (const auto& k : s->keys) {
    effective e;
    if (const char* v = nonempty_env(k.env)) {
      for (CLI::Option* o : s->bindings[k.key]) {
        const std::string why = apply_texts(o, {v}, false);
        if (!why.empty())
          throw config_error(prefix + k.env + "=" + shown_value(k.key, v) +
                             ": " + why);
      }
      e = {toml_value(k, {v}), k.env, true};
    } else if (auto it = fv.find(k.key); it != fv.end()) {
      e = {toml_value(k, it->second.texts),
           path + ":" + std::to_string(it->second.line), true};
    } else if (k.has_default) {
      e = {toml_value(k, {k.default_text}), "", true, k.default_settable};
    }
    out[k.key] = e;
  }
  return out;
}

std::string flags_of(const key_spec& k) {
  const std::string name = k.key.substr(k.key.find('.') + 1);
  for (const auto& s : shared_keys)
    if (k.key == s.key) return s.flag;
  std::string flag = "--" + name;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

int run_show(const config_flags& f) {
  std::map<std::string, effective> values;
  try {
    values = resolve(f);
  } catch (const config_error& e) {
    return config_fail(e);
  }
  const auto keys = config_keys();
  std::printf(
      "# kvmesh: the configuration in effect: flags > KVMESH_* variables > "
      "file > defaults.\n# Keys, flags and variables: docs/config.md or "
      "`kvmesh config docs`.\n");
  std::string section;
  for (const auto& k : keys) {
    const std::string s = section_of(k.key);
    if (s != section) {
      section = s;
      std::printf("\n[%s]\n", s.c_str());
    }
    effective e = values[k.key];
    if (k.kind == value_kind::text && !e.text.empty() && e.text != "\"\"")
      e.text = shown_value(k.key, e.text);
    const std::string name = k.key.substr(s.size() + 1);
    std::printf("# %s (%s, %s)\n", k.help.c_str(), flags_of(k).c_str(),
                k.env.c_str());
    if (!e.set)
      std::printf("# %s =   (no default)\n", name.c_str());
    else if (!e.settable)
      std::printf("# %s = %s   (the default: unset)\n", name.c_str(),
                  e.text.c_str());
    else if (e.from.empty())
      std::printf("%s = %s\n", name.c_str(), e.text.c_str());
    else
      std::printf("%s = %s  # from %s\n", name.c_str(), e.text.c_str(),
                  e.from.c_str());
  }
  return 0;
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s)
    out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

int run_docs() {
  const auto keys = config_keys();
  std::string section;
  for (const auto& k : keys) {
    const std::string s = section_of(k.key);
    if (s != section) {
      if (!section.empty()) std::printf("\n");
      section = s;
      std::vector<std::string> cmds = k.commands;
      const bool own =
          std::any_of(std::begin(config_commands), std::end(config_commands),
                      [&](const command_conf& c) { return s == c.name; });
      std::printf("### [%s]\n\n", s.c_str());
      if (own)
        std::printf("The flags of `kvmesh %s`.\n\n", s.c_str());
      else
        std::printf("Read by %s.\n\n", join(cmds, ", ").c_str());
      std::printf("| key | default | variable | flag | meaning |\n");
      std::printf("|---|---|---|---|---|\n");
    }
    const std::string def =
        k.has_default ? "`" + toml_value(k, {k.default_text}) + "`" : "none";
    std::printf("| `%s` | %s | `%s` | `%s` | %s |\n", k.key.c_str(),
                md_cell(def).c_str(), k.env.c_str(), flags_of(k).c_str(),
                md_cell(k.help).c_str());
  }
  return 0;
}

}  // namespace

void add_nats_security(CLI::App& cmd, nats_options& o) {
  const auto help = [](const char* flag) {
    for (const auto& s : shared_keys)
      if (std::strcmp(s.flag, flag) == 0) return std::string(s.help);
    return std::string();
  };
  // Under a heading of their own: most meshes need none of them.
  const std::string group = "NATS credentials and TLS (docs/reliability.md)";
  cmd.add_option("--nats-user", o.user, help("--nats-user"));
  cmd.add_option("--nats-password", o.password, help("--nats-password"));
  cmd.add_option("--nats-token", o.token, help("--nats-token"));
  cmd.add_option("--nats-nkey", o.nkey, help("--nats-nkey"));
  cmd.add_option("--nats-nkey-seed", o.nkey_seed_file, help("--nats-nkey-seed"))
      ->check(CLI::ExistingFile);
  cmd.add_option("--nats-creds", o.creds_file, help("--nats-creds"))
      ->check(CLI::ExistingFile);
  cmd.add_flag("--nats-tls", o.tls, help("--nats-tls"));
  cmd.add_option("--nats-tls-ca", o.tls_ca_file, help("--nats-tls-ca"))
      ->check(CLI::ExistingFile);
  cmd.add_option("--nats-tls-cert", o.tls_cert_file, help("--nats-tls-cert"))
      ->check(CLI::ExistingFile);
  cmd.add_option("--nats-tls-key", o.tls_key_file, help("--nats-tls-key"))
      ->check(CLI::ExistingFile);
  for (const auto& s : shared_keys)
    if (std::strncmp(s.flag, "--nats-", 7) == 0)
      if (CLI::Option* opt = cmd.get_option_no_throw(s.flag)) opt->group(group);
}

void export_nats_security(const nats_options& o) {
  const std::pair<const char*, std::string> vars[] = {
      {"nats.user", o.user},
      {"nats.password", o.password},
      {"nats.token", o.token},
      {"nats.nkey", o.nkey},
      {"nats.nkey_seed",
       o.nkey_seed_file.empty() ? std::string() : absolute(o.nkey_seed_file)},
      {"nats.creds",
       o.creds_file.empty() ? std::string() : absolute(o.creds_file)},
      {"nats.tls", o.tls ? "true" : ""},
      {"nats.tls_ca",
       o.tls_ca_file.empty() ? std::string() : absolute(o.tls_ca_file)},
      {"nats.tls_cert",
       o.tls_cert_file.empty() ? std::string() : absolute(o.tls_cert_file)},
      {"nats.tls_key",
       o.tls_key_file.empty() ? std::string() : absolute(o.tls_key_file)}};
  for (const auto& [key, value] : vars) {
    const std::string env = env_of(key);
    if (value.empty())
      ::unsetenv(env.c_str());
    else
      ::setenv(env.c_str(), value.c_str(), 1);
  }
}

void add_config(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<config_flags>();
  auto* cmd = app.add_subcommand(
      "config",
      "check a config file, show the configuration in effect, or list every "
      "key");
  cmd->require_subcommand(1);
  auto* check = cmd->add_subcommand(
      "check",
      "check FILE without running anything: exit 0 when valid, 2 "
      "when not (every problem on stderr, with its line)");
  check->add_option("FILE", f->file, "the TOML file")->required();
  check->callback([f, &run] { run = [f] { return run_check(*f); }; });
  auto* show = cmd->add_subcommand(
      "show",
      "print every key as TOML with the value in effect: defaults, "
      "then the file, then KVMESH_* variables");
  show->add_option("--config", f->file,
                   "the TOML file (default: KVMESH_CONFIG, else none)");
  show->callback([f, &run] { run = [f] { return run_show(*f); }; });
  auto* docs = cmd->add_subcommand(
      "docs",
      "print every key's default, variable, flag and meaning as "
      "Markdown (the tables of docs/config.md)");
  docs->callback([&run] { run = [] { return run_docs(); }; });
  cmd->footer("Exit status: 0 valid, 2 invalid file, value or flag.");
}

}  // namespace kvmesh::cli
