// `kvmesh gateway`: the OpenAI-compatible front door, over the mesh's NATS.
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/mesh_flags.hpp"
#include "cluster/probes.hpp"
#include "gateway/local_tokenizer.hpp"
#include "gateway/nats_mesh.hpp"
#include "gateway/server.hpp"

namespace kvmesh::cli {

namespace {

struct gateway_flags {
  bus_flags bus;
  metrics_flags metrics;
  std::string name;
  std::string listen = "0.0.0.0:8080";
  // 0: half the host's cores, at least one (default_http_threads).
  uint32_t http_threads = 0;
  uint32_t block_tokens = default_block_tokens;
  uint32_t timeout_ms = 5000;
  uint32_t max_reroutes = 2;
  uint32_t upstream_idle = 16;
  uint64_t max_body_bytes = uint64_t{16} << 20;
  uint32_t heartbeat_ms = 1000;
  std::vector<std::string> tokenizers;  // MODEL=DIR
  uint32_t tokenizer_threads = 2;
  wire_limits limits;
};

// What the gateway runs: its view of the mesh and its HTTP server, stopped
// server first (its requests wait on the mesh).
// Destroyed in reverse: the server first, the tokenizers last.
struct gateway_node {
  std::unique_ptr<gateway::local_tokenizers> tokenizers;
  std::unique_ptr<gateway::nats_mesh> mesh;
  std::unique_ptr<gateway::gateway_server> server;
};

// The in-process tokenizers of --tokenizer MODEL=DIR, every one loaded
// (null when none is given); else the first failure, naming the model, the
// file and the reason.
expected<std::unique_ptr<gateway::local_tokenizers>> load_tokenizers(
    const gateway_flags& f) {
  std::map<std::string, gateway::model_tokenizer> models;
  for (const auto& spec : f.tokenizers) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return make_error(ec::invalid_argument,
                        "--tokenizer: '" + spec + "' is not MODEL=DIR");
    const std::string model = spec.substr(0, eq);
    if (models.count(model))
      return make_error(ec::invalid_argument,
                        "--tokenizer: model '" + model + "' is given twice");
    auto m = gateway::model_tokenizer::load(spec.substr(eq + 1));
    if (!m)
      return make_error(ec::invalid_argument, "--tokenizer: model '" + model +
                                                  "': " + m.err().message);
    KVMESH_INFO("tokenizes model %s in process: %s", model.c_str(),
                m->describe().c_str());
    models.emplace(model, std::move(*m));
  }
  if (models.empty()) return std::unique_ptr<gateway::local_tokenizers>();
  return gateway::local_tokenizers::start(std::move(models),
                                          f.tokenizer_threads);
}

int run_gateway(gateway_flags f) {
  const char* cmd = "gateway";
  set_wire_limits(f.limits);
  if (auto why = check_bus_flags(f.bus); !why.empty())
    return usage_error(cmd, why);
  if (auto st =
          take_name("gateway", f.name, "gateway-" + std::to_string(getpid()));
      !st)
    return usage_error(cmd, st.err().message);
  gateway::gateway_options go;
  if (!split_listen(f.listen, go.host, go.port))
    return usage_error(
        cmd, "--listen: '" + f.listen + "' is not HOST:PORT (port 0 to 65535)");
  go.threads =
      f.http_threads > 0 ? f.http_threads : gateway::default_http_threads();
  go.block_tokens = f.block_tokens;
  go.max_reroutes = f.max_reroutes;
  go.upstream_idle = f.upstream_idle;
  go.max_body_bytes = f.max_body_bytes;
  // Before connecting: a model whose ids cannot be exact stops the start.
  auto tokenizers = load_tokenizers(f);
  if (!tokenizers) return usage_error(cmd, tokenizers.err().message);
  auto p = start_process(f.bus, f.metrics, 1, f.name,
                         [] { return process_metrics::for_role("gateway"); });
  if (!p) return start_error(cmd, p.err());
  gateway::nats_mesh_options mo;
  mo.subj.prefix = f.bus.prefix;
  mo.name = f.name;
  mo.timeout = std::chrono::milliseconds(f.timeout_ms);
  mo.stale = std::chrono::milliseconds(f.heartbeat_ms * 5 / 2);
  mo.max_workers = f.limits.max_workers;
  mo.thread_connection = bus_options(f.bus, f.name);
  auto node = std::make_unique<gateway_node>();
  node->tokenizers = std::move(*tokenizers);
  if (const gateway::local_tokenizers* lt = node->tokenizers.get())
    go.tokenizer_for = [lt](const gateway::pool_model& pool) {
      return lt->for_pool(pool);
    };
  auto mesh = gateway::nats_mesh::start(*p->bus, mo);
  if (!mesh) return start_error(cmd, f.name, mesh.err());
  node->mesh = std::move(*mesh);
  if (p->pm) go.registry = &p->pm->registry();
  auto server = gateway::gateway_server::start(*node->mesh, go);
  if (!server) return start_error(cmd, f.name, server.err());
  node->server = std::move(*server);
  if (p->pm) {
    const nats_bus* bus = p->bus.get();
    const gateway::nats_mesh* m = node->mesh.get();
    p->pm->watch(
        *p->sys, *p->bus,
        [bus, m](caf::scoped_actor&, std::chrono::steady_clock::time_point) {
          std::vector<std::string> why;
          if (!bus->connected()) why.push_back("not connected to NATS");
          if (!m->ready()) why.push_back("no live worker heard yet");
          return why;
        });
  }
  KVMESH_INFO(
      "serves the OpenAI API on %s:%d for the mesh on %s, prefix %s "
      "(blocks of %u tokens)",
      go.host.c_str(), node->server->port(), p->url.c_str(),
      f.bus.prefix.c_str(), f.block_tokens);
  return p->serve(node);
}

}  // namespace

