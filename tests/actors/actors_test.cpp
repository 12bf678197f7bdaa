// Tests of actors/actors.hpp's helpers: the bid gather a node agent's
// workers answer into.
#include "actors/actors.hpp"

#include "fixture.hpp"

namespace kvmesh::test {
namespace {

using actors_test = actor_fixture;

bid bid_of(uint32_t worker) {
  bid b;
  b.worker = worker;
  return b;
}

TEST_F(actors_test, a_gather_tells_once_when_every_slot_answered) {
  auto told = std::make_shared<std::vector<uint64_t>>();
  auto to = sys->spawn([=](caf::event_based_actor*) -> caf::behavior {
    return {[=](bid_atom, uint64_t tag) { told->push_back(tag); }};
  });
  bid_gather g(3, caf::actor_cast<caf::actor_addr>(to), 17);
  g.put(2, nullptr);  // asked, no bid
  const bid b0 = bid_of(7);
  g.put(0, &b0);
  run();
  EXPECT_TRUE(told->empty());
  // Before the last answer (a sweep after a worker died): what came so far.
  std::vector<bid> so_far;
  g.collect(so_far);
  ASSERT_EQ(so_far.size(), 1u);
  EXPECT_EQ(so_far[0].worker, 7u);
  const bid b1 = bid_of(9);
  g.put(1, &b1);
  run();
  ASSERT_EQ(told->size(), 1u);
  EXPECT_EQ(told->front(), 17u);
  // In the call's order, whatever the order of the answers.
  std::vector<bid> all;
  g.collect(all);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].worker, 7u);
  EXPECT_EQ(all[1].worker, 9u);
  anon_send_exit(to, caf::exit_reason::user_shutdown);
}

TEST_F(actors_test, a_worker_outside_the_call_counts_without_a_slot) {
  auto told = std::make_shared<int>(0);
  auto to = sys->spawn([=](caf::event_based_actor*) -> caf::behavior {
    return {[=](bid_atom, uint64_t) { ++*told; }};
  });
  call_for_bids cfb;
  cfb.workers = {4, 6};
  EXPECT_EQ(place_in_call(cfb, 6), 1u);
  EXPECT_EQ(place_in_call(cfb, 5), 2u);              // not listed
  EXPECT_EQ(place_in_call(call_for_bids{}, 5), 0u);  // empty: the one called
  bid_gather g(2, caf::actor_cast<caf::actor_addr>(to), 1);
  const bid b = bid_of(5);
  g.put(place_in_call(cfb, 5), &b);
  g.put(place_in_call(cfb, 4), nullptr);
  run();
  EXPECT_EQ(*told, 1);
  std::vector<bid> all;
  g.collect(all);
  EXPECT_TRUE(all.empty());
  anon_send_exit(to, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace kvmesh::test
