// Tests of messages/codec: round trips of every message, evolution, and
// malformed or hostile payloads (errors and counters, never crashes).
#include "messages/codec.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "messages/kvmesh.capnp.h"
#include "tests/messages/evolution.capnp.h"

namespace kvmesh {
namespace {

using bytes = std::vector<uint8_t>;
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// -- every field of every message, for generic comparisons -------------------
// Keep these complete: a field missing here is neither compared by the
// round trips nor checked to be set by the samples.

auto fields(const route_request_msg& x) {
  return std::tie(x.id, x.blocks, x.input_tokens, x.output_tokens,
                  x.block_tokens, x.redelivered, x.stream_sequence);
}
auto fields(const call_for_bids& x) {
  return std::tie(x.request, x.bidders_speed, x.workers, x.auction);
}
auto fields(const bid& x) {
  return std::tie(x.worker, x.gpu, x.host, x.disk, x.queued, x.reserved,
                  x.active, x.active_overlap, x.capacity, x.speed, x.c_host,
                  x.c_disk, x.accepted, x.holds, x.contested);
}
auto fields(const award_msg& x) {
  return std::tie(x.request, x.expected_queued, x.worker, x.price);
}
auto fields(const award_reply& x) {
  return std::tie(x.accepted, x.reason, x.endpoint, x.count);
}
auto fields(const price_breakdown& x) {
  return std::tie(x.worker, x.read, x.credit_gpu, x.credit_host, x.credit_disk,
                  x.space, x.speed, x.overflow, x.price, x.delta);
}
auto fields(const decision& x) {
  return std::tie(x.request, x.worker, x.auctions, x.prices, x.error,
                  x.endpoint);
}
auto fields(const cache_event& x) {
  return std::tie(x.kind, x.where, x.hash, x.root);
}
auto fields(const kv_batch& x) {
  return std::tie(x.worker, x.events, x.resync);
}
auto fields(const worker_status& x) {
  return std::tie(x.worker, x.queued, x.reserved, x.waiting, x.running,
                  x.gpu_blocks, x.host_blocks, x.disk_blocks, x.active,
                  x.completed, x.draining, x.capacity, x.speed, x.agent, x.gone,
                  x.unhealthy, x.endpoint, x.awards, x.last_price,
                  x.host_capacity, x.disk_capacity);
}
auto fields(const router_status& x) {
  return std::tie(
      x.name, x.decisions, x.reauctions, x.held, x.overloaded, x.live_workers,
      x.workers, x.auction_p50_us, x.auction_p99_us, x.nats_in, x.nats_out,
      x.text_requests, x.block_mismatches, x.reauctions_refused,
      x.reauctions_unanswered, x.reauctions_no_bids, x.reauctions_saturated,
      x.reauctions_no_live_worker, x.rounds, x.bids, x.runner_up_awards);
}
auto fields(const shard_status& x) {
  return std::tie(x.shard, x.blocks, x.entries, x.disk_bytes, x.events,
                  x.errors, x.shards, x.refused_events, x.incarnation);
}
auto fields(const holder_match& x) {
  return std::tie(x.worker, x.gpu, x.host, x.disk);
}
auto fields(const index_query& x) {
  return std::tie(x.chain);
}
auto fields(const index_reply& x) {
  return std::tie(x.holders, x.error);
}
auto fields(const price_config& x) {
  return std::tie(x.c_host, x.c_disk, x.beta, x.k, x.overflow,
                  x.overload_ceiling);
}
auto fields(const bid_list& x) {
  return std::tie(x.bids, x.error);
}
auto fields(const release_msg& x) {
  return std::tie(x.request, x.workers);
}
auto fields(const withdraw_msg& x) {
  return std::tie(x.request, x.worker);
}
auto fields(const withdraw_reply& x) {
  return std::tie(x.withdrawn, x.endpoint, x.count);
}
auto fields(const request_event& x) {
  return std::tie(x.request, x.worker, x.done, x.gpu, x.host, x.disk);
}
auto fields(const request_events& x) {
  return std::tie(x.events);
}
auto fields(const admin_request& x) {
  return std::tie(x.worker, x.on, x.chain, x.weights, x.paged, x.from);
}
auto fields(const batch_item& x) {
  return std::tie(x.subject, x.reply, x.payload);
}
auto fields(const batch_msg& x) {
  return std::tie(x.items);
}
auto fields(const admin_reply& x) {
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
bool same_bits(double a, double b) {
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

// -- which counter a type's decode errors go to ------------------------------

template <class T>
msg_kind kind_of();
template <>
msg_kind kind_of<route_request_msg>() {
  return msg_kind::route_request;
}
template <>
msg_kind kind_of<call_for_bids>() {
  return msg_kind::call_for_bids;
}
template <>
msg_kind kind_of<bid>() {
  return msg_kind::bid;
}
template <>
msg_kind kind_of<award_msg>() {
  return msg_kind::award;
}
template <>
msg_kind kind_of<award_reply>() {
  return msg_kind::award_reply;
}
template <>
msg_kind kind_of<decision>() {
  return msg_kind::decision;
}
template <>
msg_kind kind_of<kv_batch>() {
  return msg_kind::kv_batch;
}
template <>
msg_kind kind_of<worker_status>() {
  return msg_kind::worker_status;
}
template <>
msg_kind kind_of<router_status>() {
  return msg_kind::router_status;
}
template <>
msg_kind kind_of<shard_status>() {
  return msg_kind::shard_status;
}
template <>
msg_kind kind_of<index_query>() {
  return msg_kind::index_query;
}
template <>
msg_kind kind_of<index_reply>() {
  return msg_kind::index_reply;
}
template <>
msg_kind kind_of<price_config>() {
  return msg_kind::price_weights;
}
template <>
msg_kind kind_of<bid_list>() {
  return msg_kind::bids;
}
template <>
msg_kind kind_of<release_msg>() {
  return msg_kind::release;
}
template <>
msg_kind kind_of<request_events>() {
  return msg_kind::request_events;
}
template <>
msg_kind kind_of<admin_request>() {
  return msg_kind::admin_request;
}
template <>
msg_kind kind_of<admin_reply>() {
  return msg_kind::admin_reply;
}
template <>
msg_kind kind_of<batch_msg>() {
  return msg_kind::batch;
}
template <>
msg_kind kind_of<withdraw_msg>() {
  return msg_kind::withdraw;
}
template <>
msg_kind kind_of<withdraw_reply>() {
  return msg_kind::withdraw_reply;
}

// -- samples: a non-default value in every field -----------------------------
// Integers above 2^32 catch a 64-bit field narrowed to 32 bits.

route_request_msg sample_request(uint64_t id) {
  return route_request_msg{id,
                           {0x123456789ABCDEF0ull, 1, UINT64_MAX, 42},
                           4000000000u,
                           77,
                           4096,
                           true,
                           0x7000000000000001ull};
}

price_breakdown sample_price(uint32_t worker, double base) {
  return price_breakdown{worker,      base + 0.5, base + 1.25,   base + 2.5,
                         base + 3.75, base + 5,   base + 0.0625, base + 7.5,
                         base + 9,    base - 11};
}

bid sample_bid(uint32_t worker) {
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
             true};
}

worker_status sample_worker(uint32_t worker) {
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
                       (1ull << 42) + 8};
}

router_status sample_router(uint64_t decisions) {
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

shard_status sample_shard(uint32_t shard) {
  return shard_status{
      shard, (1ull << 41) + 1, (1ull << 42) + 2, (1ull << 43) + 3, 7, 8,
      16,    (1ull << 44) + 9, (1ull << 63) + 5};
}

price_config sample_weights() {
  return price_config{0.5, 0.125, 0.07, 0.2, 2.5, 4};
}

std::tuple<route_request_msg, call_for_bids, bid, award_msg, award_reply,
           decision, kv_batch, worker_status, router_status, shard_status,
           index_query, index_reply, price_config, bid_list, release_msg,
           request_events, admin_request, admin_reply, batch_msg, withdraw_msg,
           withdraw_reply>
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
               "http://10.0.0.9:8001"},
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
  };
}

