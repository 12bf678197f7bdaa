// Tests of engines/kv_events: each layout vLLM and SGLang have published,
// both kinds of block hash, and frames that must be counted and skipped.
#include "engines/kv_events.hpp"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <random>

#include "msgpack_writer.hpp"
#include "tests/samples.hpp"

namespace kvmesh {
namespace {

using test::from_hex;
using test::mp_writer;
using test::seq_frame;

expected<engine_kv_batch> batch_of(const std::vector<uint8_t>& b,
                                   kv_fault_counts& faults) {
  return decode_kv_batch(b.data(), b.size(), faults);
}

// msgspec's bytes for KVEventBatch(ts=1.5, events=[BlockStored(
// block_hashes=[1], parent_block_hash=None, token_ids=[1, 2], block_size=2,
// lora_id=None, medium="GPU")]) with array_like structs (vLLM 0.9-0.10).
constexpr const char* array_layout_hex =
    "92cb3ff80000000000009197ab426c6f636b53746f7265649101c092010202c0a3475055";

// The same for plain structs (vLLM main): {"ts": 1.5, "events": [{"type":
// "BlockRemoved", "block_hashes": [b"\x01" * 32], "medium": "CPU"}],
// "data_parallel_rank": 1}.
constexpr const char* map_layout_hex =
    "83a27473cb3ff8000000000000a66576656e74739183a474797065ac426c6f636b52656d"
    "6f766564ac626c6f636b5f68617368657391c42001010101010101010101010101010101"
    "01010101010101010101010101010101a66d656469756da3435055b2646174615f706172"
    "616c6c656c5f72616e6b01";

TEST(kv_events, array_layout_as_msgspec_encodes_it) {
  kv_fault_counts faults;
  auto b = batch_of(from_hex(array_layout_hex), faults);
  ASSERT_TRUE(b) << b.err().message;
  EXPECT_EQ(b->ts, 1.5);
  EXPECT_FALSE(b->has_rank);
  ASSERT_EQ(b->events.size(), 1u);
  const auto& e = b->events[0];
  EXPECT_EQ(e.kind, engine_kv_event::stored);
  EXPECT_EQ(e.hashes, std::vector<uint64_t>{1});
  EXPECT_FALSE(e.has_parent);
  EXPECT_EQ(e.tokens, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(e.block_size, 2u);
  EXPECT_FALSE(e.has_lora_id);
  EXPECT_EQ(e.medium, "GPU");
  EXPECT_EQ(faults.total(), 0u);
}

TEST(kv_events, map_layout_with_byte_string_hashes) {
  kv_fault_counts faults;
  auto b = batch_of(from_hex(map_layout_hex), faults);
  ASSERT_TRUE(b) << b.err().message;
  EXPECT_TRUE(b->has_rank);
  EXPECT_EQ(b->rank, 1);
  ASSERT_EQ(b->events.size(), 1u);
  const auto& e = b->events[0];
  EXPECT_EQ(e.kind, engine_kv_event::removed);
  const std::string sha(32, '\x01');
  ASSERT_EQ(e.hashes.size(), 1u);
  EXPECT_EQ(e.hashes[0], XXH3_64bits(sha.data(), sha.size()));
  EXPECT_EQ(e.medium, "CPU");
}

// The first vLLM layout (v0.9): no rank, no medium, integer hashes.
TEST(kv_events, oldest_vllm_and_sglang_arrays) {
  kv_fault_counts faults;
  auto b = batch_of(test::vllm_array_batch().bytes(), faults);
  ASSERT_TRUE(b) << b.err().message;
  ASSERT_EQ(b->events.size(), 3u);
  EXPECT_EQ(b->events[0].kind, engine_kv_event::stored);
  EXPECT_TRUE(b->events[0].has_parent);
  EXPECT_EQ(b->events[0].parent, 10u);
  EXPECT_EQ(b->events[0].hashes, (std::vector<uint64_t>{11, 12}));
  EXPECT_EQ(b->events[0].medium, "");
  EXPECT_EQ(b->events[1].kind, engine_kv_event::removed);
  EXPECT_EQ(b->events[2].kind, engine_kv_event::cleared);
  EXPECT_EQ(faults.total(), 0u);
}

// Later arrays: rank, medium, lora_name, extra_keys, group_idx and fields
// a newer engine may append.
TEST(kv_events, longest_vllm_array_and_unknown_trailing_fields) {
  mp_writer w;
  w.array(3).f64(2.0).array(2);
  w.array(13)
      .str("BlockStored")
      .uints({21})
      .nil()
      .uints({5, 6})
      .uint(2)
      .uint(3)
      .str("CPU")
      .str("adapter-a");
  w.array(1).array(2).str("mm").uint(9);  // extra_keys: one per block
  w.uint(0).str("full_attention").nil().str("from the future");
  w.array(5).str("BlockRemoved").uints({21}).str("GPU").uint(1).nil();
  w.uint(3);  // the rank
  kv_fault_counts faults;
  auto b = batch_of(w.bytes(), faults);
  ASSERT_TRUE(b) << b.err().message;
  EXPECT_TRUE(b->has_rank);
  EXPECT_EQ(b->rank, 3);
  ASSERT_EQ(b->events.size(), 2u);
  const auto& s = b->events[0];
  EXPECT_TRUE(s.has_lora_id);
  EXPECT_EQ(s.lora_id, 3);
  EXPECT_EQ(s.lora_name, "adapter-a");
  EXPECT_EQ(s.medium, "CPU");
  EXPECT_EQ(s.group, 0);
  EXPECT_EQ(b->events[1].group, 1);
  EXPECT_EQ(b->events[1].medium, "GPU");
  EXPECT_EQ(faults.total(), 0u);
}

// SGLang (test::sglang_batch): the metadata map, negative hashes.
TEST(kv_events, sglang_arrays_with_metadata_and_negative_hashes) {
  kv_fault_counts faults;
  auto b = batch_of(test::sglang_batch().bytes(), faults);
  ASSERT_TRUE(b) << b.err().message;
  EXPECT_EQ(b->rank, 2);
  ASSERT_EQ(b->events.size(), 1u);
  const auto& e = b->events[0];
  EXPECT_EQ(e.hashes[0], static_cast<uint64_t>(-5123456789012345678ll));
  EXPECT_EQ(e.parent, static_cast<uint64_t>(int64_t{-7}));
  EXPECT_EQ(e.lora_name, "");
  EXPECT_EQ(e.medium, "CPU_PINNED");
}

// vLLM 0.28: an array batch of map events; newest: all maps. Fields come in
// any order; unknown ones are ignored.
TEST(kv_events, map_events_in_either_batch) {
  auto stored = [](mp_writer& w) {
    w.map(10).str("type").str("BlockStored");
    w.str("block_hashes")
        .array(2)
        .bin(std::string(32, 'a'))
        .bin(std::string(32, 'b'));
    w.str("parent_block_hash").bin(std::string(32, 'p'));
    w.str("token_ids").uints({1, 2, 3, 4});
    w.str("block_size").uint(2);
    w.str("lora_id").nil();
    w.str("medium").str("GPU");
    w.str("lora_name").str("l");
    w.str("kv_cache_spec_kind").str("full_attention");
    w.str("group_idx").uint(0);
  };
  mp_writer a;
  a.array(3).f64(1.0).array(1);
  stored(a);
  a.nil();  // rank None
  mp_writer m;
  m.map(3).str("events").array(2);
  stored(m);
  m.map(1).str("type").str("AllBlocksCleared");
  m.str("attn_dp_rank").uint(4).str("ts").f64(5.0);
  for (const auto* w : {&a, &m}) {
    kv_fault_counts faults;
    auto b = batch_of(w->bytes(), faults);
    ASSERT_TRUE(b) << b.err().message;
    ASSERT_GE(b->events.size(), 1u);
    const auto& e = b->events[0];
    EXPECT_EQ(e.kind, engine_kv_event::stored);
    const std::string pa(32, 'a'), pp(32, 'p');
    EXPECT_EQ(e.hashes[0], XXH3_64bits(pa.data(), pa.size()));
    EXPECT_TRUE(e.has_parent);
    EXPECT_EQ(e.parent, XXH3_64bits(pp.data(), pp.size()));
    EXPECT_EQ(e.tokens.size(), 4u);
    EXPECT_EQ(e.lora_name, "l");
    EXPECT_EQ(faults.total(), 0u);
  }
  kv_fault_counts faults;
  auto b = batch_of(m.bytes(), faults);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->ts, 5.0);
  EXPECT_EQ(b->rank, 4);
  EXPECT_EQ(b->events[1].kind, engine_kv_event::cleared);
  auto ab = batch_of(a.bytes(), faults);
  ASSERT_TRUE(ab);
  EXPECT_FALSE(ab->has_rank);
}

TEST(kv_events, bad_events_are_counted_and_the_rest_kept) {
  mp_writer w;
  w.array(2).f64(1.0).array(6);
  w.array(2).str("BlockRemoved").uints({1});  // good
  w.array(2).str("BlockUpdated").uints({1});  // unknown
  w.array(6)
      .str("BlockStored")
      .uints({2})
      .nil()
      .array(1)
      .str("x")
      .uint(1)
      .nil();                                           // bad token
  w.array(2).str("BlockRemoved").array(1).str("hash");  // bad hash
  w.uint(5);                                            // no tag
  w.array(6).str("BlockStored").uints({3}).nil().uints({1}).uint(0).nil();
  kv_fault_counts faults;
  auto b = batch_of(w.bytes(), faults);
  ASSERT_TRUE(b) << b.err().message;
  ASSERT_EQ(b->events.size(), 1u);
  EXPECT_EQ(faults[kv_fault::unknown_event], 1u);
  EXPECT_EQ(faults[kv_fault::event], 4u);
  EXPECT_NE(faults.first[static_cast<size_t>(kv_fault::unknown_event)].find(
                "BlockUpdated"),
            std::string::npos);
  EXPECT_NE(faults.first[static_cast<size_t>(kv_fault::event)].find("token"),
            std::string::npos);
}

TEST(kv_events, frames_and_sequence_numbers) {
  kv_fault_counts faults;
  const auto payload = from_hex(array_layout_hex);
  const std::string p(payload.begin(), payload.end());
  const std::string seq = seq_frame(0x0102030405060708ull);
  auto m = decode_kv_message({"kv-events", seq, p}, faults);
  ASSERT_TRUE(m) << m.err().message;
  EXPECT_EQ(m->topic, "kv-events");
  EXPECT_EQ(m->seq, 0x0102030405060708ull);
  EXPECT_EQ(m->batch.events.size(), 1u);

  EXPECT_FALSE(decode_kv_message({"t", p}, faults));
  EXPECT_FALSE(decode_kv_message({"t", "1234567", p}, faults));
  EXPECT_FALSE(decode_kv_message({"t", seq, "\xc1"}, faults));
  EXPECT_FALSE(decode_kv_message({"t", seq, "\x07"}, faults));  // an int
  EXPECT_FALSE(decode_kv_message({"t", seq, "\x92\x01\x02"}, faults));
  EXPECT_EQ(faults[kv_fault::frames], 1u);
  EXPECT_EQ(faults[kv_fault::sequence], 1u);
  EXPECT_EQ(faults[kv_fault::msgpack], 1u);
  EXPECT_EQ(faults[kv_fault::batch], 2u);
  // The replay end marker, -1 as 8 signed bytes.
  auto end = decode_kv_sequence(std::string(8, '\xff'));
  ASSERT_TRUE(end);
  EXPECT_EQ(*end, UINT64_MAX);
}

TEST(kv_events, every_truncation_fails_cleanly) {
  mp_writer w;
  w.array(3).f64(1.0).array(2);
  w.array(7)
      .str("BlockStored")
      .array(2)
      .bin(std::string(32, 'h'))
      .uint(9)
      .nil()
      .uints({1, 2, 3, 4})
      .uint(2)
      .nil()
      .str("GPU");
  w.map(3)
      .str("type")
      .str("BlockRemoved")
      .str("block_hashes")
      .uints({7})
      .str("medium")
      .nil();
  w.uint(0);
  const auto& full = w.bytes();
  kv_fault_counts ok;
  ASSERT_TRUE(decode_kv_batch(full.data(), full.size(), ok));
  for (size_t n = 0; n < full.size(); ++n) {
    kv_fault_counts faults;
    auto b = decode_kv_batch(full.data(), n, faults);
    EXPECT_FALSE(b) << "prefix of " << n << " bytes";
    EXPECT_EQ(faults[kv_fault::msgpack], 1u) << n;
  }
}

TEST(kv_events, random_and_mutated_frames_never_crash) {
  std::mt19937_64 rng(42);
  mp_writer w;
  w.array(3).f64(1.0).array(2);
  w.array(7)
      .str("BlockStored")
      .array(2)
      .sint(-3)
      .uint(9)
      .uint(1)
      .uints({1, 2, 3, 4})
      .uint(2)
      .uint(1)
      .str("CPU");
  w.array(1).str("AllBlocksCleared");
  w.uint(0);
  const auto good = w.text();
  kv_fault_counts faults;
  uint64_t decoded = 0;
  for (int round = 0; round < 30000; ++round) {
    std::string payload;
    if (round % 2 == 0) {
      payload.resize(rng() % 96);
      for (auto& c : payload)
        c = static_cast<char>(rng());
    } else {
      payload = good;
      for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k)
        payload[rng() % payload.size()] = static_cast<char>(rng());
    }
    std::vector<std::string> frames{"topic", seq_frame(rng()), payload};
    if (rng() % 16 == 0) frames.pop_back();
    if (rng() % 16 == 0) frames[1].pop_back();
    std::vector<std::string_view> views(frames.begin(), frames.end());
    if (auto m = decode_kv_message(views, faults)) {
      ++decoded;
      for (const auto& e : m->batch.events) {
        if (e.kind == engine_kv_event::stored) {
          EXPECT_LE(e.tokens.size(), payload.size());
        }
      }
    }
  }
  EXPECT_GT(faults.total(), 10000u);
  EXPECT_GT(decoded, 0u);
}

TEST(kv_events, media_map_to_tiers) {
  struct row {
    const char* medium;
    bool known;
    tier t;
  };
  for (const row& r : std::initializer_list<row>{
           {"", true, tier::gpu},
           {"GPU", true, tier::gpu},
           {"cuda", true, tier::gpu},
           {"CPU", true, tier::host},
           {"CPU_PINNED", true, tier::host},
           {"host", true, tier::host},
           {"DISK", true, tier::disk},
           {"local_disk", true, tier::disk},
           {"NVMe", true, tier::disk},
           {"SSD", true, tier::disk},
           {"EXTERNAL", false, tier::gpu},
           {"LMCACHE", false, tier::gpu},
       }) {
    tier t = tier::gpu;
    EXPECT_EQ(tier_of_medium(r.medium, t), r.known) << r.medium;
    if (r.known) {
      EXPECT_EQ(t, r.t) << r.medium;
    }
  }
}

}  // namespace
}  // namespace kvmesh
