// Fuzzes the Mooncake trace line parser (`kvmesh sim` and `kvmesh bench`
// replay trace files from anywhere): a parsed line, written back as a
// trace line, parses to the same request.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/trace.hpp"
#include "tests/fuzz/check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvmesh;
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  auto r = parse_trace_line(line, "fuzz:1");
  if (!r) {
    FUZZ_CHECK(r.err().code == ec::parse_error, "error code");
    FUZZ_CHECK(r.err().message.rfind("fuzz:1: ", 0) == 0,
               "the error names the line");
    return 0;
  }
  FUZZ_CHECK(r->input_tokens > 0 && !r->blocks.empty(),
             "a request has a prompt");
  const nlohmann::json again{
      {"timestamp", static_cast<uint64_t>(r->arrival_ms)},
      {"input_length", r->input_tokens},
      {"output_length", r->output_tokens},
      {"hash_ids", r->blocks}};
  auto s = parse_trace_line(again.dump(), "fuzz:2");
  FUZZ_CHECK(static_cast<bool>(s), "the line written back parses");
  FUZZ_CHECK(s->arrival_ms == r->arrival_ms &&
                 s->input_tokens == r->input_tokens &&
                 s->output_tokens == r->output_tokens && s->blocks == r->blocks,
             "the line written back is the same request");
  return 0;
}
