// `kvmesh config check|show|docs`: check a file, show or document the keys.
// `docs` prints every key as the Markdown tables of docs/config.md.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/config.hpp"
#include "cli/config_detail.hpp"

namespace kvmesh::cli {

using namespace config_detail;

namespace {

// The values in effect for every key: environment > file > default.
struct effective {
  std::string text;  // TOML
  std::string from;  // "", the variable or the file
  bool set = false;
  bool settable = true;  // false: a default no file may spell
};

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
      e = {toml_value(k, default_texts(k)), "", true, k.default_settable};
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
        k.has_default ? "`" + toml_value(k, default_texts(k)) + "`" : "none";
    std::printf("| `%s` | %s | `%s` | `%s` | %s |\n", k.key.c_str(),
                md_cell(def).c_str(), k.env.c_str(), flags_of(k).c_str(),
                md_cell(k.help).c_str());
  }
  return 0;
}

}  // namespace

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
