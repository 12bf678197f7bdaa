// The kvmesh binary: one entry point, one subcommand per job.
#include <cstdio>
#include <functional>

#include "cli/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"kvmesh: routes LLM requests to GPUs priced in cache blocks"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvmesh 0.1.0");
  std::function<int()> run;
  kvmesh::cli::add_hash(app, run);
  kvmesh::cli::add_engine(app, run);
  kvmesh::cli::add_sim(app, run);
  kvmesh::cli::add_up(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return run ? run() : 0;
}
