// The router's auction bookkeeping.
#include "core/auction.hpp"

#include <algorithm>
#include <cmath>

namespace kvmesh {

auctioneer::auctioneer(size_t workers, uint32_t block_tokens,
                       const price_config& price, uint64_t seed)
    : price_(price),
      block_tokens_(block_tokens > 0 ? block_tokens : 1),
      rng_(seed),
      pending_(workers, 0) {
  for (size_t w = 0; w < workers; ++w)
    join(static_cast<uint32_t>(w));
}

void auctioneer::join(uint32_t worker) {
  if (worker >= pending_.size()) pending_.resize(size_t{worker} + 1, 0);
  if (worker >= ring_of_.size()) ring_of_.resize(size_t{worker} + 1, 0);
  if (ring_of_[worker] == 0) ring_of_[worker] = no_ring_yet;
}

void auctioneer::leave(uint32_t worker) {
  if (worker >= ring_of_.size()) return;
  if (recent_award* r = ring(worker)) {
    std::fill(r, r + recent_per_worker, recent_award{});
    free_rings_.push_back(ring_of_[worker] - 1);
  }
  ring_of_[worker] = 0;
}

auctioneer::recent_award* auctioneer::make_ring(uint32_t w) {
  if (w >= ring_of_.size() || ring_of_[w] == 0) return nullptr;  // left
  if (ring_of_[w] == no_ring_yet) {
    if (!free_rings_.empty()) {
      ring_of_[w] = free_rings_.back() + 1;
      free_rings_.pop_back();
    } else {
      ring_of_[w] = static_cast<uint32_t>(rings()) + 1;
      recent_.resize(recent_.size() + recent_per_worker);
    }
  }
  return ring(w);
}

auctioneer::recent_award* auctioneer::ring(uint32_t w) {
  if (w >= ring_of_.size() || ring_of_[w] == 0 || ring_of_[w] == no_ring_yet)
    return nullptr;
  return &recent_[size_t{ring_of_[w] - 1} * recent_per_worker];
}

size_t auctioneer::decide(uint64_t request, uint32_t n, bid* bids, size_t count,
                          price_breakdown* prices) {
  for (size_t i = 0; i < count; ++i)
    if (bids[i].worker < pending_.size())
      bids[i].queued += pending_[bids[i].worker] +
                        confirmed_since(bids[i].worker, bids[i].accepted);
  const size_t w = price_bids(price_, n, expected_output_blocks(), bids, count,
                              prices, rng_);
  if (w != no_winner) award(request, bids[w], prices[w]);
  return w;
}

void auctioneer::award(uint64_t request, const bid& b,
                       const price_breakdown& p) {
  settle(request);
  if (b.worker >= pending_.size()) return;
  // The winner's own read work: its price's read less what it already had.
  const double read = std::max(0.0, p.read - (b.queued + b.reserved));
  pending_[b.worker] += read;
  awards_[request] = open_award{b.worker, read, b.queued};
}

void auctioneer::settle(uint64_t request) {
  auto it = awards_.find(request);
  if (it == awards_.end()) return;
  double& p = pending_[it->second.worker];
  p = std::max(0.0, p - it->second.read);
  awards_.erase(it);
}

void auctioneer::confirmed(uint64_t request, uint64_t count) {
  auto it = awards_.find(request);
  if (it == awards_.end()) return;
  const uint32_t w = it->second.worker;
  const double read = it->second.read;
  settle(request);
  if (count == unknown_accepted || count == 0) return;
  recent_award* ring = make_ring(w);
  if (!ring) return;
  // Overwrite the oldest (smallest count) slot.
  size_t oldest = 0;
  for (size_t i = 1; i < recent_per_worker; ++i)
    if (ring[i].count < ring[oldest].count) oldest = i;
  ring[oldest] = recent_award{count, read};
}

double auctioneer::confirmed_since(uint32_t worker, uint64_t accepted) {
  recent_award* ring = this->ring(worker);
  if (accepted == unknown_accepted || !ring) return 0;
  double extra = 0;
  for (size_t i = 0; i < recent_per_worker; ++i) {
    recent_award& r = ring[i];
    if (r.count <= accepted) continue;
    // Far ahead of the bid: the worker restarted and counts from 0 again.
    if (r.count > accepted + 4 * recent_per_worker) {
      r = recent_award{};
      continue;
    }
    extra += r.read;
  }
  return extra;
}

void auctioneer::finished(uint32_t output_tokens) {
  // Requests carry no reliable hint of their output: keep a running mean.
  ++finished_;
  mean_output_ += (output_tokens - mean_output_) / finished_;
}

uint32_t auctioneer::expected_output_blocks() const {
  return static_cast<uint32_t>(std::ceil(mean_output_ / block_tokens_));
}

}  // namespace kvmesh
