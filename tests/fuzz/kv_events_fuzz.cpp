// Fuzzes the decoding of vLLM's and SGLang's KV event messages (three ZMQ
// frames, a msgpack batch) and the cache mirror that applies them.
//
// Input: byte 0 picks the mirror's block size, byte 1 the length of the
// sequence frame (8 is the valid one), then the sequence frame, then the
// payload frame.
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engines/kv_events.hpp"
#include "engines/kv_mirror.hpp"
#include "tests/fuzz/check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvmesh;
  if (size < 2) return 0;
  const uint32_t block_tokens = 1 + data[0] % 32;
  const size_t seq_len = std::min<size_t>(data[1] % 10, size - 2);
  const char* p = reinterpret_cast<const char*>(data + 2);
  const std::vector<std::string_view> frames{
      "kv-events", std::string_view(p, seq_len),
      std::string_view(p + seq_len, size - 2 - seq_len)};
  kv_fault_counts faults;
  auto m = decode_kv_message(frames, faults);
  if (!m) {
    FUZZ_CHECK(m.err().code == ec::parse_error, "error code");
    FUZZ_CHECK(faults.total() == 1, "a refused message counts once");
    return 0;
  }
  FUZZ_CHECK(seq_len == 8, "only an 8-byte sequence frame decodes");
  for (const auto& e : m->batch.events) {
    if (e.kind != engine_kv_event::stored) continue;
    FUZZ_CHECK(e.block_size > 0, "a stored event has a block size");
  }
  auto mirror = kv_mirror::make(block_tokens);
  FUZZ_CHECK(static_cast<bool>(mirror), "a positive block size is fine");
  std::vector<cache_event> out;
  mirror->apply(m->batch, &out);
  uint64_t in_tiers = 0;
  for (size_t t = 0; t < tier_count; ++t)
    in_tiers += mirror->blocks(static_cast<tier>(t));
  FUZZ_CHECK(in_tiers >= mirror->engine_blocks(),
             "every engine block is in a tier at least");
  mirror->clear(&out);
  FUZZ_CHECK(mirror->engine_blocks() == 0, "clear forgets every block");
  for (size_t t = 0; t < tier_count; ++t)
    FUZZ_CHECK(mirror->blocks(static_cast<tier>(t)) == 0,
               "clear empties every tier");
  return 0;
}
