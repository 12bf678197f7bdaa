// Fuzzes the JSON route requests a router takes from any NATS client, and
// the decision that answers a refused one.
//
// Input: byte 0 picks the mesh's block size, the rest is the request.
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "messages/json.hpp"
#include "tests/fuzz/check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvmesh;
  if (size == 0) return 0;
  const uint32_t block_tokens = data[0] % 65;  // 0: refused, not a crash
  const std::string_view text(reinterpret_cast<const char*>(data + 1),
                              size - 1);
  const uint64_t before = json_decode_errors();
  auto r = parse_route_json(text, block_tokens);
  if (!r) {
    FUZZ_CHECK(json_decode_errors() == before + 1, "one error counted");
    FUZZ_CHECK(r.err().message.rfind("route request: ", 0) == 0,
               "the error says what was refused");
    // The router answers the client with the error: it must serialize.
    decision d;
    d.request = 1;
    d.error = r.err().message;
    auto back = nlohmann::json::parse(decision_json(d), nullptr, false);
    FUZZ_CHECK(!back.is_discarded(), "the refusal is JSON");
    FUZZ_CHECK(back.value("error", "") == d.error, "the refusal says why");
    return 0;
  }
  FUZZ_CHECK(json_decode_errors() == before, "no error counted");
  // No block is a prompt shorter than one: routed on its length alone.
  FUZZ_CHECK(r->input_tokens > 0, "a request has a prompt length");
  // The request as chained hashes reads back the same.
  const nlohmann::json again{{"id", r->id},
                             {"blocks", r->blocks},
                             {"input_tokens", r->input_tokens},
                             {"output_tokens", r->output_tokens}};
  auto s = parse_route_json(again.dump(), block_tokens);
  FUZZ_CHECK(static_cast<bool>(s), "the request as blocks parses");
  FUZZ_CHECK(s->id == r->id && s->blocks == r->blocks &&
                 s->input_tokens == r->input_tokens &&
                 s->output_tokens == r->output_tokens,
             "the request as blocks is the same request");
  return 0;
}
