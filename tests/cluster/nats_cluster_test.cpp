// Tests of cluster/nats across a 3-node nats-server cluster: delivery and
// request/reply between nodes, and failover when a client's node stops.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "cluster/nats.hpp"
#include "nats_cluster.hpp"

namespace kvmesh::test {
namespace {

using namespace std::chrono_literals;

// Collects what a handler receives, across libnats threads.
struct inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<nats_message> got;
  nats_handler handler() {
    return [this](nats_message m) {
      std::lock_guard<std::mutex> g(mu);
      got.push_back(std::move(m));
      cv.notify_all();
    };
  }
  size_t count(const std::string& subject) {
    std::lock_guard<std::mutex> g(mu);
    size_t n = 0;
    for (const auto& m : got)
      n += m.subject == subject;
    return n;
  }
  bool wait_for(const std::string& subject, size_t n,
                std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, timeout, [&] {
      size_t k = 0;
      for (const auto& m : got)
        k += m.subject == subject;
      return k >= n;
    });
  }
  std::vector<std::vector<uint8_t>> payloads(const std::string& subject) {
    std::lock_guard<std::mutex> g(mu);
    std::vector<std::vector<uint8_t>> out;
    for (const auto& m : got)
      if (m.subject == subject) out.push_back(m.payload);
    return out;
  }
};

nats_options options(const std::string& url) {
  nats_options o;
  o.url = url;
  o.reconnect_wait_ms = 50;
  o.connect_timeout_ms = 1000;
  return o;
}

std::unique_ptr<nats_bus> connect(const std::string& url) {
  auto b = nats_bus::connect(options(url));
  EXPECT_TRUE(b) << (b ? "" : b.err().message);
  return b ? std::move(*b) : nullptr;
}

// A subscription made on one node reaches the other nodes' routes a little
// after flush() returns; until then the other nodes drop what is published.
// Publishes `subject` until `in` has one more of them, or `timeout` passes.
bool wait_for_interest(nats_bus& pub, inbox& in, const std::string& subject,
                       std::chrono::milliseconds timeout = 5s) {
  const size_t before = in.count(subject);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!pub.publish(subject, {0xff})) return false;
    if (in.wait_for(subject, before + 1, 20ms)) return true;
  }
  return false;
}

class nats_cluster_test : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster.ready()) << "no routed 3-node nats-server cluster";
  }
  // Declared first: the cluster outlives the clients the tests create.
  nats_cluster cluster;
};

TEST_F(nats_cluster_test, a_message_published_on_node_0_reaches_node_2) {
  auto pub = connect(cluster.url(0));
  auto sub = connect(cluster.url(2));
  ASSERT_TRUE(pub && sub);
  inbox in;
  ASSERT_TRUE(sub->subscribe("kvmesh.xnode.>", "", in.handler()));
  ASSERT_TRUE(sub->flush(2s));
  ASSERT_TRUE(wait_for_interest(*pub, in, "kvmesh.xnode.probe"));
  // Once the route carries the interest, everything arrives, once, in the
  // order one publisher sent it.
  for (uint8_t i = 0; i < 100; ++i)
    ASSERT_TRUE(pub->publish("kvmesh.xnode.data", {i, 1, 2, 3}));
  ASSERT_TRUE(pub->flush(2s));
  ASSERT_TRUE(in.wait_for("kvmesh.xnode.data", 100, 5s));
  const auto got = in.payloads("kvmesh.xnode.data");
  ASSERT_EQ(got.size(), 100u);
  for (uint8_t i = 0; i < 100; ++i)
    EXPECT_EQ(got[i], (std::vector<uint8_t>{i, 1, 2, 3}));
}

