// Tests of actors/router: auctions with all bids, silent bidders, refused
// and unanswered awards, and weight changes.
#include "actors/router.hpp"

#include "actors/index_shard.hpp"

#include "actors/worker.hpp"
#include "fixture.hpp"

namespace kvmesh::test {
namespace {

// A worker double implementing the full interface: it bids what it is told
// and can stay silent or refuse.
struct mock_spec {
  bid b;
  bool silent_bids = false;
  bool silent_awards = false;
  bool refuse = false;
  bool silent_status = false;  // misses its heartbeats
  std::string refusal = "busy";
  std::string endpoint;              // named when it accepts
  std::vector<served_model> models;  // its heartbeat's
  // Its answer to a withdraw: it had not taken the award (withdrawn), its
  // engine started it (mine), or none (a dead worker).
  enum { withdrawn, mine, silent } withdraw = withdrawn;
  std::shared_ptr<int> awards = std::make_shared<int>(0);
  std::shared_ptr<int> releases = std::make_shared<int>(0);
  std::shared_ptr<int> withdraws = std::make_shared<int>(0);
};

struct mock_state {
  static inline const char* name = "mock_worker";
  std::vector<caf::typed_response_promise<bid_list>> unanswered_bids;
  std::vector<caf::typed_response_promise<award_reply>> unanswered_awards;
  std::vector<caf::typed_response_promise<worker_status>> unanswered_status;
  std::vector<caf::typed_response_promise<withdraw_reply>> unanswered_withdraws;
};

worker_actor::behavior_type mock_worker(
    worker_actor::stateful_pointer<mock_state> self, mock_spec spec) {
  return {
      [=](bid_atom, const call_for_bids& cfb) -> caf::result<bid_list> {
        if (spec.silent_bids) {
          auto p = self->make_response_promise<bid_list>();
          self->state.unanswered_bids.push_back(p);
          return p;
        }
        bid b = spec.b;
        b.worker = cfb.workers.empty() ? 0 : cfb.workers.front();
        return bid_list{{b}, {}};
      },
      // Routers call by request; agents use this form.
      [=](bid_atom, const call_for_bids&, const bid_gather_ptr&) {},
      [=](award_atom, const award_msg&) -> caf::result<award_reply> {
        ++*spec.awards;
        if (spec.silent_awards) {
          auto p = self->make_response_promise<award_reply>();
          self->state.unanswered_awards.push_back(p);
          return p;
        }
        return award_reply{!spec.refuse, spec.refuse ? spec.refusal : "",
                           spec.refuse ? "" : spec.endpoint};
      },
      [=](release_atom, const release_msg&) { ++*spec.releases; },
      [=](withdraw_atom, const withdraw_msg&) -> caf::result<withdraw_reply> {
        ++*spec.withdraws;
        if (spec.withdraw == mock_spec::silent) {
          auto p = self->make_response_promise<withdraw_reply>();
          self->state.unanswered_withdraws.push_back(p);
          return p;
        }
        if (spec.withdraw == mock_spec::mine)
          return withdraw_reply{false, spec.endpoint, 1};
        return withdraw_reply{};
      },
      [=](status_atom) -> caf::result<worker_status> {
        if (spec.silent_status) {
          auto p = self->make_response_promise<worker_status>();
          self->state.unanswered_status.push_back(p);
          return p;
        }
        worker_status s;
        s.models = spec.models;
        return s;
      },
      [=](put_atom, drain_atom, bool) {},
      [=](put_atom, shards_atom, std::vector<index_shard_actor>&) {},
      [=](step_atom) {},
  };
}

mock_spec bidder(uint32_t id, double queued, uint64_t active = 0) {
  mock_spec s;
  s.b.worker = id;
  s.b.queued = queued;
  s.b.active = active;
  s.b.capacity = 10000;
  return s;
}

route_request_msg request(uint64_t id) {
  route_request_msg r;
  r.id = id;
  r.blocks = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  r.input_tokens = 5120;
  return r;
}

class router_test : public actor_fixture {
 protected:
  router_actor spawn_router(std::vector<worker_actor> workers,
                            uint32_t max_auctions = 8, price_config price = {},
                            size_t max_held = 1024, size_t max_inflight = 128) {
    router_options opt;
    opt.max_inflight = max_inflight;
    opt.workers = std::move(workers);
    opt.max_auctions = max_auctions;
    opt.price = price;
    opt.max_held = max_held;
    return track(sys->spawn(router, opt));
  }
  router_status status(const router_actor& r) {
    auto s = ask<router_status>(r, status_atom::value);
    EXPECT_TRUE(s->has_value() && **s);
    return s->has_value() && **s ? ***s : router_status{};
  }
  // Indices in a worker list are the bidders' ids in these tests.
  std::vector<worker_actor> mocks(const std::vector<mock_spec>& specs) {
    std::vector<worker_actor> out;
    for (const auto& s : specs)
      out.push_back(track(sys->spawn(mock_worker, s)));
    return out;
  }
  decision route(const router_actor& r, const route_request_msg& req) {
    auto d = ask<decision>(r, route_atom::value, req);
    EXPECT_TRUE(d->has_value() && **d);
    return d->has_value() && **d ? ***d : decision{};
  }
  decision route(const router_actor& r, uint64_t id) {
    return route(r, request(id));
  }
};

TEST_F(router_test, awards_the_cheapest_of_all_bids) {
  std::vector<worker_actor> workers;
  for (uint32_t i = 0; i < 3; ++i) {
    worker_options opt;
    opt.engine.block_tokens = 512;
    opt.engine.cache = {1024, 0, 0};
    opt.ledger.id = i;
    workers.push_back(track(*spawn_worker(*sys, opt)));
  }
  // Worker 1 is busy: it has taken a big request already.
  route_request_msg big = request(99);
  for (uint64_t h = 100; h < 140; ++h)
    big.blocks.push_back(h);
  big.input_tokens = 50 * 512;
  ask<award_reply>(workers[1], award_atom::value, award_msg{big, -1.0, 1});
  auto r = spawn_router(workers);
  const decision d = route(r, 1);
  ASSERT_EQ(d.prices.size(), 3u);
  EXPECT_EQ(d.auctions, 1u);
  EXPECT_NE(d.worker, 1u);
  double winner = -1;
  for (const auto& p : d.prices)
    if (p.worker == d.worker) winner = p.price;
  ASSERT_GE(winner, 0);
  for (const auto& p : d.prices)
    EXPECT_LE(winner, p.price) << "worker " << p.worker;
  // The losers dropped their reservations; the winner queued the request.
  for (uint32_t i = 0; i < 3; ++i) {
    auto s = ask<worker_status>(workers[i], status_atom::value);
    EXPECT_DOUBLE_EQ((**s)->reserved, 0.0) << "worker " << i;
  }
  auto s = ask<worker_status>(workers[d.worker], status_atom::value);
  EXPECT_EQ((**s)->running + (**s)->waiting, 1u);
}

// A redelivered durable request goes to the bidder that says it holds it,
// though another is cheaper: anywhere else it would run twice. Only for a
// durable request: otherwise the claim is ignored.
TEST_F(router_test, a_redelivered_request_goes_to_the_worker_holding_it) {
  auto holder = bidder(1, 50);
  holder.b.holds = true;
  auto ws = mocks({bidder(0, 0), holder, bidder(2, 1)});
  auto r = spawn_router(ws);
  auto again = request(7);
  again.redelivered = true;
  auto d = ask<decision>(r, route_atom::value, again);
  ASSERT_TRUE(d->has_value() && **d);
  EXPECT_EQ((**d)->worker, 1u);
  EXPECT_EQ(*holder.awards, 1);
  // Any durable request (a stream sequence), whatever its delivery count.
  auto durable = request(9);
  durable.stream_sequence = 3;
  auto dd = ask<decision>(r, route_atom::value, durable);
  ASSERT_TRUE(dd->has_value() && **dd);
  EXPECT_EQ((**dd)->worker, 1u);
  EXPECT_EQ(*holder.awards, 2);
  EXPECT_EQ(route(r, 8).worker, 0u);
}

// The outage that lost a durable answer's ack (a nats-server restart) can
// silence the heartbeats of the worker that took it too: counted out, it
// is still asked for a redelivered request, and its claim wins.
TEST_F(router_test, a_redelivered_request_asks_workers_counted_out) {
  auto holder = bidder(1, 50);
  holder.b.holds = true;
  holder.silent_status = true;
  auto ws = mocks({bidder(0, 0), holder});
  auto r = spawn_router(ws);
  advance(std::chrono::milliseconds(4500));  // three beats missed
  ASSERT_EQ(status(r).live_workers, 1u);
  auto again = request(7);
  again.redelivered = true;
  EXPECT_EQ(route(r, again).worker, 1u);
  EXPECT_EQ(*holder.awards, 1);
  // A durable request that comes for the first time by its delivery count
  // may still have been handed out before: a server restarted before its
  // consumer state was on disk counts from one again. Its taker claims it.
  auto first = request(8);
  first.stream_sequence = 4;
  EXPECT_EQ(route(r, first).worker, 1u);
  EXPECT_EQ(*holder.awards, 2);
  // Not durable: only the live are asked, whatever they would claim.
  EXPECT_EQ(route(r, 9).worker, 0u);
  EXPECT_EQ(*holder.awards, 2);
}

// A bid that says another auction of the same durable request is open
// (another router handed it at the same time): with nobody holding it,
// this router awards nothing, lets go of every bid and says why; with a
// holder, the holder wins as always.
TEST_F(router_test, a_contested_durable_request_is_handed_back) {
  auto contested = bidder(0, 0);
  contested.b.contested = true;
  auto ws = mocks({contested, bidder(1, 10)});
  auto r = spawn_router(ws);
  auto durable = request(7);
  durable.stream_sequence = 3;
  auto d = ask<decision>(r, route_atom::value, durable);
  ASSERT_TRUE(d->has_value());
  ASSERT_FALSE(**d);
  EXPECT_EQ((**d).error().code(), static_cast<uint8_t>(ec::conflict));
  EXPECT_EQ(*contested.awards, 0);
  EXPECT_EQ(*contested.releases, 1);
  // Not durable: nothing to contest (no queue hands it out twice).
  EXPECT_EQ(route(r, 8).worker, 0u);
  // A holder decides it.
  auto holder = bidder(1, 10);
  holder.b.holds = true;
  auto r2 = spawn_router(mocks({contested, holder}));
  EXPECT_EQ(route(r2, durable).worker, 1u);
  EXPECT_EQ(*holder.awards, 1);
}

// Asked only for a claim, a worker counted out that makes none cannot win,
// however cheap, and lets go of its reservation.
TEST_F(router_test, a_redelivered_request_nobody_claims_goes_to_the_live) {
  auto out = bidder(0, 0);  // the cheapest, but counted out
  out.silent_status = true;
  auto ws = mocks({out, bidder(1, 40)});
  auto r = spawn_router(ws);
  advance(std::chrono::milliseconds(4500));
  ASSERT_EQ(status(r).live_workers, 1u);
  auto again = request(7);
  again.redelivered = true;
  const decision d = route(r, again);
  EXPECT_EQ(d.worker, 1u);
  EXPECT_EQ(d.prices.size(), 1u);
  EXPECT_EQ(*out.awards, 0);
  EXPECT_EQ(*out.releases, 1);
}

TEST_F(router_test, a_silent_bidder_is_left_out_at_the_deadline) {
  auto silent = bidder(0, 0);
  silent.silent_bids = true;
  auto ws = mocks({silent, bidder(1, 5), bidder(2, 1)});
  auto r = spawn_router(ws);
  auto d = ask<decision>(r, route_atom::value, request(1));
  EXPECT_FALSE(d->has_value());            // still waiting for the silent one
  advance(std::chrono::milliseconds(60));  // past the 50 ms bid deadline
  ASSERT_TRUE(d->has_value() && **d);
  EXPECT_EQ((**d)->worker, 2u);
  EXPECT_EQ((**d)->prices.size(), 2u);
  EXPECT_EQ(*silent.awards, 0);
}

TEST_F(router_test, a_refused_award_is_auctioned_again_then_goes_on) {
  auto refuser = bidder(0, 0);  // cheapest, but its bid never holds
  refuser.refuse = true;
  auto other = bidder(1, 20);
  auto ws = mocks({refuser, other});
  auto r = spawn_router(ws, 2);
  const decision d = route(r, 1);
  EXPECT_EQ(d.worker, 1u);
  EXPECT_EQ(d.auctions, 2u);      // one re-auction, then the runner-up
  EXPECT_EQ(*refuser.awards, 2);  // refused in both rounds
  EXPECT_EQ(*other.awards, 1);
  // Counted by cause: one refusal auctioned again; the second, with no
  // round left, goes to the runner-up. Two rounds of two bids.
  const router_status s = status(r);
  EXPECT_EQ(s.reauctions, 1u);
  EXPECT_EQ(s.reauctions_refused, 1u);
  EXPECT_EQ(s.reauctions_unanswered + s.reauctions_no_bids +
                s.reauctions_saturated + s.reauctions_no_live_worker,
            0u);
  EXPECT_EQ(s.rounds, 2u);
  EXPECT_EQ(s.bids, 4u);
  EXPECT_EQ(s.runner_up_awards, 1u);
}

TEST_F(router_test, an_unhealthy_worker_is_left_out_and_the_front_named) {
  auto sick = bidder(0, 0);  // cheapest, but its engine stopped answering
  sick.refuse = true;
  sick.refusal = unhealthy_reason;
  auto other = bidder(1, 20);
  other.endpoint = "http://gpu-1.example:8001";
  auto r = spawn_router(mocks({sick, other}), 2);
  const decision d = route(r, 1);
  EXPECT_EQ(d.worker, 1u);
  EXPECT_EQ(d.endpoint, "http://gpu-1.example:8001");
  // Out of the second auction at once, not asked again.
  EXPECT_EQ(*sick.awards, 1);
  EXPECT_EQ(d.auctions, 2u);
}

TEST_F(router_test, an_unanswered_award_goes_to_the_runner_up) {
  auto mute = bidder(0, 0);
  mute.silent_awards = true;
  auto ws = mocks({mute, bidder(1, 20)});
  auto r = spawn_router(ws);
  auto d = ask<decision>(r, route_atom::value, request(1));
  EXPECT_FALSE(d->has_value());
  advance(std::chrono::milliseconds(60));  // past the award deadline
  ASSERT_TRUE(d->has_value() && **d);
  EXPECT_EQ((**d)->worker, 1u);
  // Only once the silent worker withdrew its award.
  EXPECT_EQ(*mute.withdraws, 1);
  const router_status s = status(r);
  EXPECT_EQ(s.reauctions, 0u);
  EXPECT_EQ(s.runner_up_awards, 1u);
  EXPECT_EQ(s.rounds, 1u);
  EXPECT_EQ(s.bids, 2u);
}

// A slow worker's engine started the request before the router gave up on
// its award: asked to withdraw, it says the request is its own, and that is
// the decision. The runner-up gets nothing: the request runs once.
TEST_F(router_test, a_late_award_whose_engine_started_it_is_the_decision) {
  auto slow = bidder(0, 0);
  slow.silent_awards = true;
  slow.withdraw = mock_spec::mine;
  slow.endpoint = "http://slow:8001";
  auto next = bidder(1, 20);
  auto r = spawn_router(mocks({slow, next}));
  auto d = ask<decision>(r, route_atom::value, request(1));
  EXPECT_FALSE(d->has_value());
  advance(std::chrono::milliseconds(60));  // past the award deadline
  ASSERT_TRUE(d->has_value() && **d);
  EXPECT_EQ((**d)->worker, 0u);
  EXPECT_EQ((**d)->endpoint, "http://slow:8001");
  EXPECT_EQ(*slow.withdraws, 1);
  EXPECT_EQ(*next.awards, 0);
  const router_status s = status(r);
  EXPECT_EQ(s.decisions, 1u);
  EXPECT_EQ(s.runner_up_awards, 0u);
}

// A dead worker answers neither its award nor the withdraw: the withdraw is
// asked again until its heartbeats count it out, and only then does the
// runner-up get the request (a dead worker runs nothing).
TEST_F(router_test, a_dead_awardee_is_withdrawn_once_its_heartbeats_stop) {
  auto dead = bidder(0, 0);
  dead.silent_awards = true;
  dead.withdraw = mock_spec::silent;
  dead.silent_status = true;
  auto next = bidder(1, 20);
  auto r = spawn_router(mocks({dead, next}));
  auto d = ask<decision>(r, route_atom::value, request(1));
  advance(std::chrono::milliseconds(1000));
  EXPECT_FALSE(d->has_value());  // still withdrawing: it may run it
  EXPECT_EQ(*next.awards, 0);
  EXPECT_GT(*dead.withdraws, 1);  // asked again
  for (int i = 0; i < 10 && !d->has_value(); ++i)
    advance(std::chrono::milliseconds(500));
  ASSERT_TRUE(d->has_value() && **d);
  EXPECT_EQ((**d)->worker, 1u);
  EXPECT_EQ(*next.awards, 1);
  EXPECT_EQ(status(r).runner_up_awards, 1u);
}

TEST_F(router_test, silence_from_every_awardee_is_auctioned_again) {
  auto mute = bidder(0, 0);
  mute.silent_awards = true;
  auto r = spawn_router(mocks({mute}), 2);
  auto d = ask<decision>(r, route_atom::value, request(1));
  // Round 1's only awardee is silent past the award deadline: it is out,
  // and round 2, the last, has nobody live to ask.
  advance(std::chrono::milliseconds(60));
  ASSERT_TRUE(d->has_value());
  EXPECT_FALSE(**d);
  const router_status s = status(r);
  EXPECT_EQ(s.reauctions_unanswered, 1u);
  EXPECT_EQ(s.reauctions, s.reauctions_unanswered);
  EXPECT_EQ(s.rounds, 1u);
}

TEST_F(router_test, a_failure_after_an_unanswered_award_says_it_is_unknown) {
  // Whether the silent worker took the request is unknown: the error is a
  // timeout, which a durable front must not hand back to be decided again.
  // It died: neither the award nor its withdraw is answered.
  auto mute = bidder(0, 0);
  mute.silent_awards = true;
  mute.withdraw = mock_spec::silent;
  mute.silent_status = true;
  auto r = spawn_router(mocks({mute}), 1);
  auto d = ask<decision>(r, route_atom::value, request(1));
  for (int i = 0; i < 100 && !d->has_value(); ++i)
    advance(std::chrono::milliseconds(60));
  ASSERT_TRUE(d->has_value());
  ASSERT_FALSE(**d);
  EXPECT_EQ((**d).error().code(), static_cast<uint8_t>(ec::timeout));
  // A withdrawn award is known not to run: not_found.
  auto slow = bidder(0, 0);
  slow.silent_awards = true;
  auto r3 = spawn_router(mocks({slow}), 1);
  auto d3 = ask<decision>(r3, route_atom::value, request(3));
  for (int i = 0; i < 10 && !d3->has_value(); ++i)
    advance(std::chrono::milliseconds(60));
  ASSERT_TRUE(d3->has_value());
  ASSERT_FALSE(**d3);
  EXPECT_EQ((**d3).error().code(), static_cast<uint8_t>(ec::not_found));
  // Refusals alone are a plain not_found: nobody took it.
  auto no = bidder(0, 0);
  no.refuse = true;
  auto r2 = spawn_router(mocks({no}), 1);
  auto d2 = ask<decision>(r2, route_atom::value, request(2));
  for (int i = 0; i < 10 && !d2->has_value(); ++i)
    advance(std::chrono::milliseconds(60));
  ASSERT_TRUE(d2->has_value());
  ASSERT_FALSE(**d2);
  EXPECT_EQ((**d2).error().code(), static_cast<uint8_t>(ec::not_found));
}

TEST_F(router_test, no_bids_at_all_is_an_error) {
  auto a = bidder(0, 0);
  a.silent_bids = true;
  auto r = spawn_router(mocks({a}));
  auto d = ask<decision>(r, route_atom::value, request(1));
  // Silence is called again, round after round (8 in all), before it is
  // an error.
  for (int i = 0; i < 40 && !d->has_value(); ++i)
    advance(std::chrono::milliseconds(60));
  ASSERT_TRUE(d->has_value());
  ASSERT_FALSE(**d);
  EXPECT_NE(sys->render((**d).error()).find("no worker answered"),
            std::string::npos);
  const router_status s = status(r);
  EXPECT_EQ(s.reauctions, 7u);
  EXPECT_EQ(s.reauctions_no_bids, 7u);
  EXPECT_EQ(s.rounds, 8u);
  EXPECT_EQ(s.bids, 0u);
}

TEST_F(router_test, no_live_worker_holds_the_request_for_the_next_ticks) {
  auto gone = bidder(0, 0);
  gone.silent_status = true;
  auto r = spawn_router(mocks({gone}), 3);
  advance(std::chrono::milliseconds(4500));  // three beats missed
  ASSERT_EQ(status(r).live_workers, 0u);
  auto d = ask<decision>(r, route_atom::value, request(1));
  EXPECT_FALSE(d->has_value());  // held
  EXPECT_EQ(status(r).reauctions_no_live_worker, 1u);
  // Held again on the next tick (round 2), turned away on the one after
  // (round 3 is the last).
  for (int i = 0; i < 5 && !d->has_value(); ++i)
    advance(std::chrono::seconds(1));
  ASSERT_TRUE(d->has_value());
  ASSERT_FALSE(**d);
  EXPECT_NE(sys->render((**d).error()).find("no live worker"),
            std::string::npos);
  const router_status s = status(r);
  EXPECT_EQ(s.reauctions_no_live_worker, 2u);
  EXPECT_EQ(s.reauctions, 2u);
  EXPECT_EQ(s.rounds, 0u);  // no call for bids ever went out
}

TEST_F(router_test, a_weight_change_takes_effect_on_the_next_auction) {
  // A: 10 blocks queued, empty GPU. B: nothing queued, 1000 blocks busy.
  // With the default beta (0) B's occupancy is free: B wins. With
  // beta = 0.03 it costs 30: A wins.
  auto ws = mocks({bidder(0, 10, 0), bidder(1, 0, 1000)});
  auto r = spawn_router(ws);
  EXPECT_EQ(route(r, 1).worker, 1u);
  auto w = ask<price_config>(r, get_atom::value, weights_atom::value);
  ASSERT_TRUE(w->has_value() && **w);
  price_config p = ***w;
  EXPECT_DOUBLE_EQ(p.beta, 0);
  p.beta = 0.03;
  sys->spawn([=](caf::event_based_actor* self) {
    self->send(r, put_atom::value, weights_atom::value, p);
  });
  run();
  w = ask<price_config>(r, get_atom::value, weights_atom::value);
  EXPECT_DOUBLE_EQ((**w)->beta, 0.03);
  EXPECT_EQ(route(r, 2).worker, 0u);
}

TEST_F(router_test, a_worker_missing_three_heartbeats_is_out) {
  auto gone = bidder(1, 0);  // the cheaper one, until it stops answering
  gone.silent_status = true;
  auto ws = mocks({bidder(0, 10), gone});
  auto r = spawn_router(ws);
  EXPECT_EQ(route(r, 1).worker, 1u);
  advance(std::chrono::milliseconds(3500));  // two beats missed so far
  EXPECT_EQ(status(r).live_workers, 2u);
  advance(std::chrono::milliseconds(1000));  // the third
  EXPECT_EQ(status(r).live_workers, 1u);
  const decision d = route(r, 2);
  EXPECT_EQ(d.worker, 0u);
  EXPECT_EQ(d.prices.size(), 1u);  // it was not even asked
}

TEST_F(router_test, a_saturated_fleet_holds_requests_then_says_overloaded) {
  price_config tight;
  tight.overload_ceiling = 0.01;  // every price is past it
  auto r = spawn_router(mocks({bidder(0, 0)}), 8, tight, 1);
  auto first = ask<decision>(r, route_atom::value, request(1));
  EXPECT_FALSE(first->has_value());  // held
  auto second = ask<decision>(r, route_atom::value, request(2));
  ASSERT_TRUE(second->has_value());
  ASSERT_FALSE(**second);
  EXPECT_EQ((**second).error(), caf::make_error(ec::capacity_exceeded));
  EXPECT_NE(sys->render((**second).error()).find("overloaded"),
            std::string::npos);
  auto s = status(r);
  EXPECT_EQ(s.held, 1u);
  EXPECT_EQ(s.overloaded, 1u);
  // The held one will be auctioned again; the turned-away one will not.
  EXPECT_EQ(s.reauctions_saturated, 1u);
  EXPECT_EQ(s.reauctions, 1u);
  // The ceiling lifts; the next tick routes the held request.
  sys->spawn([=](caf::event_based_actor* self) {
    self->send(r, put_atom::value, weights_atom::value, price_config{});
  });
  advance(std::chrono::seconds(1));
  ASSERT_TRUE(first->has_value() && **first);
  EXPECT_EQ((**first)->worker, 0u);
  EXPECT_EQ(status(r).held, 0u);
}

TEST_F(router_test, auctions_beyond_max_inflight_wait_then_overload) {
  auto silent = bidder(0, 0);  // keeps each auction open for 50 ms
  silent.silent_bids = true;
  auto r = spawn_router(mocks({silent, bidder(1, 0)}), 8, {}, 1, 2);
  auto d1 = ask<decision>(r, route_atom::value, request(1));
  auto d2 = ask<decision>(r, route_atom::value, request(2));
  auto d3 = ask<decision>(r, route_atom::value, request(3));  // waits
  auto d4 = ask<decision>(r, route_atom::value, request(4));  // no room
  ASSERT_TRUE(d4->has_value());
  ASSERT_FALSE(**d4);
  EXPECT_EQ((**d4).error(), caf::make_error(ec::capacity_exceeded));
  EXPECT_NE(sys->render((**d4).error()).find("2 auctions in flight"),
            std::string::npos);
  EXPECT_FALSE(d1->has_value() || d2->has_value() || d3->has_value());
  EXPECT_EQ(status(r).held, 1u);
  advance(std::chrono::milliseconds(60));  // 1 and 2 end; 3 starts
  ASSERT_TRUE(d1->has_value() && **d1 && d2->has_value() && **d2);
  EXPECT_FALSE(d3->has_value());
  advance(std::chrono::milliseconds(60));
  ASSERT_TRUE(d3->has_value() && **d3);
  EXPECT_EQ((**d3)->worker, 1u);
  EXPECT_EQ(status(r).held, 0u);
  EXPECT_EQ(status(r).overloaded, 1u);
}

TEST_F(router_test, above_the_fanout_bound_it_asks_holders_and_least_loaded) {
  auto shard = track(*spawn_index_shard(*sys, index_shard_options{}));
  // Worker 3 holds the request's whole prefix.
  const auto r1 = request(1);
  std::vector<cache_event> held;
  for (uint64_t h : r1.blocks)
    held.push_back(cache_event{cache_event::stored, tier::gpu, h, 1});
  sys->spawn([=](caf::event_based_actor* self) {
    self->send(shard, kv_atom::value, uint32_t{3}, held);
  });
  run();
  router_options opt;
  opt.workers = mocks({bidder(0, 0), bidder(1, 0), bidder(2, 0), bidder(3, 0)});
  opt.shards = {shard};
  opt.fanout = 2;
  auto r = track(sys->spawn(router, opt));
  const decision d = route(r, 1);
  ASSERT_EQ(d.prices.size(), 2u);  // not all four were asked
  std::vector<uint32_t> asked{d.prices[0].worker, d.prices[1].worker};
  std::sort(asked.begin(), asked.end());
  // The holder, and the least loaded (all equal: the first) of the rest.
  EXPECT_EQ(asked, (std::vector<uint32_t>{0, 3}));

  // A redelivered request goes to everyone: the worker that took it may
  // hold none of its prefix (here worker 2, which the index does not name).
  auto claimer = bidder(2, 0);
  claimer.b.holds = true;
  opt.workers = mocks({bidder(0, 0), bidder(1, 0), claimer, bidder(3, 0)});
  auto r2 = track(sys->spawn(router, opt));
  auto again = request(1);
  again.redelivered = true;
  const decision d2 = route(r2, again);
  EXPECT_EQ(d2.prices.size(), 4u);
  EXPECT_EQ(d2.worker, 2u);
  EXPECT_EQ(*claimer.awards, 1);
}

// Their words class these failures in kvmesh_router_failures_total
// (cluster/meters.cpp): a change of words here must change that too.
TEST_F(router_test, failures_say_why_in_the_words_the_metrics_class) {
  auto error_of = [&](const router_actor& r, uint64_t id) {
    auto d = ask<decision>(r, route_atom::value, request(id));
    for (int i = 0; i < 20 && !d->has_value(); ++i)
      advance(std::chrono::seconds(1));
    EXPECT_TRUE(d->has_value() && !**d);
    return d->has_value() && !**d ? sys->render((**d).error()) : "";
  };
  auto refuser = bidder(0, 0);
  refuser.refuse = true;
  EXPECT_NE(error_of(spawn_router(mocks({refuser}), 2), 1)
                .find("no worker took request 1"),
            std::string::npos);
  EXPECT_NE(error_of(spawn_router({}), 2).find("router has no workers"),
            std::string::npos);
  auto gone = bidder(0, 0);
  gone.silent_status = true;
  auto r = spawn_router(mocks({gone}));
  advance(std::chrono::milliseconds(4500));  // three heartbeats missed
  EXPECT_NE(error_of(r, 3).find("no live worker for request 3"),
            std::string::npos);
}

TEST_F(router_test, a_request_without_blocks_is_an_error) {
  auto r = spawn_router(mocks({bidder(0, 0)}));
  route_request_msg empty;
  empty.id = 7;
  auto d = ask<decision>(r, route_atom::value, empty);
  ASSERT_TRUE(d->has_value());
  EXPECT_FALSE(**d);
}

// Only a request's model pool bids, whatever the others would charge; a
// request naming no model may go to any worker; workers it excludes are not
// asked; a model nobody serves is an error of its own.
TEST_F(router_test, only_the_requests_model_pool_bids) {
  auto llama = bidder(0, 50);  // dearer
  llama.models = {{"llama", ""}};
  auto qwen = bidder(1, 0);
  qwen.models = {{"qwen", ""}, {"qwen-lora", "qwen"}};
  auto r = spawn_router(mocks({llama, qwen}));
  advance(std::chrono::seconds(1));  // the first heartbeats name the models
  auto req = request(1);
  req.model = "llama";
  decision d = route(r, req);
  EXPECT_EQ(d.worker, 0u);
  EXPECT_EQ(d.prices.size(), 1u) << "only the pool is asked";
  req.id = 2;
  req.model = "qwen-lora";
  EXPECT_EQ(route(r, req).worker, 1u);
  req.id = 3;
  req.model = "";
  d = route(r, req);
  EXPECT_EQ(d.worker, 1u);  // the cheaper of all
  EXPECT_EQ(d.prices.size(), 2u);
  req.id = 30;
  req.exclude = {1};  // its engine just failed this request: not again
  d = route(r, req);
  EXPECT_EQ(d.worker, 0u);
  EXPECT_EQ(d.prices.size(), 1u);
  req.exclude = {};
  req.id = 4;
  req.model = "mistral";
  req.client_id = "abc";
  auto e = ask<decision>(r, route_atom::value, req);
  ASSERT_TRUE(e->has_value());
  ASSERT_FALSE(**e);
  EXPECT_EQ((**e).error(), caf::make_error(ec::not_found));
  EXPECT_NE(sys->render((**e).error()).find("unknown model 'mistral'"),
            std::string::npos);
}

}  // namespace
}  // namespace kvmesh::test
