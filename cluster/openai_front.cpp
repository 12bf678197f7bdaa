// The OpenAI-compatible front (openai_front.hpp) on Boost.Beast: a small
// io_context pool, one coroutine per connection; a completion is relayed
// to the engine byte for byte by web::proxy_request while its client is
// watched, and the WORKER hears its arrival, first body byte and end.
#include "cluster/openai_front.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <caf/event_based_actor.hpp>
#include <nlohmann/json.hpp>

#include "core/log.hpp"
#include "engines/kv_mirror.hpp"
#include "engines/openai.hpp"
#include "messages/json.hpp"
#include "web/callback_gate.hpp"
#include "web/proxy.hpp"
#include "web/request.hpp"
#include "web/respond.hpp"
#include "web/upstream.hpp"

namespace kvmesh {

status check_engine_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0)
    return make_error(ec::invalid_argument,
                      "'" + url + "' is not http://HOST[:PORT]");
  const std::string rest = url.substr(scheme.size());
  if (rest.empty() || rest.find_first_of("/?# ") != std::string::npos)
    return make_error(ec::invalid_argument,
                      "'" + url + "' is not http://HOST[:PORT] (no path)");
  return ok;
}

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

// A prompt of megabytes passes; a body beyond this is no request.
constexpr size_t max_body_bytes = size_t{64} << 20;
// Longest wait for a connection's next request (a gateway sends one per
// connection).
constexpr std::chrono::seconds client_idle{60};
// Longest write of the front's own answers.
constexpr std::chrono::seconds write_timeout{30};
constexpr std::chrono::seconds connect_timeout{5};
// The engine's other calls are quick ones (its models, health, tokenizer).
constexpr std::chrono::seconds get_timeout{10};
constexpr std::chrono::seconds post_timeout{30};
constexpr const char* server_name = "kvmesh-front";

// One request's life as the WORKER must hear it: arrival (sent before),
// first token once, end once, whatever way the request goes (its
// coroutine's frame is destroyed with the front, at the latest).
class tracked {
 public:
  tracked(engine_worker_actor w, uint64_t id) : w_(std::move(w)), id_(id) {}
  ~tracked() { end(); }
  tracked(const tracked&) = delete;
  tracked& operator=(const tracked&) = delete;
  void first() {
    if (first_) return;
    first_ = true;
    caf::anon_send(w_, first_atom::value, id_);
  }
  void end() {
    if (ended_) return;
    ended_ = true;
    caf::anon_send(w_, done_atom::value, id_);
  }

 private:
  engine_worker_actor w_;
  uint64_t id_;
  bool first_ = false;  // one coroutine, one strand: no race
  bool ended_ = false;
};

// The engine did not answer a byte: 502, said in a header too, so that a
// gateway routes the request again elsewhere.
web::answer engine_unreachable(const std::string& why) {
  web::answer a;
  a.status = 502;
  a.server = server_name;
  a.body =
      nlohmann::json{
          {"error",
           {{"message", why}, {"type", "kvmesh_front"}, {"code", 502}}}}
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  a.headers.emplace_back(engine_unreachable_header, "1");
  return a;
}

