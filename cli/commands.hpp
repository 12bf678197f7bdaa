// The kvmesh subcommands: each registers its flags and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

#include "core/args.hpp"  // parse_token_list, check_prefix: the commands' values
#include "core/sim.hpp"

namespace kvmesh::cli {

// Registers a subcommand on `app`; `run` is set to its body, which returns
// the process exit code.
void add_hash(CLI::App& app, std::function<int()>& run);
void add_engine(CLI::App& app, std::function<int()>& run);
void add_sim(CLI::App& app, std::function<int()>& run);
void add_up(CLI::App& app, std::function<int()>& run);
void add_bench(CLI::App& app, std::function<int()>& run);
// The NATS mesh: its processes (cmd_agent.cpp, cmd_router.cpp,
// cmd_index.cpp) and its clients (cmd_route.cpp, cmd_admin.cpp, cmd_top.cpp).
void add_agent(CLI::App& app, std::function<int()>& run);
void add_router(CLI::App& app, std::function<int()>& run);
// The OpenAI-compatible front door over the mesh (cmd_gateway.cpp).
void add_gateway(CLI::App& app, std::function<int()>& run);
void add_index(CLI::App& app, std::function<int()>& run);
void add_route(CLI::App& app, std::function<int()>& run);
void add_admin(CLI::App& app, std::function<int()>& run);
void add_top(CLI::App& app, std::function<int()>& run);
// A fixed-rate load generator that records every request's fate
// (cmd_load.cpp), for scripts/chaos.
void add_load(CLI::App& app, std::function<int()>& run);
// `completion bash|zsh` and `man`, made from every command's flags
// (cmd_completion.cpp); registered last, they see the whole tree.
void add_completion(CLI::App& app, std::function<int()>& run);
// Adds the `nats-auth` verb to `kvmesh config` (it needs the mesh's names,
// which the config library does not link).
void add_nats_auth(CLI::App& config, std::function<int()>& run);

// The fleet and load flags that `sim` and `up` share, bound to `cfg`:
// --workers, --routers, --gpu-blocks, --host-blocks, --disk-blocks,
// --block-tokens, --speedup, --seed.
void add_fleet_options(CLI::App& cmd, sim_config& cfg);

}  // namespace kvmesh::cli
