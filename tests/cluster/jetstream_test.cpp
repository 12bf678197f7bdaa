// Tests of cluster/jetstream against a real nats-server with JetStream.
#include "cluster/jetstream.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "nats_server.hpp"

namespace kvmesh::test {
namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

// What a router's handler does with a message.
enum class policy {
  keep,       // hold the delivery unsettled (the test settles it later)
  ack,        // ack at once
  drop_once,  // first time: drop it unsettled; redelivered: ack
  nak_once,   // first time: nak; redelivered: ack
};

struct received {
  int router = 0;
  std::vector<uint8_t> payload;
  uint64_t count = 0;  // delivery_count()
  clock_type::time_point at;
  std::shared_ptr<delivery> d;
};

// Collects what the routers' fetch threads hand over.
struct mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<received> got;
  std::vector<clock_type::time_point> first_seen;  // drop_once, nak_once

  work_handler handler(int router, policy p) {
    return [this, router, p](nats_message m, std::shared_ptr<delivery> d) {
      const uint64_t count = d->delivery_count();
      const bool first = count == 1;
      if (first && (p == policy::drop_once || p == policy::nak_once)) {
        if (p == policy::nak_once) {
          EXPECT_TRUE(d->nak());
        }
        std::lock_guard<std::mutex> g(mu);
        first_seen.push_back(clock_type::now());
        return;  // drop_once: `d` goes unsettled here
      }
      if (p != policy::keep) {
        EXPECT_TRUE(d->ack());
      }
      std::lock_guard<std::mutex> g(mu);
      got.push_back({router, std::move(m.payload), count, clock_type::now(),
                     std::move(d)});
      cv.notify_all();
    };
  }
  bool wait_for(size_t n, milliseconds timeout = milliseconds(5000)) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, timeout, [&] { return got.size() >= n; });
  }
  size_t size() {
    std::lock_guard<std::mutex> g(mu);
    return got.size();
  }
};

class jetstream_test : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir.path().empty()) << "no temp dir";
    ASSERT_TRUE(server->running()) << "no nats-server";
  }
  std::unique_ptr<nats_bus> connect() {
    nats_options o;
    o.url = server->url();
    o.reconnect_wait_ms = 50;
    auto b = nats_bus::connect(o);
    EXPECT_TRUE(b) << (b ? "" : b.err().message);
    return b ? std::move(*b) : nullptr;
  }
  static work_queue_options options(int64_t ack_wait_ms = 500) {
    work_queue_options o;
    o.ack_wait_ms = ack_wait_ms;
    return o;
  }
  std::unique_ptr<work_queue> open(nats_bus& bus,
                                   const work_queue_options& o = options()) {
    auto q = work_queue::open(bus, o);
    EXPECT_TRUE(q) << (q ? "" : q.err().message);
    return q ? std::move(*q) : nullptr;
  }
  // A record store on bucket `name`, otherwise of default options.
  std::unique_ptr<record_store> bucket(nats_bus& bus, const std::string& name) {
    record_options o;
    o.bucket = name;
    auto s = record_store::open(bus, o);
    EXPECT_TRUE(s) << (s ? "" : s.err().message);
    return s ? std::move(*s) : nullptr;
  }
  // Restarts the server on its port and store, as after a crash-free
  // maintenance stop.
  void restart() {
    const int port = server->port();
    server.reset();
    server = std::make_unique<nats_server>(port, dir.path());
  }

  temp_dir dir;
  std::unique_ptr<nats_server> server =
      std::make_unique<nats_server>(0, dir.path());
};

