// Tests of metrics/http_server: GET /metrics and what else a client may
// send, over real loopback sockets.
#include "metrics/http_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvmesh::metrics {
namespace {

using namespace std::chrono_literals;

int connect_to(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` and reads until the server closes (at most 5 s).
std::string exchange(uint16_t port, const std::string& request) {
  const int fd = connect_to(port);
  if (fd < 0) return "connect failed";
  (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::string status_line(const std::string& response) {
  return response.substr(0, response.find("\r\n"));
}

std::string body_of(const std::string& response) {
  const size_t p = response.find("\r\n\r\n");
  return p == std::string::npos ? "" : response.substr(p + 4);
}

class http_server_test : public ::testing::Test {
 protected:
  void SetUp() override {
    http_server_options o;
    o.address = "127.0.0.1";
    o.io_timeout = 300ms;
    auto s = http_server::start(
        o,
        [this] {
          ++renders;
          return std::string("kvmesh_up 1\n");
        },
        [this](int code) {
          std::lock_guard<std::mutex> g(mu);
          codes.push_back(code);
        });
    ASSERT_TRUE(s) << s.err().message;
    server = std::move(*s);
    ASSERT_NE(server->port(), 0);
  }

  std::unique_ptr<http_server> server;
  std::atomic<int> renders{0};
  std::mutex mu;
  std::vector<int> codes;
};

TEST_F(http_server_test, get_metrics_is_the_text_format) {
  const auto r = exchange(server->port(),
                          "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: "
                          "text/plain\r\n\r\n");
  EXPECT_EQ(status_line(r), "HTTP/1.1 200 OK");
  EXPECT_NE(
      r.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
      std::string::npos);
  EXPECT_NE(r.find("Content-Length: 12\r\n"), std::string::npos);
  EXPECT_EQ(body_of(r), "kvmesh_up 1\n");
  EXPECT_EQ(renders, 1);
  // Query parameters (some scrapers add them) and HTTP/1.0 are fine.
  EXPECT_EQ(status_line(exchange(server->port(),
                                 "GET /metrics?name[]=x HTTP/1.0\r\n\r\n")),
            "HTTP/1.1 200 OK");
  std::lock_guard<std::mutex> g(mu);
  EXPECT_EQ(codes, (std::vector<int>{200, 200}));
}

TEST_F(http_server_test, head_has_no_body) {
  const auto r = exchange(server->port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(status_line(r), "HTTP/1.1 200 OK");
  EXPECT_NE(r.find("Content-Length: 12\r\n"), std::string::npos);
  EXPECT_EQ(body_of(r), "");
}

TEST_F(http_server_test, other_paths_methods_and_garbage_are_refused) {
  auto r = exchange(server->port(), "GET / HTTP/1.1\r\n\r\n");
  EXPECT_EQ(status_line(r), "HTTP/1.1 404 Not Found");
  EXPECT_NE(body_of(r).find("only /metrics"), std::string::npos);
  r = exchange(server->port(), "GET /metricsx HTTP/1.1\r\n\r\n");
  EXPECT_EQ(status_line(r), "HTTP/1.1 404 Not Found");
  r = exchange(server->port(), "POST /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(status_line(r), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_NE(r.find("Allow: GET, HEAD\r\n"), std::string::npos);
  r = exchange(server->port(), "hello\r\n\r\n");
  EXPECT_EQ(status_line(r), "HTTP/1.1 400 Bad Request");
  r = exchange(server->port(), "GET /metrics SPDY/3\r\n\r\n");
  EXPECT_EQ(status_line(r), "HTTP/1.1 400 Bad Request");
  r = exchange(server->port(), std::string(20000, 'a'));
  EXPECT_EQ(status_line(r), "HTTP/1.1 400 Bad Request");
  EXPECT_NE(body_of(r).find("too large"), std::string::npos);
  EXPECT_EQ(renders, 0);
  std::lock_guard<std::mutex> g(mu);
  EXPECT_EQ(codes, (std::vector<int>{404, 404, 405, 400, 400, 400}));
}

TEST_F(http_server_test, a_silent_client_is_dropped_and_the_next_served) {
  const int idle = connect_to(server->port());
  ASSERT_GE(idle, 0);
  const auto start = std::chrono::steady_clock::now();
  const auto r = exchange(server->port(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(status_line(r), "HTTP/1.1 200 OK");
  // Served after the idle one's io_timeout (300 ms), not never.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  ::close(idle);
}

TEST_F(http_server_test, stopping_cuts_a_connection_being_read) {
  const int idle = connect_to(server->port());
  ASSERT_GE(idle, 0);
  std::this_thread::sleep_for(50ms);  // the server waits on it now
  const auto start = std::chrono::steady_clock::now();
  server.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 250ms);
  ::close(idle);
}

TEST(http_server, a_port_in_use_is_an_error_naming_it) {
  http_server_options o;
  o.address = "127.0.0.1";
  auto first = http_server::start(o, [] { return std::string(); });
  ASSERT_TRUE(first);
  o.port = (*first)->port();
  auto second = http_server::start(o, [] { return std::string(); });
  ASSERT_FALSE(second);
  EXPECT_EQ(second.err().code, ec::io_error);
  EXPECT_NE(second.err().message.find("127.0.0.1:" + std::to_string(o.port)),
            std::string::npos)
      << second.err().message;
}

TEST(http_server, a_bad_address_is_an_invalid_argument) {
  http_server_options o;
  o.address = "not an address";
  auto s = http_server::start(o, [] { return std::string(); });
  ASSERT_FALSE(s);
  EXPECT_EQ(s.err().code, ec::invalid_argument);
  EXPECT_NE(s.err().message.find("not an address"), std::string::npos);
}

TEST(http_server, route_request_reads_the_request_line) {
  EXPECT_EQ(route_request("GET /metrics HTTP/1.1\r\n\r\n").status, 200);
  EXPECT_TRUE(route_request("GET /metrics HTTP/1.1\r\n\r\n").body);
  EXPECT_FALSE(route_request("HEAD /metrics HTTP/1.1\r\n\r\n").body);
  EXPECT_EQ(route_request("GET  /metrics HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(route_request("GET /metrics HTTP/1.1 x\r\n\r\n").status, 400);
  EXPECT_EQ(route_request("GET metrics HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(route_request("DELETE /metrics HTTP/1.1\r\n\r\n").status, 405);
}

}  // namespace
}  // namespace kvmesh::metrics
