// kvmesh_http_load: open-loop HTTP load over loopback (scripts/bench-gateway).
//
// Requests start at a fixed rate whatever their answers' latency, as
// wrk2's do: a slow answer never delays the next arrival, and every time is
// taken from the request's scheduled start, so a client that falls behind
// shows as latency, not as a lower rate. Per request: the answer's header
// (time to first byte), its first body byte (an SSE stream's first token),
// its end, and the Server-Timing durations it names. With --streams N it
// instead opens N streams at --rate and holds them open for --seconds.
// One thread, Boost.Beast on Asio; prints one JSON object.
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <nlohmann/json.hpp>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using steady = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

struct target {
  std::string url;
  tcp::endpoint where;
  std::string host;  // the Host header
  std::string path;
};

// What one request saw, in microseconds from its scheduled start (-1: not
// reached).
struct outcome {
  double at = 0;     // its scheduled start, from the first's
  double lag = -1;   // the request's actual start
  double ttfb = -1;  // the answer's header
  double ttft = -1;  // its first body byte
  double total = -1;
  unsigned status = 0;
  std::string failed;  // where it failed: connect, write, header, body
  bool held = false;   // --streams: still open when the hold ended
  bool counted = false;
  std::vector<std::pair<std::string, double>> timings;  // Server-Timing, ms
};

// An idle keep-alive connection with what its last answer left unread.
struct connection {
  explicit connection(asio::io_context& io) : stream(io) {}
  beast::tcp_stream stream;
  beast::flat_buffer buf;
  size_t served = 0;
};

struct load {
  asio::io_context io{1};
  std::vector<target> targets;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  double rate = 1000;
  double seconds = 10;
  double warmup = 0.5;
  std::chrono::milliseconds timeout{30000};
  size_t streams = 0;  // > 0: hold this many streams open
  steady::time_point start;
  steady::time_point hold_end;  // --streams
  std::vector<outcome> out;
  std::vector<std::deque<std::unique_ptr<connection>>> idle;  // per target
  size_t open = 0, peak_open = 0, stale_retries = 0, connections = 0;
};

double us_since(steady::time_point from) {
  return std::chrono::duration<double, std::micro>(steady::now() - from)
      .count();
}

bool parse_url(const std::string& url, target& t) {
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0) return false;
  const std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  t.host = rest.substr(0, slash);
  t.path = slash == std::string::npos ? "/" : rest.substr(slash);
  const size_t colon = t.host.rfind(':');
  if (colon == std::string::npos) return false;
  beast::error_code ec;
  const auto addr = asio::ip::make_address(t.host.substr(0, colon), ec);
  if (ec) return false;
  const int port = std::atoi(t.host.c_str() + colon + 1);
  if (port <= 0 || port > 65535) return false;
  t.url = url;
  t.where = tcp::endpoint(addr, static_cast<unsigned short>(port));
  return true;
}

// Server-Timing: "name;dur=1.5;desc=x, other;dur=2" (durations in ms).
void parse_server_timing(std::string_view v, outcome& o) {
  while (!v.empty()) {
    const size_t comma = v.find(',');
    std::string_view m = v.substr(0, comma);
    while (!m.empty() && m.front() == ' ')
      m.remove_prefix(1);
    const size_t semi = m.find(';');
    const std::string name(m.substr(0, semi));
    const size_t dur = m.find("dur=");
    if (!name.empty() && dur != std::string_view::npos)
      o.timings.emplace_back(name,
                             std::atof(std::string(m.substr(dur + 4)).c_str()));
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
}

std::string body_of(const load& l, size_t i) {
  std::string b = l.body;
  const std::string n = std::to_string(i);
  for (size_t at = b.find("%N%"); at != std::string::npos;
       at = b.find("%N%", at + n.size()))
    b.replace(at, 3, n);
  return b;
}

// Sends request `i` on `c` and reads its answer. False when the connection
// failed before any byte of the answer (a stale keep-alive connection the
// server had closed: the caller may retry once on a new one).
asio::awaitable<bool> exchange(load& l, connection& c, size_t i,
                               steady::time_point at, bool& keep) {
  outcome& o = l.out[i];
  const target& t = l.targets[i % l.targets.size()];
  http::request<http::string_body> req{http::verb::post, t.path, 11};
  req.set(http::field::host, t.host);
  req.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : l.headers)
    req.set(k, v);
  req.body() = body_of(l, i);
  req.keep_alive(l.streams == 0);
  req.prepare_payload();
  beast::error_code ec;
  c.stream.expires_after(l.timeout);
  co_await http::async_write(c.stream, req,
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    o.failed = "write: " + ec.message();
    co_return c.served > 0;
  }
  http::response_parser<http::buffer_body> p;
  p.body_limit(boost::none);
  if (l.streams > 0)
    c.stream.expires_at(l.hold_end);
  else
    c.stream.expires_after(l.timeout);
  co_await http::async_read_header(
      c.stream, c.buf, p, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    o.failed = "header: " + ec.message();
    co_return c.served > 0 && c.buf.size() == 0 && !p.got_some();
  }
  o.ttfb = us_since(at);
  o.status = p.get().result_int();
  for (const auto& f : p.get())
    if (beast::iequals(f.name_string(), "Server-Timing"))
      parse_server_timing(f.value(), o);
  if (l.streams > 0 && ++l.open > l.peak_open) l.peak_open = l.open;
  std::array<char, 8192> chunk;
  while (!p.is_done()) {
    p.get().body().data = chunk.data();
    p.get().body().size = chunk.size();
    co_await http::async_read_some(
        c.stream, c.buf, p, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    const size_t got = chunk.size() - p.get().body().size;
    if (got > 0 && o.ttft < 0) o.ttft = us_since(at);
    if (ec) break;
  }
  if (l.streams > 0) --l.open;
  if (ec == beast::error::timeout && l.streams > 0 &&
      steady::now() >= l.hold_end) {
    o.held = true;  // open until the hold ended: what was asked
  } else if (ec) {
    o.failed = "body: " + ec.message();
  } else {
    o.total = us_since(at);
    keep = p.keep_alive();
  }
  co_return false;
}

asio::awaitable<void> one_request(load& l, size_t i, steady::time_point at) {
  outcome& o = l.out[i];
  o.lag = us_since(at);
  const size_t ti = i % l.targets.size();
  auto& pool = l.idle[ti];
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::unique_ptr<connection> c;
    if (attempt == 0 && !pool.empty()) {
      c = std::move(pool.back());
      pool.pop_back();
    } else {
      c = std::make_unique<connection>(l.io);
      beast::error_code ec;
      c->stream.expires_after(l.timeout);
      co_await c->stream.async_connect(
          l.targets[ti].where, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        o.failed = "connect: " + ec.message();
        co_return;
      }
      c->stream.socket().set_option(tcp::no_delay(true), ec);
      ++l.connections;
    }
    bool keep = false;
    o.failed.clear();
    const bool stale = co_await exchange(l, *c, i, at, keep);
    if (keep && o.failed.empty()) {
      ++c->served;
      pool.push_back(std::move(c));
      co_return;
    }
    if (!stale) co_return;
    ++l.stale_retries;
  }
}

