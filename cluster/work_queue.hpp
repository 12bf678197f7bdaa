// The JetStream work queue of durable route requests: one stream every
// router drains through one shared pull consumer, with explicit acks.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/js_writer.hpp"
#include "cluster/nats.hpp"
#include "core/error.hpp"

struct __natsMsg;

namespace kvmesh {

struct work_queue_options {
  std::string stream = "KVMESH_ROUTE";
  std::string subject = "kvmesh.route.durable";
  // The durable pull consumer; every router binds to the same one, which is
  // what makes the server hand each message to exactly one of them.
  std::string consumer = "routers";
  // A delivery not acked within this is handed out again (to any router).
  int64_t ack_wait_ms = 2000;
  // Deliveries the server lets be in flight, unacked, across all routers.
  int max_ack_pending = 1024;
  int fetch_batch = 64;
  // How long one fetch waits for messages; also bounds how long stop() takes.
  int64_t fetch_wait_ms = 100;
  int64_t max_deliver = -1;  // -1: redeliver forever
  // Copies of the stream in a NATS cluster (1 to 5), when this call creates
  // it: 3 keeps durable intake up while one server of three is down.
  int replicas = 1;
  // false: publish only (a client). The consumer is neither created nor
  // changed, so a client cannot reset the routers' ack wait.
  bool consume = true;
};

// Shared by a work_queue and its deliveries, so that an ack from a late
// thread finds the subscription still alive (in work_queue.cpp).
struct work_queue_core;

// One message handed to a router. The first ack() or nak() settles it;
// repeating the same call is a no-op, the other one is an error. Dropping
// it unsettled frees it without an answer, so the server hands it out
// again after ack_wait: a router that dies mid-request loses nothing.
class delivery {
 public:
  ~delivery();
  delivery(const delivery&) = delete;
  delivery& operator=(const delivery&) = delete;

  // Done: the stream drops the message. Sent without waiting for the
  // server (a lost ack costs one redelivery after ack_wait). Callable from
  // any thread, also after the work_queue is gone (the nats_bus must still
  // be open).
  status ack();
  // Not done here: the server hands it out again after `delay` (0: right
  // away).
  status nak(std::chrono::milliseconds delay = {});
  // Still being worked on: the server starts this message's ack_wait
  // again, so that a decision that outlasts it (an auction waiting out a
  // dead awardee's heartbeats) is not handed to a second router meanwhile.
  // Nothing once acked or naked.
  status in_progress();
  bool settled();
  // The consumer's ack_wait as this router configured it.
  std::chrono::milliseconds ack_wait() const;

  // How often the server has handed this message out (1 = first time), and
  // its sequence in the stream (the same across redeliveries); 0 when the
  // metadata could not be read.
  uint64_t delivery_count() const { return delivery_count_; }
  uint64_t stream_sequence() const { return stream_sequence_; }

 private:
  friend class work_queue;
  enum class state { open, acked, naked };
  delivery(__natsMsg* msg, std::shared_ptr<work_queue_core> core);
  status settle(state verb, std::chrono::milliseconds delay = {});

  std::mutex mu_;  // guards msg_ and state_
  __natsMsg* msg_;
  state state_ = state::open;
  uint64_t delivery_count_ = 0;
  uint64_t stream_sequence_ = 0;
  std::shared_ptr<work_queue_core> core_;
};

// Runs on the work queue's fetch thread, one message at a time: it should
// hand over and return (a slow handler delays the rest of the batch, whose
// ack_wait is already running). `msg.reply` is left empty: the JetStream
// reply subject is the ack channel, and answering it would ack.
using work_handler =
    std::function<void(nats_message msg, std::shared_ptr<delivery> d)>;

class work_queue {
 public:
  // Makes sure the stream (work-queue retention, file storage) and the
  // durable pull consumer exist, reusing them when another router made them
  // first, and binds to the consumer. Errors name the stream or consumer and
  // carry libnats' text; a server without JetStream says so. `bus` must
  // outlive the work_queue and its deliveries.
  static expected<std::unique_ptr<work_queue>> open(
      nats_bus& bus, const work_queue_options& opt);

  // Stops; deliveries still held stay valid and can be acked.
  ~work_queue();
  work_queue(const work_queue&) = delete;
  work_queue& operator=(const work_queue&) = delete;

  // Stores `payload` in the stream and waits for the server to confirm it
  // (JetStream's default 5 s); only then is the request durable. The value
  // is the message's sequence in the stream, which names its decision
  // record: a client that missed the answer reads it there.
  expected<uint64_t> publish(const std::vector<uint8_t>& payload);
  // On `subject`, one the stream's (wildcard) subject covers.
  expected<uint64_t> publish(const std::string& subject,
                             const std::vector<uint8_t>& payload);
  // The same without waiting: `done` gets the sequence or the error, as
  // js_writer says. A client keeps many requests on their way so.
  void publish_async(const std::string& subject,
                     const std::vector<uint8_t>& payload,
                     js_writer::answer done);

  // Starts the fetch thread, which calls `h` for every message until
  // stop(). An error if already started.
  status start(work_handler h);
  // Joins the fetch thread (within about fetch_wait_ms). Messages fetched
  // but not handed out by then are redelivered after ack_wait.
  void stop();

  // The server's view, shared by every router on the queue.
  struct queue_state {
    uint64_t messages = 0;    // in the stream: not yet acked
    int64_t consumers = 0;    // on the stream
    uint64_t pending = 0;     // not yet handed out
    int64_t ack_pending = 0;  // handed out, not yet acked
    int64_t redelivered = 0;  // handed out more than once, not yet acked
  };
  expected<queue_state> state() const;

  // This router's counts (across restarts of the fetch thread).
  uint64_t delivered() const;    // messages given to the handler
  uint64_t redelivered() const;  // of those, handed out before
  uint64_t acked() const;
  uint64_t naked() const;
  uint64_t fetch_errors() const;    // failed fetches (timeouts are not)
  uint64_t handler_errors() const;  // handler calls that threw

  const work_queue_options& options() const { return opt_; }

 private:
  work_queue() = default;
  void run(const work_handler& h);

  work_queue_options opt_;
  std::shared_ptr<work_queue_core> core_;
  std::unique_ptr<js_writer> writer_;  // publish_async's
  std::mutex life_;  // serializes start() and stop(); guards fetcher_
  std::thread fetcher_;
  std::atomic<bool> stop_{false};
  // The fetch thread's back-off sleep, which stop() cuts short.
  std::mutex sleep_mu_;
  std::condition_variable wake_;
};

}  // namespace kvmesh
