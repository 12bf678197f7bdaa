// What a member of the mesh may claim: a bid checked against the request it
// answers and its worker's heartbeat, a heartbeat against the bounds of
// wire_limits; a refusal names its reason and is counted per message and
// reason, process-wide, and logged with its sender.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/pricing.hpp"
#include "messages/types.hpp"

namespace kvmesh {

// Why a member's message was refused (kvmesh_member_refusals_total's
// reason label).
enum class member_fault : uint8_t {
  none,
  not_finite,         // infinity, or NaN where a number is due
  negative,           // a count or time below 0
  over_request,       // more cached (or active) blocks than the request has
  speed,              // outside [1/max, max] x, or above its own heartbeat's
  blocks,             // more than limits.max_worker_blocks in a tier
  credit,             // a host or disk credit above 1
  bad_id,             // a worker id at or past max_worker_id
  bad_name,           // not a subject token
  owned,              // a worker id a live member of another agent holds
  too_many,           // past limits.max_workers (or max_routers)
  too_many_of_agent,  // past limits.max_workers_per_agent
  wrong_subject,      // names another agent than the subject it came on
  bad_model,  // a model name empty, too long or with control characters,
              // or more than max_models_per_worker of them
  bad_engine  // an engine URL not http://..., too long or with control
              // characters, or a rank below -1
};
inline constexpr size_t member_fault_count = 15;

const char* to_string(member_fault f);

// What the refused message was (kvmesh_member_refusals_total's message).
// kv_batch: KV events (or a resync) for an index shard.
enum class member_message : uint8_t { bid, worker_beat, router_beat, kv_batch };
inline constexpr size_t member_message_count = 4;

const char* to_string(member_message m);

// A bid for a request of `request_blocks` prompt blocks, by a worker whose
// last heartbeat claimed `beat_speed` (0: none heard yet).
member_fault check_bid(const bid& b, uint32_t request_blocks,
                       double beat_speed);

// A model name a worker may announce: 1 to max_name_bytes bytes, no control
// characters. The error says which.
status check_model_name(const std::string& name);

// A worker's heartbeat on its own (the directory checks its agent's name
// and who holds its id).
member_fault check_worker_beat(const worker_status& s);

// Counts a refusal of `m` for `f` from the member named `sender` (an
// agent's or a router's name) about `worker` (no_worker: none); logs the
// first and then at powers of two of the count per reason (a flood would
// otherwise log a line per message). `f` must not be none.
inline constexpr uint32_t no_worker = UINT32_MAX;
void refuse_member(member_message m, member_fault f, const std::string& sender,
                   uint32_t worker = no_worker);

// Refusals since the process started.
uint64_t member_refusals(member_message m, member_fault f);

}  // namespace kvmesh
