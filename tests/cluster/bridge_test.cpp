// Tests of cluster/bridge's batcher, unbatch and forward()'s mailbox bound
// against a real nats-server.
#include "cluster/bridge.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "actors/actors.hpp"
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
  b.items.push_back({"t.agent", "", {5}});              // above
  b.items.push_back({"t.agent.a", "", {6}});            // the parent
  auto items = unbatch(nats_message{"t.agent.a.batch", "", encode(b)});
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].subject, "t.agent.a.bid");
  EXPECT_EQ(items[1].subject, "t.agent.a");
}

// KV events: P.kv.<shard>'s parent is every shard's, so they batch on the
// subject itself, always as a Batch (one sender, one subject: in order).
TEST_F(bridge_test, a_receivers_own_subject_batches_below_itself) {
  batcher out;
  EXPECT_TRUE(out.add("t.kv.0", "", {1}, true));
  EXPECT_EQ(out.flush(*bus), 1u);
  EXPECT_TRUE(out.add("t.kv.1", "", {2}, true));
  EXPECT_FALSE(out.add("t.kv.1", "", {3}, true));
  EXPECT_FALSE(out.add("t.kv.0", "", {4}, true));
  EXPECT_EQ(out.flush(*bus), 2u);
  auto got = log.wait_for(3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].subject, "t.kv.0.batch");  // even a single item
  // The second flush: one batch per receiver.
  if (got[1].subject != "t.kv.1.batch") std::swap(got[1], got[2]);
  EXPECT_EQ(got[1].subject, "t.kv.1.batch");
  EXPECT_EQ(got[2].subject, "t.kv.0.batch");
  auto one = unbatch(got[1]);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[0].subject, "t.kv.1");
  EXPECT_EQ(one[0].payload, bytes{2});
  EXPECT_EQ(one[1].payload, bytes{3});
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

TEST_F(bridge_test, each_unbatched_hands_on_what_unbatch_gives) {
  std::vector<nats_message> got;
  auto keep = [&](nats_message m) { got.push_back(std::move(m)); };
  each_unbatched(nats_message{"t.agent.a.bid", "r", {7}}, keep);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].subject, "t.agent.a.bid");
  EXPECT_EQ(got[0].reply, "r");
  EXPECT_EQ(got[0].payload, bytes{7});
  batch_msg b;
  b.items.push_back({"t.agent.a.bid", "r.1", {1}});
  b.items.push_back({"t.agent.other.drain", "", {2}});  // another receiver
  b.items.push_back({"t.agent.a.award", "r.2", {3}});
  got.clear();
  each_unbatched(nats_message{"t.agent.a.batch", "", encode(b)}, keep);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].reply, "r.1");
  EXPECT_EQ(got[1].subject, "t.agent.a.award");
  EXPECT_EQ(got[1].payload, bytes{3});
  got.clear();
  each_unbatched(nats_message{"t.agent.a.batch", "", {1, 2, 3}}, keep);
  EXPECT_TRUE(got.empty());  // malformed: nothing
}

TEST_F(bridge_test, a_big_flush_goes_in_parts_below_the_payload_limit) {
  batcher out;
  const bytes big(batcher::max_batch_bytes / 4, 7);
  for (int i = 0; i < 10; ++i)
    out.add("t.big.x" + std::to_string(i), "", big);
  const size_t sent = out.flush(*bus);
  EXPECT_GE(sent, 3u);
  auto got = log.wait_for(sent);
  std::vector<std::string> items;
  for (auto& m : got) {
    EXPECT_LE(m.payload.size(), batcher::max_batch_bytes * 2);
    for (auto& one : unbatch(std::move(m)))
      items.push_back(one.subject);
  }
  // The parts keep the order the messages were queued in.
  ASSERT_EQ(items.size(), 10u);
  for (size_t i = 0; i < items.size(); ++i)
    EXPECT_EQ(items[i], "t.big.x" + std::to_string(i));
}

// What the slow actor saw, shared with the test.
struct slow_log {
  std::mutex mu;
  std::condition_variable cv;
  bool blocked = false;   // inside its first message
  bool released = false;  // the test let it go on
  size_t handled = 0;
  size_t most_waiting = 0;  // its mailbox and the message in hand
  uint64_t most_in_gate = 0;

  template <class F>
  bool wait_until(F done,
                  std::chrono::seconds limit = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, limit, done);
  }
};

// An actor behind forward() that blocks in its first message until
// released, as an index shard busy writing does.
caf::behavior slow_actor(caf::event_based_actor* self,
                         std::shared_ptr<mailbox_gate> gate,
                         std::shared_ptr<slow_log> log) {
  return {
      [=](nats_atom, const std::string&, const std::string&,
          const bytes& payload) {
        gate_pass pass(gate.get(), payload.size());
        std::unique_lock<std::mutex> l(log->mu);
        auto look = [&] {
          log->most_waiting =
              std::max(log->most_waiting, self->mailbox().size() + 1);
          log->most_in_gate = std::max(log->most_in_gate, gate->messages());
        };
        look();
        if (log->handled++ == 0) {
          log->blocked = true;
          log->cv.notify_all();
          log->cv.wait_for(l, std::chrono::seconds(20),
                           [&] { return log->released; });
          look();  // what queued meanwhile
        }
        log->cv.notify_all();
      },
  };
}

