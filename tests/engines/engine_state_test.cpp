// Tests of engines/engine_state: bids from a mirrored cache, a request's
// queue and occupancy from award to end as the front sees it, health.
#include "engines/engine_state.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/block_hash.hpp"

namespace kvmesh {
namespace {

constexpr uint32_t bt = 4;

engine_state make(uint64_t gpu_blocks = 100) {
  engine_state_config cfg;
  cfg.ledger.id = 7;
  cfg.block_tokens = bt;
  cfg.gpu_blocks = gpu_blocks;
  cfg.endpoint = "http://127.0.0.1:8001";
  cfg.award_ttl_ms = 1000;
  auto s = engine_state::make(cfg);
  EXPECT_TRUE(s) << s.err().message;
  return std::move(*s);
}

std::vector<uint32_t> prompt(size_t n) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), 1);
  return t;
}

route_request_msg request(uint64_t id, size_t tokens) {
  route_request_msg r;
  r.id = id;
  auto h = hash_blocks(prompt(tokens), bt);
  for (const auto& b : *h)
    r.blocks.push_back(b.seq);
  r.input_tokens = static_cast<uint32_t>(tokens);
  r.output_tokens = 8;
  return r;
}

// The engine reports the first `blocks` blocks of prompt() cached on `medium`.
void engine_caches(engine_state& s, size_t blocks, const char* medium) {
  engine_kv_event e;
  e.kind = engine_kv_event::stored;
  for (size_t i = 0; i < blocks; ++i)
    e.hashes.push_back(1000 + i);
  e.tokens = prompt(blocks * bt);
  e.block_size = bt;
  e.medium = medium;
  s.mirror().apply(e, nullptr);
}

TEST(engine_state, bids_match_what_the_engine_reported) {
  auto s = make();
  engine_caches(s, 3, "GPU");
  const auto r = request(1, 24);  // 6 blocks, 3 of them cached
  bid b = s.make_bid(r.blocks.data(), 6);
  EXPECT_EQ(b.worker, 7u);
  EXPECT_EQ(b.gpu, 3u);
  EXPECT_EQ(b.capacity, 100u);
  EXPECT_EQ(b.active, 0u);
  engine_caches(s, 4, "CPU");
  b = s.make_bid(r.blocks.data(), 6);
  EXPECT_EQ(b.gpu, 3u);
  EXPECT_EQ(b.host, 1u);
}

TEST(engine_state, a_request_from_award_to_end) {
  auto s = make();
  engine_caches(s, 2, "GPU");
  const auto r = request(5, 24);
  s.reserve(5, 3.0, 6, 0);
  EXPECT_DOUBLE_EQ(s.status().reserved, 3.0);
  const award_reply a = s.award(r, -1, 10);
  EXPECT_TRUE(a.accepted);
  EXPECT_EQ(a.endpoint, "http://127.0.0.1:8001");
  // Queued: the 4 blocks it must compute; nothing in the engine yet.
  auto st = s.status();
  EXPECT_DOUBLE_EQ(st.queued, 4.0);
  EXPECT_DOUBLE_EQ(st.reserved, 0.0);
  EXPECT_EQ(st.active, 0u);
  EXPECT_EQ(st.waiting, 0u);
  front_request f;
  f.id = 5;
  f.blocks = r.blocks;
  f.prompt_tokens = 24;
  s.arrive(f, 20);
  st = s.status();
  EXPECT_DOUBLE_EQ(st.queued, 4.0);
  EXPECT_EQ(st.waiting, 1u);
  EXPECT_EQ(st.active, 8u);  // (24 prompt + 8 output) / 4
  tier_match hits;
  EXPECT_TRUE(s.first_token(5, 30, &hits));
  EXPECT_EQ(hits.gpu, 2u);
  st = s.status();
  EXPECT_DOUBLE_EQ(st.queued, 0.0);
  EXPECT_EQ(st.running, 1u);
  EXPECT_EQ(st.active, 8u);  // held until the end
  EXPECT_TRUE(s.finish(5));
  st = s.status();
  EXPECT_EQ(st.active, 0u);
  EXPECT_EQ(st.running, 0u);
  EXPECT_EQ(st.completed, 1u);
  EXPECT_FALSE(s.finish(5));
  EXPECT_FALSE(s.first_token(5, 40));
}

