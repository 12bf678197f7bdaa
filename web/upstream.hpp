// Talking to an upstream HTTP/1.1 endpoint (an engine's or a worker's
// front): its URL, an asynchronous connect with a deadline, idle keep-alive
// connections kept for the next request, and the headers a proxy must not
// pass on. Internal (C++20 coroutines on Boost.Asio).
#pragma once

#include <chrono>
#include <initializer_list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/fields.hpp>

#include "core/error.hpp"

namespace kvmesh::web {

// http://HOST[:PORT][/PREFIX]: no https, the workers are inside the mesh.
struct endpoint_url {
  std::string host;
  std::string port = "80";
  std::string prefix;               // "" or "/something", no trailing '/'
  std::string host_header() const;  // "HOST:PORT"
};

expected<endpoint_url> parse_endpoint_url(std::string_view url);

// Resolves and connects `stream` within `timeout`; an error code otherwise
// (refused, unreachable, timed out).
boost::asio::awaitable<boost::beast::error_code> connect_upstream(
    boost::beast::tcp_stream& stream, const endpoint_url& url,
    std::chrono::milliseconds timeout);

// Idle keep-alive connections to upstream endpoints, for one thread (an
// io_context of its own: no lock). A connect and its close on both ends
// cost more than the request itself on a loopback; a proxy keeps them as
// nginx's upstream keepalive does. A connection goes back only after its
// whole answer was read; one the endpoint closed meanwhile is never handed
// out, and one it closes as it is reused fails before its first byte,
// which callers retry once on a new connection (is_stale_failure).
class upstream_pool {
 public:
  // At most `max_idle` idle connections per endpoint (0: none kept), each
  // for at most `max_idle_for` (below the usual 5 s keep-alive of uvicorn,
  // which serves vLLM, and of the servers beside it).
  explicit upstream_pool(
      size_t max_idle,
      std::chrono::milliseconds max_idle_for = std::chrono::seconds(2))
      : max_idle_(max_idle), max_idle_for_(max_idle_for) {}

  // An idle connection to `url` that is still open, else a new one
  // (connect_upstream). `reused` says which.
  boost::asio::awaitable<boost::beast::error_code> connect(
      boost::beast::tcp_stream& stream, const endpoint_url& url,
      std::chrono::milliseconds timeout, bool& reused);
  // Keeps `socket` (a stream's release_socket()), whose last answer was
  // read to its end and allows another request, for the next request to
  // `url`.
  void give_back(const endpoint_url& url,
                 boost::asio::ip::tcp::socket socket);
  size_t max_idle() const { return max_idle_; }

 private:
  struct idle {
    boost::asio::ip::tcp::socket socket;
    std::chrono::steady_clock::time_point since;
  };
  size_t max_idle_;
  std::chrono::milliseconds max_idle_for_;
  std::unordered_map<std::string, std::vector<idle>> idle_;  // by HOST:PORT
};

// Whether `ec`, on a reused connection before any byte of the answer, is
// the endpoint having closed it: worth one retry on a new connection.
bool is_stale_failure(const boost::beast::error_code& ec);

// Whether `name` is a hop-by-hop header (RFC 9110 7.6.1) in a message whose
// Connection header is `connection`: it is not forwarded.
bool hop_by_hop(std::string_view name, std::string_view connection);

// `from`'s end-to-end headers, minus those named in `skip` (lower case).
void copy_end_to_end(const boost::beast::http::fields& from,
                     boost::beast::http::fields& to,
                     std::initializer_list<std::string_view> skip = {});

}  // namespace kvmesh::web
