// The open-loop load generator: fixed-rate sending and its records.
#include "harness/open_loop.hpp"

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <random>
#include <thread>

#include "cluster/jetstream.hpp"
#include "core/block_hash.hpp"
#include "core/log.hpp"
#include "messages/codec.hpp"

namespace kvmesh::harness {

namespace {

using steady = std::chrono::steady_clock;

}  // namespace

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void recorder::answer(uint64_t id, const std::vector<uint8_t>& payload) {
  auto d = decode<decision>(payload);
  const int64_t t = wall_ms();
  std::lock_guard<std::mutex> g(mu);
  auto it = by_id.find(id);
  if (it == by_id.end()) return;  // not ours
  outcome& o = it->second;
  if (o.answered_ms == 0) o.answered_ms = t;
  if (d && o.from_record && d->error.empty() && o.winners.count(d->worker))
    return;  // the live copy of the answer already read from the record
  if (!d) {
    if (o.error.empty()) o.error = "undecodable answer";
    return;
  }
  if (!d->error.empty()) {
    if (o.error.empty()) o.error = d->error;
    return;
  }
  if (o.decisions++ == 0) o.worker = d->worker;
  o.winners.insert(d->worker);
}

void recorder::kept(uint64_t id, const std::vector<uint8_t>& payload) {
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = by_id.find(id);
    if (it == by_id.end() || it->second.answered_ms != 0) return;
    it->second.from_record = true;
  }
  answer(id, payload);
}

std::vector<std::pair<uint64_t, uint64_t>> recorder::to_look_up(
    bool all, int64_t timeout_ms) {
  const int64_t t = wall_ms();
  std::vector<std::pair<uint64_t, uint64_t>> out;
  std::lock_guard<std::mutex> g(mu);
  for (auto& [id, o] : by_id) {
    if (o.answered_ms != 0 || o.sequence == 0) continue;
    if (!all && (t - o.sent_ms <= timeout_ms || t - o.looked_ms < 1000))
      continue;
    o.looked_ms = t;
    out.emplace_back(id, o.sequence);
  }
  return out;
}

void recorder::events(const std::vector<uint8_t>& payload) {
  auto ev = decode<request_events>(payload);
  if (!ev) return;
  std::lock_guard<std::mutex> g(mu);
  for (const auto& e : ev->events) {
    if (e.done) continue;
    auto it = by_id.find(e.request);
    if (it != by_id.end()) ++it->second.started;
  }
}

expected<route_request_msg> open_loop_request(uint64_t id, uint32_t group,
                                              const open_loop_options& o) {
  std::vector<uint32_t> tokens(size_t{o.blocks} * o.block_tokens);
  const size_t shared = size_t{o.blocks - 1} * o.block_tokens;
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = i < shared ? group * 100003u + static_cast<uint32_t>(i)
                           : static_cast<uint32_t>(id + i);
  auto hashes = hash_blocks(tokens, o.block_tokens, "");
  if (!hashes) return hashes.err();
  route_request_msg r;
  r.id = id;
  for (const auto& h : *hashes)
    r.blocks.push_back(h.seq);
  r.input_tokens = static_cast<uint32_t>(tokens.size());
  r.output_tokens = o.output_tokens;
  r.block_tokens = o.block_tokens;
  return r;
}

open_loop_counts count_outcomes(std::map<uint64_t, outcome>& by_id,
                                uint32_t timeout_ms, int64_t now_ms) {
  open_loop_counts c;
  for (auto& [id, o] : by_id) {
    ++c.sent;
    if (o.publish_failed) {
      ++c.publish_errors;
      continue;
    }
    const int64_t waited = (o.answered_ms ? o.answered_ms : now_ms) - o.sent_ms;
    o.timed_out = waited > timeout_ms;
    if (o.timed_out) ++c.timeouts;
    if (o.decisions > 0) {
      ++c.decided;
      if (o.timed_out) ++c.late;
    } else if (!o.error.empty()) {
      ++c.errors;
    } else {
      ++c.lost;
    }
    if (o.winners.size() > 1) ++c.duplicates;
    if (o.decisions > o.winners.size()) c.repeats += o.decisions - 1;
    if (o.started > 1) ++c.double_runs;
    if (o.from_record) ++c.recovered;
  }
  return c;
}