// The engine's KV events come on their own path, and can come after the
// bids for the next turn of a conversation: the prompt a request has just
// computed counts as on the GPU from its first token, for a while.
TEST(engine_state, a_prompt_counts_as_cached_from_its_first_token) {
  auto s = make();
  const auto r = request(5, 24);     // 6 blocks
  const auto next = request(6, 32);  // the same 6, then 2 more
  ASSERT_TRUE(s.award(r, -1, 10).accepted);
  EXPECT_TRUE(s.arrive_awarded(5, 77, 20));
  EXPECT_EQ(s.make_bid(next.blocks.data(), 8).gpu, 0u) << "not computed yet";
  ASSERT_TRUE(s.first_token(5, 100));
  bid b = s.make_bid(next.blocks.data(), 8);
  EXPECT_EQ(b.gpu, 6u);
  EXPECT_EQ(b.host + b.disk, 0u);
  // What the events say wins where it says more.
  engine_caches(s, 7, "GPU");
  EXPECT_EQ(s.make_bid(next.blocks.data(), 8).gpu, 7u);
  // Past the window only the events count.
  auto t = make();
  ASSERT_TRUE(t.award(r, -1, 10).accepted);
  EXPECT_TRUE(t.arrive_awarded(5, 77, 20));
  ASSERT_TRUE(t.first_token(5, 100));
  t.expire(100 + 1999);
  EXPECT_EQ(t.make_bid(next.blocks.data(), 8).gpu, 6u);
  t.expire(100 + 2000);
  EXPECT_EQ(t.make_bid(next.blocks.data(), 8).gpu, 0u);
}

// A gateway calling the engine itself reports the arrival by id: the
// award's blocks, sizes and hits stand for what the front would have read.
TEST(engine_state, a_gateways_request_arrives_with_the_awards_blocks) {
  auto s = make();
  engine_caches(s, 2, "GPU");
  const auto r = request(5, 24);
  ASSERT_TRUE(s.award(r, -1, 10).accepted);
  EXPECT_FALSE(s.arrive_awarded(6, 77, 20)) << "never awarded here";
  EXPECT_TRUE(s.arrive_awarded(5, 77, 20));
  EXPECT_FALSE(s.arrive_awarded(5, 77, 21)) << "arrived already";
  auto st = s.status();
  EXPECT_EQ(st.waiting, 1u);
  EXPECT_EQ(st.active, 8u);  // (24 prompt + 8 output) / 4
  EXPECT_EQ(s.arrived_ms(5), 20.0);
  tier_match hits;
  EXPECT_TRUE(s.first_token(5, 30, &hits));
  EXPECT_EQ(hits.gpu, 2u);
  EXPECT_EQ(s.of_reporter(77), std::vector<uint64_t>{5});
  EXPECT_TRUE(s.of_reporter(78).empty());
  EXPECT_TRUE(s.finish(5));
  EXPECT_TRUE(s.of_reporter(77).empty());
  EXPECT_EQ(s.status().active, 0u);
}