TEST_F(nats_cluster_test, request_reply_works_across_nodes) {
  auto responder = connect(cluster.url(1));
  auto requester = connect(cluster.url(0));
  ASSERT_TRUE(responder && requester);
  nats_bus* r = responder.get();
  ASSERT_TRUE(
      responder->subscribe("kvmesh.xnode.echo", "", [r](nats_message m) {
        std::vector<uint8_t> out = m.payload;
        out.push_back(42);
        (void)r->publish(m.reply, out);
      }));
  ASSERT_TRUE(responder->flush(2s));
  // The first requests may meet a node that has not heard of the responder.
  bool answered = false;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!answered && std::chrono::steady_clock::now() < deadline)
    answered =
        static_cast<bool>(requester->request("kvmesh.xnode.echo", {0}, 100ms));
  ASSERT_TRUE(answered);
  // From then on every request is answered, each with its own reply (the
  // reply travels back over the route to the requester's node).
  for (uint8_t i = 1; i <= 20; ++i) {
    auto reply = requester->request("kvmesh.xnode.echo", {i, i}, 2s);
    ASSERT_TRUE(reply) << reply.err().message;
    EXPECT_EQ(*reply, (std::vector<uint8_t>{i, i, 42}));
  }
  // Nobody serves this subject on any node: a timeout, not a hang.
  EXPECT_FALSE(requester->request("kvmesh.xnode.nobody", {1}, 200ms));
}

// Connected to one node only, a client still learns the other nodes' client
// URLs from the cluster (INFO connect_urls) and reconnects to one of them.
TEST_F(nats_cluster_test, a_subscriber_whose_node_stops_fails_over) {
  auto pub = connect(cluster.url(0));
  auto sub = connect(cluster.url(1));
  ASSERT_TRUE(pub && sub);
  inbox in;
  ASSERT_TRUE(sub->subscribe("kvmesh.failover", "", in.handler()));
  ASSERT_TRUE(sub->flush(2s));
  ASSERT_TRUE(wait_for_interest(*pub, in, "kvmesh.failover"));
  EXPECT_EQ(sub->reconnects(), 0u);

  cluster.stop(1);
  EXPECT_FALSE(cluster.running(1));
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (sub->reconnects() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  ASSERT_GE(sub->reconnects(), 1u);
  // The subscription was replayed to the new node; once its interest has
  // reached node 0, delivery resumes.
  ASSERT_TRUE(sub->flush(2s));
  EXPECT_TRUE(wait_for_interest(*pub, in, "kvmesh.failover"));
  EXPECT_EQ(pub->reconnects(), 0u);  // node 0 never went away
}

TEST_F(nats_cluster_test, a_publisher_whose_node_stops_fails_over) {
  auto pub = connect(cluster.url(0));
  auto sub = connect(cluster.url(2));
  ASSERT_TRUE(pub && sub);
  inbox in;
  ASSERT_TRUE(sub->subscribe("kvmesh.failover", "", in.handler()));
  ASSERT_TRUE(sub->flush(2s));
  ASSERT_TRUE(wait_for_interest(*pub, in, "kvmesh.failover"));

  cluster.stop(0);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (pub->reconnects() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  ASSERT_GE(pub->reconnects(), 1u);
  ASSERT_TRUE(pub->flush(2s));
  // The publisher now sits on node 1 or 2; either way node 2's subscriber
  // hears it again.
  EXPECT_TRUE(wait_for_interest(*pub, in, "kvmesh.failover"));
  EXPECT_EQ(sub->reconnects(), 0u);
}

TEST(nats_cluster, urls_lists_the_three_nodes_comma_separated) {
  nats_cluster c;
  ASSERT_TRUE(c.ready());
  EXPECT_EQ(c.urls(), c.url(0) + "," + c.url(1) + "," + c.url(2));
  for (int i = 0; i < nats_cluster::size; ++i) {
    EXPECT_TRUE(c.running(i));
    EXPECT_EQ(c.url(i).rfind("nats://127.0.0.1:", 0), 0u) << c.url(i);
  }
  c.stop(2);
  EXPECT_FALSE(c.running(2));
  EXPECT_TRUE(c.running(0));
}

// A comma-separated list is a cluster's servers (libnats' own SetURL would
// parse it as one URL): a client connects while the first one is down.
TEST(nats_cluster, a_comma_separated_url_list_connects) {
  nats_cluster c;
  ASSERT_TRUE(c.ready());
  c.stop(0);  // the first listed node is down: another one must be tried
  auto b = nats_bus::connect(options(c.urls()));
  ASSERT_TRUE(b) << b.err().message;
  EXPECT_TRUE((*b)->flush(2s));
}

}  // namespace
}  // namespace kvmesh::test
