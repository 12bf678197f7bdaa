// libnats JetStream behind work_queue: stream and consumer set-up, publish
// with the server's ack, the fetch thread and explicit acks, every
// natsStatus and jsErrCode turned into an error value or a counter.
#include "cluster/jetstream.hpp"

#include <thread>

#include <nats/nats.h>

#include <chrono>
#include <unordered_map>

namespace kvmesh {

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

constexpr jsErrCode no_js_error = static_cast<jsErrCode>(0);

// libnats keeps a per-thread "last error" with the detail (often the
// server's own description) but does not clear it when a later call
// succeeds: it is news only if it changed across the call.
class last_error {
 public:
  last_error() { before_ = read(&before_status_); }
  std::string detail(natsStatus s) const {
    natsStatus now = NATS_OK;
    std::string text = read(&now);
    if (now != s || text.empty()) return {};
    if (now == before_status_ && text == before_) return {};
    return text;
  }

 private:
  static std::string read(natsStatus* s) {
    const char* t = nats_GetLastError(s);
    return t ? t : "";
  }
  natsStatus before_status_ = NATS_OK;
  std::string before_;
};

bool js_disabled(jsErrCode jerr) {
  return jerr == JSNotEnabledErr || jerr == JSNotEnabledForAccountErr;
}

// "<what>: <status>[: <detail>][ (JetStream error N)]".
error js_fail(const std::string& what, natsStatus s, jsErrCode jerr,
              const last_error& last) {
  std::string msg = what + ": " + natsStatus_GetText(s);
  const std::string detail = last.detail(s);
  if (!detail.empty()) msg += ": " + detail;
  if (jerr != no_js_error)
    msg += " (JetStream error " + std::to_string(static_cast<int>(jerr)) + ")";
  return make_error(ec::io_error, std::move(msg));
}

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

// ---- record_store ----

namespace kvmesh {

// The publishes a js_writer has in flight, by the message libnats hands
// back with the server's answer: the closure of its pub-ack handler.
struct js_writer::pending {
  std::string what;
  std::mutex mu;
  std::unordered_map<natsMsg*, answer> waiting;
  // Publishes sent, and publishes whose handler has returned or that were
  // dropped unanswered: libnats may be in the handler while the writer
  // goes away, so the destructor frees this only once the two are equal.
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> finished{0};
};

namespace {

// As the contexts' default wait for the server's answer.
constexpr int64_t writer_wait_ms = 5000;

void on_answered(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae,
                 void* closure) {
  auto* p = static_cast<js_writer::pending*>(closure);
  js_writer::answer done;
  {
    std::lock_guard<std::mutex> g(p->mu);
    if (auto it = p->waiting.find(msg); it != p->waiting.end()) {
      done = std::move(it->second);
      p->waiting.erase(it);
    }
  }
  expected<uint64_t> r = pa ? pa->Sequence : uint64_t{0};
  if (!pa) {
    const std::string what =
        p->what + ": publish on " + (msg ? natsMsg_GetSubject(msg) : "") + ": ";
    const natsStatus s = pae ? pae->Err : NATS_ERR;
    if (pae && pae->ErrCode == JSStreamWrongLastSequenceErr) {
      r = make_error(ec::conflict, what + "the subject has a message");
    } else if (s == NATS_NO_RESPONDERS) {
      r = make_error(ec::io_error,
                     what +
                         "no stream stores this subject (stream deleted, "
                         "or JetStream not enabled)");
    } else {
      std::string text = natsStatus_GetText(s);
      if (pae && pae->ErrText) text += std::string(": ") + pae->ErrText;
      if (pae && pae->ErrCode != no_js_error)
        text += " (JetStream error " +
                std::to_string(static_cast<int>(pae->ErrCode)) + ")";
      r = make_error(ec::io_error, what + text);
    }
  }
  natsMsg_Destroy(msg);
  if (done) done(std::move(r));
  p->finished.fetch_add(1);
}

}  // namespace

expected<std::unique_ptr<js_writer>> js_writer::open(nats_bus& bus,
                                                     std::string what) {
  natsConnection* nc = bus.native();
  if (!nc) return make_error(ec::invalid_argument, what + ": no connection");
  std::unique_ptr<js_writer> w(new js_writer());
  auto p = std::make_unique<pending>();
  p->what = std::move(what);
  last_error last;
  jsOptions o;
  natsStatus s = jsOptions_Init(&o);
  if (s == NATS_OK) {
    o.PublishAsync.AckHandler = on_answered;
    o.PublishAsync.AckHandlerClosure = p.get();
    // Past this many unanswered a publish waits (PublishAsync.StallWait),
    // then fails: a server that stopped answering is not buffered for.
    o.PublishAsync.MaxPending = 8192;
    s = natsConnection_JetStream(&w->js_, nc, &o);
  }
  if (s != NATS_OK)
    return js_fail(p->what + ": JetStream context", s, no_js_error, last);
  w->p_ = p.release();
  return w;
}

js_writer::~js_writer() {
  if (!js_) return;
  // Waits a while for the publishes in flight; those still unanswered are
  // dropped (their callback never runs).
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = 1000;
  (void)js_PublishAsyncComplete(js_, &po);
  natsMsgList left{nullptr, 0};
  // Only when some are left: libnats 3.4 crashes on a context that never
  // published.
  if (p_->finished.load() < p_->sent.load() &&
      js_PublishAsyncGetPendingList(&left, js_) == NATS_OK) {
    for (int i = 0; i < left.Count; ++i) {
      std::lock_guard<std::mutex> g(p_->mu);
      p_->waiting.erase(left.Msgs[i]);
      p_->finished.fetch_add(1);
    }
    natsMsgList_Destroy(&left);
  }
  jsCtx_Destroy(js_);
  // A handler libnats started before the list was taken may still run.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (p_->finished.load() < p_->sent.load() &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // One that never returned keeps its closure: leaked, not freed under it.
  if (p_->finished.load() >= p_->sent.load()) delete p_;
}

void js_writer::publish(const std::string& subject,
                        const std::vector<uint8_t>& payload, bool only_new,
                        const std::string& stream, answer done) {
  last_error last;
  natsMsg* m = nullptr;
  natsStatus s = natsMsg_Create(&m, subject.c_str(), nullptr,
                                reinterpret_cast<const char*>(payload.data()),
                                static_cast<int>(payload.size()));
  if (s == NATS_OK) {
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = writer_wait_ms;
    po.ExpectNoMessage = only_new;
    if (!stream.empty()) po.ExpectStream = stream.c_str();
    {
      // Known before it is sent: the answer may come before the call
      // returns.
      std::lock_guard<std::mutex> g(p_->mu);
      p_->waiting.emplace(m, std::move(done));
    }
    natsMsg* sent = m;
    p_->sent.fetch_add(1);
    s = js_PublishMsgAsync(js_, &sent, &po);
    if (s == NATS_OK) return;
    // Not sent: libnats kept no hold of it, and no answer will come.
    std::lock_guard<std::mutex> g(p_->mu);
    if (auto it = p_->waiting.find(m); it != p_->waiting.end()) {
      done = std::move(it->second);
      p_->waiting.erase(it);
    }
    p_->finished.fetch_add(1);
  }
  if (m) natsMsg_Destroy(m);
  if (done)
    done(js_fail(p_->what + ": publish on " + subject, s, no_js_error, last));
}

expected<std::unique_ptr<record_store>> record_store::open(
    nats_bus& bus, const record_options& opt) {
  const std::string name = "bucket " + opt.bucket;
  if (opt.bucket.empty())
    return make_error(ec::invalid_argument, "record store: empty bucket name");
  if (opt.ttl.count() <= 0)
    return make_error(ec::invalid_argument, name + ": ttl must be positive");
  if (opt.replicas < 1 || opt.replicas > 5)
    return make_error(ec::invalid_argument, name + ": replicas must be 1 to 5");
  natsConnection* nc = bus.native();
  if (!nc) return make_error(ec::invalid_argument, name + ": no connection");
  std::unique_ptr<record_store> r(new record_store());
  r->opt_ = opt;
  last_error last;
  natsStatus s = natsConnection_JetStream(&r->js_, nc, nullptr);
  if (s != NATS_OK)
    return js_fail(name + ": JetStream context", s, no_js_error, last);
  // Bind first: creating an existing bucket whose settings differ (another
  // router's TTL) would be refused. A JetStream cluster that has just
  // started (or lost a node) answers nothing until it has elected its
  // leaders: timeouts are retried for a while, as a starting router can
  // wait.
  last_error bind_last;
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((s = js_KeyValue(&r->kv_, r->js_, opt.bucket.c_str())) ==
             NATS_TIMEOUT &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  if (s == NATS_OK) return open_writes(std::move(r), bus);
  if (s != NATS_NOT_FOUND)
    return js_fail(name + ": bind", s, no_js_error, bind_last);
  if (!opt.create)
    return make_error(ec::not_found, name +
                                         ": no such bucket (not created "
                                         "by a client)");
  kvConfig cfg;
  last_error create_last;
  if ((s = kvConfig_Init(&cfg)) != NATS_OK)
    return js_fail(name + ": config", s, no_js_error, create_last);
  cfg.Bucket = opt.bucket.c_str();
  cfg.History = 1;
  cfg.TTL = opt.ttl.count() * 1000000;  // nanoseconds
  cfg.StorageType = js_FileStorage;
  cfg.Replicas = opt.replicas;
  while ((s = js_CreateKeyValue(&r->kv_, r->js_, &cfg)) == NATS_TIMEOUT &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  if (s != NATS_OK) {
    // Another router created it in between: bind to theirs.
    last_error again_last;
    if (js_KeyValue(&r->kv_, r->js_, opt.bucket.c_str()) == NATS_OK)
      return open_writes(std::move(r), bus);
    return js_fail(name + ": create", s, no_js_error, create_last);
  }
  return open_writes(std::move(r), bus);
}

expected<std::unique_ptr<record_store>> record_store::open_writes(
    std::unique_ptr<record_store> r, nats_bus& bus) {
  auto w = js_writer::open(bus, "bucket " + r->opt_.bucket);
  if (!w) return w.err();
  r->writer_ = std::move(*w);
  return r;
}

record_store::~record_store() {
  writer_.reset();  // its answers count in puts_ and failures_
  if (kv_) kvStore_Destroy(kv_);
  if (js_) jsCtx_Destroy(js_);
}

void record_store::put_async(const std::string& key,
                             const std::vector<uint8_t>& value, bool only_new,
                             std::function<void(status)> done) {
  // The subject a put of `key` goes to (kvStore_Put's, for a bucket of
  // this account without a domain).
  writer_->publish("$KV." + opt_.bucket + "." + key, value, only_new, {},
                   [this, done = std::move(done)](expected<uint64_t> r) {
                     if (r)
                       puts_.fetch_add(1);
                     else if (r.err().code != ec::conflict)
                       failures_.fetch_add(1);
                     done(r ? ok : status{r.err()});
                   });
}

status record_store::put(const std::string& key,
                         const std::vector<uint8_t>& value) {
  last_error last;
  uint64_t rev = 0;
  const natsStatus s = kvStore_Put(&rev, kv_, key.c_str(), value.data(),
                                   static_cast<int>(value.size()));
  if (s != NATS_OK) {
    failures_.fetch_add(1);
    return js_fail("bucket " + opt_.bucket + ": put " + key, s, no_js_error,
                   last);
  }
  puts_.fetch_add(1);
  return ok;
}

expected<std::vector<uint8_t>> record_store::get(const std::string& key) {
  last_error last;
  kvEntry* e = nullptr;
  const natsStatus s = kvStore_Get(&e, kv_, key.c_str());
  if (s == NATS_NOT_FOUND)
    return make_error(ec::not_found, "bucket " + opt_.bucket + ": no " + key);
  if (s != NATS_OK) {
    failures_.fetch_add(1);
    return js_fail("bucket " + opt_.bucket + ": get " + key, s, no_js_error,
                   last);
  }
  const auto* data = static_cast<const uint8_t*>(kvEntry_Value(e));
  std::vector<uint8_t> out(data, data + kvEntry_ValueLen(e));
  kvEntry_Destroy(e);
  hits_.fetch_add(1);
  return out;
}

expected<bool> record_store::create(const std::string& key,
                                    const std::vector<uint8_t>& value,
                                    std::vector<uint8_t>* holder) {
  last_error last;
  uint64_t rev = 0;
  const natsStatus s = kvStore_Create(&rev, kv_, key.c_str(), value.data(),
                                      static_cast<int>(value.size()));
  if (s == NATS_OK) {
    puts_.fetch_add(1);
    return true;
  }
  // libnats says "wrong last sequence" for a key someone holds, but also
  // fails the same way on a lost answer: only the value there tells.
  auto there = get(key);
  if (there) {
    if (holder) *holder = std::move(*there);
    return false;
  }
  failures_.fetch_add(1);
  return js_fail("bucket " + opt_.bucket + ": create " + key, s, no_js_error,
                 last);
}

status record_store::erase(const std::string& key) {
  last_error last;
  const natsStatus s = kvStore_Delete(kv_, key.c_str());
  if (s != NATS_OK) {
    failures_.fetch_add(1);
    return js_fail("bucket " + opt_.bucket + ": erase " + key, s, no_js_error,
                   last);
  }
  return ok;
}

}  // namespace kvmesh
