// Size limits on what kvmesh takes from the wire, process-wide: payload
// bytes before decoding, blocks per route request, workers per call for
// bids. Exceeding one is an error naming the limit, counted per limit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace kvmesh {

// Worker ids index the router's tables; ids from the network stay below.
inline constexpr uint32_t max_worker_id = 1u << 16;

// A model name, a LoRA adapter's or a client's request id: longer ones are
// refused where they are decoded. Hugging Face repository ids stay under 100
// bytes.
inline constexpr size_t max_name_bytes = 256;
// Models (base and LoRA adapters) one worker may announce: vLLM's default
// --max-loras is 1, and a worker hosting dozens of adapters is rare.
inline constexpr size_t max_models_per_worker = 64;
// Workers a route request may ask to leave out: a client re-routes after a
// failure a few times, not more.
inline constexpr size_t max_excluded_workers = 16;

struct wire_limits {
  // NATS' own default max_payload: a server configured for more still
  // cannot make a kvmesh process copy and decode more.
  uint64_t max_payload_bytes = uint64_t{1} << 20;
  // A 1M-token prompt in 16-token blocks; every block costs a lookup in
  // each bidder's cache and in the index, so this bounds an auction's work.
  uint64_t max_request_blocks = uint64_t{1} << 16;
  // A node agent hosts a few GPUs; a call naming more workers (or one many
  // times) would make it ask its workers that many times.
  uint64_t max_call_workers = 1024;
  // Messages NATS callbacks handed to one actor of a process that it has
  // not yet handled (cluster/bridge's mailbox_gate); past either bound a
  // message is refused, counted and answered "overloaded". The same as
  // libnats' pending limits per subscription: the actor's queue may hold
  // what the subscription's may.
  uint64_t max_mailbox_messages = 65536;
  uint64_t max_mailbox_bytes = uint64_t{64} << 20;
  // What a member may claim of itself (messages/member_checks.hpp): a
  // speed within [1/max, max] of the reference GPU (the fastest GPUs are
  // about 10x an old one), at most this many blocks in a tier.
  uint64_t max_worker_speed = 100;
  uint64_t max_worker_blocks = uint64_t{1} << 32;
  // Members a router process keeps: workers in all, workers per node agent
  // (a host has a few GPUs, an engine a few data-parallel ranks each), and
  // routers. Past a bound a new member's heartbeats are refused, counted.
  // Each member costs a router about 2 KB: the per-agent bound is what one
  // hostile agent's flood can make a router hold. (`kvmesh up` raises it
  // for its own simulated agents, which may host thousands of workers.)
  uint64_t max_workers = 16384;
  uint64_t max_workers_per_agent = 256;
  uint64_t max_routers = 256;
};

enum class wire_limit : uint8_t { payload_bytes, request_blocks, call_workers };
inline constexpr size_t wire_limit_count = 3;

// The limit's config key: "limits.max_payload_bytes", ...
const char* to_string(wire_limit l);

// The limits in force; set once at start from the config (flags).
wire_limits current_wire_limits();
void set_wire_limits(const wire_limits& l);

// Inputs refused for exceeding the limit since the process started.
uint64_t wire_limit_refusals(wire_limit l);

// Checks `got` against the limit: an error "WHAT: GOT exceeds
// limits.KEY = MAX" (ec::invalid_argument), counted, when it is over.
status check_wire_limit(wire_limit l, uint64_t got, const std::string& what);

}  // namespace kvmesh
