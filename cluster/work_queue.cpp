// libnats JetStream behind work_queue: stream and consumer set-up, publish
// with the server's ack, the fetch thread and explicit acks, every
// natsStatus and jsErrCode turned into an error value or a counter.
#include "cluster/work_queue.hpp"

#include <nats/nats.h>

#include <chrono>
#include <thread>

#include "cluster/js_error.hpp"

namespace kvmesh {

using detail::js_disabled;
using detail::js_fail;
using detail::last_error;
using detail::no_js_error;

struct work_queue_core {
  std::string stream;
  std::string subject;
  std::string consumer;
  std::chrono::milliseconds ack_wait{0};
  jsCtx* js = nullptr;
  natsSubscription* sub = nullptr;
  std::atomic<uint64_t> delivered{0};
  std::atomic<uint64_t> redelivered{0};
  std::atomic<uint64_t> acked{0};
  std::atomic<uint64_t> naked{0};
  std::atomic<uint64_t> fetch_errors{0};
  std::atomic<uint64_t> handler_errors{0};

  // Last owner out: the work_queue and every delivery are done with the
  // subscription, whose pointer each fetched natsMsg carries unreferenced.
  ~work_queue_core() {
    if (sub) natsSubscription_Destroy(sub);
    if (js) jsCtx_Destroy(js);
  }
};

namespace {

status check_options(const work_queue_options& o) {
  auto bad = [](const std::string& what) {
    return make_error(ec::invalid_argument, "work queue options: " + what);
  };
  if (o.stream.empty()) return bad("empty stream name");
  if (o.subject.empty()) return bad("empty subject");
  if (o.consumer.empty()) return bad("empty consumer name");
  if (o.ack_wait_ms <= 0) return bad("ack_wait_ms must be positive");
  if (o.max_ack_pending <= 0) return bad("max_ack_pending must be positive");
  if (o.fetch_batch <= 0) return bad("fetch_batch must be positive");
  if (o.fetch_wait_ms <= 0) return bad("fetch_wait_ms must be positive");
  // 0 would mean the server's default, which hides the choice.
  if (o.max_deliver == 0 || o.max_deliver < -1)
    return bad("max_deliver must be -1 (forever) or positive");
  if (o.replicas < 1 || o.replicas > 5) return bad("replicas must be 1 to 5");
  return ok;
}

// An existing stream is reused when it stores our subject the way a work
// queue needs: otherwise acked requests would linger (limits retention) or
// vanish with the server (memory storage), so refuse rather than degrade.
status check_stream(const jsStreamInfo* si, const work_queue_options& o) {
  const std::string name = "stream " + o.stream;
  const jsStreamConfig* c = si ? si->Config : nullptr;
  if (!c) return make_error(ec::io_error, name + ": no configuration in info");
  bool has_subject = false;
  std::string subjects;
  for (int i = 0; i < c->SubjectsLen; ++i) {
    const std::string s = c->Subjects[i] ? c->Subjects[i] : "";
    has_subject = has_subject || s == o.subject;
    subjects += (i ? ", " : "") + s;
  }
  if (!has_subject)
    return make_error(
        ec::invalid_argument,
        name + " exists for subjects [" + subjects + "], not " + o.subject);
  if (c->Retention != js_WorkQueuePolicy)
    return make_error(ec::invalid_argument,
                      name + " exists without work-queue retention");
  if (c->Storage != js_FileStorage)
    return make_error(ec::invalid_argument,
                      name + " exists in memory, not on file");
  return ok;
}

status ensure_stream(jsCtx* js, const work_queue_options& o) {
  const std::string name = "stream " + o.stream;
  // Twice at most: a second look only after another router created the
  // stream between our lookup and our add.
  for (int attempt = 0; attempt < 2; ++attempt) {
    jsStreamInfo* si = nullptr;
    jsErrCode jerr = no_js_error;
    last_error last;
    natsStatus s = js_GetStreamInfo(&si, js, o.stream.c_str(), nullptr, &jerr);
    if (s == NATS_OK) {
      status fit = check_stream(si, o);
      jsStreamInfo_Destroy(si);
      return fit;
    }
    if (s != NATS_NOT_FOUND) {
      if (js_disabled(jerr))
        return make_error(ec::io_error,
                          name + ": JetStream is not enabled on the server (" +
                              natsStatus_GetText(s) + ")");
      return js_fail(name + ": lookup", s, jerr, last);
    }
    jsStreamConfig cfg;
    if ((s = jsStreamConfig_Init(&cfg)) != NATS_OK)
      return js_fail(name + ": config", s, no_js_error, last);
    const char* subjects[] = {o.subject.c_str()};
    cfg.Name = o.stream.c_str();
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Retention = js_WorkQueuePolicy;
    cfg.Storage = js_FileStorage;
    cfg.Replicas = o.replicas;
    last_error add_last;
    jerr = no_js_error;
    s = js_AddStream(nullptr, js, &cfg, nullptr, &jerr);
    if (s == NATS_OK) return ok;
    if (jerr != JSStreamNameExistErr)
      return js_fail(name + ": create for " + o.subject, s, jerr, add_last);
  }
  return make_error(ec::io_error, name + ": created and gone again");
}

// The server (2.9) treats adding an existing durable as idempotent, and as
// an update when only editable fields (ack wait, max ack pending, max
// deliver) differ: the last router to open sets them.
status ensure_consumer(jsCtx* js, const work_queue_options& o) {
  const std::string name = "consumer " + o.consumer + " on stream " + o.stream;
  jsConsumerConfig cfg;
  last_error last;
  natsStatus s = jsConsumerConfig_Init(&cfg);
  if (s != NATS_OK) return js_fail(name + ": config", s, no_js_error, last);
  cfg.Durable = o.consumer.c_str();
  cfg.AckPolicy = js_AckExplicit;
  cfg.AckWait = o.ack_wait_ms * 1000000;  // nanoseconds
  cfg.MaxAckPending = o.max_ack_pending;
  cfg.MaxDeliver = o.max_deliver;
  cfg.FilterSubject = o.subject.c_str();
  cfg.DeliverPolicy = js_DeliverAll;
  jsConsumerInfo* ci = nullptr;
  jsErrCode jerr = no_js_error;
  s = js_AddConsumer(&ci, js, o.stream.c_str(), &cfg, nullptr, &jerr);
  if (s != NATS_OK) return js_fail(name + ": create", s, jerr, last);
  // A push consumer of that name would have been refused above; a pull one
  // with another filter would not, and would feed us the wrong subject.
  const bool fits =
      ci && ci->Config &&
      (!ci->Config->FilterSubject || o.subject == ci->Config->FilterSubject);
  jsConsumerInfo_Destroy(ci);
  if (!fits)
    return make_error(ec::invalid_argument,
                      name + " exists with another filter subject");
  return ok;
}

}  // namespace

// ---- delivery ----

delivery::delivery(__natsMsg* msg, std::shared_ptr<work_queue_core> core)
    : msg_(msg), core_(std::move(core)) {
  // Parsed from the $JS.ACK reply subject; on failure the counts stay 0,
  // which callers read as "unknown".
  jsMsgMetaData* meta = nullptr;
  if (natsMsg_GetMetaData(&meta, msg_) == NATS_OK) {
    delivery_count_ = meta->NumDelivered;
    stream_sequence_ = meta->Sequence.Stream;
    jsMsgMetaData_Destroy(meta);
  }
}

delivery::~delivery() {
  // No answer: the server hands the message out again after ack_wait.
  if (msg_) natsMsg_Destroy(msg_);
}

status delivery::ack() {
  return settle(state::acked);
}
status delivery::nak(std::chrono::milliseconds delay) {
  return settle(state::naked, delay);
}

bool delivery::settled() {
  std::lock_guard<std::mutex> guard(mu_);
  return state_ != state::open;
}

std::chrono::milliseconds delivery::ack_wait() const {
  return core_->ack_wait;
}

status delivery::in_progress() {
  std::lock_guard<std::mutex> guard(mu_);
  if (state_ != state::open) return ok;
  last_error last;
  const natsStatus s = natsMsg_InProgress(msg_, nullptr);
  if (s != NATS_OK)
    return js_fail("message " + std::to_string(stream_sequence_) +
                       " of stream " + core_->stream + ": in progress",
                   s, no_js_error, last);
  return ok;
}

status delivery::settle(state verb, std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> guard(mu_);
  if (state_ == verb) return ok;
  const std::string what = "message " + std::to_string(stream_sequence_) +
                           " of stream " + core_->stream;
  if (state_ != state::open)
    return make_error(
        ec::invalid_argument,
        what + ": already " + (state_ == state::acked ? "acked" : "naked"));
  // Plain (not sync) ack: a lost ack only means a redelivery after
  // ack_wait, which at-least-once handling absorbs, while a round trip per
  // request would cost every router.
  last_error last;
  const natsStatus s = verb == state::acked ? natsMsg_Ack(msg_, nullptr)
                       : delay.count() > 0
                           ? natsMsg_NakWithDelay(msg_, delay.count(), nullptr)
                           : natsMsg_Nak(msg_, nullptr);
  if (s != NATS_OK)
    return js_fail(what + (verb == state::acked ? ": ack" : ": nak"), s,
                   no_js_error, last);
  state_ = verb;
  (verb == state::acked ? core_->acked : core_->naked).fetch_add(1);
  natsMsg_Destroy(msg_);
  msg_ = nullptr;
  return ok;
}

// ---- work_queue ----

expected<std::unique_ptr<work_queue>> work_queue::open(
    nats_bus& bus, const work_queue_options& opt) {
  if (status fit = check_options(opt); !fit) return fit.err();
  natsConnection* nc = bus.native();
  if (!nc)
    return make_error(ec::invalid_argument,
                      "stream " + opt.stream + ": no NATS connection");
  auto core = std::make_shared<work_queue_core>();
  core->stream = opt.stream;
  core->subject = opt.subject;
  core->consumer = opt.consumer;
  core->ack_wait = std::chrono::milliseconds(opt.ack_wait_ms);

  last_error last;
  natsStatus s = natsConnection_JetStream(&core->js, nc, nullptr);
  if (s != NATS_OK)
    return js_fail("stream " + opt.stream + ": JetStream context", s,
                   no_js_error, last);
  if (status st = ensure_stream(core->js, opt); !st) return st.err();
  auto writer = js_writer::open(bus, "stream " + opt.stream);
  if (!writer) return writer.err();
  if (!opt.consume) {
    // A client: the routers' consumer is theirs to configure.
    std::unique_ptr<work_queue> q(new work_queue());
    q->opt_ = opt;
    q->core_ = std::move(core);
    q->writer_ = std::move(*writer);
    return q;
  }
  if (status st = ensure_consumer(core->js, opt); !st) return st.err();

  // Bound to the consumer by name, so this subscription never creates or
  // (on unsubscribe) deletes it: the consumer outlives every router.
  jsSubOptions so;
  last_error sub_last;
  if ((s = jsSubOptions_Init(&so)) != NATS_OK)
    return js_fail("consumer " + opt.consumer + ": options", s, no_js_error,
                   sub_last);
  so.Stream = opt.stream.c_str();
  so.Consumer = opt.consumer.c_str();
  jsErrCode jerr = no_js_error;
  s = js_PullSubscribe(&core->sub, core->js, opt.subject.c_str(),
                       opt.consumer.c_str(), nullptr, &so, &jerr);
  if (s != NATS_OK)
    return js_fail(
        "consumer " + opt.consumer + " on stream " + opt.stream + ": bind", s,
        jerr, sub_last);

  std::unique_ptr<work_queue> q(new work_queue());
  q->opt_ = opt;
  q->core_ = std::move(core);
  q->writer_ = std::move(*writer);
  return q;
}

work_queue::~work_queue() {
  stop();
  // Stop interest, so that messages the server still sends us (a late
  // answer to the last fetch) go nowhere and are redelivered elsewhere.
  // Failure means the connection is already closed, which has the same
  // effect; the subscription itself lives on while deliveries hold it.
  (void)natsSubscription_Unsubscribe(core_->sub);
}

expected<uint64_t> work_queue::publish(const std::vector<uint8_t>& payload) {
  return publish(opt_.subject, payload);
}

expected<uint64_t> work_queue::publish(const std::string& subject,
                                       const std::vector<uint8_t>& payload) {
  jsPubOptions po;
  last_error last;
  natsStatus s = jsPubOptions_Init(&po);
  if (s != NATS_OK)
    return js_fail("publish on " + subject, s, no_js_error, last);
  // Refused unless our stream stores it: another stream on an overlapping
  // subject would not be drained by our consumer.
  po.ExpectStream = opt_.stream.c_str();
  jsPubAck* pa = nullptr;
  jsErrCode jerr = no_js_error;
  s = js_Publish(&pa, core_->js, subject.c_str(), payload.data(),
                 static_cast<int>(payload.size()), &po, &jerr);
  const uint64_t sequence = (s == NATS_OK && pa) ? pa->Sequence : 0;
  jsPubAck_Destroy(pa);
  const std::string what =
      "publish on " + subject + " to stream " + opt_.stream;
  if (s == NATS_NO_RESPONDERS)
    // libnats reports JSNotEnabledErr here, but a deleted stream looks the
    // same to it: nobody stores the subject.
    return make_error(ec::io_error,
                      what +
                          ": no stream stores this subject (stream "
                          "deleted, or JetStream not enabled)");
  if (s != NATS_OK) return js_fail(what, s, jerr, last);
  return sequence;
}

void work_queue::publish_async(const std::string& subject,
                               const std::vector<uint8_t>& payload,
                               js_writer::answer done) {
  writer_->publish(subject, payload, false, opt_.stream, std::move(done));
}

status work_queue::start(work_handler h) {
  std::lock_guard<std::mutex> guard(life_);
  if (fetcher_.joinable())
    return make_error(ec::invalid_argument,
                      "consumer " + opt_.consumer + ": already started");
  if (!h)
    return make_error(ec::invalid_argument,
                      "consumer " + opt_.consumer + ": no handler");
  if (!opt_.consume)
    return make_error(
        ec::invalid_argument,
        "stream " + opt_.stream + ": opened to publish only (consume = false)");
  stop_.store(false);
  fetcher_ = std::thread([this, h = std::move(h)] { run(h); });
  return ok;
}

void work_queue::stop() {
  std::lock_guard<std::mutex> guard(life_);
  if (!fetcher_.joinable()) return;
  {
    std::lock_guard<std::mutex> sleep_guard(sleep_mu_);
    stop_.store(true);
  }
  wake_.notify_all();
  fetcher_.join();
}

void work_queue::run(const work_handler& h) {
  work_queue_core& c = *core_;
  while (!stop_.load()) {
    natsMsgList list{};
    jsErrCode jerr = no_js_error;
    const natsStatus s = natsSubscription_Fetch(&list, c.sub, opt_.fetch_batch,
                                                opt_.fetch_wait_ms, &jerr);
    // An idle queue: libnats reports the expired pull request as a timeout
    // with no messages (batches that got some return NATS_OK).
    if (s == NATS_TIMEOUT) continue;
    if (s != NATS_OK) {
      // Closed connection, deleted consumer, server refusal: count, wait a
      // little so that a persistent fault does not spin, and try again.
      c.fetch_errors.fetch_add(1);
      std::unique_lock<std::mutex> l(sleep_mu_);
      wake_.wait_for(l, std::chrono::milliseconds(100),
                     [&] { return stop_.load(); });
      continue;
    }
    for (int i = 0; i < list.Count; ++i) {
      natsMsg* m = list.Msgs[i];
      list.Msgs[i] = nullptr;  // the delivery owns it now
      nats_message out;
      if (const char* subj = natsMsg_GetSubject(m)) out.subject = subj;
      const auto* data = reinterpret_cast<const uint8_t*>(natsMsg_GetData(m));
      const int len = natsMsg_GetDataLength(m);
      if (data && len > 0) out.payload.assign(data, data + len);
      std::shared_ptr<delivery> d(new delivery(m, core_));
      c.delivered.fetch_add(1);
      if (d->delivery_count() > 1) c.redelivered.fetch_add(1);
      // The handler is the caller's code on our thread: an exception must
      // not end the process. Its delivery, if dropped, is redelivered.
      try {
        h(std::move(out), std::move(d));
      } catch (...) {
        c.handler_errors.fetch_add(1);
      }
    }
    natsMsgList_Destroy(&list);  // the array; its slots are empty
  }
}

expected<work_queue::queue_state> work_queue::state() const {
  queue_state out;
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = no_js_error;
  last_error last;
  natsStatus s =
      js_GetStreamInfo(&si, core_->js, opt_.stream.c_str(), nullptr, &jerr);
  if (s != NATS_OK)
    return js_fail("stream " + opt_.stream + ": info", s, jerr, last);
  out.messages = si->State.Msgs;
  out.consumers = si->State.Consumers;
  jsStreamInfo_Destroy(si);
  jsConsumerInfo* ci = nullptr;
  last_error consumer_last;
  jerr = no_js_error;
  s = js_GetConsumerInfo(&ci, core_->js, opt_.stream.c_str(),
                         opt_.consumer.c_str(), nullptr, &jerr);
  if (s != NATS_OK)
    return js_fail(
        "consumer " + opt_.consumer + " on stream " + opt_.stream + ": info", s,
        jerr, consumer_last);
  out.pending = ci->NumPending;
  out.ack_pending = ci->NumAckPending;
  out.redelivered = ci->NumRedelivered;
  jsConsumerInfo_Destroy(ci);
  return out;
}

uint64_t work_queue::delivered() const {
  return core_->delivered.load();
}
uint64_t work_queue::redelivered() const {
  return core_->redelivered.load();
}
uint64_t work_queue::acked() const {
  return core_->acked.load();
}
uint64_t work_queue::naked() const {
  return core_->naked.load();
}
uint64_t work_queue::fetch_errors() const {
  return core_->fetch_errors.load();
}
uint64_t work_queue::handler_errors() const {
  return core_->handler_errors.load();
}

}  // namespace kvmesh
