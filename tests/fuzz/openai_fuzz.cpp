// Fuzzes the OpenAI request bodies a node agent's HTTP front takes from
// clients (/v1/completions and /v1/chat/completions).
//
// Input: byte 0 picks chat or completions and the block size, the rest is
// the body.
#include <cstdint>
#include <string_view>

#include "core/block_hash.hpp"
#include "engines/openai.hpp"
#include "tests/fuzz/check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvmesh;
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const uint32_t block_tokens = (data[0] >> 1) % 65;  // 0: refused
  const std::string_view body(reinterpret_cast<const char*>(data + 1),
                              size - 1);
  auto r = parse_openai_request(body, chat, block_tokens);
  if (!r) {
    FUZZ_CHECK(!r.err().message.empty(), "an error says why");
    return 0;
  }
  FUZZ_CHECK(block_tokens > 0, "a block size of 0 is refused");
  const auto& p = r->prompt;
  // Whole blocks only: never more blocks than the prompt fills.
  if (p.approximate)
    FUZZ_CHECK(
        p.blocks.size() * block_tokens * text_bytes_per_token <= body.size(),
        "text blocks fit in the body's bytes");
  else
    FUZZ_CHECK(p.blocks.size() * block_tokens <= p.prompt_tokens,
               "token blocks fit in the prompt");
  return 0;
}
