// Tests of web/callback_gate: where and when a coroutine waiting for a
// callback resumes.
#include "web/callback_gate.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

namespace {

namespace asio = boost::asio;
using kvmesh::web::await_callback;
using kvmesh::web::callback_gate;
using kvmesh::web::callback_start;

struct record {
  std::vector<std::string> order;
  std::thread::id resumed_on;
};

asio::awaitable<void> waiter(callback_gate& gate,
                             const callback_start<int>& start, record& r) {
  const int v = co_await await_callback<int>(gate, start);
  r.order.push_back("resumed " + std::to_string(v));
  r.resumed_on = std::this_thread::get_id();
}

// A callback from the coroutine's own thread, once it waits (a NATS
// message read on its loop): it resumes at once, ahead of what the loop
// had queued.
TEST(CallbackGate, a_call_on_the_coroutines_thread_resumes_it_at_once) {
  asio::io_context io;
  callback_gate gate;
  record r;
  std::function<void(int)> done;
  const callback_start<int> start = [&](std::function<void(int)> d) {
    done = std::move(d);
  };
  asio::co_spawn(io, waiter(gate, start, r), asio::detached);
  asio::post(io, [&] {
    asio::post(io, [&] { r.order.push_back("queued before"); });
    done(7);
    r.order.push_back("after the call");
  });
  io.run();
  EXPECT_EQ(r.order, (std::vector<std::string>{"resumed 7", "after the call",
                                               "queued before"}));
}

// A callback made before start returns resumes the coroutine only after.
TEST(CallbackGate, a_call_within_start_resumes_it_after_start) {
  asio::io_context io;
  callback_gate gate;
  record r;
  const callback_start<int> start = [&](std::function<void(int)> d) {
    d(3);
    r.order.push_back("start returns");
  };
  asio::co_spawn(io, waiter(gate, start, r), asio::detached);
  io.run();
  EXPECT_EQ(r.order, (std::vector<std::string>{"start returns", "resumed 3"}));
}

// From another thread, it resumes on its own.
TEST(CallbackGate, a_call_from_another_thread_resumes_it_on_its_own) {
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  callback_gate gate;
  record r;
  std::thread other;
  const callback_start<int> start = [&](std::function<void(int)> d) {
    other = std::thread([d = std::move(d)] { d(5); });
  };
  asio::co_spawn(io, waiter(gate, start, r), asio::detached);
  std::thread runner([&] { io.run(); });
  const auto io_thread = runner.get_id();
  work.reset();  // run() returns once the coroutine is done
  runner.join();
  other.join();
  EXPECT_EQ(r.order, (std::vector<std::string>{"resumed 5"}));
  EXPECT_EQ(r.resumed_on, io_thread);
}

}  // namespace
