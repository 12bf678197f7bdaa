// Upstream endpoints: URLs, connecting, idle connections, hop-by-hop
// headers (upstream.hpp).
#include "web/upstream.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/error.hpp>

namespace kvmesh::web {

namespace asio = boost::asio;
namespace beast = boost::beast;

std::string endpoint_url::host_header() const {
  return host + ":" + port;
}

expected<endpoint_url> parse_endpoint_url(std::string_view url) {
  const std::string_view scheme = "http://";
  if (url.substr(0, scheme.size()) != scheme)
    return make_error(ec::invalid_argument, "endpoint '" + std::string(url) +
                                                "' is not http://HOST[:PORT]");
  std::string_view rest = url.substr(scheme.size());
  endpoint_url out;
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    std::string_view prefix = rest.substr(slash);
    while (!prefix.empty() && prefix.back() == '/')
      prefix.remove_suffix(1);
    out.prefix = std::string(prefix);
  }
  if (authority.empty() ||
      authority.find_first_of("?# @") != std::string_view::npos)
    return make_error(ec::invalid_argument,
                      "endpoint '" + std::string(url) + "' has no host");
  std::string_view host = authority;
  if (authority.front() == '[') {  // [v6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos)
      return make_error(ec::invalid_argument,
                        "endpoint '" + std::string(url) + "': bad IPv6 host");
    host = authority.substr(1, close - 1);
    std::string_view tail = authority.substr(close + 1);
    if (!tail.empty()) {
      if (tail.front() != ':')
        return make_error(ec::invalid_argument,
                          "endpoint '" + std::string(url) + "': bad port");
      out.port = std::string(tail.substr(1));
    }
  } else if (const size_t colon = authority.rfind(':');
             colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    out.port = std::string(authority.substr(colon + 1));
  }
  if (host.empty() || out.port.empty() || out.port.size() > 5 ||
      !std::all_of(out.port.begin(), out.port.end(),
                   [](unsigned char c) { return std::isdigit(c); }) ||
      std::stoi(out.port) == 0 || std::stoi(out.port) > 65535)
    return make_error(ec::invalid_argument,
                      "endpoint '" + std::string(url) + "': bad host or port");
  out.host = std::string(host);
  return out;
}

asio::awaitable<beast::error_code> connect_upstream(
    beast::tcp_stream& stream, const endpoint_url& url,
    std::chrono::milliseconds timeout) {
  beast::error_code ec;
  stream.expires_after(timeout);
  // An address needs no resolver: Asio resolves on a thread of its own, a
  // hand-off and a wake-up per connect.
  const auto addr = asio::ip::make_address(url.host, ec);
  if (!ec) {
    const asio::ip::tcp::endpoint ep(
        addr, static_cast<unsigned short>(std::stoi(url.port)));
    co_await stream.async_connect(
        ep, asio::redirect_error(asio::use_awaitable, ec));
  } else {
    ec = {};
    asio::ip::tcp::resolver resolver(stream.get_executor());
    auto results = co_await resolver.async_resolve(
        url.host, url.port, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return ec;
    stream.expires_after(timeout);
    co_await stream.async_connect(
        results, asio::redirect_error(asio::use_awaitable, ec));
  }
  if (!ec) stream.socket().set_option(asio::ip::tcp::no_delay(true), ec);
  co_return ec;
}

namespace {

// Whether the endpoint has closed (or written unasked into) an idle
// connection: a peek that would block means it is still open and quiet.
bool still_open(asio::ip::tcp::socket& s) {
  char c;
  const ssize_t n =
      ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

asio::awaitable<beast::error_code> upstream_pool::connect(
    beast::tcp_stream& stream, const endpoint_url& url,
    std::chrono::milliseconds timeout, bool& reused) {
  reused = false;
  auto it = idle_.find(url.host_header());
  if (it != idle_.end()) {
    const auto oldest = std::chrono::steady_clock::now() - max_idle_for_;
    auto& v = it->second;
    while (!v.empty()) {
      idle c = std::move(v.back());
      v.pop_back();
      if (c.since < oldest || !still_open(c.socket)) continue;
      stream.socket() = std::move(c.socket);
      reused = true;
      co_return beast::error_code{};
    }
  }
  co_return co_await connect_upstream(stream, url, timeout);
}

void upstream_pool::give_back(const endpoint_url& url,
                              asio::ip::tcp::socket socket) {
  if (max_idle_ == 0 || !socket.is_open()) return;
  auto& v = idle_[url.host_header()];
  if (v.size() >= max_idle_) v.erase(v.begin());  // the oldest goes
  v.push_back({std::move(socket), std::chrono::steady_clock::now()});
}

bool is_stale_failure(const beast::error_code& ec) {
  return ec == beast::http::error::end_of_stream ||
         ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe;
}

namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

bool hop_by_hop(std::string_view name, std::string_view connection) {
  for (std::string_view h :
       {"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
        "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"})
    if (iequals(name, h)) return true;
  // Headers the Connection header names are this hop's too.
  while (!connection.empty()) {
    const size_t comma = connection.find(',');
    if (iequals(trim(connection.substr(0, comma)), name)) return true;
    if (comma == std::string_view::npos) break;
    connection.remove_prefix(comma + 1);
  }
  return false;
}

void copy_end_to_end(const beast::http::fields& from, beast::http::fields& to,
                     std::initializer_list<std::string_view> skip) {
  const std::string_view connection = from[beast::http::field::connection];
  for (const auto& f : from) {
    const std::string_view name = f.name_string();
    if (hop_by_hop(name, connection)) continue;
    bool skipped = false;
    for (std::string_view s : skip)
      if (iequals(name, s)) skipped = true;
    if (!skipped) to.insert(f.name_string(), f.value());
  }
}

}  // namespace kvmesh::web
