// Tests of cluster/openai_front: many streams held open at once on the
// front's default threads, a client's hang-up ending its request for the
// WORKER and closing the engine's connection, the front's end ending every
// request, an unreachable engine, the headers passed on.
#include "cluster/openai_front.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

#include "actors/actors.hpp"
#include "engines/openai.hpp"

namespace kvmesh::test {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using namespace std::chrono_literals;

template <class F>
bool eventually(F pred, std::chrono::milliseconds limit = 20000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

// A stand-in engine that holds every stream: it answers each request with
// an event-stream header and one event at once (or, `prefilling`, nothing
// at all), then sends nothing more until its client closes the connection,
// which it counts (vLLM aborts a request then).
class holding_engine {
 public:
  explicit holding_engine(bool prefilling = false) : prefilling_(prefilling) {
    acceptor_.open(tcp::v4());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen(asio::socket_base::max_listen_connections);
    port_ = acceptor_.local_endpoint().port();
    asio::co_spawn(io_, accept(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~holding_engine() {
    io_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int held() const { return held_; }
  int closed() const { return closed_; }
  // The headers of the last request that came.
  http::fields last_headers() {
    std::lock_guard<std::mutex> g(mu_);
    return last_;
  }

 private:
  asio::awaitable<void> accept() {
    for (;;) {
      beast::error_code ec;
      tcp::socket s = co_await acceptor_.async_accept(
          asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      asio::co_spawn(io_, serve(std::move(s)), asio::detached);
    }
  }
  asio::awaitable<void> serve(tcp::socket s) {
    beast::error_code ec;
    beast::flat_buffer b;
    http::request<http::string_body> req;
    co_await http::async_read(s, b, req,
                              asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    {
      std::lock_guard<std::mutex> g(mu_);
      last_ = req.base();
    }
    static const std::string event = "data: {\"choices\":[{\"text\":\"a\"}]}\n\n";
    char size[16];
    std::snprintf(size, sizeof size, "%zx", event.size());
    const std::string out =
        prefilling_ ? std::string()
                    : "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n" +
                          std::string(size) + "\r\n" + event + "\r\n";
    co_await asio::async_write(s, asio::buffer(out),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    ++held_;
    std::array<char, 512> sink;
    for (;;) {
      co_await s.async_read_some(asio::buffer(sink),
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
    }
    --held_;
    ++closed_;
  }

  bool prefilling_;
  asio::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> held_{0};
  std::atomic<int> closed_{0};
  std::mutex mu_;
  http::fields last_;
};

// A blocking client socket with a read deadline.
class client {
 public:
  explicit client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~client() { close(); }
  client(const client&) = delete;
  client& operator=(const client&) = delete;
  bool send(const std::string& bytes) {
    return ok_ && ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
                      static_cast<ssize_t>(bytes.size());
  }
  // Reads until `what` came (true) or the deadline, a close or an error.
  bool read_until(const std::string& what) {
    char buf[4096];
    while (got_.find(what) == std::string::npos) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return false;
      got_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  // Reads to the end of the connection.
  std::string read_all() {
    read_until("\xff\xff never");
    return got_;
  }
  const std::string& got() const { return got_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  std::string got_;
};

std::string post(const std::string& path, const std::string& body,
                 const std::string& extra_headers = {}) {
  return "POST " + path + " HTTP/1.1\r\nHost: front\r\n" +
         "Content-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

const std::string stream_body =
    R"({"model": "m", "prompt": [1, 2, 3, 4, 5, 6, 7, 8], "max_tokens": 4,)"
    R"( "stream": true})";

// GET /kvmesh/stats of the front on `port`, parsed; null on failure.
nlohmann::json front_stats(int port) {
  client c(port);
  if (!c.send("GET /kvmesh/stats HTTP/1.1\r\nHost: front\r\nConnection: "
              "close\r\n\r\n"))
    return nullptr;
  const std::string all = c.read_all();
  const size_t at = all.find("\r\n\r\n");
  if (all.compare(0, 12, "HTTP/1.1 200") != 0 || at == std::string::npos)
    return nullptr;
  return nlohmann::json::parse(all.substr(at + 4), nullptr, false);
}

class openai_front_test : public ::testing::Test {
 protected:
  void SetUp() override {
    // Four sockets a stream in this one process: the client's, the front's
    // two and the engine's.
    rlimit r{};
    ::getrlimit(RLIMIT_NOFILE, &r);
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
    register_types(cfg_);
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    engine_worker_options wo;
    wo.state.block_tokens = 4;
    wo.state.gpu_blocks = 1000000;
    auto w = spawn_engine_worker(*sys_, wo);
    ASSERT_TRUE(w) << w.err().message;
    worker_ = *w;
  }
  void TearDown() override {
    caf::anon_send_exit(worker_, caf::exit_reason::user_shutdown);
    sys_.reset();
  }
  std::unique_ptr<openai_front> front(const std::string& engine_url,
                                      int dp_rank = -1) {
    openai_front_options o;
    o.host = "127.0.0.1";
    o.engine_url = engine_url;
    o.dp_rank = dp_rank;
    o.block_tokens = 4;
    o.worker = worker_;
    auto f = openai_front::start(*sys_, o);
    EXPECT_TRUE(f) << f.err().message;
    return f ? std::move(*f) : nullptr;
  }
  worker_status status() {
    caf::scoped_actor self{*sys_};
    worker_status out;
    self->request(worker_, 2s, status_atom::value)
        .receive([&](const worker_status& s) { out = s; }, [&](caf::error&) {});
    return out;
  }

  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  engine_worker_actor worker_;
};

// More streams than the old front's 64 threads, on the default 2: each gets
// its first event while all stay open; the WORKER sees them all running.
TEST_F(openai_front_test, holds_300_streams_on_its_default_threads) {
  constexpr int streams = 300;
  holding_engine engine;
  auto f = front(engine.url());
  ASSERT_TRUE(f);
  std::vector<std::unique_ptr<client>> clients;
  for (int i = 0; i < streams; ++i) {
    clients.push_back(std::make_unique<client>(f->port()));
    ASSERT_TRUE(clients.back()->send(post("/v1/completions", stream_body)))
        << "stream " << i;
  }
  for (int i = 0; i < streams; ++i)
    ASSERT_TRUE(clients[i]->read_until("data: ")) << "stream " << i;
  EXPECT_EQ(engine.held(), streams);
  ASSERT_TRUE(eventually([&] {
    auto s = front_stats(f->port());
    return s.is_object() && s["worker"]["running"] == streams &&
           s["worker"]["bypassed"] == streams &&
           s["front"]["requests"] == streams;
  })) << front_stats(f->port()).dump();

  // One client hangs up mid-stream: its engine connection closes at once
  // and the WORKER hears its end; the others stream on.
  clients[0]->close();
  ASSERT_TRUE(eventually([&] { return engine.closed() == 1; }))
      << engine.closed();
  ASSERT_TRUE(eventually([&] {
    auto s = front_stats(f->port());
    return s.is_object() && s["worker"]["completed"] == 1 &&
           s["worker"]["running"] == streams - 1 &&
           s["front"]["client_gone"] == 1;
  })) << front_stats(f->port()).dump();
  EXPECT_EQ(engine.held(), streams - 1);

  // The front's end ends the rest: engine connections closed, every
  // request's end told.
  f.reset();
  ASSERT_TRUE(eventually([&] { return engine.closed() == streams; }))
      << engine.closed();
  ASSERT_TRUE(eventually([&] {
    auto s = status();
    return s.completed == static_cast<uint64_t>(streams) && s.running == 0 &&
           s.waiting == 0;
  }));
}

// A client that hangs up while the engine prefills (no byte of the answer
// yet): the engine's connection closes, and the WORKER's queued work for
// it goes with its end.
TEST_F(openai_front_test, a_hang_up_before_the_first_byte_cuts_the_request) {
  holding_engine engine(true);
  auto f = front(engine.url());
  ASSERT_TRUE(f);
  client c(f->port());
  ASSERT_TRUE(c.send(post("/v1/completions", stream_body)));
  ASSERT_TRUE(eventually([&] { return engine.held() == 1; }));
  ASSERT_TRUE(eventually([&] {
    auto s = status();
    return s.waiting == 1 && s.queued > 0;
  }));
  c.close();
  ASSERT_TRUE(eventually([&] { return engine.closed() == 1; }));
  ASSERT_TRUE(eventually([&] {
    auto s = status();
    return s.completed == 1 && s.waiting == 0 && s.queued == 0;
  }));
}

// The routed request's id comes back; the engine gets the client's
// Authorization, Accept and X-Request-Id, the rank and JSON, nothing else.
TEST_F(openai_front_test, passes_the_engine_its_headers_and_the_rank) {
  holding_engine engine;
  auto f = front(engine.url(), 3);
  ASSERT_TRUE(f);
  client c(f->port());
  ASSERT_TRUE(c.send(post("/v1/completions", stream_body,
                          "Authorization: Bearer k\r\nAccept: */*\r\n"
                          "X-Request-Id: r-1\r\nX-Other: no\r\n"
                          "X-Kvmesh-Request-Id: 42\r\n")));
  ASSERT_TRUE(c.read_until("data: "));
  const http::fields h = engine.last_headers();
  EXPECT_EQ(h["Authorization"], "Bearer k");
  EXPECT_EQ(h["Accept"], "*/*");
  EXPECT_EQ(h["X-Request-Id"], "r-1");
  EXPECT_EQ(h["X-data-parallel-rank"], "3");
  EXPECT_EQ(h["Content-Type"], "application/json");
  EXPECT_EQ(h.count("X-Other"), 0u);
  EXPECT_EQ(h.count("X-Kvmesh-Request-Id"), 0u);
}

// The answer's header names the request's id for the WORKER.
TEST_F(openai_front_test, the_answer_names_the_request) {
  holding_engine engine;
  auto f = front(engine.url());
  ASSERT_TRUE(f);
  client c(f->port());
  ASSERT_TRUE(c.send(post("/v1/completions", stream_body,
                          "X-Kvmesh-Request-Id: 42\r\n")));
  ASSERT_TRUE(c.read_until("data: "));
  const std::string head =
      c.got().substr(0, c.got().find("\r\n\r\n") + 2);
  EXPECT_NE(head.find("\r\nX-Kvmesh-Request-Id: 42\r\n"), std::string::npos)
      << head;
  EXPECT_NE(head.find("\r\nTransfer-Encoding: chunked"), std::string::npos)
      << head;
}

// No engine: 502 with the header a gateway routes again on; the request
// ends for the WORKER.
TEST_F(openai_front_test, an_unreachable_engine_is_a_502) {
  int port = 0;
  {
    holding_engine gone;  // a port that was free a moment ago
    port = std::stoi(gone.url().substr(gone.url().rfind(':') + 1));
  }
  auto f = front("http://127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(f);
  client c(f->port());
  ASSERT_TRUE(c.send(post("/v1/completions", stream_body)));
  const std::string all = c.read_all();
  EXPECT_EQ(all.compare(0, 12, "HTTP/1.1 502"), 0) << all;
  EXPECT_NE(all.find(std::string(engine_unreachable_header) + ": 1"),
            std::string::npos)
      << all;
  ASSERT_TRUE(eventually([&] {
    auto s = front_stats(f->port());
    return s.is_object() && s["front"]["unreachable"] == 1 &&
           s["worker"]["completed"] == 1;
  })) << front_stats(f->port()).dump();
}

}  // namespace
}  // namespace kvmesh::test