bool parse_id(std::string_view text, uint64_t& out) {
  if (text.empty() || text.size() > 20 ||
      text.find_first_not_of("0123456789") != std::string_view::npos)
    return false;
  try {
    out = std::stoull(std::string(text));
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// Whether the peer of `fd` closed the connection (or it failed): a client
// gone while the gateway routed is not passed on at all. Bytes waiting (a
// pipelined request) are not a hang-up.
bool client_gone(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  char c;
  return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

std::string_view path_of(std::string_view target) {
  return target.substr(0, target.find('?'));
}

// The WORKER's part of /kvmesh/stats; null when it did not answer.
nlohmann::ordered_json worker_json(const engine_worker_stats& s) {
  const worker_status& w = s.status;
  nlohmann::ordered_json faults;
  for (size_t i = 0; i < mirror_fault_count; ++i)
    faults[to_string(static_cast<mirror_fault>(i))] = s.mirror_faults[i];
  nlohmann::ordered_json out = worker_load_json(w);
  out["waiting"] = w.waiting;
  out["running"] = w.running;
  out["completed"] = w.completed;
  out["kv_batches"] = s.kv_batches;
  out["resyncs"] = s.resyncs;
  out["abandoned"] = s.abandoned;
  out["bypassed"] = s.bypassed;
  out["unreported"] = s.unreported;
  out["stray_progress"] = s.stray_progress;
  out["approximate"] = s.approximate;
  out["mirror_faults"] = faults;
  return out;
}

nlohmann::ordered_json engine_json(const engine_worker_stats& s) {
  return {{"answering", s.metrics.answering},
          {"has_metrics", s.metrics.has_metrics},
          {"waiting", s.metrics.waiting},
          {"running", s.metrics.running},
          {"kv_usage", s.metrics.kv_usage},
          {"gpu_blocks", s.metrics.gpu_blocks}};
}

using stats_answer = std::optional<engine_worker_stats>;

// Asks the WORKER for its counters from an actor of its own, so that no
// I/O thread blocks on it. A plain function (see web/callback_gate.hpp).
web::callback_start<stats_answer> stats_call(caf::actor_system& sys,
                                             engine_worker_actor worker) {
  return [&sys, worker](std::function<void(stats_answer)> done) {
    sys.spawn([worker, done](caf::event_based_actor* self) {
      self->request(worker, std::chrono::seconds(2), get_atom::value,
                    stats_atom::value)
          .then(
              [self, done](const engine_worker_stats& s) {
                done(s);
                self->quit();
              },
              [self, done](caf::error&) {
                done(std::nullopt);
                self->quit();
              });
    });
  };
}

}  // namespace

struct openai_front::impl {
  caf::actor_system* sys = nullptr;
  openai_front_options opt;
  std::atomic<uint64_t> next_local{1};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> unreachable{0};
  std::atomic<uint64_t> unparsed{0};
  std::atomic<uint64_t> client_gone_count{0};  // clients that went first
  // Declared before the io_context: a coroutine frame destroyed with it
  // may still hold a callback of the gate's.
  web::callback_gate gate;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::vector<std::thread> threads;
  int port = 0;

  explicit impl(size_t n) : io(static_cast<int>(n)) {}

  asio::awaitable<void> accept_loop();
  asio::awaitable<void> connection(tcp::socket socket);
  // Each answers `req` and says whether the connection serves another.
  asio::awaitable<bool> completion(beast::tcp_stream& client,
                                   beast::flat_buffer& buffer,
                                   const http::request<http::string_body>& req,
                                   bool chat);
  // Any other call passed to the engine as it is, not followed.
  asio::awaitable<bool> pass(beast::tcp_stream& client,
                             beast::flat_buffer& buffer,
                             const http::request<http::string_body>& req,
                             std::chrono::milliseconds timeout);
  asio::awaitable<bool> stats(beast::tcp_stream& client, bool keep);
  // The engine's call of `req`: the client's Authorization, Accept and
  // X-Request-Id, and the rank of a data-parallel engine.
  web::upstream_call engine_call(const http::request<http::string_body>& req);
  std::string stats_json(const stats_answer& s);
};

web::upstream_call openai_front::impl::engine_call(
    const http::request<http::string_body>& req) {
  web::upstream_call c;
  c.endpoint = opt.engine_url;
  c.name = "engine";
  c.pass = {"authorization", "accept", "x-request-id"};
  if (req.method() == http::verb::post)
    c.request_headers.emplace_back("Content-Type", "application/json");
  if (opt.dp_rank >= 0)
    c.request_headers.emplace_back(web::dp_rank_header,
                                   std::to_string(opt.dp_rank));
  return c;
}

asio::awaitable<bool> openai_front::impl::completion(
    beast::tcp_stream& client, beast::flat_buffer& buffer,
    const http::request<http::string_body>& req, bool chat) {
  ++requests;
  auto parsed = parse_openai_request(req.body(), chat, opt.block_tokens);
  web::upstream_call call = engine_call(req);
  std::optional<tracked> t;
  uint64_t id = 0;
  if (parsed) {
    if (!parse_id(req[request_id_header], id))
      id = (uint64_t{1} << 63) | next_local++;  // outside the routers' ids
    parsed->prompt.id = id;
    caf::anon_send(opt.worker, arrive_atom::value, parsed->prompt);
    t.emplace(opt.worker, id);
    call.answer_headers.emplace_back(request_id_header, std::to_string(id));
  } else {
    // The engine will say what is wrong with it; nothing to follow.
    ++unparsed;
  }
  const std::string named =
      "request " + (t ? std::to_string(id) : std::string("(unparsed)")) +
      " (X-Request-Id " + std::string(req[web::client_id_header]) + ")";
  if (client_gone(client.socket().native_handle())) {
    ++client_gone_count;
    KVMESH_DEBUG(
        "front on port %d: %s: the client went away before it was "
        "passed on",
        port, named.c_str());
    co_return false;
  }
  web::proxy_options po;
  po.connect_timeout = connect_timeout;
  po.idle_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      opt.upstream_timeout);
  // The engine sends nothing of a body until its first token is out.
  tracked* tp = t ? &*t : nullptr;
  if (tp) po.first_body_byte = std::bind(&tracked::first, tp);
  // A gateway in front tells its client why an answer broke off.
  po.break_event = false;
  const std::function<void()> no_header_hook;
  web::proxy_result r = co_await web::proxy_request(client, buffer, req, call,
                                                    po, no_header_hook);
  switch (r.outcome) {
    case web::proxy_outcome::done:
      co_return r.keep_alive;
    case web::proxy_outcome::client_gone:
      // Its closed connection to the engine makes vLLM abort the request;
      // the WORKER hears the end as `t` goes.
      ++client_gone_count;
      KVMESH_DEBUG(
          "front on port %d: %s: the client went away (%s); the "
          "engine's request is cut",
          port, named.c_str(), r.why.c_str());
      co_return false;
    case web::proxy_outcome::after_first:
      if (r.status != 0) co_return false;  // the client saw the break
      [[fallthrough]];
    case web::proxy_outcome::before_first:
      break;
  }
  ++unreachable;
  const web::answer a = engine_unreachable(r.why);
  co_await web::respond(client, a, {}, false, write_timeout);
  co_return false;
}

asio::awaitable<bool> openai_front::impl::pass(
    beast::tcp_stream& client, beast::flat_buffer& buffer,
    const http::request<http::string_body>& req,
    std::chrono::milliseconds timeout) {
  const web::upstream_call call = engine_call(req);
  web::proxy_options po;
  po.connect_timeout = connect_timeout;
  po.idle_timeout = timeout;
  po.break_event = false;
  const std::function<void()> no_header_hook;
  web::proxy_result r = co_await web::proxy_request(client, buffer, req, call,
                                                    po, no_header_hook);
  if (r.outcome == web::proxy_outcome::done) co_return r.keep_alive;
  if (r.outcome == web::proxy_outcome::client_gone || r.status != 0)
    co_return false;
  const web::answer a = engine_unreachable(r.why);
  co_await web::respond(client, a, {}, false, write_timeout);
  co_return false;
}

std::string openai_front::impl::stats_json(const stats_answer& s) {
  nlohmann::ordered_json out;
  if (s) {
    out["worker"] = worker_json(*s);
    out["engine"] = engine_json(*s);
  } else {
    out["worker"] = nullptr;
  }
  out["front"] = {{"requests", requests.load()},
                  {"unreachable", unreachable.load()},
                  {"unparsed", unparsed.load()},
                  {"client_gone", client_gone_count.load()}};
  if (opt.extra_stats) {
    auto extra =
        nlohmann::ordered_json::parse(opt.extra_stats(), nullptr, false);
    if (extra.is_object())
      for (auto& [k, v] : extra.items())
        out[k] = v;
  }
  return out.dump();
}

asio::awaitable<bool> openai_front::impl::stats(beast::tcp_stream& client,
                                                bool keep) {
  const auto call = stats_call(*sys, opt.worker);
  const stats_answer s = co_await web::await_callback<stats_answer>(gate, call);
  web::answer a;
  a.server = server_name;
  a.body = stats_json(s);
  co_return co_await web::respond(client, a, {}, keep, write_timeout) && keep;
}

asio::awaitable<void> openai_front::impl::accept_loop() {
  for (;;) {
    beast::error_code ec;
    tcp::socket s = co_await acceptor.async_accept(
        asio::make_strand(io), asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // Out of descriptors, say: wait a little rather than spin.
      KVMESH_WARN("front on port %d: accept: %s", port, ec.message().c_str());
      asio::steady_timer t(io, std::chrono::milliseconds(50));
      co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    s.set_option(tcp::no_delay(true), ec);
    auto ex = s.get_executor();
    asio::co_spawn(ex, connection(std::move(s)), asio::detached);
  }
}

asio::awaitable<void> openai_front::impl::connection(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    const web::read_result got = co_await web::read_request(
        stream, buffer, parser, max_body_bytes, client_idle);
    if (got.outcome == web::read_outcome::malformed) {
      web::answer a =
          web::error_answer(400, "malformed HTTP request: " + got.ec.message());
      a.server = server_name;
      co_await web::respond(stream, a, {}, false, write_timeout);
    }
    if (got.outcome == web::read_outcome::malformed ||
        got.outcome == web::read_outcome::ended)
      break;
    const bool too_large = got.outcome == web::read_outcome::too_large;
    if (too_large) {
      web::answer a =
          web::error_answer(413, "the request body is larger than " +
                                     std::to_string(max_body_bytes) + " bytes");
      a.server = server_name;
      if (co_await web::respond(stream, a, {}, false, write_timeout))
        co_await web::close_gracefully(stream, std::chrono::seconds(2));
      co_return;
    }
    http::request<http::string_body> req = parser.release();
    const std::string path(path_of(req.target()));
    const bool post = req.method() == http::verb::post;
    const bool get = req.method() == http::verb::get;
    bool keep = false;
    if (post && (path == "/v1/completions" || path == "/v1/chat/completions")) {
      keep = co_await completion(stream, buffer, req,
                                 path == "/v1/chat/completions");
    } else if (get && (path == "/v1/models" || path == "/health")) {
      keep = co_await pass(stream, buffer, req, get_timeout);
    } else if (post && (path == "/tokenize" || path == "/detokenize")) {
      // vLLM's and SGLang's tokenizer endpoints: the gateway asks them for
      // a prompt's exact token ids through the worker's front.
      keep = co_await pass(stream, buffer, req, post_timeout);
    } else if (get && path == "/kvmesh/stats") {
      keep = co_await stats(stream, req.keep_alive());
    } else {
      web::answer a = web::error_answer(
          404, "no route " + std::string(req.method_string()) + " " + path, {},
          "unknown_url");
      a.server = server_name;
      keep = co_await web::respond(stream, a, {}, req.keep_alive(),
                                   write_timeout) &&
             req.keep_alive();
    }
    if (!keep) break;
  }
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.close();
}

openai_front::openai_front(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

openai_front::~openai_front() {
  auto& p = *impl_;
  asio::post(p.io, [&p] {
    beast::error_code ec;
    p.acceptor.close(ec);
  });
  p.io.stop();
  for (auto& t : p.threads)
    if (t.joinable()) t.join();
  // Stats asks still waiting go now, while their executor lives; the
  // requests in flight go with the io_context: their engine connections
  // close (vLLM aborts them) and their WORKER hears their end.
  p.gate.close();
}

int openai_front::port() const {
  return impl_->port;
}

void openai_front::serve(engine_worker_actor worker) {
  if (!impl_->threads.empty()) return;
  impl_->opt.worker = std::move(worker);
  impl* raw = impl_.get();
  asio::co_spawn(raw->io, raw->accept_loop(), asio::detached);
  const size_t n = std::max<size_t>(raw->opt.threads, 1);
  for (size_t i = 0; i < n; ++i)
    raw->threads.emplace_back([raw] { raw->io.run(); });
}

expected<std::unique_ptr<openai_front>> openai_front::start(
    caf::actor_system& sys, const openai_front_options& opt) {
  auto f = bind(sys, opt);
  if (!f) return f.err();
  (*f)->serve(opt.worker);
  return f;
}

expected<std::unique_ptr<openai_front>> openai_front::bind(
    caf::actor_system& sys, const openai_front_options& opt) {
  if (auto st = check_engine_url(opt.engine_url); !st) return st.err();
  if (auto url = web::parse_endpoint_url(opt.engine_url); !url)
    return url.err();
  if (opt.block_tokens == 0)
    return make_error(ec::invalid_argument, "block size must be > 0");
  auto p = std::make_unique<impl>(std::max<size_t>(opt.threads, 1));
  p->sys = &sys;
  p->opt = opt;
  const std::string where = opt.host + ":" + std::to_string(opt.port);
  beast::error_code err;
  tcp::resolver resolver(p->io);
  auto found = resolver.resolve(opt.host, std::to_string(opt.port),
                                tcp::resolver::passive, err);
  if (err || found.empty())
    return make_error(ec::io_error, "front: cannot listen on " + where + ": " +
                                        err.message());
  const tcp::endpoint ep = found.begin()->endpoint();
  p->acceptor.open(ep.protocol(), err);
  if (!err) p->acceptor.set_option(tcp::acceptor::reuse_address(true), err);
  if (!err) p->acceptor.bind(ep, err);
  if (!err) p->acceptor.listen(asio::socket_base::max_listen_connections, err);
  if (err)
    return make_error(ec::io_error, "front: cannot listen on " + where + ": " +
                                        err.message());
  p->port = p->acceptor.local_endpoint().port();
  return std::unique_ptr<openai_front>(new openai_front(std::move(p)));
}

}  // namespace kvmesh
