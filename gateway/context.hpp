// What the connections of one of a gateway server's threads share: the
// mesh, the options, the series, the thread's io_context, its idle
// connections to the workers, the default tokenizer and the gate of pending
// callbacks. Internal to the gateway.
#pragma once

#include <memory>

#include <boost/asio/io_context.hpp>

#include "gateway/mesh.hpp"
#include "gateway/metrics.hpp"
#include "gateway/server.hpp"
#include "gateway/tokenize.hpp"
#include "web/callback_gate.hpp"
#include "web/upstream.hpp"

namespace kvmesh::gateway {

struct gateway_context {
  gateway_mesh* mesh = nullptr;
  gateway_options opt;
  gateway_metrics* metrics = nullptr;
  boost::asio::io_context* io = nullptr;
  std::unique_ptr<web::upstream_pool> pool;  // io's
  std::shared_ptr<prompt_tokenizer> engine_tokenizer;
  web::callback_gate* gate = nullptr;
};

}  // namespace kvmesh::gateway
