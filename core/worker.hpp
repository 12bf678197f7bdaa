// A worker's accounting of read work (queued and reserved), and the bid it
// computes for a request from that and its cache.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/engine.hpp"
#include "core/error.hpp"
#include "core/pricing.hpp"
#include "core/tiered_cache.hpp"

namespace kvmesh {

struct worker_config {
  uint32_t id = 0;
  double speed = 1.0;           // prefill speed relative to the reference
  double c_host = 0.75;         // read cost saved by a host block (of 1)
  double c_disk = 0.25;         // read cost saved by a disk block (of 1)
  double reservation_ms = 500;  // a bid's soft reservation lives this long
  size_t max_reservations = 4096;
  // An award is refused when the queue grew by more than this many request
  // sizes since the bid (awards from other routers landed first): the bid no
  // longer holds, and the router should try its next-best bidder.
  double refuse_growth = 0;  // 0: never refuse for growth
};

// Read work in blocks. A request's read cost is the work left to bring its
// prompt into GPU memory: n - m_g - c_host * m_h - c_disk * m_d at bid time,
// shrinking as its prefill progresses. Reservations hold that cost for open
// bids, so concurrent auctions see each other.
class worker_ledger {
 public:
  static expected<worker_ledger> make(const worker_config& cfg);

  const worker_config& config() const { return cfg_; }
  void set_speed(double speed) { cfg_.speed = speed; }

  double read_cost(uint32_t n, uint32_t gpu, uint32_t host,
                   uint32_t disk) const {
    const double c = n - (gpu + cfg_.c_host * host + cfg_.c_disk * disk);
    return c > 0 ? c : 0;
  }
  double read_cost(const bid& b, uint32_t n) const {
    return read_cost(n, b.gpu, b.host, b.disk);
  }

  // Holds `read` blocks for `request` until `expiry_ms`. Errors when too many
  // bids are open (capacity_exceeded) or read is negative.
  // `n` is the request's size in blocks (the unit of refuse_growth);
  // `auction` names the auction that asked (0: unnamed).
  status reserve(uint64_t request, double read, double expiry_ms,
                 uint32_t n = 0, uint64_t auction = 0);
  // Whether an open bid for `request` belongs to another named auction
  // than `auction` (false when either is unnamed).
  bool contested(uint64_t request, uint64_t auction) const;
  // Drops a reservation (the request went elsewhere); false if none.
  bool release(uint64_t request);
  // Drops reservations whose expiry is at or before now; returns how many.
  size_t expire(double now_ms);
  bool has_reservation(uint64_t request) const;
  // Whether an award for `request` should be refused: the queue grew past
  // refuse_growth since the bid (false without a reservation or bound).
  // `expected_queued`, when given (>= 0), is the queue the router priced
  // with, its own unconfirmed awards included: growth it knew of is no
  // reason to refuse.
  bool should_refuse(uint64_t request, double expected_queued = -1) const;

  // The request was awarded here: its reservation (if any) becomes queued
  // work of `read` blocks.
  void accept(uint64_t request, double read);
  // `remaining` blocks of the request's read work are left.
  void progress(uint64_t request, double remaining);
  // Prefill done (first token) or request gone: no read work left.
  void done(uint64_t request);

  double queued() const { return queued_; }
  // Requests accepted so far (each accept()): the order of acceptances.
  uint64_t accepted() const { return accepted_; }
  double reserved() const { return reserved_; }
  size_t queued_requests() const { return queue_.size(); }
  size_t reservations() const { return reservations_.size(); }

 private:
  struct reservation {
    uint64_t request;
    double read;
    double expiry_ms;
    double queued_at_bid;
    uint32_t n;
    uint64_t auction;
  };

  explicit worker_ledger(const worker_config& cfg) : cfg_(cfg) {}
  // The open bid for `request`: its index (size() if none), or null.
  size_t index_of(uint64_t request) const;
  const reservation* find(uint64_t request) const;
  void drop_reservation(size_t i);

  worker_config cfg_;
  std::unordered_map<uint64_t, double> queue_;
  std::vector<reservation> reservations_;
  double queued_ = 0;
  double reserved_ = 0;
  uint64_t accepted_ = 0;
};

// The read work a bidder holds for an open auction: its share of the
// request's n blocks if the fleet absorbed the work by speed.
inline double expected_share(uint32_t n, double speed, double bidders_speed) {
  return bidders_speed > 0 ? n * speed / bidders_speed : 0;
}

// The bid of this worker for a request with prompt chain `chain` (n blocks).
// Allocation-free.
bid make_bid(const tiered_cache& cache, const worker_ledger& ledger,
             const uint64_t* chain, uint32_t n);
// The same from the engine model, with its wait for GPU space: the request
// needs its prompt blocks not already held and its mean output's.
bid make_bid(const engine& eng, const worker_ledger& ledger,
             const uint64_t* chain, uint32_t n);

}  // namespace kvmesh
