// `kvmesh load`: an open-loop load generator for a running mesh (fixed rate,
// unique request ids) that records what became of every request, so that
// scripts/chaos can count lost and duplicated decisions across faults.
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.hpp"
#include "cluster/jetstream.hpp"
#include "cluster/mesh.hpp"
#include "cluster/nats.hpp"
#include "core/block_hash.hpp"
#include "core/log.hpp"
#include "messages/codec.hpp"

namespace kvmesh::cli {

namespace {

using wall = std::chrono::system_clock;
using steady = std::chrono::steady_clock;

struct load_flags {
  std::string nats;
  std::string prefix = "kvmesh";
  double rate = 50;        // requests per second
  double duration_s = 10;  // of sending
  double drain_s = 8;      // waiting for late answers and engine events
  uint32_t timeout_ms = 2000;
  bool durable = false;
  // Durable publishes on their way at once (1: each waits for the
  // server's ack, one round trip a request).
  uint32_t publish_window = 1;
  uint32_t block_tokens = 16;
  uint32_t blocks = 4;    // per prompt
  uint32_t prefixes = 8;  // distinct shared prefixes (all blocks but the last)
  uint32_t output_tokens = 4;
  std::string out;        // JSONL, one line per request
  std::string stop_file;  // sending stops early once this file exists
  bool json = false;
};

// What became of one request, as this client saw it.
struct outcome {
  int64_t sent_ms = 0;  // wall clock, for lining up with a fault's time
  bool publish_failed = false;
  std::string error;           // the router's answer without a decision
  int64_t answered_ms = 0;     // first answer (decision or error); 0: none
  bool timed_out = false;      // no answer within --timeout-ms
  uint32_t decisions = 0;      // answers with a decision, repeats included
  std::set<uint32_t> winners;  // distinct workers named by them
  uint32_t worker = 0;         // the first decision's worker
  uint32_t started = 0;        // first tokens reported by engines: runs
  // Durable: the request's place in the queue, which names its decision
  // record; and whether the first answer was read there (the live one was
  // missed) and when it was last looked for.
  uint64_t sequence = 0;
  bool from_record = false;
  int64_t looked_ms = 0;
};

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             wall::now().time_since_epoch())
      .count();
}

struct recorder {
  std::mutex mu;
  std::map<uint64_t, outcome> by_id;