// A lease lists all of a reporter's requests: one listed but not arrived
// (its report lost) arrives; one arrived but not listed (its end lost) is
// returned as ended; other reporters' and the front's are left alone.
TEST(engine_state, a_lease_puts_lost_reports_right) {
  auto s = make();
  for (uint64_t id : {1, 2, 3, 4})
    ASSERT_TRUE(s.award(request(id, 8), -1, 0).accepted);
  ASSERT_TRUE(s.arrive_awarded(1, 77, 1));  // its end will be lost
  ASSERT_TRUE(s.arrive_awarded(3, 88, 1));  // another reporter's
  front_request f;
  f.id = 4;
  f.prompt_tokens = 8;
  s.arrive(f, 1);  // the front's
  const auto ended = s.lease(77, {2}, 5);
  EXPECT_EQ(ended, std::vector<uint64_t>{1});
  EXPECT_EQ(s.arrived_ms(2), 5.0) << "listed: it reached the engine";
  auto mine = s.of_reporter(77);  // 1 stays until the caller finishes it
  std::sort(mine.begin(), mine.end());
  EXPECT_EQ(mine, (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(s.lease(88, {3}, 6).empty());
  EXPECT_TRUE(s.lease(99, {}, 6).empty()) << "the front's request stays";
  EXPECT_EQ(s.status().waiting, 4u);
}

TEST(engine_state, a_request_that_bypassed_the_routers_is_counted_in) {
  auto s = make();
  front_request f;
  f.id = 9;
  f.blocks = request(9, 16).blocks;
  f.prompt_tokens = 16;
  f.output_tokens = 4;
  f.approximate = true;
  s.arrive(f, 0);
  auto st = s.status();
  EXPECT_DOUBLE_EQ(st.queued, 4.0);
  EXPECT_EQ(st.active, 5u);
  EXPECT_EQ(s.bypassed(), 1u);
  EXPECT_EQ(s.approximate(), 1u);
  // Its end without a first token (an error) clears everything.
  EXPECT_TRUE(s.finish(9));
  EXPECT_DOUBLE_EQ(s.status().queued, 0.0);
}

TEST(engine_state, an_award_never_called_expires) {
  auto s = make();
  EXPECT_TRUE(s.award(request(1, 16), -1, 0).accepted);
  EXPECT_GT(s.status().queued, 0.0);
  EXPECT_EQ(s.expire(999), 0u);
  EXPECT_EQ(s.expire(1000), 1u);
  EXPECT_DOUBLE_EQ(s.status().queued, 0.0);
  EXPECT_EQ(s.abandoned(), 1u);
}

// A withdrawn award (its router gave up on it before naming this front)
// is dropped and refused should it come later; one whose request reached
// the front stays.
TEST(engine_state, a_withdrawn_award_is_dropped_and_refused_later) {
  auto s = make();
  EXPECT_TRUE(s.award(request(1, 16), -1, 0).accepted);
  EXPECT_TRUE(s.withdraw(1).withdrawn);
  EXPECT_DOUBLE_EQ(s.status().queued, 0.0);
  EXPECT_TRUE(s.withdraw(2).withdrawn);  // never came
  const award_reply late = s.award(request(2, 16), -1, 0);
  EXPECT_FALSE(late.accepted);
  EXPECT_EQ(late.reason, "withdrawn");
  EXPECT_TRUE(s.award(request(3, 16), -1, 0).accepted);
  front_request f;
  f.id = 3;
  f.blocks = request(3, 16).blocks;
  f.prompt_tokens = 16;
  s.arrive(f, 1);
  const withdraw_reply mine = s.withdraw(3);
  EXPECT_FALSE(mine.withdrawn);
  EXPECT_EQ(mine.count, 2u);
}

TEST(engine_state, an_engine_that_stops_answering_refuses_awards) {
  auto s = make(0);
  engine_metrics m;
  m.answering = false;
  s.set_metrics(m);
  const award_reply a = s.award(request(1, 16), -1, 0);
  EXPECT_FALSE(a.accepted);
  EXPECT_EQ(a.reason, unhealthy_reason);
  EXPECT_TRUE(s.status().unhealthy);
  // Its capacity, unknown from the flags, comes from its metrics.
  EXPECT_EQ(s.capacity(), 0u);
  m.answering = true;
  m.gpu_blocks = 4096;
  s.set_metrics(m);
  EXPECT_EQ(s.status().capacity, 4096u);
  EXPECT_TRUE(s.award(request(1, 16), -1, 0).accepted);
  s.set_draining(true);
  EXPECT_EQ(s.award(request(2, 16), -1, 0).reason, "draining");
}

TEST(engine_state, bad_configuration_is_an_error) {
  engine_state_config cfg;
  cfg.block_tokens = 0;
  EXPECT_FALSE(engine_state::make(cfg));
  cfg.block_tokens = 4;
  cfg.ledger.speed = 0;
  EXPECT_FALSE(engine_state::make(cfg));
}

}  // namespace
}  // namespace kvmesh
