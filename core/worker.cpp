// Worker read-work accounting and bids.
#include "core/worker.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace kvmesh {

expected<worker_ledger> worker_ledger::make(const worker_config& cfg) {
  if (!(cfg.speed > 0))
    return make_error(ec::invalid_argument, "worker speed must be > 0");
  if (!(cfg.c_host <= 1) || !(cfg.c_disk <= 1))
    return make_error(ec::invalid_argument,
                      "c_host and c_disk must be at most 1");
  if (cfg.max_reservations == 0)
    return make_error(ec::invalid_argument,
                      "max_reservations must be at least 1");
  return worker_ledger{cfg};
}

status worker_ledger::reserve(uint64_t request, double read, double expiry_ms,
                              uint32_t n, uint64_t auction) {
  if (!(read >= 0))
    return make_error(ec::invalid_argument, "reserved read work must be >= 0");
  if (const size_t i = index_of(request); i < reservations_.size()) {
    reserved_ += read - reservations_[i].read;
    reservations_[i] =
        reservation{request, read, expiry_ms, queued_, n, auction};
    return ok;
  }
  if (reservations_.size() >= cfg_.max_reservations)
    return make_error(ec::capacity_exceeded,
                      "worker " + std::to_string(cfg_.id) + " has " +
                          std::to_string(reservations_.size()) +
                          " open bids, the limit");
  reservations_.push_back(
      reservation{request, read, expiry_ms, queued_, n, auction});
  reserved_ += read;
  return ok;
}

void worker_ledger::drop_reservation(size_t i) {
  reserved_ -= reservations_[i].read;
  reservations_[i] = reservations_.back();
  reservations_.pop_back();
  if (reservations_.empty())
    reserved_ = 0;  // no drift from floating-point sums
}

bool worker_ledger::release(uint64_t request) {
  const size_t i = index_of(request);
  if (i == reservations_.size()) return false;
  drop_reservation(i);
  return true;
}

size_t worker_ledger::expire(double now_ms) {
  size_t dropped = 0;
  for (size_t i = 0; i < reservations_.size();) {
    if (reservations_[i].expiry_ms <= now_ms) {
      drop_reservation(i);
      ++dropped;
    } else {
      ++i;
    }
  }
  return dropped;
}

size_t worker_ledger::index_of(uint64_t request) const {
  size_t i = 0;
  while (i < reservations_.size() && reservations_[i].request != request)
    ++i;
  return i;
}

const worker_ledger::reservation* worker_ledger::find(uint64_t request) const {
  const size_t i = index_of(request);
  return i < reservations_.size() ? &reservations_[i] : nullptr;
}

bool worker_ledger::contested(uint64_t request, uint64_t auction) const {
  const reservation* r = auction != 0 ? find(request) : nullptr;
  return r && r->auction != 0 && r->auction != auction;
}

bool worker_ledger::has_reservation(uint64_t request) const {
  return find(request) != nullptr;
}

bool worker_ledger::should_refuse(uint64_t request,
                                  double expected_queued) const {
  if (!(cfg_.refuse_growth > 0)) return false;
  const reservation* r = find(request);
  return r && queued_ - std::max(r->queued_at_bid, expected_queued) >
                  cfg_.refuse_growth * std::max<uint32_t>(r->n, 1);
}

void worker_ledger::accept(uint64_t request, double read) {
  release(request);
  ++accepted_;
  if (read < 0) read = 0;
  auto [it, inserted] = queue_.emplace(request, read);
  if (!inserted) {
    queued_ -= it->second;
    it->second = read;
  }
  queued_ += read;
}

void worker_ledger::progress(uint64_t request, double remaining) {
  auto it = queue_.find(request);
  if (it == queue_.end()) return;
  if (remaining < 0) remaining = 0;
  queued_ += remaining - it->second;
  it->second = remaining;
}

void worker_ledger::done(uint64_t request) {
  auto it = queue_.find(request);
  if (it == queue_.end()) return;
  queued_ -= it->second;
  queue_.erase(it);
  if (queue_.empty()) queued_ = 0;
}

bid make_bid(const tiered_cache& cache, const worker_ledger& ledger,
             const uint64_t* chain, uint32_t n) {
  const tier_match m = cache.match(chain, n);
  bid b;
  b.worker = ledger.config().id;
  b.gpu = m.gpu;
  b.host = m.host;
  b.disk = m.disk;
  b.queued = ledger.queued();
  b.reserved = ledger.reserved();
  b.active = cache.active();
  b.active_overlap = m.active_overlap;
  b.capacity = cache.capacity(tier::gpu);
  b.speed = ledger.config().speed;
  b.c_host = ledger.config().c_host;
  b.c_disk = ledger.config().c_disk;
  b.accepted = ledger.accepted();
  return b;
}

bid make_bid(const engine& eng, const worker_ledger& ledger,
             const uint64_t* chain, uint32_t n) {
  bid b = make_bid(eng.cache(), ledger, chain, n);
  const uint32_t block = eng.config().block_tokens;
  const auto out =
      static_cast<uint64_t>(std::ceil(eng.mean_output_tokens() / block));
  const uint64_t need = n - std::min(n, b.active_overlap) + out;
  const double reference_block_ms = eng.recompute_ms() * eng.config().speed;
  b.wait = eng.space_wait_ms(need) / reference_block_ms;
  b.step_overhead = eng.step_overhead();
  return b;
}

}  // namespace kvmesh