// Durable publishes sent and not yet answered by the server.
struct open_loop::publish_window {
  std::mutex mu;
  std::condition_variable cv;
  uint32_t open = 0;
};

open_loop::open_loop(nats_bus& bus, const subjects& subj,
                     const open_loop_options& o)
    : bus_(bus),
      subj_(subj),
      o_(o),
      rec_(std::make_shared<recorder>()),
      window_(std::make_shared<publish_window>()) {}

open_loop::~open_loop() = default;

expected<std::unique_ptr<open_loop>> open_loop::open(
    nats_bus& bus, const subjects& subj, const open_loop_options& o) {
  std::unique_ptr<open_loop> l(new open_loop(bus, subj, o));
  if (o.durable) {
    auto qo = durable_queue(subj);
    qo.consume = false;
    auto q = work_queue::open(bus, qo);
    if (!q) return q.err();
    l->queue_ = std::move(*q);
    // Where the routers keep each durable answer before sending it: the
    // answers that come while this client is reconnecting are read there.
    auto ro = durable_records(subj);
    ro.create = false;
    auto r = record_store::open(bus, ro);
    if (r)
      l->records_ = std::move(*r);
    else if (r.err().code == ec::not_found)  // no durable router ran yet
      log::warn("answers missed while reconnecting will not be recovered: " +
                r.err().message);
    else  // this credential cannot read it
      return r.err();
  }
  std::random_device rd;
  const uint64_t token = (uint64_t{rd()} << 32) ^ rd();
  // Not under _INBOX.kvmesh., the mesh's own inboxes: a client's
  // credential may not read them, and routers answer no durable request
  // there (deploy/nats/auth.conf).
  l->inbox_ = "_INBOX.load." + std::to_string(token);
  // One subscription for every answer: the id rides as the last token.
  auto rec = l->rec_;
  auto answers = bus.subscribe(l->inbox_ + ".*", "", [rec](nats_message m) {
    const auto dot = m.subject.rfind('.');
    uint64_t id = 0;
    try {
      id = std::stoull(m.subject.substr(dot + 1));
    } catch (const std::exception&) {
      return;
    }
    rec->answer(id, m.payload);
  });
  if (!answers) return answers.err();
  l->answers_ = *answers;
  // A refused subscription would show only as every request timing out.
  if (auto st = bus.confirm(l->inbox_ + ".*", std::chrono::seconds(5)); !st)
    return make_error(st.err().code, "the answers' inbox " + l->inbox_ +
                                         ".*: " + st.err().message);
  auto events = bus.subscribe(
      subj.events(), "", [rec](nats_message m) { rec->events(m.payload); });
  if (!events) return events.err();
  l->events_ = *events;
  // A client's credential may not read the engines' events (auth.conf's
  // `client`): the decisions still count, requests run twice do not.
  if (auto st = bus.confirm(subj.events(), std::chrono::seconds(5)); !st)
    log::warn("requests run twice are not counted (they read 0): " +
              subj.events() + ": " + st.err().message);
  // Ids unique across runs and clients: 31 random bits, then a count.
  l->id_base_ = ((uint64_t{rd()} & 0x7fffffffull) << 32);
  return l;
}

void open_loop::look_up(bool all) {
  for (const auto& [id, seq] : rec_->to_look_up(all, o_.timeout_ms))
    if (auto v = records_->get(record_key(seq, id))) rec_->kept(id, *v);
}

