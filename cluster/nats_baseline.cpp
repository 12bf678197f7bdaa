// Raw NATS request/reply and scatter-gather latencies over nats_bus.
#include "cluster/nats_baseline.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/stats.hpp"

namespace kvmesh {
namespace {

using steady = std::chrono::steady_clock;

// The first rounds pay for things a steady state does not: the requester's
// reply subscription, first allocations, cold caches and TCP windows.
constexpr size_t warmup_rounds = 50;
constexpr auto sample_timeout = std::chrono::seconds(1);

// Subjects of one call: process id and a counter keep concurrent calls of
// one process apart, a random part keeps processes on other hosts apart.
std::string unique_prefix(const std::string& kind) {
  static std::atomic<uint64_t> next{0};
  std::random_device rd;
  return "kvmesh.baseline." + kind + "." + std::to_string(getpid()) + "-" +
         std::to_string(next.fetch_add(1)) + "-" + std::to_string(rd());
}

expected<std::unique_ptr<nats_bus>> connect_as(const nats_options& o,
                                               const std::string& role) {
  nats_options named = o;
  named.name = o.name + "-baseline-" + role;
  return nats_bus::connect(named);
}

error context(const std::string& what, const error& e) {
  return make_error(e.code, what + ": " + e.message);
}

double micros(steady::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

baseline_result result_of(std::vector<double>& us) {
  const summary s = summarize(us);
  baseline_result r;
  r.samples = s.count;
  r.p50_us = s.p50;
  r.p99_us = s.p99;
  r.mean_us = s.mean;
  return r;
}

// Holds each round to its start time when pacing; no wait without.
struct pacer {
  std::chrono::microseconds interval;
  steady::time_point next = steady::now();
  void wait() {
    if (interval.count() <= 0) return;
    std::this_thread::sleep_until(next);
    // A late round does not make the next ones come in a burst.
    next = std::max(next + interval, steady::now());
  }
};

// Replies of the scatter-gather requester, counted for the sample in
// flight; anything else is stray.
struct gather {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t sample = 0;
  size_t replies = 0;
  uint64_t stray = 0;
};

// The connections of one run. Each nats_bus drains when destroyed, which
// takes about 100 ms in libnats 3.4.1: they drain side by side, not one
// after the other (17 in a row at fan-out 16 would take longer than the
// measurement).
struct connections {
  std::vector<std::unique_ptr<nats_bus>> buses;
  ~connections() {
    std::vector<std::thread> closing;
    for (auto& b : buses)
      closing.emplace_back([&b] { b.reset(); });
    for (auto& t : closing)
      t.join();
  }
  // Connects and keeps the connection; the returned pointer lives as long
  // as this set.
  expected<nats_bus*> add(const nats_options& o, const std::string& role) {
    auto b = connect_as(o, role);
    if (!b) return b.err();
    buses.push_back(std::move(*b));
    return buses.back().get();
  }
};

// Connects `fanout` responders to `conns`, each answering every request on
// `subject` with `reply_bytes` (one that cannot be sent shows up as a sample
// missing replies), and waits until the server has their subscriptions.
status add_responders(connections& conns, const nats_options& o, size_t fanout,
                      const std::string& subject, size_t reply_bytes) {
  const std::vector<uint8_t> reply(reply_bytes, 0x5a);
  for (size_t k = 0; k < fanout; ++k) {
    auto b = conns.add(o, "responder-" + std::to_string(k));
    if (!b) return b.err();
    nats_bus* r = *b;
    auto sub = r->subscribe(subject, "", [r, reply](nats_message m) {
      (void)r->publish(m.reply, reply);
    });
    if (!sub) return sub.err();
  }
  for (auto& r : conns.buses)
    if (auto f = r->flush(sample_timeout); !f) return f.err();
  return ok;
}

}  // namespace

expected<baseline_result> request_reply_latency(
    const nats_options& o, size_t payload_bytes, size_t samples,
    std::chrono::microseconds interval) {
  const std::string what = "request/reply baseline on " + o.url;
  if (samples == 0)
    return make_error(ec::invalid_argument, what + ": 0 samples");
  const std::string subject = unique_prefix("rr") + ".echo";

  connections conns;
  auto responder = conns.add(o, "responder");
  if (!responder) return context(what, responder.err());
  nats_bus* r = *responder;
  auto sub = r->subscribe(subject, "", [r](nats_message m) {
    // A reply that cannot be sent shows up as the requester's timeout.
    (void)r->publish(m.reply, m.payload);
  });
  if (!sub) return context(what, sub.err());
  // The server has the subscription before the first request.
  if (auto f = r->flush(sample_timeout); !f) return context(what, f.err());

  auto requester = conns.add(o, "requester");
  if (!requester) return context(what, requester.err());
  std::vector<uint8_t> request(payload_bytes);
  for (size_t i = 0; i < payload_bytes; ++i)
    request[i] = static_cast<uint8_t>(i * 31 + 7);

  std::vector<double> us;
  us.reserve(samples);
  pacer pace{interval};
  for (size_t i = 0; i < warmup_rounds + samples; ++i) {
    pace.wait();
    const auto t0 = steady::now();
    auto reply = (*requester)->request(subject, request, sample_timeout);
    const auto t1 = steady::now();
    if (!reply)
      return context(what + ", round " + std::to_string(i), reply.err());
    if (*reply != request)
      return make_error(ec::io_error, what + ", round " + std::to_string(i) +
                                          ": the echo differs (" +
                                          std::to_string(reply->size()) +
                                          " bytes)");
    if (i >= warmup_rounds) us.push_back(micros(t1 - t0));
  }
  return result_of(us);
}

expected<baseline_result> scatter_gather_latency(
    const nats_options& o, size_t fanout, size_t request_bytes,
    size_t reply_bytes, size_t samples, std::chrono::microseconds interval) {
  const std::string what = "scatter-gather baseline on " + o.url;
  if (samples == 0)
    return make_error(ec::invalid_argument, what + ": 0 samples");
  if (fanout == 0)
    return make_error(ec::invalid_argument, what + ": fan-out 0");
  const std::string prefix = unique_prefix("sg");
  const std::string subject = prefix + ".scatter";
  const std::string inbox = prefix + ".inbox.";

  gather g;  // declared first: it outlives the requester's handler
  connections conns;
  if (auto st = add_responders(conns, o, fanout, subject, reply_bytes); !st)
    return context(what, st.err());

  auto requester = conns.add(o, "requester");
  if (!requester) return context(what, requester.err());
  auto sub = (*requester)->subscribe(inbox + "*", "", [&](nats_message m) {
    const uint64_t sample =
        std::strtoull(m.subject.c_str() + inbox.size(), nullptr, 10);
    std::lock_guard<std::mutex> l(g.mu);
    if (sample != g.sample || g.replies == fanout) {
      ++g.stray;
      return;
    }
    if (++g.replies == fanout) g.cv.notify_one();
  });
  if (!sub) return context(what, sub.err());
  if (auto f = (*requester)->flush(sample_timeout); !f)
    return context(what, f.err());

  const std::vector<uint8_t> request(request_bytes, 0xa5);
  std::vector<double> us;
  us.reserve(samples);
  pacer pace{interval};
  for (uint64_t i = 0; i < warmup_rounds + samples; ++i) {
    pace.wait();
    {
      std::lock_guard<std::mutex> l(g.mu);
      g.sample = i;
      g.replies = 0;
    }
    const auto t0 = steady::now();
    if (auto p =
            (*requester)->publish(subject, request, inbox + std::to_string(i));
        !p)
      return context(what + ", round " + std::to_string(i), p.err());
    std::unique_lock<std::mutex> l(g.mu);
    const bool all = g.cv.wait_until(l, t0 + sample_timeout,
                                     [&] { return g.replies == fanout; });
    const auto t1 = steady::now();
    // A reply too many says more than a slow round: report it first.
    if (g.stray > 0)
      return make_error(ec::io_error,
                        what + ", round " + std::to_string(i) + ": " +
                            std::to_string(g.stray) +
                            " replies beyond the fan-out (subjects shared "
                            "with another run?)");
    if (!all)
      return make_error(ec::io_error, what + ", round " + std::to_string(i) +
                                          ": " + std::to_string(g.replies) +
                                          " of " + std::to_string(fanout) +
                                          " replies within 1 s");
    if (i >= warmup_rounds) us.push_back(micros(t1 - t0));
  }
  return result_of(us);
}

namespace {

// The books of the rounds in flight, shared with the requester's handler
// (a libnats thread).
struct rounds_books {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<steady::time_point> started;
  std::vector<uint32_t> replies;  // per round
  std::vector<double> us;         // completed rounds
  size_t open = 0;                // rounds still missing replies
  uint64_t stray = 0;
  std::string publish_error;  // the first failed publish
};

}  // namespace

struct scatter_gather_rounds::impl {
  std::string what;
  std::string subject, inbox;
  std::vector<uint8_t> request;
  std::shared_ptr<rounds_books> books;
  nats_bus* requester = nullptr;
  connections conns;  // declared last: drained before the books go
};

scatter_gather_rounds::scatter_gather_rounds(std::unique_ptr<impl> p)
    : impl_(std::move(p)) {}

scatter_gather_rounds::~scatter_gather_rounds() = default;

expected<std::unique_ptr<scatter_gather_rounds>> scatter_gather_rounds::open(
    const nats_options& o, size_t fanout, size_t request_bytes,
    size_t reply_bytes) {
  auto p = std::make_unique<impl>();
  p->what = "scatter-gather rounds on " + o.url;
  if (fanout == 0)
    return make_error(ec::invalid_argument, p->what + ": fan-out 0");
  const std::string prefix = unique_prefix("sgr");
  p->subject = prefix + ".scatter";
  p->inbox = prefix + ".inbox.";
  p->request.assign(request_bytes, 0xa5);
  p->books = std::make_shared<rounds_books>();
  if (auto st = add_responders(p->conns, o, fanout, p->subject, reply_bytes);
      !st)
    return context(p->what, st.err());
  auto requester = p->conns.add(o, "requester");
  if (!requester) return context(p->what, requester.err());
  p->requester = *requester;
  const size_t skip = p->inbox.size();
  auto sub = p->requester->subscribe(
      p->inbox + "*", "", [books = p->books, fanout, skip](nats_message m) {
        const auto now = steady::now();
        const uint64_t i = std::strtoull(m.subject.c_str() + skip, nullptr, 10);
        std::lock_guard<std::mutex> l(books->mu);
        if (i >= books->replies.size() || books->replies[i] == fanout) {
          ++books->stray;
          return;
        }
        if (++books->replies[i] < fanout) return;
        books->us.push_back(micros(now - books->started[i]));
        if (--books->open == 0) books->cv.notify_all();
      });
  if (!sub) return context(p->what, sub.err());
  if (auto f = p->requester->flush(sample_timeout); !f)
    return context(p->what, f.err());
  return std::unique_ptr<scatter_gather_rounds>(
      new scatter_gather_rounds(std::move(p)));
}

void scatter_gather_rounds::start() {
  impl& p = *impl_;
  size_t i = 0;
  {
    std::lock_guard<std::mutex> l(p.books->mu);
    i = p.books->started.size();
    p.books->started.push_back(steady::now());
    p.books->replies.push_back(0);
    ++p.books->open;
  }
  if (auto st = p.requester->publish(p.subject, p.request,
                                     p.inbox + std::to_string(i));
      !st) {
    std::lock_guard<std::mutex> l(p.books->mu);
    if (p.books->publish_error.empty())
      p.books->publish_error =
          "round " + std::to_string(i) + ": " + st.err().message;
  }
}

expected<baseline_result> scatter_gather_rounds::finish(
    std::chrono::milliseconds grace) {
  impl& p = *impl_;
  rounds_books& b = *p.books;
  std::unique_lock<std::mutex> l(b.mu);
  b.cv.wait_for(l, grace, [&] { return b.open == 0; });
  if (!b.publish_error.empty())
    return make_error(ec::io_error, p.what + ", " + b.publish_error);
  if (b.stray > 0)
    return make_error(ec::io_error,
                      p.what + ": " + std::to_string(b.stray) +
                          " replies beyond the fan-out (subjects shared "
                          "with another run?)");
  if (b.open > 0)
    return make_error(ec::io_error,
                      p.what + ": " + std::to_string(b.open) + " of " +
                          std::to_string(b.started.size()) +
                          " rounds missed replies (" +
                          std::to_string(grace.count()) + " ms of grace)");
  if (b.us.empty())
    return make_error(ec::invalid_argument, p.what + ": no rounds");
  return result_of(b.us);
}

}  // namespace kvmesh
