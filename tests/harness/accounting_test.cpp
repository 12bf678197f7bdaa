// Tests of harness/accounting: overhead, CPU rows and error kinds.
// From given router heartbeats and CPU readings.
#include "harness/accounting.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace kvmesh::harness {
namespace {

using std::chrono::milliseconds;

TEST(ErrorKind, NumbersCountTogether) {
  EXPECT_EQ(error_kind("request 1234 timed out at worker 7"),
            "request N timed out at worker N");
  EXPECT_EQ(error_kind("request 99 timed out at worker 12"),
            error_kind("request 1 timed out at worker 3"));
  EXPECT_EQ(error_kind("12ab34"), "NabN");
  EXPECT_EQ(error_kind("no bids"), "no bids");
  EXPECT_EQ(error_kind(""), "");
}

router_status status(const std::string& name, uint64_t decisions,
                     uint64_t nats_in, uint64_t nats_out) {
  router_status s;
  s.name = name;
  s.decisions = decisions;
  s.nats_in = nats_in;
  s.nats_out = nats_out;
  return s;
}

TEST(Overhead, CausesAreTheDifferenceOfTheCounters) {
  router_status then, now, to;
  then.reauctions_refused = 2;
  now.reauctions_refused = 5;
  now.reauctions_unanswered = 1;
  now.reauctions_no_bids = 4;
  now.reauctions_saturated = 3;
  now.reauctions_no_live_worker = 6;
  to.reauctions_refused = 10;
  add_causes(to, now, then);
  EXPECT_EQ(to.reauctions_refused, 13u);
  EXPECT_EQ(to.reauctions_unanswered, 1u);
  EXPECT_EQ(to.reauctions_no_bids, 4u);
  EXPECT_EQ(to.reauctions_saturated, 3u);
  EXPECT_EQ(to.reauctions_no_live_worker, 6u);
  EXPECT_EQ(traffic(status("r", 0, 7, 5)), 12u);
}

// Two routers beating once a second: an idle beat, the last beat before
// the run, and one after its end.
class OverheadOfARun : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& a = log.by_router["router-0"];
    a.push_back({t0 - milliseconds(2000), status("router-0", 10, 100, 100)});
    a.push_back({t0 - milliseconds(1000), status("router-0", 10, 110, 110)});
    router_status end_a = status("router-0", 110, 1110, 1110);
    end_a.reauctions = 4;
    end_a.reauctions_refused = 3;
    end_a.reauctions_no_bids = 1;
    end_a.auction_p50_us = 100;
    end_a.auction_p99_us = 900;
    a.push_back({end + milliseconds(500), end_a});
    auto& b = log.by_router["router-1"];
    b.push_back({t0 - milliseconds(1500), status("router-1", 0, 0, 0)});
    b.push_back({t0 - milliseconds(500), status("router-1", 0, 5, 5)});
    router_status end_b = status("router-1", 300, 505, 505);
    end_b.auction_p50_us = 200;
    end_b.auction_p99_us = 700;
    b.push_back({end + milliseconds(500), end_b});
  }

  const steady::time_point t0 = steady::now();
  const steady::time_point end = t0 + milliseconds(2000);
  beat_log log;
};

TEST_F(OverheadOfARun, CountsTheRunsShareOfEachRouter) {
  const overhead_result h = overhead_of(log, t0, end);
  ASSERT_EQ(h.routers.size(), 2u);
  const router_overhead& a = h.routers[0];
  EXPECT_EQ(a.name, "router-0");
  EXPECT_EQ(a.decisions, 100u);
  EXPECT_EQ(a.reauctions, 4u);
  EXPECT_EQ(a.causes.reauctions_refused, 3u);
  EXPECT_EQ(a.nats_msgs, 2000u);
  // 20 messages in the idle second before the run.
  EXPECT_DOUBLE_EQ(a.background_per_s, 20);
  EXPECT_DOUBLE_EQ(a.span_s, 3.5);
  const router_overhead& b = h.routers[1];
  EXPECT_EQ(b.decisions, 300u);
  EXPECT_EQ(b.nats_msgs, 1000u);
  EXPECT_DOUBLE_EQ(b.background_per_s, 10);
  EXPECT_DOUBLE_EQ(b.span_s, 3);

  EXPECT_EQ(h.decisions, 400u);
  EXPECT_EQ(h.reauctions, 4u);
  EXPECT_EQ(h.causes.reauctions_no_bids, 1u);
  EXPECT_DOUBLE_EQ(h.wall_s, 2);
  EXPECT_DOUBLE_EQ(h.decisions_per_s, 200);
  // p50: decision-weighted mean; p99: the worst router's.
  EXPECT_DOUBLE_EQ(h.auction_p50_us, (100.0 * 100 + 200.0 * 300) / 400);
  EXPECT_DOUBLE_EQ(h.auction_p99_us, 900);
  EXPECT_EQ(h.nats_msgs, 3000u);
  EXPECT_DOUBLE_EQ(h.nats_msgs_per_decision, 7.5);
  EXPECT_DOUBLE_EQ(h.background_msgs, 20 * 3.5 + 10 * 3);
  EXPECT_DOUBLE_EQ(h.nats_msgs_per_decision_net, (3000 - 100.0) / 400);
  EXPECT_EQ(h.warning, "");
}

