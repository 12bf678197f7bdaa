// The ROUTER actor: one auction per request over its workers.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/actors.hpp"
#include "core/auction.hpp"
#include "core/block_hash.hpp"
#include "core/model_pools.hpp"
#include "messages/limits.hpp"

namespace kvmesh {

struct router_options {
  // Unique per router (heartbeats, admin); "" in process.
  std::string name;
  // Indexed by worker id; a null handle is an id nobody has (yet). Each is
  // its own bidder. More join at run time with their heartbeats, through
  // their agents' bidders: (put_atom, workers_atom, status, bidder).
  std::vector<worker_actor> workers;
  std::vector<double> speeds;  // per worker; empty: all 1
  price_config price;
  caf::timespan bid_deadline = std::chrono::milliseconds(50);
  // Past it, an unanswered award is withdrawn (asked again at twice the
  // wait each time, up to a heartbeat) before the request goes elsewhere.
  caf::timespan award_deadline = std::chrono::milliseconds(50);
  uint32_t max_auctions = 8;  // auctions per request, refusals included
  uint32_t block_tokens =
      default_block_tokens;  // for the output-length estimate
  uint64_t seed = 1;
  // Liveness: a worker that misses this many heartbeats in a row is out of
  // the auctions until it answers again.
  caf::timespan heartbeat = std::chrono::seconds(1);
  uint32_t missed_beats = 3;
  // A worker whose heartbeats come to the router (put_atom, workers_atom)
  // is not pinged: it is out once its last heartbeat is older than this.
  caf::timespan stale_after = std::chrono::milliseconds(2500);
  // Requests held while the fleet is saturated (price_config::
  // overload_ceiling); past this many, "overloaded".
  size_t max_held = 1024;
  // Auctions in flight at once; later requests wait in arrival order (up
  // to max_held of them, then "overloaded"). Without a bound, a burst
  // starts more auctions than bidders answer within their deadlines, the
  // silent ones are re-auctioned, and throughput collapses.
  size_t max_inflight = 128;
  // Above `fanout` eligible workers, a call for bids goes to the index's
  // best holders of the prefix (half of fanout) plus the least loaded by
  // heartbeat, not to every worker.
  std::vector<index_shard_actor> shards;
  size_t fanout = 64;
  caf::timespan query_deadline = std::chrono::milliseconds(20);
  // How often waits are checked against their deadlines: a deadline holds
  // to within this. The router keeps its own deadlines (holders, bids,
  // awards) instead of one CAF request timeout each, which cost two
  // wake-ups of CAF's clock thread per call (a sixth of the router's CPU
  // at 5,000 decisions/s for the bids; the awards' an eighth after that).
  caf::timespan deadline_sweep = std::chrono::milliseconds(5);
  // A bidder that leaves a call for bids unanswered sits out the auctions
  // for a while (router.cpp, quiet): for members over the network, where
  // heartbeats alone do not prove a member bids.
  bool quiet_silent_bidders = false;
};

// One request's auction, from call for bids to a confirmed award.
struct auction {
  caf::actor_clock::time_point arrived;
  route_request_msg request;
  uint64_t name = 0;  // unique across routers: call_for_bids::auction
  caf::typed_response_promise<decision> promise;
  uint32_t round = 0;                // auctions run so far
  std::vector<uint32_t> unanswered;  // bidders (indices) yet to answer
  std::vector<bid> bids;             // answered bids, in arrival order
  std::vector<uint32_t> ranked;      // bidder indices, cheapest first
  std::vector<price_breakdown> prices;
  size_t next = 0;      // next entry of ranked to award
  std::string refusal;  // the last awardee's reason, for the client
  // An award and its withdraw went unanswered until the worker was counted
  // out: it may have taken the request before it died, so a failure is
  // ec::timeout, not not_found.
  bool award_unanswered = false;
  // What the auction waits for until `deadline`; answers to an earlier
  // wait (another `wait`) arrive too late and are ignored.
  enum waiting { none, holders, bids_in, award_reply };
  waiting awaits = none;
  uint32_t wait = 0;
  caf::actor_clock::time_point deadline;
  // The worker whose answer to its award is awaited (award_reply).
  uint32_t awardee = 0;
  // The workers that may win this round (live, not draining, healthy),
  // ascending.
  std::vector<uint32_t> eligible;
  // For a request a worker may have taken already (may_be_taken): the
  // known workers that are not eligible, asked too, only for a claim; one
  // of them wins only by claiming it.
  std::vector<uint32_t> claimers;
};

struct router_state {
  static inline const char* name = "router";
  // Kept by id, and one high id makes a member for every id below it: 64
  // bytes, the fields ordered so that none pads.
  struct member {
    // What the router reads of its last heartbeat, not the whole
    // worker_status.
    struct beat {
      double queued = 0;
      double reserved = 0;
      double speed = 1;
      bool draining = false;
      bool unhealthy = false;
    } last;
    // Blocks this router awarded it since `last`: heartbeats lag, and
    // without this every pick in between would see the same loads.
    double since_beat = 0;
    caf::actor_clock::time_point beat_at{};  // its last pushed heartbeat
    uint32_t bidder = 0;                     // index into bidders
    uint32_t missed = 0;                     // pings unanswered in a row
    bool present = true;                     // false: no worker has this id
    bool live = true;    // until it misses its beats or an award
    bool heard = false;  // `last` is a heartbeat's, not the default
    // Its heartbeats come to the router (put_atom, workers_atom): it is
    // not pinged, and out once the last is older than stale_after.
    bool pushed = false;
  };
  router_options opt;
  std::unique_ptr<auctioneer> auction;  // pricing and pending awards
  std::vector<member> members;          // by worker id, up to the highest
  model_pools pools;                    // who serves which model
  std::vector<uint32_t> present;        // ids of present members, ascending
  std::vector<bidder_actor> bidders;    // shared by workers
  std::vector<uint32_t> bidder_users;   // present members per bidder
  // Per bidder: its silences in a row and until when its workers sit out.
  // And whether it ever answered one: heartbeats alone, which anyone may
  // forge, do not make a bidder worth a place in every call.
  struct quiet_spell {
    uint32_t strikes = 0;
    caf::actor_clock::time_point until{};
    bool answered = false;
  };
  std::vector<quiet_spell> bidder_quiet;
  std::vector<std::string> bidder_agent;  // its agent's name
  // The bidder of each agent whose workers' beats are pushed: one slot per
  // agent, though every agent's bidder is the same links actor.
  std::unordered_map<std::string, uint32_t> agent_bidder;
  uint32_t bidders_unused = 0;                        // slots of bidder_users 0
  std::deque<std::shared_ptr<kvmesh::auction>> held;  // the overload queue
  std::deque<std::shared_ptr<kvmesh::auction>> waiting;  // for max_inflight
  size_t inflight = 0;
  // Auctions that awaited something, with the wait (auction::wait) they
  // awaited: stale entries go at the next sweep.
  std::vector<std::pair<std::shared_ptr<kvmesh::auction>, uint32_t>> timed;
  std::vector<std::pair<std::shared_ptr<kvmesh::auction>, uint32_t>> sweeping;
  bool sweep_armed = false;
  uint64_t decisions = 0;
  uint64_t reauctions = 0;
  // Why auctions were run again (router_status's reauctions_*; they sum to
  // reauctions): the awardee refused; the last awardee left was silent; no
  // bid came; every price was past the ceiling; no live worker to ask.
  enum cause { refused, unanswered, no_bids, saturated, no_live_worker };
  static constexpr size_t cause_count = 5;
  uint64_t reauctions_by[cause_count] = {};
  uint64_t rounds = 0;  // calls for bids sent
  uint64_t bids = 0;    // bids they got in time
  uint64_t runner_up_awards = 0;
  uint64_t overloaded = 0;
  uint64_t picks = 0;  // bounded calls for bids so far: equal loads rotate
  // The next auction's name: from a random start, so that two routers'
  // names do not meet; never 0 (unnamed).
  uint64_t next_name = 0;
  // pick()'s scratch, kept between calls: it runs for every request.
  std::vector<uint8_t> pick_mark;                          // per worker
  std::vector<uint32_t> pick_rest;                         // not holders
  std::vector<std::pair<double, uint32_t>> pick_load;      // (load, rest index)
  std::vector<std::pair<double, uint32_t>> pick_unproven;  // the same
  std::vector<uint32_t> sitting_out;  // call_for_bids_'s scratch
  // The last decisions' latencies (a ring), for status percentiles.
  static constexpr size_t latency_window = 4096;
  std::vector<float> latency_us;
  size_t latency_next = 0;
};

router_actor::behavior_type router(
    router_actor::stateful_pointer<router_state> self, router_options opt);

}  // namespace kvmesh
