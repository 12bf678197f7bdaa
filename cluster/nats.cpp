// libnats behind nats_bus: every natsStatus checked, callbacks copy and
// hand over, shutdown drains.
#include "cluster/nats.hpp"

#include <nats/nats.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fstream>

#include "cluster/msg_batch.hpp"
#include "core/log.hpp"

namespace kvmesh {

struct nats_bus::pending_request {
  std::string subject;
  std::string reply;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool no_responders = false;
  std::string denied;  // the server's text, when refused
  std::vector<uint8_t> payload;
};

namespace {

// The subject a "Permissions Violation for Publish to \"x\"" names.
std::string denied_subject(const std::string& text) {
  const size_t open = text.find('"');
  if (open == std::string::npos) return {};
  const size_t close = text.find('"', open + 1);
  if (close == std::string::npos) return {};
  return text.substr(open + 1, close - open - 1);
}

bool readable(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return static_cast<bool>(in);
}

// libnats' own account of the last failure on this thread (its text names
// the server's answer, e.g. "Authorization Violation"), or "".
std::string last_nats_error() {
  natsStatus s = NATS_OK;
  const char* text = nats_GetLastError(&s);
  std::string out = text ? text : "";
  // Its source location ("(conn.c:1905): ") means nothing to an operator.
  if (!out.empty() && out[0] == '(')
    if (const size_t end = out.find("): "); end != std::string::npos)
      out.erase(0, end + 3);
  return out;
}

}  // namespace

bool asks_tls(const nats_options& o) {
  return o.tls || !o.tls_ca_file.empty() || !o.tls_cert_file.empty() ||
         o.url.find("tls://") != std::string::npos;
}

status check_security(const nats_options& o) {
  std::vector<std::string> problems;
  std::vector<std::string> ways;
  if (!o.user.empty() || !o.password.empty()) {
    ways.push_back("nats.user/nats.password");
    if (o.user.empty())
      problems.push_back("nats.password is set without nats.user");
    if (o.password.empty())
      problems.push_back("nats.user '" + o.user +
                         "' is set without nats.password");
  }
  if (!o.token.empty()) ways.push_back("nats.token");
  if (!o.nkey.empty() || !o.nkey_seed_file.empty()) {
    ways.push_back("nats.nkey/nats.nkey_seed");
    if (o.nkey.empty())
      problems.push_back(
          "nats.nkey_seed is set without nats.nkey (the user's public key, "
          "U...)");
    else if (o.nkey.size() != 56 || o.nkey[0] != 'U')
      problems.push_back("nats.nkey '" + o.nkey +
                         "' is not a user's public nkey (56 characters "
                         "starting with U)");
    if (o.nkey_seed_file.empty())
      problems.push_back(
          "nats.nkey is set without nats.nkey_seed (the "
          "file holding the seed, SU...)");
  }
  if (!o.creds_file.empty()) ways.push_back("nats.creds");
  if (ways.size() > 1) {
    std::string list;
    for (const auto& w : ways)
      list += (list.empty() ? "" : ", ") + w;
    problems.push_back("give one way of authenticating, not " +
                       std::to_string(ways.size()) + ": " + list);
  }
  if (o.tls_cert_file.empty() != o.tls_key_file.empty())
    problems.push_back(o.tls_cert_file.empty()
                           ? "nats.tls_key is set without nats.tls_cert"
                           : "nats.tls_cert is set without nats.tls_key");
  for (const auto& [key, path] :
       std::vector<std::pair<const char*, const std::string*>>{
           {"nats.nkey_seed", &o.nkey_seed_file},
           {"nats.creds", &o.creds_file},
           {"nats.tls_ca", &o.tls_ca_file},
           {"nats.tls_cert", &o.tls_cert_file},
           {"nats.tls_key", &o.tls_key_file}})
    if (!path->empty() && !readable(*path))
      problems.push_back(std::string(key) + ": cannot read " + *path + ": " +
                         std::strerror(errno));
  if (problems.empty()) return ok;
  std::string msg;
  for (const auto& p : problems)
    msg += (msg.empty() ? "" : "; ") + p;
  return make_error(ec::invalid_argument, msg);
}

struct nats_callbacks {
  // A subscription's closure: libnats' own reference to it, released by
  // on_complete once no message callback can run any more.
  using held = std::shared_ptr<nats_bus::subscription>;
  static void on_message(natsConnection*, natsSubscription*, natsMsg* msg,
                         void* closure) {
    const auto& sub = *static_cast<held*>(closure);
    nats_message m;
    m.subject = natsMsg_GetSubject(msg);
    if (const char* r = natsMsg_GetReply(msg)) m.reply = r;
    // As bytes, so that the copy is one memmove (from char it went a byte
    // at a time: 4% of a router's CPU).
    const auto* data = reinterpret_cast<const uint8_t*>(natsMsg_GetData(msg));
    const int len = natsMsg_GetDataLength(msg);
    if (data && len > 0) m.payload.assign(data, data + len);
    thread_local nats_msg_batch done;  // one per delivery thread
    done.destroy(msg);
    sub->handler(std::move(m));
  }
  // libnats calls this once the subscription is closed and its handler has
  // returned for the last time. Freeing the handler at unsubscribe instead
  // raced a delivery under way: a node's teardown crashed in a handler
  // whose captures were gone (mesh_test, 1 run in about 60 under load).
  static void on_complete(void* closure) { delete static_cast<held*>(closure); }
  static void on_disconnected(natsConnection*, void* closure) {
    auto* bus = static_cast<nats_bus*>(closure);
    if (!bus->closing_.load())
      KVMESH_WARN(
          "NATS connection to %s lost: reconnecting every %lld ms "
          "(check that nats-server runs and is reachable)",
          bus->shown_url_.c_str(),
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
  static void on_response(natsConnection*, natsSubscription*, natsMsg* msg,
                          void* closure) {
    auto* bus = static_cast<nats_bus*>(closure);
    std::string subject = natsMsg_GetSubject(msg);
    const bool none = natsMsg_IsNoResponders(msg);
    std::vector<uint8_t> payload;
    const auto* data = reinterpret_cast<const uint8_t*>(natsMsg_GetData(msg));
    const int len = natsMsg_GetDataLength(msg);
    if (data && len > 0) payload.assign(data, data + len);
    thread_local nats_msg_batch done;
    done.destroy(msg);
    bus->on_response(subject, none, std::move(payload));
  }
  // A refused publish or subscription: the server says so only here, after
  // the call returned NATS_OK. Counted, logged (at powers of two: a
  // process may repeat the refused publish every heartbeat), and any
  // request waiting on that subject fails at once instead of timing out.
  static void on_denied(natsConnection* nc, nats_bus* bus) {
    const char* last = nullptr;
    std::string text = "Permissions Violation";
    if (natsConnection_GetLastError(nc, &last) == NATS_NOT_PERMITTED && last &&
        *last)
      text = last;
    const uint64_t n = bus->denials_.fetch_add(1) + 1;
    // A request that fails of it reports it to its caller: once is enough.
    if (bus->on_denied(text)) return;
    if ((n & (n - 1)) != 0) return;
    const std::string subject = denied_subject(text);
    const bool sub = text.find("Subscription") != std::string::npos;
    KVMESH_ERROR(
        "NATS permission denied: nats-server does not let this process's "
        "credential %s %s (%s; %llu so far): give the process the "
        "credential of its role, or allow the subject in the server's "
        "authorization (deploy/nats/auth.conf, docs/reliability.md)",
        sub ? "subscribe to" : "publish to",
        subject.empty() ? "a subject" : subject.c_str(), text.c_str(),
        static_cast<unsigned long long>(n));
  }
  // Counted always, logged at powers of two: a slow consumer can repeat
  // thousands of times a second.
  static void on_error(natsConnection* nc, natsSubscription* sub, natsStatus s,
                       void* closure) {
    auto* bus = static_cast<nats_bus*>(closure);
    if (s == NATS_NOT_PERMITTED) return on_denied(nc, bus);
    if (s == NATS_CONNECTION_AUTH_FAILED) {
      bus->errors_.fetch_add(1);
      KVMESH_ERROR(
          "NATS authentication failed on reconnecting to %s: the server "
          "no longer accepts this process's credential (check nats.user, "
          "nats.password, nats.token, nats.nkey or nats.creds)",
          bus->shown_url_.c_str());
      return;
    }
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

namespace {

// Why natsConnection_Connect failed, in terms of what to change.
std::string connect_failure(natsStatus s, const nats_options& opt) {
  const std::string detail = last_nats_error();
  const std::string said = detail.empty() ? "" : " (" + detail + ")";
  const bool has_creds = !opt.user.empty() || !opt.token.empty() ||
                         !opt.nkey.empty() || !opt.creds_file.empty();
  const bool auth =
      s == NATS_CONNECTION_AUTH_FAILED ||
      detail.find("Authorization Violation") != std::string::npos ||
      detail.find("Authentication") != std::string::npos;
  if (auth)
    return std::string("authentication failed: nats-server refused ") +
           (has_creds ? "this credential" : "a connection without one") + said +
           "; check nats.user and nats.password, nats.token, nats.nkey "
           "and nats.nkey_seed, or nats.creds (or the user in the URL)";
  if (s == NATS_SECURE_CONNECTION_REQUIRED ||
      detail.find("requires TLS") != std::string::npos ||
      detail.find("Secure Connection - TLS Required") != std::string::npos)
    return "the server requires TLS" + said +
           ": set nats.tls = true and nats.tls_ca to the CA that signed the "
           "server's certificate";
  if (s == NATS_SECURE_CONNECTION_WANTED)
    return "TLS was asked (nats.tls, nats.tls_* or a tls:// URL) but the "
           "server does not offer it" +
           said;
  const bool tls_asked = asks_tls(opt);
  const bool handshake = s == NATS_SSL_ERROR ||
                         detail.find("SSL") != std::string::npos ||
                         detail.find("certificate") != std::string::npos;
  // libnats tries TLS by itself when the server requires it, and fails on
  // a certificate no system CA signed.
  if (handshake && !tls_asked)
    return "the server requires TLS, and this connection has no CA to "
           "verify it with" +
           said +
           ": set nats.tls = true and nats.tls_ca to the CA that signed "
           "the server's certificate";
  if (handshake)
    return std::string("TLS handshake failed") + said +
           ": is nats.tls_ca the CA that signed the server's certificate, "
           "and does the certificate name the host of the URL? (a server "
           "that verifies clients also wants nats.tls_cert and "
           "nats.tls_key)";
  // TLS 1.3 ends the client's half of the handshake before the server
  // checks the client's certificate: a server that verifies clients
  // (verify: true) and got none it trusts closes the connection, and
  // libnats only sees no PONG (a server that is not there refuses the
  // connection instead).
  const bool closed = s == NATS_PROTOCOL_ERROR || s == NATS_CONNECTION_CLOSED ||
                      detail.find("Expected 'PONG'") != std::string::npos;
  if (tls_asked && closed)
    return "TLS handshake failed" + said +
           ": the server closed the connection; it may require a client "
           "certificate " +
           (opt.tls_cert_file.empty()
                ? std::string("(--nats-tls-cert and --nats-tls-key, or "
                              "nats.tls_cert and nats.tls_key)")
                : "signed by a CA it trusts (is --nats-tls-cert " +
                      opt.tls_cert_file + " one?)");
  for (const auto& [key, path] :
       {std::make_pair("nats.creds", &opt.creds_file),
        std::make_pair("nats.nkey_seed", &opt.nkey_seed_file)})
    if (!path->empty() && detail.find(*path) != std::string::npos)
      return std::string(key) + " " + *path + " cannot be used" + said;
  return std::string("cannot connect: ") + natsStatus_GetText(s) + said;
}

}  // namespace

expected<natsOptions*> make_nats_options(const nats_options& opt) {
  const std::string shown = redact_url(opt.url);
  if (auto st = check_security(opt); !st)
    return make_error(st.err().code, "NATS " + shown + ": " + st.err().message);
  natsOptions* o = nullptr;
  natsStatus s = natsOptions_Create(&o);
  auto bad = [&](const std::string& step) {
    std::string detail = natsStatus_GetText(s);
    // A file libnats could not take says why on its error stack.
    if (const std::string last = last_nats_error();
        !last.empty() && last != detail)
      detail += " (" + last + ")";
    if (o) natsOptions_Destroy(o);
    return make_error(ec::io_error,
                      "NATS " + shown + ": " + step + ": " + detail);
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
      (s = natsOptions_SetTimeout(o, opt.connect_timeout_ms)) != NATS_OK)
    return bad("options");
  if (!opt.user.empty() &&
      (s = natsOptions_SetUserInfo(o, opt.user.c_str(),
                                   opt.password.c_str())) != NATS_OK)
    return bad("nats.user");
  if (!opt.token.empty() &&
      (s = natsOptions_SetToken(o, opt.token.c_str())) != NATS_OK)
    return bad("nats.token");
  if (!opt.nkey.empty() &&
      (s = natsOptions_SetNKeyFromSeed(o, opt.nkey.c_str(),
                                       opt.nkey_seed_file.c_str())) != NATS_OK)
    return bad("nats.nkey_seed " + opt.nkey_seed_file);
  if (!opt.creds_file.empty() &&
      (s = natsOptions_SetUserCredentialsFromFiles(o, opt.creds_file.c_str(),
                                                   nullptr)) != NATS_OK)
    return bad("nats.creds " + opt.creds_file);
  const bool tls =
      opt.tls || !opt.tls_ca_file.empty() || !opt.tls_cert_file.empty();
  if (tls && (s = natsOptions_SetSecure(o, true)) != NATS_OK)
    return bad("nats.tls (was libnats built with TLS?)");
  if (!opt.tls_ca_file.empty() && (s = natsOptions_LoadCATrustedCertificates(
                                       o, opt.tls_ca_file.c_str())) != NATS_OK)
    return bad("nats.tls_ca " + opt.tls_ca_file);
  if (!opt.tls_cert_file.empty() &&
      (s = natsOptions_LoadCertificatesChain(
           o, opt.tls_cert_file.c_str(), opt.tls_key_file.c_str())) != NATS_OK)
    return bad("nats.tls_cert " + opt.tls_cert_file + " and nats.tls_key " +
               opt.tls_key_file);
  return o;
}

error nats_connect_error(int status, const nats_options& opt) {
  const std::string why = connect_failure(static_cast<natsStatus>(status), opt);
  // A server that closed the connection may also be restarting: an
  // error to retry (a unit restarts it), not a setting refused.
  const bool refused =
      why.rfind("cannot connect", 0) != 0 &&
      why.find("the server closed the connection") == std::string::npos;
  return make_error(refused ? ec::invalid_argument : ec::io_error,
                    "NATS " + redact_url(opt.url) + ": " + why);
}

expected<std::unique_ptr<nats_bus>> nats_bus::connect(const nats_options& opt) {
  std::unique_ptr<nats_bus> bus(new nats_bus());
  bus->opt_ = opt;
  bus->shown_url_ = redact_url(opt.url);
  auto made = make_nats_options(opt);
  if (!made) return made.err();
  natsOptions* o = *made;
  natsStatus s = NATS_OK;
  if ((s = natsOptions_SetReconnectedCB(o, nats_callbacks::on_reconnected,
                                        bus.get())) != NATS_OK ||
      (s = natsOptions_SetDisconnectedCB(o, nats_callbacks::on_disconnected,
                                         bus.get())) != NATS_OK ||
      (s = natsOptions_SetClosedCB(o, nats_callbacks::on_closed, bus.get())) !=
          NATS_OK ||
      (s = natsOptions_SetErrorHandler(o, nats_callbacks::on_error,
                                       bus.get())) != NATS_OK) {
    natsOptions_Destroy(o);
    return make_error(ec::io_error, "NATS " + bus->shown_url_ +
                                        ": options: " + natsStatus_GetText(s));
  }
  s = natsConnection_Connect(&bus->conn_, o);
  if (s != NATS_OK) {
    error e = nats_connect_error(s, opt);  // reads libnats' error stack
    natsOptions_Destroy(o);
    return e;
  }
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
  {
    std::lock_guard<std::mutex> guard(req_mu_);
    if (responses_) natsSubscription_Destroy(responses_);
    responses_ = nullptr;
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

status nats_bus::publish_reply(const std::string& reply,
                               const std::vector<uint8_t>& payload) {
  static const std::string inbox = "_INBOX.";
  if (reply.compare(0, inbox.size(), inbox) != 0) {
    const uint64_t n = refused_replies_.fetch_add(1) + 1;
    if ((n & (n - 1)) == 0)
      KVMESH_WARN(
          "NATS reply subject %s refused: answers go only to inboxes "
          "(_INBOX.>), and a request asked for one elsewhere (%llu so far; "
          "a client with a custom inbox prefix, or one trying to make this "
          "process publish for it)",
          reply.c_str(), static_cast<unsigned long long>(n));
    return make_error(ec::invalid_argument,
                      "reply subject " + reply + " is not an inbox (_INBOX.)");
  }
  return publish(reply, payload);
}

expected<uint64_t> nats_bus::subscribe(
    const std::string& subject, const std::string& queue, nats_handler h,
    std::pair<uint64_t, uint64_t> max_pending) {
  auto entry = std::make_shared<subscription>();
  entry->handler = std::move(h);
  auto* hold = new nats_callbacks::held(entry);
  natsStatus s =
      queue.empty()
          ? natsConnection_Subscribe(&entry->sub, conn_, subject.c_str(),
                                     nats_callbacks::on_message, hold)
          : natsConnection_QueueSubscribe(&entry->sub, conn_, subject.c_str(),
                                          queue.c_str(),
                                          nats_callbacks::on_message, hold);
  if (s != NATS_OK) {
    delete hold;
    return fail("subscribe to " + subject, s);
  }
  s = natsSubscription_SetOnCompleteCB(entry->sub, nats_callbacks::on_complete,
                                       hold);
  if (s == NATS_OK && max_pending.first > 0 && max_pending.second > 0)
    s = natsSubscription_SetPendingLimits(
        entry->sub,
        static_cast<int>(std::min<uint64_t>(max_pending.first, INT32_MAX)),
        static_cast<int>(std::min<uint64_t>(max_pending.second, INT32_MAX)));
  if (s != NATS_OK) {
    // Messages may be under way with `hold`: it is left to leak.
    (void)natsSubscription_Unsubscribe(entry->sub);
    natsSubscription_Destroy(entry->sub);
    return fail("subscribe to " + subject + ": completion callback or limits",
                s);
  }
  std::lock_guard<std::mutex> guard(mu_);
  const uint64_t id = next_++;
  subs_.emplace(id, std::move(entry));
  return id;
}

status nats_bus::unsubscribe(uint64_t id) {
  std::shared_ptr<subscription> entry;
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

status nats_bus::open_responses() {
  std::lock_guard<std::mutex> guard(req_mu_);
  if (responses_) return ok;
  natsInbox* inbox = nullptr;
  natsStatus s = natsInbox_Create(&inbox);
  if (s != NATS_OK) return fail("request inbox", s);
  const std::string prefix = std::string(inbox) + ".";
  natsInbox_Destroy(inbox);
  s = natsConnection_Subscribe(&responses_, conn_, (prefix + "*").c_str(),
                               nats_callbacks::on_response, this);
  if (s != NATS_OK) {
    responses_ = nullptr;
    return fail("subscribe to " + prefix + "*", s);
  }
  response_prefix_ = prefix;
  return ok;
}

void nats_bus::on_response(const std::string& subject, bool no_responders,
                           std::vector<uint8_t> payload) {
  std::shared_ptr<pending_request> p;
  {
    std::lock_guard<std::mutex> guard(req_mu_);
    if (subject.size() <= response_prefix_.size()) return;
    uint64_t id = 0;
    for (size_t i = response_prefix_.size(); i < subject.size(); ++i) {
      const char c = subject[i];
      if (c < '0' || c > '9') return;
      id = id * 10 + static_cast<uint64_t>(c - '0');
    }
    auto it = requests_.find(id);
    if (it == requests_.end()) return;  // late: its caller gave up
    p = it->second;
  }
  std::lock_guard<std::mutex> g(p->mu);
  if (p->done) return;  // the first reply counts
  p->done = true;
  p->no_responders = no_responders;
  p->payload = std::move(payload);
  p->cv.notify_all();
}

bool nats_bus::on_denied(const std::string& text) {
  const std::string subject = denied_subject(text);
  std::vector<std::shared_ptr<pending_request>> hit;
  {
    std::lock_guard<std::mutex> guard(req_mu_);
    if (auto it = confirmed_.find(subject); it != confirmed_.end()) {
      if (it->second.empty()) it->second = text;
      return true;  // confirm() tells its caller
    }
    const bool inbox =
        !response_prefix_.empty() && subject.rfind(response_prefix_, 0) == 0;
    for (auto& [id, p] : requests_)
      if (inbox || subject == p->subject) hit.push_back(p);
  }
  bool told = false;
  for (auto& p : hit) {
    std::lock_guard<std::mutex> g(p->mu);
    if (p->done) continue;
    p->denied = text;
    p->cv.notify_all();
    told = true;
  }
  return told;
}

// Not natsConnection_Request: a publish the server refuses would leave it
// waiting for its whole timeout, with "Timeout" as the only word. This
// one fails as soon as the server's Permissions Violation names the
// subject.
expected<std::vector<uint8_t>> nats_bus::request(
    const std::string& subject, const std::vector<uint8_t>& payload,
    std::chrono::milliseconds timeout) {
  if (auto st = open_responses(); !st) return st.err();
  auto p = std::make_shared<pending_request>();
  p->subject = subject;
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> guard(req_mu_);
    id = next_request_++;
    p->reply = response_prefix_ + std::to_string(id);
    requests_.emplace(id, p);
  }
  auto forget = [&] {
    std::lock_guard<std::mutex> guard(req_mu_);
    requests_.erase(id);
  };
  const natsStatus s = natsConnection_PublishRequest(
      conn_, subject.c_str(), p->reply.c_str(), payload.data(),
      static_cast<int>(payload.size()));
  if (s != NATS_OK) {
    forget();
    return fail("request on " + subject, s);
  }
  std::unique_lock<std::mutex> lock(p->mu);
  p->cv.wait_for(lock, timeout, [&] { return p->done || !p->denied.empty(); });
  const bool done = p->done;
  const bool none = p->no_responders;
  const std::string denied = p->denied;
  std::vector<uint8_t> out = std::move(p->payload);
  lock.unlock();
  forget();
  if (!done && !denied.empty()) {
    errors_.fetch_add(1);
    return make_error(ec::invalid_argument,
                      "request on " + subject +
                          ": permission denied: nats-server refused "
                          "this credential (" +
                          denied +
                          "); this needs the credential of "
                          "another role (docs/reliability.md)");
  }
  if (!done) return fail("request on " + subject, NATS_TIMEOUT);
  if (none) return fail("request on " + subject, NATS_NO_RESPONDERS);
  return out;
}

size_t nats_bus::max_payload() const {
  const int64_t n = natsConnection_GetMaxPayload(conn_);
  return n > 0 ? static_cast<size_t>(n) : 0;
}

bool nats_bus::connected() const {
  return conn_ && natsConnection_Status(conn_) == NATS_CONN_STATUS_CONNECTED;
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

status nats_bus::confirm(const std::string& subject,
                         std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> guard(req_mu_);
    confirmed_.emplace(subject, std::string());
  }
  const status flushed = flush(timeout);
  std::string denied;
  {
    std::lock_guard<std::mutex> guard(req_mu_);
    denied = confirmed_[subject];
  }
  // The reader thread keeps the violation as the connection's last error
  // before it reads the flush's answer; on_denied may run later, on
  // libnats' callback thread.
  const char* text = nullptr;
  if (denied.empty() &&
      natsConnection_GetLastError(conn_, &text) == NATS_NOT_PERMITTED && text &&
      denied_subject(text) == subject)
    denied = text;
  if (denied.empty()) return flushed;
  return make_error(ec::invalid_argument,
                    "permission denied: nats-server refused this credential (" +
                        denied +
                        "); this needs the credential of another role "
                        "(docs/reliability.md)");
}

}  // namespace kvmesh
