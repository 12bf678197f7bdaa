// Tests of messages/member_checks: each value a bid or a worker's heartbeat
// may not claim is refused with its reason and counted; honest ones pass.
#include "messages/member_checks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "messages/limits.hpp"

namespace kvmesh {
namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();
constexpr double inf = std::numeric_limits<double>::infinity();

// An honest bid for an 8-block request, as a worker of speed 2 sends it.
bid honest() {
  bid b;
  b.worker = 3;
  b.gpu = 4;
  b.host = 2;
  b.disk = 1;
  b.queued = 12;
  b.reserved = 3;
  b.active = 100;
  b.active_overlap = 5;
  b.capacity = 512;
  b.speed = 2;
  b.wait = 0.5;
  b.step_overhead = 0.2;
  return b;
}

worker_status honest_beat() {
  worker_status s;
  s.worker = 3;
  s.agent = "node-a";
  s.queued = 12;
  s.capacity = 512;
  s.gpu_blocks = 300;
  s.speed = 2;
  return s;
}

template <class F>
member_fault bid_with(F change, uint32_t n = 8, double beat_speed = 2) {
  bid b = honest();
  change(b);
  return check_bid(b, n, beat_speed);
}

TEST(member_checks, an_honest_bid_passes_with_unknown_credits_and_wait) {
  EXPECT_EQ(check_bid(honest(), 8, 2), member_fault::none);
  EXPECT_EQ(bid_with([](bid& b) {
              b.c_host = nan;
              b.c_disk = nan;
              b.wait = nan;
            }),
            member_fault::none);
  // No heartbeat heard yet: the bid's speed is only bounded.
  EXPECT_EQ(check_bid(honest(), 8, 0), member_fault::none);
  // A tier slower than recomputing has a credit below 0: honest.
  EXPECT_EQ(bid_with([](bid& b) { b.c_disk = -0.5; }), member_fault::none);
  // Every block of the request cached.
  EXPECT_EQ(bid_with([](bid& b) { b.gpu = 8, b.host = 0, b.disk = 0; }),
            member_fault::none);
}

TEST(member_checks, each_bad_bid_value_is_refused_with_its_reason) {
  using f = member_fault;
  EXPECT_EQ(bid_with([](bid& b) { b.queued = nan; }), f::not_finite);
  EXPECT_EQ(bid_with([](bid& b) { b.queued = inf; }), f::not_finite);
  EXPECT_EQ(bid_with([](bid& b) { b.reserved = nan; }), f::not_finite);
  EXPECT_EQ(bid_with([](bid& b) { b.wait = -inf; }), f::not_finite);
  EXPECT_EQ(bid_with([](bid& b) { b.c_host = inf; }), f::not_finite);
  EXPECT_EQ(bid_with([](bid& b) { b.step_overhead = nan; }), f::not_finite);
  EXPECT_EQ(bid_with([](bid& b) { b.speed = nan; }), f::not_finite);
  EXPECT_EQ(bid_with([](bid& b) { b.queued = -1e300; }), f::negative);
  EXPECT_EQ(bid_with([](bid& b) { b.reserved = -1; }), f::negative);
  EXPECT_EQ(bid_with([](bid& b) { b.wait = -0.1; }), f::negative);
  EXPECT_EQ(bid_with([](bid& b) { b.step_overhead = -1; }), f::negative);
  // More cached blocks than the request has: the price -4e9 attack.
  EXPECT_EQ(bid_with([](bid& b) { b.gpu = 4000000000u; }), f::over_request);
  EXPECT_EQ(bid_with([](bid& b) { b.gpu = 6, b.host = 2, b.disk = 1; }),
            f::over_request);
  // The sum must not wrap around.
  EXPECT_EQ(bid_with([](bid& b) {
              b.gpu = UINT32_MAX, b.host = UINT32_MAX, b.disk = 2;
            }),
            f::over_request);
  EXPECT_EQ(bid_with([](bid& b) { b.active_overlap = 9; }), f::over_request);
  EXPECT_EQ(bid_with([](bid& b) { b.active = 4, b.active_overlap = 5; }),
            f::over_request);
  EXPECT_EQ(bid_with([](bid& b) { b.speed = 1e308; }, 8, 0), f::speed);
  EXPECT_EQ(bid_with([](bid& b) { b.speed = 0; }, 8, 0), f::speed);
  EXPECT_EQ(bid_with([](bid& b) { b.speed = 1e-9; }, 8, 0), f::speed);
  // Faster than its own heartbeat says.
  EXPECT_EQ(bid_with([](bid& b) { b.speed = 3; }, 8, 2), f::speed);
  EXPECT_EQ(bid_with([](bid& b) { b.capacity = uint64_t{1} << 40; }),
            f::blocks);
  EXPECT_EQ(bid_with([](bid& b) { b.c_host = 1.5; }), f::credit);
}

TEST(member_checks, the_speed_and_block_bounds_follow_the_limits) {
  wire_limits l;
  l.max_worker_speed = 4;
  l.max_worker_blocks = 1000;
  set_wire_limits(l);
  EXPECT_EQ(bid_with([](bid& b) { b.speed = 4; }, 8, 0), member_fault::none);
  EXPECT_EQ(bid_with([](bid& b) { b.speed = 4.5; }, 8, 0), member_fault::speed);
  EXPECT_EQ(bid_with([](bid& b) { b.speed = 0.25; }, 8, 0), member_fault::none);
  EXPECT_EQ(bid_with([](bid& b) { b.speed = 0.2; }, 8, 0), member_fault::speed);
  EXPECT_EQ(bid_with([](bid& b) { b.capacity = 1001; }), member_fault::blocks);
  worker_status s = honest_beat();
  s.host_capacity = 2000;
  EXPECT_EQ(check_worker_beat(s), member_fault::blocks);
  set_wire_limits(wire_limits{});
}

TEST(member_checks, each_bad_heartbeat_value_is_refused_with_its_reason) {
  using f = member_fault;
  EXPECT_EQ(check_worker_beat(honest_beat()), f::none);
  auto beat_with = [](auto change) {
    worker_status s = honest_beat();
    change(s);
    return check_worker_beat(s);
  };
  EXPECT_EQ(beat_with([](worker_status& s) { s.worker = max_worker_id; }),
            f::bad_id);
  EXPECT_EQ(beat_with([](worker_status& s) { s.speed = 1e308; }), f::speed);
  EXPECT_EQ(beat_with([](worker_status& s) { s.speed = inf; }), f::not_finite);
  EXPECT_EQ(beat_with([](worker_status& s) { s.queued = nan; }), f::not_finite);
  EXPECT_EQ(beat_with([](worker_status& s) { s.last_price = inf; }),
            f::not_finite);
  EXPECT_EQ(beat_with([](worker_status& s) { s.reserved = -2; }), f::negative);
  EXPECT_EQ(beat_with([](worker_status& s) { s.capacity = UINT64_MAX; }),
            f::blocks);
  // No price yet is NaN: honest.
  EXPECT_EQ(beat_with([](worker_status& s) { s.last_price = nan; }), f::none);
  EXPECT_EQ(beat_with([](worker_status& s) {
              s.models = {{"a", ""}, {"b/c", "a"}};
            }),
            f::none);
  EXPECT_EQ(beat_with([](worker_status& s) {
              s.models = {{"", ""}};
            }),
            f::bad_model);
  EXPECT_EQ(beat_with([](worker_status& s) {
              s.models = {{std::string(max_name_bytes + 1, 'm'), ""}};
            }),
            f::bad_model);
  EXPECT_EQ(beat_with([](worker_status& s) {
              s.models = {{"a", "b\nc"}};
            }),
            f::bad_model);
  EXPECT_EQ(beat_with([](worker_status& s) {
              s.models.assign(max_models_per_worker + 1, {"m", ""});
            }),
            f::bad_model);
}

TEST(member_checks, refusals_are_counted_per_message_and_reason) {
  const auto before =
      member_refusals(member_message::bid, member_fault::over_request);
  const auto other =
      member_refusals(member_message::worker_beat, member_fault::over_request);
  refuse_member(member_message::bid, member_fault::over_request, "node-a", 3);
  refuse_member(member_message::bid, member_fault::over_request, "node-a", 3);
  EXPECT_EQ(member_refusals(member_message::bid, member_fault::over_request),
            before + 2);
  EXPECT_EQ(
      member_refusals(member_message::worker_beat, member_fault::over_request),
      other);
  EXPECT_STREQ(to_string(member_message::worker_beat), "worker_heartbeat");
  EXPECT_STREQ(to_string(member_fault::too_many_of_agent), "too_many_of_agent");
}

}  // namespace
}  // namespace kvmesh
