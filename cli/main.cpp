// The kvmesh binary: one entry point, one subcommand per job.
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>
#include <string>

#include "cli/commands.hpp"
#include "cli/config.hpp"

namespace {

// The mesh's commands promise exit code 2 for any bad flag or value, as
// scripts and supervisors expect of a usage error; the older commands keep
// CLI11's codes (105, 106, ...), which their users may already test for.
// `up --embedded` is one of the older ones.
bool usage_errors_exit_2(const CLI::App& app, int argc, char** argv) {
  static const std::set<std::string> mesh{"agent", "router", "index",
                                          "route", "admin",  "up",
                                          "bench", "top",    "config"};
  for (const CLI::App* sub : app.get_subcommands()) {
    if (!mesh.count(sub->get_name())) continue;
    if (sub->get_name() != "up") return true;
    for (int i = 1; i < argc; ++i)
      if (std::strcmp(argv[i], "--embedded") == 0) return false;
    return true;
  }
  return false;
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
  kvmesh::cli::add_index(app, run);
  kvmesh::cli::add_route(app, run);
  kvmesh::cli::add_admin(app, run);
  kvmesh::cli::add_top(app, run);
  kvmesh::cli::add_load(app, run);
  kvmesh::cli::add_config(app, run);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvmesh: routes LLM requests to GPUs priced in cache blocks"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvmesh 0.1.0");
  std::function<int()> run;
  add_commands(app, run);
  kvmesh::cli::set_command_factory(add_commands);
  kvmesh::cli::enable_config(app);
  try {
    app.parse(argc, argv);
  } catch (const kvmesh::cli::config_error& e) {
    // Names the command, the file and line or the variable already.
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const CLI::RequiredError& e) {
    const int code = app.exit(e);
    // Where else a required value may come from, when it can.
    for (const CLI::App* sub : app.get_subcommands())
      if (sub->get_option_no_throw("--config"))
        std::fprintf(stderr,
                     "kvmesh %s: a flag's value may also come from a "
                     "KVMESH_* variable or the --config file (kvmesh config "
                     "docs lists them)\n",
                     sub->get_name().c_str());
    return code != 0 && usage_errors_exit_2(app, argc, argv) ? 2 : code;
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code != 0 && usage_errors_exit_2(app, argc, argv) ? 2 : code;
  }
  return run ? run() : 0;
}
