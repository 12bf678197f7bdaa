// An OpenAI /v1/chat/completions or /v1/completions body, validated: what
// the gateway must know of it to route it (the model, the prompt to
// tokenize, streaming, the output estimate), or the client's mistake named
// by field, as OpenAI's 400 names it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvmesh::gateway {

enum class openai_api { chat, completions };

struct openai_body {
  openai_api api = openai_api::chat;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // max_completion_tokens, else max_tokens; 0: not said.
  uint32_t output_tokens = 0;
  // A completions prompt of token ids (the first of a batch): no tokenizer
  // needed.
  std::optional<std::vector<uint32_t>> prompt_tokens;
  // Otherwise the body of vLLM's POST /tokenize for this prompt:
  // {"model", "messages", "add_generation_prompt", ...} for chat,
  // {"model", "prompt"} for completions (the first prompt of a batch).
  // Objects keep the client's key order.
  nlohmann::ordered_json tokenize_request;
  // UTF-8 bytes of the prompt's text, for an estimate of its size when no
  // tokenizer answers.
  size_t prompt_bytes = 0;
};

// A client's mistake, answered with OpenAI's error shape.
struct body_error {
  int status = 400;
  std::string message;
  std::string param;   // the field, "messages[1].content"; empty: none
  std::string reason;  // the metrics' label: not_json, missing_field,
                       // wrong_type, bad_value
};

using body_result = std::variant<openai_body, body_error>;

// Reads and checks `body` (JSON) for `api`. Fields the gateway does not
// need are the engine's to check, and pass through untouched.
body_result parse_openai_body(std::string_view body, openai_api api);

}  // namespace kvmesh::gateway
