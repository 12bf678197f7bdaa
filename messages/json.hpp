// The JSON forms of a route request and its decision, for clients without
// Cap'n Proto (any NATS client, or a person with the NATS CLI), and of a
// worker's status, shared by the admin's, top's and a front's views.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "messages/types.hpp"

namespace kvmesh {

// Parses {"id": 7, "tokens": [1, 2, ...]}, {"id": 7, "blocks": [h1, ...]}
// or {"id": 7, "text": "..."} with optional "salt" (tokens only),
// "input_tokens", "output_tokens", "model" and "client_id" (strings of at
// most max_name_bytes). Tokens are hashed into chained blocks
// of `block_tokens` (Dynamo's hash); "blocks" are taken as chained hashes
// already; text is hashed in chunks of its UTF-8 bytes (hash_text_blocks:
// approximate, counted in text_route_requests()). Unknown fields are
// ignored. A prompt shorter than one block has no blocks (nothing to
// reuse) and is routed on queue and occupancy alone; "blocks" may be empty
// when "input_tokens" says how long the prompt is. Errors name the field;
// each one counts in json_decode_errors(). `id`, when given, gets the
// request's id as soon as it is read, so that an error's answer names it.
expected<route_request_msg> parse_route_json(std::string_view text,
                                             uint32_t block_tokens,
                                             uint64_t* id = nullptr);

// {"request": 7, "worker": 2, "endpoint": "http://gpu-2:8001" (or ""),
// "auctions": 1, "prices": [{"worker": 0,
// "read": .., "credit_gpu": .., "credit_host": .., "credit_disk": ..,
// "space": .., "speed": .., "overflow": .., "price": .., "delta": ..}]}
// A decision with an error is {"request": 7, "error": "why", "failure":
// "no_workers"} (route_failure's name). Both carry "client_id" when the
// request had one.
std::string decision_json(const decision& d);

// A worker's state in one word: live, draining, unhealthy or gone.
const char* worker_state_name(const worker_status& w);

// The fields every view of a worker shows: id, state, blocks per tier,
// queued, active and capacity blocks.
nlohmann::ordered_json worker_load_json(const worker_status& w);

// JSON route requests that failed to parse since the process started.
uint64_t json_decode_errors();

// Route requests that carried text, not token ids, since the process
// started: their blocks are approximate and match no engine's cache.
uint64_t text_route_requests();

}  // namespace kvmesh
