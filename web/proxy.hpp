// Forwarding one request to an upstream (the worker the mesh chose, or an
// engine behind a worker's front) and streaming its answer back as it
// arrives, byte for byte, with the upstream's headers (minus hop-by-hop
// ones). Tells apart an upstream that failed before its first byte (the
// request may go elsewhere) from one that failed after (the client sees
// the error) and from a client that went away (the upstream's connection
// is closed at once). Internal (C++20 coroutines on Boost.Asio).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "web/upstream.hpp"

namespace kvmesh::web {

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
  // Called once, at the answer's first body byte: a streamed answer's
  // first token (its header comes before the prefill is done).
  std::function<void()> first_body_byte;
  // Whether an event-stream answer that breaks off ends with an SSE error
  // event saying why; without it the client sees only the unfinished
  // body (a gateway in front says why itself).
  bool break_event = true;
};

using header_list = std::vector<std::pair<std::string, std::string>>;

// Where a request goes and what its hop adds.
struct upstream_call {
  // http://HOST:PORT[/PREFIX]: the client's target is appended.
  std::string endpoint;
  // How failures name the upstream ("worker 3").
  std::string name;
  // Which of the client's end-to-end headers go on (lower case): empty,
  // all of them but Host, Content-Length, Expect and the ids.
  std::vector<std::string> pass;
  header_list request_headers;  // set on the upstream's request
  header_list answer_headers;   // set on the answer to the client
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

// Sends `req` (its method, target and body as the client sent them) to
// `call.endpoint` with the headers `call` says, and relays the answer to
// `client`.
// `client_buffer` holds what the client sent beyond `req` (a pipelined
// request): bytes read while watching for a hang-up are appended to it.
// `first_byte` is called once the worker's first byte came.
boost::asio::awaitable<proxy_result> proxy_request(
    boost::beast::tcp_stream& client, boost::beast::flat_buffer& client_buffer,
    const boost::beast::http::request<boost::beast::http::string_body>& req,
    const upstream_call& call, const proxy_options& opt,
    const std::function<void()>& first_byte);

// Header naming the client's request id (accepted, made up, echoed).
inline constexpr const char* client_id_header = "X-Request-Id";
// Header naming the mesh's request id (the route's decision) to the worker
// and its front.
inline constexpr const char* mesh_id_header = "X-Kvmesh-Request-Id";
// Request header naming the rank of a data-parallel engine that is to serve
// the request (vLLM and SGLang read it).
inline constexpr const char* dp_rank_header = "X-data-parallel-rank";
// Response header: the worker (GPU) that served the request.
inline constexpr const char* worker_header = "X-Kvmesh-Worker";
// Response header (W3C Server Timing): the gateway's tokenize and route
// durations, which clients and browsers' developer tools read.
inline constexpr const char* server_timing_header = "Server-Timing";

}  // namespace kvmesh::web
