// Reading one request from a client: its header, `Expect: 100-continue`,
// its body within a limit, and telling a hang-up from bytes that are not
// HTTP. Internal (C++20 coroutines on Boost.Asio).
#pragma once

#include <chrono>
#include <cstddef>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

namespace kvmesh::web {

enum class read_outcome {
  whole,      // header and body read: parser.get() is the request
  too_large,  // the body passes the parser's limit: answer 413, then close
  malformed,  // bytes that are not HTTP: answer 400 (ec says why), then close
  ended,      // the client hung up, went mid-body or idled out: close
};

struct read_result {
  read_outcome outcome = read_outcome::ended;
  boost::beast::error_code ec;
};

// Reads the next request on `client` into `parser`, a header of at most
// 64 KB and a body of at most `max_body_bytes`, waiting at most `idle` for
// it to begin.
boost::asio::awaitable<read_result> read_request(
    boost::beast::tcp_stream& client, boost::beast::flat_buffer& buffer,
    boost::beast::http::request_parser<boost::beast::http::string_body>& parser,
    std::size_t max_body_bytes, std::chrono::milliseconds idle);

}  // namespace kvmesh::web
