// Tests of actors/worker: bids, reservations, awards and the engine clock.
#include "actors/worker.hpp"

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>

#include "actors/index_shard.hpp"

#include "fixture.hpp"

namespace kvmesh::test {
namespace {

class worker_test : public actor_fixture {
 protected:
  worker_actor spawn(uint32_t id = 0, double refuse_growth = 0) {
    worker_options opt;
    opt.engine.block_tokens = 16;
    opt.engine.cache = {64, 64, 0};
    opt.ledger.id = id;
    opt.ledger.refuse_growth = refuse_growth;
    opt.ledger.reservation_ms = 500;
    auto w = spawn_worker(*sys, opt);
    EXPECT_TRUE(w) << w.err().message;
    return track(*w);
  }

  static route_request_msg request(uint64_t id, uint64_t first_hash,
                                   uint32_t blocks = 4) {
    route_request_msg r;
    r.id = id;
    for (uint32_t i = 0; i < blocks; ++i)
      r.blocks.push_back(first_hash + i);
    r.input_tokens = 16 * blocks;
    r.output_tokens = 2;
    return r;
  }

  // The worker's own bid in its answer to a call for bids.
  std::optional<bid> bid_of(const worker_actor& w, const call_for_bids& cfb) {
    auto l = ask<bid_list>(w, bid_atom::value, cfb);
    EXPECT_TRUE(l->has_value() && **l);
    if (!l->has_value() || !**l || (**l)->bids.size() != 1) return {};
    return (**l)->bids.front();
  }

