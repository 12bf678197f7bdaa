// `kvmesh engine`: replays a trace through one simulated GPU (the engine
// model) in virtual time and reports what happened, or (--serve) serves
// simulated GPUs in real time behind vLLM's HTTP API and KV events.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/mesh_flags.hpp"
#include "cli/number_flags.hpp"
#include "cluster/sim_engine_server.hpp"
#include "core/block_hash.hpp"
#include "core/engine.hpp"
#include "core/log.hpp"
#include "core/sim.hpp"
#include "core/trace.hpp"
#include "harness/process.hpp"

namespace kvmesh::cli {

namespace {

struct engine_options {
  std::string trace;
  std::string serve;  // HOST:PORT: serve instead of replaying
  sim_engine_server_options server;
  size_t requests = 0;  // 0: all
  double speedup = 1.0;
  engine_config engine;
};

void print_summary(const char* name, const summary& s) {
  std::printf("  %-9s mean %9.1f  p50 %9.1f  p90 %9.1f  p99 %9.1f\n", name,
              s.mean, s.p50, s.p90, s.p99);
}

int serve_engine(engine_options opt) {
  const char* cmd = "engine";
  sim_engine_server_options& so = opt.server;
  if (!split_listen(opt.serve, so.host, so.port))
    return usage_error(
        cmd, "--serve: '" + opt.serve + "' is not HOST:PORT (port 0 to 65535)");
  so.engine = opt.engine;
  log::set_proc("engine");
  harness::block_signals({SIGINT, SIGTERM});
  auto server = sim_engine_server::start(so);
  if (!server) return start_error(cmd, server.err());
  KVMESH_INFO(
      "serves model %s on http://%s:%d as vLLM would: %u simulated GPU(s), "
      "%u-token blocks, %lu GPU blocks each%s%s",
      so.model.c_str(), so.host.c_str(), (*server)->port(), so.ranks,
      so.engine.block_tokens,
      static_cast<unsigned long>(so.engine.cache.gpu_blocks),
      so.kv_events.empty() ? "" : ", KV events on ", so.kv_events.c_str());
  // One line on stdout for scripts that started it on port 0.
  if (so.port == 0) {
    std::printf("ready http_port=%d\n", (*server)->port());
    std::fflush(stdout);
  }
  harness::wait_for_stop();
  const sim_engine_counters c = (*server)->counters();
  KVMESH_INFO("stopping: %lu requests, %lu finished, %lu refused, %lu steps",
              static_cast<unsigned long>(c.requests),
              static_cast<unsigned long>(c.finished),
              static_cast<unsigned long>(c.refused),
              static_cast<unsigned long>(c.steps));
  return 0;
}

int run_engine(engine_options opt) {
  if (!opt.serve.empty()) return serve_engine(std::move(opt));
  if (opt.trace.empty())
    return usage_error("engine", "--trace or --serve is required");
  auto trace = load_trace(opt.trace);
  if (!trace) {
    std::fprintf(stderr, "kvmesh engine: %s\n", trace.err().message.c_str());
    return 2;
  }
  if (opt.requests > 0 && opt.requests < trace->size())
    trace->resize(opt.requests);
  auto gpu = engine::make(opt.engine);
  if (!gpu) {
    std::fprintf(stderr, "kvmesh engine: %s\n", gpu.err().message.c_str());
    return 2;
  }
  const engine_replay run = replay_engine(*gpu, *trace, opt.speedup);
  for (const std::string& why : run.refused)
    std::fprintf(stderr, "kvmesh engine: %s\n", why.c_str());
  sim_result res;
  summarize_outcomes(run.outcomes, res);
  const size_t completed = res.e2e_ms.count;
  std::printf(
      "engine model: 1 GPU, %u-token blocks, %lu GPU / %lu host / %lu "
      "disk blocks\n",
      opt.engine.block_tokens,
      static_cast<unsigned long>(opt.engine.cache.gpu_blocks),
      static_cast<unsigned long>(opt.engine.cache.host_blocks),
      static_cast<unsigned long>(opt.engine.cache.disk_blocks));
  std::printf("trace: %s, %zu requests, arrivals / %.3g\n", opt.trace.c_str(),
              trace->size(), opt.speedup);
  std::printf(
      "completed %zu, refused %lu, steps %lu, preemptions %lu, "
      "virtual time %.1f s\n",
      completed, static_cast<unsigned long>(run.refused.size()),
      static_cast<unsigned long>(gpu->steps()),
      static_cast<unsigned long>(gpu->preemptions()), run.end_ms / 1e3);
  std::printf(
      "prompt blocks %lu; reused from gpu %.1f%%, host %.1f%%, "
      "disk %.1f%%\n",
      static_cast<unsigned long>(run.prompt_blocks), 100 * res.hit_ratio.gpu,
      100 * res.hit_ratio.host, 100 * res.hit_ratio.disk);
  std::printf("KV events: %lu stored, %lu removed\n",
              static_cast<unsigned long>(run.stored),
              static_cast<unsigned long>(run.removed));
  std::printf("latency (ms):\n");
  print_summary("TTFT", res.ttft_ms);
  print_summary("E2E", res.e2e_ms);
  print_summary("ITL", res.itl_ms);
  return 0;
}

}  // namespace

void add_engine(CLI::App& app, std::function<int()>& run) {
  auto opt = std::make_shared<engine_options>();
  opt->engine.block_tokens = default_block_tokens;
  // An 80 GB GPU serving an 8B-class model keeps about 500k tokens of KV:
  // ~1000 blocks of 512 tokens; host memory and disk hold 4x and 16x that.
  opt->engine.cache = {1024, 4096, 16384};
  auto* cmd = app.add_subcommand(
      "engine",
      "replay a trace through one simulated GPU (the engine model), or "
      "serve simulated GPUs as vLLM serves real ones (--serve)");
  auto* trace =
      cmd->add_option("--trace", opt->trace, "JSONL trace (Mooncake format)");
  cmd->add_option("--serve", opt->serve,
                  "HOST:PORT: serve the engine model in real time behind "
                  "vLLM's HTTP API (OpenAI completions and chat, /tokenize, "
                  "/v1/models, /metrics, /health) until SIGINT/SIGTERM")
      ->excludes(trace);
  sim_engine_server_options& so = opt->server;
  cmd->add_option("--model", so.model, "--serve: the model name it serves")
      ->capture_default_str();
  cmd->add_option("--data-parallel-size", so.ranks,
                  "--serve: simulated GPUs, one data-parallel rank each "
                  "(X-data-parallel-rank picks one)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--kv-events", so.kv_events,
                  "--serve: publish vLLM's KV events on tcp://HOST:PORT "
                  "(rank r on PORT + r)");
  cmd->add_option("--kv-topic", so.kv_topic, "--serve: the KV events' topic");
  cmd->add_option("--time-scale", so.time_scale,
                  "--serve: engine milliseconds per wall-clock millisecond")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--default-max-tokens", so.default_max_tokens,
                  "--serve: output tokens of a request that names no "
                  "max_tokens")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--max-model-len", so.max_model_len,
                  "--serve: prompt plus output tokens at most (0: the GPU "
                  "tier's tokens)")
      ->capture_default_str();
  cmd->add_option("--http-threads", so.threads,
                  "--serve: concurrent requests (each streaming one holds a "
                  "thread)")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--requests", opt->requests, "replay the first N (0: all)")
      ->capture_default_str();
  cmd->add_option("--speedup", opt->speedup, "divide arrival times by X")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--block-tokens", opt->engine.block_tokens,
                  "tokens per KV block")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--gpu-blocks", opt->engine.cache.gpu_blocks,
                  "GPU KV capacity in blocks")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--host-blocks", opt->engine.cache.host_blocks,
                  "host-memory tier in blocks (0: none)")
      ->capture_default_str();
  cmd->add_option("--disk-blocks", opt->engine.cache.disk_blocks,
                  "disk tier in blocks (0: none)")
      ->capture_default_str();
  cmd->add_option("--speed", opt->engine.speed, "GPU speed factor")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--model-factor", opt->engine.model_factor,
                  "scales every step time")
      ->check(positive)
      ->capture_default_str();
  cmd->callback([opt, &run] { run = [opt] { return run_engine(*opt); }; });
}

}  // namespace kvmesh::cli
