// Unbatching of Batch payloads, with the subject checks that keep a batch
// inside its receiver.
#include "messages/batch.hpp"

#include "messages/codec.hpp"

namespace kvmesh {

std::string_view subject_parent(std::string_view subject) {
  const size_t dot = subject.rfind('.');
  return dot == std::string_view::npos ? std::string_view{}
                                       : subject.substr(0, dot);
}

bool is_batch_subject(std::string_view subject) {
  return subject.size() > batch_suffix.size() &&
         subject.substr(subject.size() - batch_suffix.size()) == batch_suffix;
}

std::vector<batch_item> unbatch_items(std::string_view subject,
                                      const uint8_t* data, size_t size) {
  std::vector<batch_item> out;
  auto b = decode<batch_msg>(data, size);
  if (!b) return out;  // counted by decode
  const std::string_view parent = subject_parent(subject);
  out.reserve(b->items.size());
  for (auto& i : b->items) {
    // Below the batch's parent, or the parent itself: a receiver whose
    // subject's parent others share (an index shard's P.kv.<shard>) hears
    // its batches on <subject>.batch.
    if ((subject_parent(i.subject) != parent && i.subject != parent) ||
        is_batch_subject(i.subject))
      continue;
    out.push_back(std::move(i));
  }
  return out;
}

}  // namespace kvmesh
