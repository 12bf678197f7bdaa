// `kvmesh completion bash|zsh` and `kvmesh man`: the completion scripts and
// kvmesh(1), made from the commands' own flag table.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "cli/completion.hpp"

namespace kvmesh::cli {

namespace {

command_doc doc_of(const CLI::App& app) {
  command_doc d;
  // The root's name is argv[0] once parsed: the page is kvmesh's anyway.
  d.name = app.get_parent() == nullptr ? "kvmesh" : app.get_name();
  d.help = app.get_description();
  if (d.help.rfind(d.name + ": ", 0) == 0) d.help.erase(0, d.name.size() + 2);
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_lnames().empty() || o->get_group().empty()) continue;
    flag_doc f;
    f.name = "--" + o->get_lnames().front();
    if (o->get_expected_max() != 0) {
      // "UINT:POSITIVE": the type, without its checks' names.
      f.value = o->get_type_name().substr(0, o->get_type_name().find(':'));
      if (f.value.empty()) f.value = "VALUE";
    }
    f.help = o->get_description();
    f.default_value = o->get_default_str();
    d.flags.push_back(std::move(f));
  }
  for (const CLI::App* s :
       app.get_subcommands([](const CLI::App*) { return true; }))
    d.commands.push_back(doc_of(*s));
  return d;
}

}  // namespace

void add_completion(CLI::App& app, std::function<int()>& run) {
  auto shell = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "completion",
      "print a shell completion script: source <(kvmesh completion bash), "
      "or put `kvmesh completion zsh` in a directory of $fpath as _kvmesh");
  cmd->add_option("shell", *shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  const CLI::App* root = &app;
  cmd->callback([shell, root, &run] {
    run = [shell, root] {
      const command_doc d = doc_of(*root);
      const std::string s =
          *shell == "bash" ? bash_completion(d) : zsh_completion(d);
      std::fputs(s.c_str(), stdout);
      return 0;
    };
  });
  auto* man = app.add_subcommand(
      "man", "print the kvmesh(1) man page (man -l <(kvmesh man))");
  man->callback([root, &run] {
    run = [root] {
      std::fputs(man_page(doc_of(*root), "kvmesh " KVMESH_VERSION).c_str(),
                 stdout);
      return 0;
    };
  });
}

}  // namespace kvmesh::cli
