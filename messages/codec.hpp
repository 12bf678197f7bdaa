// Cap'n Proto codecs of every kvmesh message that crosses a process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "core/pricing.hpp"
#include "messages/kinds.hpp"
#include "messages/types.hpp"

namespace kvmesh {

// Every message kind on the wire, one per top-level struct of
// messages/kvmesh.capnp (KVMESH_MESSAGES in messages/kinds.hpp). It indexes
// the decode error counters.
enum class msg_kind : uint8_t {
#define KVMESH_KIND(k, type, schema) k,
  KVMESH_MESSAGES(KVMESH_KIND)
#undef KVMESH_KIND
};
#define KVMESH_COUNT(k, type, schema) +1
inline constexpr size_t msg_kind_count = 0 KVMESH_MESSAGES(KVMESH_COUNT);
#undef KVMESH_COUNT

// The kind of a message type (msg_kind_of<bid_list> is msg_kind::bids);
// defined for the types encode() takes only.
template <class T>
struct msg_kind_of_t;
#define KVMESH_KIND_OF(k, type, schema)           \
  template <>                                     \
  struct msg_kind_of_t<type> {                    \
    static constexpr msg_kind kind = msg_kind::k; \
  };
KVMESH_MESSAGES(KVMESH_KIND_OF)
#undef KVMESH_KIND_OF
template <class T>
inline constexpr msg_kind msg_kind_of = msg_kind_of_t<T>::kind;

// The kind's struct name in the schema ("RouteRequest", "KvBatch", ...).
const char* to_string(msg_kind kind);

// How many payloads of this kind failed to decode since the process
// started. Process-wide and thread-safe: every NATS callback thread may
// decode, and the metrics export reads these.
uint64_t decode_errors(msg_kind kind);

// -- encoding: one flat array of the message (a segment table and its
// segments), ready to publish. Throws only when out of memory or when a list
// exceeds Cap'n Proto's 2^29 elements.

// encode(const T&) for every T of KVMESH_MESSAGES.
#define KVMESH_ENCODE(k, type, schema) \
  std::vector<uint8_t> encode(const type& x);
KVMESH_MESSAGES(KVMESH_ENCODE)
#undef KVMESH_ENCODE

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
