// The JetStream tests' fixture: a real nats-server with JetStream in a
// directory of its own, routers' handlers that collect what their fetch
// threads hand over, and answers of writes sent without waiting.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cluster/jetstream.hpp"
#include "nats_server.hpp"

namespace kvmesh::test {

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

}  // namespace kvmesh::test
