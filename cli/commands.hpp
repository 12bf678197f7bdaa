// The kvmesh subcommands: each registers its flags and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/sim.hpp"

namespace kvmesh::cli {

// Registers a subcommand on `app`; `run` is set to its body, which returns
// the process exit code.
void add_hash(CLI::App& app, std::function<int()>& run);
void add_engine(CLI::App& app, std::function<int()>& run);
void add_sim(CLI::App& app, std::function<int()>& run);
void add_up(CLI::App& app, std::function<int()>& run);
void add_bench(CLI::App& app, std::function<int()>& run);
// The NATS mesh (cmd_mesh.cpp): its processes and its clients.
void add_agent(CLI::App& app, std::function<int()>& run);
void add_router(CLI::App& app, std::function<int()>& run);
void add_index(CLI::App& app, std::function<int()>& run);
void add_route(CLI::App& app, std::function<int()>& run);
void add_admin(CLI::App& app, std::function<int()>& run);
void add_top(CLI::App& app, std::function<int()>& run);
// A fixed-rate load generator that records every request's fate
// (cmd_load.cpp), for scripts/chaos.
void add_load(CLI::App& app, std::function<int()>& run);

// The fleet and load flags that `sim` and `up` share, bound to `cfg`:
// --workers, --routers, --gpu-blocks, --host-blocks, --disk-blocks,
// --block-tokens, --speedup, --seed.
void add_fleet_options(CLI::App& cmd, sim_config& cfg);

// Parses --tokens "1,2,3" into token ids (hash, route); a malformed entry
// is named by position.
expected<std::vector<uint32_t>> parse_token_list(const std::string& text);

// Checks a --prefix: subject tokens (letters, digits, '-', '_') separated by
// dots, so that every subject under it is valid. Errors name --prefix.
status check_prefix(const std::string& prefix);

}  // namespace kvmesh::cli
