// One completion request's way through the gateway: its body checked, its
// prompt tokenized and hashed into the block chain, routed by the mesh,
// proxied to the winner, routed again (without the failed worker) when a
// worker fails before its first byte. Internal to the gateway (C++20
// coroutines on Boost.Asio).
#pragma once

#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "gateway/context.hpp"
#include "gateway/openai_body.hpp"

namespace kvmesh::gateway {

struct served {
  int status = 0;  // what the client was told (499: it went away first)
  bool keep_alive = false;
};

boost::asio::awaitable<served> serve_completion(
    gateway_context& ctx, boost::beast::tcp_stream& client,
    boost::beast::flat_buffer& client_buffer,
    const boost::beast::http::request<boost::beast::http::string_body>& req,
    openai_api api, const std::string& client_id);

// The mesh's route request for `body` of `pool`'s model and its `tokens`:
// the chain of `seq` hashes, salted with the adapter's name for a LoRA
// model. Pure, for tests.
route_ask make_route_ask(const openai_body& body, const pool_model& pool,
                         const std::vector<uint32_t>& tokens,
                         uint32_t block_tokens, const std::string& client_id);

}  // namespace kvmesh::gateway
