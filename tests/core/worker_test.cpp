// Tests of core/worker: read-work ledger, reservations and bids.
#include "core/worker.hpp"

#include <gtest/gtest.h>

namespace kvmesh {
namespace {

worker_ledger ledger(worker_config cfg = {}) {
  auto l = worker_ledger::make(cfg);
  EXPECT_TRUE(l);
  return std::move(*l);
}

TEST(worker, bad_config_is_an_error) {
  worker_config cfg;
  cfg.speed = 0;
  EXPECT_EQ(worker_ledger::make(cfg).err().code, ec::invalid_argument);
  cfg = {};
  cfg.c_host = 1.5;
  EXPECT_FALSE(worker_ledger::make(cfg));
}

TEST(worker, read_cost_discounts_reused_blocks) {
  auto l = ledger();
  EXPECT_DOUBLE_EQ(l.read_cost(10, 4, 2, 2), 10 - 4 - 1.5 - 0.5);
  EXPECT_DOUBLE_EQ(l.read_cost(4, 4, 0, 0), 0.0);
}

TEST(worker, reservations_expire_and_convert_on_accept) {
  auto l = ledger();
  ASSERT_TRUE(l.reserve(1, 6, 100));
  ASSERT_TRUE(l.reserve(2, 4, 200));
  EXPECT_DOUBLE_EQ(l.reserved(), 10.0);
  EXPECT_EQ(l.expire(100), 1u);  // request 1's bid timed out
  EXPECT_DOUBLE_EQ(l.reserved(), 4.0);
  l.accept(2, 4);
  EXPECT_DOUBLE_EQ(l.reserved(), 0.0);
  EXPECT_DOUBLE_EQ(l.queued(), 4.0);
  EXPECT_FALSE(l.has_reservation(2));
  // Re-bidding for the same request replaces its reservation.
  ASSERT_TRUE(l.reserve(3, 5, 300));
  ASSERT_TRUE(l.reserve(3, 2, 300));
  EXPECT_DOUBLE_EQ(l.reserved(), 2.0);
  EXPECT_TRUE(l.release(3));
  EXPECT_FALSE(l.release(3));
  EXPECT_EQ(l.reservations(), 0u);
}

// An open bid of another named auction for the same request contests it;
// the same auction's next round, an unnamed one, or a bid gone does not.
TEST(worker, an_open_bid_of_another_auction_contests_the_request) {
  auto l = ledger();
  EXPECT_FALSE(l.contested(1, 7));  // no bid at all
  ASSERT_TRUE(l.reserve(1, 6, 100, 10, 7));
  EXPECT_FALSE(l.contested(1, 7));  // its own
  EXPECT_TRUE(l.contested(1, 8));
  EXPECT_FALSE(l.contested(1, 0));           // the caller unnamed
  EXPECT_FALSE(l.contested(2, 8));           // another request
  ASSERT_TRUE(l.reserve(1, 6, 100, 10, 8));  // the second auction's bid
  EXPECT_TRUE(l.contested(1, 7));
  ASSERT_TRUE(l.reserve(3, 1, 100, 10));  // unnamed
  EXPECT_FALSE(l.contested(3, 8));
  EXPECT_TRUE(l.release(1));
  EXPECT_FALSE(l.contested(1, 7));
}

TEST(worker, queued_work_shrinks_with_progress) {
  auto l = ledger();
  l.accept(1, 10);
  l.accept(2, 6);
  EXPECT_DOUBLE_EQ(l.queued(), 16.0);
  l.progress(1, 2.5);
  EXPECT_DOUBLE_EQ(l.queued(), 8.5);
  l.done(1);
  EXPECT_DOUBLE_EQ(l.queued(), 6.0);
  l.done(2);
  EXPECT_DOUBLE_EQ(l.queued(), 0.0);
  EXPECT_EQ(l.queued_requests(), 0u);
}

TEST(worker, refuses_an_award_when_its_queue_grew_since_the_bid) {
  worker_config cfg;
  cfg.refuse_growth = 0.5;  // half a request size
  auto l = ledger(cfg);
  ASSERT_TRUE(l.reserve(1, 10, 100, 10));
  ASSERT_TRUE(l.reserve(2, 10, 100, 10));
  EXPECT_FALSE(l.should_refuse(1));
  l.accept(3, 5);  // another router's award landed: +5 = half of 10
  EXPECT_FALSE(l.should_refuse(1));
  l.accept(4, 0.5);
  EXPECT_TRUE(l.should_refuse(1));
  EXPECT_TRUE(l.should_refuse(2));
  EXPECT_FALSE(l.should_refuse(99));  // no reservation, nothing to refuse
  // Growth the router priced in (its own awards) is no reason to refuse.
  EXPECT_FALSE(l.should_refuse(1, 5.5));
  EXPECT_TRUE(l.should_refuse(1, 0.4));
  cfg.refuse_growth = 0;
  auto never = ledger(cfg);
  ASSERT_TRUE(never.reserve(1, 10, 100, 10));
  never.accept(3, 500);
  EXPECT_FALSE(never.should_refuse(1));
}

TEST(worker, expected_share_follows_speed) {
  EXPECT_DOUBLE_EQ(expected_share(10, 0.5, 2.0), 2.5);
  EXPECT_DOUBLE_EQ(expected_share(10, 1.0, 2.0), 5.0);
  EXPECT_DOUBLE_EQ(expected_share(10, 1.0, 0.0), 0.0);
}

TEST(worker, open_bids_are_bounded) {
  worker_config cfg;
  cfg.max_reservations = 2;
  auto l = ledger(cfg);
  ASSERT_TRUE(l.reserve(1, 1, 10));
  ASSERT_TRUE(l.reserve(2, 1, 10));
  auto third = l.reserve(3, 1, 10);
  ASSERT_FALSE(third);
  EXPECT_EQ(third.err().code, ec::capacity_exceeded);
  EXPECT_FALSE(l.reserve(4, -1, 10));
}

TEST(worker, bid_reports_exact_state) {
  auto cache = tiered_cache::make({4, 4, 0});
  ASSERT_TRUE(cache);
  for (uint64_t h = 1; h <= 6; ++h)
    ASSERT_TRUE(cache->store(h, tier::gpu));  // 1,2 host; 3..6 GPU
  tier t;
  ASSERT_TRUE(cache->acquire(3, &t));
  worker_config cfg;
  cfg.id = 7;
  cfg.speed = 2;
  auto l = ledger(cfg);
  l.accept(100, 5);
  ASSERT_TRUE(l.reserve(101, 2, 50));
  std::vector<uint64_t> chain{1, 2, 3, 4, 9, 5};
  bid b = make_bid(*cache, l, chain.data(), 6);
  EXPECT_EQ(b.worker, 7u);
  EXPECT_EQ(b.host, 2u);
  EXPECT_EQ(b.gpu, 2u);  // 5 lies past the miss at 9
  EXPECT_EQ(b.disk, 0u);
  EXPECT_EQ(b.active, 1u);
  EXPECT_EQ(b.active_overlap, 1u);
  EXPECT_EQ(b.capacity, 4u);
  EXPECT_DOUBLE_EQ(b.queued, 5.0);
  EXPECT_DOUBLE_EQ(b.reserved, 2.0);
  EXPECT_DOUBLE_EQ(b.speed, 2.0);
  EXPECT_DOUBLE_EQ(b.c_host, 0.75);  // reports its tier credits
  EXPECT_DOUBLE_EQ(b.c_disk, 0.25);
  EXPECT_DOUBLE_EQ(l.read_cost(b, 6), 6 - 2 - 1.5);
}

}  // namespace
}  // namespace kvmesh
