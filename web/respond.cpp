// A server's own answers and a graceful close (respond.hpp).
#include "web/respond.hpp"

#include <array>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "web/errors.hpp"
#include "web/proxy.hpp"

namespace kvmesh::web {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

answer error_answer(unsigned status, const std::string& message,
                    const std::string& param, const std::string& code) {
  answer a;
  a.status = status;
  a.body = openai_error_json(
      message, openai_error_type(static_cast<int>(status)), param, code);
  return a;
}

asio::awaitable<bool> respond(beast::tcp_stream& client, const answer& a,
                              const std::string& client_id, bool keep_alive,
                              std::chrono::milliseconds timeout) {
  http::response<http::string_body> res{static_cast<http::status>(a.status),
                                        11};
  res.set(http::field::server, a.server);
  res.set(http::field::content_type, a.content_type);
  if (!client_id.empty()) res.set(client_id_header, client_id);
  for (const auto& [k, v] : a.headers)
    res.set(k, v);
  res.keep_alive(keep_alive);
  res.body() = a.body;
  res.prepare_payload();
  beast::error_code ec;
  client.expires_after(timeout);
  co_await http::async_write(client, res,
                             asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

asio::awaitable<void> close_gracefully(beast::tcp_stream& client,
                                       std::chrono::milliseconds linger) {
  beast::error_code ec;
  client.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  client.expires_after(linger);
  std::array<char, 64 * 1024> sink;
  for (;;) {
    co_await client.async_read_some(
        asio::buffer(sink), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
  }
  client.close();
}

}  // namespace kvmesh::web
