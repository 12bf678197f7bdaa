// libnats' asynchronous JetStream publish behind js_writer: the pub-ack
// handler that answers each publish once, and a destructor that waits a
// while for the answers still due.
#include "cluster/js_writer.hpp"

#include <nats/nats.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "cluster/js_error.hpp"

namespace kvmesh {

using detail::js_fail;
using detail::last_error;
using detail::no_js_error;

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

}  // namespace kvmesh
