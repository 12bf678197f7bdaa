// The ROUTER actor: one auction per request over its workers.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "actors/actors.hpp"
#include "core/auction.hpp"

namespace kvmesh {

struct router_options {
  std::vector<worker_actor> workers;
  std::vector<double> speeds;  // per worker; empty: all 1
  price_config price;
  caf::timespan bid_deadline = std::chrono::milliseconds(50);
  caf::timespan award_deadline = std::chrono::milliseconds(50);
  uint32_t max_auctions = 8;    // auctions per request, refusals included
  uint32_t block_tokens = 512;  // for the output-length estimate
  uint64_t seed = 1;
};

// One request's auction, from call for bids to a confirmed award.
struct auction {
  route_request_msg request;
  caf::typed_response_promise<decision> promise;
  uint32_t round = 0;            // auctions run so far
  size_t outstanding = 0;        // bids still expected
  std::vector<bid> bids;         // answered bids, in arrival order
  std::vector<uint32_t> ranked;  // bidder indices, cheapest first
  std::vector<price_breakdown> prices;
  size_t next = 0;     // next entry of ranked to award
  double pending = 0;  // read work added to the awardee's queue
};

struct router_state {
  static inline const char* name = "router";
  router_options opt;
  std::unique_ptr<auctioneer> auction;  // pricing and pending awards
  double bidders_speed = 0;
  uint64_t decisions = 0;
  uint64_t reauctions = 0;
};

router_actor::behavior_type router(
    router_actor::stateful_pointer<router_state> self, router_options opt);

}  // namespace kvmesh
