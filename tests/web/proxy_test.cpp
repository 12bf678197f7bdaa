// Tests of web/proxy: an answer reaches the client as its upstream framed
// it (chunk sizes, extensions, split reads), ends where the upstream's
// framing says, and a break says why only where a chunk may begin.
#include "web/proxy.hpp"

#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using namespace std::chrono_literals;
using kvmesh::web::proxy_outcome;
using kvmesh::web::proxy_result;

// An upstream that answers one request with `pieces`, each its own write
// (a pause between them, so that each is its own read at the proxy), then
// closes; or, `silent`, waits for the proxy to close first.
class raw_upstream {
 public:
  explicit raw_upstream(std::vector<std::string> pieces, bool silent = false)
      : acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}),
        pieces_(std::move(pieces)),
        silent_(silent) {
    thread_ = std::thread([this] { serve(); });
  }
  ~raw_upstream() { thread_.join(); }
  unsigned short port() const { return acceptor_.local_endpoint().port(); }
  // The request the proxy sent, its head.
  const std::string& head() const { return head_; }

 private:
  void serve() {
    tcp::socket s(io_);
    acceptor_.accept(s);
    std::string in;
    beast::error_code ec;
    const size_t n =
        asio::read_until(s, asio::dynamic_buffer(in), "\r\n\r\n", ec);
    head_ = in.substr(0, n);
    for (const auto& p : pieces_) {
      asio::write(s, asio::buffer(p), ec);
      std::this_thread::sleep_for(30ms);
    }
    if (silent_) {
      // Until the proxy closes; a proxy that never does sees this end
      // after 10 s, and fails the test instead of hanging it.
      pollfd p{s.native_handle(), POLLIN, 0};
      ::poll(&p, 1, 10000);
    }
    s.shutdown(tcp::socket::shutdown_both, ec);
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::vector<std::string> pieces_;
  bool silent_;
  std::string head_;
  std::thread thread_;
};

struct relay_run {
  std::optional<proxy_result> result;
  int first_body_bytes = 0;
};

// Accepts one client, reads its request and relays it to `endpoint`.
asio::awaitable<void> serve_one(tcp::acceptor& front, std::string endpoint,
                                relay_run& run,
                                std::chrono::milliseconds idle_timeout) {
  beast::tcp_stream client(co_await front.async_accept(asio::use_awaitable));
  beast::flat_buffer buf;
  http::request<http::string_body> req;
  co_await http::async_read(client, buf, req, asio::use_awaitable);
  kvmesh::web::upstream_call call;
  call.endpoint = std::move(endpoint);
  call.name = "worker 0";
  kvmesh::web::proxy_options opt;
  opt.idle_timeout = idle_timeout;
  opt.first_body_byte = [&run] { ++run.first_body_bytes; };
  run.result =
      co_await kvmesh::web::proxy_request(client, buf, req, call, opt, nullptr);
  beast::error_code ec;
  client.socket().shutdown(tcp::socket::shutdown_both, ec);
}

// What a client reads through the proxy from an upstream sending `pieces`:
// the answer's bytes after its header, up to the proxy's close.
std::string through_proxy(const std::vector<std::string>& pieces,
                          relay_run& run, std::string* header = nullptr,
                          bool silent = false,
                          std::chrono::milliseconds idle_timeout = 10s) {
  raw_upstream up(pieces, silent);
  asio::io_context io;
  tcp::acceptor front(io, {asio::ip::make_address("127.0.0.1"), 0});
  const auto port = front.local_endpoint().port();
  asio::co_spawn(
      io,
      serve_one(front, "http://127.0.0.1:" + std::to_string(up.port()), run,
                idle_timeout),
      asio::detached);
  std::thread t([&io] { io.run(); });
  asio::io_context cio;
  tcp::socket c(cio);
  c.connect({asio::ip::make_address("127.0.0.1"), port});
  const std::string ask =
      "GET /v1/x HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n";
  asio::write(c, asio::buffer(ask));
  std::string got;
  beast::error_code ec;
  asio::read(c, asio::dynamic_buffer(got), ec);  // to the proxy's close
  t.join();
  const size_t end = got.find("\r\n\r\n");
  if (end == std::string::npos) return {};
  if (header) *header = got.substr(0, end + 4);
  return got.substr(end + 4);
}

