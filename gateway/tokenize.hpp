// The prompt's exact token ids: the seam (prompt_tokenizer) and the
// engine's implementation, which asks an engine serving the model (vLLM's
// POST /tokenize). The in-process one (local_tokenizer.hpp) serves the
// models given --tokenizer and hands what it cannot do exactly back to it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace boost::asio {
class io_context;
}

namespace kvmesh::gateway {

struct tokenize_ask {
  std::string model;  // as the client named it (an adapter's own name)
  // The body of vLLM's POST /tokenize (see openai_body::tokenize_request):
  // "messages" and the template's knobs for chat, "prompt" for
  // completions. The in-process tokenizer reads the same members. Ordered
  // as the client wrote it: a template's tojson prints keys in that order.
  nlohmann::ordered_json request;
  // Engines serving the model, any of which may be asked.
  std::vector<std::string> endpoints;
};

struct tokenize_result {
  std::vector<uint32_t> tokens;
  // Set (to a label of local_tokenizer.hpp's handoff_reasons) when this
  // tokenizer leaves the prompt to the engine's: `tokens` is empty then.
  std::string handoff;
};

class prompt_tokenizer {
 public:
  virtual ~prompt_tokenizer() = default;
  // Calls `done` exactly once, on any thread, with the token ids, or an
  // error: ec::invalid_argument when the prompt itself was refused (its
  // message says why, for the client), anything else when no tokenizer
  // could answer (the gateway then routes on an estimate).
  virtual void tokenize(
      tokenize_ask ask,
      std::function<void(expected<tokenize_result>)> done) = 0;
};

struct engine_tokenizer_options {
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds timeout{10000};  // the whole call
  size_t max_response_bytes = 64 << 20;
};

}  // namespace kvmesh::gateway
namespace kvmesh::web {
class upstream_pool;
}  // namespace kvmesh::web
namespace kvmesh::gateway {

// Asks POST {endpoint}/tokenize of the ask's engines, one after the other
// (starting from a rotating one) until one answers; runs on `io`, on
// `pool`'s idle connections (io's; null: a connection per call).
std::shared_ptr<prompt_tokenizer> make_engine_tokenizer(
    boost::asio::io_context& io, web::upstream_pool* pool = nullptr,
    engine_tokenizer_options opt = {});

// The token ids of vLLM's /tokenize answer {"count", "tokens": [...], ...}.
expected<std::vector<uint32_t>> parse_tokenize_answer(const std::string& body);

}  // namespace kvmesh::gateway