void open_loop::send(const route_request_msg& r) {
  const uint64_t id = r.id;
  {
    std::lock_guard<std::mutex> g(rec_->mu);
    rec_->by_id[id].sent_ms = wall_ms();
  }
  const std::string reply = inbox_ + "." + std::to_string(id);
  std::string failed;
  if (queue_ && o_.publish_window > 1) {
    // The server's ack comes later; a full window waits for one.
    auto window = window_;
    std::unique_lock<std::mutex> l(window->mu);
    window->cv.wait(l, [&] { return window->open < o_.publish_window; });
    ++window->open;
    l.unlock();
    auto rec = rec_;
    queue_->publish_async(subj_.route_durable() + "." + reply, encode(r),
                          [rec, window, id](expected<uint64_t> seq) {
                            {
                              std::lock_guard<std::mutex> g(rec->mu);
                              auto& o = rec->by_id[id];
                              if (seq) {
                                o.sequence = *seq;
                              } else {
                                o.publish_failed = true;
                                o.error = seq.err().message;
                              }
                            }
                            std::lock_guard<std::mutex> g(window->mu);
                            --window->open;
                            window->cv.notify_all();
                          });
  } else if (queue_) {
    auto seq = queue_->publish(subj_.route_durable() + "." + reply, encode(r));
    if (seq) {
      std::lock_guard<std::mutex> g(rec_->mu);
      rec_->by_id[id].sequence = *seq;
    } else {
      failed = seq.err().message;
    }
  } else if (auto st = bus_.publish(subj_.route(), encode(r), reply); !st) {
    failed = st.err().message;
  }
  if (!failed.empty()) {
    std::lock_guard<std::mutex> g(rec_->mu);
    rec_->by_id[id].publish_failed = true;
    rec_->by_id[id].error = failed;
  }
}

status open_loop::run(const std::atomic<bool>& stop) {
  // Looks up missed answers beside the sending loop, so that the rate holds.
  std::atomic<bool> done{false};
  std::thread looker;
  if (records_)
    looker = std::thread([&] {
      uint64_t reconnects = bus_.reconnects();
      while (!done) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const uint64_t now_reconnects = bus_.reconnects();
        const bool all = now_reconnects != reconnects;
        reconnects = now_reconnects;
        for (const auto& [id, seq] : rec_->to_look_up(all, o_.timeout_ms)) {
          if (done) break;
          if (auto v = records_->get(record_key(seq, id))) rec_->kept(id, *v);
        }
      }
    });
  auto join_looker = [&] {
    done = true;
    if (looker.joinable()) looker.join();
  };
  const auto interval = std::chrono::duration_cast<steady::duration>(
      std::chrono::duration<double>(1.0 / o_.rate));
  const auto start = steady::now();
  const auto end = start + std::chrono::duration_cast<steady::duration>(
                               std::chrono::duration<double>(o_.duration_s));
  auto next = start;
  uint64_t n = 0;
  while (!stop && steady::now() < end) {
    if (!o_.stop_file.empty() && std::ifstream(o_.stop_file).good()) break;
    std::this_thread::sleep_until(next);
    next += interval;
    // A stalled publish (a server restarting) does not turn into a burst.
    if (steady::now() > next + std::chrono::seconds(1)) next = steady::now();
    const uint64_t id = id_base_ + n;
    const auto group = static_cast<uint32_t>(n % o_.prefixes);
    ++n;
    auto r = open_loop_request(id, group, o_);
    if (!r) {
      join_looker();
      return r.err();
    }
    send(*r);
  }
  // Every publish answered (or failed, within JetStream's 5 s) before the
  // counts: one still open would count as lost.
  {
    std::unique_lock<std::mutex> l(window_->mu);
    window_->cv.wait_for(l, std::chrono::seconds(10),
                         [&] { return window_->open == 0; });
  }
  // Late answers and engine events; timeouts are marked as the client would
  // have seen them, while waiting.
  const auto drain_end =
      steady::now() + std::chrono::duration_cast<steady::duration>(
                          std::chrono::duration<double>(o_.drain_s));
  while (!stop && steady::now() < drain_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  join_looker();
  // A last look for every answer still missing.
  if (records_) look_up(true);
  (void)bus_.unsubscribe(answers_);
  (void)bus_.unsubscribe(events_);
  return ok;
}

std::pair<open_loop_counts, std::map<uint64_t, outcome>> open_loop::tally(
    int64_t now_ms) {
  std::lock_guard<std::mutex> g(rec_->mu);
  const open_loop_counts c = count_outcomes(rec_->by_id, o_.timeout_ms, now_ms);
  return {c, rec_->by_id};
}

}  // namespace kvmesh::harness
