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
    case msg_kind::route_request:
      check<route_request_msg>(kind, data, size);
      break;
    case msg_kind::call_for_bids:
      check<call_for_bids>(kind, data, size);
      break;
    case msg_kind::bid:
      check<bid>(kind, data, size);
      break;
    case msg_kind::award:
      check<award_msg>(kind, data, size);
      break;
    case msg_kind::award_reply:
      check<award_reply>(kind, data, size);
      break;
    case msg_kind::decision:
      check<decision>(kind, data, size);
      break;
    case msg_kind::kv_batch:
      check<kv_batch>(kind, data, size);
      break;
    case msg_kind::worker_status:
      check<worker_status>(kind, data, size);
      break;
    case msg_kind::router_status:
      check<router_status>(kind, data, size);
      break;
    case msg_kind::shard_status:
      check<shard_status>(kind, data, size);
      break;
    case msg_kind::index_query:
      check<index_query>(kind, data, size);
      break;
    case msg_kind::index_reply:
      check<index_reply>(kind, data, size);
      break;
    case msg_kind::price_weights:
      check<price_config>(kind, data, size);
      break;
    case msg_kind::bids:
      check<bid_list>(kind, data, size);
      break;
    case msg_kind::release:
      check<release_msg>(kind, data, size);
      break;
    case msg_kind::request_events:
      check<request_events>(kind, data, size);
      break;
    case msg_kind::admin_request:
      check<admin_request>(kind, data, size);
      break;
    case msg_kind::admin_reply:
      check<admin_reply>(kind, data, size);
      break;
    case msg_kind::batch:
      check<batch_msg>(kind, data, size);
      check_unbatch(data, size);
      break;
    case msg_kind::withdraw:
      check<withdraw_msg>(kind, data, size);
      break;
    case msg_kind::withdraw_reply:
      check<withdraw_reply>(kind, data, size);
      break;
  }
  return 0;
}
