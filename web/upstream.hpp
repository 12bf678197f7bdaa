// Talking to an upstream HTTP/1.1 endpoint (an engine's or a worker's
// front): its URL, an asynchronous connect with a deadline, and the
// headers a proxy must not pass on. Internal (C++20 coroutines on
// Boost.Asio).
#pragma once

#include <chrono>
#include <initializer_list>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
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

// Whether `name` is a hop-by-hop header (RFC 9110 7.6.1) in a message whose
// Connection header is `connection`: it is not forwarded.
bool hop_by_hop(std::string_view name, std::string_view connection);

// `from`'s end-to-end headers, minus those named in `skip` (lower case).
void copy_end_to_end(const boost::beast::http::fields& from,
                     boost::beast::http::fields& to,
                     std::initializer_list<std::string_view> skip = {});

}  // namespace kvmesh::web
