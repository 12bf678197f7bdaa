// OpenAI-compatible requests as an engine's front sees them: what a
// /v1/completions or /v1/chat/completions body says about the prompt.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/error.hpp"
#include "engines/engine_state.hpp"

namespace kvmesh {

// Response header of a worker's front whose engine failed before answering
// a byte (refused, reset, timed out): the request never started there, and
// a gateway may route it again elsewhere.
inline constexpr const char* engine_unreachable_header =
    "X-Kvmesh-Engine-Unreachable";

struct openai_request {
  bool stream = false;
  // The prompt's blocks and size: token ids (a completions prompt of
  // integers) hash exactly; text is hashed in chunks of its UTF-8 bytes
  // (approximate: the engine's tokenizer is not here).
  front_request prompt;
};

// Reads a request body. `chat`: a /v1/chat/completions body (messages),
// else /v1/completions (prompt). A batch of prompts is sized by its first.
// Errors: not a JSON object, or no prompt or messages of a known form.
expected<openai_request> parse_openai_request(std::string_view body, bool chat,
                                              uint32_t block_tokens);

// The models of a GET /v1/models answer ({"data": [{"id": ...}]}), LoRA
// adapters included (vLLM lists them beside the base model, with their
// "parent"), at most max_models_per_worker of max_name_bytes each. Errors:
// not that shape, or a name out of bounds.
expected<std::vector<served_model>> parse_models_list(std::string_view body);

}  // namespace kvmesh
