// The closed-loop load generator: synthetic requests and their books.
#include "harness/closed_loop.hpp"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "core/pricing.hpp"
#include "messages/codec.hpp"

namespace kvmesh::harness {

namespace {

// The generator's books, shared with the reply handler (a libnats thread).
struct load_books {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<steady::time_point> sent_at;
  std::vector<uint8_t> state;  // 0 unsent, 1 in flight, 2 answered
  size_t in_flight = 0;
  uint64_t resolved = 0;
  closed_loop_result res;
  std::vector<steady::time_point> decided_at;   // in order of arrival
  std::vector<steady::time_point> resolved_at;  // decided, failed or lost
  std::vector<double> rtt_us;
};

// The reply to request `i` (the last token of its subject), as the books
// count it.
void book_reply(load_books& books, size_t i, size_t n,
                const std::vector<uint8_t>& payload) {
  const auto now = steady::now();
  auto d = decode<decision>(payload);
  std::lock_guard<std::mutex> g(books.mu);
  if (i >= n || books.state[i] != 1) {
    ++books.res.late;
    return;
  }
  books.state[i] = 2;
  --books.in_flight;
  ++books.resolved;
  books.resolved_at.push_back(now);
  if (!d || !d->error.empty()) {
    ++books.res.errors;
    ++books.res.error_kinds[error_kind(d ? d->error : d.err().message)];
  } else {
    ++books.res.decided;
    books.decided_at.push_back(now);
    books.rtt_us.push_back(
        std::chrono::duration<double, std::micro>(now - books.sent_at[i])
            .count());
  }
  books.cv.notify_all();
}

// The result from the books once every request is resolved.
closed_loop_result close_books(load_books& books, uint64_t sent,
                               steady::time_point start,
                               steady::time_point end) {
  std::lock_guard<std::mutex> g(books.mu);
  closed_loop_result res = books.res;
  res.sent = sent;
  res.start = start;
  res.end = end;
  const size_t k = books.decided_at.size();
  if (end > start)
    res.decisions_per_s = static_cast<double>(k) / seconds(end - start);
  // The first 10 % of requests ramp up (connections, caches, the index
  // filling): the steady part runs from the tenth of them resolved to the
  // last, and counts the decisions in it (failures take time, not credit).
  const auto& resolved = books.resolved_at;
  if (resolved.size() > 1) {
    const auto from = resolved[resolved.size() / 10];
    const double span = seconds(resolved.back() - from);
    const auto in =
        std::count_if(books.decided_at.begin(), books.decided_at.end(),
                      [from](steady::time_point t) { return t > from; });
    if (span > 0) res.steady_decisions_per_s = static_cast<double>(in) / span;
  }
  res.rtt_us = summarize(books.rtt_us);
  return res;
}

}  // namespace

std::vector<route_request_msg> synthetic_requests(uint64_t n,
                                                  uint32_t block_tokens,
                                                  uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> length(8, 64);
  std::uniform_int_distribution<uint32_t> family(0, synthetic_families - 1);
  std::uniform_int_distribution<uint32_t> family_length(4, 32);
  std::vector<uint32_t> family_blocks(synthetic_families);
  for (auto& f : family_blocks)
    f = family_length(rng);
  const uint64_t base = (rng() & 0x7fffffffull) << 32;
  auto hash = [](uint64_t a, uint64_t b) {
    uint64_t s = a * 0x9e3779b97f4a7c15ull ^ b;
    return next_random(s);
  };
  std::vector<route_request_msg> out(n);
  for (uint64_t i = 0; i < n; ++i) {
    route_request_msg& r = out[i];
    r.id = base + i;
    const uint32_t len = length(rng);
    uint32_t shared = 0;
    uint64_t f = 0;
    if (rng() & 1) {
      f = family(rng);
      shared = std::min(len, family_blocks[f]);
    }
    r.blocks.reserve(len);
    for (uint32_t j = 0; j < len; ++j)
      r.blocks.push_back(j < shared ? hash(f + 1, j) : hash(r.id, j) | 1ull);
    r.input_tokens = len * block_tokens;
    r.output_tokens = synthetic_output_tokens;
  }
  return out;
}

expected<closed_loop_result> generate_load(
    nats_bus& bus, const subjects& subj, const closed_loop_options& o,
    const std::vector<route_request_msg>& requests, child_mesh& m) {
  const size_t n = requests.size();
  auto books = std::make_shared<load_books>();
  books->sent_at.resize(n);
  books->state.assign(n, 0);
  books->decided_at.reserve(n);
  books->resolved_at.reserve(n);
  books->rtt_us.reserve(n);
  books->res.requests = n;
  std::random_device rd;
  const std::string inbox = "_INBOX.kvmesh-bench." + std::to_string(getpid()) +
                            "-" + std::to_string(rd());
  const size_t skip = inbox.size() + 1;
  auto sub =
      bus.subscribe(inbox + ".>", "", [books, skip, n](nats_message msg) {
        const size_t i =
            msg.subject.size() > skip
                ? std::strtoull(msg.subject.c_str() + skip, nullptr, 10)
                : n;
        book_reply(*books, i, n, msg.payload);
      });
  if (!sub) return sub.err();
  if (auto f = bus.flush(std::chrono::seconds(2)); !f) {
    (void)bus.unsubscribe(*sub);
    return f.err();
  }
  std::deque<size_t> order;  // in flight, oldest first, for timeouts
  size_t next = 0;
  const auto start = steady::now();
  const auto deadline = start + std::chrono::duration_cast<steady::duration>(
                                    std::chrono::duration<double>(o.timeout_s));
  auto last_watch = start;
  std::string why;
  while (true) {
    const auto now = steady::now();
    if (now - last_watch > std::chrono::milliseconds(50)) {
      last_watch = now;
      why = watch(m, 0);
      if (why.empty() && now > deadline)
        why = "the load did not finish within " + arg(o.timeout_s) +
              " s (--timeout)";
      if (!why.empty()) break;
    }
    std::unique_lock<std::mutex> lock(books->mu);
    while (!order.empty() && books->state[order.front()] != 1)
      order.pop_front();
    while (!order.empty() &&
           now - books->sent_at[order.front()] > request_timeout) {
      books->state[order.front()] = 2;
      --books->in_flight;
      ++books->resolved;
      books->resolved_at.push_back(now);
      ++books->res.timed_out;
      order.pop_front();
    }
    if (books->resolved == n) break;
    const bool paced =
        o.rate > 0 &&
        now < start + std::chrono::duration_cast<steady::duration>(
                          std::chrono::duration<double>(next / o.rate));
    if (next < n && books->in_flight < o.outstanding && !paced) {
      books->state[next] = 1;
      books->sent_at[next] = now;
      ++books->in_flight;
      order.push_back(next);
      lock.unlock();
      if (auto st = bus.publish(subj.route(), encode(requests[next]),
                                inbox + "." + std::to_string(next));
          !st) {
        why = "publishing request " + std::to_string(next) + ": " +
              st.err().message;
        break;
      }
      ++next;
      continue;
    }
    books->cv.wait_for(lock, std::chrono::milliseconds(paced ? 1 : 20));
  }
  const auto end = steady::now();
  (void)bus.unsubscribe(*sub);
  if (!why.empty()) return make_error(ec::io_error, why);
  return close_books(*books, next, start, end);
}

}  // namespace kvmesh::harness
