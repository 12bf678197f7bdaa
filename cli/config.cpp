// The key table read from the commands' flags, applied to the chosen one.
// The config file and KVMESH_* variables fill the flags a command was not
// given, before CLI11 checks it.
#include "cli/config.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "cli/config_detail.hpp"
#include "cluster/nats.hpp"
#include "core/log.hpp"
#include "core/secret.hpp"

namespace kvmesh::cli {

using namespace config_detail;

namespace {

// Keys whose values are secrets: shown as "***", never printed.
bool is_secret(const std::string& key) {
  return key == "nats.password" || key == "nats.token";
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

}  // namespace

namespace config_detail {

// A value as messages and `config show` may print it.
std::string shown_value(const std::string& key, const std::string& text) {
  if (is_secret(key)) return text.empty() ? text : "\"***\"";
  if (key == "nats.url") return redact_url(text);
  return text;
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

}  // namespace config_detail

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

}  // namespace kvmesh::cli
