// Decoding of the KV-cache events vLLM and SGLang publish over ZMQ: the
// three frames of a message, the msgpack batch and its events, in every
// layout those engines have used.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/tiered_cache.hpp"

namespace kvmesh {

// One event of an engine's cache. Block hashes are the engine's own opaque
// keys: integers as they are (negative ones as their two's complement),
// byte strings (sha256) as the XXH3-64 of their bytes.
struct engine_kv_event {
  enum kind_t : uint8_t { stored, removed, cleared } kind = stored;
  std::vector<uint64_t> hashes;
  bool has_parent = false;
  uint64_t parent = 0;           // stored: the block before hashes[0]
  std::vector<uint32_t> tokens;  // stored: the tokens of every block
  uint32_t block_size = 0;       // stored: tokens per block
  std::string medium;            // "" when the engine sent none
  std::string lora_name;         // stored: "" when none
  bool has_lora_id = false;      // stored: a LoRA id (the name is what
  int64_t lora_id = 0;           //   hashes; newer vLLM sends both)
  int64_t group = 0;             // KV cache group (hybrid models); 0: none
};

// A batch of events as one step of the engine published it.
struct engine_kv_batch {
  double ts = 0;  // the engine's wall clock, seconds
  bool has_rank = false;
  int64_t rank = 0;  // data-parallel rank, when the engine sent it
  std::vector<engine_kv_event> events;
};

// One ZMQ message: [topic, sequence number (8 bytes big-endian), payload].
struct engine_kv_message {
  std::string topic;
  uint64_t seq = 0;
  engine_kv_batch batch;
};

// Why a frame or an event was skipped.
enum class kv_fault : uint8_t {
  frames,         // not three frames
  sequence,       // a sequence frame that is not 8 bytes
  msgpack,        // a payload that is not one msgpack value
  batch,          // msgpack, but not a batch [ts, events, rank?] or map
  event,          // an event with a field of the wrong type or missing
  unknown_event,  // an event type this decoder does not know
};
inline constexpr size_t kv_fault_count = 6;
const char* to_string(kv_fault f);

// Skipped frames and events per kind, with the first reason of each kind
// (for a log line once per kind).
struct kv_fault_counts {
  std::array<uint64_t, kv_fault_count> n{};
  std::array<std::string, kv_fault_count> first;

  uint64_t operator[](kv_fault f) const { return n[static_cast<size_t>(f)]; }
  uint64_t total() const;
  // Counts one; true when it is the first of its kind.
  bool add(kv_fault f, const std::string& why);
};

// Decodes one message. A frame that cannot be decoded is an error (and
// counted in `faults`); an event that cannot be decoded is counted and left
// out of the batch, the others are kept. Unknown fields are ignored.
expected<engine_kv_message> decode_kv_message(
    const std::vector<std::string_view>& frames, kv_fault_counts& faults);

// The payload alone (the third frame).
expected<engine_kv_batch> decode_kv_batch(const uint8_t* data, size_t size,
                                          kv_fault_counts& faults);

// The sequence frame: 8 bytes, big-endian.
expected<uint64_t> decode_kv_sequence(std::string_view frame);

// The tier a `medium` names: GPU (and "" for engines that send none) is
// gpu; CPU, CPU_PINNED, host memory names are host; DISK, SSD, NVMe, file
// and storage names are disk. Case-insensitive. False for anything else.
bool tier_of_medium(std::string_view medium, tier& out);

}  // namespace kvmesh
