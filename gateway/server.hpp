// `kvmesh gateway`'s HTTP server: one OpenAI-compatible URL in front of the
// mesh. POST /v1/chat/completions and /v1/completions are tokenized,
// hashed, routed by the mesh and proxied to the winning worker; GET
// /v1/models lists the mesh's pools; GET /health says whether the mesh can
// route. Asynchronous (Boost.Beast on Asio): a few threads serve every
// connection, however many stream.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/block_hash.hpp"
#include "core/error.hpp"
#include "gateway/mesh.hpp"
#include "gateway/tokenize.hpp"
#include "metrics/registry.hpp"

namespace kvmesh::gateway {

// Half the host's cores, at least one. Each thread sleeps in its own event
// loop and wakes for its own connections: on two cores one thread took
// about 10% less CPU per request than two (fewer events per wake-up).
size_t default_http_threads();

struct gateway_options {
  std::string host = "0.0.0.0";
  int port = 0;        // 0: a free port (see port())
  size_t threads = 2;  // the io_context's threads (--http-threads)
  size_t max_body_bytes = size_t{16} << 20;  // larger: 413
  // The mesh's block size: the routers refuse another one.
  uint32_t block_tokens = default_block_tokens;
  // Routes again after a worker failed before its first byte, at most.
  uint32_t max_reroutes = 2;
  std::chrono::milliseconds connect_timeout{5000};  // to a worker
  // Idle keep-alive connections kept per worker (and engine) by each
  // thread; 0: a new connection for every request.
  size_t upstream_idle = 16;
  // Longest silence of a worker mid-answer, or of a client not reading.
  std::chrono::milliseconds upstream_idle_timeout{600000};
  // Longest wait for a client's (next) request on a connection.
  std::chrono::milliseconds client_idle_timeout{120000};
  // The in-process tokenizer of a model (local_tokenizer.hpp); null or a
  // null answer: ask an engine of the model's pool (POST /tokenize), as
  // for the prompts it hands over. Called on the gateway's threads.
  std::function<std::shared_ptr<prompt_tokenizer>(const pool_model&)>
      tokenizer_for;
  // Where the series go; null: a registry of the server's own.
  metrics::registry* registry = nullptr;
};

class gateway_server {
 public:
  // Binds and starts serving on opt.threads threads. `mesh` outlives the
  // server. Errors: the address cannot be bound, bad options, the series
  // already registered.
  static expected<std::unique_ptr<gateway_server>> start(
      gateway_mesh& mesh, const gateway_options& opt);
  // Stops: connections close, streams in flight end, pending mesh and
  // tokenizer callbacks are dropped (a later call does nothing).
  ~gateway_server();
  gateway_server(const gateway_server&) = delete;
  gateway_server& operator=(const gateway_server&) = delete;

  int port() const;
  metrics::registry& registry();

  struct impl;

 private:
  explicit gateway_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvmesh::gateway
