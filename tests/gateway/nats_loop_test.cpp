// nats_loop against a real nats-server: messages reach their handler on the
// io_context's thread, whole and in order (payloads larger than libnats'
// read buffer included), from its own and from other connections, and
// again after the server restarts; a message that may wait goes with the
// next one that may not, or when its wait ends.
#include "gateway/nats_loop.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "tests/cluster/nats_server.hpp"

namespace kvmesh::gateway {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// An io_context run by a thread of its own for the test's length, and the
// connection on it, closed once the thread stopped (before the io_context).
struct loop_thread {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work =
      asio::make_work_guard(io);
  std::thread t{[this] { io.run(); }};
  std::unique_ptr<nats_loop> nats;
  std::string error;  // why connect failed
  explicit loop_thread(const nats_options& o) {
    auto made = nats_loop::connect(o, io);
    if (made)
      nats = std::move(*made);
    else
      error = made.err().message;
  }
  ~loop_thread() {
    work.reset();
    io.stop();
    t.join();
    nats.reset();
  }
  std::thread::id id() const { return t.get_id(); }
  // Runs f on the loop and waits for it.
  template <class F>
  void run(F f) {
    std::atomic<bool> done{false};
    asio::post(io, [&] {
      f();
      done = true;
    });
    while (!done)
      std::this_thread::sleep_for(1ms);
  }
};

struct received {
  std::mutex mu;
  std::vector<std::string> subjects;
  std::vector<std::vector<uint8_t>> payloads;
  bool off_thread = false;
  size_t size() {
    std::lock_guard<std::mutex> g(mu);
    return payloads.size();
  }
};

template <class Pred>
bool wait_for(Pred p, std::chrono::milliseconds limit = 10s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!p()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

nats_options options_for(const test::nats_server& s) {
  nats_options o;
  o.url = s.url();
  o.name = "nats-loop-test";
  o.reconnect_wait_ms = 50;
  return o;
}

std::vector<uint8_t> payload_of(size_t i) {
  // Every 50th is 100 KB: three times libnats' 32 KB read buffer.
  std::vector<uint8_t> p(i % 50 == 0 ? 100000 : 1 + i % 300);
  for (size_t k = 0; k < p.size(); ++k)
    p[k] = static_cast<uint8_t>(i * 31 + k);
  return p;
}

nats_loop::handler recorder(received& r, const std::thread::id& loop_id) {
  return [&r, &loop_id](std::string_view subject, const uint8_t* data,
                        size_t size) {
    std::lock_guard<std::mutex> g(r.mu);
    if (std::this_thread::get_id() != loop_id) r.off_thread = true;
    r.subjects.emplace_back(subject);
    r.payloads.emplace_back(data, data + size);
  };
}

TEST(NatsLoop, its_own_messages_come_back_whole_in_order_on_its_thread) {
  test::nats_server server;
  loop_thread lt(options_for(server));
  ASSERT_TRUE(lt.nats) << lt.error;
  auto& loop = lt.nats;
  const std::thread::id loop_id = lt.id();
  received r;
  lt.run([&] {
    ASSERT_TRUE(loop->subscribe("loop.test.*", recorder(r, loop_id)));
  });
  constexpr size_t n = 2000;
  lt.run([&] {
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(
          loop->publish("loop.test." + std::to_string(i), payload_of(i), ""));
  });
  ASSERT_TRUE(wait_for([&] { return r.size() == n; }))
      << r.size() << " of " << n;
  std::lock_guard<std::mutex> g(r.mu);
  EXPECT_FALSE(r.off_thread);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(r.subjects[i], "loop.test." + std::to_string(i));
    ASSERT_EQ(r.payloads[i], payload_of(i)) << i;
  }
  lt.run([&] { loop.reset(); });
}

TEST(NatsLoop, a_message_that_may_wait_goes_with_the_next_that_may_not) {
  test::nats_server server;
  loop_thread lt(options_for(server));
  ASSERT_TRUE(lt.nats) << lt.error;
  auto& loop = lt.nats;
  const std::thread::id loop_id = lt.id();
  received r;
  lt.run([&] { ASSERT_TRUE(loop->subscribe("hold.*", recorder(r, loop_id))); });
  // Held for ten minutes: only the next publish can send it.
  lt.run([&] { ASSERT_TRUE(loop->publish("hold.1", {1}, "", 10min)); });
  EXPECT_FALSE(wait_for([&] { return r.size() > 0; }, 300ms));
  lt.run([&] { ASSERT_TRUE(loop->publish("hold.2", {2}, "")); });
  ASSERT_TRUE(wait_for([&] { return r.size() == 2; })) << r.size();
  // Alone, a held message goes when its wait ends.
  lt.run([&] { ASSERT_TRUE(loop->publish("hold.3", {3}, "", 50ms)); });
  ASSERT_TRUE(wait_for([&] { return r.size() == 3; })) << r.size();
  {
    std::lock_guard<std::mutex> g(r.mu);
    EXPECT_EQ(r.subjects,
              (std::vector<std::string>{"hold.1", "hold.2", "hold.3"}));
  }
  lt.run([&] { loop.reset(); });
}

TEST(NatsLoop, messages_from_another_connection_reach_it) {
  test::nats_server server;
  loop_thread lt(options_for(server));
  ASSERT_TRUE(lt.nats) << lt.error;
  auto& loop = lt.nats;
  const std::thread::id loop_id = lt.id();
  received r;
  lt.run([&] { ASSERT_TRUE(loop->subscribe("in", recorder(r, loop_id))); });
  auto bus = nats_bus::connect(options_for(server));
  ASSERT_TRUE(bus) << bus.err().message;
  // The subscription is the server's once a round trip of the loop's own
  // connection came back.
  received flushed;
  lt.run([&] {
    ASSERT_TRUE(loop->subscribe("flushed", recorder(flushed, loop_id)));
    ASSERT_TRUE(loop->publish("flushed", {1}, ""));
  });
  ASSERT_TRUE(wait_for([&] { return flushed.size() == 1; }));
  for (size_t i = 0; i < 300; ++i)
    ASSERT_TRUE((*bus)->publish("in", payload_of(i)));
  ASSERT_TRUE(wait_for([&] { return r.size() == 300; })) << r.size();
  // One large message alone, with nothing after it: the socket holds far
  // more than one read takes, and no later packet signals the rest.
  for (size_t k = 1; k <= 5; ++k) {
    std::vector<uint8_t> big(900000, static_cast<uint8_t>(k));
    ASSERT_TRUE((*bus)->publish("in", big));
    ASSERT_TRUE(wait_for([&] { return r.size() == 300 + k; }, 5s))
        << "large message " << k << " did not arrive";
  }
  std::lock_guard<std::mutex> g(r.mu);
  EXPECT_FALSE(r.off_thread);
  for (size_t i = 0; i < 300; ++i)
    ASSERT_EQ(r.payloads[i], payload_of(i)) << i;
  EXPECT_EQ(r.payloads.back(), std::vector<uint8_t>(900000, 5));
}

TEST(NatsLoop, it_reconnects_and_serves_on_after_the_server_restarts) {
  auto server = std::make_unique<test::nats_server>();
  const int port = server->port();
  loop_thread lt(options_for(*server));
  ASSERT_TRUE(lt.nats) << lt.error;
  auto& loop = lt.nats;
  const std::thread::id loop_id = lt.id();
  received r;
  lt.run([&] {
    ASSERT_TRUE(loop->subscribe("again", recorder(r, loop_id)));
    ASSERT_TRUE(loop->publish("again", {1}, ""));
  });
  ASSERT_TRUE(wait_for([&] { return r.size() == 1; }));
  server.reset();
  ASSERT_TRUE(wait_for([&] { return !loop->connected(); }));
  server = std::make_unique<test::nats_server>(port);
  ASSERT_TRUE(wait_for([&] { return loop->connected(); }));
  // Resubscribed by libnats on reconnecting: a message sent now arrives.
  ASSERT_TRUE(wait_for(
      [&] {
        lt.run([&] { (void)loop->publish("again", {2}, ""); });
        return wait_for([&] { return r.size() >= 2; }, 200ms);
      },
      10s));
  std::lock_guard<std::mutex> g(r.mu);
  EXPECT_FALSE(r.off_thread);
  EXPECT_EQ(r.payloads.back(), std::vector<uint8_t>{2});
}

TEST(NatsLoop, a_tls_connection_is_refused_with_a_reason) {
  asio::io_context io;
  nats_options o;
  o.url = "tls://127.0.0.1:1";
  auto loop = nats_loop::connect(o, io);
  ASSERT_FALSE(loop);
  EXPECT_EQ(loop.err().code, ec::invalid_argument);
  EXPECT_NE(loop.err().message.find("TLS"), std::string::npos);
}

}  // namespace
}  // namespace kvmesh::gateway