TEST_F(jetstream_test, two_routers_share_one_stream_and_one_consumer) {
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

TEST_F(jetstream_test, a_stream_of_that_name_on_another_subject_is_refused) {
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

TEST_F(jetstream_test, bad_options_are_errors) {
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

TEST_F(jetstream_test,
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

TEST_F(jetstream_test, a_dropped_delivery_comes_back_after_ack_wait) {
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
TEST_F(jetstream_test, a_delivery_in_progress_is_not_handed_out_again) {
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

TEST_F(jetstream_test, a_killed_router_s_messages_go_to_the_other_router) {
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

TEST_F(jetstream_test, a_delivery_acked_after_its_router_stopped_still_counts) {
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

TEST_F(jetstream_test, nak_hands_the_message_out_again_at_once) {
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

TEST_F(jetstream_test, stored_requests_survive_a_server_restart) {
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

// Durable intake's record of answers: what one router keeps, another
// reads (a redelivery answered without a second auction), across a server
// restart; a key never written is not_found, not an I/O error.
TEST_F(jetstream_test, records_are_shared_by_routers_and_survive_a_restart) {
  auto bus1 = connect();
  auto bus2 = connect();
  ASSERT_TRUE(bus1 && bus2);
  auto r1 = record_store::open(*bus1, record_options{});
  auto r2 = record_store::open(*bus2, record_options{});  // binds to r1's
  ASSERT_TRUE(r1) << r1.err().message;
  ASSERT_TRUE(r2) << r2.err().message;
  auto missing = (*r2)->get("7-42");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.err().code, ec::not_found);
  ASSERT_TRUE((*r1)->put("7-42", {1, 2, 3}));
  auto got = (*r2)->get("7-42");
  ASSERT_TRUE(got) << got.err().message;
  EXPECT_EQ(*got, (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ((*r1)->puts(), 1u);
  EXPECT_EQ((*r2)->hits(), 1u);
  r1->reset();
  r2->reset();
  bus1.reset();
  bus2.reset();
  restart();
  auto bus3 = connect();
  ASSERT_TRUE(bus3);
  auto r3 = record_store::open(*bus3, record_options{});
  ASSERT_TRUE(r3) << r3.err().message;
  auto again = (*r3)->get("7-42");
  ASSERT_TRUE(again) << again.err().message;
  EXPECT_EQ(*again, (std::vector<uint8_t>{1, 2, 3}));
}

// A router's claim on a durable request: of two creates of one key, one
// wins and the other learns who holds it; the holder lets go by erasing
// it, or the claim lapses after the bucket's TTL (a dead router's).
TEST_F(jetstream_test, a_claim_has_one_holder_until_let_go_or_lapsed) {
  auto bus1 = connect();
  auto bus2 = connect();
  ASSERT_TRUE(bus1 && bus2);
  record_options o;
  o.bucket = "CLAIMS_TEST";
  o.ttl = std::chrono::milliseconds(1500);
  auto a = record_store::open(*bus1, o);
  auto b = record_store::open(*bus2, o);
  ASSERT_TRUE(a) << a.err().message;
  ASSERT_TRUE(b) << b.err().message;
  const std::vector<uint8_t> ra{'a'}, rb{'b'};
  auto first = (*a)->create("9-1", ra);
  ASSERT_TRUE(first) << first.err().message;
  EXPECT_TRUE(*first);
  std::vector<uint8_t> holder;
  auto second = (*b)->create("9-1", rb, &holder);
  ASSERT_TRUE(second) << second.err().message;
  EXPECT_FALSE(*second);
  EXPECT_EQ(holder, ra);
  // Let go: the other takes it.
  ASSERT_TRUE((*a)->erase("9-1"));
  auto third = (*b)->create("9-1", rb);
  ASSERT_TRUE(third) << third.err().message;
  EXPECT_TRUE(*third);
  // Held by b, never let go: it lapses after the TTL, and a takes it.
  auto held = (*a)->create("9-1", ra, &holder);
  ASSERT_TRUE(held);
  EXPECT_FALSE(*held);
  EXPECT_EQ(holder, rb);
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool taken = false;
  while (!taken && std::chrono::steady_clock::now() < until) {
    auto again = (*a)->create("9-1", ra);
    ASSERT_TRUE(again) << again.err().message;
    taken = *again;
    if (!taken) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(taken);
}

// Answers of writes sent without waiting, as a test waits for them.
template <class T>
struct answers_with {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<T> got;
  std::function<void(T)> slot() {
    return [this](T s) {
      std::lock_guard<std::mutex> g(mu);
      got.push_back(std::move(s));
      cv.notify_all();
    };
  }
  bool wait_for(size_t n) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(10),
                       [&] { return got.size() >= n; });
  }
};
using answers = answers_with<status>;

TEST_F(jetstream_test, writes_in_flight_are_each_answered_once) {
  auto bus = connect();
  ASSERT_TRUE(bus);
  auto store = bucket(*bus, "ASYNC_TEST");
  ASSERT_TRUE(store);
  auto& r = *store;
  // Many at once, then each readable.
  answers puts;
  constexpr size_t n = 200;
  for (size_t i = 0; i < n; ++i)
    r.put_async("7-" + std::to_string(i), {static_cast<uint8_t>(i)}, false,
                puts.slot());
  ASSERT_TRUE(puts.wait_for(n));
  for (const auto& s : puts.got)
    EXPECT_TRUE(s) << s.err().message;
  for (size_t i = 0; i < n; i += 37) {
    auto v = r.get("7-" + std::to_string(i));
    ASSERT_TRUE(v) << v.err().message;
    EXPECT_EQ(*v, std::vector<uint8_t>{static_cast<uint8_t>(i)});
  }
  // Only new: the first write of a key wins, a second is a conflict, and
  // so is one after an erase (its marker), which create() then takes.
  answers claims;
  r.put_async("8-1", {'a'}, true, claims.slot());
  ASSERT_TRUE(claims.wait_for(1));
  r.put_async("8-1", {'b'}, true, claims.slot());
  ASSERT_TRUE(claims.wait_for(2));
  ASSERT_TRUE(r.erase("8-1"));
  r.put_async("8-1", {'c'}, true, claims.slot());
  ASSERT_TRUE(claims.wait_for(3));
  EXPECT_TRUE(claims.got[0]) << claims.got[0].err().message;
  ASSERT_FALSE(claims.got[1]);
  EXPECT_EQ(claims.got[1].err().code, ec::conflict)
      << claims.got[1].err().message;
  ASSERT_FALSE(claims.got[2]);
  EXPECT_EQ(claims.got[2].err().code, ec::conflict);
  auto taken = r.create("8-1", {'c'});
  ASSERT_TRUE(taken) << taken.err().message;
  EXPECT_TRUE(*taken);
  auto v = r.get("8-1");
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, std::vector<uint8_t>{'c'});
}

TEST_F(jetstream_test, requests_published_without_waiting_are_each_stored) {
  auto bus = connect();
  ASSERT_TRUE(bus);
  auto q = open(*bus);
  ASSERT_TRUE(q);
  answers_with<expected<uint64_t>> got;
  constexpr size_t n = 100;
  for (size_t i = 0; i < n; ++i)
    q->publish_async(options().subject, {static_cast<uint8_t>(i)}, got.slot());
  ASSERT_TRUE(got.wait_for(n));
  std::set<uint64_t> sequences;
  for (const auto& s : got.got) {
    ASSERT_TRUE(s) << s.err().message;
    sequences.insert(*s);
  }
  EXPECT_EQ(sequences.size(), n);  // each stored once, at a place of its own
  auto st = q->state();
  ASSERT_TRUE(st) << st.err().message;
  EXPECT_EQ(st->messages, n);
  // A subject no stream stores is refused, by name.
  q->publish_async("elsewhere.route", {1}, got.slot());
  ASSERT_TRUE(got.wait_for(n + 1));
  ASSERT_FALSE(got.got.back());
  EXPECT_NE(got.got.back().err().message.find("no stream stores"),
            std::string::npos)
      << got.got.back().err().message;
}

TEST_F(jetstream_test,
       a_store_destroyed_with_writes_in_flight_answers_each_at_most_once) {
  auto bus = connect();
  ASSERT_TRUE(bus);
  auto store = bucket(*bus, "ASYNC_CLOSE");
  ASSERT_TRUE(store);
  auto counts = std::make_shared<std::vector<std::atomic<int>>>(300);
  for (size_t i = 0; i < counts->size(); ++i)
    store->put_async("5-" + std::to_string(i), std::vector<uint8_t>(512, 1),
                     false, [counts, i](status) { ++(*counts)[i]; });
  store.reset();  // at once: most are still on their way
  bus.reset();
  size_t answered = 0;
  for (const auto& c : *counts) {
    EXPECT_LE(c.load(), 1);
    answered += c.load();
  }
  // The destructor waits a while: a healthy server answers them all.
  EXPECT_EQ(answered, counts->size());

  // A server that answers nothing: the destructor gives up on them, and
  // none is answered after it returned.
  bus = connect();
  ASSERT_TRUE(bus);
  store = bucket(*bus, "ASYNC_CLOSE");
  ASSERT_TRUE(store);
  server->freeze(true);
  auto late = std::make_shared<std::atomic<int>>(0);
  for (size_t i = 0; i < 50; ++i)
    store->put_async("6-" + std::to_string(i), {2}, false,
                     [late](status) { ++*late; });
  store.reset();
  const int at_close = late->load();
  server->freeze(false);
  bus.reset();
  EXPECT_EQ(late->load(), at_close);
}

TEST_F(jetstream_test,
       a_write_the_server_cannot_take_is_answered_with_an_error) {
  auto bus = connect();
  ASSERT_TRUE(bus);
  auto store = bucket(*bus, "ASYNC_GONE");
  ASSERT_TRUE(store);
  // The bucket's stream deleted under it: the server refuses the write.
  auto deleted = bus->request("$JS.API.STREAM.DELETE.KV_ASYNC_GONE", {},
                              std::chrono::seconds(5));
  ASSERT_TRUE(deleted) << deleted.err().message;
  answers a;
  store->put_async("1-1", {'x'}, false, a.slot());
  ASSERT_TRUE(a.wait_for(1));
  ASSERT_FALSE(a.got[0]);
  EXPECT_EQ(a.got[0].err().code, ec::io_error);
  EXPECT_NE(a.got[0].err().message.find("ASYNC_GONE"), std::string::npos)
      << a.got[0].err().message;
  EXPECT_EQ(store->failures(), 1u);
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