const std::string chunked_head =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    "Transfer-Encoding: chunked\r\n\r\n";

TEST(Proxy, a_chunked_answer_keeps_its_framing_and_ends_where_it_says) {
  relay_run run;
  std::string header;
  // The header with the first chunk's start, a chunk size split across
  // two reads, an extension, and bytes after the last chunk that are not
  // the answer's.
  const std::string body =
      through_proxy({chunked_head + "5;x=1\r\nhel", "lo\r\n1",
                     "0\r\n0123456789abcdef\r\n", "0\r\n\r\nNOT-THE-ANSWER"},
                    run, &header);
  EXPECT_EQ(body, "5;x=1\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n");
  EXPECT_NE(header.find("Transfer-Encoding: chunked"), std::string::npos)
      << header;
  ASSERT_TRUE(run.result);
  EXPECT_EQ(run.result->outcome, proxy_outcome::done) << run.result->why;
  EXPECT_EQ(run.first_body_bytes, 1);
}

TEST(Proxy, an_answer_of_known_length_ends_at_that_length) {
  relay_run run;
  std::string header;
  const std::string body =
      through_proxy({"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     "Content-Length: 10\r\n\r\n01234",
                     "56789NOT-THE-ANSWER"},
                    run, &header);
  EXPECT_EQ(body, "0123456789");
  EXPECT_NE(header.find("Content-Length: 10"), std::string::npos) << header;
  ASSERT_TRUE(run.result);
  EXPECT_EQ(run.result->outcome, proxy_outcome::done) << run.result->why;
  EXPECT_EQ(run.first_body_bytes, 1);
}

TEST(Proxy, a_stream_broken_between_chunks_ends_with_an_error_event) {
  relay_run run;
  const std::string body =
      through_proxy({chunked_head + "6\r\ndata:1\r\n"}, run);
  const std::string kept = "6\r\ndata:1\r\n";
  ASSERT_EQ(body.substr(0, kept.size()), kept) << body;
  // One more chunk, whole, with the error; never the last chunk.
  const std::string rest = body.substr(kept.size());
  EXPECT_NE(rest.find("\r\ndata: {\"error\""), std::string::npos) << rest;
  EXPECT_EQ(rest.substr(rest.size() - 4), "\n\n\r\n") << rest;
  EXPECT_EQ(rest.find("\r\n0\r\n\r\n"), std::string::npos) << rest;
  ASSERT_TRUE(run.result);
  EXPECT_EQ(run.result->outcome, proxy_outcome::after_first);
}

TEST(Proxy, a_stream_broken_inside_a_chunk_adds_nothing_to_it) {
  relay_run run;
  // Anything after these bytes would be read as the chunk's own data.
  const std::string body =
      through_proxy({chunked_head + "10\r\ndata: {\"par"}, run);
  EXPECT_EQ(body, "10\r\ndata: {\"par");
  ASSERT_TRUE(run.result);
  EXPECT_EQ(run.result->outcome, proxy_outcome::after_first);
}

TEST(Proxy, a_worker_silent_for_the_idle_timeout_is_cut_off) {
  relay_run run;
  // It keeps its connection open and sends nothing more: only the
  // proxy's timeout ends the answer.
  const std::string body = through_proxy({chunked_head + "6\r\ndata:1\r\n"},
                                         run, nullptr, true, 300ms);
  EXPECT_EQ(body.substr(0, 11), "6\r\ndata:1\r\n");
  ASSERT_TRUE(run.result);
  EXPECT_EQ(run.result->outcome, proxy_outcome::after_first);
  EXPECT_NE(run.result->why.find("timeout"), std::string::npos)
      << run.result->why;
}

}  // namespace