  worker_status status(const worker_actor& w) {
    auto s = ask<worker_status>(w, status_atom::value);
    EXPECT_TRUE(s->has_value() && **s);
    return ***s;
  }
};

// When a listener heard of each request's first and last token, in ms of
// the actor clock since `origin`.
struct token_times {
  caf::actor_clock::time_point origin;
  std::map<uint64_t, double> first, done;
};

listener_actor::behavior_type timer(listener_actor::pointer self,
                                    std::shared_ptr<token_times> t) {
  auto ms = [=] {
    return std::chrono::duration<double, std::milli>(self->clock().now() -
                                                     t->origin)
        .count();
  };
  return {
      [=](first_atom, uint64_t id, uint32_t, uint32_t, uint32_t) {
        t->first[id] = ms();
      },
      [=](done_atom, uint64_t id) { t->done[id] = ms(); },
  };
}

// Awards that reach the worker together share its engine's next step, as
// vLLM's engine core takes its whole input queue before a step: two
// 4096-token prompts on the engine's defaults (64-token blocks, 16384 of
// them, an 8192-token budget) prefill in one 8192-token step.
TEST_F(worker_test, awards_that_come_together_share_a_step) {
  auto t = std::make_shared<token_times>();
  t->origin = sched->clock().now();
  worker_options opt;  // the engine's defaults
  opt.listener = sys->spawn(timer, t);
  auto w = spawn_worker(*sys, opt);
  ASSERT_TRUE(w) << w.err().message;
  track(*w);
  auto prompt = [](uint64_t id) {
    route_request_msg r;
    r.id = id;
    for (uint64_t b = 0; b < 64; ++b)
      r.blocks.push_back(1000 * id + b);
    r.input_tokens = 4096;
    r.output_tokens = 64;
    return r;
  };
  auto accepted = std::make_shared<int>(0);
  auto dest = *w;
  sys->spawn([=](caf::event_based_actor* self) {
    for (uint64_t id : {1, 2})
      self->request(dest, caf::infinite, award_atom::value,
                    award_msg{prompt(id), -1.0, 0})
          .then([=](const award_reply& a) { *accepted += a.accepted; });
  });
  run();
  EXPECT_EQ(*accepted, 2);
  EXPECT_EQ(status(dest).running, 2u);
  for (int i = 0; i < 20 && t->done.size() < 2; ++i)
    advance(std::chrono::milliseconds(100));
  ASSERT_EQ(t->done.size(), 2u);
  // Both first tokens come from the step's prefill pass, then a decode pass
  // per token (130 blocks active).
  const double step = prefill_ms(8192);
  const double itl = decode_ms(130.0 / 16384);
  for (uint64_t id : {1, 2}) {
    EXPECT_NEAR(t->first.at(id), step, 0.1) << id;
    EXPECT_NEAR((t->done.at(id) - t->first.at(id)) / 63, itl, 0.01) << id;
  }
}

TEST_F(worker_test, bids_and_holds_its_share) {
  auto w = spawn(3);
  call_for_bids cfb{request(1, 100), 4.0, {}};  // four bidders of speed 1
  auto b = bid_of(w, cfb);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->worker, 3u);
  EXPECT_EQ(b->gpu, 0u);
  EXPECT_EQ(b->capacity, 64u);
  EXPECT_DOUBLE_EQ(status(w).reserved, 1.0);  // 4 blocks / 4 bidders
}

TEST_F(worker_test, reservations_expire_on_the_actor_clock) {
  auto w = spawn();
  bid_of(w, call_for_bids{request(1, 100), 1.0, {}});
  EXPECT_DOUBLE_EQ(status(w).reserved, 4.0);
  advance(std::chrono::milliseconds(400));
  bid_of(w, call_for_bids{request(2, 200), 1.0, {}});
  EXPECT_DOUBLE_EQ(status(w).reserved, 8.0);  // both still open
  advance(std::chrono::milliseconds(200));    // request 1's is past 500 ms
  bid_of(w, call_for_bids{request(3, 300), 1.0, {}});
  EXPECT_DOUBLE_EQ(status(w).reserved, 8.0);  // 2 and 3
}

TEST_F(worker_test, award_runs_the_request_on_the_engine_clock) {
  auto w = spawn();
  auto reply = ask<award_reply>(w, award_atom::value,
                                award_msg{request(1, 100), -1.0, 0});
  ASSERT_TRUE(reply->has_value() && **reply);
  EXPECT_TRUE((**reply)->accepted);
  auto s = status(w);
  EXPECT_EQ(s.running, 1u);
  EXPECT_GT(s.queued, 0.0);
  // The engine's steps take tens of milliseconds of actor time.
  for (int i = 0; i < 10 && status(w).completed == 0; ++i)
    advance(std::chrono::milliseconds(100));
  s = status(w);
  EXPECT_EQ(s.completed, 1u);
  EXPECT_DOUBLE_EQ(s.queued, 0.0);
  EXPECT_EQ(s.gpu_blocks, 4u);  // its prompt stays cached
  // A second request with the same prompt now bids with a full GPU match.
  auto b = bid_of(w, call_for_bids{request(2, 100), 1.0, {}});
  ASSERT_TRUE(b);
  EXPECT_EQ(b->gpu, 4u);
}

// A shard the worker learns of (the agent heard of it late, or it came back
// from a restart) gets all the worker holds, and forgets what it had of the
// worker that the worker no longer holds.
TEST_F(worker_test, announces_its_cache_to_shards_it_learns_of) {
  auto w = spawn();
  auto reply = ask<award_reply>(w, award_atom::value,
                                award_msg{request(1, 100), -1.0, 0});
  ASSERT_TRUE(reply->has_value() && **reply && (**reply)->accepted);
  for (int i = 0; i < 10 && status(w).completed == 0; ++i)
    advance(std::chrono::milliseconds(100));
  ASSERT_EQ(status(w).gpu_blocks, 4u);  // cached before any shard was known
  auto shard = track(*spawn_index_shard(*sys, index_shard_options{}));
  auto send = [&](auto... xs) {
    sys->spawn([=](caf::event_based_actor* self) { self->send(xs...); });
    run();
  };
  // A block the shard still has of worker 0, whose removal it missed.
  send(shard, kv_atom::value, uint32_t{0},
       std::vector<cache_event>{{cache_event::stored, tier::gpu, 999, 999}});
  send(w, put_atom::value, shards_atom::value,
       std::vector<index_shard_actor>{shard});
  auto held = ask<std::vector<holder_match>>(
      shard, query_atom::value, std::vector<uint64_t>{100, 101, 102, 103});
  ASSERT_TRUE(held->has_value() && **held);
  ASSERT_EQ((**held)->size(), 1u);
  EXPECT_EQ((**held)->front().worker, 0u);
  EXPECT_EQ((**held)->front().gpu, 4u);
  auto stale = ask<std::vector<holder_match>>(shard, query_atom::value,
                                              std::vector<uint64_t>{999});
  ASSERT_TRUE(stale->has_value() && **stale);
  EXPECT_TRUE((**stale)->empty());
}

// The router gave up on an award (silence past its deadline) and releases
// it; a worker that accepted it late takes it back before its first token.
TEST_F(worker_test, a_released_award_is_taken_back_before_its_first_token) {
  auto w = spawn();
  for (uint64_t id : {1, 2}) {
    auto reply = ask<award_reply>(w, award_atom::value,
                                  award_msg{request(id, 100 * id), -1.0, 0});
    ASSERT_TRUE(reply->has_value() && **reply && (**reply)->accepted);
  }
  // Request 1 is in the engine's step; 2 waits for the next one.
  ASSERT_EQ(status(w).waiting, 1u);
  sys->spawn([=](caf::event_based_actor* self) {
    self->send(w, release_atom::value, release_msg{2, {0}});  // waiting
    self->send(w, release_atom::value, release_msg{1, {0}});  // in the step
  });
  run();
  EXPECT_EQ(status(w).waiting, 0u);
  for (int i = 0; i < 10; ++i)
    advance(std::chrono::milliseconds(100));
  auto s = status(w);
  EXPECT_EQ(s.running, 0u);
  EXPECT_EQ(s.completed, 0u);  // neither ran
  EXPECT_DOUBLE_EQ(s.queued, 0.0);
}

// The router gave up on an award that never reached this worker (lost, or
// still on its way): the withdraw frees the bid's reservation, and the
// award, should it come after all, is refused: the request went elsewhere.
TEST_F(worker_test, a_withdrawn_award_is_refused_when_it_comes) {
  auto w = spawn();
  ASSERT_TRUE(bid_of(w, call_for_bids{request(1, 100), 1.0, {}}));
  ASSERT_GT(status(w).reserved, 0.0);
  auto out = ask<withdraw_reply>(w, withdraw_atom::value, withdraw_msg{1, 0});
  ASSERT_TRUE(out->has_value() && **out);
  EXPECT_TRUE((**out)->withdrawn);
  EXPECT_DOUBLE_EQ(status(w).reserved, 0.0);
  auto late = ask<award_reply>(w, award_atom::value,
                               award_msg{request(1, 100), -1.0, 0});
  ASSERT_TRUE(late->has_value() && **late);
  EXPECT_FALSE((**late)->accepted);
  EXPECT_EQ((**late)->reason, "withdrawn");
  // Asked again (its answer was lost): the same answer.
  out = ask<withdraw_reply>(w, withdraw_atom::value, withdraw_msg{1, 0});
  EXPECT_TRUE((**out)->withdrawn);
  for (int i = 0; i < 10; ++i)
    advance(std::chrono::milliseconds(100));
  EXPECT_EQ(status(w).completed, 0u);
  // Other requests are taken as before.
  auto other = ask<award_reply>(w, award_atom::value,
                                award_msg{request(2, 200), -1.0, 0});
  EXPECT_TRUE((**other)->accepted);
}

// A durable request handed out again (its answer lost) reaches a worker
// that took it already: its bid says so, reserving nothing, and the award
// is accepted again without a second run. Without the redelivered flag the
// worker does not look (a request id is the client's to reuse).
TEST_F(worker_test, a_redelivered_request_it_took_is_held_not_run_twice) {
  auto w = spawn();
  auto first = ask<award_reply>(w, award_atom::value,
                                award_msg{request(1, 100), -1.0, 0});
  ASSERT_TRUE(first->has_value() && **first && (**first)->accepted);
  const auto busy = status(w);
  ASSERT_EQ(busy.waiting + busy.running, 1u);
  auto again = request(1, 100);
  again.redelivered = true;
  auto b = bid_of(w, call_for_bids{again, 1.0, {}});
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->holds);
  EXPECT_DOUBLE_EQ(status(w).reserved, 0.0);
  auto second =
      ask<award_reply>(w, award_atom::value, award_msg{again, -1.0, 0});
  ASSERT_TRUE(second->has_value() && **second);
  EXPECT_TRUE((**second)->accepted);
  EXPECT_EQ((**second)->count, (**first)->count);
  const auto after = status(w);
  EXPECT_EQ(after.waiting + after.running, 1u);  // not submitted again
  // A request it never took: an ordinary bid.
  auto other = request(2, 200);
  other.redelivered = true;
  auto ob = bid_of(w, call_for_bids{other, 1.0, {}});
  ASSERT_TRUE(ob);
  EXPECT_FALSE(ob->holds);
  // Not redelivered: no look at what it took.
  auto plain = bid_of(w, call_for_bids{request(1, 100), 1.0, {}});
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->holds);
}