void add_gateway(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<gateway_flags>();
  auto* cmd = app.add_subcommand(
      "gateway",
      "run the OpenAI-compatible gateway: /v1/chat/completions and "
      "/v1/completions tokenized, routed by the mesh and proxied to the "
      "winning GPU, streamed back; /v1/models lists the mesh's models; "
      "until SIGINT/SIGTERM");
  add_bus_flags(*cmd, f->bus);
  add_metrics_flags(*cmd, f->metrics);
  add_limit_flags(*cmd, f->limits);
  cmd->add_option("--name", f->name,
                  "the gateway's name, unique in the mesh (default "
                  "gateway-<pid>)");
  cmd->add_option("--listen", f->listen, "HOST:PORT the OpenAI API listens on")
      ->capture_default_str();
  cmd->add_option("--http-threads", f->http_threads,
                  "threads serving HTTP, each holding many streams (0: "
                  "half the host's cores, at least 1)")
      ->capture_default_str();
  cmd->add_option("--block-tokens", f->block_tokens,
                  "tokens per block, as the mesh's workers have it")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--timeout-ms", f->timeout_ms,
                  "wait this long for a routing decision (504 past it)")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--max-reroutes", f->max_reroutes,
                  "route a request again this often at most when its GPU "
                  "fails before the first byte")
      ->capture_default_str();
  cmd->add_option("--upstream-idle", f->upstream_idle,
                  "idle keep-alive connections each HTTP thread keeps per "
                  "worker for the next request (0: a connection per "
                  "request)")
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", f->max_body_bytes,
                  "largest request body (413 past it)")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--heartbeat-ms", f->heartbeat_ms,
                  "the mesh's heartbeat: a worker unheard for 2.5 of them "
                  "is out of /v1/models")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--tokenizer", f->tokenizers,
                  "MODEL=DIR: tokenize MODEL's prompts in process with the "
                  "Hugging Face files in DIR (tokenizer.json, "
                  "tokenizer_config.json, chat_template.jinja), not by "
                  "asking its engine; repeated for more models. A file the "
                  "gateway cannot follow exactly stops the start")
      ->type_name("MODEL=DIR");
  cmd->add_option("--tokenizer-threads", f->tokenizer_threads,
                  "threads encoding the --tokenizer models' prompts longer "
                  "than 2 KB")
      ->check(positive)
      ->capture_default_str();
  cmd->callback([f, &run] { run = [f] { return run_gateway(*f); }; });
}

}  // namespace kvmesh::cli
