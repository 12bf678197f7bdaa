// Every actor interface of kvmesh (CAF 0.17 typed actors), their atoms and
// the messages they exchange.
#pragma once

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/pricing.hpp"
#include "core/tiered_cache.hpp"
#include "messages/types.hpp"

// kvmesh::ec travels as a CAF error of category "kvmesh".
CAF_ERROR_CODE_ENUM(kvmesh::ec, "kvmesh")

namespace kvmesh {

// -- atoms (10 characters at most; the text is the identity on the wire) ---

using bid_atom = caf::atom_constant<caf::atom("bid")>;
using award_atom = caf::atom_constant<caf::atom("award")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using withdraw_atom = caf::atom_constant<caf::atom("withdraw")>;
using route_atom = caf::atom_constant<caf::atom("route")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using weights_atom = caf::atom_constant<caf::atom("weights")>;
using get_atom = caf::atom_constant<caf::atom("get")>;
using put_atom = caf::atom_constant<caf::atom("put")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using first_atom = caf::atom_constant<caf::atom("first")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using arrive_atom = caf::atom_constant<caf::atom("arrive")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using workers_atom = caf::atom_constant<caf::atom("workers")>;
using routers_atom = caf::atom_constant<caf::atom("routers")>;
using kv_atom = caf::atom_constant<caf::atom("kv")>;
using query_atom = caf::atom_constant<caf::atom("query")>;
using drop_atom = caf::atom_constant<caf::atom("drop")>;
using shards_atom = caf::atom_constant<caf::atom("shards")>;
using persist_atom = caf::atom_constant<caf::atom("persist")>;
using answered_atom = caf::atom_constant<caf::atom("answered")>;
// Expires waits past their deadline (an actor sends it to itself).
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;
using progress_atom = caf::atom_constant<caf::atom("progress")>;

// -- inspection of the messages (the structs are in messages/types.hpp) ----

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, holder_match& x) {
  return f(caf::meta::type_name("holder_match"), x.worker, x.gpu, x.host,
           x.disk);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_status& x) {
  return f(caf::meta::type_name("shard_status"), x.shard, x.blocks, x.entries,
           x.disk_bytes, x.events, x.errors, x.shards, x.refused_events,
           x.incarnation);
}

