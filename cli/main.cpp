// The kvmesh binary: one entry point, one subcommand per job.
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>
#include <string>

#include "cli/commands.hpp"

namespace {

// The mesh's commands promise exit code 2 for any bad flag or value, as
// scripts and supervisors expect of a usage error; the older commands keep
// CLI11's codes (105, 106, ...), which their users may already test for.
// `up --embedded` is one of the older ones.
bool usage_errors_exit_2(const CLI::App& app, int argc, char** argv) {
  static const std::set<std::string> mesh{"agent", "router", "index", "route",
                                          "admin", "up",     "bench", "top"};
  for (const CLI::App* sub : app.get_subcommands()) {
    if (!mesh.count(sub->get_name())) continue;
    if (sub->get_name() != "up") return true;
    for (int i = 1; i < argc; ++i)
      if (std::strcmp(argv[i], "--embedded") == 0) return false;
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvmesh: routes LLM requests to GPUs priced in cache blocks"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvmesh 0.1.0");
  std::function<int()> run;
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code != 0 && usage_errors_exit_2(app, argc, argv) ? 2 : code;
  }
  return run ? run() : 0;
}
