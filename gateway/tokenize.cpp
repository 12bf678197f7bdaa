// The engine's tokenizer over HTTP (tokenize.hpp): POST {endpoint}/tokenize
// with vLLM's body, one engine after another until one answers.
#include "gateway/tokenize.hpp"

#include <atomic>
#include <optional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "web/upstream.hpp"

namespace kvmesh::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using web::connect_upstream;
using web::is_stale_failure;
using web::parse_endpoint_url;
using web::upstream_pool;

expected<std::vector<uint32_t>> parse_tokenize_answer(const std::string& body) {
  auto doc = nlohmann::json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return make_error(ec::parse_error, "tokenize: the answer is not JSON");
  auto it = doc.find("tokens");
  if (it == doc.end() || !it->is_array())
    return make_error(ec::parse_error, "tokenize: no \"tokens\" array");
  std::vector<uint32_t> out;
  out.reserve(it->size());
  for (const auto& t : *it) {
    if (!t.is_number_unsigned() || t.get<uint64_t>() > 0xffffffffull)
      return make_error(ec::parse_error, "tokenize: a token is not an id");
    out.push_back(static_cast<uint32_t>(t.get<uint64_t>()));
  }
  return out;
}

namespace {

// The engine's own words for a refused prompt: vLLM's {"message"} or
// FastAPI's {"detail"}.
std::string engine_message(const std::string& body) {
  auto doc = nlohmann::json::parse(body, nullptr, false);
  if (doc.is_object()) {
    for (const char* key : {"message", "detail"})
      if (auto it = doc.find(key); it != doc.end() && it->is_string())
        return it->get<std::string>();
    if (auto it = doc.find("error"); it != doc.end() && it->is_object())
      if (auto m = it->find("message"); m != it->end() && m->is_string())
        return m->get<std::string>();
  }
  return body.substr(0, 512);
}

class engine_tokenizer final
    : public prompt_tokenizer,
      public std::enable_shared_from_this<engine_tokenizer> {
 public:
  engine_tokenizer(asio::io_context& io, upstream_pool* pool,
                   engine_tokenizer_options opt)
      : io_(io), pool_(pool), opt_(opt) {}

  void tokenize(tokenize_ask ask,
                std::function<void(expected<tokenize_result>)> done) override {
    if (ask.endpoints.empty()) {
      done(make_error(ec::not_found,
                      "no engine serves model '" + ask.model + "'"));
      return;
    }
    asio::co_spawn(io_,
                   serve(shared_from_this(), std::move(ask), std::move(done)),
                   asio::detached);
  }

 private:
  // A plain coroutine, not a capturing lambda (GCC 12 miscompiles those).
  static asio::awaitable<void> serve(
      std::shared_ptr<engine_tokenizer> self, tokenize_ask ask,
      std::function<void(expected<tokenize_result>)> done) {
    expected<tokenize_result> r = co_await self->run(std::move(ask));
    done(std::move(r));
  }

  asio::awaitable<expected<tokenize_result>> run(tokenize_ask ask) {
    const std::string body = ask.request.dump(
        -1, ' ', false, nlohmann::json::error_handler_t::replace);
    const size_t n = ask.endpoints.size();
    const size_t start = next_++ % n;
    std::string last = "no engine answered";
    for (size_t i = 0; i < n; ++i) {
      const std::string& endpoint = ask.endpoints[(start + i) % n];
      auto r = co_await once(endpoint, body);
      if (r || r.err().code == ec::invalid_argument) co_return r;
      last = r.err().message;
    }
    co_return make_error(ec::io_error, last);
  }

  // One engine's answer: the tokens; invalid_argument when it refused the
  // prompt (a 400 or 422); io_error otherwise.
  asio::awaitable<expected<tokenize_result>> once(const std::string& endpoint,
                                                  const std::string& body) {
    auto url = parse_endpoint_url(endpoint);
    if (!url) co_return make_error(ec::io_error, url.err().message);
    http::request<http::string_body> req{http::verb::post,
                                         url->prefix + "/tokenize", 11};
    req.set(http::field::host, url->host_header());
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "application/json");
    req.keep_alive(pool_ != nullptr);
    req.body() = body;
    req.prepare_payload();
    // A reused connection the engine closed meanwhile: once more on a new
    // one (upstream_pool).
    beast::tcp_stream s(co_await asio::this_coro::executor);
    beast::flat_buffer buf;
    std::optional<http::response_parser<http::string_body>> parser;
    beast::error_code e;
    for (bool fresh_only = false;; fresh_only = true) {
      bool reused = false;
      if (pool_ && !fresh_only)
        e = co_await pool_->connect(s, *url, opt_.connect_timeout, reused);
      else
        e = co_await connect_upstream(s, *url, opt_.connect_timeout);
      if (e)
        co_return make_error(ec::io_error,
                             "tokenize at " + endpoint + ": " + e.message());
      s.expires_after(opt_.timeout);
      co_await http::async_write(s, req,
                                 asio::redirect_error(asio::use_awaitable, e));
      buf.clear();
      parser.emplace();
      parser->body_limit(opt_.max_response_bytes);
      if (!e)
        co_await http::async_read(
            s, buf, *parser, asio::redirect_error(asio::use_awaitable, e));
      if (e && reused && is_stale_failure(e) && !parser->got_some()) {
        s.close();
        continue;
      }
      break;
    }
    if (e)
      co_return make_error(ec::io_error,
                           "tokenize at " + endpoint + ": " + e.message());
    auto& p = *parser;
    if (pool_ && p.keep_alive()) pool_->give_back(*url, s.release_socket());
    const auto& res = p.get();
    const unsigned status = res.result_int();
    if (status == 400 || status == 422)
      co_return make_error(ec::invalid_argument, engine_message(res.body()));
    if (status != 200)
      co_return make_error(
          ec::io_error,
          "tokenize at " + endpoint + ": status " + std::to_string(status));
    auto tokens = parse_tokenize_answer(res.body());
    if (!tokens)
      co_return make_error(ec::io_error, "tokenize at " + endpoint + ": " +
                                             tokens.err().message);
    tokenize_result r;
    r.tokens = std::move(*tokens);
    co_return r;
  }

  asio::io_context& io_;
  upstream_pool* pool_;  // io_'s
  engine_tokenizer_options opt_;
  std::atomic<size_t> next_{0};
};

}  // namespace

std::shared_ptr<prompt_tokenizer> make_engine_tokenizer(
    asio::io_context& io, upstream_pool* pool, engine_tokenizer_options opt) {
  return std::make_shared<engine_tokenizer>(io, pool, opt);
}

}  // namespace kvmesh::gateway
