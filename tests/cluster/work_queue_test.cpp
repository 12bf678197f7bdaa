// Tests of cluster/work_queue against a real nats-server with JetStream:
// one stream and consumer shared by routers, deliveries settled once,
// redelivered when dropped or naked, kept across a restart.
#include "cluster/work_queue.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "jetstream_fixture.hpp"

namespace kvmesh::test {
namespace {

// The jetstream fixture under this file's suite name.
class work_queue_test : public jetstream_test {};

TEST_F(work_queue_test, two_routers_share_one_stream_and_one_consumer) {
  auto bus1 = connect();
  auto bus2 = connect();
  auto q1 = open(*bus1);
  auto q2 = open(*bus2);
  ASSERT_TRUE(q1 && q2);
  auto s1 = q1->state();
  auto s2 = q2->state();
  ASSERT_TRUE(s1) << s1.err().message;
  ASSERT_TRUE(s2) << s2.err().message;
  EXPECT_EQ(s1->consumers, 1);
  EXPECT_EQ(s2->consumers, 1);
  // What one router's client stores, the other router's consumer holds.
  ASSERT_TRUE(q1->publish({7}));
  auto after = q2->state();
  ASSERT_TRUE(after) << after.err().message;
  EXPECT_EQ(after->messages, 1u);
  EXPECT_EQ(after->pending, 1u);
  // A third router with another ack wait still joins the same consumer.
  auto bus3 = connect();
  auto q3 = open(*bus3, options(700));
  ASSERT_TRUE(q3);
  auto s3 = q3->state();
  ASSERT_TRUE(s3) << s3.err().message;
  EXPECT_EQ(s3->consumers, 1);
  EXPECT_EQ(s3->messages, 1u);
}

TEST_F(work_queue_test, a_stream_of_that_name_on_another_subject_is_refused) {
  auto bus = connect();
  ASSERT_TRUE(open(*bus));
  work_queue_options other = options();
  other.subject = "kvmesh.route.other";
  auto q = work_queue::open(*bus, other);
  ASSERT_FALSE(q);
  EXPECT_NE(q.err().message.find("KVMESH_ROUTE"), std::string::npos)
      << q.err().message;
  EXPECT_NE(q.err().message.find("kvmesh.route.other"), std::string::npos)
      << q.err().message;
}

TEST_F(work_queue_test, bad_options_are_errors) {
  auto bus = connect();
  work_queue_options o = options();
  o.fetch_batch = 0;
  auto q = work_queue::open(*bus, o);
  ASSERT_FALSE(q);
  EXPECT_EQ(q.err().code, ec::invalid_argument);
  o = options();
  o.max_deliver = 0;
  EXPECT_FALSE(work_queue::open(*bus, o));
}

TEST_F(work_queue_test,
       each_message_goes_to_one_router_once_and_acked_never_again) {
  auto bus1 = connect();
  auto bus2 = connect();
  auto pub_bus = connect();
  auto q1 = open(*bus1);
  auto q2 = open(*bus2);
  auto client = open(*pub_bus);
  ASSERT_TRUE(q1 && q2 && client);
  mailbox box;
  ASSERT_TRUE(q1->start(box.handler(1, policy::keep)));
  ASSERT_TRUE(q2->start(box.handler(2, policy::keep)));
  EXPECT_FALSE(q1->start(box.handler(1, policy::keep)));  // already running
  // Let both routers' first pull requests reach the server, so that both
  // are waiting when the messages arrive.
  std::this_thread::sleep_for(milliseconds(200));
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE(client->publish({static_cast<uint8_t>(i), 0xAB}));
  ASSERT_TRUE(box.wait_for(100));

  // Settle from threads other than the fetch threads, after the handlers
  // returned: half here, half on a helper thread.
  std::vector<std::shared_ptr<delivery>> held;
  {
    std::lock_guard<std::mutex> g(box.mu);
    for (auto& r : box.got)
      held.push_back(r.d);
  }
  std::thread helper([&] {
    for (size_t i = 0; i < held.size(); i += 2)
      EXPECT_TRUE(held[i]->ack());
  });
  for (size_t i = 1; i < held.size(); i += 2)
    EXPECT_TRUE(held[i]->ack());
  helper.join();
  // Settling twice is harmless; the other verb after settling is refused.
  EXPECT_TRUE(held[0]->ack());
  EXPECT_FALSE(held[0]->nak());

  // Past ack_wait (500 ms) nothing comes back.
  std::this_thread::sleep_for(milliseconds(900));
  std::lock_guard<std::mutex> g(box.mu);
  ASSERT_EQ(box.got.size(), 100u);
  std::set<std::vector<uint8_t>> seen;
  std::map<int, int> per_router;
  for (const auto& r : box.got) {
    seen.insert(r.payload);
    ++per_router[r.router];
    EXPECT_EQ(r.count, 1u);
  }
  EXPECT_EQ(seen.size(), 100u);  // every message, none twice
  EXPECT_GT(per_router[1], 0);   // both routers took a share
  EXPECT_GT(per_router[2], 0);
  EXPECT_EQ(q1->delivered() + q2->delivered(), 100u);
  EXPECT_EQ(q1->acked() + q2->acked(), 100u);
  EXPECT_EQ(q1->redelivered() + q2->redelivered(), 0u);
  EXPECT_EQ(q1->fetch_errors() + q2->fetch_errors(), 0u);
  auto s = client->state();
  ASSERT_TRUE(s) << s.err().message;
  EXPECT_EQ(s->messages, 0u);  // work-queue retention: acked means gone
  EXPECT_EQ(s->ack_pending, 0);
}

TEST_F(work_queue_test, a_dropped_delivery_comes_back_after_ack_wait) {
  auto bus1 = connect();
  auto bus2 = connect();
  auto q1 = open(*bus1);
  auto q2 = open(*bus2);
  ASSERT_TRUE(q1 && q2);
  mailbox box;
  ASSERT_TRUE(q1->start(box.handler(1, policy::drop_once)));
  ASSERT_TRUE(q2->start(box.handler(2, policy::drop_once)));
  ASSERT_TRUE(q1->publish({42}));
  ASSERT_TRUE(box.wait_for(1, milliseconds(3000)));
  std::lock_guard<std::mutex> g(box.mu);
  ASSERT_EQ(box.first_seen.size(), 1u);
  ASSERT_EQ(box.got.size(), 1u);
  EXPECT_EQ(box.got[0].payload, std::vector<uint8_t>{42});
  EXPECT_EQ(box.got[0].count, 2u);
  // Not before the server gave up on the first delivery.
  EXPECT_GE(box.got[0].at - box.first_seen[0], milliseconds(400));
  EXPECT_EQ(q1->redelivered() + q2->redelivered(), 1u);
  EXPECT_EQ(q1->delivered() + q2->delivered(), 2u);
}

// A decision that outlasts the ack_wait (500 ms here) is not handed to a
// second router while its first one keeps saying it is in progress.
TEST_F(work_queue_test, a_delivery_in_progress_is_not_handed_out_again) {
  auto bus1 = connect();
  auto bus2 = connect();
  auto q1 = open(*bus1);
  auto q2 = open(*bus2);
  ASSERT_TRUE(q1 && q2);
  mailbox box;
  ASSERT_TRUE(q1->start(box.handler(1, policy::keep)));
  ASSERT_TRUE(q2->start(box.handler(2, policy::keep)));
  ASSERT_TRUE(q1->publish({7}));
  ASSERT_TRUE(box.wait_for(1, milliseconds(3000)));
  std::shared_ptr<delivery> d;
  {
    std::lock_guard<std::mutex> g(box.mu);
    d = box.got[0].d;
  }
  EXPECT_EQ(d->ack_wait(), milliseconds(500));
  // Three ack_waits, told in progress every half of one.
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(milliseconds(250));
    EXPECT_TRUE(d->in_progress());
  }
  EXPECT_FALSE(d->settled());
  ASSERT_TRUE(d->ack());
  EXPECT_TRUE(d->settled());
  EXPECT_TRUE(d->in_progress());  // settled: nothing to say, no error
  std::this_thread::sleep_for(milliseconds(700));
  EXPECT_EQ(box.size(), 1u);
  EXPECT_EQ(q1->delivered() + q2->delivered(), 1u);
}

TEST_F(work_queue_test, a_killed_router_s_messages_go_to_the_other_router) {
  auto bus1 = connect();
  auto bus2 = connect();
  auto q1 = open(*bus1);
  auto q2 = open(*bus2);
  ASSERT_TRUE(q1 && q2);
  mailbox first;
  ASSERT_TRUE(q1->start(first.handler(1, policy::keep)));
  for (uint8_t i = 0; i < 5; ++i)
    ASSERT_TRUE(q1->publish({i}));
  ASSERT_TRUE(first.wait_for(5));
  // Router 1 dies holding all five: its queue and deliveries go, unacked.
  mailbox second;
  ASSERT_TRUE(q2->start(second.handler(2, policy::ack)));
  const auto killed = clock_type::now();
  q1.reset();
  {
    std::lock_guard<std::mutex> g(first.mu);
    first.got.clear();
  }
  ASSERT_TRUE(second.wait_for(5, milliseconds(3000)));
  const auto took = clock_type::now() - killed;
  EXPECT_LE(took, milliseconds(2000));
  std::lock_guard<std::mutex> g(second.mu);
  std::set<std::vector<uint8_t>> seen;
  for (const auto& r : second.got) {
    seen.insert(r.payload);
    EXPECT_EQ(r.count, 2u);
  }
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_EQ(q2->redelivered(), 5u);
  EXPECT_EQ(q2->acked(), 5u);
}

TEST_F(work_queue_test,
       a_delivery_acked_after_its_router_stopped_still_counts) {
  auto bus1 = connect();
  auto bus2 = connect();
  auto q1 = open(*bus1);
  auto q2 = open(*bus2);
  ASSERT_TRUE(q1 && q2);
  mailbox box;
  ASSERT_TRUE(q1->start(box.handler(1, policy::keep)));
  ASSERT_TRUE(q1->publish({9}));
  ASSERT_TRUE(box.wait_for(1));
  std::shared_ptr<delivery> d;
  {
    std::lock_guard<std::mutex> g(box.mu);
    d = box.got[0].d;
    box.got.clear();
  }
  q1.reset();  // the delivery keeps what it needs to ack
  EXPECT_TRUE(d->ack());
  mailbox other;
  ASSERT_TRUE(q2->start(other.handler(2, policy::ack)));
  std::this_thread::sleep_for(milliseconds(900));  // past ack_wait
  EXPECT_EQ(other.size(), 0u);
  auto s = q2->state();
  ASSERT_TRUE(s) << s.err().message;
  EXPECT_EQ(s->messages, 0u);
}

TEST_F(work_queue_test, nak_hands_the_message_out_again_at_once) {
  auto bus = connect();
  // A long ack wait: a redelivery within a second can only come from nak.
  auto q = open(*bus, options(5000));
  ASSERT_TRUE(q);
  mailbox box;
  ASSERT_TRUE(q->start(box.handler(1, policy::nak_once)));
  ASSERT_TRUE(q->publish({5}));
  ASSERT_TRUE(box.wait_for(1, milliseconds(3000)));
  std::lock_guard<std::mutex> g(box.mu);
  ASSERT_EQ(box.first_seen.size(), 1u);
  EXPECT_EQ(box.got[0].count, 2u);
  EXPECT_LT(box.got[0].at - box.first_seen[0], milliseconds(1000));
  EXPECT_EQ(q->naked(), 1u);
  EXPECT_EQ(q->acked(), 1u);
  EXPECT_EQ(q->redelivered(), 1u);
}

TEST_F(work_queue_test, stored_requests_survive_a_server_restart) {
  {
    auto bus = connect();
    auto client = open(*bus);
    ASSERT_TRUE(client);
    for (uint8_t i = 0; i < 3; ++i)
      ASSERT_TRUE(client->publish({i}));
  }
  restart();
  ASSERT_TRUE(server->running());
  auto bus = connect();
  auto q = open(*bus);
  ASSERT_TRUE(q);
  auto s = q->state();
  ASSERT_TRUE(s) << s.err().message;
  EXPECT_EQ(s->messages, 3u);
  mailbox box;
  ASSERT_TRUE(q->start(box.handler(1, policy::ack)));
  EXPECT_TRUE(box.wait_for(3));
}

TEST(jetstream_off, open_without_jetstream_is_an_error_value) {
  nats_server plain;  // no -js
  ASSERT_TRUE(plain.running());
  nats_options o;
  o.url = plain.url();
  auto bus = nats_bus::connect(o);
  ASSERT_TRUE(bus) << bus.err().message;
  auto q = work_queue::open(**bus, work_queue_options{});
  ASSERT_FALSE(q);
  EXPECT_NE(q.err().message.find("JetStream is not enabled"), std::string::npos)
      << q.err().message;
  EXPECT_NE(q.err().message.find("KVMESH_ROUTE"), std::string::npos)
      << q.err().message;
}

}  // namespace
}  // namespace kvmesh::test