TEST_F(bridge_test, a_full_mailbox_refuses_counts_and_answers_overloaded) {
  caf::actor_system_config cfg;
  register_types(cfg);
  caf::actor_system sys{cfg};
  constexpr uint64_t bound = 8;
  auto gate = std::make_shared<mailbox_gate>(bound, uint64_t{1} << 20);
  auto log = std::make_shared<slow_log>();
  auto to = sys.spawn<caf::detached>(slow_actor, gate, log);
  admission adm;
  adm.gate = gate;
  adm.kind = feed_kind::query;
  adm.overloaded = [](const std::string&,
                      const std::string& why) -> std::optional<bytes> {
    return bytes(why.begin(), why.end());
  };
  auto sub = forward(*bus, "slow.in", "", to, adm);
  ASSERT_TRUE(sub) << sub.err().message;
  auto batch_sub = forward(*bus, "slow.batch", "", to, adm);
  ASSERT_TRUE(batch_sub) << batch_sub.err().message;
  ASSERT_TRUE(bus->flush(std::chrono::seconds(2)));
  const uint64_t refused_before = nats_refusals(feed_kind::query);
  auto refused = [&] {
    return nats_refusals(feed_kind::query) - refused_before;
  };

  ASSERT_TRUE(bus->publish("slow.in", {0}));
  ASSERT_TRUE(log->wait_until([&] { return log->blocked; }));
  // Busy with the first: 7 more fit, the rest is refused.
  constexpr size_t sent = 50;
  for (size_t i = 1; i < sent; ++i)
    ASSERT_TRUE(bus->publish("slow.in", {static_cast<uint8_t>(i)}));
  // A batch counts per item: all three refused.
  batch_msg b;
  for (uint8_t i = 0; i < 3; ++i)
    b.items.push_back({"slow.in", "", {i}});
  ASSERT_TRUE(bus->publish("slow.batch", encode(b)));
  ASSERT_TRUE(bus->flush(std::chrono::seconds(2)));
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (refused() < sent - bound + 3 &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(refused(), sent - bound + 3);
  EXPECT_EQ(gate->messages(), bound);

  // A caller awaiting a reply hears why at once, not at its timeout.
  auto answer = bus->request("slow.in", {42}, std::chrono::milliseconds(2000));
  ASSERT_TRUE(answer) << answer.err().message;
  const std::string text(answer->begin(), answer->end());
  EXPECT_EQ(text.rfind("overloaded: query refused, 8 messages", 0), 0u) << text;
  EXPECT_NE(text.find("limits.max_mailbox_messages = 8"), std::string::npos)
      << text;
  EXPECT_EQ(refused(), sent - bound + 4);

  {
    std::lock_guard<std::mutex> g(log->mu);
    log->released = true;
    log->cv.notify_all();
  }
  ASSERT_TRUE(log->wait_until([&] { return log->handled == bound; }));
  // Caught up: the gate is empty and messages flow again.
  const auto drained =
      std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (gate->messages() != 0 && std::chrono::steady_clock::now() < drained)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(gate->messages(), 0u);
  EXPECT_EQ(gate->bytes(), 0u);
  for (uint8_t i = 0; i < 3; ++i)
    ASSERT_TRUE(bus->publish("slow.in", {i}));
  ASSERT_TRUE(bus->publish("slow.batch", encode(b)));
  ASSERT_TRUE(log->wait_until([&] { return log->handled == bound + 6; }));
  EXPECT_EQ(refused(), sent - bound + 4);
  {
    std::lock_guard<std::mutex> g(log->mu);
    EXPECT_EQ(log->most_waiting, bound);  // full, never more
    EXPECT_EQ(log->most_in_gate, bound);
  }
  EXPECT_EQ(gate->peak(), bound);
  (void)bus->unsubscribe(*sub);
  (void)bus->unsubscribe(*batch_sub);
  caf::anon_send_exit(to, caf::exit_reason::user_shutdown);
}

TEST(mailbox_gate, one_message_always_fits_and_bytes_bound_the_rest) {
  mailbox_gate g(100, 1000);
  EXPECT_TRUE(g.enter(5000));  // alone: bigger than the byte bound, let in
  EXPECT_FALSE(g.enter(1));    // past the byte bound
  g.leave(5000);
  EXPECT_TRUE(g.enter(600));
  EXPECT_FALSE(g.enter(600));
  EXPECT_TRUE(g.enter(400));
  EXPECT_EQ(g.messages(), 2u);
  EXPECT_EQ(g.bytes(), 1000u);
  g.leave(1000, 2);
  EXPECT_EQ(g.messages(), 0u);
  EXPECT_EQ(g.bytes(), 0u);
}

}  // namespace
}  // namespace kvmesh::test
