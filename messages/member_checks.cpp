// The checks of members' claims and their refusal counters.
#include "messages/member_checks.hpp"

#include <array>
#include <atomic>
#include <cmath>

#include "core/log.hpp"
#include "messages/limits.hpp"

namespace kvmesh {

namespace {

std::array<std::atomic<uint64_t>, member_message_count * member_fault_count>
    refusals;

bool finite_or_unknown(double v) {
  return std::isnan(v) || std::isfinite(v);
}

bool speed_in_bounds(double speed, const wire_limits& l) {
  const auto max = static_cast<double>(l.max_worker_speed);
  return speed >= 1 / max && speed <= max;
}

}  // namespace

status check_model_name(const std::string& m) {
  if (m.empty()) return make_error(ec::invalid_argument, "model name is empty");
  if (m.size() > max_name_bytes)
    return make_error(ec::invalid_argument,
                      "model name of " + std::to_string(m.size()) +
                          " bytes exceeds " + std::to_string(max_name_bytes));
  // Shown in logs, metrics labels and JSON.
  for (unsigned char c : m)
    if (c < 0x20 || c == 0x7f)
      return make_error(ec::invalid_argument,
                        "model name holds a control character");
  return ok;
}

const char* to_string(member_fault f) {
  switch (f) {
    case member_fault::none:
      return "none";
    case member_fault::not_finite:
      return "not_finite";
    case member_fault::negative:
      return "negative";
    case member_fault::over_request:
      return "over_request";
    case member_fault::speed:
      return "speed";
    case member_fault::blocks:
      return "blocks";
    case member_fault::credit:
      return "credit";
    case member_fault::bad_id:
      return "bad_id";
    case member_fault::bad_name:
      return "bad_name";
    case member_fault::owned:
      return "owned";
    case member_fault::too_many:
      return "too_many";
    case member_fault::too_many_of_agent:
      return "too_many_of_agent";
    case member_fault::wrong_subject:
      return "wrong_subject";
    case member_fault::bad_model:
      return "bad_model";
    case member_fault::bad_engine:
      return "bad_engine";
  }
  return "unknown";
}

const char* to_string(member_message m) {
  switch (m) {
    case member_message::bid:
      return "bid";
    case member_message::worker_beat:
      return "worker_heartbeat";
    case member_message::router_beat:
      return "router_heartbeat";
    case member_message::kv_batch:
      return "kv_batch";
  }
  return "unknown";
}

member_fault check_bid(const bid& b, uint32_t request_blocks,
                       double beat_speed) {
  // NaN is "not said" only where the bid defines it so (credits, wait).
  if (!std::isfinite(b.queued) || !std::isfinite(b.reserved) ||
      !std::isfinite(b.speed) || !std::isfinite(b.step_overhead) ||
      !finite_or_unknown(b.c_host) || !finite_or_unknown(b.c_disk) ||
      !finite_or_unknown(b.wait))
    return member_fault::not_finite;
  if (b.queued < 0 || b.reserved < 0 || b.step_overhead < 0 || b.wait < 0)
    return member_fault::negative;
  // A prefix match stops at the request's last block.
  if (uint64_t{b.gpu} + b.host + b.disk > request_blocks ||
      b.active_overlap > request_blocks || b.active_overlap > b.active)
    return member_fault::over_request;
  // A worker's speed is its heartbeat's; a bid may not claim more (the
  // estimate of a real engine's speed moves, so only a rise counts).
  const auto l = current_wire_limits();
  if (!speed_in_bounds(b.speed, l) || (beat_speed > 0 && b.speed > beat_speed))
    return member_fault::speed;
  if (b.capacity > l.max_worker_blocks || b.active > l.max_worker_blocks)
    return member_fault::blocks;
  // A credit above 1 saves more than the block's recompute (below 0 is a
  // tier slower than recomputing, a worker's honest measure).
  if (b.c_host > 1 || b.c_disk > 1) return member_fault::credit;
  return member_fault::none;
}

member_fault check_worker_beat(const worker_status& s) {
  if (s.worker >= max_worker_id) return member_fault::bad_id;
  if (!std::isfinite(s.queued) || !std::isfinite(s.reserved) ||
      !std::isfinite(s.speed) || !finite_or_unknown(s.last_price))
    return member_fault::not_finite;
  if (s.queued < 0 || s.reserved < 0) return member_fault::negative;
  const auto l = current_wire_limits();
  if (!speed_in_bounds(s.speed, l)) return member_fault::speed;
  for (uint64_t v : {s.capacity, s.host_capacity, s.disk_capacity, s.gpu_blocks,
                     s.host_blocks, s.disk_blocks, s.active})
    if (v > l.max_worker_blocks) return member_fault::blocks;
  if (s.models.size() > max_models_per_worker) return member_fault::bad_model;
  for (const auto& m : s.models)
    if (!check_model_name(m.name) ||
        (!m.parent.empty() && !check_model_name(m.parent)))
      return member_fault::bad_model;
  if (s.engine_rank < -1) return member_fault::bad_engine;
  if (!s.engine.empty()) {
    // A gateway sends requests there: a URL of the form it calls.
    if (s.engine.size() > max_name_bytes || s.engine.rfind("http://", 0) != 0)
      return member_fault::bad_engine;
    for (unsigned char c : s.engine)
      if (c < 0x21 || c == 0x7f) return member_fault::bad_engine;
  }
  return member_fault::none;
}

void refuse_member(member_message m, member_fault f, const std::string& sender,
                   uint32_t worker) {
  const size_t i =
      static_cast<size_t>(m) * member_fault_count + static_cast<size_t>(f);
  const uint64_t n = refusals[i].fetch_add(1, std::memory_order_relaxed) + 1;
  if ((n & (n - 1)) != 0) return;
  // A name from the wire, shown at most at a subject token's length.
  const std::string who =
      "'" + sender.substr(0, 64) + "'" +
      (worker == no_worker ? std::string()
                           : " for worker " + std::to_string(worker));
  KVMESH_WARN("%s from %s refused: %s (%llu refused for it so far)",
              to_string(m), who.c_str(), to_string(f),
              static_cast<unsigned long long>(n));
}

uint64_t member_refusals(member_message m, member_fault f) {
  return refusals[static_cast<size_t>(m) * member_fault_count +
                  static_cast<size_t>(f)]
      .load(std::memory_order_relaxed);
}

}  // namespace kvmesh