  void answer(uint64_t id, const std::vector<uint8_t>& payload) {
    auto d = decode<decision>(payload);
    const int64_t t = now_ms();
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

  // An answer read from the decision record: taken only while no live one
  // has come (then it is the same answer, late).
  void kept(uint64_t id, const std::vector<uint8_t>& payload) {
    {
      std::lock_guard<std::mutex> g(mu);
      auto it = by_id.find(id);
      if (it == by_id.end() || it->second.answered_ms != 0) return;
      it->second.from_record = true;
    }
    answer(id, payload);
  }

  // The unanswered durable requests to look up in the record bucket: all
  // of them after a reconnect (their answers may have come while this
  // client was away), else those past the timeout, each once a second.
  std::vector<std::pair<uint64_t, uint64_t>> to_look_up(bool all,
                                                        int64_t timeout_ms) {
    const int64_t t = now_ms();
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

  void events(const std::vector<uint8_t>& payload) {
    auto ev = decode<request_events>(payload);
    if (!ev) return;
    std::lock_guard<std::mutex> g(mu);
    for (const auto& e : ev->events) {
      if (e.done) continue;
      auto it = by_id.find(e.request);
      if (it != by_id.end()) ++it->second.started;
    }
  }
};

std::atomic<bool> interrupted{false};

int run_load(const load_flags& f) {
  const char* cmd = "load";
  if (auto st = check_prefix(f.prefix); !st) {
    log::error(st.err().message);
    return 2;
  }
  if (f.blocks == 0 || f.block_tokens == 0 || f.prefixes == 0 ||
      !(f.rate > 0) || !(f.duration_s > 0)) {
    log::error(
        "--rate, --duration-s, --blocks, --block-tokens and --prefixes must "
        "be positive");
    return 2;
  }
  (void)cmd;
  nats_options no;
  no.url = f.nats;
  no.name = "kvmesh-load";
  auto bus = nats_bus::connect(no);
  if (!bus) {
    log::error(bus.err().message);
    return 1;
  }
  subjects subj;
  subj.prefix = f.prefix;
  std::unique_ptr<work_queue> queue;
  if (f.durable) {
    auto qo = durable_queue(subj);
    qo.consume = false;
    auto q = work_queue::open(**bus, qo);
    if (!q) {
      log::error(q.err().message);
      return 1;
    }
    queue = std::move(*q);
  }
  // Where the routers keep each durable answer before sending it: the
  // answers that come while this client is reconnecting are read there.
  std::unique_ptr<record_store> records;
  if (f.durable) {
    auto ro = durable_records(subj);
    ro.create = false;
    auto r = record_store::open(**bus, ro);
    if (r)
      records = std::move(*r);
    else
      log::warn("answers missed while reconnecting will not be recovered: " +
                r.err().message);
  }
  auto rec = std::make_shared<recorder>();
  // Durable publishes sent and not yet answered by the server.
  struct publish_window {
    std::mutex mu;
    std::condition_variable cv;
    uint32_t open = 0;
  };
  auto window = std::make_shared<publish_window>();
  std::random_device rd;
  const uint64_t token = (uint64_t{rd()} << 32) ^ rd();
  const std::string inbox = "_INBOX.kvmesh.load." + std::to_string(token);
  // One subscription for every answer: the id rides as the last token.
  auto answers = (*bus)->subscribe(inbox + ".*", "", [rec](nats_message m) {
    const auto dot = m.subject.rfind('.');
    uint64_t id = 0;
    try {
      id = std::stoull(m.subject.substr(dot + 1));
    } catch (const std::exception&) {
      return;
    }
    rec->answer(id, m.payload);
  });
  if (!answers) {
    log::error(answers.err().message);
    return 1;
  }
  auto events = (*bus)->subscribe(
      subj.events(), "", [rec](nats_message m) { rec->events(m.payload); });
  if (!events) {
    log::error(events.err().message);
    return 1;
  }
  // Ids unique across runs and clients: 31 random bits, then a count.
  const uint64_t id_base = ((uint64_t{rd()} & 0x7fffffffull) << 32);
  std::signal(SIGINT, [](int) { interrupted = true; });
  std::signal(SIGTERM, [](int) { interrupted = true; });

  // Looks up missed answers beside the sending loop, so that the rate holds.
  std::atomic<bool> done{false};
  std::thread looker;
  if (records)
    looker = std::thread([&] {
      uint64_t reconnects = (*bus)->reconnects();
      while (!done) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const uint64_t now_reconnects = (*bus)->reconnects();
        const bool all = now_reconnects != reconnects;
        reconnects = now_reconnects;
        for (const auto& [id, seq] : rec->to_look_up(all, f.timeout_ms)) {
          if (done) break;
          if (auto v = records->get(record_key(seq, id))) rec->kept(id, *v);
        }
      }
    });
  const auto interval = std::chrono::duration_cast<steady::duration>(
      std::chrono::duration<double>(1.0 / f.rate));
  const auto start = steady::now();
  const auto end = start + std::chrono::duration_cast<steady::duration>(
                               std::chrono::duration<double>(f.duration_s));
  auto next = start;
  uint64_t n = 0;
  std::vector<uint32_t> tokens(size_t{f.blocks} * f.block_tokens);
  while (!interrupted && steady::now() < end) {
    if (!f.stop_file.empty() && std::ifstream(f.stop_file).good()) break;
    std::this_thread::sleep_until(next);
    next += interval;
    // A stalled publish (a server restarting) does not turn into a burst.
    if (steady::now() > next + std::chrono::seconds(1)) next = steady::now();
    const uint64_t id = id_base + n;
    const uint32_t group = static_cast<uint32_t>(n % f.prefixes);
    ++n;
    // All blocks but the last shared by the group, the last one unique.
    const size_t shared = size_t{f.blocks - 1} * f.block_tokens;
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = i < shared ? group * 100003u + static_cast<uint32_t>(i)
                             : static_cast<uint32_t>(id + i);
    auto hashes = hash_blocks(tokens, f.block_tokens, "");
    if (!hashes) {
      log::error(hashes.err().message);
      done = true;
      if (looker.joinable()) looker.join();
      return 1;
    }
    route_request_msg r;
    r.id = id;
    for (const auto& h : *hashes)
      r.blocks.push_back(h.seq);
    r.input_tokens = static_cast<uint32_t>(tokens.size());
    r.output_tokens = f.output_tokens;
    r.block_tokens = f.block_tokens;
    {
      std::lock_guard<std::mutex> g(rec->mu);
      rec->by_id[id].sent_ms = now_ms();
    }
    const std::string reply = inbox + "." + std::to_string(id);
    std::string failed;
    if (queue && f.publish_window > 1) {
      // The server's ack comes later; a full window waits for one.
      std::unique_lock<std::mutex> l(window->mu);
      window->cv.wait(l, [&] { return window->open < f.publish_window; });
      ++window->open;
      l.unlock();
      queue->publish_async(subj.route_durable() + "." + reply, encode(r),
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
    } else if (queue) {
      auto seq = queue->publish(subj.route_durable() + "." + reply, encode(r));
      if (seq) {
        std::lock_guard<std::mutex> g(rec->mu);
        rec->by_id[id].sequence = *seq;
      } else {
        failed = seq.err().message;
      }
    } else if (auto st = (*bus)->publish(subj.route(), encode(r), reply); !st) {
      failed = st.err().message;
    }
    if (!failed.empty()) {
      std::lock_guard<std::mutex> g(rec->mu);
      rec->by_id[id].publish_failed = true;
      rec->by_id[id].error = failed;
    }
  }
  // Every publish answered (or failed, within JetStream's 5 s) before the
  // counts: one still open would count as lost.
  {
    std::unique_lock<std::mutex> l(window->mu);
    window->cv.wait_for(l, std::chrono::seconds(10),
                        [&] { return window->open == 0; });
  }
  // Late answers and engine events; timeouts are marked as the client would
  // have seen them, while waiting.
  const auto drain_end =
      steady::now() + std::chrono::duration_cast<steady::duration>(
                          std::chrono::duration<double>(f.drain_s));
  while (!interrupted && steady::now() < drain_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  done = true;
  if (looker.joinable()) looker.join();
  // A last look for every answer still missing.
  if (records)
    for (const auto& [id, seq] : rec->to_look_up(true, f.timeout_ms))
      if (auto v = records->get(record_key(seq, id))) rec->kept(id, *v);
  (void)(*bus)->unsubscribe(*answers);
  (void)(*bus)->unsubscribe(*events);

  nlohmann::json sum;
  uint64_t sent = 0, publish_errors = 0, decided = 0, errors = 0, timeouts = 0,
           late = 0, lost = 0, duplicates = 0, repeats = 0, double_runs = 0,
           recovered = 0;
  std::ofstream lines;
  if (!f.out.empty()) lines.open(f.out);
  {
    std::lock_guard<std::mutex> g(rec->mu);
    for (auto& [id, o] : rec->by_id) {
      ++sent;
      if (o.publish_failed) {
        ++publish_errors;
      } else {
        const int64_t waited =
            (o.answered_ms ? o.answered_ms : now_ms()) - o.sent_ms;
        o.timed_out = waited > f.timeout_ms;
        if (o.timed_out) ++timeouts;
        if (o.decisions > 0) {
          ++decided;
          if (o.timed_out) ++late;
        } else if (!o.error.empty()) {
          ++errors;
        } else {
          ++lost;
        }
        if (o.winners.size() > 1) ++duplicates;
        if (o.decisions > o.winners.size()) repeats += o.decisions - 1;
        if (o.started > 1) ++double_runs;
        if (o.from_record) ++recovered;
      }
      if (lines) {
        nlohmann::json l = {{"id", id},
                            {"sent_ms", o.sent_ms},
                            {"answered_ms", o.answered_ms},
                            {"decisions", o.decisions},
                            {"winners", o.winners.size()},
                            {"worker", o.worker},
                            {"started", o.started},
                            {"timed_out", o.timed_out},
                            {"publish_failed", o.publish_failed},
                            {"from_record", o.from_record},
                            {"error", o.error}};
        lines << l.dump() << "\n";
      }
    }
  }
  sum = {{"sent", sent},           {"publish_errors", publish_errors},
         {"decided", decided},     {"errors", errors},
         {"timeouts", timeouts},   {"late", late},
         {"lost", lost},           {"duplicates", duplicates},
         {"repeats", repeats},     {"double_runs", double_runs},
         {"recovered", recovered}, {"durable", f.durable},
         {"rate", f.rate}};
  if (f.json) {
    std::printf("%s\n", sum.dump().c_str());
  } else {
    std::printf("sent %" PRIu64 " (publish errors %" PRIu64
                "), decided %" PRIu64 " (late %" PRIu64 "), errors %" PRIu64
                ", timeouts %" PRIu64 ", lost %" PRIu64 ", duplicates %" PRIu64
                " (repeats %" PRIu64 "), run twice %" PRIu64
                ", read from the record %" PRIu64 "\n",
                sent, publish_errors, decided, late, errors, timeouts, lost,
                duplicates, repeats, double_runs, recovered);
  }
  return 0;
}

}  // namespace

void add_load(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<load_flags>();
  auto* cmd = app.add_subcommand(
      "load",
      "send route requests to a running mesh at a fixed rate (open loop, "
      "unique ids) and count what became of each: decided, refused, timed "
      "out, never answered, decided twice, run twice by the engines");
  cmd->add_option("--nats", f->nats,
                  "NATS server URL, or a comma-separated list of one "
                  "cluster's servers")
      ->required();
  cmd->add_option("--prefix", f->prefix, "subject prefix of the mesh")
      ->capture_default_str();
  cmd->add_option("--rate", f->rate, "requests per second")
      ->capture_default_str();
  cmd->add_option("--duration-s", f->duration_s, "send for this long")
      ->capture_default_str();
  cmd->add_option("--drain-s", f->drain_s,
                  "then wait this long for late answers and engine events")
      ->capture_default_str();
  cmd->add_option("--timeout-ms", f->timeout_ms,
                  "a request unanswered for this long counts as a timeout, "
                  "as a client would report it")
      ->capture_default_str();
  cmd->add_flag("--durable", f->durable,
                "send through the durable JetStream queue");
  cmd->add_option("--publish-window", f->publish_window,
                  "durable requests sent at once before the server's acks "
                  "(1: each waits for its ack, one round trip a request)")
      ->check(CLI::Range(1u, 65536u))
      ->capture_default_str();
  cmd->add_option("--block-tokens", f->block_tokens,
                  "tokens per block, as the mesh's workers have it")
      ->capture_default_str();
  cmd->add_option("--blocks", f->blocks, "blocks per prompt")
      ->capture_default_str();
  cmd->add_option("--prefixes", f->prefixes,
                  "distinct shared prefixes (every block but the last)")
      ->capture_default_str();
  cmd->add_option("--output-tokens", f->output_tokens,
                  "expected output length of each request")
      ->capture_default_str();
  cmd->add_option("--out", f->out,
                  "write one JSON line per request: its times and answers");
  cmd->add_option("--stop-file", f->stop_file,
                  "stop sending early once this file exists");
  cmd->add_flag("--json", f->json, "print the counts as JSON");
  cmd->footer(
      "lost: accepted by NATS, never answered. duplicates: decided for more "
      "than one worker. repeats: the same decision answered again. read from "
      "the record: durable answers missed (sent while this client was "
      "reconnecting) and read from the routers' decision records.");
  cmd->callback([f, &run] { run = [f] { return run_load(*f); }; });
}

}  // namespace kvmesh::cli
