// The relay of one request to its upstream (proxy.hpp): the request out,
// the answer's header, then its body as the upstream sends it, its bytes
// and framing unchanged, while the client's socket is watched for a
// hang-up.
#include "web/proxy.hpp"

#include "engines/openai.hpp"

#include <array>
#include <optional>
#include <variant>
#include <vector>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>

#include "web/errors.hpp"
#include "web/upstream.hpp"

namespace kvmesh::web {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::use_awaitable;
using beast::error_code;

namespace {

// Bytes relayed per read: an SSE chunk of one token is far smaller, and a
// read returns what has come, so this bounds only a burst.
constexpr size_t relay_buffer = 16 * 1024;
// A client that keeps sending while its answer streams is not one we wait
// for (a pipelined request is small).
constexpr size_t max_pipelined = 64 * 1024;

enum class pump_end { done, upstream_failed, client_failed };
enum class watch_end { hung_up, cancelled };

bool is_event_stream(const http::fields& f) {
  const std::string_view t = f[http::field::content_type];
  return t.substr(0, 17) == "text/event-stream";
}

// The client's side of a relay: its socket, watched for a hang-up while
// the worker answers, and what it sent meanwhile.
struct watched {
  beast::tcp_stream& client;
  beast::flat_buffer& client_buffer;
  beast::tcp_stream& up;
  error_code client_ec;
};

struct exchange;

// What the parser's chunk-body callback sees of a chunked answer: when its
// first body byte came, and whether the data of the last chunk is whole.
struct chunk_watch {
  exchange* x = nullptr;
  uint64_t left = 0;  // data bytes of the current chunk not yet seen
  bool any = false;   // a chunk has begun
  size_t operator()(uint64_t remain, std::string_view body, error_code&);
};

// One request's worker side, from the connection to the answer's last
// byte; the client is watched meanwhile (proxy_request). Plain coroutines
// over it: GCC 12 miscompiles capturing coroutine lambdas called in a
// co_await.
struct exchange {
  beast::tcp_stream& client;
  const http::request<http::string_body>& req;
  const upstream_call& call;
  const proxy_options& opt;
  const std::function<void()>& first_byte;
  const endpoint_url& url;
  http::request<http::string_body>& ureq;
  watched& w;
  beast::tcp_stream& up;
  std::array<char, relay_buffer>& buf;
  beast::flat_buffer ubuf{};
  std::optional<http::response_parser<http::buffer_body>> parser{};
  std::optional<http::response_serializer<http::buffer_body>> sr{};
  chunk_watch chunks{};
  bool header_sent = false;  // the answer's header reached the client
  bool body_seen = false;    // opt.first_body_byte was called
  bool all_sent = false;     // the answer's last byte reached the client
  // When the relay last heard from the worker, for its idle timeout
  // (idle_watch): one timer per answer instead of one per read.
  std::chrono::steady_clock::time_point heard{};
  bool idle = false;  // idle_watch closed the worker's connection
  int status = 0;
  error_code upstream_ec{};  // why the worker's answer broke off
};

void saw_body(exchange& x) {
  if (x.body_seen) return;
  x.body_seen = true;
  if (x.opt.first_body_byte) x.opt.first_body_byte();
}

size_t chunk_watch::operator()(uint64_t remain, std::string_view body,
                               error_code&) {
  any = true;
  left = remain - body.size();
  if (!body.empty()) saw_body(*x);
  return body.size();  // seen, not kept: the bytes are relayed as read
}

// Writes what the client's socket takes now, without an operation (the
// usual case); `sent` says how much. The caller writes the rest with one.
error_code send_now(exchange& x, const char* data, size_t n, size_t& sent) {
  error_code e;
  auto& sock = x.client.socket();
  if (!sock.non_blocking()) sock.non_blocking(true, e);
  sent = e ? 0 : sock.write_some(asio::buffer(data, n), e);
  if (e == asio::error::would_block || e == asio::error::try_again) e = {};
  return e;
}

// Worker to client as the worker framed it (chunked, or a known length,
// which the client's header repeats): each read goes on as it came. The
// parser only watches it, for where the answer ends; a token costs one
// read and one write, with no framing undone and done again.
asio::awaitable<pump_end> relay(exchange& x) {
  auto& p = *x.parser;
  auto& res = p.get();
  auto& b = x.ubuf;         // read, not yet parsed (came with the header)
  size_t fresh = b.size();  // of b's bytes, those not yet relayed
  x.up.expires_never();     // idle_watch's from here
  x.heard = std::chrono::steady_clock::now();
  while (!p.is_done()) {
    error_code e;
    if (fresh == 0) {
      const size_t n = co_await x.up.async_read_some(
          b.prepare(relay_buffer), asio::redirect_error(use_awaitable, e));
      x.heard = std::chrono::steady_clock::now();
      b.commit(n);
      fresh = n;
      if (e) {
        x.upstream_ec = x.idle ? beast::error::timeout : e;
        co_return pump_end::upstream_failed;
      }
    }
    // Valid until the next prepare(): consume() only moves b's start.
    const char* from =
        static_cast<const char*>(b.data().data()) + (b.size() - fresh);
    while (!p.is_done() && b.size() > 0) {
      // A body of known length lands in the scratch buffer, unused.
      res.body().data = x.buf.data();
      res.body().size = x.buf.size();
      const size_t used = p.put(b.data(), e);
      if (res.body().size < x.buf.size()) saw_body(x);
      b.consume(used);
      if (e == http::error::need_buffer) e = {};
      if (e == http::error::need_more) {
        e = {};
        break;
      }
      if (e) {
        x.upstream_ec = e;
        co_return pump_end::upstream_failed;
      }
      if (used == 0) break;
    }
    // Bytes past the answer's end are not the client's.
    const size_t n = p.is_done() ? fresh - std::min(fresh, b.size()) : fresh;
    fresh = 0;
    if (n == 0) continue;
    size_t sent = 0;
    error_code w = send_now(x, from, n, sent);
    if (!w && sent < n) {
      x.client.expires_after(x.opt.idle_timeout);
      co_await asio::async_write(x.client, asio::buffer(from + sent, n - sent),
                                 asio::redirect_error(use_awaitable, w));
    }
    if (w) {
      if (!x.w.client_ec) x.w.client_ec = w;  // the watch's hang-up first
      co_return pump_end::client_failed;
    }
  }
  x.all_sent = true;
  co_return pump_end::done;
}

// The relay's idle timeout: the worker's connection is closed once it has
// sent nothing for opt.idle_timeout, which ends the relay's read. Returns
// only when the exchange's end cancels it.
asio::awaitable<void> idle_watch(exchange& x) {
  using clock = std::chrono::steady_clock;
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (error_code e; !e;) {
    const bool relaying = x.heard != clock::time_point{};
    if (relaying && clock::now() - x.heard >= x.opt.idle_timeout) {
      x.idle = true;
      x.up.close();
      timer.expires_at(clock::time_point::max());
    } else {
      timer.expires_at((relaying ? x.heard : clock::now()) +
                       x.opt.idle_timeout);
    }
    co_await timer.async_wait(asio::redirect_error(use_awaitable, e));
  }
}

// Whether a broken chunked answer stopped between two chunks, where one
// more (the error event) can go: a chunk's data whole and its CRLF, which
// the parser takes with the next chunk's size, all that is left unparsed.
bool between_chunks(const exchange& x) {
  if (!x.chunks.any) return x.ubuf.size() == 0;
  const auto d = x.ubuf.data();
  return x.chunks.left == 0 && d.size() == 2 &&
         std::string_view(static_cast<const char*>(d.data()), 2) == "\r\n";
}

// Worker to client, piece by piece, framed again for the client: for an
// answer that ends when the worker closes the connection.
asio::awaitable<pump_end> pump(exchange& x) {
  auto& p = *x.parser;
  auto& sr = *x.sr;
  auto& res = p.get();
  error_code e;
  do {
    if (!p.is_done()) {
      res.body().data = x.buf.data();
      res.body().size = x.buf.size();
      x.up.expires_after(x.opt.idle_timeout);
      co_await http::async_read_some(x.up, x.ubuf, p,
                                     asio::redirect_error(use_awaitable, e));
      if (e == http::error::need_buffer) e = {};
      if (e) {
        x.upstream_ec = e;
        co_return pump_end::upstream_failed;
      }
      res.body().size = x.buf.size() - res.body().size;
      if (res.body().size > 0 && !x.body_seen) {
        x.body_seen = true;
        if (x.opt.first_body_byte) x.opt.first_body_byte();
      }
      // No data is no buffer: a buffer of size 0 would be serialized as a
      // chunk of size 0, which is the last chunk, before the last chunk.
      res.body().data = res.body().size > 0 ? x.buf.data() : nullptr;
      res.body().more = !p.is_done();
      if (res.body().size == 0 && res.body().more) continue;
    } else {
      res.body().data = nullptr;
      res.body().size = 0;
      res.body().more = false;
    }
    x.client.expires_after(x.opt.idle_timeout);
    co_await http::async_write(x.client, sr,
                               asio::redirect_error(use_awaitable, e));
    if (e == http::error::need_buffer) e = {};
    if (e) {
      if (!x.w.client_ec) x.w.client_ec = e;  // the watch's hang-up first
      co_return pump_end::client_failed;
    }
  } while (!sr.is_done());
  x.all_sent = true;
  co_return pump_end::done;
}

// The client's socket while the worker answers (its header, then its
// body): a hang-up closes the worker's connection at once, which ends the
// read of it, and makes the worker's front cancel the engine's request.
asio::awaitable<watch_end> watch(watched& w) {
  for (;;) {
    error_code e;
    auto space = w.client_buffer.prepare(4096);
    const size_t n = co_await w.client.socket().async_read_some(
        space, asio::redirect_error(use_awaitable, e));
    w.client_buffer.commit(n);
    if (e == asio::error::operation_aborted) co_return watch_end::cancelled;
    if (e || w.client_buffer.size() > max_pipelined) {
      w.client_ec = e ? e : asio::error::message_size;
      w.up.close();
      co_return watch_end::hung_up;
    }
  }
}

// The worker's header. A long prefill comes before it, so the client is
// watched meanwhile (see watch).
asio::awaitable<error_code> read_header(
    beast::tcp_stream& up, beast::flat_buffer& ubuf,
    http::response_parser<http::buffer_body>& p,
    std::chrono::milliseconds timeout) {
  error_code e;
  up.expires_after(timeout);
  co_await http::async_read_header(up, ubuf, p,
                                   asio::redirect_error(use_awaitable, e));
  co_return e;
}

// The worker's answer: header, then body, relayed to the client.
asio::awaitable<proxy_result> run_exchange(exchange& x) {
  proxy_result out;
  error_code ec;
  // An idle connection the worker closed as we reused it fails before
  // its first byte: once more on a new one, not a failure of the worker.
  for (bool fresh_only = false;; fresh_only = true) {
    bool reused = false;
    if (x.opt.pool && !fresh_only)
      ec = co_await x.opt.pool->connect(x.up, x.url, x.opt.connect_timeout,
                                        reused);
    else
      ec = co_await connect_upstream(x.up, x.url, x.opt.connect_timeout);
    if (ec) {
      out.outcome = proxy_outcome::before_first;
      out.why = x.call.name + " at " + x.call.endpoint + ": " + ec.message();
      co_return out;
    }
    x.up.expires_after(x.opt.idle_timeout);
    co_await http::async_write(x.up, x.ureq,
                               asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (reused && is_stale_failure(ec)) {
        x.up.close();
        continue;
      }
      out.outcome = proxy_outcome::before_first;
      out.why = x.call.name + ": sending the request: " + ec.message();
      co_return out;
    }
    x.ubuf.clear();
    x.parser.emplace();
    x.chunks = chunk_watch{&x};
    x.parser->on_chunk_body(x.chunks);
    x.parser->body_limit(boost::none);  // a long stream is the point
    ec = co_await read_header(x.up, x.ubuf, *x.parser, x.opt.idle_timeout);
    if (ec && reused && is_stale_failure(ec) && !x.parser->got_some() &&
        x.ubuf.size() == 0) {
      x.up.close();
      continue;
    }
    break;
  }
  auto& p = *x.parser;
  if (ec) {
    const bool got = p.got_some() || x.ubuf.size() > 0;
    out.outcome =
        got ? proxy_outcome::after_first : proxy_outcome::before_first;
    out.why = x.call.name + ": reading its answer: " + ec.message();
    co_return out;
  }
  // A worker's front whose engine answered nothing: as if the worker had
  // refused the connection, the request never started there.
  if (p.get().result() == http::status::bad_gateway &&
      p.get().find(engine_unreachable_header) != p.get().end()) {
    out.outcome = proxy_outcome::before_first;
    out.why = x.call.name + ": its engine did not answer";
    co_return out;
  }
  if (x.first_byte) x.first_byte();

  // The worker's header, minus its hop's; framed for the client's hop.
  auto& res = p.get();
  out.status = x.status = res.result_int();
  {
    const std::string connection(res[http::field::connection]);
    std::vector<std::string> drop;
    for (const auto& f : res)
      if (hop_by_hop(f.name_string(), connection))
        drop.emplace_back(f.name_string());
    for (const auto& name : drop)
      res.erase(name);
  }
  res.version(11);
  for (const auto& [k, v] : x.call.answer_headers)
    res.set(k, v);
  // Beside the engine's own Server-Timing, if it sent one: a list header
  // may come in several lines.
  if (!x.opt.server_timing.empty())
    res.insert(server_timing_header, x.opt.server_timing);
  const bool framed = p.content_length().has_value();
  if (!framed && p.is_done())
    res.content_length(0);  // no body at all (a 204, say)
  else if (!framed)
    res.chunked(true);
  res.keep_alive(x.req.keep_alive());
  const bool sse = is_event_stream(res);

  x.sr.emplace(res);
  auto& sr = *x.sr;
  res.body().data = nullptr;
  res.body().size = 0;
  res.body().more = true;
  x.client.expires_after(x.opt.idle_timeout);
  co_await http::async_write_header(x.client, sr,
                                    asio::redirect_error(use_awaitable, ec));
  if (ec) {
    out.outcome = proxy_outcome::client_gone;
    out.why = "client: " + ec.message();
    co_return out;
  }
  x.header_sent = true;

  // As the worker framed it when the client can be told the same framing.
  const bool as_framed = framed || p.chunked();
  pump_end end;
  if (as_framed)
    end = co_await relay(x);
  else
    end = co_await pump(x);
  switch (end) {
    case pump_end::done:
      out.outcome = proxy_outcome::done;
      out.keep_alive = x.req.keep_alive();
      if (x.opt.pool && p.keep_alive() && x.ubuf.size() == 0)
        x.opt.pool->give_back(x.url, x.up.release_socket());
      break;
    case pump_end::client_failed:
      out.outcome = proxy_outcome::client_gone;
      out.why = "client: " + x.w.client_ec.message();
      break;
    case pump_end::upstream_failed: {
      out.outcome = proxy_outcome::after_first;
      out.why =
          x.call.name + ": its answer broke off: " + x.upstream_ec.message();
      if (sse && !framed && x.opt.break_event &&
          (!p.chunked() || between_chunks(x))) {
        // One last event says why; the chunked body is never finished,
        // so the client's HTTP library sees the break too.
        const std::string event =
            "data: " +
            openai_error_json(
                "the worker failed mid-answer: " + x.upstream_ec.message(),
                "upstream_error") +
            "\n\n";
        std::vector<char> bytes(event.begin(), event.end());
        res.body().data = bytes.data();
        res.body().size = bytes.size();
        res.body().more = true;
        error_code e;
        x.client.expires_after(std::chrono::seconds(5));
        co_await http::async_write(x.client, sr,
                                   asio::redirect_error(use_awaitable, e));
      }
      break;
    }
  }
  co_return out;
}

}  // namespace

asio::awaitable<proxy_result> proxy_request(
    beast::tcp_stream& client, beast::flat_buffer& client_buffer,
    const http::request<http::string_body>& req, const upstream_call& call,
    const proxy_options& opt, const std::function<void()>& first_byte) {
  using namespace asio::experimental::awaitable_operators;
  proxy_result out;
  auto url = parse_endpoint_url(call.endpoint);
  if (!url) {
    out.outcome = proxy_outcome::before_first;
    out.why = url.err().message;
    co_return out;
  }
  // The request as the client sent it, this hop's headers excepted.
  http::request<http::string_body> ureq{
      req.method(), url->prefix + std::string(req.target()), 11};
  if (call.pass.empty()) {
    copy_end_to_end(req, ureq,
                    {"host", "content-length", "x-request-id",
                     "x-kvmesh-request-id", "expect"});
  } else {
    for (const auto& name : call.pass)
      for (auto [f, end] = req.equal_range(name); f != end; ++f)
        ureq.insert(f->name_string(), f->value());
  }
  ureq.set(http::field::host, url->host_header());
  for (const auto& [k, v] : call.request_headers)
    ureq.set(k, v);
  ureq.keep_alive(opt.pool != nullptr);
  ureq.body() = req.body();
  ureq.prepare_payload();

  beast::tcp_stream up(co_await asio::this_coro::executor);
  watched w{client, client_buffer, up, {}};
  std::array<char, relay_buffer> buf;
  exchange x{client, req, call, opt, first_byte, *url, ureq, w, up, buf};
  // One watch of the client for the whole exchange: a hang-up closes the
  // worker's connection at once (ending whatever waits on it) and makes
  // the worker's front cancel the engine's request.
  auto which = co_await (run_exchange(x) || watch(w) || idle_watch(x));
  if (which.index() == 0) co_return std::get<0>(std::move(which));
  out.status = x.status;
  if (!x.header_sent) {
    out.outcome = proxy_outcome::client_gone;
    out.why =
        "client, before the worker's first byte: " + w.client_ec.message();
    co_return out;
  }
  // A client that hangs up as soon as the answer's last byte reached it
  // can be heard before the pump's last write returns: served.
  out.outcome = x.all_sent ? proxy_outcome::done : proxy_outcome::client_gone;
  out.why = "client: " + w.client_ec.message();
  co_return out;
}

}  // namespace kvmesh::web
