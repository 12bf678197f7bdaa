// Tests of cluster/bridge's batcher and unbatch against a real nats-server.
#include "cluster/bridge.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "messages/codec.hpp"
#include "nats_server.hpp"

namespace kvmesh::test {
namespace {

// What a wildcard subscription receives, as NATS delivers it.
struct wire_log {
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
  std::vector<nats_message> wait_for(size_t n) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, std::chrono::seconds(5), [&] { return got.size() >= n; });
    return got;
  }
};

class bridge_test : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server.running()) << "no nats-server";
    nats_options o;
    o.url = server.url();
    auto b = nats_bus::connect(o);
    ASSERT_TRUE(b) << b.err().message;
    bus = std::move(*b);
    ASSERT_TRUE(bus->subscribe("t.>", "", log.handler()));
    ASSERT_TRUE(bus->flush(std::chrono::seconds(2)));
  }
  nats_server server;
  std::unique_ptr<nats_bus> bus;
  wire_log log;
};

TEST_F(bridge_test, messages_for_one_receiver_travel_as_one_batch) {
  batcher out;
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(out.add("t.agent.a.bid", "r.1", {1, 2, 3}));  // first: flush
  EXPECT_FALSE(out.add("t.agent.a.award", "r.2", {4}));     // queued
  EXPECT_FALSE(out.add("t.agent.a.release", "", {}));       // no reply
  EXPECT_FALSE(out.add("t.agent.b.bid", "r.3", {5, 6}));    // alone
  EXPECT_EQ(out.flush(*bus), 2u);  // one batch for a, one message for b
  EXPECT_TRUE(out.empty());
  auto got = log.wait_for(2);
  ASSERT_EQ(got.size(), 2u);
  std::vector<nats_message> items;
  for (auto& m : got)
    for (auto& one : unbatch(std::move(m)))
      items.push_back(std::move(one));
  ASSERT_EQ(items.size(), 4u);
  auto find = [&](const std::string& s) -> const nats_message* {
    for (const auto& m : items)
      if (m.subject == s) return &m;
    return nullptr;
  };
  ASSERT_TRUE(find("t.agent.a.bid"));
  EXPECT_EQ(find("t.agent.a.bid")->reply, "r.1");
  EXPECT_EQ(find("t.agent.a.bid")->payload, (bytes{1, 2, 3}));
  ASSERT_TRUE(find("t.agent.a.award"));
  EXPECT_EQ(find("t.agent.a.award")->reply, "r.2");
  ASSERT_TRUE(find("t.agent.a.release"));
  EXPECT_TRUE(find("t.agent.a.release")->reply.empty());
  ASSERT_TRUE(find("t.agent.b.bid"));
  EXPECT_EQ(find("t.agent.b.bid")->payload, (bytes{5, 6}));
  // Only the batch travelled on a .batch subject, and a second flush
  // has nothing to send.
  size_t batches = 0;
  for (const auto& m : log.wait_for(2))
    batches += is_batch(m.subject);
  EXPECT_EQ(batches, 1u);
  EXPECT_EQ(out.flush(*bus), 0u);
}

TEST_F(bridge_test, a_batch_cannot_reach_beyond_its_parent) {
  batch_msg b;
  b.items.push_back({"t.agent.a.bid", "r.1", {1}});
  b.items.push_back({"t.agent.other.drain", "", {2}});  // another receiver
  b.items.push_back({"t.agent.a.batch", "", {3}});      // nested
  b.items.push_back({"t.agent.a.x.y", "", {4}});        // deeper
  auto items = unbatch(nats_message{"t.agent.a.batch", "", encode(b)});
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].subject, "t.agent.a.bid");
}

TEST_F(bridge_test, a_malformed_batch_is_counted_and_yields_nothing) {
  const uint64_t before = decode_errors(msg_kind::batch);
  EXPECT_TRUE(unbatch(nats_message{"t.agent.a.batch", "", {1, 2, 3}}).empty());
  EXPECT_EQ(decode_errors(msg_kind::batch), before + 1);
  // Not a batch subject: passed through as it came.
  auto one = unbatch(nats_message{"t.agent.a.bid", "r", {1, 2, 3}});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].payload, (bytes{1, 2, 3}));
}

TEST_F(bridge_test, a_big_flush_goes_in_parts_below_the_payload_limit) {
  batcher out;
  const bytes big(batcher::max_batch_bytes / 4, 7);
  for (int i = 0; i < 10; ++i)
    out.add("t.big.x" + std::to_string(i), "", big);
  const size_t sent = out.flush(*bus);
  EXPECT_GE(sent, 3u);
  auto got = log.wait_for(sent);
  size_t items = 0;
  for (auto& m : got) {
    EXPECT_LE(m.payload.size(), batcher::max_batch_bytes * 2);
    items += unbatch(std::move(m)).size();
  }
  EXPECT_EQ(items, 10u);
}

}  // namespace
}  // namespace kvmesh::test
