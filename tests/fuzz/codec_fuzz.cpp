// Fuzzes the Cap'n Proto decoders of every message kvmesh takes from NATS,
// and the unbatching of Batch payloads. The first byte picks the kind.
#include <cstdint>
#include <string>
#include <vector>

#include "messages/batch.hpp"
#include "messages/codec.hpp"
#include "tests/fuzz/check.hpp"

namespace kvmesh {
namespace {

// A decoded message re-encodes to bytes that decode to the same message:
// the encoding of the second decode equals that of the first, byte for
// byte (a field the reader drops or mangles shows as a difference). A
// failure is a parse_error that names the kind and counts once.
template <class T>
void check(msg_kind kind, const uint8_t* data, size_t size) {
  const uint64_t before = decode_errors(kind);
  auto x = decode<T>(data, size);
  if (!x) {
    FUZZ_CHECK(x.err().code == ec::parse_error, "error code");
    FUZZ_CHECK(x.err().message.rfind(to_string(kind), 0) == 0,
               "the error names the message");
    FUZZ_CHECK(decode_errors(kind) == before + 1, "one error counted");
    return;
  }
  FUZZ_CHECK(decode_errors(kind) == before, "no error counted");
  const std::vector<uint8_t> once = encode(*x);
  auto y = decode<T>(once);
  FUZZ_CHECK(static_cast<bool>(y), "a re-encoded message decodes");
  FUZZ_CHECK(encode(*y) == once, "the round trip is stable");
}

void check_unbatch(const uint8_t* data, size_t size) {
  // The subject's parent is what every kept item must share.
  const std::string subject = "kvmesh.agent.a1.batch";
  for (const auto& i : unbatch_items(subject, data, size)) {
    FUZZ_CHECK(subject_parent(i.subject) == subject_parent(subject) ||
                   i.subject == subject_parent(subject),
               "an item stays at or below the batch's parent");
    FUZZ_CHECK(!is_batch_subject(i.subject), "batches do not nest");
  }
}

}  // namespace
}  // namespace kvmesh

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvmesh;
  if (size == 0) return 0;
  const auto kind = static_cast<msg_kind>(data[0] % msg_kind_count);
  ++data;
  --size;
  switch (kind) {
#define KVMESH_FUZZ(k, type, schema) \
  case msg_kind::k:                  \
    check<type>(kind, data, size);   \
    break;
    KVMESH_MESSAGES(KVMESH_FUZZ)
#undef KVMESH_FUZZ
  }
  if (kind == msg_kind::batch) check_unbatch(data, size);
  return 0;
}
