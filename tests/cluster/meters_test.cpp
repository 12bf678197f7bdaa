// Tests of cluster/meters: the classes of a ROUTER's errors and what a
// decision adds to the router's series.
#include "cluster/meters.hpp"

#include <gtest/gtest.h>

namespace kvmesh::test {
namespace {

TEST(meters, route_errors_are_classed_by_code_and_the_routers_words) {
  // The texts are actors/router.cpp's (tests/actors/router_test.cpp
  // checks that the ROUTER says them).
  EXPECT_EQ(classify_route_error(ec::capacity_exceeded,
                                 "overloaded: 128 auctions in flight and "
                                 "1024 requests waiting"),
            route_failure::overloaded);
  EXPECT_EQ(
      classify_route_error(ec::not_found,
                           "no worker took request 7 (last refusal: draining)"),
      route_failure::refused);
  EXPECT_EQ(classify_route_error(ec::not_found, "no live worker for request 7"),
            route_failure::no_workers);
  EXPECT_EQ(classify_route_error(ec::not_found, "router has no workers"),
            route_failure::no_workers);
  EXPECT_EQ(
      classify_route_error(
          ec::not_found, "no worker answered the call for bids for request 7"),
      route_failure::no_workers);
  EXPECT_EQ(
      classify_route_error(ec::empty_input, "request 7 has no prompt tokens"),
      route_failure::other);
  EXPECT_EQ(classify_route_error(ec::not_found, "something new"),
            route_failure::other);
  EXPECT_STREQ(to_string(route_failure::no_workers), "no_workers");
  // A durable request's handback is named by its cause's label.
  EXPECT_STREQ(to_string(handback::no_workers), "no_workers");
  EXPECT_STREQ(to_string(handback::overloaded), "overloaded");
  EXPECT_STREQ(to_string(handback::contested), "contested");
  EXPECT_STREQ(to_string(handback::unclaimed), "unclaimed");
}

TEST(meters, a_decision_adds_its_latency_bids_and_winners_terms) {
  metrics::registry reg;
  router_meters m;
  m.auction_seconds = *(*reg.add_histogram("a", "", {0.001, 0.01}))->with({});
  m.bids_per_auction = *(*reg.add_histogram("b", "", {1, 2, 4}))->with({});
  m.winner_price = *(*reg.add_histogram("p", "", {10, 100}))->with({});
  auto terms = *reg.add_counter("t_total", "", {"term"});
  const char* names[7] = {"read",  "credit_gpu", "credit_host", "credit_disk",
                          "space", "overflow",   "wait"};
  for (size_t i = 0; i < 7; ++i)
    m.winner_terms[i] = *terms->with({names[i]});
  decision d;
  d.worker = 3;
  price_breakdown loser;
  loser.worker = 1;
  loser.price = 500;
  loser.read = 400;
  price_breakdown winner;
  winner.worker = 3;
  winner.read = 12;
  winner.credit_gpu = 4;
  winner.credit_host = 1.5;
  winner.space = 20;
  winner.wait = 2.5;
  winner.price = 12.6;
  d.prices = {loser, winner, loser};
  m.decided(d, 0.002);
  auto cumulative = [](const metrics::histogram* h) {
    std::vector<uint64_t> out;
    for (const auto& b : h->Collect().histogram.bucket)
      out.push_back(b.cumulative_count);
    return out;
  };
  EXPECT_EQ(cumulative(m.auction_seconds), (std::vector<uint64_t>{0, 1, 1}));
  EXPECT_EQ(cumulative(m.bids_per_auction),
            (std::vector<uint64_t>{0, 0, 1, 1}));  // 3 bids: le 4
  // The winner's, not a loser's.
  EXPECT_EQ(m.winner_price->Collect().histogram.sample_sum, 12.6);
  EXPECT_EQ(m.winner_terms[0]->Value(), 12);
  EXPECT_EQ(m.winner_terms[1]->Value(), 4);
  EXPECT_EQ(m.winner_terms[2]->Value(), 1.5);
  EXPECT_EQ(m.winner_terms[3]->Value(), 0);
  EXPECT_EQ(m.winner_terms[4]->Value(), 20);
  EXPECT_EQ(m.winner_terms[6]->Value(), 2.5);
}

}  // namespace
}  // namespace kvmesh::test
