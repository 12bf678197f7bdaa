// The process-wide wire limits and their refusal counters.
#include "messages/limits.hpp"

#include <array>
#include <atomic>

namespace kvmesh {

namespace {

// Set at start and read by every NATS callback thread: atomics, relaxed
// (a limit changing under a decode may apply to it or not, either is fine).
std::array<std::atomic<uint64_t>, wire_limit_count> limit_values{
    wire_limits{}.max_payload_bytes, wire_limits{}.max_request_blocks,
    wire_limits{}.max_call_workers};
std::array<std::atomic<uint64_t>, wire_limit_count> refusals;
// Read when a node starts (its gates), not per message.
std::atomic<uint64_t> mailbox_messages{wire_limits{}.max_mailbox_messages};
std::atomic<uint64_t> mailbox_bytes{wire_limits{}.max_mailbox_bytes};
// Read per heartbeat and bid.
std::atomic<uint64_t> worker_speed{wire_limits{}.max_worker_speed};
std::atomic<uint64_t> worker_blocks{wire_limits{}.max_worker_blocks};
std::atomic<uint64_t> workers{wire_limits{}.max_workers};
std::atomic<uint64_t> workers_per_agent{wire_limits{}.max_workers_per_agent};
std::atomic<uint64_t> routers{wire_limits{}.max_routers};

size_t index_of(wire_limit l) {
  return static_cast<size_t>(l);
}

}  // namespace

const char* to_string(wire_limit l) {
  switch (l) {
    case wire_limit::payload_bytes:
      return "limits.max_payload_bytes";
    case wire_limit::request_blocks:
      return "limits.max_request_blocks";
    case wire_limit::call_workers:
      return "limits.max_call_workers";
  }
  return "limits.unknown";
}

wire_limits current_wire_limits() {
  wire_limits l;
  l.max_payload_bytes = limit_values[0].load(std::memory_order_relaxed);
  l.max_request_blocks = limit_values[1].load(std::memory_order_relaxed);
  l.max_call_workers = limit_values[2].load(std::memory_order_relaxed);
  l.max_mailbox_messages = mailbox_messages.load(std::memory_order_relaxed);
  l.max_mailbox_bytes = mailbox_bytes.load(std::memory_order_relaxed);
  l.max_worker_speed = worker_speed.load(std::memory_order_relaxed);
  l.max_worker_blocks = worker_blocks.load(std::memory_order_relaxed);
  l.max_workers = workers.load(std::memory_order_relaxed);
  l.max_workers_per_agent = workers_per_agent.load(std::memory_order_relaxed);
  l.max_routers = routers.load(std::memory_order_relaxed);
  return l;
}

void set_wire_limits(const wire_limits& l) {
  limit_values[0].store(l.max_payload_bytes, std::memory_order_relaxed);
  limit_values[1].store(l.max_request_blocks, std::memory_order_relaxed);
  limit_values[2].store(l.max_call_workers, std::memory_order_relaxed);
  mailbox_messages.store(l.max_mailbox_messages, std::memory_order_relaxed);
  mailbox_bytes.store(l.max_mailbox_bytes, std::memory_order_relaxed);
  worker_speed.store(l.max_worker_speed, std::memory_order_relaxed);
  worker_blocks.store(l.max_worker_blocks, std::memory_order_relaxed);
  workers.store(l.max_workers, std::memory_order_relaxed);
  workers_per_agent.store(l.max_workers_per_agent, std::memory_order_relaxed);
  routers.store(l.max_routers, std::memory_order_relaxed);
}

uint64_t wire_limit_refusals(wire_limit l) {
  return index_of(l) < wire_limit_count
             ? refusals[index_of(l)].load(std::memory_order_relaxed)
             : 0;
}

status check_wire_limit(wire_limit l, uint64_t got, const std::string& what) {
  const uint64_t max =
      limit_values[index_of(l)].load(std::memory_order_relaxed);
  if (got <= max) return ok;
  refusals[index_of(l)].fetch_add(1, std::memory_order_relaxed);
  return make_error(ec::invalid_argument, what + ": " + std::to_string(got) +
                                              " exceeds " + to_string(l) +
                                              " = " + std::to_string(max));
}

}  // namespace kvmesh
