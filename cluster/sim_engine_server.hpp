// A simulated GPU served as vLLM serves one: the engine model (core/engine)
// running in real time behind vLLM's HTTP API (completions and chat,
// streaming or not, /tokenize, /v1/models, /metrics, /health) and
// publishing vLLM's KV events over ZMQ, so that the mesh, the gateway and
// the demo run end to end without a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/engine.hpp"
#include "core/error.hpp"

namespace kvmesh {

struct sim_engine_server_options {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: a free port (see port())
  std::string model = "kvmesh-sim";
  // Data-parallel ranks, one engine model each, as one vLLM process with
  // --data-parallel-size: a request's X-data-parallel-rank header picks its
  // rank, else the least loaded one takes it.
  uint32_t ranks = 1;
  engine_config engine;
  // Engine milliseconds per wall-clock millisecond.
  double time_scale = 1;
  // KV events: rank r publishes on tcp://HOST:(PORT + r); empty: none.
  std::string kv_events;
  std::string kv_topic;
  // max_tokens when a request names none.
  uint32_t default_max_tokens = 16;
  // Prompt plus output tokens at most; 0: the GPU tier's tokens.
  uint32_t max_model_len = 0;
  size_t threads = 64;  // concurrent requests (each streaming one holds one)
};

// What it has done, over all ranks.
struct sim_engine_counters {
  uint64_t requests = 0;    // completions admitted to an engine
  uint64_t refused = 0;     // completions answered 4xx
  uint64_t finished = 0;    // completions that generated all their tokens
  uint64_t abandoned = 0;   // streams whose client went away
  uint64_t tokenized = 0;   // /tokenize answers
  uint64_t kv_batches = 0;  // KV event messages published
  uint64_t steps = 0;       // engine steps
};

class sim_engine_server {
 public:
  // Binds the HTTP port and the KV event sockets, then serves. Errors: a
  // bad engine configuration, a port that cannot be bound.
  static expected<std::unique_ptr<sim_engine_server>> start(
      const sim_engine_server_options& opt);
  ~sim_engine_server();
  sim_engine_server(const sim_engine_server&) = delete;
  sim_engine_server& operator=(const sim_engine_server&) = delete;
  int port() const;
  sim_engine_counters counters() const;

  struct impl;

 private:
  explicit sim_engine_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvmesh
