// What the codec tests share: every field of every message, a sample of
// each with every field set, comparisons, decode error counters and the
// byte layout of a flat message.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "messages/codec.hpp"

namespace kvmesh::codec_test {

using bytes = std::vector<uint8_t>;
inline constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// -- every field of every message, for generic comparisons -------------------
// Keep these complete: a field missing here is neither compared by the
// round trips nor checked to be set by the samples.

inline auto fields(const route_request_msg& x) {
  return std::tie(x.id, x.blocks, x.input_tokens, x.output_tokens,
                  x.block_tokens, x.redelivered, x.stream_sequence, x.model,
                  x.client_id, x.exclude);
}
inline auto fields(const call_for_bids& x) {
  return std::tie(x.request, x.bidders_speed, x.workers, x.auction);
}
inline auto fields(const bid& x) {
  return std::tie(x.worker, x.gpu, x.host, x.disk, x.queued, x.reserved,
                  x.active, x.active_overlap, x.capacity, x.speed, x.c_host,
                  x.c_disk, x.accepted, x.holds, x.contested, x.wait,
                  x.step_overhead);
}
inline auto fields(const award_msg& x) {
  return std::tie(x.request, x.expected_queued, x.worker, x.price);
}
inline auto fields(const award_reply& x) {
  return std::tie(x.accepted, x.reason, x.endpoint, x.count);
}
inline auto fields(const price_breakdown& x) {
  return std::tie(x.worker, x.read, x.credit_gpu, x.credit_host, x.credit_disk,
                  x.space, x.speed, x.overflow, x.price, x.delta, x.wait);
}
inline auto fields(const decision& x) {
  return std::tie(x.request, x.worker, x.auctions, x.prices, x.error,
                  x.endpoint, x.failure, x.client_id);
}
inline auto fields(const cache_event& x) {
  return std::tie(x.kind, x.where, x.hash, x.root);
}
inline auto fields(const kv_batch& x) {
  return std::tie(x.worker, x.events, x.resync);
}
inline auto fields(const worker_status& x) {
  return std::tie(x.worker, x.queued, x.reserved, x.waiting, x.running,
                  x.gpu_blocks, x.host_blocks, x.disk_blocks, x.active,
                  x.completed, x.draining, x.capacity, x.speed, x.agent, x.gone,
                  x.unhealthy, x.endpoint, x.awards, x.last_price,
                  x.host_capacity, x.disk_capacity, x.models, x.engine,
                  x.engine_rank);
}
inline auto fields(const router_status& x) {
  return std::tie(
      x.name, x.decisions, x.reauctions, x.held, x.overloaded, x.live_workers,
      x.workers, x.auction_p50_us, x.auction_p99_us, x.nats_in, x.nats_out,
      x.text_requests, x.block_mismatches, x.reauctions_refused,
      x.reauctions_unanswered, x.reauctions_no_bids, x.reauctions_saturated,
      x.reauctions_no_live_worker, x.rounds, x.bids, x.runner_up_awards);
}
inline auto fields(const shard_status& x) {
  return std::tie(x.shard, x.blocks, x.entries, x.disk_bytes, x.events,
                  x.errors, x.shards, x.refused_events, x.incarnation);
}
inline auto fields(const holder_match& x) {
  return std::tie(x.worker, x.gpu, x.host, x.disk);
}
inline auto fields(const index_query& x) {
  return std::tie(x.chain);
}
inline auto fields(const index_reply& x) {
  return std::tie(x.holders, x.error);
}
inline auto fields(const price_config& x) {
  return std::tie(x.c_host, x.c_disk, x.beta, x.k, x.overflow,
                  x.overload_ceiling);
}
inline auto fields(const bid_list& x) {
  return std::tie(x.bids, x.error);
}
inline auto fields(const release_msg& x) {
  return std::tie(x.request, x.workers);
}
inline auto fields(const withdraw_msg& x) {
  return std::tie(x.request, x.worker);
}
inline auto fields(const withdraw_reply& x) {
  return std::tie(x.withdrawn, x.endpoint, x.count);
}
inline auto fields(const request_progress& x) {
  return std::tie(x.event, x.request, x.worker, x.reporter, x.in_flight);
}
inline auto fields(const request_event& x) {
  return std::tie(x.request, x.worker, x.done, x.gpu, x.host, x.disk);
}
inline auto fields(const request_events& x) {
  return std::tie(x.events);
}
inline auto fields(const admin_request& x) {
  return std::tie(x.worker, x.on, x.chain, x.weights, x.paged, x.from);
}
inline auto fields(const batch_item& x) {
  return std::tie(x.subject, x.reply, x.payload);
}
inline auto fields(const batch_msg& x) {
  return std::tie(x.items);
}
inline auto fields(const admin_reply& x) {
  return std::tie(x.error, x.workers, x.routers, x.shards, x.holders, x.weights,
                  x.count, x.more);
}

template <class T, class = void>
struct has_fields : std::false_type {};
template <class T>
struct has_fields<T, std::void_t<decltype(fields(std::declval<const T&>()))>>
    : std::true_type {};

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};

template <class Tuple, class F, size_t... I>
void each_field(const Tuple& a, const Tuple& b, F&& f,
                std::index_sequence<I...>) {
  (f(std::get<I>(a), std::get<I>(b), I), ...);
}

template <class T, class F>
void each_field(const T& a, const T& b, F&& f) {
  using tuple = decltype(fields(a));
  each_field(fields(a), fields(b), f,
             std::make_index_sequence<std::tuple_size<tuple>::value>{});
}

// Doubles compare by bits: NaN equals NaN, and nothing is rounded.
inline bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Every field of `got` equals `want`'s, recursively; `where` names the path
// (field indexes) of a mismatch.
template <class T>
void expect_same(const T& want, const T& got, const std::string& where) {
  if constexpr (has_fields<T>::value) {
    each_field(want, got, [&](const auto& w, const auto& g, size_t i) {
      expect_same(w, g, where + "." + std::to_string(i));
    });
  } else if constexpr (is_vector<T>::value) {
    ASSERT_EQ(want.size(), got.size()) << where;
    for (size_t i = 0; i < want.size(); ++i)
      expect_same(want[i], got[i], where + "[" + std::to_string(i) + "]");
  } else if constexpr (std::is_same_v<T, double>) {
    EXPECT_TRUE(same_bits(want, got)) << where << ": " << want << " vs " << got;
  } else if constexpr (std::is_enum_v<T>) {
    EXPECT_EQ(static_cast<int>(want), static_cast<int>(got)) << where;
  } else {
    EXPECT_EQ(want, got) << where;
  }
}

// Every field of `x` differs from the default's, so that a codec that drops
// or swaps a field fails its round trip. Lists must be non-empty, and their
// first element is checked the same way.
template <class T>
void expect_all_set(const T& x, const T& dflt, const std::string& where) {
  if constexpr (has_fields<T>::value) {
    each_field(x, dflt, [&](const auto& a, const auto& d, size_t i) {
      expect_all_set(a, d, where + "." + std::to_string(i));
    });
  } else if constexpr (is_vector<T>::value) {
    ASSERT_FALSE(x.empty()) << where;
    expect_all_set(x[0], typename T::value_type{}, where + "[0]");
  } else if constexpr (std::is_same_v<T, double>) {
    EXPECT_FALSE(same_bits(x, dflt)) << where;
  } else {
    EXPECT_FALSE(x == dflt) << where;
  }
}

// -- samples: a non-default value in every field -----------------------------
// Integers above 2^32 catch a 64-bit field narrowed to 32 bits.

inline route_request_msg sample_request(uint64_t id) {
  return route_request_msg{id,
                           {0x123456789ABCDEF0ull, 1, UINT64_MAX, 42},
                           4000000000u,
                           77,
                           4096,
                           true,
                           0x7000000000000001ull,
                           "meta-llama/Llama-3.1-8B-Instruct",
                           "chat-\xC5\x93-7f3a",
                           {7, 65535}};
}

inline price_breakdown sample_price(uint32_t worker, double base) {
  return price_breakdown{worker,      base + 0.5, base + 1.25,   base + 2.5,
                         base + 3.75, base + 5,   base + 0.0625, base + 7.5,
                         base + 9,    base - 11,  base + 13};
}

inline bid sample_bid(uint32_t worker) {
  return bid{worker,
             11,
             13,
             17,
             12.5,
             3.25,
             (1ull << 40) + 3,
             19,
             (1ull << 33) + 5,
             1.75,
             0.6,
             0.125,
             (1ull << 41) + 7,
             true,
             true,
             2.5,
             0.0625};
}

inline worker_status sample_worker(uint32_t worker) {
  return worker_status{worker,
                       40.5,
                       8.25,
                       (1ull << 34) + 1,
                       3,
                       (1ull << 35) + 2,
                       (1ull << 36) + 3,
                       (1ull << 37) + 4,
                       5000,
                       (1ull << 38),
                       true,
                       (1ull << 39) + 5,
                       2.5,
                       "agent-n\xC5\x93ud-" + std::to_string(worker),
                       true,
                       true,
                       "http://[::1]:" + std::to_string(8000 + worker),
                       (1ull << 40) + 6,
                       -3.125,
                       (1ull << 41) + 7,
                       (1ull << 42) + 8,
                       {{"Qwen/Qwen2.5-7B-Instruct", ""},
                        {"sql-lora", "Qwen/Qwen2.5-7B-Instruct"}},
                       "http://10.1.2.3:" + std::to_string(9000 + worker),
                       static_cast<int32_t>(worker % 4)};
}

inline router_status sample_router(uint64_t decisions) {
  return router_status{"router-\xC3\xA9t\xC3\xA9-" + std::to_string(decisions),
                       decisions,
                       2,
                       3,
                       4,
                       5,
                       6,
                       125.5,
                       980.25,
                       (1ull << 44) + 7,
                       (1ull << 45) + 9,
                       (1ull << 46) + 11,
                       (1ull << 47) + 13,
                       (1ull << 48) + 15,
                       17,
                       19,
                       23,
                       29,
                       (1ull << 49) + 31,
                       (1ull << 50) + 37,
                       41};
}

inline shard_status sample_shard(uint32_t shard) {
  return shard_status{
      shard, (1ull << 41) + 1, (1ull << 42) + 2, (1ull << 43) + 3, 7, 8,
      16,    (1ull << 44) + 9, (1ull << 63) + 5};
}

inline price_config sample_weights() {
  return price_config{0.5, 0.125, 0.07, 0.2, 2.5, 4};
}

inline std::tuple<route_request_msg, call_for_bids, bid, award_msg, award_reply,
                  decision, kv_batch, worker_status, router_status,
                  shard_status, index_query, index_reply, price_config,
                  bid_list, release_msg, request_events, admin_request,
                  admin_reply, batch_msg, withdraw_msg, withdraw_reply,
                  request_progress>
samples() {
  return {
      sample_request(0xFEDCBA9876543210ull),
      call_for_bids{
          sample_request(5), 3.5, {3, 4000000000u, 9}, (1ull << 63) + 21},
      sample_bid(7),
      award_msg{sample_request(6), 17.25, 4000000001u, 42.0625},
      award_reply{true, "queue grew: 12.5 > 10 (d\xC3\xA9j\xC3\xA0 vu)",
                  "http://gpu-7.example:8001", (1ull << 42) + 9},
      decision{(1ull << 50) + 1,
               9,
               2,
               {sample_price(3, 1), sample_price(4, 100), sample_price(5, -2)},
               "overloaded: \xE2\x89\xA5 40 queued (\xE6\xBB\xA1)",
               "http://10.0.0.9:8001",
               route_failure::unknown_model,
               "req-\xE2\x9C\x93-42"},
      kv_batch{5,
               {{cache_event::removed, tier::disk, (1ull << 63) + 1, 99},
                {cache_event::stored, tier::gpu, 2, 3},
                {cache_event::removed, tier::host, 4, 5},
                {cache_event::stored, tier::disk, 6, 7}},
               true},  // resync: not the default, so it must travel
      sample_worker(12),
      sample_router((1ull << 40) + 1),
      sample_shard(3),
      index_query{{0x8000000000000001ull, 2, 3}},
      index_reply{{{4, 10, 20, 30}, {5, 1, 0, 2}},
                  "shard 2 \xE2\x80\x94 persist failed"},
      sample_weights(),
      bid_list{{sample_bid(7), sample_bid(8), sample_bid(4000000002u)},
               "worker 9 gone (\xC3\xA9teint)"},
      release_msg{(1ull << 45) + 7, {3, 4000000003u}},
      request_events{{{(1ull << 46) + 1, 4, true, 5, 6, 7},
                      {(1ull << 47) + 2, 8, false, 9, 10, 11}}},
      admin_request{4000000004u,
                    true,
                    {(1ull << 62) + 3, 5, UINT64_MAX},
                    sample_weights(),
                    true,
                    4000000007u},
      admin_reply{"drain: worker 3 unknown (\xE2\x9C\x97)",
                  {sample_worker(1), sample_worker(2)},
                  {sample_router((1ull << 44) + 1), sample_router(9)},
                  {sample_shard(1), sample_shard(2)},
                  {{4, 10, 20, 30}, {5, 1, 0, 2}},
                  sample_weights(),
                  4000000005u,
                  true},
      batch_msg{{{"kvmesh.agent.a-1.bid", "_INBOX.kvmesh.00ff.17", {9, 0, 3}},
                 {"kvmesh.agent.a-1.release", "", {}},
                 {"kvmesh.agent.a-1.award", "r\xC3\xA9ply", {0, 255, 7}}}},
      withdraw_msg{(1ull << 48) + 5, 4000000006u},
      // Not withdrawn (the default is true), so every field must travel.
      withdraw_reply{false, "http://gpu-8.example:8001", (1ull << 43) + 11},
      request_progress{progress_event::lease,
                       (1ull << 49) + 3,
                       4000000008u,
                       (1ull << 63) + 13,
                       {(1ull << 50) + 1, 2, UINT64_MAX}},
  };
}