// KV events travel with their enums as bytes.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cache_event& x) {
  auto kind = static_cast<uint8_t>(x.kind);
  auto where = static_cast<uint8_t>(x.where);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (kind > cache_event::removed || where > static_cast<uint8_t>(tier::disk))
      return caf::make_error(ec::parse_error, "bad KV event kind or tier");
    x.kind = static_cast<cache_event::kind_t>(kind);
    x.where = static_cast<tier>(where);
    return caf::none;
  });
  return f(caf::meta::type_name("cache_event"), kind, where, x.hash, x.root,
           load);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, router_status& x) {
  return f(caf::meta::type_name("router_status"), x.name, x.decisions,
           x.reauctions, x.held, x.overloaded, x.live_workers, x.workers,
           x.auction_p50_us, x.auction_p99_us, x.nats_in, x.nats_out,
           x.text_requests, x.block_mismatches, x.reauctions_refused,
           x.reauctions_unanswered, x.reauctions_no_bids,
           x.reauctions_saturated, x.reauctions_no_live_worker, x.rounds,
           x.bids, x.runner_up_awards);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, route_request_msg& x) {
  return f(caf::meta::type_name("route_request"), x.id, x.blocks,
           x.input_tokens, x.output_tokens, x.block_tokens, x.redelivered,
           x.stream_sequence, x.model, x.client_id, x.exclude);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, call_for_bids& x) {
  return f(caf::meta::type_name("call_for_bids"), x.request, x.bidders_speed,
           x.workers, x.auction);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, award_msg& x) {
  return f(caf::meta::type_name("award"), x.request, x.expected_queued,
           x.worker, x.price);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, release_msg& x) {
  return f(caf::meta::type_name("release"), x.request, x.workers);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, withdraw_msg& x) {
  return f(caf::meta::type_name("withdraw"), x.request, x.worker);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, withdraw_reply& x) {
  return f(caf::meta::type_name("withdraw_reply"), x.withdrawn, x.endpoint,
           x.count);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, bid_list& x) {
  return f(caf::meta::type_name("bid_list"), x.bids, x.error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, award_reply& x) {
  return f(caf::meta::type_name("award_reply"), x.accepted, x.reason,
           x.endpoint, x.count);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, bid& x) {
  return f(caf::meta::type_name("bid"), x.worker, x.gpu, x.host, x.disk,
           x.queued, x.reserved, x.active, x.active_overlap, x.capacity,
           x.speed, x.c_host, x.c_disk, x.accepted, x.holds, x.contested,
           x.wait, x.step_overhead);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, price_breakdown& x) {
  return f(caf::meta::type_name("price_breakdown"), x.worker, x.read,
           x.credit_gpu, x.credit_host, x.credit_disk, x.space, x.speed,
           x.overflow, x.price, x.delta, x.wait);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, decision& x) {
  return f(caf::meta::type_name("decision"), x.request, x.worker, x.auctions,
           x.prices, x.error, x.endpoint, x.failure, x.client_id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, price_config& x) {
  return f(caf::meta::type_name("price_config"), x.c_host, x.c_disk, x.beta,
           x.k, x.overflow, x.overload_ceiling);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, served_model& x) {
  return f(caf::meta::type_name("served_model"), x.name, x.parent);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_status& x) {
  return f(caf::meta::type_name("worker_status"), x.worker, x.queued,
           x.reserved, x.waiting, x.running, x.gpu_blocks, x.host_blocks,
           x.disk_blocks, x.active, x.completed, x.draining, x.capacity,
           x.speed, x.agent, x.gone, x.unhealthy, x.endpoint, x.awards,
           x.last_price, x.host_capacity, x.disk_capacity, x.models, x.engine,
           x.engine_rank);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_progress& x) {
  return f(caf::meta::type_name("request_progress"), x.event, x.request,
           x.worker, x.reporter, x.in_flight);
}

// -- interfaces ---------------------------------------------------------------

// INDEX SHARD: block hash -> holders by tier for the chains whose first
// block maps here, in memory and in RocksDB.
using index_shard_actor = caf::typed_actor<
    // Applies one worker's batch of KV events (counted; persisted with the
    // others of its period).
    caf::reacts_to<kv_atom, uint32_t, std::vector<cache_event>>,
    // Each holder's match of a prefix, deepest first.
    caf::replies_to<query_atom,
                    std::vector<uint64_t>>::with<std::vector<holder_match>>,
    // Forgets every block of a worker that left.
    caf::reacts_to<drop_atom, uint32_t>,
    // Reports blocks, holders and disk use.
    caf::replies_to<status_atom>::with<shard_status>,
    // Writes the period's changes to RocksDB (sent to itself).
    caf::reacts_to<persist_atom>>;

// BIDDER: what a ROUTER asks in an auction, of one WORKER or of a node
// agent's stand-in for several: one call per bidder and auction, so an
// auction over 16 workers on 2 agents costs 2 calls, not 16. The messages
// are the wire's envelopes.
using bidder_actor = caf::typed_actor<
    // Bids of cfb.workers for a request, each from exact state, each
    // holding a soft reservation. Workers that cannot bid are left out.
    caf::replies_to<bid_atom, call_for_bids>::with<bid_list>,
    // Worker a.worker takes the request, or refuses it when its bid no
    // longer holds. a.expected_queued is the queue the router priced it
    // with (its own unconfirmed awards included; -1: unknown): growth the
    // router knew of is no reason to refuse.
    caf::replies_to<award_atom, award_msg>::with<award_reply>,
    // The request went elsewhere: these workers drop their reservations.
    caf::reacts_to<release_atom, release_msg>,
    // Worker w.worker's award of w.request went unanswered: it withdraws
    // it (never took it, or took it back before its engine started it,
    // and refuses it from now on) or answers that it runs it.
    caf::replies_to<withdraw_atom, withdraw_msg>::with<withdraw_reply>>;

// The bids of one call for bids that a node agent makes of its own workers:
// the call goes to each asked worker with this, each puts its answer in its
// slot (its place in the call's worker list) and the last one to answer
// tells `to` (bid_atom, tag). One message back per call instead of one per
// worker: sixteen replies per auction were a fifth of an agent's
// allocations. Workers may answer from several threads; the slots are
// written once each, and read only once published (or never).
class bid_gather {
 public:
  bid_gather(size_t workers, caf::actor_addr to, uint64_t tag)
      : slots_(new slot[workers]),
        n_(workers),
        left_(workers),
        to_(std::move(to)),
        tag_(tag) {}
  bid_gather(const bid_gather&) = delete;
  bid_gather& operator=(const bid_gather&) = delete;

  // The answer of the worker at `index` of the call's list: its bid, or
  // none (null). Each asked worker answers once; an index out of range
  // (a worker the call did not list) still counts as its answer.
  void put(size_t index, const bid* b) {
    if (index < n_ && b) {
      slots_[index].b = *b;
      slots_[index].set.store(true, std::memory_order_release);
    }
    if (left_.fetch_sub(1, std::memory_order_acq_rel) == 1)
      if (auto to = caf::actor_cast<caf::actor>(to_))
        caf::anon_send(to, bid_atom::value, tag_);
  }
  // Appends the bids put so far, in the call's order: every bid once
  // `to` was told, those of the workers that answered before that.
  void collect(std::vector<bid>& out) const {
    for (size_t i = 0; i < n_; ++i)
      if (slots_[i].set.load(std::memory_order_acquire))
        out.push_back(slots_[i].b);
  }

 private:
  struct slot {
    bid b;
    std::atomic<bool> set{false};
  };
  std::unique_ptr<slot[]> slots_;
  size_t n_;
  std::atomic<size_t> left_;
  caf::actor_addr to_;  // weak: the gather may outlive whom it tells
  uint64_t tag_;
};
using bid_gather_ptr = std::shared_ptr<bid_gather>;

// The place of `worker` in a call's list (0 for an empty list, which means
// the worker called); the list's size when it is not there.
inline size_t place_in_call(const call_for_bids& cfb, uint32_t worker) {
  if (cfb.workers.empty()) return 0;
  return static_cast<size_t>(
      std::find(cfb.workers.begin(), cfb.workers.end(), worker) -
      cfb.workers.begin());
}
// Whether the call asks `worker`: it lists it, or lists nobody (the worker
// called).
inline bool asked_in_call(const call_for_bids& cfb, uint32_t worker) {
  return place_in_call(cfb, worker) < std::max<size_t>(cfb.workers.size(), 1);
}

// WORKER: one GPU (or data-parallel rank), its queue and cache tiers; a
// bidder for itself alone.
using worker_actor = bidder_actor::extend<
    // The bid of a call as (bid_atom, call_for_bids) gives it, put in the
    // gather instead of a response: a node agent asks its workers for every
    // auction, and CAF 0.17 keeps response handlers in a flat vector it
    // searches and shifts on each response (a sixth of the agent's CPU at
    // 2,000 open bids).
    caf::reacts_to<bid_atom, call_for_bids, bid_gather_ptr>,
    // Reports queue, tiers and load.
    caf::replies_to<status_atom>::with<worker_status>,
    // Starts (true) or ends (false) draining: awards are refused meanwhile.
    caf::reacts_to<put_atom, drain_atom, bool>,
    // Sends KV events to these index shards from now on (shards came or
    // went; each batch goes to shard_of its chains' first block).
    caf::reacts_to<put_atom, shards_atom, std::vector<index_shard_actor>>,
    // Ends the engine step in progress (sent to itself on the actor clock).
    caf::reacts_to<step_atom>>;

// ROUTER: runs one auction per request over its workers.
using router_actor = caf::typed_actor<
    // Routes a request: the winner and every bidder's price breakdown.
    caf::replies_to<route_atom, route_request_msg>::with<decision>,
    // Reads the price weights.
    caf::replies_to<get_atom, weights_atom>::with<price_config>,
    // Replaces the price weights; the next auction uses them.
    caf::reacts_to<put_atom, weights_atom, price_config>,
    // Reports auctions, the overload queue and membership.
    caf::replies_to<status_atom>::with<router_status>,
    // A heartbeat of worker `status.worker`, which joins (or comes back)
    // with the bidder its auctions go through: its node agent's stand-in
    // over NATS. A worker heard this way is not pinged: silence alone
    // counts it out.
    caf::reacts_to<put_atom, workers_atom, worker_status, bidder_actor>,
    // Worker `id` is gone for good (forgotten): its entry is freed.
    caf::reacts_to<drop_atom, workers_atom, uint32_t>,
    // Agent `agent`, whose workers bid through `bidder`, answered a call
    // over the network (a probe): its workers have earned places in calls
    // for bids, as if it had answered one.
    caf::reacts_to<put_atom, answered_atom, bidder_actor, std::string>,
    // Asks these index shards who holds a prefix from now on.
    caf::reacts_to<put_atom, shards_atom, std::vector<index_shard_actor>>,
    // Checks workers' liveness and retries held requests (sent to itself).
    caf::reacts_to<tick_atom>,
    // Ends the waits of auctions past their deadlines (sent to itself).
    caf::reacts_to<sweep_atom>>;

// LISTENER: follows requests as an engine's client sees them.
using listener_actor = caf::typed_actor<
    // A request's first token, with the blocks it reused per tier.
    caf::reacts_to<first_atom, uint64_t, uint32_t, uint32_t, uint32_t>,
    // A request's last token.
    caf::reacts_to<done_atom, uint64_t>>;

// The shard that indexes chains starting with block `root`.
inline size_t shard_of(uint64_t root, size_t shards) {
  return shards == 0
             ? 0
             : static_cast<size_t>((root * 0x9E3779B97F4A7C15ull) >> 32) %
                   shards;
}

// ADMIN: what operators see and steer.
using admin_actor = caf::typed_actor<
    // Every worker's status, in worker order.
    caf::replies_to<get_atom, workers_atom>::with<std::vector<worker_status>>,
    // Every router's status.
    caf::replies_to<get_atom, routers_atom>::with<std::vector<router_status>>,
    // The price weights (as the first router has them).
    caf::replies_to<get_atom, weights_atom>::with<price_config>,
    // Sets the price weights on every router; replies how many took them.
    caf::replies_to<put_atom, weights_atom, price_config>::with<uint32_t>,
    // Drains (true) or undrains (false) worker N.
    caf::replies_to<put_atom, drain_atom, uint32_t, bool>::with<bool>,
    // Every index shard's status.
    caf::replies_to<get_atom, shards_atom>::with<std::vector<shard_status>>,
    // Who holds how much of a prefix (from the shard of its first block).
    caf::replies_to<query_atom,
                    std::vector<uint64_t>>::with<std::vector<holder_match>>>;

// Registers the error category and message types with a configuration.
void register_types(caf::actor_system_config& cfg);

// Schedules actors for latency rather than throughput, for processes on the
// request path: CAF's default work stealing lets an idle thread sleep up to
// 10 ms before it steals a message another thread queued, and every hop of
// an auction would pay that. With a shared queue an idle thread is woken at
// once. `threads` runs the actors (0: one per core).
void tune_for_latency(caf::actor_system_config& cfg, uint32_t threads = 0);

}  // namespace kvmesh

// A gather travels by pointer between the actors of one process only.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvmesh::bid_gather_ptr)
