// One real engine (a GPU, or a data-parallel rank) as its WORKER knows it:
// the cache its KV events describe, the requests its front has seen, the
// read work they add, and whether the engine still answers.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "core/pricing.hpp"
#include "core/worker.hpp"
#include "engines/kv_mirror.hpp"
#include "messages/types.hpp"

namespace kvmesh {

struct engine_state_config {
  worker_config ledger;        // id, speed, credits, reservations
  uint32_t block_tokens = 16;  // the engine's block size
  // GPU blocks for bids and status; 0: learn it from the engine's metrics
  // (until then 0, which prices every bid as beyond capacity).
  uint64_t gpu_blocks = 0;
  // The front's URL, named in accepted awards and the status.
  std::string endpoint;
  // The engine's URL for gateways that call it themselves and its rank
  // (worker_status::engine, engine_rank); "": gateways use the front.
  std::string engine;
  int32_t engine_rank = -1;
  // An awarded request whose client has not called the front within this
  // long is taken to be abandoned: its queued work goes.
  double award_ttl_ms = 60000;
  // How long a request's prompt counts as held on the GPU from its first
  // token without the engine's KV events saying so. The events come on
  // their own path and may come after the next request's bids (a second
  // turn sent the moment the first is answered); an engine that caches
  // prefixes holds the prompt it has just computed.
  double fresh_prefill_ms = 2000;
};

// A request as the front saw it arrive.
struct front_request {
  uint64_t id = 0;
  // The prompt's chained block hashes: from token ids when the client sent
  // them, else from text chunks (approximate).
  std::vector<uint64_t> blocks;
  uint32_t prompt_tokens = 0;  // exact with token ids, else estimated
  uint32_t output_tokens = 0;  // max_tokens when the client set one
  bool approximate = false;    // blocks and size come from text
};

// What the engine's own endpoints say (GET /health, GET /metrics).
struct engine_metrics {
  bool answering = true;     // /health answered 200
  bool has_metrics = false;  // /metrics answered with known gauges
  double waiting = 0;        // requests the engine queues
  double running = 0;        // requests it runs
  double kv_usage = 0;       // fraction of its GPU KV blocks in use
  uint64_t gpu_blocks = 0;   // its GPU block count, when it reports one
  // What its /v1/models lists: the served model and its loaded LoRA
  // adapters (worker_status::models); empty when it did not answer.
  std::vector<served_model> models;
};

class engine_state {
 public:
  static expected<engine_state> make(const engine_state_config& cfg);

  // -- the auction ----------------------------------------------------------
  // The bid for a request with chain `chain` (n blocks), from the mirror,
  // the ledger and the requests in flight.
  bid make_bid(const uint64_t* chain, uint32_t n) const;
  // Holds the request's expected share for the bid's reservation period.
  void reserve(uint64_t request, double share, uint32_t n, double now_ms);
  void release(uint64_t request) { ledger_.release(request); }
  // Takes an awarded request (its read work is queued from now on) or
  // refuses it: draining, the engine not answering, the bid no longer
  // holding (see worker_ledger::should_refuse). When taken, `held` (if
  // given) gets the bid it was priced with: the prefix held per tier.
  award_reply award(const route_request_msg& r, double expected_queued,
                    double now_ms, bid* held = nullptr);
  // The router gave up on its award of `request` (docs/reliability.md,
  // "Late awards"). An award whose client has not reached the front (it
  // cannot have: the router names this front only once it decides for
  // it) is dropped, and an award of it arriving later is refused. One in
  // the engine stays: not withdrawn.
  withdraw_reply withdraw(uint64_t request);

