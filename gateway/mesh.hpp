// What the gateway needs of the mesh: the live model pools and an
// asynchronous route (an auction among the GPUs serving a model). Plain
// types only, no NATS, CAF or Cap'n Proto: the mesh implements it over
// NATS, a test with a fake.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace boost::asio {
class io_context;
}

namespace kvmesh::gateway {

// A pool of workers serving one model, or a LoRA adapter on a base model.
struct pool_model {
  std::string name;                    // what clients put in "model"
  std::vector<std::string> endpoints;  // http://HOST:PORT of its workers
  bool lora = false;                   // an adapter of `parent`
  std::string parent;                  // the base model (lora only)
  uint64_t created = 0;                // Unix seconds, for /v1/models
};

// One route request: the prompt's chained block hashes (the `seq` hashes of
// hash_blocks, salted with the adapter's name for a LoRA model) and sizes.
struct route_ask {
  std::string model;      // the base model (the pool to auction among)
  std::string lora;       // the adapter asked for, or empty
  std::string client_id;  // the client's X-Request-Id (or one made up)
  std::vector<uint64_t> blocks;
  uint32_t input_tokens = 0;
  uint32_t output_tokens = 0;  // 0: unknown (the router estimates)
  uint32_t block_tokens = 0;   // what `blocks` were hashed with
  // Workers that failed this request before answering a byte: not again.
  std::vector<uint32_t> exclude_workers;
};

// The live pools at one moment; shared, since every request reads them.
using pool_list = std::shared_ptr<const std::vector<pool_model>>;

// The auction's winner: where to send the request, under which id.
struct route_answer {
  uint32_t worker = 0;
  uint64_t request = 0;  // sent as X-Kvmesh-Request-Id
  std::string endpoint;  // its front: http://HOST:PORT[/prefix]
  // Its engine, when the gateway may call it itself (and then reports the
  // request's progress to the worker: gateway_mesh::visit); "": through
  // the front. engine_rank >= 0: sent as X-data-parallel-rank.
  std::string engine;
  int32_t engine_rank = -1;
  std::string agent;  // the worker's node agent
};

// A request the gateway sends to its worker's engine itself: made when it
// goes, first() at its first token, destroyed at its end, each told to the
// worker (what its front would have seen).
class engine_visit {
 public:
  virtual ~engine_visit() = default;
  virtual void first() = 0;
};

// Errors of route(), as the gateway answers them:
//   ec::not_found          unknown model        -> 404
//   ec::capacity_exceeded  overloaded           -> 429 with Retry-After
//   ec::timeout            no decision in time  -> 504
//   anything else          no live worker, ...  -> 503 with Retry-After
class gateway_mesh {
 public:
  virtual ~gateway_mesh() = default;
  // The live pools, for /v1/models and for whom to ask for tokens.
  // Called on the gateway's threads, concurrently.
  virtual pool_list models() const = 0;
  // Routes `ask`. Call `done` once, on any thread, possibly before route
  // returns. The mesh's own deadline bounds it (the gateway sets none: an
  // uncalled `done` holds its request until the server stops). A call
  // after the server was destroyed is safe and ignored.
  virtual void route(route_ask ask,
                     std::function<void(expected<route_answer>)> done) = 0;
  // Whether the mesh can route now (GET /health).
  virtual bool ready() const = 0;
  // The report of `won`'s request going to its engine (won.engine), from
  // this thread; null when this thread cannot report (then the request
  // goes through the worker's front).
  virtual std::unique_ptr<engine_visit> visit(const route_answer& won) {
    (void)won;
    return nullptr;
  }
  // Called by the server on each of its threads, before that thread runs
  // `io` (the thread's own): a mesh may open a connection there, so that a
  // route() called on that thread is answered on it with no other thread
  // in between. The server keeps the result until the thread has stopped
  // and destroys it before `io`. Null: nothing to keep.
  virtual std::shared_ptr<void> bind_thread(boost::asio::io_context& io) {
    (void)io;
    return nullptr;
  }
};

}  // namespace kvmesh::gateway
