// The plain messages kvmesh components exchange, free of CAF so that the
// actors, the wire codecs and the NATS bridge share one definition.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/pricing.hpp"
#include "core/tiered_cache.hpp"

namespace kvmesh {

// A request to route: its prompt's chained block hashes, its size in tokens
// and, when the client knows it, its expected output.
struct route_request_msg {
  uint64_t id = 0;
  std::vector<uint64_t> blocks;
  uint32_t input_tokens = 0;
  uint32_t output_tokens = 0;  // 0: unknown (the router estimates)
  uint32_t block_tokens = 0;   // what the client hashed with; 0: not said
  // A durable request handed out again (set by the router only): workers
  // that took it already say so (bid.holds) and take it again as a no-op.
  bool redelivered = false;
  // Its sequence in the durable queue's stream (set by the router; 0: not
  // durable). With the id it names one handout: a worker that took it says
  // so whatever the delivery count (see may_be_taken).
  uint64_t stream_sequence = 0;
  // The model (or LoRA adapter) it is for: only workers that serve it bid.
  // "": any worker (clients that predate model pools, simulated fleets).
  std::string model;
  // The client's own id for it (an OpenAI client's X-Request-Id), carried
  // into logs and the decision; "": none given.
  std::string client_id;
  // Workers not to award it to (one whose engine just failed it), at most
  // max_excluded_workers.
  std::vector<uint32_t> exclude;
};

// How a log line names a route request: "request 42", and the client's id
// when it gave one: request 42 (client id "abc-123").
std::string request_name(uint64_t id, const std::string& client_id);
inline std::string request_name(const route_request_msg& r) {
  return request_name(r.id, r.client_id);
}

// Whether a worker may have taken `r` already. Any durable request may:
// the queue hands a request out again after a lost ack, and a JetStream
// cluster that lost a node was seen to hand out decided requests again
// with a delivery count of 1.
inline bool may_be_taken(const route_request_msg& r) {
  return r.redelivered || r.stream_sequence != 0;
}

// A router's call for bids. `share` is the part of the request each bidder
// holds per unit of its speed (see expected_share in core/worker.hpp).
struct call_for_bids {
  route_request_msg request;
  double bidders_speed = 1;
  // Over NATS, one call goes to a node agent for several of its workers:
  // these (empty in process, where each worker is called on its own).
  std::vector<uint32_t> workers;
  // The auction that calls, unique across routers (0: unnamed): a worker
  // holding an open bid of another auction for the same request that may
  // be taken says so (bid::contested).
  uint64_t auction = 0;
};

// A worker's refusal of an award when its engine stopped answering; the
// router leaves the worker out until a heartbeat says it is healthy.
inline constexpr const char* unhealthy_reason = "engine not answering";

// A worker's answer to an award.
struct award_reply {
  award_reply() = default;
  award_reply(bool accepted, std::string reason, std::string endpoint = {},
              uint64_t count = unknown_accepted)
      : accepted(accepted),
        reason(std::move(reason)),
        endpoint(std::move(endpoint)),
        count(count) {}

