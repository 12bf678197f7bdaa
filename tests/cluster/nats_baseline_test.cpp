// Tests of cluster/nats_baseline against a real nats-server on a loopback
// port.
#include "cluster/nats_baseline.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <thread>

#include "nats_server.hpp"

namespace kvmesh::test {
namespace {

// A responder to every request on the server: a run whose subjects it also
// hears gets a reply too many per request.
expected<std::unique_ptr<nats_bus>> answer_everything(const nats_options& o) {
  auto b = nats_bus::connect(o);
  if (!b) return b.err();
  nats_bus* r = b->get();
  auto sub = r->subscribe(">", "", [r](nats_message m) {
    if (!m.reply.empty()) (void)r->publish(m.reply, {1});
  });
  if (!sub) return sub.err();
  if (auto f = r->flush(std::chrono::seconds(2)); !f) return f.err();
  return b;
}

class nats_baseline_test : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server.running()) << "no nats-server";
    o.url = server.url();
  }
  nats_server server;
  nats_options o;
};

TEST_F(nats_baseline_test, request_reply_measures_the_requested_samples) {
  auto r = request_reply_latency(o, 64, 300);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_EQ(r->samples, 300u);
  EXPECT_GT(r->p50_us, 0);
  EXPECT_LE(r->p50_us, r->p99_us);
  EXPECT_GT(r->mean_us, 0);
  // A large payload travels both ways and is checked byte for byte.
  auto big = request_reply_latency(o, 256 << 10, 20);
  ASSERT_TRUE(big) << big.err().message;
  EXPECT_EQ(big->samples, 20u);
  EXPECT_GT(big->p50_us, r->p50_us);
}

TEST_F(nats_baseline_test, scatter_gather_waits_for_every_reply) {
  auto rr = request_reply_latency(o, 64, 300);
  auto sg = scatter_gather_latency(o, 16, 64, 64, 300);
  ASSERT_TRUE(rr) << rr.err().message;
  ASSERT_TRUE(sg) << sg.err().message;
  EXPECT_EQ(sg->samples, 300u);
  EXPECT_GT(sg->p50_us, 0);
  EXPECT_LE(sg->p50_us, sg->p99_us);
  // Sixteen replies cannot all be in before the first one would be.
  EXPECT_GE(sg->p50_us, rr->p50_us);
  std::printf("request/reply 64 B: p50 %.1f us, p99 %.1f us, mean %.1f us\n",
              rr->p50_us, rr->p99_us, rr->mean_us);
  std::printf(
      "scatter-gather x16 64 B: p50 %.1f us, p99 %.1f us, "
      "mean %.1f us\n",
      sg->p50_us, sg->p99_us, sg->mean_us);
  auto one = scatter_gather_latency(o, 1, 0, 0, 50);
  ASSERT_TRUE(one) << one.err().message;
  EXPECT_EQ(one->samples, 50u);
}

// Paced rounds start an interval apart: the run cannot take less than its
// rounds' intervals (50 warm-up rounds plus the samples).
TEST_F(nats_baseline_test, paced_rounds_start_an_interval_apart) {
  using clock = std::chrono::steady_clock;
  const auto interval = std::chrono::milliseconds(4);
  for (int kind = 0; kind < 2; ++kind) {
    const auto t0 = clock::now();
    auto r = kind == 0 ? request_reply_latency(o, 64, 30, interval)
                       : scatter_gather_latency(o, 4, 64, 64, 30, interval);
    const auto took = clock::now() - t0;
    ASSERT_TRUE(r) << r.err().message;
    EXPECT_EQ(r->samples, 30u);
    EXPECT_GE(took, (50 + 30 - 1) * interval) << "kind " << kind;
  }
}

// Each call has subjects of its own: were they shared, each run's requests
// would meet the other run's responders too, and the surplus replies would
// be reported as an error.
TEST_F(nats_baseline_test, concurrent_runs_on_one_server_do_not_collide) {
  auto a = std::async(std::launch::async, [&] {
    return scatter_gather_latency(o, 4, 16, 16, 200);
  });
  auto b = std::async(std::launch::async, [&] {
    return scatter_gather_latency(o, 4, 16, 16, 200);
  });
  auto ra = a.get();
  auto rb = b.get();
  ASSERT_TRUE(ra) << ra.err().message;
  ASSERT_TRUE(rb) << rb.err().message;
  EXPECT_EQ(ra->samples, 200u);
  EXPECT_EQ(rb->samples, 200u);
}

