// libnats behind nats_bus: every natsStatus checked, callbacks copy and
// hand over, shutdown drains.
#include "cluster/nats.hpp"

#include <nats/nats.h>

#include "core/log.hpp"

namespace kvmesh {

struct nats_callbacks {
  static void on_message(natsConnection*, natsSubscription*, natsMsg* msg,
                         void* closure) {
    auto* sub = static_cast<nats_bus::subscription*>(closure);
    nats_message m;
    m.subject = natsMsg_GetSubject(msg);
    if (const char* r = natsMsg_GetReply(msg)) m.reply = r;
    const char* data = natsMsg_GetData(msg);
    const int len = natsMsg_GetDataLength(msg);
    if (data && len > 0) m.payload.assign(data, data + len);
    natsMsg_Destroy(msg);
    sub->handler(std::move(m));
  }
  static void on_disconnected(natsConnection*, void* closure) {
    auto* bus = static_cast<nats_bus*>(closure);
    if (!bus->closing_.load())
      KVMESH_WARN(
          "NATS connection to %s lost: reconnecting every %lld ms "
          "(check that nats-server runs and is reachable)",
          bus->opt_.url.c_str(),
          static_cast<long long>(bus->opt_.reconnect_wait_ms));
  }
  static void on_closed(natsConnection*, void* closure) {
    static_cast<nats_bus*>(closure)->closed_.store(true);
  }
  static void on_reconnected(natsConnection* nc, void* closure) {
    const uint64_t n =
        static_cast<nats_bus*>(closure)->reconnects_.fetch_add(1);
    char url[256] = "";
    if (natsConnection_GetConnectedUrl(nc, url, sizeof(url)) != NATS_OK)
      url[0] = '\0';
    KVMESH_INFO("NATS reconnected to %s (reconnect %llu)", url,
                static_cast<unsigned long long>(n + 1));
  }
  // Counted always, logged at powers of two: a slow consumer can repeat
  // thousands of times a second.
  static void on_error(natsConnection*, natsSubscription* sub, natsStatus s,
                       void* closure) {
    auto* bus = static_cast<nats_bus*>(closure);
    const bool slow = s == NATS_SLOW_CONSUMER;
    const uint64_t n =
        (slow ? bus->slow_consumers_ : bus->errors_).fetch_add(1) + 1;
    if ((n & (n - 1)) != 0) return;
    const char* subject = sub ? natsSubscription_GetSubject(sub) : nullptr;
    if (slow)
      KVMESH_WARN(
          "NATS slow consumer on %s: messages dropped (%llu times "
          "so far; the process cannot keep up with its subjects)",
          subject ? subject : "a subscription",
          static_cast<unsigned long long>(n));
    else
      KVMESH_WARN("NATS error on %s: %s (%llu so far)",
                  subject ? subject : "the connection", natsStatus_GetText(s),
                  static_cast<unsigned long long>(n));
  }
};

error nats_bus::fail(const std::string& what, int s) {
  errors_.fetch_add(1);
  return make_error(
      ec::io_error,
      what + ": " + natsStatus_GetText(static_cast<natsStatus>(s)));
}

expected<std::unique_ptr<nats_bus>> nats_bus::connect(const nats_options& opt) {
  std::unique_ptr<nats_bus> bus(new nats_bus());
  bus->opt_ = opt;
  natsOptions* o = nullptr;
  natsStatus s = natsOptions_Create(&o);
  auto bad = [&](const char* step) {
    if (o) natsOptions_Destroy(o);
    return make_error(ec::io_error, "NATS " + opt.url + ": " + step + ": " +
                                        natsStatus_GetText(s));
  };
  if (s != NATS_OK) return bad("options");
  // A comma-separated list names several servers of one cluster:
  // natsOptions_SetURL would take it for one URL.
  std::vector<std::string> urls;
  for (size_t from = 0; from <= opt.url.size();) {
    size_t to = opt.url.find(',', from);
    if (to == std::string::npos) to = opt.url.size();
    std::string u = opt.url.substr(from, to - from);
    u.erase(0, u.find_first_not_of(" \t"));
    u.erase(u.find_last_not_of(" \t") + 1);
    if (!u.empty()) urls.push_back(std::move(u));
    from = to + 1;
  }
  if (urls.empty()) {
    s = NATS_INVALID_ARG;
    return bad("no URL");
  }
  std::vector<const char*> servers;
  for (const auto& u : urls)
    servers.push_back(u.c_str());
  if ((s = natsOptions_SetServers(o, servers.data(),
                                  static_cast<int>(servers.size()))) != NATS_OK)
    return bad("bad URL");
  // Without it libnats holds small publishes up to a millisecond to batch
  // them: every hop of an auction would wait.
  if ((s = natsOptions_SetSendAsap(o, opt.send_asap)) != NATS_OK ||
      (s = natsOptions_SetNoRandomize(o, !opt.randomize)) != NATS_OK)
    return bad("options");
  if ((s = natsOptions_SetName(o, opt.name.c_str())) != NATS_OK ||
      (s = natsOptions_SetMaxReconnect(o, opt.max_reconnect)) != NATS_OK ||
      (s = natsOptions_SetReconnectWait(o, opt.reconnect_wait_ms)) != NATS_OK ||
      (s = natsOptions_SetReconnectBufSize(o, opt.reconnect_buffer_bytes)) !=
          NATS_OK ||
      (s = natsOptions_SetTimeout(o, opt.connect_timeout_ms)) != NATS_OK ||
      (s = natsOptions_SetReconnectedCB(o, nats_callbacks::on_reconnected,
                                        bus.get())) != NATS_OK ||
      (s = natsOptions_SetDisconnectedCB(o, nats_callbacks::on_disconnected,
                                         bus.get())) != NATS_OK ||
      (s = natsOptions_SetClosedCB(o, nats_callbacks::on_closed,
                                   bus.get())) != NATS_OK ||
      (s = natsOptions_SetErrorHandler(o, nats_callbacks::on_error,
                                       bus.get())) != NATS_OK)
    return bad("options");
  if ((s = natsConnection_Connect(&bus->conn_, o)) != NATS_OK)
    return bad("cannot connect");
  natsOptions_Destroy(o);
  return bus;
}

nats_bus::~nats_bus() {
  if (!conn_) return;
  closing_.store(true);
  // Drain: subscriptions stop and deliver what they hold, publishes flush;
  // then the connection closes. Subscriptions must outlive their delivery.
  if (natsConnection_DrainTimeout(conn_, opt_.drain_timeout_ms) == NATS_OK) {
    while (!natsConnection_IsClosed(conn_))
      nats_Sleep(10);
  } else {
    natsConnection_Close(conn_);
  }
  // libnats runs the connection's callbacks on a thread of its own, the
  // closed one last: until it has run, a disconnected or error callback
  // may still be under way with this object as its closure.
  for (int i = 0; i < 500 && !closed_.load(); ++i)
    nats_Sleep(10);
  {
    std::lock_guard<std::mutex> guard(mu_);
    for (auto& [id, sub] : subs_)
      natsSubscription_Destroy(sub->sub);
    subs_.clear();
  }
  natsConnection_Destroy(conn_);
}

status nats_bus::publish(const std::string& subject,
                         const std::vector<uint8_t>& payload,
                         const std::string& reply) {
  const int len = static_cast<int>(payload.size());
  const natsStatus s =
      reply.empty()
          ? natsConnection_Publish(conn_, subject.c_str(), payload.data(), len)
          : natsConnection_PublishRequest(conn_, subject.c_str(), reply.c_str(),
                                          payload.data(), len);
  if (s != NATS_OK) return fail("publish on " + subject, s);
  return ok;
}

expected<uint64_t> nats_bus::subscribe(const std::string& subject,
                                       const std::string& queue,
                                       nats_handler h) {
  auto entry = std::make_unique<subscription>();
  entry->handler = std::move(h);
  const natsStatus s =
      queue.empty()
          ? natsConnection_Subscribe(&entry->sub, conn_, subject.c_str(),
                                     nats_callbacks::on_message, entry.get())
          : natsConnection_QueueSubscribe(
                &entry->sub, conn_, subject.c_str(), queue.c_str(),
                nats_callbacks::on_message, entry.get());
  if (s != NATS_OK) return fail("subscribe to " + subject, s);
  std::lock_guard<std::mutex> guard(mu_);
  const uint64_t id = next_++;
  subs_.emplace(id, std::move(entry));
  return id;
}

status nats_bus::unsubscribe(uint64_t id) {
  std::unique_ptr<subscription> entry;
  {
    std::lock_guard<std::mutex> guard(mu_);
    auto it = subs_.find(id);
    if (it == subs_.end())
      return make_error(ec::not_found, "no subscription " + std::to_string(id));
    entry = std::move(it->second);
    subs_.erase(it);
  }
  const natsStatus s = natsSubscription_Unsubscribe(entry->sub);
  natsSubscription_Destroy(entry->sub);
  if (s != NATS_OK) return fail("unsubscribe", s);
  return ok;
}

expected<std::vector<uint8_t>> nats_bus::request(
    const std::string& subject, const std::vector<uint8_t>& payload,
    std::chrono::milliseconds timeout) {
  natsMsg* reply = nullptr;
  const natsStatus s =
      natsConnection_Request(&reply, conn_, subject.c_str(), payload.data(),
                             static_cast<int>(payload.size()), timeout.count());
  if (s != NATS_OK) return fail("request on " + subject, s);
  const char* data = natsMsg_GetData(reply);
  const int len = natsMsg_GetDataLength(reply);
  std::vector<uint8_t> out;
  if (data && len > 0) out.assign(data, data + len);
  natsMsg_Destroy(reply);
  return out;
}

nats_bus::traffic nats_bus::stats() const {
  traffic t;
  natsStatistics* s = nullptr;
  if (natsStatistics_Create(&s) != NATS_OK) return t;
  if (natsConnection_GetStats(conn_, s) == NATS_OK)
    natsStatistics_GetCounts(s, &t.in_msgs, nullptr, &t.out_msgs, nullptr,
                             nullptr);
  natsStatistics_Destroy(s);
  return t;
}

status nats_bus::flush(std::chrono::milliseconds timeout) {
  const natsStatus s = natsConnection_FlushTimeout(conn_, timeout.count());
  if (s != NATS_OK) return fail("flush", s);
  return ok;
}

}  // namespace kvmesh
