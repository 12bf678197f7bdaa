// The kvmesh binary: one entry point, one subcommand per job.
#include <cstdio>
#include <functional>
#include <string>

#include "cli/commands.hpp"
#include "cli/config.hpp"

namespace {

// One exit code for every usage error, CLI11's own (an unknown flag, a bad
// number, a missing option) as kvmesh's: 2, as scripts and supervisors
// expect of a usage error; 1 stays for a command that could not do its job.
// --help and --version exit 0. CLI11 prints the error.
constexpr int usage_exit = 2;

int exit_code(const CLI::App& app, const CLI::ParseError& e) {
  return app.exit(e) == 0 ? 0 : usage_exit;
}

// The command line's first word that should have named a command of `app`
// (or of a command that needs one of its own, like `config`) and names
// none; "" when there is none. CLI11 only says "A subcommand is required".
// The walk stops at the first option, so that an option's value is never
// taken for a command.
std::string unknown_command(const CLI::App& app, int argc, char** argv,
                            std::string& path) {
  const CLI::App* at = &app;
  path = "kvmesh";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return {};
    if (at->get_require_subcommand_min() == 0) return {};
    const CLI::App* sub = nullptr;
    for (const CLI::App* s : at->get_subcommands(
             [&](const CLI::App* c) { return c->check_name(word); }))
      sub = s;
    if (!sub) return word;
    at = sub;
    path += " " + sub->get_name();
  }
  return {};
}

// Every command; the config layer builds a second tree from it to know the
// keys and check values.
void add_commands(CLI::App& app, std::function<int()>& run) {
  kvmesh::cli::add_hash(app, run);
  kvmesh::cli::add_engine(app, run);
  kvmesh::cli::add_sim(app, run);
  kvmesh::cli::add_up(app, run);
  kvmesh::cli::add_bench(app, run);
  kvmesh::cli::add_agent(app, run);
  kvmesh::cli::add_router(app, run);
  kvmesh::cli::add_gateway(app, run);
  kvmesh::cli::add_index(app, run);
  kvmesh::cli::add_route(app, run);
  kvmesh::cli::add_admin(app, run);
  kvmesh::cli::add_top(app, run);
  kvmesh::cli::add_load(app, run);
  kvmesh::cli::add_config(app, run);
  kvmesh::cli::add_nats_auth(*app.get_subcommand("config"), run);
  kvmesh::cli::add_completion(app, run);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvmesh: routes LLM requests to GPUs priced in cache blocks"};
  app.require_subcommand(1);
  const std::string version = "kvmesh " KVMESH_VERSION;
  app.set_version_flag("--version", version);
  std::function<int()> run;
  add_commands(app, run);
  // `kvmesh router --version` as well as `kvmesh --version`.
  for (CLI::App* sub :
       app.get_subcommands([](const CLI::App*) { return true; }))
    sub->set_version_flag("--version", version);
  kvmesh::cli::set_command_factory(add_commands);
  kvmesh::cli::enable_config(app);
  try {
    app.parse(argc, argv);
  } catch (const kvmesh::cli::config_error& e) {
    // Names the command, the file and line or the variable already.
    std::fprintf(stderr, "%s\n", e.what());
    return usage_exit;
  } catch (const CLI::RequiredError& e) {
    std::string path;
    const std::string word = unknown_command(app, argc, argv, path);
    if (!word.empty()) {
      std::fprintf(stderr, "%s: unknown command '%s' (%s --help lists them)\n",
                   path.c_str(), word.c_str(), path.c_str());
      return usage_exit;
    }
    const int code = exit_code(app, e);
    // Where else a required value may come from, when it can.
    for (const CLI::App* sub : app.get_subcommands())
      if (sub->get_option_no_throw("--config"))
        std::fprintf(stderr,
                     "kvmesh %s: a flag's value may also come from a "
                     "KVMESH_* variable or the --config file (kvmesh config "
                     "docs lists them)\n",
                     sub->get_name().c_str());
    return code;
  } catch (const CLI::ParseError& e) {
    return exit_code(app, e);
  }
  return run ? run() : 0;
}
