// Worker read-work accounting and bids.
#include "core/worker.hpp"

#include <algorithm>
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
  for (auto& r : reservations_) {
    if (r.request == request) {
      reserved_ += read - r.read;
      r.read = read;
      r.expiry_ms = expiry_ms;
      r.queued_at_bid = queued_;
      r.n = n;
      r.auction = auction;
      return ok;
    }
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
  for (size_t i = 0; i < reservations_.size(); ++i) {
    if (reservations_[i].request == request) {
      drop_reservation(i);
      return true;
    }
  }
  return false;
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

bool worker_ledger::contested(uint64_t request, uint64_t auction) const {
  if (auction == 0) return false;
  for (const auto& r : reservations_)
    if (r.request == request) return r.auction != 0 && r.auction != auction;
  return false;
}

bool worker_ledger::has_reservation(uint64_t request) const {
  for (const auto& r : reservations_)
    if (r.request == request) return true;
  return false;
}

bool worker_ledger::should_refuse(uint64_t request,
                                  double expected_queued) const {
  if (!(cfg_.refuse_growth > 0)) return false;
  for (const auto& r : reservations_)
    if (r.request == request)
      return queued_ - std::max(r.queued_at_bid, expected_queued) >
             cfg_.refuse_growth * std::max<uint32_t>(r.n, 1);
  return false;
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

}  // namespace kvmesh