// A JetStream cluster that lost a node handed decided durable requests out
// again as first deliveries (delivery count 1): a worker looks for every
// durable request, matching its stream sequence too, since the id alone
// is the client's to reuse.
TEST_F(worker_test, a_durable_request_it_took_is_held_whatever_its_count) {
  auto w = spawn();
  auto durable = request(7, 100);
  durable.stream_sequence = 41;
  auto first =
      ask<award_reply>(w, award_atom::value, award_msg{durable, -1.0, 0});
  ASSERT_TRUE(first->has_value() && **first && (**first)->accepted);
  // Handed out again, counted as a first delivery.
  auto b = bid_of(w, call_for_bids{durable, 1.0, {}});
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->holds);
  auto second =
      ask<award_reply>(w, award_atom::value, award_msg{durable, -1.0, 0});
  ASSERT_TRUE(second->has_value() && **second && (**second)->accepted);
  EXPECT_EQ((**second)->count, (**first)->count);
  const auto after = status(w);
  EXPECT_EQ(after.waiting + after.running, 1u);  // not submitted again
  // The same id at another place in the stream: another request.
  auto reused = request(7, 100);
  reused.stream_sequence = 42;
  auto rb = bid_of(w, call_for_bids{reused, 1.0, {}});
  ASSERT_TRUE(rb);
  EXPECT_FALSE(rb->holds);
}

