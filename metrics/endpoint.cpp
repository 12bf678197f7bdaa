// The endpoint: prometheus-cpp's exposer serves /metrics; the probes are
// answered in civetweb's begin_request callback, ahead of its handlers.
#include "metrics/endpoint.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include <cstring>
#include <map>
#include <mutex>

#include <CivetServer.h>
#include <civetweb.h>
#include <prometheus/exposer.h>

#include "core/log.hpp"

namespace kvmesh::metrics {

struct endpoint::probes {
  readiness_fn ready;
  answered_fn answered;
};

namespace {

// civetweb's callbacks get no pointer of ours, only the server's context:
// each endpoint's probes are found by it. An endpoint's context is made
// inside its exposer's constructor, on the thread that starts it.
std::mutex contexts_mu;
std::map<const mg_context*, std::shared_ptr<endpoint::probes>> contexts;
thread_local std::shared_ptr<endpoint::probes> starting;

std::shared_ptr<endpoint::probes> probes_of(const mg_connection* conn) {
  std::lock_guard<std::mutex> lock(contexts_mu);
  auto it = contexts.find(mg_get_context(conn));
  return it == contexts.end() ? nullptr : it->second;
}

void on_init(const mg_context* ctx) {
  std::lock_guard<std::mutex> lock(contexts_mu);
  if (starting) contexts[ctx] = starting;
}

void on_exit(const mg_context* ctx) {
  std::lock_guard<std::mutex> lock(contexts_mu);
  contexts.erase(ctx);
}

int answer(mg_connection* conn, int status, const char* reason,
           const std::string& body, bool head) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: %zu\r\nCache-Control: no-store\r\n%s"
            "Connection: close\r\n\r\n",
            status, reason, body.size(),
            status == 405 ? "Allow: GET, HEAD\r\n" : "");
  if (!head) mg_write(conn, body.data(), body.size());
  return status;
}

// 0: not a probe, civetweb goes on (the exposer's /metrics, or 404).
int on_request(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  const char* uri = info->local_uri ? info->local_uri : "";
  const bool health = std::strcmp(uri, "/healthz") == 0;
  const bool ready = std::strcmp(uri, "/readyz") == 0;
  if (!health && !ready) return 0;
  const bool head = std::strcmp(info->request_method, "HEAD") == 0;
  if (!head && std::strcmp(info->request_method, "GET") != 0)
    return answer(conn, 405, "Method Not Allowed",
                  std::string("method ") + info->request_method +
                      " is not allowed: GET or HEAD\n",
                  false);
  if (health) return answer(conn, 200, "OK", "ok\n", head);
  auto p = probes_of(conn);
  std::vector<std::string> why =
      p && p->ready ? p->ready() : std::vector<std::string>{"starting"};
  if (why.empty()) return answer(conn, 200, "OK", "ready\n", head);
  std::string body;
  for (const auto& w : why)
    body += "not ready: " + w + "\n";
  return answer(conn, 503, "Service Unavailable", body, head);
}

void on_end(const mg_connection* conn, int status) {
  auto p = probes_of(conn);
  // A request the exposer's handler served ends with the handler's "done"
  // (1), not a status: it answered 200, the one answer it has without
  // authentication.
  if (p && p->answered) p->answered(status < 100 ? 200 : status);
}

// civetweb's own complaints (a bad request line, a failed bind) go to the
// process's log rather than its stderr format.
int on_log(const mg_connection*, const char* message) {
  KVMESH_LOG("metrics endpoint: %s", message);
  return 1;
}

// civetweb's listening_ports entry for address:port; names resolved here,
// for civetweb takes numeric addresses only.
expected<std::string> listening(const endpoint_options& opt) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(opt.address.c_str(), nullptr, &hints, &found);
      rc != 0)
    return make_error(ec::invalid_argument,
                      "metrics: cannot resolve address '" + opt.address +
                          "': " + ::gai_strerror(rc));
  char host[NI_MAXHOST] = {};
  const bool v6 = found->ai_family == AF_INET6;
  const int rc = ::getnameinfo(found->ai_addr, found->ai_addrlen, host,
                               sizeof(host), nullptr, 0, NI_NUMERICHOST);
  ::freeaddrinfo(found);
  if (rc != 0)
    return make_error(ec::invalid_argument,
                      "metrics: cannot resolve address '" + opt.address +
                          "': " + ::gai_strerror(rc));
  const std::string port = std::to_string(opt.port);
  return v6 ? "[" + std::string(host) + "]:" + port
            : std::string(host) + ":" + port;
}

}  // namespace

expected<std::unique_ptr<endpoint>> endpoint::start(
    const endpoint_options& opt,
    std::shared_ptr<prometheus::Collectable> metrics, readiness_fn ready,
    answered_fn answered) {
  auto where = listening(opt);
  if (!where) return where.err();
  std::unique_ptr<endpoint> e(new endpoint);
  e->metrics_ = std::move(metrics);
  e->probes_ = std::make_shared<probes>();
  e->probes_->ready = std::move(ready);
  e->probes_->answered = std::move(answered);
  CivetCallbacks cb;
  cb.init_context = on_init;
  cb.exit_context = on_exit;
  cb.begin_request = on_request;
  cb.end_request = on_end;
  cb.log_message = on_log;
  starting = e->probes_;
  try {
    // Four threads: a scrape that waits on busy actors holds one.
    e->exposer_ = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", *where, "num_threads",
                                 "4"},
        &cb);
  } catch (const std::exception&) {
    starting.reset();
    return make_error(ec::io_error, "metrics: cannot listen on " +
                                        opt.address + ":" +
                                        std::to_string(opt.port) +
                                        " (in use, or not this host's)");
  }
  starting.reset();
  e->exposer_->RegisterCollectable(e->metrics_);
  const auto ports = e->exposer_->GetListeningPorts();
  e->port_ = ports.empty() ? opt.port : static_cast<uint16_t>(ports.front());
  return e;
}

endpoint::~endpoint() = default;

}  // namespace kvmesh::metrics
