// Tests of actors/engine_worker: a real engine's worker driven by KV events,
// its front and its metrics, on the deterministic clock.
#include "actors/engine_worker.hpp"

#include <numeric>

#include "core/block_hash.hpp"
#include "fixture.hpp"

namespace kvmesh::test {
namespace {

constexpr uint32_t bt = 4;

// Records what a listener is told.
struct heard {
  std::vector<uint64_t> first;
  std::vector<uint64_t> done;
  uint32_t first_gpu_hits = 0;
};

listener_actor::behavior_type recorder(listener_actor::pointer,
                                       std::shared_ptr<heard> h) {
  return {
      [=](first_atom, uint64_t id, uint32_t gpu, uint32_t, uint32_t) {
        h->first.push_back(id);
        h->first_gpu_hits = gpu;
      },
      [=](done_atom, uint64_t id) { h->done.push_back(id); },
  };
}

std::vector<uint32_t> prompt(size_t n) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), 1);
  return t;
}

std::vector<uint64_t> chain(size_t tokens) {
  std::vector<uint64_t> out;
  auto h = hash_blocks(prompt(tokens), bt);
  for (const auto& b : *h)
    out.push_back(b.seq);
  return out;
}

engine_kv_batch stored(size_t blocks, const char* medium) {
  engine_kv_event e;
  e.kind = engine_kv_event::stored;
  for (size_t i = 0; i < blocks; ++i)
    e.hashes.push_back(500 + i);
  e.tokens = prompt(blocks * bt);
  e.block_size = bt;
  e.medium = medium;
  engine_kv_batch b;
  b.events.push_back(e);
  return b;
}

class engine_worker_test : public actor_fixture {
 protected:
  engine_worker_actor spawn(std::shared_ptr<heard> h = nullptr) {
    engine_worker_options opt;
    opt.state.ledger.id = 4;
    opt.state.block_tokens = bt;
    opt.state.gpu_blocks = 64;
    opt.state.endpoint = "http://127.0.0.1:9001";
    opt.state.award_ttl_ms = 2000;
    if (h) opt.listener = sys->spawn(recorder, h);
    auto w = spawn_engine_worker(*sys, opt);
    EXPECT_TRUE(w) << w.err().message;
    run();
    return track(*w);
  }
  worker_status status(const engine_worker_actor& w) {
    auto s = ask<worker_status>(w, status_atom::value);
    EXPECT_TRUE(s->has_value() && **s);
    return ***s;
  }
  route_request_msg request(uint64_t id, size_t tokens) {
    route_request_msg r;
    r.id = id;
    r.blocks = chain(tokens);
    r.input_tokens = static_cast<uint32_t>(tokens);
    r.output_tokens = 4;
    return r;
  }
  award_msg award(uint64_t id, size_t tokens) {
    return award_msg{request(id, tokens), -1.0, 4};
  }
};

TEST_F(engine_worker_test, the_engines_events_make_its_tiers_and_bids) {
  auto w = spawn();
  caf::anon_send(w, kv_atom::value, stored(3, "GPU"));
  caf::anon_send(w, kv_atom::value, stored(2, "CPU"));
  run();
  auto s = status(w);
  EXPECT_EQ(s.gpu_blocks, 3u);
  EXPECT_EQ(s.host_blocks, 2u);
  EXPECT_EQ(s.capacity, 64u);
  EXPECT_EQ(s.endpoint, "http://127.0.0.1:9001");
  auto b =
      ask<bid_list>(w, bid_atom::value, call_for_bids{request(1, 20), 1.0, {}});
  ASSERT_TRUE(b->has_value() && **b);
  ASSERT_EQ((**b)->bids.size(), 1u);
  EXPECT_EQ((**b)->bids[0].gpu, 3u);
  EXPECT_EQ((**b)->bids[0].worker, 4u);
  // The same through a gather, told under the call's tag.
  auto got = call_bids(w, call_for_bids{request(3, 20), 1.0, {}}, 9);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, 9u);
  ASSERT_EQ(got[0].second.bids.size(), 1u);
  EXPECT_EQ(got[0].second.bids[0].gpu, 3u);
  // Asked for other workers only: no bid.
  b = ask<bid_list>(w, bid_atom::value,
                    call_for_bids{request(2, 20), 1.0, {3, 5}});
  ASSERT_TRUE(b->has_value() && **b);
  EXPECT_TRUE((**b)->bids.empty());
  caf::anon_send(w, kv_atom::value, drop_atom::value);
  run();
  s = status(w);
  EXPECT_EQ(s.gpu_blocks + s.host_blocks, 0u);
  auto stats = ask<engine_worker_stats>(w, get_atom::value, stats_atom::value);
  ASSERT_TRUE(stats->has_value() && **stats);
  EXPECT_EQ((**stats)->kv_batches, 2u);
  EXPECT_EQ((**stats)->resyncs, 1u);
}