TEST_F(OverheadOfARun, ARouterSilentAtTheEndIsWarnedOf) {
  log.by_router["router-1"].pop_back();
  const overhead_result h = overhead_of(log, t0, end);
  EXPECT_EQ(h.warning,
            "router router-1's last heartbeat came 2.5 s before the end of "
            "the run: its counts miss the end; ");
  EXPECT_EQ(h.routers[1].decisions, 0u);
}

TEST_F(OverheadOfARun, ARouterBornDuringTheRunCountsFromZero) {
  auto& c = log.by_router["router-2"];
  c.push_back({t0 + milliseconds(100), status("router-2", 0, 1, 1)});
  c.push_back({end + milliseconds(100), status("router-2", 50, 40, 40)});
  const overhead_result h = overhead_of(log, t0, end);
  ASSERT_EQ(h.routers.size(), 3u);
  EXPECT_EQ(h.routers[2].decisions, 50u);
  EXPECT_EQ(h.routers[2].nats_msgs, 80u);
  EXPECT_EQ(h.routers[2].background_per_s, 0);  // never seen idle
  EXPECT_EQ(h.decisions, 450u);
}

TEST_F(OverheadOfARun, RoutersWithCountsBeatsSinceATime) {
  EXPECT_EQ(log.routers_with(1, end), 2u);
  EXPECT_EQ(log.routers_with(2, end), 0u);
  EXPECT_EQ(log.routers_with(2, t0 - milliseconds(700)), 1u);
  EXPECT_EQ(log.routers_with(3, t0 - milliseconds(5000)), 2u);
}

TEST(Overhead, NoDecisionsDividesByNothing) {
  beat_log log;
  const auto t0 = steady::now();
  log.by_router["r"].push_back({t0 + milliseconds(10), status("r", 0, 3, 3)});
  const overhead_result h = overhead_of(log, t0, t0);
  EXPECT_EQ(h.decisions, 0u);
  EXPECT_EQ(h.nats_msgs_per_decision, 0);
  EXPECT_EQ(h.decisions_per_s, 0);
  EXPECT_EQ(h.auction_p50_us, 0);
}

TEST(Cpu, RowsNameEachProcessAndSkipTheGone) {
  // No pids: the rows take names from the mesh, the readings from cpu_use,
  // and the mesh stops nothing when it goes.
  child_mesh m;
  m.procs = {{"index", "shard-0", -1}, {"router", "router-0", -1}};
  m.nats = {{"nats-server", "nats://127.0.0.1:4222", -1}};
  const auto t0 = steady::now();
  const cpu_use before{t0, {1.0, 2.0, 0.5, 10.0}};
  const cpu_use after{t0 + milliseconds(2000), {2.0, -1, 1.5, 14.0}};
  const auto rows = cpu_rows(m, before, after, 1000);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].process, "shard-0");
  EXPECT_DOUBLE_EQ(rows[0].cpu_s, 1);
  EXPECT_DOUBLE_EQ(rows[0].cores, 0.5);
  EXPECT_DOUBLE_EQ(rows[0].us_per_decision, 1000);
  EXPECT_EQ(rows[1].process, "nats-server");  // its role, not its URL
  EXPECT_EQ(rows[2].process, "bench client");
  EXPECT_DOUBLE_EQ(rows[2].cpu_s, 4);
  EXPECT_DOUBLE_EQ(rows[2].cores, 2);
  EXPECT_EQ(cpu_rows(m, before, after, 0)[0].us_per_decision, 0);  // none
}

TEST(Cpu, ReadingsHaveEveryChildThenThisProcess) {
  child_mesh m;
  m.procs = {{"agent", "agent-0", -1}};
  const cpu_use u = cpu_now(m);
  ASSERT_EQ(u.procs.size(), 2u);
  EXPECT_EQ(u.procs[0], -1);  // stopped: /proc has nothing to tell
  EXPECT_GE(u.procs[1], 0);
}

}  // namespace
}  // namespace kvmesh::harness
