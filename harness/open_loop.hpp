// The open-loop load generator of `kvmesh load`, and each request's fate.
// Route requests to a running mesh at a fixed rate with unique ids, plain
// or through the durable queue, and what became of each one as this client
// saw it, so that scripts/chaos can count lost and duplicated decisions
// across faults.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/block_hash.hpp"
#include "cluster/mesh.hpp"
#include "messages/types.hpp"

namespace kvmesh::harness {

struct open_loop_options {
  double rate = 50;        // requests per second
  double duration_s = 10;  // of sending
  double drain_s = 8;      // waiting for late answers and engine events
  uint32_t timeout_ms = 2000;
  bool durable = false;
  // Durable publishes on their way at once (1: each waits for the
  // server's ack, one round trip a request).
  uint32_t publish_window = 1;
  uint32_t block_tokens = default_block_tokens;
  uint32_t blocks = 4;    // per prompt
  uint32_t prefixes = 8;  // distinct shared prefixes (all blocks but the last)
  uint32_t output_tokens = 4;
  std::string stop_file;  // sending stops early once this file exists
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

// Milliseconds of the wall clock since the epoch.
int64_t wall_ms();

// Every request's outcome by id, fed by the answer and event handlers
// (libnats threads) and the record look-ups.
struct recorder {
  std::mutex mu;
  std::map<uint64_t, outcome> by_id;

  // A live answer (a decision or an error) to request `id`; ids not sent
  // here are ignored.
  void answer(uint64_t id, const std::vector<uint8_t>& payload);
  // An answer read from the decision record: taken only while no live one
  // has come (then it is the same answer, late).
  void kept(uint64_t id, const std::vector<uint8_t>& payload);
  // The unanswered durable requests to look up in the record bucket, as
  // (id, sequence): all of them after a reconnect (their answers may have
  // come while this client was away), else those past the timeout, each
  // once a second.
  std::vector<std::pair<uint64_t, uint64_t>> to_look_up(bool all,
                                                        int64_t timeout_ms);
  // RequestEvents of the engines: each first token of a request counts a
  // run of it.
  void events(const std::vector<uint8_t>& payload);
};

// The route request of id `id` in prefix group `group`: all blocks but the
// last shared by the group, the last one unique to the id.
expected<route_request_msg> open_loop_request(uint64_t id, uint32_t group,
                                              const open_loop_options& o);

// The counts over every request.
struct open_loop_counts {
  uint64_t sent = 0, publish_errors = 0, decided = 0, errors = 0, timeouts = 0,
           late = 0, lost = 0, duplicates = 0, repeats = 0, double_runs = 0,
           recovered = 0;
};

// Marks each request's timed_out as a client would have seen it by
// `now_ms` (answered after `timeout_ms`, or not yet) and counts them:
// lost is accepted and never answered, duplicates decided for more than one
// worker, repeats the same decision answered again.
open_loop_counts count_outcomes(std::map<uint64_t, outcome>& by_id,
                                uint32_t timeout_ms, int64_t now_ms);

// The client: its subscriptions, and with `durable` the queue it publishes
// to and the record bucket where missed answers are read.
class open_loop {
 public:
  // Subscribes to its answers (an inbox of its own) and the engines'
  // events; with `durable`, opens the queue (an error when it cannot) and
  // the records (a warning when it cannot: answers missed while
  // reconnecting are then not recovered). `bus` must outlive it.
  static expected<std::unique_ptr<open_loop>> open(nats_bus& bus,
                                                   const subjects& subj,
                                                   const open_loop_options& o);
  ~open_loop();

  // Sends for duration_s at rate (until `stop` or the stop file), waits
  // for the publishes still open, drains for drain_s (until `stop`), and
  // looks up every answer still missing once more. An error when a request
  // could not be built.
  status run(const std::atomic<bool>& stop);

  // count_outcomes by `now_ms`, and the outcomes as counted, both under
  // one lock: a publish's late ack may still come in.
  std::pair<open_loop_counts, std::map<uint64_t, outcome>> tally(
      int64_t now_ms);

 private:
  struct publish_window;
  open_loop(nats_bus& bus, const subjects& subj, const open_loop_options& o);
  void send(const route_request_msg& r);
  void look_up(bool all);

  nats_bus& bus_;
  subjects subj_;
  open_loop_options o_;
  std::unique_ptr<work_queue> queue_;
  std::unique_ptr<record_store> records_;
  std::shared_ptr<recorder> rec_;
  std::shared_ptr<publish_window> window_;
  std::string inbox_;
  uint64_t answers_ = 0, events_ = 0;  // subscriptions
  uint64_t id_base_ = 0;
};

}  // namespace kvmesh::harness