// Handed to two routers at once (a queue handing a durable request out
// twice): the second auction to ask hears that the first one's bid is
// open here; a later round of the same auction, or a request that cannot
// have been handed out before, does not.
TEST_F(worker_test, a_durable_request_in_two_auctions_at_once_is_contested) {
  auto w = spawn();
  auto durable = request(7, 100);
  durable.stream_sequence = 41;
  auto first = bid_of(w, call_for_bids{durable, 1.0, {}, 1001});
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->contested);
  auto again = bid_of(w, call_for_bids{durable, 1.0, {}, 1001});
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->contested);
  auto other = bid_of(w, call_for_bids{durable, 1.0, {}, 2002});
  ASSERT_TRUE(other);
  EXPECT_TRUE(other->contested);
  // Not durable: ids are the client's, and no queue hands it out twice.
  auto plain = request(8, 100);
  ASSERT_TRUE(bid_of(w, call_for_bids{plain, 1.0, {}, 1001}));
  auto plain2 = bid_of(w, call_for_bids{plain, 1.0, {}, 2002});
  ASSERT_TRUE(plain2);
  EXPECT_FALSE(plain2->contested);
}

// A late award the engine has not started is withdrawn (and not run); one
// whose first token is out stays: the worker says it runs it, with the
// count its award's reply had.
TEST_F(worker_test,
       a_withdraw_takes_back_only_what_the_engine_has_not_started) {
  auto w = spawn();
  uint64_t counts[3] = {};
  for (uint64_t id : {1, 2}) {
    auto reply = ask<award_reply>(w, award_atom::value,
                                  award_msg{request(id, 100 * id), -1.0, 0});
    ASSERT_TRUE(reply->has_value() && **reply && (**reply)->accepted);
    counts[id] = (**reply)->count;
  }
  // Request 1 is in the engine's step; 2 waits for the next one.
  ASSERT_EQ(status(w).waiting, 1u);
  auto two = ask<withdraw_reply>(w, withdraw_atom::value, withdraw_msg{2, 0});
  ASSERT_TRUE(two->has_value() && **two);
  EXPECT_TRUE((**two)->withdrawn);
  EXPECT_EQ(status(w).waiting, 0u);
  advance(std::chrono::milliseconds(100));  // 1's prefill: its first token
  auto one = ask<withdraw_reply>(w, withdraw_atom::value, withdraw_msg{1, 0});
  ASSERT_TRUE(one->has_value() && **one);
  EXPECT_FALSE((**one)->withdrawn);
  EXPECT_EQ((**one)->count, counts[1]);
  for (int i = 0; i < 10; ++i)
    advance(std::chrono::milliseconds(100));
  EXPECT_EQ(status(w).completed, 1u);  // 1 ran, 2 did not
  // Even run to its end, it is still this worker's.
  one = ask<withdraw_reply>(w, withdraw_atom::value, withdraw_msg{1, 0});
  EXPECT_FALSE((**one)->withdrawn);
}

TEST_F(worker_test, refuses_an_award_once_its_queue_moved) {
  auto w = spawn(0, 0.5);
  bid_of(w, call_for_bids{request(1, 100), 1.0, {}});
  // Another router's award lands first: 4 blocks of queued work.
  auto first = ask<award_reply>(w, award_atom::value,
                                award_msg{request(2, 200), -1.0, 0});
  EXPECT_TRUE((**first)->accepted);
  auto second = ask<award_reply>(w, award_atom::value,
                                 award_msg{request(1, 100), -1.0, 0});
  ASSERT_TRUE(second->has_value() && **second);
  EXPECT_FALSE((**second)->accepted);
  EXPECT_NE((**second)->reason.find("queue grew"), std::string::npos);
}

