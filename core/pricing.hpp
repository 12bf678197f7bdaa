// Bids and prices: a worker's bid for a request, and its conversion to a
// price in cache blocks with a breakdown per bidder (see docs/pricing.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "core/error.hpp"

namespace kvmesh {

// What a worker reports for one request, from its own exact state.
// A bid's or award reply's `accepted` when the worker does not count.
inline constexpr uint64_t unknown_accepted = UINT64_MAX;

struct bid {
  uint32_t worker = 0;          // the bidder
  uint32_t gpu = 0;             // matched prefix blocks per tier (m_g, m_h,
  uint32_t host = 0;            // m_d): each block in its best tier, up to the
  uint32_t disk = 0;            // first block no tier holds
  double queued = 0;            // accepted, unprefilled read work (blocks)
  double reserved = 0;          // read work of open bids (blocks)
  uint64_t active = 0;          // GPU blocks held by running sequences
  uint32_t active_overlap = 0;  // this request's blocks among them
  uint64_t capacity = 0;        // GPU blocks
  double speed = 1.0;           // prefill speed relative to the reference GPU
  // Credit of a host or disk block as this worker measures it (1 - load
  // time / recompute time); NaN when it does not report one, and the
  // router's configured c_host / c_disk apply.
  double c_host = std::numeric_limits<double>::quiet_NaN();
  double c_disk = std::numeric_limits<double>::quiet_NaN();
  // How many requests the worker had accepted when it bid (its ledger's
  // count), or unknown_accepted. A router's award confirmed after the bid
  // is not in `queued` yet; this tells which (core/auction).
  uint64_t accepted = unknown_accepted;
  // For a redelivered request: this worker took it already (the router
  // then awards it here, and the worker does not run it twice).
  bool holds = false;
  // For a request a worker may have taken already: another auction of it
  // (another router's, handed the same request at the same time) holds a
  // bid here still open. Awarding it now could run it twice.
  bool contested = false;
  // Time this request would wait for GPU space on this worker (running
  // sequences must finish first), in recompute times of a reference block;
  // NaN when the worker does not model its engine, and space beyond its
  // capacity is priced at the router's `overflow` instead.
  double wait = std::numeric_limits<double>::quiet_NaN();
  // The decode pass each engine step carries while sequences decode, over
  // the prefill time of a full step: prefill work here takes (1 + this) x
  // as long as on an idle GPU of the same speed.
  double step_overhead = 0;
};

// Every weight of the price, in one place; all can change at run time.
struct price_config {
  double c_host = 0.75;  // credit of a block found in host memory
  double c_disk = 0.25;  // credit of a block found on disk
  // Occupancy and queue are priced from the engine by default (the bid's
  // wait and step_overhead); beta and k stay as operator knobs at 0.
  double beta = 0;        // weight of occupancy (space); docs/pricing.md
  double k = 0;           // decay of GPU credit with excess queue, per request
                          // size; 0 turns the decay off (Dynamo's default)
  double overflow = 1.0;  // price per block of space beyond capacity, for
                          // bids without a wait
  double overload_ceiling = 0;  // cheapest price per request block above
                                // which the fleet is saturated; 0: never
};

// Weights from outside (flags, an operator, the wire) must be in range:
// credits in [0, 1], beta, k and overflow in [0, 1000], overload_ceiling in
// [0, 1000000]; the error names the weight and its range.
status validate(const price_config& p);

// Why a bidder got its price.
struct price_breakdown {
  uint32_t worker = 0;
  double read = 0;         // queued + reserved + n - credit
  double credit_gpu = 0;   // c_gpu * m_g
  double credit_host = 0;  // c_host * m_h
  double credit_disk = 0;  // c_disk * m_d
  double space = 0;        // active - active_overlap + n + o
  double speed = 1.0;
  double overflow = 0;  // overflow penalty
  double price = 0;
  double delta = 0;  // price minus the baseline (emptiest) bidder's
  double wait = 0;   // the bid's wait for GPU space
};

inline constexpr size_t no_winner = SIZE_MAX;

// Prices `count` bids for a request of n prompt blocks and o expected output
// blocks into out[0..count) and returns the winner's index (lowest price;
// ties: smaller read, then uniformly at random from rng_state), or no_winner
// when count is 0. Allocation-free.
size_t price_bids(const price_config& cfg, uint32_t n, uint32_t o,
                  const bid* bids, size_t count, price_breakdown* out,
                  uint64_t& rng_state);

// Whether the cheapest price says the fleet is saturated.
inline bool saturated(const price_config& cfg, uint32_t n, double price) {
  return cfg.overload_ceiling > 0 &&
         price > cfg.overload_ceiling * (n > 0 ? n : 1);
}

// splitmix64: a tiny deterministic generator for tie-breaking.
inline uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace kvmesh
