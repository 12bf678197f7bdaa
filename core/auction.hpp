// A router's side of kvmesh's auctions: pricing the bids, its own awards not
// yet confirmed, and the running estimate of output length. One copy, used
// by the simulator's kvmesh policy and by the ROUTER actor.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/pricing.hpp"

namespace kvmesh {

class auctioneer {
 public:
  // `workers` bounds the bidders' ids (bid::worker).
  auctioneer(size_t workers, uint32_t block_tokens, const price_config& price,
             uint64_t seed);

  const price_config& price() const { return price_; }
  void set_price(const price_config& p) { price_ = p; }

  // Prices `count` bids for request `request` of n prompt blocks into
  // prices[0..count) and returns the winner's index, or no_winner. Each
  // bidder's queue first gains the read work of this router's awards it has
  // not confirmed yet (concurrent auctions must not all pick one worker);
  // the winner's award is then recorded as pending. Allocation-free in the
  // steady state.
  size_t decide(uint64_t request, uint32_t n, bid* bids, size_t count,
                price_breakdown* prices);
  // Records that `request` is now awarded to `b` (the runner-up, after the
  // first choice stayed silent), replacing its previous pending award.
  void award(uint64_t request, const bid& b, const price_breakdown& p);
  // The awardee refused or stayed silent: the award is no longer pending.
  void settle(uint64_t request);
  // The awardee accepted; `count` is its count of accepted requests with
  // this one (award_reply::count). Bids it sent before accepting do not
  // show this work in their queue yet: decide() adds it to those (bids
  // whose bid::accepted is below `count`), so that auctions whose bids
  // crossed the acceptance do not price the worker as lighter than it is.
  void confirmed(uint64_t request, uint64_t count);
  // A request ended after `output_tokens` tokens.
  void finished(uint32_t output_tokens);

  uint32_t expected_output_blocks() const;
  // Worker `worker` joined: its id may bid from now on.
  void join(uint32_t worker);
  // Worker `worker` left: its ring goes to the next worker that wins.
  void leave(uint32_t worker);
  // Rings of recent awards made so far: one per worker that won (and is
  // still here, or whose ring a later winner took).
  size_t rings() const { return recent_.size() / recent_per_worker; }
  double pending(uint32_t worker) const { return pending_[worker]; }
  // The queue the awardee of `request` was priced with (its bid's queue
  // plus this router's unconfirmed awards there), or -1.
  double expected_queued(uint64_t request) const {
    auto it = awards_.find(request);
    return it == awards_.end() ? -1 : it->second.expected_queued;
  }

 private:
  struct open_award {
    uint32_t worker = 0;
    double read = 0;
    double expected_queued = 0;
  };

  // A confirmed award of this router, remembered for bids that predate it.
  struct recent_award {
    uint64_t count = 0;  // 0: empty slot
    double read = 0;
  };
  // Awards confirmed while one auction's bids are in flight are a handful;
  // older ones are in every bid's queue by now.
  static constexpr size_t recent_per_worker = 16;
  double confirmed_since(uint32_t worker, uint64_t accepted);
  // Worker `w`'s ring of recent awards, or null if it has none.
  recent_award* ring(uint32_t w);
  // Its ring, made at its first confirmed award; null if it left.
  recent_award* make_ring(uint32_t w);

  price_config price_;
  uint32_t block_tokens_;
  uint64_t rng_;
  std::vector<double> pending_;
  // Ids are sparse (an agent picks its workers' ids below max_worker_id):
  // a ring is made when its worker first wins, so that one high id costs 4
  // bytes per id below it, and a worker that never wins (a forged one)
  // none.
  static constexpr uint32_t no_ring_yet = UINT32_MAX;  // joined, never won
  std::vector<uint32_t> ring_of_;  // by worker id: 1 + ring index, 0: gone
  std::vector<recent_award> recent_;  // recent_per_worker per ring
  std::vector<uint32_t> free_rings_;  // indexes of rings no worker has
  std::unordered_map<uint64_t, open_award> awards_;
  double mean_output_ = 0;
  uint64_t finished_ = 0;
};

}  // namespace kvmesh
