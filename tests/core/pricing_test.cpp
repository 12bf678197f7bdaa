// Tests of core/pricing: each term of the price on a worked example.
#include "core/pricing.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

namespace kvmesh {
namespace {

// A request of n = 10 prompt blocks and o = 2 expected output blocks. The
// worked examples use beta = k = overflow = 1 (round numbers), not the
// tuned defaults, unless a test says otherwise.
constexpr uint32_t n = 10;
constexpr uint32_t o = 2;

price_config unit() {
  price_config cfg;
  cfg.beta = 1;
  cfg.k = 1;
  cfg.overflow = 1;
  return cfg;
}

bid idle(uint32_t worker) {
  bid b;
  b.worker = worker;
  b.capacity = 1000;
  return b;
}

std::vector<price_breakdown> price(const price_config& cfg,
                                   const std::vector<bid>& bids,
                                   size_t* winner = nullptr,
                                   uint64_t seed = 1) {
  std::vector<price_breakdown> out(bids.size());
  const size_t w =
      price_bids(cfg, n, o, bids.data(), bids.size(), out.data(), seed);
  if (winner) *winner = w;
  return out;
}

TEST(pricing, read_is_queued_plus_reserved_plus_request) {
  bid b = idle(0);
  b.queued = 5;
  b.reserved = 3;
  auto p = price(unit(), {b});
  EXPECT_DOUBLE_EQ(p[0].read, 18.0);  // 5 + 3 + 10 - 0
  // space = 0 - 0 + 10 + 2 = 12; price = 18 / 1 + 1 * 12
  EXPECT_DOUBLE_EQ(p[0].price, 30.0);
}

TEST(pricing, gpu_credit_decays_with_excess_queue_per_request_size) {
  bid a = idle(0);  // the emptiest: full credit
  a.gpu = 6;
  bid b = idle(1);
  b.gpu = 6;
  b.queued = 20;  // excess 20 = 2 request sizes -> c_gpu = 1 / (1 + 2)
  auto p = price(unit(), {a, b});
  EXPECT_DOUBLE_EQ(p[0].credit_gpu, 6.0);
  EXPECT_DOUBLE_EQ(p[1].credit_gpu, 2.0);
  EXPECT_DOUBLE_EQ(p[1].read, 20 + 10 - 2.0);
  price_config off = unit();
  off.k = 0;  // Dynamo's default: no decay
  EXPECT_DOUBLE_EQ(price(off, {a, b})[1].credit_gpu, 6.0);
}

TEST(pricing, host_and_disk_credits_use_their_weights) {
  bid b = idle(0);
  b.host = 4;
  b.disk = 4;
  auto p = price(unit(), {b});
  EXPECT_DOUBLE_EQ(p[0].credit_host, 3.0);  // 0.75 * 4
  EXPECT_DOUBLE_EQ(p[0].credit_disk, 1.0);  // 0.25 * 4
  EXPECT_DOUBLE_EQ(p[0].read, 10 - 4.0);
  price_config cfg = unit();
  cfg.c_host = 0.5;
  cfg.c_disk = 0;
  p = price(cfg, {b});
  EXPECT_DOUBLE_EQ(p[0].credit_host, 2.0);
  EXPECT_DOUBLE_EQ(p[0].credit_disk, 0.0);
}

TEST(pricing, a_bidders_measured_credit_overrides_the_config) {
  bid b = idle(0);
  b.host = 4;
  b.disk = 2;
  b.c_host = 0.5;
  b.c_disk = -1.0;  // its disk loads slower than it recomputes
  auto p = price(unit(), {b});
  EXPECT_DOUBLE_EQ(p[0].credit_host, 2.0);
  EXPECT_DOUBLE_EQ(p[0].credit_disk, -2.0);
  EXPECT_DOUBLE_EQ(p[0].read, 10 - 2.0 + 2.0);
}

TEST(pricing, space_is_occupancy_after_admission) {
  bid b = idle(0);
  b.active = 100;
  b.active_overlap = 3;
  auto p = price(unit(), {b});
  EXPECT_DOUBLE_EQ(p[0].space, 109.0);  // 100 - 3 + 10 + 2
  price_config cfg = unit();
  cfg.beta = 0.5;
  EXPECT_DOUBLE_EQ(price(cfg, {b})[0].price, 10 + 0.5 * 109);
}

TEST(pricing, speed_divides_read_work) {
  bid b = idle(0);
  b.queued = 8;
  b.speed = 0.5;
  auto p = price(unit(), {b});
  EXPECT_DOUBLE_EQ(p[0].read, 18.0);
  EXPECT_DOUBLE_EQ(p[0].price, 18.0 / 0.5 + 12);
}

TEST(pricing, overflow_penalty_past_capacity) {
  bid b = idle(0);
  b.active = 100;
  b.capacity = 105;  // space 112 overflows by 7
  price_config cfg = unit();
  cfg.overflow = 2;
  auto p = price(cfg, {b});
  EXPECT_DOUBLE_EQ(p[0].space, 112.0);
  EXPECT_DOUBLE_EQ(p[0].overflow, 14.0);
  EXPECT_DOUBLE_EQ(p[0].price, 10 + 112 + 14.0);
  b.capacity = 112;
  EXPECT_DOUBLE_EQ(price(cfg, {b})[0].overflow, 0.0);
}

TEST(pricing, a_bidders_wait_replaces_the_overflow_penalty) {
  bid b = idle(0);
  b.active = 100;
  b.capacity = 105;  // space 112: 7 blocks beyond capacity
  b.wait = 3.5;      // the worker's own estimate of the wait for space
  auto p = price(unit(), {b});
  EXPECT_DOUBLE_EQ(p[0].overflow, 0.0);
  EXPECT_DOUBLE_EQ(p[0].wait, 3.5);
  EXPECT_DOUBLE_EQ(p[0].price, 10 + 112 + 3.5);
  b.wait = -1;  // never a discount
  EXPECT_DOUBLE_EQ(price(unit(), {b})[0].price, 10 + 112.0);
}

TEST(pricing, step_overhead_stretches_read_work) {
  bid b = idle(0);
  b.queued = 8;
  b.speed = 0.5;
  b.step_overhead = 0.25;  // each step carries a decode pass
  price_config cfg;        // the defaults: no occupancy weight
  auto p = price(cfg, {b});
  EXPECT_DOUBLE_EQ(p[0].price, 18.0 * 1.25 / 0.5);
  b.step_overhead = std::numeric_limits<double>::quiet_NaN();
  EXPECT_DOUBLE_EQ(price(cfg, {b})[0].price, 18.0 / 0.5);
  b.step_overhead = -3;
  EXPECT_DOUBLE_EQ(price(cfg, {b})[0].price, 18.0 / 0.5);
}

TEST(pricing, by_default_a_cheaper_wait_beats_a_shorter_queue) {
  bid full = idle(0);  // nothing queued, but 40 blocks of wait for space
  full.wait = 40;
  bid queued = idle(1);  // 20 blocks queued, room at once
  queued.queued = 20;
  queued.wait = 0;
  size_t winner = no_winner;
  price(price_config{}, {full, queued}, &winner);
  EXPECT_EQ(winner, 1u);  // 30 against 50
}

TEST(pricing, delta_is_relative_to_the_emptiest_bidder) {
  bid a = idle(0);
  a.queued = 4;
  bid b = idle(1);
  b.queued = 1;  // the baseline
  b.active = 50;
  auto p = price(unit(), {a, b});
  EXPECT_DOUBLE_EQ(p[1].delta, 0.0);
  EXPECT_DOUBLE_EQ(p[0].delta, p[0].price - p[1].price);
}

TEST(pricing, cheapest_wins_and_cache_beats_an_idle_peer) {
  bid warm = idle(0);
  warm.gpu = 8;
  warm.queued = 5;  // c_gpu = 1 / 1.5
  bid cold = idle(1);
  size_t w = 0;
  auto p = price(unit(), {warm, cold}, &w);
  // warm: read 5 + 10 - 8/1.5 = 9.667; cold: read 10. Same space.
  EXPECT_NEAR(p[0].read, 9.6667, 1e-3);
  EXPECT_EQ(w, 0u);
  // With a deeper queue the warm worker loses the request.
  warm.queued = 30;
  price(unit(), {warm, cold}, &w);
  EXPECT_EQ(w, 1u);
}

TEST(pricing, ties_go_to_smaller_read_then_random) {
  bid a = idle(0);
  a.queued = 2;  // read 12, space 12 -> 24
  bid b = idle(1);
  b.active = 2;  // read 10, space 14 -> 24
  size_t w = 0;
  price(unit(), {a, b}, &w);
  EXPECT_EQ(w, 1u);
  // Exact ties: every tied bidder wins for some seed.
  std::set<size_t> winners;
  std::vector<bid> same{idle(0), idle(1), idle(2)};
  for (uint64_t seed = 0; seed < 64; ++seed) {
    price(unit(), same, &w, seed);
    winners.insert(w);
  }
  EXPECT_EQ(winners.size(), 3u);
}

TEST(pricing, no_bids_no_winner) {
  uint64_t seed = 0;
  EXPECT_EQ(price_bids(unit(), n, o, nullptr, 0, nullptr, seed), no_winner);
}

TEST(pricing, saturation_ceiling_in_request_sizes) {
  price_config cfg = unit();
  EXPECT_FALSE(saturated(cfg, n, 1e9));  // off by default
  cfg.overload_ceiling = 50;
  EXPECT_FALSE(saturated(cfg, n, 500));
  EXPECT_TRUE(saturated(cfg, n, 501));
}

// The worked example of docs/pricing.md, number for number: change both
// together.
TEST(pricing, the_worked_example_of_the_docs) {
  bid a = idle(0);  // warm, busy queue
  a.gpu = 8;
  a.queued = 30;
  a.active = 100;
  a.active_overlap = 8;
  bid b = idle(1);  // cold, no queue, decoding
  b.active = 110;
  bid c = idle(2);  // host hit, slow
  c.host = 6;
  c.queued = 4;
  c.reserved = 1.5;
  c.active = 90;
  c.speed = 0.5;
  size_t w = 0;
  auto p = price(unit(), {a, b, c}, &w);
  EXPECT_EQ(w, 2u);  // C
  EXPECT_DOUBLE_EQ(p[0].credit_gpu, 2.0);
  EXPECT_DOUBLE_EQ(p[0].read, 38.0);
  EXPECT_DOUBLE_EQ(p[0].space, 104.0);
  EXPECT_DOUBLE_EQ(p[0].price, 142.0);
  EXPECT_DOUBLE_EQ(p[1].read, 10.0);
  EXPECT_DOUBLE_EQ(p[1].space, 122.0);
  EXPECT_DOUBLE_EQ(p[1].price, 132.0);
  EXPECT_DOUBLE_EQ(p[2].credit_host, 4.5);
  EXPECT_DOUBLE_EQ(p[2].read, 11.0);
  EXPECT_DOUBLE_EQ(p[2].space, 102.0);
  EXPECT_DOUBLE_EQ(p[2].price, 124.0);
  EXPECT_DOUBLE_EQ(p[0].delta, 10.0);  // against B, the baseline
  EXPECT_DOUBLE_EQ(p[1].delta, 0.0);
  EXPECT_DOUBLE_EQ(p[2].delta, -8.0);
  // Without its host hit C loses to B; with k = 0 A is still behind both.
  bid cold_c = c;
  cold_c.host = 0;
  EXPECT_DOUBLE_EQ(price(unit(), {a, b, cold_c})[2].price, 133.0);
  price_config no_decay = unit();
  no_decay.k = 0;
  EXPECT_DOUBLE_EQ(price(no_decay, {a, b, c})[0].price, 136.0);
  // C nearly full: overflow 7. A ceiling of 10 per block: saturated.
  bid full_c = c;
  full_c.active = 995;
  auto f = price(unit(), {a, b, full_c});
  EXPECT_DOUBLE_EQ(f[2].overflow, 7.0);
  EXPECT_DOUBLE_EQ(f[2].price, 1036.0);
  price_config ceiling = unit();
  ceiling.overload_ceiling = 10;
  EXPECT_TRUE(saturated(ceiling, n, p[2].price));
}

TEST(pricing, weights_within_their_ranges_are_valid) {
  EXPECT_TRUE(validate(price_config{}));
  price_config top;
  top.c_host = 1;
  top.c_disk = 1;
  top.beta = 1000;
  top.k = 1000;
  top.overflow = 1000;
  top.overload_ceiling = 1e6;
  EXPECT_TRUE(validate(top));
  price_config zero = top;
  zero.c_host = zero.c_disk = zero.beta = zero.k = zero.overflow =
      zero.overload_ceiling = 0;
  EXPECT_TRUE(validate(zero));
}

TEST(pricing, a_weight_out_of_its_range_is_refused_by_name_and_range) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct weight {
    double price_config::*field;
    const char* message;
    double above;  // the smallest refused value past the top
  };
  const weight weights[] = {
      {&price_config::c_host, "price weight c_host must be in [0, 1]", 1.01},
      {&price_config::c_disk, "price weight c_disk must be in [0, 1]", 1.01},
      {&price_config::beta, "price weight beta must be in [0, 1000]", 1000.5},
      {&price_config::k, "price weight k must be in [0, 1000]", 1000.5},
      {&price_config::overflow, "price weight overflow must be in [0, 1000]",
       1000.5},
      {&price_config::overload_ceiling,
       "price weight overload_ceiling must be in [0, 1000000]", 1e6 + 1}};
  for (const auto& w : weights)
    for (double v : {w.above, 1e308, inf, -1e-9, -inf, nan}) {
      price_config cfg;
      cfg.*w.field = v;
      auto st = validate(cfg);
      ASSERT_FALSE(st) << w.message << ": " << v << " accepted";
      EXPECT_EQ(st.err().message, w.message) << v;
    }
}

// At the top of every range a bid as large as a worker can make still has
// a finite price: the bounds keep prices comparable.
TEST(pricing, the_largest_weights_keep_prices_finite) {
  price_config cfg;
  cfg.beta = 1000;
  cfg.k = 1000;
  cfg.overflow = 1000;
  bid huge = idle(0);
  huge.queued = 1e12;
  huge.reserved = 1e12;
  huge.active = 1ull << 40;
  huge.capacity = 0;
  bid small = idle(1);
  size_t winner = no_winner;
  const auto p = price(cfg, {huge, small}, &winner);
  for (const auto& b : p)
    EXPECT_TRUE(std::isfinite(b.price)) << b.price;
  EXPECT_EQ(winner, 1u);
}

}  // namespace
}  // namespace kvmesh