TEST_F(worker_test, takes_an_award_whose_growth_the_router_expected) {
  auto w = spawn(0, 0.5);
  bid_of(w, call_for_bids{request(1, 100), 1.0, {}});
  ask<award_reply>(w, award_atom::value, award_msg{request(2, 200), -1.0, 0});
  // The router priced request 1 knowing request 2 was coming: 4 blocks.
  auto reply = ask<award_reply>(w, award_atom::value,
                                award_msg{request(1, 100), 4.0, 0});
  ASSERT_TRUE(reply->has_value() && **reply);
  EXPECT_TRUE((**reply)->accepted);
}

TEST_F(worker_test, refuses_what_can_never_fit) {
  auto w = spawn();
  auto reply = ask<award_reply>(w, award_atom::value,
                                award_msg{request(1, 100, 80), -1.0, 0});
  EXPECT_FALSE((**reply)->accepted);
  EXPECT_NE((**reply)->reason.find("KV blocks"), std::string::npos);
  EXPECT_DOUBLE_EQ(status(w).queued, 0.0);
}

TEST_F(worker_test, counts_accepted_awards_and_their_last_price) {
  auto w = spawn(0, 0.5);
  auto s = status(w);
  EXPECT_EQ(s.awards, 0u);
  EXPECT_TRUE(std::isnan(s.last_price));  // none yet
  EXPECT_EQ(s.host_capacity, 64u);
  EXPECT_EQ(s.disk_capacity, 0u);
  bid_of(w, call_for_bids{request(1, 100), 1.0, {}});
  auto first = ask<award_reply>(w, award_atom::value,
                                award_msg{request(2, 200), -1.0, 0, 12.5});
  EXPECT_TRUE((**first)->accepted);
  s = status(w);
  EXPECT_EQ(s.awards, 1u);
  EXPECT_EQ(s.last_price, 12.5);
  // Refused (its queue grew since the bid): neither counted nor priced.
  auto second = ask<award_reply>(w, award_atom::value,
                                 award_msg{request(1, 100), -1.0, 0, 3.0});
  EXPECT_FALSE((**second)->accepted);
  s = status(w);
  EXPECT_EQ(s.awards, 1u);
  EXPECT_EQ(s.last_price, 12.5);
  // An award from a router that does not say its price: none known.
  auto third = ask<award_reply>(w, award_atom::value,
                                award_msg{request(3, 300), -1.0, 0});
  EXPECT_TRUE((**third)->accepted);
  s = status(w);
  EXPECT_EQ(s.awards, 2u);
  EXPECT_TRUE(std::isnan(s.last_price));
}

TEST_F(worker_test, bids_only_when_asked_by_id) {
  auto w = spawn(3);
  auto l = ask<bid_list>(w, bid_atom::value,
                         call_for_bids{request(1, 100), 1.0, {4, 5}});
  ASSERT_TRUE(l->has_value() && **l);
  EXPECT_TRUE((**l)->bids.empty());
  EXPECT_NE((**l)->error.find("worker 3 was not asked"), std::string::npos);
  EXPECT_DOUBLE_EQ(status(w).reserved, 0.0);  // no reservation either
  auto b = bid_of(w, call_for_bids{request(2, 100), 1.0, {4, 3}});
  ASSERT_TRUE(b);
  EXPECT_EQ(b->worker, 3u);
}

TEST_F(worker_test, answers_a_call_made_with_a_gather_in_its_slot) {
  auto w = spawn(3);
  auto got = call_bids(w, call_for_bids{request(1, 100), 4.0, {}}, 7);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, 7u);
  ASSERT_EQ(got[0].second.bids.size(), 1u);
  EXPECT_EQ(got[0].second.bids[0].worker, 3u);
  EXPECT_DOUBLE_EQ(status(w).reserved, 1.0);  // its share, held
  // Not asked: it answers without a bid (the gather is told all the same),
  // and reserves nothing.
  got = call_bids(w, call_for_bids{request(2, 200), 4.0, {5}}, 8);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, 8u);
  EXPECT_TRUE(got[0].second.bids.empty());
  EXPECT_DOUBLE_EQ(status(w).reserved, 1.0);
}

TEST_F(worker_test, bad_options_are_errors) {
  worker_options opt;
  opt.engine.cache.gpu_blocks = 0;
  EXPECT_FALSE(spawn_worker(*sys, opt));
  opt = {};
  opt.time_scale = 0;
  EXPECT_FALSE(spawn_worker(*sys, opt));
}

}  // namespace
}  // namespace kvmesh::test
