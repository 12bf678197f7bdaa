// Writing a server's own answers to a client (errors, /v1/models, /health,
// statistics), and closing a connection politely when the client may still
// be sending. Internal (C++20 coroutines on Boost.Asio).
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>

namespace kvmesh::web {

struct answer {
  unsigned status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones
  std::string server = "kvmesh-gateway";                     // Server:
};

// An OpenAI-shaped error answer of `status`: {"error": {...}}.
answer error_answer(unsigned status, const std::string& message,
                    const std::string& param = {},
                    const std::string& code = {});

// Writes `a` with X-Request-Id: client_id; false when the client is gone.
boost::asio::awaitable<bool> respond(boost::beast::tcp_stream& client,
                                     const answer& a,
                                     const std::string& client_id,
                                     bool keep_alive,
                                     std::chrono::milliseconds timeout);

// Shuts our side down, then reads and drops what the client still sends
// (a body too large to take) for up to `linger`, so that it reads our
// answer rather than a reset; then closes.
boost::asio::awaitable<void> close_gracefully(boost::beast::tcp_stream& client,
                                              std::chrono::milliseconds linger);

}  // namespace kvmesh::web