// What the collision guard above relies on: an extra responder (here one
// that answers every request on the server) makes each sample get one reply
// too many, and that is an error value, not a faster sample.
TEST_F(nats_baseline_test, a_reply_beyond_the_fanout_is_an_error_value) {
  auto intruder = answer_everything(o);
  ASSERT_TRUE(intruder) << intruder.err().message;
  auto sg = scatter_gather_latency(o, 2, 8, 8, 50);
  ASSERT_FALSE(sg);
  EXPECT_NE(sg.err().message.find("beyond the fan-out"), std::string::npos)
      << sg.err().message;
}

// Rounds started together are in flight together, each counting its own
// replies: every round of a burst completes, none borrows another's.
TEST_F(nats_baseline_test, rounds_in_flight_together_each_count_every_reply) {
  auto rounds = scatter_gather_rounds::open(o, 8, 64, 64);
  ASSERT_TRUE(rounds) << rounds.err().message;
  for (int i = 0; i < 100; ++i)
    (*rounds)->start();
  auto r = (*rounds)->finish(std::chrono::seconds(10));
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_EQ(r->samples, 100u);
  EXPECT_GT(r->p50_us, 0);
  EXPECT_LE(r->p50_us, r->p99_us);
}

// As for the sequential rounds: a reply too many is an error value, and so
// are rounds that never started.
TEST_F(nats_baseline_test, rounds_report_surplus_replies_and_no_rounds) {
  auto none = scatter_gather_rounds::open(o, 2, 8, 8);
  ASSERT_TRUE(none) << none.err().message;
  auto empty = (*none)->finish(std::chrono::milliseconds(0));
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.err().code, ec::invalid_argument);

  auto intruder = answer_everything(o);
  ASSERT_TRUE(intruder) << intruder.err().message;
  auto rounds = scatter_gather_rounds::open(o, 2, 8, 8);
  ASSERT_TRUE(rounds) << rounds.err().message;
  for (int i = 0; i < 20; ++i)
    (*rounds)->start();
  // Each round completes at its second reply; its third comes after.
  (void)(*rounds)->finish(std::chrono::seconds(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto r = (*rounds)->finish(std::chrono::milliseconds(0));
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message.find("beyond the fan-out"), std::string::npos)
      << r.err().message;
}

TEST(nats_baseline, an_unreachable_server_is_an_error_value) {
  nats_options o;
  o.url = "nats://127.0.0.1:" + std::to_string(nats_server::free_port());
  o.connect_timeout_ms = 500;
  o.max_reconnect = 0;
  auto rr = request_reply_latency(o, 64, 10);
  ASSERT_FALSE(rr);
  EXPECT_EQ(rr.err().code, ec::io_error);
  EXPECT_NE(rr.err().message.find(o.url), std::string::npos)
      << rr.err().message;
  auto sg = scatter_gather_latency(o, 4, 64, 64, 10);
  ASSERT_FALSE(sg);
  EXPECT_EQ(sg.err().code, ec::io_error);
  auto rounds = scatter_gather_rounds::open(o, 4, 64, 64);
  ASSERT_FALSE(rounds);
  EXPECT_EQ(rounds.err().code, ec::io_error);
}

TEST(nats_baseline, zero_samples_or_fanout_is_invalid) {
  nats_options o;  // never contacted: arguments are checked first
  o.url = "nats://127.0.0.1:" + std::to_string(nats_server::free_port());
  auto rr = request_reply_latency(o, 64, 0);
  ASSERT_FALSE(rr);
  EXPECT_EQ(rr.err().code, ec::invalid_argument);
  auto sg0 = scatter_gather_latency(o, 0, 64, 64, 10);
  ASSERT_FALSE(sg0);
  EXPECT_EQ(sg0.err().code, ec::invalid_argument);
  auto sg1 = scatter_gather_latency(o, 4, 64, 64, 0);
  ASSERT_FALSE(sg1);
  EXPECT_EQ(sg1.err().code, ec::invalid_argument);
  auto rounds = scatter_gather_rounds::open(o, 0, 64, 64);
  ASSERT_FALSE(rounds);
  EXPECT_EQ(rounds.err().code, ec::invalid_argument);
}

}  // namespace
}  // namespace kvmesh::test
