// Upstream endpoints: URLs, connecting, hop-by-hop headers (upstream.hpp).
#include "web/upstream.hpp"

#include <algorithm>
#include <cctype>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

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
