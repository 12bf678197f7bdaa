// Reading one request from a client (request.hpp).
#include "web/request.hpp"

#include <string>

#include <boost/asio/buffer.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

namespace kvmesh::web {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

asio::awaitable<read_result> read_request(
    beast::tcp_stream& client, beast::flat_buffer& buffer,
    http::request_parser<http::string_body>& parser, size_t max_body_bytes,
    std::chrono::milliseconds idle) {
  parser.header_limit(64 * 1024);
  parser.body_limit(max_body_bytes);
  read_result r;
  client.expires_after(idle);
  co_await http::async_read_header(
      client, buffer, parser, asio::redirect_error(asio::use_awaitable, r.ec));
  if (r.ec == http::error::body_limit) {
    r.outcome = read_outcome::too_large;
    co_return r;
  }
  if (r.ec) {
    // A hang-up or a timeout between requests is the normal end; bytes
    // that are not HTTP get a 400.
    r.outcome = parser.got_some() && r.ec != beast::error::timeout &&
                        r.ec != http::error::end_of_stream
                    ? read_outcome::malformed
                    : read_outcome::ended;
    co_return r;
  }
  if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
    static const std::string cont = "HTTP/1.1 100 Continue\r\n\r\n";
    co_await asio::async_write(client.socket(), asio::buffer(cont),
                               asio::redirect_error(asio::use_awaitable, r.ec));
    if (r.ec) co_return r;
  }
  co_await http::async_read(client, buffer, parser,
                            asio::redirect_error(asio::use_awaitable, r.ec));
  r.outcome = r.ec == http::error::body_limit ? read_outcome::too_large
              : r.ec                          ? read_outcome::ended  // mid-body
                                              : read_outcome::whole;
  co_return r;
}

}  // namespace kvmesh::web
