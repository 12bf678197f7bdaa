// The OpenAI-compatible HTTP front of one real engine's WORKER: it forwards
// /v1/completions and /v1/chat/completions (streaming or not) to the engine
// and tells the WORKER of each request's arrival, first token and end.
// Asynchronous (Boost.Beast on Asio, C++20 inside, C++17 here): a few
// threads serve any number of connections and streams.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "actors/engine_worker.hpp"
#include "core/error.hpp"

namespace kvmesh {

struct openai_front_options {
  std::string host = "0.0.0.0";  // where to listen
  int port = 0;                  // 0: a free port (see port())
  // The engine's OpenAI API: http://HOST:PORT.
  std::string engine_url;
  // >= 0: sent as X-data-parallel-rank, which vLLM and SGLang honour, so
  // that a request lands on this worker's rank of a data-parallel engine.
  int dp_rank = -1;
  uint32_t block_tokens = 16;
  engine_worker_actor worker;
  // More JSON members for GET /kvmesh/stats (the subscriber's counters).
  std::function<std::string()> extra_stats;
  std::chrono::seconds upstream_timeout{600};
  // I/O threads; they serve any number of requests at once (a stream
  // holds a connection, no thread).
  size_t threads = 2;
};

// Request header naming the route request's id (the decision's "request"),
// so the front's request is the one the WORKER was awarded; without it the
// request counts as one that bypassed the routers.
inline constexpr const char* request_id_header = "X-Kvmesh-Request-Id";

class openai_front {
 public:
  // Binds its port (port() is known from then on: a worker can name it as
  // its endpoint before it exists). Errors: the port cannot be bound, a
  // bad engine URL.
  static expected<std::unique_ptr<openai_front>> bind(
      caf::actor_system& sys, const openai_front_options& opt);
  // Serves requests for `worker` (which replaces opt.worker) from now on.
  void serve(engine_worker_actor worker);
  // bind() and serve(opt.worker).
  static expected<std::unique_ptr<openai_front>> start(
      caf::actor_system& sys, const openai_front_options& opt);
  // Stops serving; requests in flight end (their engine connections close
  // and their WORKER is told).
  ~openai_front();
  openai_front(const openai_front&) = delete;
  openai_front& operator=(const openai_front&) = delete;
  int port() const;

  struct impl;

 private:
  explicit openai_front(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

// Whether `url` is http://HOST[:PORT] with nothing after it (no https: the
// engine is beside the agent).
status check_engine_url(const std::string& url);

}  // namespace kvmesh
