// Cap'n Proto codecs of every kvmesh message that crosses a process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "core/pricing.hpp"
#include "messages/types.hpp"

namespace kvmesh {

// Every message kind on the wire, one per top-level struct of
// messages/kvmesh.capnp. It indexes the decode error counters.
enum class msg_kind : uint8_t {
  route_request,
  call_for_bids,
  bid,
  award,
  award_reply,
  decision,
  kv_batch,
  worker_status,
  router_status,
  shard_status,
  index_query,
  index_reply,
  price_weights,
  bids,
  release,
  request_events,
  admin_request,
  admin_reply,
  batch,
  withdraw,
  withdraw_reply,
};
inline constexpr size_t msg_kind_count = 21;

// The kind's struct name in the schema ("RouteRequest", "KvBatch", ...).
const char* to_string(msg_kind kind);

// How many payloads of this kind failed to decode since the process
// started. Process-wide and thread-safe: every NATS callback thread may
// decode, and the metrics export reads these.
uint64_t decode_errors(msg_kind kind);

// -- encoding: one flat array of the message (a segment table and its
// segments), ready to publish. Throws only when out of memory or when a list
// exceeds Cap'n Proto's 2^29 elements.

std::vector<uint8_t> encode(const route_request_msg& x);
std::vector<uint8_t> encode(const call_for_bids& x);
std::vector<uint8_t> encode(const bid& x);
std::vector<uint8_t> encode(const award_msg& x);
std::vector<uint8_t> encode(const award_reply& x);
std::vector<uint8_t> encode(const decision& x);
std::vector<uint8_t> encode(const kv_batch& x);
std::vector<uint8_t> encode(const worker_status& x);
std::vector<uint8_t> encode(const router_status& x);
std::vector<uint8_t> encode(const shard_status& x);
std::vector<uint8_t> encode(const index_query& x);
std::vector<uint8_t> encode(const index_reply& x);
std::vector<uint8_t> encode(const price_config& x);
std::vector<uint8_t> encode(const bid_list& x);
std::vector<uint8_t> encode(const release_msg& x);
std::vector<uint8_t> encode(const request_events& x);
std::vector<uint8_t> encode(const admin_request& x);
std::vector<uint8_t> encode(const admin_reply& x);
std::vector<uint8_t> encode(const batch_msg& x);
std::vector<uint8_t> encode(const withdraw_msg& x);
std::vector<uint8_t> encode(const withdraw_reply& x);

// One page of the ADMIN's workers listing: those of `all` with id `from`
// or higher, in id order, as many as take at most `budget` bytes of the
// encoded AdminReply's list (always one at least, so that paging moves
// on); out.more when some are left. Sorts `all` by id. A fleet's listing
// can outgrow one NATS message (about 4,700 workers in 1 MiB).
void fill_worker_page(std::vector<worker_status>& all, uint32_t from,
                      size_t budget, admin_reply& out);

// -- decoding untrusted bytes: any alignment, any content. Never throws:
// anything malformed (size, segment table, pointers, limits, enums, a
// version of 0, a missing nested request, trailing bytes) is an
// ec::parse_error naming the message and what failed, and counts in
// decode_errors(). A newer version decodes; the fields it added are skipped.
//
// T is one of the types encode() takes; others do not link.
template <class T>
expected<T> decode(const uint8_t* data, size_t size);

template <class T>
expected<T> decode(const std::vector<uint8_t>& bytes) {
  return decode<T>(bytes.data(), bytes.size());
}

}  // namespace kvmesh
