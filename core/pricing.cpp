// Bid -> price in cache blocks, and the award.
#include "core/pricing.hpp"

#include <algorithm>
#include <cmath>

namespace kvmesh {

status validate(const price_config& p) {
  // Bounded so that every price stays finite for any bid (beta = 1e308
  // times a space of blocks is infinity, and every bidder ties): credits
  // are fractions of a block; beta, k and overflow scale block counts, and
  // past 1000 one term drowns the others; the ceiling is a price per
  // request block.
  struct range {
    const char* name;
    double value;
    double max;
    const char* shown;  // max as people write it
  };
  const range weights[] = {
      {"c_host", p.c_host, 1, "1"},
      {"c_disk", p.c_disk, 1, "1"},
      {"beta", p.beta, 1e3, "1000"},
      {"k", p.k, 1e3, "1000"},
      {"overflow", p.overflow, 1e3, "1000"},
      {"overload_ceiling", p.overload_ceiling, 1e6, "1000000"}};
  for (const auto& w : weights) {
    // Written so that NaN fails too.
    if (!(w.value >= 0 && w.value <= w.max))
      return make_error(ec::invalid_argument, std::string("price weight ") +
                                                  w.name + " must be in [0, " +
                                                  w.shown + "]");
  }
  return ok;
}

size_t price_bids(const price_config& cfg, uint32_t n, uint32_t o,
                  const bid* bids, size_t count, price_breakdown* out,
                  uint64_t& rng_state) {
  if (count == 0) return no_winner;
  // The GPU credit decays with queue in excess of the emptiest bidder, in
  // units of this request's size; that bidder is also the baseline.
  size_t baseline = 0;
  for (size_t i = 1; i < count; ++i) {
    const bid& a = bids[i];
    const bid& b = bids[baseline];
    if (a.queued < b.queued ||
        (a.queued == b.queued && a.reserved < b.reserved))
      baseline = i;
  }
  const double queued_min = bids[baseline].queued;
  // Decay per block of excess queue: k per request size.
  const double decay = cfg.k / (n > 0 ? n : 1);
  size_t winner = 0;
  uint32_t ties = 1;
  for (size_t i = 0; i < count; ++i) {
    const bid& b = bids[i];
    price_breakdown& p = out[i];
    const double excess = std::max(0.0, b.queued - queued_min);
    const double c_gpu = 1.0 / (1.0 + decay * excess);
    p.worker = b.worker;
    p.credit_gpu = c_gpu * b.gpu;
    p.credit_host = (std::isnan(b.c_host) ? cfg.c_host : b.c_host) * b.host;
    p.credit_disk = (std::isnan(b.c_disk) ? cfg.c_disk : b.c_disk) * b.disk;
    p.read = b.queued + b.reserved + n -
             (p.credit_gpu + p.credit_host + p.credit_disk);
    p.space = static_cast<double>(b.active) - b.active_overlap + n + o;
    p.speed = b.speed > 0 ? b.speed : 1.0;
    if (std::isnan(b.wait)) {
      // The worker does not model its engine: space beyond its capacity
      // stands in for the wait it implies.
      const double beyond = p.space - static_cast<double>(b.capacity);
      p.overflow = beyond > 0 ? cfg.overflow * beyond : 0.0;
    } else {
      p.wait = b.wait > 0 ? b.wait : 0.0;
    }
    const double slow = std::isfinite(b.step_overhead) && b.step_overhead > 0
                            ? 1.0 + b.step_overhead
                            : 1.0;
    p.price =
        p.read * slow / p.speed + cfg.beta * p.space + p.overflow + p.wait;
    if (i == 0) continue;
    const price_breakdown& w = out[winner];
    if (p.price < w.price || (p.price == w.price && p.read < w.read)) {
      winner = i;
      ties = 1;
    } else if (p.price == w.price && p.read == w.read) {
      // Reservoir sampling keeps each tied bidder with equal probability.
      ++ties;
      if (next_random(rng_state) % ties == 0) winner = i;
    }
  }
  const double base = out[baseline].price;
  for (size_t i = 0; i < count; ++i)
    out[i].delta = out[i].price - base;
  return winner;
}

}  // namespace kvmesh
