// Decoding of vLLM's and SGLang's KV events: batches and events as arrays
// (msgspec array_like structs, tagged by the type name first) or as maps
// (plain msgspec structs, tagged by a "type" key), whichever the engine
// version sends.
#include "engines/kv_events.hpp"

#include <xxhash.h>

#include <cctype>
#include <limits>

#include "engines/msgpack.hpp"

namespace kvmesh {

const char* to_string(kv_fault f) {
  switch (f) {
    case kv_fault::frames:
      return "frames";
    case kv_fault::sequence:
      return "sequence";
    case kv_fault::msgpack:
      return "msgpack";
    case kv_fault::batch:
      return "batch";
    case kv_fault::event:
      return "event";
    case kv_fault::unknown_event:
      return "unknown_event";
  }
  return "unknown";
}

uint64_t kv_fault_counts::total() const {
  uint64_t t = 0;
  for (uint64_t x : n)
    t += x;
  return t;
}

bool kv_fault_counts::add(kv_fault f, const std::string& why) {
  const size_t i = static_cast<size_t>(f);
  if (n[i]++ > 0) return false;
  first[i] = why;
  return true;
}

namespace {

using msgpack::type;
using msgpack::value;

// An event's fields wherever the layout put them; null when absent.
struct fields {
  const value* hashes = nullptr;
  const value* parent = nullptr;
  const value* tokens = nullptr;
  const value* block_size = nullptr;
  const value* lora_id = nullptr;
  const value* medium = nullptr;
  const value* lora_name = nullptr;
  const value* group = nullptr;
};

const value* at(const value& arr, size_t i) {
  return i < arr.items.size() ? &arr.items[i] : nullptr;
}

bool absent(const value* v) {
  return v == nullptr || v->is(type::nil);
}

// The positions of the array layouts. vLLM appended fields over versions
// (medium, then lora_name, extra_keys, group_idx and more); SGLang has the
// first six, then medium, then a metadata map where vLLM has lora_name.
fields positional(const value& v, engine_kv_event::kind_t kind) {
  fields f;
  if (kind == engine_kv_event::stored) {
    f.hashes = at(v, 1);
    f.parent = at(v, 2);
    f.tokens = at(v, 3);
    f.block_size = at(v, 4);
    f.lora_id = at(v, 5);
    f.medium = at(v, 6);
    // A metadata map (SGLang) in this place is not a LoRA name.
    if (const value* name = at(v, 7);
        name && (name->is(type::str) || name->is(type::nil)))
      f.lora_name = name;
    f.group = at(v, 9);
  } else if (kind == engine_kv_event::removed) {
    f.hashes = at(v, 1);
    f.medium = at(v, 2);
    f.group = at(v, 3);
  }
  return f;
}

fields named(const value& v) {
  fields f;
  f.hashes = v.find("block_hashes");
  f.parent = v.find("parent_block_hash");
  f.tokens = v.find("token_ids");
  f.block_size = v.find("block_size");
  f.lora_id = v.find("lora_id");
  f.medium = v.find("medium");
  f.lora_name = v.find("lora_name");
  f.group = v.find("group_idx");
  return f;
}

bool read_hash(const value& v, uint64_t& out) {
  if (v.is(type::uint)) {
    out = v.u;
    return true;
  }
  if (v.is(type::sint)) {
    out = static_cast<uint64_t>(v.i);
    return true;
  }
  if (v.is(type::bin) && !v.raw.empty()) {
    out = XXH3_64bits(v.raw.data(), v.raw.size());
    return true;
  }
  return false;
}

bool read_int(const value& v, int64_t& out) {
  if (v.is(type::sint)) {
    out = v.i;
    return true;
  }
  if (v.is(type::uint) &&
      v.u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    out = static_cast<int64_t>(v.u);
    return true;
  }
  return false;
}

// Fills `e` from `f`; "" on success, else what is wrong.
std::string convert(const fields& f, engine_kv_event& e) {
  if (e.kind == engine_kv_event::cleared) return {};
  if (!f.hashes || !f.hashes->is(type::array))
    return "block_hashes is not an array";
  e.hashes.reserve(f.hashes->items.size());
  for (const value& h : f.hashes->items) {
    uint64_t key = 0;
    if (!read_hash(h, key))
      return std::string("a block hash is a ") + msgpack::to_string(h.kind) +
             ", not an integer or bytes";
    e.hashes.push_back(key);
  }
  if (!absent(f.medium)) {
    if (!f.medium->is(type::str)) return "medium is not a string";
    e.medium = std::string(f.medium->raw);
  }
  if (!absent(f.group) && !read_int(*f.group, e.group))
    return "group_idx is not an integer";
  if (e.kind == engine_kv_event::removed) return {};
  if (!absent(f.parent)) {
    if (!read_hash(*f.parent, e.parent))
      return "parent_block_hash is not an integer or bytes";
    e.has_parent = true;
  }
  if (!f.tokens || !f.tokens->is(type::array))
    return "token_ids is not an array";
  e.tokens.reserve(f.tokens->items.size());
  for (const value& t : f.tokens->items) {
    if (!t.is(type::uint) || t.u > std::numeric_limits<uint32_t>::max())
      return std::string("a token id is a ") + msgpack::to_string(t.kind) +
             (t.is(type::uint) ? " beyond 32 bits" : "") + ", not a token id";
    e.tokens.push_back(static_cast<uint32_t>(t.u));
  }
  if (!f.block_size || !f.block_size->is(type::uint) || f.block_size->u == 0 ||
      f.block_size->u > (1u << 30))
    return "block_size is not a positive integer";
  e.block_size = static_cast<uint32_t>(f.block_size->u);
  if (!absent(f.lora_id)) {
    if (!read_int(*f.lora_id, e.lora_id)) return "lora_id is not an integer";
    e.has_lora_id = true;
  }
  if (!absent(f.lora_name)) {
    if (!f.lora_name->is(type::str)) return "lora_name is not a string";
    e.lora_name = std::string(f.lora_name->raw);
  }
  return {};
}

// Decodes one event into `out`; on failure counts it and returns false.
bool decode_event(const value& v, engine_kv_event& out,
                  kv_fault_counts& faults) {
  const value* tag = nullptr;
  if (v.is(type::array) && !v.items.empty())
    tag = &v.items[0];
  else if (v.is(type::map))
    tag = v.find("type");
  if (!tag || !tag->is(type::str)) {
    faults.add(kv_fault::event, std::string("an event is a ") +
                                    msgpack::to_string(v.kind) +
                                    " without a type name");
    return false;
  }
  const std::string_view name = tag->raw;
  if (name == "BlockStored")
    out.kind = engine_kv_event::stored;
  else if (name == "BlockRemoved")
    out.kind = engine_kv_event::removed;
  else if (name == "AllBlocksCleared")
    out.kind = engine_kv_event::cleared;
  else {
    faults.add(kv_fault::unknown_event,
               "unknown event type '" + std::string(name.substr(0, 64)) + "'");
    return false;
  }
  const fields f = v.is(type::array) ? positional(v, out.kind) : named(v);
  if (auto why = convert(f, out); !why.empty()) {
    faults.add(kv_fault::event, std::string(name) + ": " + why);
    return false;
  }
  return true;
}

error batch_error(kv_fault_counts& faults, kv_fault f, const std::string& why) {
  faults.add(f, why);
  return make_error(ec::parse_error, "KV event batch: " + why);
}

}  // namespace

expected<uint64_t> decode_kv_sequence(std::string_view frame) {
  if (frame.size() != 8)
    return make_error(
        ec::parse_error,
        "sequence frame of " + std::to_string(frame.size()) + " bytes, not 8");
  uint64_t seq = 0;
  for (unsigned char c : frame)
    seq = (seq << 8) | c;
  return seq;
}

expected<engine_kv_batch> decode_kv_batch(const uint8_t* data, size_t size,
                                          kv_fault_counts& faults) {
  auto root = msgpack::parse(data, size);
  if (!root) return batch_error(faults, kv_fault::msgpack, root.err().message);
  const value& v = *root;
  const value* ts = nullptr;
  const value* events = nullptr;
  const value* rank = nullptr;
  if (v.is(type::array)) {
    // [ts, events] (SGLang, older vLLM) or [ts, events, rank]
    ts = at(v, 0);
    events = at(v, 1);
    rank = at(v, 2);
  } else if (v.is(type::map)) {
    ts = v.find("ts");
    events = v.find("events");
    rank = v.find("data_parallel_rank");
    if (!rank) rank = v.find("attn_dp_rank");  // SGLang's name
  } else {
    return batch_error(faults, kv_fault::batch,
                       std::string("the payload is a ") +
                           msgpack::to_string(v.kind) +
                           ", not a batch (array or map)");
  }
  if (!events || !events->is(type::array))
    return batch_error(faults, kv_fault::batch,
                       "the batch has no array of events");
  engine_kv_batch b;
  if (ts && ts->is(type::f64))
    b.ts = ts->f;
  else if (ts && ts->is(type::uint))
    b.ts = static_cast<double>(ts->u);
  else if (!absent(ts))
    return batch_error(faults, kv_fault::batch, "the batch's ts is no number");
  if (!absent(rank)) {
    if (!read_int(*rank, b.rank) || b.rank < 0)
      return batch_error(faults, kv_fault::batch,
                         "the batch's data-parallel rank is no rank");
    b.has_rank = true;
  }
  b.events.reserve(events->items.size());
  for (const value& ev : events->items) {
    engine_kv_event e;
    if (decode_event(ev, e, faults)) b.events.push_back(std::move(e));
  }
  return b;
}

expected<engine_kv_message> decode_kv_message(
    const std::vector<std::string_view>& frames, kv_fault_counts& faults) {
  if (frames.size() != 3) {
    const std::string why = "a message of " + std::to_string(frames.size()) +
                            " frames, not 3 (topic, sequence, payload)";
    faults.add(kv_fault::frames, why);
    return make_error(ec::parse_error, why);
  }
  auto seq = decode_kv_sequence(frames[1]);
  if (!seq) {
    faults.add(kv_fault::sequence, seq.err().message);
    return seq.err();
  }
  auto batch =
      decode_kv_batch(reinterpret_cast<const uint8_t*>(frames[2].data()),
                      frames[2].size(), faults);
  if (!batch) return batch.err();
  engine_kv_message m;
  m.topic = std::string(frames[0]);
  m.seq = *seq;
  m.batch = std::move(*batch);
  return m;
}

bool tier_of_medium(std::string_view medium, tier& out) {
  std::string up;
  for (char c : medium)
    up += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto has = [&](const char* s) { return up.find(s) != std::string::npos; };
  auto starts = [&](const char* s) { return up.rfind(s, 0) == 0; };
  if (up.empty() || starts("GPU") || starts("CUDA") || up == "HBM" ||
      up == "DEVICE") {
    out = tier::gpu;
    return true;
  }
  if (starts("CPU") || has("HOST") || has("DRAM") || has("PINNED") ||
      up == "RAM" || up == "MEMORY") {
    out = tier::host;
    return true;
  }
  if (has("DISK") || has("SSD") || has("NVME") || starts("FILE") ||
      up == "STORAGE") {
    out = tier::disk;
    return true;
  }
  return false;
}

}  // namespace kvmesh