TEST_F(engine_worker_test, queue_at_arrival_and_first_token_occupancy_to_end) {
  auto h = std::make_shared<heard>();
  auto w = spawn(h);
  caf::anon_send(w, kv_atom::value, stored(2, "GPU"));
  run();
  auto a = ask<award_reply>(w, award_atom::value, award(7, 16));
  ASSERT_TRUE(a->has_value() && **a);
  EXPECT_TRUE((**a)->accepted);
  EXPECT_EQ((**a)->endpoint, "http://127.0.0.1:9001");
  EXPECT_DOUBLE_EQ(status(w).queued, 2.0);  // 4 blocks, 2 cached
  front_request f;
  f.id = 7;
  f.blocks = chain(16);
  f.prompt_tokens = 16;
  caf::anon_send(w, arrive_atom::value, f);
  run();
  auto s = status(w);
  EXPECT_EQ(s.waiting, 1u);
  EXPECT_EQ(s.active, 5u);  // (16 + 4) / 4
  caf::anon_send(w, first_atom::value, uint64_t{7});
  run();
  s = status(w);
  EXPECT_DOUBLE_EQ(s.queued, 0.0);
  EXPECT_EQ(s.running, 1u);
  EXPECT_EQ(s.active, 5u);
  caf::anon_send(w, done_atom::value, uint64_t{7});
  run();
  s = status(w);
  EXPECT_EQ(s.active, 0u);
  EXPECT_EQ(s.completed, 1u);
  EXPECT_EQ(h->first, std::vector<uint64_t>{7});
  EXPECT_EQ(h->first_gpu_hits, 2u);
  EXPECT_EQ(h->done, std::vector<uint64_t>{7});
}

TEST_F(engine_worker_test, unhealthy_refuses_and_abandoned_awards_expire) {
  auto w = spawn();
  engine_metrics down;
  down.answering = false;
  caf::anon_send(w, put_atom::value, down);
  run();
  EXPECT_TRUE(status(w).unhealthy);
  auto a = ask<award_reply>(w, award_atom::value, award(1, 16));
  ASSERT_TRUE(a->has_value() && **a);
  EXPECT_FALSE((**a)->accepted);
  EXPECT_EQ((**a)->reason, unhealthy_reason);
  caf::anon_send(w, put_atom::value, engine_metrics{});
  run();
  EXPECT_FALSE(status(w).unhealthy);
  auto priced = award(2, 16);
  priced.price = 6.25;
  a = ask<award_reply>(w, award_atom::value, priced);
  EXPECT_TRUE((**a)->accepted);
  EXPECT_GT(status(w).queued, 0.0);
  // Only the accepted award counts, at the router's price; the stats for
  // the front say the same.
  EXPECT_EQ(status(w).awards, 1u);
  EXPECT_EQ(status(w).last_price, 6.25);
  auto stats = ask<engine_worker_stats>(w, get_atom::value, stats_atom::value);
  ASSERT_TRUE(stats->has_value() && **stats);
  EXPECT_EQ((**stats)->status.awards, 1u);
  advance(std::chrono::milliseconds(3100));  // past the 2 s TTL, swept
  EXPECT_DOUBLE_EQ(status(w).queued, 0.0);
}

TEST_F(engine_worker_test, bad_options_are_errors) {
  engine_worker_options opt;
  opt.state.block_tokens = 0;
  EXPECT_FALSE(spawn_engine_worker(*sys, opt));
}

}  // namespace
}  // namespace kvmesh::test
