// Forwarding one request to the worker the mesh chose and streaming its
// answer back as it arrives, byte for byte, with the engine's headers
// (minus hop-by-hop ones). Tells apart a worker that failed before its
// first byte (the request may go elsewhere) from one that failed after
// (the client sees the error) and from a client that went away (the
// worker's connection is closed at once). Internal to the gateway (C++20
// coroutines on Boost.Asio).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "gateway/mesh.hpp"
#include "gateway/upstream.hpp"

namespace kvmesh::gateway {

struct proxy_options {
  std::chrono::milliseconds connect_timeout{5000};
  // Longest silence of a worker, and of a client that does not read.
  std::chrono::milliseconds idle_timeout{600000};
  // Idle connections to the workers (this thread's); null: a connection
  // per request.
  upstream_pool* pool = nullptr;
  // The answer's Server-Timing value (what the gateway spent on the
  // request before it reached the worker); empty: none added.
  std::string server_timing;
};

enum class proxy_outcome {
  done,          // the whole answer reached the client
  before_first,  // the worker failed before its first byte: nothing sent
  after_first,   // the worker failed after it: the client saw an error
  client_gone,   // the client went away (or stopped reading)
};

struct proxy_result {
  proxy_outcome outcome = proxy_outcome::done;
  std::string why;  // what failed, for the log and a 502
  int status = 0;   // the worker's status, once its header came
  // Whether the client's connection may serve another request.
  bool keep_alive = false;
};

// Sends `req` (its target and body as the client sent them) to
// `answer.endpoint`, with X-Kvmesh-Request-Id: answer.request and
// X-Request-Id: client_id, and relays the answer to `client`.
// `client_buffer` holds what the client sent beyond `req` (a pipelined
// request): bytes read while watching for a hang-up are appended to it.
// `first_byte` is called once the worker's first byte came.
boost::asio::awaitable<proxy_result> proxy_request(
    boost::beast::tcp_stream& client, boost::beast::flat_buffer& client_buffer,
    const boost::beast::http::request<boost::beast::http::string_body>& req,
    const route_answer& answer, const std::string& client_id,
    const proxy_options& opt, const std::function<void()>& first_byte);

// Header naming the client's request id (accepted, made up, echoed).
inline constexpr const char* client_id_header = "X-Request-Id";
// Header naming the mesh's request id (route_answer.request) to the worker.
inline constexpr const char* mesh_id_header = "X-Kvmesh-Request-Id";
// Response header: the worker (GPU) that served the request.
inline constexpr const char* worker_header = "X-Kvmesh-Worker";
// Response header (W3C Server Timing): the gateway's tokenize and route
// durations, which clients and browsers' developer tools read.
inline constexpr const char* server_timing_header = "Server-Timing";

}  // namespace kvmesh::gateway
