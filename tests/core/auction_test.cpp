// Tests of core/auction: pending awards and awards confirmed after a bid.
#include "core/auction.hpp"

#include <gtest/gtest.h>

namespace kvmesh {
namespace {

bid idle(uint32_t worker, double queued, uint64_t accepted) {
  bid b;
  b.worker = worker;
  b.queued = queued;
  b.capacity = 100000;
  b.accepted = accepted;
  return b;
}

TEST(auction, an_award_confirmed_after_a_bid_counts_in_that_bid) {
  auctioneer a(2, 512, price_config{}, 1);
  std::vector<price_breakdown> prices(2);
  // Request 1 goes to worker 0 (both idle, ties broken at random: force it
  // by loading worker 1).
  std::vector<bid> first{idle(0, 0, 5), idle(1, 30, 9)};
  ASSERT_EQ(a.decide(1, 20, first.data(), 2, prices.data()), 0u);
  EXPECT_DOUBLE_EQ(a.pending(0), 20.0);
  // Bids for request 2 left before worker 0 accepted request 1 (its 6th
  // acceptance); the confirmation reached the router before they did.
  a.confirmed(1, 6);
  EXPECT_DOUBLE_EQ(a.pending(0), 0.0);
  std::vector<bid> crossed{idle(0, 0, 5), idle(1, 30, 9)};
  a.decide(2, 20, crossed.data(), 2, prices.data());
  EXPECT_DOUBLE_EQ(crossed[0].queued, 20.0);  // request 1's read work
  EXPECT_DOUBLE_EQ(crossed[1].queued, 30.0);
  a.settle(2);
  // A bid sent after the acceptance has it in its queue already.
  std::vector<bid> later{idle(0, 20, 6), idle(1, 30, 9)};
  a.decide(3, 20, later.data(), 2, prices.data());
  EXPECT_DOUBLE_EQ(later[0].queued, 20.0);
  a.settle(3);
  // A worker that does not count gets nothing added.
  std::vector<bid> unknown{idle(0, 0, unknown_accepted), idle(1, 30, 9)};
  a.decide(4, 20, unknown.data(), 2, prices.data());
  EXPECT_DOUBLE_EQ(unknown[0].queued, 0.0);
  a.settle(4);
}

TEST(auction, a_worker_that_left_passes_on_an_empty_ring) {
  auctioneer a(0, 512, price_config{}, 1);
  std::vector<price_breakdown> prices(1);
  a.join(60000);  // a high id alone: no ring for the ids below it
  a.join(7);
  EXPECT_EQ(a.rings(), 0u);  // none before a win
  std::vector<bid> one{idle(60000, 0, 5)};
  ASSERT_EQ(a.decide(1, 10, one.data(), 1, prices.data()), 0u);
  a.confirmed(1, 6);
  EXPECT_EQ(a.rings(), 1u);
  a.leave(60000);
  // The next worker to win takes the ring, emptied.
  std::vector<bid> fresh{idle(7, 0, 5)};
  a.decide(2, 10, fresh.data(), 1, prices.data());
  EXPECT_DOUBLE_EQ(fresh[0].queued, 0.0);
  a.confirmed(2, 6);
  EXPECT_EQ(a.rings(), 1u);
  // A worker that never joined, or left, has no confirmations to add.
  std::vector<bid> gone{idle(60000, 0, 5)};
  a.decide(3, 10, gone.data(), 1, prices.data());
  EXPECT_DOUBLE_EQ(gone[0].queued, 0.0);
}

TEST(auction, a_restarted_worker_s_small_count_drops_old_confirmations) {
  auctioneer a(1, 512, price_config{}, 1);
  std::vector<price_breakdown> prices(1);
  std::vector<bid> one{idle(0, 0, 1000)};
  a.decide(1, 10, one.data(), 1, prices.data());
  a.confirmed(1, 1001);
  std::vector<bid> restarted{idle(0, 0, 2)};  // counts from 0 again
  a.decide(2, 10, restarted.data(), 1, prices.data());
  EXPECT_DOUBLE_EQ(restarted[0].queued, 0.0);
  a.settle(2);
  // The stale slot is gone for good, even for an old bid.
  std::vector<bid> old{idle(0, 0, 1000)};
  a.decide(3, 10, old.data(), 1, prices.data());
  EXPECT_DOUBLE_EQ(old[0].queued, 0.0);
}

TEST(auction, a_refused_award_is_not_remembered) {
  auctioneer a(1, 512, price_config{}, 1);
  std::vector<price_breakdown> prices(1);
  std::vector<bid> one{idle(0, 0, 3)};
  a.decide(1, 10, one.data(), 1, prices.data());
  a.settle(1);
  std::vector<bid> next{idle(0, 0, 3)};
  a.decide(2, 10, next.data(), 1, prices.data());
  EXPECT_DOUBLE_EQ(next[0].queued, 0.0);
}

}  // namespace
}  // namespace kvmesh
