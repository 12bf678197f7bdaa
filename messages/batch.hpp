// Unbatching: the messages a Batch payload carries, checked against the
// subject it came on; pure, so that it is fuzzed without NATS or CAF.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "messages/types.hpp"

namespace kvmesh {

// The suffix a batcher appends to its receivers' parent subject.
inline constexpr std::string_view batch_suffix = ".batch";

// A subject up to its last token ("a.b.c" -> "a.b"); "" when it has one.
std::string_view subject_parent(std::string_view subject);

// True for a subject a batcher sends batches on ("<parent>.batch").
bool is_batch_subject(std::string_view subject);

// The items of a Batch that came on `subject`: only those whose subject
// shares the batch's parent, or is that parent, and is no batch itself (a
// sender cannot reach other receivers or nest batches). A malformed payload yields nothing and
// counts in decode_errors(msg_kind::batch).
std::vector<batch_item> unbatch_items(std::string_view subject,
                                      const uint8_t* data, size_t size);

}  // namespace kvmesh
