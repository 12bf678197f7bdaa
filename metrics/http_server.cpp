// The metrics endpoint's HTTP server: one listening socket, one thread,
// one connection at a time.
#include "metrics/http_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kvmesh::metrics {

namespace {

using steady = std::chrono::steady_clock;

// Requests are a line and a few headers; more is not a scrape.
constexpr size_t max_request_bytes = 8192;
// How long an answered connection waits for the client to close.
constexpr auto lingering = std::chrono::milliseconds(200);

const char* reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    default:
      return "Error";
  }
}

int remaining_ms(steady::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - steady::now())
                        .count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits until `fd` is ready for `events`; false on the deadline or when
// `wake` (the stop pipe) became readable.
bool wait_for(int fd, short events, int wake, steady::time_point deadline) {
  while (true) {
    pollfd p[2] = {{fd, events, 0}, {wake, POLLIN, 0}};
    const int n = ::poll(p, 2, remaining_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (p[1].revents != 0) return false;
    return true;
  }
}

}  // namespace

http_route route_request(const std::string& head) {
  const size_t eol = head.find("\r\n");
  const std::string line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 =
      sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  if (sp1 == 0 || sp2 == std::string::npos ||
      line.find(' ', sp2 + 1) != std::string::npos)
    return {400, false, "the request line is not METHOD TARGET VERSION"};
  const std::string method = line.substr(0, sp1);
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string version = line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0")
    return {400, false, "unsupported version '" + version + "'"};
  if (target.empty() || target[0] != '/')
    return {400, false, "the target is not a path"};
  target = target.substr(0, target.find('?'));  // scrapers may add params
  if (target != "/metrics") return {404, false, "only /metrics is served here"};
  if (method == "GET") return {200, true, {}};
  if (method == "HEAD") return {200, false, {}};
  return {405, false, "method " + method + " is not allowed: GET /metrics"};
}

expected<std::unique_ptr<http_server>> http_server::start(
    const http_server_options& opt, render_fn render, answered_fn answered) {
  const std::string where = opt.address + ":" + std::to_string(opt.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(opt.port);
  if (int rc = ::getaddrinfo(opt.address.c_str(), port.c_str(), &hints, &found);
      rc != 0)
    return make_error(ec::invalid_argument,
                      "metrics: cannot resolve address '" + opt.address +
                          "': " + ::gai_strerror(rc));
  std::unique_ptr<http_server> s(new http_server);
  s->opt_ = opt;
  s->render_ = std::move(render);
  s->answered_ = std::move(answered);
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    // A restarted process may bind again while the last one's connections
    // linger in TIME_WAIT.
    int one = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
      s->listen_fd_ = fd;
      break;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (s->listen_fd_ < 0)
    return make_error(ec::io_error,
                      "metrics: cannot listen on " + where + ": " + why);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (::getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) ==
      0)
    s->port_ = bound.ss_family == AF_INET
                   ? ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port)
                   : ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  if (::pipe2(s->wake_, O_CLOEXEC) != 0)
    return make_error(ec::io_error,
                      "metrics: pipe: " + std::string(std::strerror(errno)));
  s->thread_ = std::thread([p = s.get()] { p->run(); });
  return s;
}

http_server::~http_server() {
  if (thread_.joinable()) {
    const char stop = 1;
    while (::write(wake_[1], &stop, 1) < 0 && errno == EINTR)
      ;
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_[0], wake_[1]})
    if (fd >= 0) ::close(fd);
}

void http_server::run() {
  while (true) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    const int n = ::poll(p, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || p[1].revents != 0) return;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the client gave up already, or no fds: retry
    serve(fd);
    ::close(fd);
  }
}

bool http_server::send_all(int fd, const std::string& data,
                           steady::time_point deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    if (!wait_for(fd, POLLOUT, wake_[0], deadline)) return false;
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return false;
    }
    sent += static_cast<size_t>(n);
  }
  return true;
}

void http_server::serve(int fd) {
  const auto deadline = steady::now() + opt_.io_timeout;
  std::string head;
  char buf[2048];
  bool complete = false;
  while (head.size() < max_request_bytes) {
    if (!wait_for(fd, POLLIN, wake_[0], deadline)) return;  // slow or stop
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return;
    }
    if (n == 0) break;  // the client closed its side
    head.append(buf, static_cast<size_t>(n));
    if (head.find("\r\n\r\n") != std::string::npos) {
      complete = true;
      break;
    }
  }
  http_route r = complete ? route_request(head)
                          : http_route{400, false,
                                       head.size() >= max_request_bytes
                                           ? "the request is too large"
                                           : "the request ended early"};
  std::string body;
  std::string type = "text/plain; charset=utf-8";
  if (r.status == 200) {
    body = render_();
    type = "text/plain; version=0.0.4; charset=utf-8";
  } else {
    body = std::to_string(r.status) + " " + reason_phrase(r.status) + ": " +
           r.reason + "\n";
  }
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " +
                    reason_phrase(r.status) + "\r\nContent-Type: " + type +
                    "\r\nContent-Length: " + std::to_string(body.size()) +
                    "\r\nConnection: close\r\n";
  if (r.status == 405) out += "Allow: GET, HEAD\r\n";
  out += "\r\n";
  if (r.status != 200 || r.body) out += body;
  if (answered_) answered_(r.status);
  if (!send_all(fd, out, deadline)) return;
  // Closing with unread input would reset the connection, and the client
  // could lose the answer: say we are done, then read what it still sends
  // (briefly).
  ::shutdown(fd, SHUT_WR);
  const auto linger = std::min(deadline, steady::now() + lingering);
  size_t drained = 0;
  while (drained < max_request_bytes * 8 &&
         wait_for(fd, POLLIN, wake_[0], linger)) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
    if (n > 0) drained += static_cast<size_t>(n);
  }
}

}  // namespace kvmesh::metrics
