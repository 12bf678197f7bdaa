// The simulated engine's fixed vocabulary: the token ids it computes for a
// prompt (its tokenizer and chat template) and the text of its output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace kvmesh {

// The first id of the byte tokens: a byte b is token sim_byte_base + b.
inline constexpr uint32_t sim_byte_base = 1000;

// The text a chat template makes of `messages` (an array of {role,
// content}): "<|ROLE|>" + content + "\n" per message, a content array's
// text parts concatenated; then "<|assistant|>" if add_generation_prompt.
// Errors name the bad member (messages[2].role is not a string...).
expected<std::string> sim_render_chat(const nlohmann::json& messages,
                                      bool add_generation_prompt);

// The prompt's token ids, as the simulated engine's /tokenize and its
// completion endpoints compute them from a request body: "messages" (chat:
// rendered, add_generation_prompt defaults to true) or "prompt" (a string,
// one token per UTF-8 byte; or an array of token ids, taken as they are).
// Errors name the member: no prompt or messages, wrong types, a batch of
// prompts, an empty prompt, an id above 2^31.
expected<std::vector<uint32_t>> sim_prompt_tokens(const nlohmann::json& body);

// The text of the i-th output token ("hello", " world", ...): words of the
// fixed vocabulary, not all ASCII, so that a proxy that re-encodes shows.
const std::string& sim_output_piece(uint32_t i);

}  // namespace kvmesh