  bool accepted = false;
  std::string reason;    // why it refused
  std::string endpoint;  // accepted: where the request goes (may be "")
  // Accepted: the worker's count of accepted requests, this one included
  // (bid::accepted's clock), or unknown_accepted.
  uint64_t count = unknown_accepted;
};

// Why a route request got no worker: the decision says it (clients map it
// to their own status, a gateway to HTTP's), and it is the reason label of
// kvmesh_router_failures_total.
enum class route_failure : uint8_t {
  overloaded,     // the overload queue was full
  refused,        // every award was refused, in every auction
  no_workers,     // no live worker, or none answered the call for bids
  unknown_model,  // no worker serves the request's model
  other,          // malformed, another block size, no prompt, ...
};
inline constexpr size_t route_failure_count = 5;

const char* to_string(route_failure f);

// The router's answer to a route request: the winner and why.
struct decision {
  uint64_t request = 0;
  uint32_t worker = 0;
  uint32_t auctions = 0;  // 1 unless awards were refused or unanswered
  std::vector<price_breakdown> prices;
  // Set when there is no decision (over NATS, where a reply must say why).
  std::string error;
  // The winner's OpenAI-compatible front, http://host:port; "" for a
  // worker without one (a simulated GPU).
  std::string endpoint;
  // With `error`: its class.
  route_failure failure = route_failure::other;
  // The request's client_id, echoed.
  std::string client_id;
};

// A model a worker serves: a base model (parent "") or a LoRA adapter on
// its parent, whose requests hash with the adapter's name as the salt.
struct served_model {
  std::string name;
  std::string parent;
  bool operator==(const served_model& o) const {
    return name == o.name && parent == o.parent;
  }
};

// What a worker reports about itself (admin, heartbeats).
struct worker_status {
  uint32_t worker = 0;
  double queued = 0;
  double reserved = 0;
  uint64_t waiting = 0;
  uint64_t running = 0;
  uint64_t gpu_blocks = 0;
  uint64_t host_blocks = 0;
  uint64_t disk_blocks = 0;
  uint64_t active = 0;
  uint64_t completed = 0;
  bool draining = false;  // refuses awards; routers leave it out
  uint64_t capacity = 0;  // GPU blocks
  double speed = 1;
  std::string agent;  // the node agent hosting it (its NATS subjects)
  bool gone = false;  // set by an observer that stopped hearing from it
  // Its engine stopped answering: awards are refused, routers leave it out.
  bool unhealthy = false;
  std::string endpoint;  // its OpenAI-compatible front, "" if none
  uint64_t awards = 0;   // awards accepted since it started
  // The router's price of its last accepted award (blocks); NaN: none yet,
  // or not said.
  double last_price = std::numeric_limits<double>::quiet_NaN();
  uint64_t host_capacity = 0;  // blocks; 0: no such tier, or unknown
  uint64_t disk_capacity = 0;
  // The models it serves: its engine's and its loaded LoRA adapters
  // (route_request_msg::model names one). Empty: it serves requests naming
  // none.
  std::vector<served_model> models;
  // Its engine's OpenAI API for a gateway to call itself (request_progress
  // tells the agent what the front would have seen); "": only through the
  // front. engine_rank >= 0: sent as X-data-parallel-rank.
  std::string engine;
  int32_t engine_rank = -1;
};

// What a router reports about itself.
struct router_status {
  std::string name;  // unique per router process
  uint64_t decisions = 0;
  uint64_t reauctions = 0;
  uint64_t held = 0;        // requests waiting in the overload queue
  uint64_t overloaded = 0;  // requests answered "overloaded"
  uint64_t live_workers = 0;
  uint64_t workers = 0;
  // From a route request's arrival to its decision, over the last
  // decisions (router_state::latency_window), in microseconds.
  double auction_p50_us = 0;
  double auction_p99_us = 0;
  // Messages through the router process's NATS connection.
  uint64_t nats_in = 0;
  uint64_t nats_out = 0;
  // Route requests taken as text, whose blocks are approximate.
  uint64_t text_requests = 0;
  uint64_t block_mismatches = 0;  // requests hashed with another block size
  // Re-auctions by cause (kvmesh.capnp's RouterStatus); they sum to
  // `reauctions`.
  uint64_t reauctions_refused = 0;
  uint64_t reauctions_unanswered = 0;
  uint64_t reauctions_no_bids = 0;
  uint64_t reauctions_saturated = 0;
  uint64_t reauctions_no_live_worker = 0;
  uint64_t rounds = 0;            // calls for bids sent
  uint64_t bids = 0;              // bids those calls got
  uint64_t runner_up_awards = 0;  // awards to a runner-up of a round
};

// One holder's match of a prefix, as an index shard knows it.
struct holder_match {
  uint32_t worker = 0;
  uint32_t gpu = 0;
  uint32_t host = 0;
  uint32_t disk = 0;
};

// What an index shard reports about itself.
struct shard_status {
  uint32_t shard = 0;
  uint64_t blocks = 0;   // distinct block hashes
  uint64_t entries = 0;  // (block, holder) pairs
  uint64_t disk_bytes = 0;
  uint64_t events = 0;  // KV events applied
  uint64_t errors = 0;  // batches refused or failed to persist
  uint32_t shards = 1;  // how many shards the index has
  // KV messages its endpoint refused (overloaded) since it started: events
  // the index misses until the workers announce their caches again.
  uint64_t refused_events = 0;
  // Random per shard process (0: unknown): a change means a restart.
  uint64_t incarnation = 0;
};

// -- envelopes --------------------------------------------------------------
// What an actor interface passes as several arguments travels between
// processes as one message, so each gets a struct of its own here.

// An award: the request and the queue the router priced it with (its own
// unconfirmed awards included; -1: unknown).
struct award_msg {
  route_request_msg request;
  double expected_queued = -1;
  uint32_t worker = 0;  // the awardee, among its agent's workers
  // Its price in the auction that chose it (blocks); NaN: not said.
  double price = std::numeric_limits<double>::quiet_NaN();
};

// One worker's batch of KV events, for the index shard of their chains.
struct kv_batch {
  uint32_t worker = 0;
  std::vector<cache_event> events;
  // The shard drops the worker's blocks before applying `events`.
  bool resync = false;
};

// "Who holds how much of this prefix": a chain of block hashes.
struct index_query {
  std::vector<uint64_t> chain;
};

// Each holder's match of a queried prefix, deepest first.
struct index_reply {
  std::vector<holder_match> holders;
  std::string error;  // why there is no answer
};

// A node agent's workers' bids for one call.
struct bid_list {
  std::vector<bid> bids;
  std::string error;  // why there is no answer
};

// The reservations of `request` on these workers of one agent are void.
struct release_msg {
  uint64_t request = 0;
  std::vector<uint32_t> workers;
};

// The router asks worker `worker` to withdraw its award of `request`: the
// award went unanswered past its deadline, and before the request may go to
// another worker this one must say whether it runs it.
struct withdraw_msg {
  uint64_t request = 0;
  uint32_t worker = 0;  // the awardee, among its agent's workers
};

// A worker's answer to a withdraw: withdrawn (it never took the award, or
// took it back before its engine started it, and refuses it from now on),
// or not (the engine started it: the request is this worker's, and the
// router decides as if the award's reply had come).
struct withdraw_reply {
  bool withdrawn = true;
  // Not withdrawn: what the award's reply would have said.
  std::string endpoint;
  uint64_t count = std::numeric_limits<uint64_t>::max();
};

// A request's first token (done false, with its hits per tier) or its end,
// as the engine's client sees them.
struct request_event {
  uint64_t request = 0;
  uint32_t worker = 0;
  bool done = false;
  uint32_t gpu = 0;
  uint32_t host = 0;
  uint32_t disk = 0;
};

struct request_events {
  std::vector<request_event> events;
};

// A gateway calling a worker's engine itself tells the worker's agent what
// its front would have seen: arrival, first token, end. A reporter (one per
// gateway thread) sends the agent a lease every progress_lease_period while
// it has requests there, listing them all: a request of the reporter that
// the lease does not list has ended (its report was lost: NATS delivers at
// most once), one listed but not yet arrived has. The agent ends every
// request of a reporter unheard for progress_lease_timeout (a gateway that
// died mid-request).
enum class progress_event : uint8_t { arrived, first, ended, lease };

struct request_progress {
  progress_event event = progress_event::arrived;
  uint64_t request = 0;  // not a lease's
  uint32_t worker = 0;   // not a lease's
  uint64_t reporter = 0;
  std::vector<uint64_t> in_flight;  // a lease's
};

inline constexpr std::chrono::milliseconds progress_lease_period{1000};
inline constexpr std::chrono::milliseconds progress_lease_timeout{5000};

// An operator's request; which fields count depends on the verb (the
// subject): `worker` and `on` for drain, `chain` for prefix, `weights` for
// weights set.
struct admin_request {
  uint32_t worker = 0;
  bool on = false;
  std::vector<uint64_t> chain;
  price_config weights;
  // workers: the asker reads pages (admin_reply::more); without, all come
  // in one message, or an error when they do not fit.
  bool paged = false;
  uint32_t from = 0;  // workers, paged: the lowest id listed
};

// The answer to an admin request: the lists or the count its verb asks
// for, or an error.
struct admin_reply {
  std::string error;
  std::vector<worker_status> workers;
  std::vector<router_status> routers;
  std::vector<shard_status> shards;
  std::vector<holder_match> holders;
  price_config weights;
  uint32_t count = 0;
  // workers: cut to fit one NATS message; the next page starts after the
  // last one listed.
  bool more = false;
};

// Messages for one receiver sent as one (see Batch in kvmesh.capnp).
struct batch_item {
  std::string subject;
  std::string reply;
  std::vector<uint8_t> payload;
};

struct batch_msg {
  std::vector<batch_item> items;
};

}  // namespace kvmesh
