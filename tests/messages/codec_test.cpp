// Tests of messages/codec: round trips of every message, and evolution
// (the messages of older and newer producers).
#include "messages/codec.hpp"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "messages/kvmesh.capnp.h"
#include "messages/limits.hpp"
#include "tests/messages/codec_samples.hpp"
#include "tests/messages/evolution.capnp.h"

namespace kvmesh {
namespace {

using namespace codec_test;

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

  // An admin listing of a large fleet: 2,500 workers serving two models
  // each fit in NATS' default 1 MiB payload (limits.max_payload_bytes);
  // about 2,900 would not, so the ADMIN lists workers in pages
  // (AdminRequest.from, AdminReply.more).
  admin_reply a = std::get<admin_reply>(samples());
  for (uint32_t i = 0; i < 2500; ++i) {
    a.workers.push_back(sample_worker(i));
    a.holders.push_back({i, i + 1, i + 2, i + 3});
  }
  auto got_a = decode<admin_reply>(encode(a));
  ASSERT_TRUE(got_a) << got_a.err().message;
  expect_same(a, *got_a, "AdminReply");
}

// The client's own id for a request is any string of up to 256 bytes
// (spaces, slashes, UTF-8, a NUL), kept byte for byte by the request and
// its decision (what a durable request's record holds); a longer one is
// refused by name.
TEST(codec, client_ids_are_any_string_of_up_to_256_bytes) {
  std::string id = "chat 7/abc-123 \xC3\xA9";
  id.push_back('\0');
  id.resize(max_name_bytes, 'x');
  route_request_msg r = sample_request(1);
  r.client_id = id;
  auto got = decode<route_request_msg>(encode(r));
  ASSERT_TRUE(got) << got.err().message;
  EXPECT_EQ(got->client_id, id);
  decision d = std::get<decision>(samples());
  d.client_id = id;
  auto got_d = decode<decision>(encode(d));
  ASSERT_TRUE(got_d) << got_d.err().message;
  EXPECT_EQ(got_d->client_id, id);

  r.client_id.push_back('x');
  auto long_id = decode<route_request_msg>(encode(r));
  ASSERT_FALSE(long_id);
  EXPECT_NE(long_id.err().message.find("clientId"), std::string::npos)
      << long_id.err().message;
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
  b.setWait(2.5);
  b.setStepOverhead(0.0625);
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
  // Nor a wait: the router prices space beyond capacity instead.
  EXPECT_TRUE(std::isnan(got->wait));
  EXPECT_EQ(got->step_overhead, 0.0);
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

// -- message kinds -----------------------------------------------------------

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
  // KVMESH_MESSAGES (messages/kinds.hpp) without a sample here fails.
  std::array<int, msg_kind_count> seen{};
  size_t n = 0;
  for_each_sample([&](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    ++seen[static_cast<size_t>(msg_kind_of<T>)];
    ++n;
  });
  EXPECT_EQ(n, msg_kind_count);
  for (size_t k = 0; k < msg_kind_count; ++k)
    EXPECT_EQ(seen[k], 1) << to_string(static_cast<msg_kind>(k));
}

}  // namespace
}  // namespace kvmesh
