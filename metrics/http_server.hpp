// A minimal HTTP/1.1 server for Prometheus' scrapes: GET /metrics on a
// thread of its own, POSIX sockets.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/error.hpp"

namespace kvmesh::metrics {

struct http_server_options {
  // A numeric address or a host name to bind: 0.0.0.0 (every IPv4
  // interface), 127.0.0.1, ::, ...
  std::string address = "0.0.0.0";
  uint16_t port = 0;  // 0: any free port (port() says which)
  // A client gets this long to send its request and read the answer; one
  // connection is served at a time, so a stuck one must not keep
  // Prometheus out for longer.
  std::chrono::milliseconds io_timeout{5000};
};

// Serves `GET /metrics` (200, the body `render` returns, text format
// 0.0.4) and HEAD of it; any other path is 404, another method 405, a
// malformed request 400. One connection at a time, closed after each
// answer. Nothing else in the process waits for it: a slow scrape delays
// only the next scrape.
class http_server {
 public:
  using render_fn = std::function<std::string()>;
  // Told the status code of every answer (for a counter).
  using answered_fn = std::function<void(int status)>;

  // Binds and listens before returning, so that a port in use or a bad
  // address is an error here, naming the address.
  static expected<std::unique_ptr<http_server>> start(
      const http_server_options& opt, render_fn render,
      answered_fn answered = {});

  // Stops: the thread ends (a connection being served is cut) and the
  // socket closes.
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  uint16_t port() const { return port_; }

 private:
  http_server() = default;
  void run();
  void serve(int fd);
  // Whether all of `data` went out before the deadline (or a stop).
  bool send_all(int fd, const std::string& data,
                std::chrono::steady_clock::time_point deadline);

  http_server_options opt_;
  render_fn render_;
  answered_fn answered_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: written to stop the thread
  uint16_t port_ = 0;
  std::thread thread_;
};

// What the server answers to one request (exposed for tests): the status
// code, and for 200 whether the body is wanted (GET) or not (HEAD).
struct http_route {
  int status = 400;
  bool body = false;
  std::string reason;  // for an error: what was wrong
};
http_route route_request(const std::string& head);

}  // namespace kvmesh::metrics