template <class F>
void for_each_sample(F&& f) {
  std::apply([&](const auto&... x) { (f(x), ...); }, samples());
}

template <class T>
std::string name_of() {
  return to_string(msg_kind_of<T>);
}

inline std::array<uint64_t, msg_kind_count> counters() {
  std::array<uint64_t, msg_kind_count> c{};
  for (size_t k = 0; k < msg_kind_count; ++k)
    c[k] = decode_errors(static_cast<msg_kind>(k));
  return c;
}

// Only T's counter moved, by `n`.
template <class T>
void expect_counted(const std::array<uint64_t, msg_kind_count>& before,
                    uint64_t n) {
  auto after = counters();
  for (size_t k = 0; k < msg_kind_count; ++k) {
    uint64_t want = k == static_cast<size_t>(msg_kind_of<T>) ? n : 0;
    EXPECT_EQ(after[k] - before[k], want)
        << "counter of " << to_string(static_cast<msg_kind>(k));
  }
}

// Decoding `data` as T is a parse error that names T (and `needle`) and
// counts once, in T's counter only.
template <class T>
void expect_rejected(const uint8_t* data, size_t size,
                     const std::string& needle = "") {
  auto before = counters();
  auto got = decode<T>(data, size);
  ASSERT_FALSE(got) << name_of<T>() << " of " << size << " bytes decoded";
  EXPECT_EQ(got.err().code, ec::parse_error);
  EXPECT_EQ(got.err().message.rfind(name_of<T>() + ": ", 0), 0u)
      << got.err().message;
  if (!needle.empty()) {
    EXPECT_NE(got.err().message.find(needle), std::string::npos)
        << got.err().message;
  }
  expect_counted<T>(before, 1);
}

template <class T>
void expect_rejected(const bytes& b, const std::string& needle = "") {
  expect_rejected<T>(b.data(), b.size(), needle);
}

// A flat array of a hand-built message, as a producer would publish it.
inline bytes flat(capnp::MessageBuilder& m) {
  auto words = capnp::messageToFlatArray(m);
  auto b = words.asBytes();
  return bytes(b.begin(), b.end());
}

// The root struct's version, at a fixed place in a single-segment flat
// array: word 0 is the segment table, word 1 the root pointer (offset 0),
// word 2 the first data word, whose low 16 bits are field @0.
inline constexpr size_t version_at = 16;

inline void check_layout(const bytes& b) {
  ASSERT_GE(b.size(), 24u);
  ASSERT_EQ(b[0] | b[1] | b[2] | b[3], 0) << "more than one segment";
  ASSERT_EQ(b[8] | b[9] | b[10] | b[11], 0) << "root not right after pointer";
  ASSERT_EQ(b[version_at] | (b[version_at + 1] << 8), 1) << "version not 1";
}

inline void set_version(bytes& b, uint16_t v) {
  b[version_at] = static_cast<uint8_t>(v);
  b[version_at + 1] = static_cast<uint8_t>(v >> 8);
}

}  // namespace kvmesh::codec_test