asio::awaitable<void> schedule(load& l, size_t n) {
  asio::steady_timer timer(l.io);
  const auto period = std::chrono::duration_cast<steady::duration>(
      std::chrono::duration<double>(1.0 / l.rate));
  for (size_t i = 0; i < n; ++i) {
    const steady::time_point at = l.start + period * static_cast<long>(i);
    if (steady::now() < at) {
      timer.expires_at(at);
      beast::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    l.out[i].at = std::chrono::duration<double, std::micro>(at - l.start).count();
    l.out[i].counted = std::chrono::duration<double>(at - l.start).count() >=
                       (l.streams > 0 ? 0 : l.warmup);
    asio::co_spawn(l.io, one_request(l, i, at), asio::detached);
  }
}

json percentiles(std::vector<double> v, double scale) {
  if (v.empty()) return json::object({{"n", 0}});
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const size_t k = std::min(
        v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
    return v[k] * scale;
  };
  double sum = 0;
  for (double x : v)
    sum += x;
  return json{{"n", v.size()},
              {"mean", sum / static_cast<double>(v.size()) * scale},
              {"p50", at(0.50)},
              {"p90", at(0.90)},
              {"p99", at(0.99)},
              {"p999", at(0.999)},
              {"max", v.back() * scale}};
}

// One line per counted request answered 200: its times in microseconds and
// its Server-Timing durations (name=ms;...), for runs to be pooled.
bool write_samples(const load& l, const std::string& path) {
  std::ofstream f(path);
  f << "at_us,lag_us,ttfb_us,ttft_us,total_us,server_timing\n";
  for (const outcome& o : l.out) {
    if (!o.counted || o.status != 200 || !o.failed.empty()) continue;
    f << static_cast<long>(o.at) << ',' << static_cast<long>(o.lag) << ','
      << static_cast<long>(o.ttfb) << ',' << static_cast<long>(o.ttft) << ','
      << static_cast<long>(o.total) << ',';
    for (size_t k = 0; k < o.timings.size(); ++k)
      f << (k ? ";" : "") << o.timings[k].first << '=' << o.timings[k].second;
    f << '\n';
  }
  return static_cast<bool>(f);
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

json report(const load& l, size_t n, double wall_s, double cpu_s) {
  // Milliseconds out; microseconds in.
  constexpr double ms = 1e-3;
  std::vector<double> lag, ttfb, ttft, total, ttfb_excl_route, route_share;
  std::map<std::string, std::vector<double>> timings;
  std::map<std::string, size_t> failures, statuses;
  size_t counted = 0, ok = 0, held = 0;
  double first_start = -1, last_start = -1;  // actual starts, us
  for (size_t i = 0; i < n; ++i) {
    const outcome& o = l.out[i];
    if (!o.counted) continue;
    ++counted;
    if (o.lag >= 0) {
      lag.push_back(o.lag);
      if (first_start < 0) first_start = o.at + o.lag;
      last_start = std::max(last_start, o.at + o.lag);
    }
    if (o.status != 0) ++statuses[std::to_string(o.status)];
    if (!o.failed.empty()) ++failures[o.failed];
    held += o.held;
    if (o.status != 200 || !o.failed.empty()) continue;
    ++ok;
    ttfb.push_back(o.ttfb);
    if (o.ttft >= 0) ttft.push_back(o.ttft);
    if (o.total >= 0) total.push_back(o.total);
    for (const auto& [name, dur] : o.timings) {
      timings[name].push_back(dur * 1e3);
      if (name == "route") {
        ttfb_excl_route.push_back(o.ttfb - dur * 1e3);
        if (o.ttft > 0) route_share.push_back(dur * 1e3 / o.ttft);
      }
    }
  }
  json t = json::object();
  for (const auto& [name, v] : timings)
    t[name] = percentiles(v, ms);
  json out = {
      {"targets", json::array()},
      {"rate", l.rate},
      {"scheduled", n},
      {"counted", counted},
      {"ok", ok},
      {"statuses", statuses},
      {"failures", failures},
      // Requests actually started per second, over the counted ones.
      {"achieved_rate",
       counted > 1 && last_start > first_start
           ? static_cast<double>(counted - 1) /
                 ((last_start - first_start) * 1e-6)
           : 0.0},
      {"connections_opened", l.connections},
      {"stale_retries", l.stale_retries},
      {"client_cpu_s", cpu_s},
      {"client_wall_s", wall_s},
      {"lag_ms", percentiles(lag, ms)},
      {"ttfb_ms", percentiles(ttfb, ms)},
      {"ttft_ms", percentiles(ttft, ms)},
      {"total_ms", percentiles(total, ms)},
      {"server_timing_ms", t},
      {"ttfb_excl_route_ms", percentiles(ttfb_excl_route, ms)},
      {"route_share_of_ttft", percentiles(route_share, 1)}};
  for (const auto& tg : l.targets)
    out["targets"].push_back(tg.url);
  if (l.streams > 0) {
    out["held"] = held;
    out["peak_open"] = l.peak_open;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  load l;
  std::vector<std::string> urls, headers;
  CLI::App app{
      "open-loop HTTP load: POSTs at a fixed rate, each timed from its "
      "scheduled start; prints JSON"};
  app.add_option("--url", urls,
                 "http://IPV4:PORT/PATH, repeated: requests take them in turn")
      ->required();
  app.add_option("--body", l.body,
                 "the request body (JSON); %N% becomes the request's number")
      ->required();
  app.add_option("--header", headers, "\"Name: value\", repeated");
  app.add_option("--rate", l.rate, "requests (or streams) started per second")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seconds", l.seconds,
                 "how long requests start for (--streams: how long from the "
                 "start the streams are held)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--warmup-s", l.warmup,
                 "requests scheduled in these first seconds are not counted")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  double timeout_s = 30;
  app.add_option("--timeout-s", timeout_s, "a request's longest silence")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--streams", l.streams,
                 "open this many streams at --rate, one connection each, and "
                 "hold them until --seconds after the start");
  std::string samples;
  app.add_option("--samples", samples,
                 "also write each counted answer's times to this CSV file");
  CLI11_PARSE(app, argc, argv);
  for (const auto& u : urls) {
    target t;
    if (!parse_url(u, t)) {
      std::fprintf(stderr, "kvmesh_http_load: --url %s is not http://IPV4:PORT/PATH\n",
                   u.c_str());
      return 2;
    }
    l.targets.push_back(t);
  }
  for (const auto& h : headers) {
    const size_t colon = h.find(':');
    if (colon == std::string::npos) {
      std::fprintf(stderr, "kvmesh_http_load: --header %s is not NAME: VALUE\n",
                   h.c_str());
      return 2;
    }
    const size_t v = h.find_first_not_of(' ', colon + 1);
    l.headers.emplace_back(h.substr(0, colon),
                           v == std::string::npos ? "" : h.substr(v));
  }
  l.timeout = std::chrono::milliseconds(static_cast<long>(timeout_s * 1e3));
  l.idle.resize(l.targets.size());
  const size_t n =
      l.streams > 0 ? l.streams
                    : static_cast<size_t>(l.rate * l.seconds + 0.5);
  l.out.resize(n);
  const double cpu0 = cpu_seconds();
  l.start = steady::now() + std::chrono::milliseconds(20);
  l.hold_end = l.start + std::chrono::duration_cast<steady::duration>(
                             std::chrono::duration<double>(l.seconds));
  asio::co_spawn(l.io, schedule(l, n), asio::detached);
  l.io.run();
  const double wall = us_since(l.start) / 1e6;
  std::printf("%s\n", report(l, n, wall, cpu_seconds() - cpu0).dump(1).c_str());
  if (!samples.empty() && !write_samples(l, samples)) {
    std::fprintf(stderr, "kvmesh_http_load: cannot write %s\n",
                 samples.c_str());
    return 1;
  }
  return 0;
}
