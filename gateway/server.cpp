// The gateway's listener and routes (server.hpp): one coroutine per
// connection, HTTP/1.1 keep-alive, bounded bodies. Each thread runs an
// io_context of its own and the listener deals connections out in turn: a
// connection, its worker's connection and its tokenizer's stay on one
// thread, with no lock or wake-up between threads on the way.
#include "gateway/server.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

#include "core/log.hpp"
#include "gateway/completion.hpp"
#include "gateway/context.hpp"
#include "web/proxy.hpp"
#include "web/request.hpp"
#include "web/respond.hpp"

namespace kvmesh::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using web::answer;
using web::client_id_header;
using web::close_gracefully;
using web::error_answer;
using web::respond;

namespace {

constexpr size_t max_client_id = 256;

// "gw-" and 24 hex digits.
std::string make_client_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char out[32];
  std::snprintf(out, sizeof out, "gw-%016llx%08x",
                static_cast<unsigned long long>(rng()),
                static_cast<unsigned>(rng() & 0xffffffffu));
  return out;
}

std::string_view path_of(std::string_view target) {
  return target.substr(0, target.find('?'));
}

}  // namespace

struct gateway_server::impl {
  // Declared first, destroyed last: coroutine frames destroyed with the
  // io_context still count in these.
  std::unique_ptr<metrics::registry> own_registry;
  metrics::registry* registry = nullptr;
  std::unique_ptr<gateway_metrics> metrics;
  web::callback_gate gate;
  // One per thread, each context its thread's (its io_context, its
  // engine tokenizer); the rest shared. The contexts outlive the
  // coroutine frames that the io_contexts destroy.
  std::vector<gateway_context> ctxs;
  // What the mesh keeps on each thread (gateway_mesh::bind_thread).
  std::vector<std::shared_ptr<void>> bound;
  std::vector<std::unique_ptr<asio::io_context>> ios;
  // A context with no connection yet must not return from run().
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>>
      keep_running;
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;
  size_t next = 0;  // the thread of the next connection (the listener's)
  int port = 0;

  explicit impl(size_t n) : ios(make_ios(n)), acceptor(*ios[0]) {}

  static std::vector<std::unique_ptr<asio::io_context>> make_ios(size_t n) {
    std::vector<std::unique_ptr<asio::io_context>> v;
    for (size_t i = 0; i < std::max<size_t>(n, 1); ++i)
      v.push_back(std::make_unique<asio::io_context>(1));
    return v;
  }

  asio::awaitable<void> accept_loop();
  asio::awaitable<void> session(gateway_context& ctx, tcp::socket socket);
  answer models_answer() const;
};