template <class F>
void for_each_sample(F&& f) {
  std::apply([&](const auto&... x) { (f(x), ...); }, samples());
}

template <class T>
std::string name_of() {
  return to_string(kind_of<T>());
}

std::array<uint64_t, msg_kind_count> counters() {
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
    uint64_t want = k == static_cast<size_t>(kind_of<T>()) ? n : 0;
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
bytes flat(capnp::MessageBuilder& m) {
  auto words = capnp::messageToFlatArray(m);
  auto b = words.asBytes();
  return bytes(b.begin(), b.end());
}

// The root struct's version, at a fixed place in a single-segment flat
// array: word 0 is the segment table, word 1 the root pointer (offset 0),
// word 2 the first data word, whose low 16 bits are field @0.
constexpr size_t version_at = 16;

void check_layout(const bytes& b) {
  ASSERT_GE(b.size(), 24u);
  ASSERT_EQ(b[0] | b[1] | b[2] | b[3], 0) << "more than one segment";
  ASSERT_EQ(b[8] | b[9] | b[10] | b[11], 0) << "root not right after pointer";
  ASSERT_EQ(b[version_at] | (b[version_at + 1] << 8), 1) << "version not 1";
}

void set_version(bytes& b, uint16_t v) {
  b[version_at] = static_cast<uint8_t>(v);
  b[version_at + 1] = static_cast<uint8_t>(v >> 8);
}

// -- round trips -------------------------------------------------------------

TEST(codec, every_sample_sets_every_field) {
  for_each_sample([](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    expect_all_set(x, T{}, name_of<T>());
  });
}

TEST(codec, every_message_round_trips) {
  auto before = counters();
  for_each_sample([](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    auto b = encode(x);
    EXPECT_EQ(b.size() % 8, 0u) << name_of<T>();
    auto got = decode<T>(b);
    ASSERT_TRUE(got) << got.err().message;
    expect_same(x, *got, name_of<T>());
  });
  EXPECT_EQ(counters(), before);
}

TEST(codec, default_values_round_trip) {
  for_each_sample([](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    auto got = decode<T>(encode(T{}));
    ASSERT_TRUE(got) << got.err().message;
    expect_same(T{}, *got, name_of<T>());
  });
}

TEST(codec, unreported_credits_round_trip_as_nan) {
  auto b = std::get<bid>(samples());
  for (auto [c_host, c_disk] : {std::pair{nan, nan}, std::pair{nan, 0.3},
                                std::pair{0.7, nan}, std::pair{-nan, 0.0}}) {
    b.c_host = c_host;
    b.c_disk = c_disk;
    auto got = decode<bid>(encode(b));
    ASSERT_TRUE(got) << got.err().message;
    expect_same(b, *got, "bid");
  }
  EXPECT_TRUE(std::isnan(decode<bid>(encode(bid{}))->c_host));
}

TEST(codec, decodes_from_unaligned_memory) {
  for_each_sample([](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    auto b = encode(x);
    for (size_t offset = 1; offset < 8; ++offset) {
      bytes shifted(offset, 0xAB);
      shifted.insert(shifted.end(), b.begin(), b.end());
      auto got = decode<T>(shifted.data() + offset, b.size());
      ASSERT_TRUE(got) << name_of<T>() << " at offset " << offset;
      expect_same(x, *got, name_of<T>());
    }
  });
}

// A thread builds every message in one reused first segment: what it
// built before (a message that filled the segment and spilled past it,
// then a small one) must not show in the next message's bytes.
TEST(codec, encodings_do_not_depend_on_what_came_before) {
  std::vector<std::vector<uint8_t>> fresh;
  for_each_sample([&](const auto& x) { fresh.push_back(encode(x)); });
  index_query big;
  for (uint64_t i = 1; i <= 5000; ++i)  // 5,000 words: past the segment
    big.chain.push_back(~i);
  size_t k = 0;
  for_each_sample([&](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    ASSERT_TRUE(decode<index_query>(encode(big)));
    index_query small;
    small.chain = {~uint64_t{0}, ~uint64_t{1}};
    ASSERT_TRUE(decode<index_query>(encode(small)));
    EXPECT_EQ(encode(x), fresh[k++]) << name_of<T>();
    // Read back from unaligned memory after a larger unaligned read: the
    // reused copy holds this payload alone.
    auto b = encode(x);
    bytes shifted(1, 0xAB);
    shifted.insert(shifted.end(), b.begin(), b.end());
    auto got = decode<T>(shifted.data() + 1, b.size());
    ASSERT_TRUE(got) << name_of<T>();
    expect_same(x, *got, name_of<T>());
  });
}

TEST(codec, large_messages_fit_the_reader_limits) {
  index_query q;
  for (uint64_t i = 1; i <= 100000; ++i)
    q.chain.push_back(i * 7919);
  auto got = decode<index_query>(encode(q));
  ASSERT_TRUE(got) << got.err().message;
  expect_same(q, *got, "IndexQuery");

  decision d = std::get<decision>(samples());
  for (uint32_t i = 0; i < 5000; ++i)
    d.prices.push_back(sample_price(i, i));
  auto got_d = decode<decision>(encode(d));
  ASSERT_TRUE(got_d) << got_d.err().message;
  expect_same(d, *got_d, "Decision");

  // An admin listing of a large fleet: 4,000 workers fit in NATS' default
  // 1 MiB payload (limits.max_payload_bytes); about 4,700 would not, so
  // the ADMIN lists workers in pages (AdminRequest.from, AdminReply.more).
  admin_reply a = std::get<admin_reply>(samples());
  for (uint32_t i = 0; i < 4000; ++i) {
    a.workers.push_back(sample_worker(i));
    a.holders.push_back({i, i + 1, i + 2, i + 3});
  }
  auto got_a = decode<admin_reply>(encode(a));
  ASSERT_TRUE(got_a) << got_a.err().message;
  expect_same(a, *got_a, "AdminReply");
}

// Pages of a listing too large for one message: every worker once, in id
// order, each page's encoding within its budget, `more` on all but the
// last; a budget smaller than one worker still moves on by one.
TEST(codec, worker_pages_cover_the_fleet_within_their_budget) {
  std::vector<worker_status> fleet;
  for (uint32_t i = 0; i < 10000; ++i) {
    worker_status w = sample_worker((i * 7919u) % 10000u * 3u);  // shuffled
    w.agent.append(i % 97, 'x');  // texts of many lengths
    w.endpoint.append(i % 31, 'y');
    fleet.push_back(std::move(w));
  }
  constexpr size_t budget = 512 << 10;
  // What an AdminReply with an empty list takes: the budget is the list's.
  const size_t empty = encode(admin_reply{}).size();
  uint32_t from = 0;
  std::vector<uint32_t> seen;
  size_t pages = 0;
  for (bool more = true; more; ++pages) {
    ASSERT_LT(pages, 100u) << "paging does not end";
    std::vector<worker_status> all = fleet;
    admin_reply page;
    fill_worker_page(all, from, budget, page);
    ASSERT_FALSE(page.workers.empty());
    const size_t bytes = encode(page).size();
    EXPECT_LE(bytes, empty + budget) << "page " << pages;
    // Not much smaller either: a page is worth its round trip.
    if (page.more) {
      EXPECT_GE(bytes, budget * 9 / 10) << "page " << pages;
    }
    for (const auto& w : page.workers)
      seen.push_back(w.worker);
    more = page.more;
    from = page.workers.back().worker + 1;
  }
  EXPECT_GE(pages, 3u);  // 10,000 workers of about 260 bytes each
  ASSERT_EQ(seen.size(), fleet.size());
  for (size_t i = 0; i < seen.size(); ++i)
    EXPECT_EQ(seen[i], i * 3) << "position " << i;

  std::vector<worker_status> all = fleet;
  admin_reply one;
  fill_worker_page(all, 4, 1, one);
  ASSERT_EQ(one.workers.size(), 1u);
  EXPECT_EQ(one.workers[0].worker, 6u);  // the first id from 4 on
  EXPECT_TRUE(one.more);
  admin_reply past;
  fill_worker_page(all, 30000, budget, past);
  EXPECT_TRUE(past.workers.empty());
  EXPECT_FALSE(past.more);
  admin_reply last;
  fill_worker_page(all, 29997, budget, last);
  ASSERT_EQ(last.workers.size(), 1u);
  EXPECT_FALSE(last.more);
}

// -- evolution ---------------------------------------------------------------

TEST(codec, version_zero_is_an_error) {
  for_each_sample([](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    auto b = encode(x);
    check_layout(b);
    set_version(b, 0);
    expect_rejected<T>(b, "version 0");
  });
  // As a producer that never sets it would write it.
  capnp::MallocMessageBuilder m;
  m.initRoot<wire::WorkerStatus>().setWorker(3);
  expect_rejected<worker_status>(flat(m), "version 0");
}

TEST(codec, newer_versions_are_accepted) {
  for_each_sample([](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    for (uint16_t v : {2, 0xFFFF}) {
      auto b = encode(x);
      check_layout(b);
      set_version(b, v);
      auto got = decode<T>(b);
      ASSERT_TRUE(got) << got.err().message;
      expect_same(x, *got, name_of<T>());
    }
  });
}

TEST(codec, fields_of_a_newer_schema_are_skipped) {
  capnp::MallocMessageBuilder m;
  auto b = m.initRoot<evolution::BidNext>();
  b.setVersion(2);
  b.setWorker(7);
  b.setGpu(11);
  b.setHost(13);
  b.setDisk(17);
  b.setQueued(12.5);
  b.setReserved(3.25);
  b.setActive((1ull << 40) + 3);
  b.setActiveOverlap(19);
  b.setCapacity((1ull << 33) + 5);
  b.setSpeed(1.75);
  b.setCHost(0.6);
  b.setCDisk(0.125);
  b.setAccepted((1ull << 41) + 7);
  b.setHolds(true);
  b.setContested(true);
  b.setRegion("eu-west");
  b.setWarmBlocks(123);
  auto got = decode<bid>(flat(m));
  ASSERT_TRUE(got) << got.err().message;
  expect_same(std::get<bid>(samples()), *got, "bid");
}

TEST(codec, fields_an_older_schema_lacks_take_their_defaults) {
  capnp::MallocMessageBuilder m;
  auto b = m.initRoot<evolution::BidPast>();
  b.setVersion(1);
  b.setWorker(7);
  b.setQueued(12.5);
  b.setSpeed(1.75);
  auto got = decode<bid>(flat(m));
  ASSERT_TRUE(got) << got.err().message;
  EXPECT_EQ(got->worker, 7u);
  EXPECT_EQ(got->queued, 12.5);
  EXPECT_EQ(got->speed, 1.75);
  // Not reported: the router's configured credits apply.
  EXPECT_TRUE(std::isnan(got->c_host));
  EXPECT_TRUE(std::isnan(got->c_disk));
  // Nor its count of accepted requests: the router adjusts nothing.
  EXPECT_EQ(got->accepted, unknown_accepted);
}

TEST(codec, decisions_and_heartbeats_of_older_producers_have_no_front) {
  capnp::MallocMessageBuilder m;
  auto d = m.initRoot<evolution::DecisionPast>();
  d.setVersion(1);
  d.setRequest(5);
  d.setWorker(2);
  auto got = decode<decision>(flat(m));
  ASSERT_TRUE(got) << got.err().message;
  EXPECT_EQ(got->worker, 2u);
  EXPECT_EQ(got->endpoint, "");
  capnp::MallocMessageBuilder w;
  auto s = w.initRoot<evolution::WorkerStatusPast>();
  s.setVersion(1);
  s.setWorker(4);
  s.setGpuBlocks(9);
  s.setAgent("agent-0");
  auto status = decode<worker_status>(flat(w));
  ASSERT_TRUE(status) << status.err().message;
  EXPECT_EQ(status->gpu_blocks, 9u);
  EXPECT_FALSE(status->unhealthy);  // an older agent's workers are healthy
  EXPECT_EQ(status->endpoint, "");
  // Nor awards, price or host and disk capacity: zero, and NaN for "none".
  EXPECT_EQ(status->awards, 0u);
  EXPECT_TRUE(std::isnan(status->last_price));
  EXPECT_EQ(status->host_capacity, 0u);
  EXPECT_EQ(status->disk_capacity, 0u);
}

TEST(codec, awards_of_older_routers_carry_no_price) {
  capnp::MallocMessageBuilder m;
  auto a = m.initRoot<evolution::AwardPast>();
  a.setVersion(1);
  a.initRequest().setId(8);
  a.setExpectedQueued(3.5);
  a.setWorker(6);
  auto got = decode<award_msg>(flat(m));
  ASSERT_TRUE(got) << got.err().message;
  EXPECT_EQ(got->request.id, 8u);
  EXPECT_EQ(got->worker, 6u);
  EXPECT_TRUE(std::isnan(got->price));
}

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

TEST(codec, message_kinds_have_their_schema_names) {
  EXPECT_STREQ(to_string(msg_kind::route_request), "RouteRequest");
  EXPECT_STREQ(to_string(msg_kind::kv_batch), "KvBatch");
  EXPECT_STREQ(to_string(msg_kind::price_weights), "PriceWeights");
  EXPECT_STREQ(to_string(msg_kind::bids), "Bids");
  EXPECT_STREQ(to_string(msg_kind::release), "Release");
  EXPECT_STREQ(to_string(msg_kind::request_events), "RequestEvents");
  EXPECT_STREQ(to_string(msg_kind::admin_request), "AdminRequest");
  EXPECT_STREQ(to_string(msg_kind::admin_reply), "AdminReply");
  EXPECT_STREQ(to_string(msg_kind::withdraw), "Withdraw");
  EXPECT_STREQ(to_string(msg_kind::withdraw_reply), "WithdrawReply");
  for (size_t k = 0; k < msg_kind_count; ++k)
    EXPECT_STRNE(to_string(static_cast<msg_kind>(k)), "unknown");
}

TEST(codec, every_message_kind_has_a_sample) {
  // The samples cover msg_kind_count distinct kinds, so a kind added to
  // codec.hpp without a sample here fails.
  std::array<int, msg_kind_count> seen{};
  size_t n = 0;
  for_each_sample([&](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    ++seen[static_cast<size_t>(kind_of<T>())];
    ++n;
  });
  EXPECT_EQ(n, msg_kind_count);
  for (size_t k = 0; k < msg_kind_count; ++k)
    EXPECT_EQ(seen[k], 1) << to_string(static_cast<msg_kind>(k));
}

}  // namespace
}  // namespace kvmesh
