// Tests of messages/codec on malformed or hostile payloads: every one an
// error that names its message and counts once, never a crash.
#include "messages/codec.hpp"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "messages/kvmesh.capnp.h"
#include "tests/messages/codec_samples.hpp"

namespace kvmesh {
namespace {

using namespace codec_test;

// -- malformed input ---------------------------------------------------------

TEST(codec, empty_payload_is_an_error) {
  for_each_sample([](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    expect_rejected<T>(nullptr, 0, "empty");
    auto b = encode(x);
    expect_rejected<T>(b.data(), 0, "empty");
  });
}

TEST(codec, size_not_a_multiple_of_8_is_an_error) {
  for_each_sample([](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    auto b = encode(x);
    for (size_t n = 1; n < 8; ++n) {
      expect_rejected<T>(b.data(), n, "8-byte words");
      expect_rejected<T>(b.data(), b.size() - n, "8-byte words");
      bytes longer = b;
      longer.resize(b.size() + n, 0);
      expect_rejected<T>(longer, "8-byte words");
    }
  });
}

TEST(codec, truncated_message_is_an_error) {
  for_each_sample([](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    auto b = encode(x);
    for (size_t n = 8; n < b.size(); n += 8)
      expect_rejected<T>(b.data(), n);
  });
}

TEST(codec, trailing_words_are_an_error) {
  for_each_sample([](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    auto b = encode(x);
    b.resize(b.size() + 8, 0);
    expect_rejected<T>(b, "after the end");
  });
}

TEST(codec, out_of_range_enums_are_errors) {
  auto batch = [](uint16_t kind, uint16_t where) {
    capnp::MallocMessageBuilder m;
    auto b = m.initRoot<wire::KvBatch>();
    b.setVersion(1);
    b.setWorker(1);
    auto events = b.initEvents(2);
    events[0].setHash(1);
    events[1].setKind(static_cast<wire::EventKind>(kind));
    events[1].setTier(static_cast<wire::Tier>(where));
    events[1].setHash(2);
    return flat(m);
  };
  expect_rejected<kv_batch>(batch(0, 3), "event 1: tier 3");
  expect_rejected<kv_batch>(batch(2, 0), "event 1: kind 2");
  expect_rejected<kv_batch>(batch(0xFFFF, 0xFFFF), "event 1: kind 65535");
  // The last enumerants are in range.
  auto got = decode<kv_batch>(batch(1, 2));
  ASSERT_TRUE(got) << got.err().message;
  EXPECT_EQ(got->events[1].kind, cache_event::removed);
  EXPECT_EQ(got->events[1].where, tier::disk);
}

TEST(codec, a_missing_request_is_an_error) {
  {
    capnp::MallocMessageBuilder m;
    m.initRoot<wire::CallForBids>().setVersion(1);
    expect_rejected<call_for_bids>(flat(m), "no request");
  }
  {
    capnp::MallocMessageBuilder m;
    m.initRoot<wire::Award>().setVersion(1);
    expect_rejected<award_msg>(flat(m), "no request");
  }
}

TEST(codec, a_list_beyond_its_segment_is_an_error) {
  auto b = encode(index_query{{1, 2}});
  check_layout(b);
  // IndexQuery's root: one data word (version), then the chain's list
  // pointer, whose upper half is the element size (3 bits) and the count.
  const size_t pointer = 24;
  uint32_t upper = 5 | (1u << 28) << 3;  // 8-byte elements, 2^28 of them
  std::memcpy(&b[pointer + 4], &upper, sizeof upper);
  expect_rejected<index_query>(b);
}

// -- fuzzing (fixed seeds: failures reproduce) -------------------------------

// Decodes every payload as T; returns how many failed, and checks that each
// failure, and only a failure, was counted in T's counter.
template <class T>
size_t decode_all(const std::vector<bytes>& payloads) {
  auto before = counters();
  size_t failed = 0;
  for (const auto& p : payloads)
    failed += decode<T>(p) ? 0 : 1;
  expect_counted<T>(before, failed);
  return failed;
}

TEST(codec, random_bytes_are_errors) {
  std::mt19937_64 rng(20240611);
  std::vector<bytes> payloads;
  for (size_t size = 1; size <= 4096; size += size < 128 ? 1 : 61) {
    for (int rep = 0; rep < 3; ++rep) {
      bytes p(size);
      for (auto& c : p)
        c = static_cast<uint8_t>(rng());
      payloads.push_back(std::move(p));
    }
  }
  for_each_sample([&](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    EXPECT_EQ(decode_all<T>(payloads), payloads.size()) << name_of<T>();
  });
}

TEST(codec, random_words_behind_a_valid_root_never_crash) {
  // A valid segment table and a root struct pointer that fits, then random
  // words: the fields, lists and pointers in them get validated, not just
  // the framing.
  std::mt19937_64 rng(7);
  std::vector<bytes> payloads;
  for (uint32_t words = 2; words <= 64; ++words) {
    for (int rep = 0; rep < 40; ++rep) {
      std::vector<uint32_t> w(2 + 2 * words);
      w[0] = 0;  // one segment
      w[1] = words;
      uint32_t data = static_cast<uint32_t>(rng() % 4);
      uint32_t pointers = static_cast<uint32_t>(rng() % 4);
      data = std::min(data, words - 1);
      pointers = std::min(pointers, words - 1 - data);
      w[2] = 0;  // a struct right after its pointer
      w[3] = data | pointers << 16;
      for (size_t i = 4; i < w.size(); ++i)
        w[i] = static_cast<uint32_t>(rng());
      bytes p(w.size() * 4);
      std::memcpy(p.data(), w.data(), p.size());
      payloads.push_back(std::move(p));
    }
  }
  size_t failed = 0;
  for_each_sample([&](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    failed += decode_all<T>(payloads);
  });
  // Both outcomes occur, so the fuzzing reaches past the framing.
  EXPECT_GT(failed, 0u);
  EXPECT_LT(failed, payloads.size() * msg_kind_count);
}

TEST(codec, mutated_messages_never_crash) {
  std::mt19937_64 rng(42);
  for_each_sample([&](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    auto b = encode(x);
    std::vector<bytes> payloads;
    for (int rep = 0; rep < 3000; ++rep) {
      bytes p = b;
      for (int flips = 1 + rep % 4; flips > 0; --flips)
        p[rng() % p.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
      payloads.push_back(std::move(p));
    }
    decode_all<T>(payloads);
  });
}

}  // namespace
}  // namespace kvmesh