asio::awaitable<void> gateway_server::impl::accept_loop() {
  for (;;) {
    beast::error_code ec;
    const size_t k = next++ % ios.size();
    tcp::socket s = co_await acceptor.async_accept(
        *ios[k], asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // Out of descriptors, say: wait a little rather than spin.
      KVMESH_WARN("gateway: accept: %s", ec.message().c_str());
      asio::steady_timer t(*ios[0], std::chrono::milliseconds(50));
      co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    s.set_option(tcp::no_delay(true), ec);
    auto ex = s.get_executor();
    asio::co_spawn(ex, session(ctxs[k], std::move(s)), asio::detached);
  }
}

answer gateway_server::impl::models_answer() const {
  nlohmann::ordered_json data = nlohmann::ordered_json::array();
  const pool_list pools = ctxs[0].mesh->models();
  for (const auto& m : *pools) {
    nlohmann::ordered_json e;
    e["id"] = m.name;
    e["object"] = "model";
    e["created"] = m.created;
    e["owned_by"] = "kvmesh";
    e["root"] = m.lora ? m.parent : m.name;
    e["parent"] =
        m.lora ? nlohmann::ordered_json(m.parent) : nlohmann::ordered_json();
    data.push_back(std::move(e));
  }
  nlohmann::ordered_json out;
  out["object"] = "list";
  out["data"] = std::move(data);
  answer a;
  a.body = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return a;
}

asio::awaitable<void> gateway_server::impl::session(gateway_context& ctx,
                                                    tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  const auto& opt = ctx.opt;
  const auto write_timeout = opt.upstream_idle_timeout;
  const std::string no_id;
  for (;;) {
    http::request_parser<http::string_body> parser;
    const web::read_result got = co_await web::read_request(
        stream, buffer, parser, opt.max_body_bytes, opt.client_idle_timeout);
    if (got.outcome == web::read_outcome::malformed) {
      ctx.metrics->bad_request("bad_http");
      ctx.metrics->request("other", 400);
      const answer a =
          error_answer(400, "malformed HTTP request: " + got.ec.message());
      co_await respond(stream, a, no_id, false, write_timeout);
    }
    if (got.outcome == web::read_outcome::malformed ||
        got.outcome == web::read_outcome::ended)
      break;
    const bool too_large = got.outcome == web::read_outcome::too_large;
    const std::string path(path_of(parser.get().target()));
    const std::string route = path == "/v1/chat/completions"
                                  ? "chat_completions"
                              : path == "/v1/completions" ? "completions"
                              : path == "/v1/models"      ? "models"
                              : path == "/health"         ? "health"
                                                          : "other";
    if (too_large) {
      ctx.metrics->bad_request("body_too_large");
      ctx.metrics->request(route, 413);
      answer a =
          error_answer(413, "the request body is larger than " +
                                std::to_string(opt.max_body_bytes) + " bytes");
      if (co_await respond(stream, a, no_id, false, write_timeout))
        co_await close_gracefully(stream, std::chrono::seconds(2));
      co_return;
    }
    http::request<http::string_body> req = parser.release();
    const bool keep = req.keep_alive();

    std::string client_id(req[client_id_header]);
    if (req.count(client_id_header) > 0 &&
        (client_id.empty() || client_id.size() > max_client_id)) {
      ctx.metrics->bad_request("bad_request_id");
      ctx.metrics->request(route, 400);
      const answer a = error_answer(
          400, std::string(client_id_header) + " must hold 1 to 256 bytes",
          client_id_header);
      if (!co_await respond(stream, a, no_id, keep, write_timeout) || !keep)
        break;
      continue;
    }
    if (client_id.empty()) client_id = make_client_id();

    const http::verb want =
        (route == "chat_completions" || route == "completions")
            ? http::verb::post
            : http::verb::get;
    served s;
    if (route == "chat_completions" || route == "completions") {
      if (req.method() == want) {
        const openai_api api = route == "chat_completions"
                                   ? openai_api::chat
                                   : openai_api::completions;
        s = co_await serve_completion(ctx, stream, buffer, req, api, client_id);
        ctx.metrics->request(route, s.status);
        if (!s.keep_alive) break;
        continue;
      }
    }
    answer a;
    if (route == "other") {
      a = error_answer(404, "no route " + path, {}, "unknown_url");
    } else if (req.method() != want) {
      a = error_answer(
          405, std::string(req.method_string()) + " is not allowed on " + path);
      a.headers.emplace_back("Allow",
                             want == http::verb::post ? "POST" : "GET");
    } else if (route == "models") {
      a = models_answer();
    } else {  // health
      const bool up = ctx.mesh->ready();
      a.status = up ? 200 : 503;
      a.body = up ? R"({"status":"ok"})" : R"({"status":"not ready"})";
    }
    s.status = static_cast<int>(a.status);
    s.keep_alive =
        co_await respond(stream, a, client_id, keep, write_timeout) && keep;
    ctx.metrics->request(route, s.status);
    if (!s.keep_alive) break;
  }
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.close();
}

gateway_server::gateway_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

gateway_server::~gateway_server() {
  auto& p = *impl_;
  asio::post(*p.ios[0], [&p] {
    beast::error_code ec;
    p.acceptor.close(ec);
  });
  for (auto& io : p.ios)
    io->stop();
  for (auto& t : p.threads)
    if (t.joinable()) t.join();
  // Coroutines waiting for the mesh or a tokenizer go now, while their
  // executor lives; the rest go with the io_context.
  p.gate.close();
  // Idle sockets and the mesh's connections before the io_contexts they
  // belong to.
  for (auto& c : p.ctxs)
    c.pool.reset();
  p.bound.clear();
}

size_t default_http_threads() {
  return std::max(1u, std::thread::hardware_concurrency() / 2);
}

int gateway_server::port() const {
  return impl_->port;
}

metrics::registry& gateway_server::registry() {
  return *impl_->registry;
}

expected<std::unique_ptr<gateway_server>> gateway_server::start(
    gateway_mesh& mesh, const gateway_options& opt) {
  if (opt.threads == 0)
    return make_error(ec::invalid_argument, "gateway: threads must be > 0");
  if (opt.block_tokens == 0)
    return make_error(ec::invalid_argument, "gateway: block size must be > 0");
  if (opt.max_body_bytes == 0)
    return make_error(ec::invalid_argument,
                      "gateway: the body limit must be > 0");
  auto p = std::make_unique<impl>(opt.threads);
  if (opt.registry) {
    p->registry = opt.registry;
  } else {
    p->own_registry = std::make_unique<metrics::registry>();
    p->registry = p->own_registry.get();
  }
  auto m = gateway_metrics::make(*p->registry);
  if (!m) return m.err();
  p->metrics = std::move(*m);
  for (auto& io : p->ios) {
    gateway_context c;
    c.mesh = &mesh;
    c.opt = opt;
    c.metrics = p->metrics.get();
    c.io = io.get();
    c.pool = std::make_unique<web::upstream_pool>(opt.upstream_idle);
    c.engine_tokenizer = make_engine_tokenizer(*io, c.pool.get());
    c.gate = &p->gate;
    p->ctxs.push_back(std::move(c));
  }

  beast::error_code err;
  tcp::resolver resolver(*p->ios[0]);
  auto where = resolver.resolve(opt.host, std::to_string(opt.port),
                                tcp::resolver::passive, err);
  if (err || where.empty())
    return make_error(
        ec::invalid_argument,
        "gateway: cannot resolve '" + opt.host + "': " + err.message());
  const tcp::endpoint ep = where.begin()->endpoint();
  p->acceptor.open(ep.protocol(), err);
  if (!err) p->acceptor.set_option(tcp::acceptor::reuse_address(true), err);
  if (!err) p->acceptor.bind(ep, err);
  if (!err) p->acceptor.listen(asio::socket_base::max_listen_connections, err);
  if (err)
    return make_error(ec::io_error, "gateway: cannot listen on " + opt.host +
                                        ":" + std::to_string(opt.port) + ": " +
                                        err.message());
  p->port = p->acceptor.local_endpoint().port();
  impl* raw = p.get();
  asio::co_spawn(*p->ios[0], raw->accept_loop(), asio::detached);
  p->bound.resize(p->ios.size());
  for (size_t k = 0; k < p->ios.size(); ++k) {
    asio::io_context* io = p->ios[k].get();
    p->keep_running.push_back(asio::make_work_guard(*io));
    p->threads.emplace_back([io, held = &p->bound[k], m = &mesh] {
      *held = m->bind_thread(*io);
      io->run();
    });
  }
  return std::unique_ptr<gateway_server>(new gateway_server(std::move(p)));
}

}  // namespace kvmesh::gateway
