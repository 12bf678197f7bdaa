// What every connection of a gateway server shares: the mesh, the options,
// the series, the executor, the default tokenizer and the gate of pending
// callbacks. Internal to the gateway.
#pragma once

#include <memory>

#include <boost/asio/io_context.hpp>

#include "gateway/mesh.hpp"
#include "gateway/metrics.hpp"
#include "gateway/server.hpp"
#include "gateway/tokenize.hpp"
#include "web/callback_gate.hpp"

namespace kvmesh::gateway {

struct gateway_context {
  gateway_mesh* mesh = nullptr;
  gateway_options opt;
  gateway_metrics* metrics = nullptr;
  boost::asio::io_context* io = nullptr;
  std::shared_ptr<prompt_tokenizer> engine_tokenizer;
  web::callback_gate* gate = nullptr;
};

}  // namespace kvmesh::gateway
