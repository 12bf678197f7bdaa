// `kvmesh agent`: a node agent over simulated GPUs or a real engine's ranks.
#include <cinttypes>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.hpp"
#include "cli/config.hpp"
#include "cli/mesh_flags.hpp"
#include "cluster/engine_agent.hpp"
#include "cluster/kv_subscriber.hpp"
#include "cluster/openai_front.hpp"
#include "core/sim.hpp"
#include "messages/member_checks.hpp"

namespace kvmesh::cli {

namespace {

struct agent_flags {
  bus_flags bus;
  metrics_flags metrics;
  uint32_t threads = 0;  // the actor system's; 0: one per core
  wire_limits limits;
  std::string engine;
  std::string name;
  uint32_t workers = 0;
  uint32_t first_id = 0;
  uint32_t heartbeat_ms = 1000;
  double time_scale = 1;
  double speed = 1;
  sim_config cfg;  // one GPU's engine: tiers, block size, model factor
  // Real engines (vllm, sglang).
  std::string kv_events;
  std::string kv_replay;
  std::string kv_topic;
  std::string engine_url;
  uint32_t dp_size = 1;
  std::string front_host = "0.0.0.0";
  std::string advertise_host;
  std::string engine_advertise;
  uint32_t front_port = 0;
  uint32_t front_threads = 2;
  uint32_t metrics_ms = 1000;
  uint32_t unhealthy_after = 3;
  uint32_t award_ttl_ms = 60000;
  std::vector<std::string> models;  // sim: what its GPUs serve (base models)
  CLI::Option* workers_opt = nullptr;
  CLI::Option* gpu_blocks_opt = nullptr;
  CLI::Option* block_tokens_opt = nullptr;
  std::vector<CLI::Option*> sim_only;  // meaningless for a real engine
};

// `kvmesh agent --engine vllm|sglang`: one worker per data-parallel rank,
// following the engine's KV events and fronting its OpenAI API.
int run_engine_agent(agent_flags& f) {
  const char* cmd = "agent";
  const std::string e = "--engine " + f.engine;
  if (f.kv_events.empty())
    return usage_error(cmd, e + ": needs --kv-events tcp://HOST:PORT (the "
                                "engine's KV event publisher)");
  // A config file may serve sim agents too: only flags are refused.
  if (from_command_line(f.workers_opt))
    return usage_error(cmd, e + ": --workers is for sim; a real engine has "
                                "one worker per rank (--data-parallel-size)");
  for (CLI::Option* o : f.sim_only)
    if (from_command_line(o))
      return usage_error(cmd, e + ": " + o->get_name() + " is for sim only");
  if (f.block_tokens_opt->count() == 0)
    return usage_error(cmd, e + ": needs --block-tokens, the engine's block "
                                "size (vLLM --block-size, SGLang "
                                "--page-size)");
  if (auto st =
          take_name("agent", f.name, "agent-" + std::to_string(f.first_id));
      !st)
    return usage_error(cmd, st.err().message);
  if (f.front_port + uint64_t{f.dp_size} - 1 > 65535)
    return usage_error(cmd, "--front-port: the fronts' ports pass 65535");
  engine_agent_options o;
  o.mesh = make_mesh_options(f.bus.prefix, f.heartbeat_ms);
  o.name = f.name;
  o.engine = f.engine;
  o.kv_events = f.kv_events;
  o.kv_replay = f.kv_replay;
  o.kv_topic = f.kv_topic;
  o.engine_url = f.engine_url;
  o.dp_size = f.dp_size;
  o.first_id = f.first_id;
  o.state.block_tokens = f.cfg.block_tokens;
  o.state.gpu_blocks = f.gpu_blocks_opt->count() > 0 ? f.cfg.gpu_blocks : 0;
  o.state.ledger.speed = f.speed;
  o.state.ledger.refuse_growth = f.cfg.refuse_growth;
  o.state.award_ttl_ms = f.award_ttl_ms;
  o.front_host = f.front_host;
  o.advertise_host = f.advertise_host;
  o.engine_advertise = f.engine_advertise;
  o.front_port = static_cast<int>(f.front_port);
  o.front_threads = f.front_threads;
  o.poll = std::chrono::milliseconds(f.metrics_ms);
  o.unhealthy_after = f.unhealthy_after;
  for (const auto& [flag, url] :
       {std::pair<const char*, const std::string*>{"--kv-events", &f.kv_events},
        {"--kv-replay", &f.kv_replay}})
    if (!url->empty())
      if (auto ep = endpoint_of_rank(*url, f.dp_size - 1); !ep)
        return usage_error(cmd, std::string(flag) + ": " + ep.err().message);
  if (!f.engine_url.empty())
    if (auto st = check_engine_url(f.engine_url); !st)
      return usage_error(cmd, "--engine-url: " + st.err().message);
  if (!f.engine_advertise.empty() && f.engine_advertise != "off")
    if (auto st = check_engine_url(f.engine_advertise); !st)
      return usage_error(cmd, "--engine-advertise: " + st.err().message);
  auto p = start_process(f.bus, f.metrics, f.threads, f.name,
                         [&] { return process_metrics::for_agent(o); });
  if (!p) return start_error(cmd, p.err());
  auto node = engine_agent::start(*p->sys, *p->bus, o);
  if (!node) return start_error(cmd, f.name, node.err());
  p->watch(**node);
  for (uint32_t r = 0; r < f.dp_size; ++r)
    KVMESH_INFO(
        "serves worker %u (engine %s rank %u, KV "
        "events %s%s%s, blocks of %u tokens, front %s) on %s, "
        "prefix %s",
        f.first_id + r, f.engine.c_str(), r,
        endpoint_of_rank(f.kv_events, r)->c_str(),
        f.kv_topic.empty() ? "" : " topic ", f.kv_topic.c_str(),
        f.cfg.block_tokens,
        f.engine_url.empty() ? "none (no --engine-url)"
                             : (*node)->endpoint(r).c_str(),
        p->url.c_str(), f.bus.prefix.c_str());
  return p->serve(*node);
}

int run_agent(agent_flags f) {
  const char* cmd = "agent";
  set_wire_limits(f.limits);
  if (auto why = check_bus_flags(f.bus); !why.empty())
    return usage_error(cmd, why);
  if (f.engine == "vllm" || f.engine == "sglang") return run_engine_agent(f);
  if (f.engine != "sim")
    return usage_error(
        cmd, "--engine " + f.engine + ": unknown engine (sim, vllm or sglang)");
  if (f.workers_opt->count() == 0)
    return usage_error(cmd, "--engine sim: needs --workers N");
  const uint64_t last = uint64_t{f.first_id} + f.workers - 1;
  if (last >= max_worker_id)
    return usage_error(cmd, "--worker-id/--workers: worker ids " +
                                std::to_string(f.first_id) + ".." +
                                std::to_string(last) + " exceed " +
                                std::to_string(max_worker_id - 1));
  if (auto st =
          take_name("agent", f.name, "agent-" + std::to_string(f.first_id));
      !st)
    return usage_error(cmd, st.err().message);
  f.cfg.workers = f.workers;
  if (auto st = validate(f.cfg); !st) return usage_error(cmd, st.err().message);
  if (f.models.size() > max_models_per_worker)
    return usage_error(cmd, "--model: at most " +
                                std::to_string(max_models_per_worker) +
                                " models");
  for (const auto& m : f.models)
    if (auto st = check_model_name(m); !st)
      return usage_error(cmd, "--model: " + st.err().message);
  agent_options ao;
  ao.mesh = make_mesh_options(f.bus.prefix, f.heartbeat_ms);
  ao.name = f.name;
  for (uint32_t id = f.first_id; id <= last; ++id) {
    worker_options wo;
    wo.engine = fleet_engine_config(f.cfg, id);
    wo.engine.speed = f.speed;
    auto probe = engine::make(wo.engine);
    if (!probe) return usage_error(cmd, probe.err().message);
    wo.ledger = fleet_worker_config(f.cfg, id, *probe);
    wo.time_scale = f.time_scale;
    for (const auto& m : f.models)
      wo.models.push_back({m, ""});
    ao.workers.push_back(std::move(wo));
  }
  auto p = start_process(f.bus, f.metrics, f.threads, f.name,
                         [&] { return process_metrics::for_agent(ao); });
  if (!p) return start_error(cmd, p.err());
  auto node = agent_node::start(*p->sys, *p->bus, ao);
  if (!node) return start_error(cmd, f.name, node.err());
  p->watch(**node);
  KVMESH_INFO(
      "serves workers %u-%u (engine sim, speed %g, "
      "%" PRIu64 "/%" PRIu64 "/%" PRIu64
      " GPU/host/disk blocks of %u tokens, time scale %g) on %s, "
      "prefix %s",
      f.first_id, static_cast<uint32_t>(last), f.speed, f.cfg.gpu_blocks,
      f.cfg.host_blocks, f.cfg.disk_blocks, f.cfg.block_tokens, f.time_scale,
      p->url.c_str(), f.bus.prefix.c_str());
  return p->serve(*node);
}

// The flags of --engine vllm|sglang, under a heading of their own.
void add_real_engine_flags(CLI::App& cmd, agent_flags& f) {
  auto* real = "Real engines (--engine vllm|sglang)";
  cmd.add_option("--kv-events", f.kv_events,
                 "the engine's KV event publisher of rank 0, tcp://HOST:PORT "
                 "(rank r at PORT + r)")
      ->group(real);
  cmd.add_option("--kv-replay", f.kv_replay,
                 "its replay endpoint of rank 0 (replay_endpoint of "
                 "--kv-events-config): lost events are asked again instead "
                 "of forgetting the worker's cache")
      ->group(real);
  cmd.add_option("--kv-topic", f.kv_topic,
                 "the publisher's topic (\"topic\" of --kv-events-config)")
      ->group(real)
      ->capture_default_str();
  cmd.add_option("--engine-url", f.engine_url,
                 "the engine's OpenAI API, http://HOST:PORT: fronted per "
                 "rank, its /health and /metrics followed")
      ->group(real);
  cmd.add_option("--data-parallel-size", f.dp_size,
                 "the engine's data-parallel ranks: one worker each, ids "
                 "from --worker-id")
      ->check(CLI::Range(1, 1024))
      ->group(real)
      ->capture_default_str();
  cmd.add_option("--front-host", f.front_host,
                 "address the OpenAI fronts listen on")
      ->group(real)
      ->capture_default_str();
  cmd.add_option("--front-port", f.front_port,
                 "port of rank 0's front, rank r at PORT + r (0: free ports)")
      ->check(CLI::Range(0, 65535))
      ->group(real)
      ->capture_default_str();
  cmd.add_option("--front-threads", f.front_threads,
                 "I/O threads of each front; they serve any number of "
                 "requests and streams at once")
      ->check(CLI::Range(1, 64))
      ->group(real)
      ->capture_default_str();
  cmd.add_option("--advertise-host", f.advertise_host,
                 "host named in decisions (default: --front-host, or this "
                 "host's name when that is a wildcard)")
      ->group(real);
  cmd.add_option("--engine-advertise", f.engine_advertise,
                 "the engine's URL as gateways reach it, so that they call "
                 "the engine themselves ('off': through the fronts; default: "
                 "--engine-url, unless it is this host's loopback and the "
                 "fronts are named by another host)")
      ->group(real);
  cmd.add_option("--metrics-ms", f.metrics_ms,
                 "read the engine's /health and /metrics this often")
      ->check(positive)
      ->group(real)
      ->capture_default_str();
  cmd.add_option("--award-ttl-ms", f.award_ttl_ms,
                 "an awarded request whose client has not called the front "
                 "within this is dropped from the queue")
      ->check(positive)
      ->group(real)
      ->capture_default_str();
  cmd.add_option("--unhealthy-after", f.unhealthy_after,
                 "failed /health reads in a row before the workers refuse "
                 "awards")
      ->check(positive)
      ->group(real)
      ->capture_default_str();
}

}  // namespace

void add_agent(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<agent_flags>();
  auto* cmd = app.add_subcommand(
      "agent",
      "run a node agent: WORKERs served on NATS, bidding for requests, "
      "pushing heartbeats and KV events; simulated GPUs (--engine sim) or "
      "a real engine's ranks (--engine vllm|sglang: its KV events over ZMQ, "
      "its OpenAI API fronted); until SIGINT/SIGTERM");
  add_bus_flags(*cmd, f->bus);
  add_metrics_flags(*cmd, f->metrics);
  add_threads_flag(*cmd, f->threads);
  add_limit_flags(*cmd, f->limits);
  cmd->add_option("--engine", f->engine, "the GPUs' engine: sim, vllm, sglang")
      ->required();
  f->workers_opt =
      cmd->add_option("--workers", f->workers,
                      "WORKERs (simulated GPUs) on this node (sim)")
          ->check(positive);
  cmd->add_option("--worker-id", f->first_id,
                  "id of the first worker; the others follow (ids are "
                  "unique across the mesh)")
      ->capture_default_str();
  cmd->add_option("--name", f->name,
                  "the agent's name in its subjects, unique in the mesh "
                  "(default agent-<first worker id>)");
  cmd->add_option("--heartbeat-ms", f->heartbeat_ms,
                  "push each worker's status this often")
      ->check(positive)
      ->capture_default_str();
  f->sim_only.push_back(
      cmd->add_option("--time-scale", f->time_scale,
                      "run the simulated engines X times faster than real "
                      "time (sim)")
          ->check(positive)
          ->capture_default_str());
  f->sim_only.push_back(cmd->add_option(
      "--model", f->models,
      "a model these simulated GPUs serve, repeated for more: requests "
      "naming it go to them (sim; a real engine's models come from its "
      "/v1/models)"));
  cmd->add_option("--speed", f->speed,
                  "prefill speed of these GPUs relative to the reference")
      ->check(positive)
      ->capture_default_str();
  sim_config& c = f->cfg;
  f->gpu_blocks_opt =
      cmd->add_option("--gpu-blocks", c.gpu_blocks,
                      "GPU KV blocks per worker (vllm, sglang: default "
                      "learnt from the engine's metrics)")
          ->check(positive)
          ->capture_default_str();
  f->sim_only.push_back(
      cmd->add_option("--host-blocks", c.host_blocks,
                      "host-memory blocks per worker (0: no tier) (sim)")
          ->capture_default_str());
  f->sim_only.push_back(
      cmd->add_option("--disk-blocks", c.disk_blocks,
                      "disk blocks per worker (0: no tier) (sim)")
          ->capture_default_str());
  f->block_tokens_opt =
      cmd->add_option("--block-tokens", c.block_tokens,
                      "tokens per block (the routers' and clients' too; for "
                      "vllm and sglang the engine's block or page size)")
          ->check(positive)
          ->capture_default_str();
  f->sim_only.push_back(cmd->add_option("--model-factor", c.model_factor,
                                        "scale every engine step time by X "
                                        "(sim)")
                            ->check(positive)
                            ->capture_default_str());
  cmd->add_option("--refuse-growth", c.refuse_growth,
                  "refuse an award when the queue grew by more than X "
                  "request sizes beyond what the router priced (0: never)")
      ->check(non_negative)
      ->capture_default_str();
  add_real_engine_flags(*cmd, *f);
  cmd->callback([f, &run] { run = [f] { return run_agent(*f); }; });
}

}  // namespace kvmesh::cli