  // -- the front ------------------------------------------------------------
  // A request reached the front: an awarded one is now in the engine; one
  // that bypassed the routers is taken as if awarded here. Either holds
  // its blocks (prompt and expected output) until it ends.
  void arrive(const front_request& r, double now_ms);
  // An awarded request reached the engine through a gateway of `reporter`
  // (request_progress): its blocks and sizes are the award's. False when
  // it is not awaiting arrival here (unknown, withdrawn, arrived).
  bool arrive_awarded(uint64_t request, uint64_t reporter, double now_ms);
  // The requests in the engine that arrived through `reporter`.
  std::vector<uint64_t> of_reporter(uint64_t reporter) const;
  // A lease of `reporter` listing all its requests here (request_progress):
  // those listed and awarded have arrived (their report was lost); the
  // reporter's requests in the engine that it does not list have ended,
  // and are returned for the caller to finish.
  std::vector<uint64_t> lease(uint64_t reporter,
                              const std::vector<uint64_t>& in_flight,
                              double now_ms);
  // Its first token: no read work left, and its prompt's blocks count as
  // on the GPU for fresh_prefill_ms. `hits` gets the blocks it found cached
  // at arrival, per tier. False for an unknown request.
  bool first_token(uint64_t request, double now_ms, tier_match* hits = nullptr);
  // Its end (last token, error or the client gone). False if unknown.
  bool finish(uint64_t request);
  // When a request that reached the front arrived there (ms, the clock
  // arrive() was given); nothing for one unknown or not arrived yet.
  std::optional<double> arrived_ms(uint64_t request) const;
  // Drops awarded requests that never reached the front within the TTL,
  // expired reservations and prompts no longer fresh; returns how many
  // requests went.
  size_t expire(double now_ms);

  // -- the engine -----------------------------------------------------------
  kv_mirror& mirror() { return mirror_; }
  const kv_mirror& mirror() const { return mirror_; }
  void set_metrics(const engine_metrics& m);
  const engine_metrics& metrics() const { return metrics_; }
  bool healthy() const { return metrics_.answering; }
  void set_draining(bool on) { draining_ = on; }

  // Status for heartbeats and the admin: tiers as the engine reported
  // them, queue and occupancy as the front saw them.
  worker_status status() const;
  const worker_ledger& ledger() const { return ledger_; }
  uint64_t capacity() const;
  uint64_t occupancy() const { return occupancy_; }
  uint64_t abandoned() const { return abandoned_; }
  uint64_t bypassed() const { return bypassed_; }
  uint64_t approximate() const { return approximate_; }

 private:
  enum class phase : uint8_t { awarded, waiting, running };
  struct request {
    phase at = phase::awarded;
    double since_ms = 0;
    uint32_t n = 0;  // prompt blocks (the chain's length)
    uint32_t prompt_tokens = 0;
    uint32_t output_tokens = 0;
    uint64_t holds = 0;     // blocks held while in the engine
    tier_match hits;        // cached at arrival (at the award, for a gateway's)
    uint64_t reporter = 0;  // the gateway's that reported it; 0: the front
    std::vector<uint64_t> chain;  // its prompt's blocks (exact ones only)
  };
  // A prompt computed lately: its blocks, from its first token.
  struct fresh_prompt {
    double at_ms = 0;
    std::vector<uint64_t> chain;
  };

  engine_state(const engine_state_config& cfg, kv_mirror mirror,
               worker_ledger ledger);
  // A request enters the engine: it holds its blocks until it ends.
  void enter(request& q, double now_ms);
  // Forgets the oldest fresh prompt.
  void drop_fresh();
  uint64_t blocks_for(uint64_t tokens) const {
    return (tokens + cfg_.block_tokens - 1) / cfg_.block_tokens;
  }

  engine_state_config cfg_;
  kv_mirror mirror_;
  worker_ledger ledger_;
  std::unordered_map<uint64_t, request> requests_;
  // Withdrawn requests, the latest few thousand (a ring): their awards
  // are refused.
  static constexpr size_t withdrawn_window = 4096;
  std::vector<uint64_t> withdrawn_;
  size_t withdrawn_next_ = 0;
  // Prompts computed within fresh_prefill_ms, oldest first (at most
  // max_fresh), and how many of them hold each block.
  static constexpr size_t max_fresh = 4096;
  std::deque<fresh_prompt> fresh_;
  std::unordered_map<uint64_t, uint32_t> fresh_blocks_;
  engine_metrics metrics_;
  bool draining_ = false;
  uint64_t occupancy_ = 0;  // blocks held by requests in the engine
  uint64_t completed_ = 0;
  uint64_t abandoned_ = 0;
  uint64_t bypassed_ = 0;     // requests that reached the front unrouted
  uint64_t approximate_ = 0;  // requests sized from text
};

}  // namespace kvmesh
