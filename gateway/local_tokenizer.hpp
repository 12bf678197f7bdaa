// The gateway's in-process tokenizer (--tokenizer MODEL=DIR): a model's
// Hugging Face files read once at start, then each prompt's token ids as
// vLLM computes them, on a few threads of their own; what it cannot do
// exactly it leaves to the engine's POST /tokenize.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "gateway/mesh.hpp"
#include "gateway/tokenize.hpp"

namespace kvmesh::gateway {

// One model's tokenizer and chat template, as vLLM's Hugging Face renderer
// uses them. Loading refuses anything that would make an id differ from
// the engine's: a tokenizer.json that tokens/tokenizer.hpp does not take,
// a tokenizer class whose Python code changes the ids, special tokens that
// transformers would add or strip, a template the renderer refuses.
class model_tokenizer {
 public:
  // Reads DIR/tokenizer.json, DIR/tokenizer_config.json and, when there,
  // DIR/chat_template.jinja (which wins over tokenizer_config.json's
  // chat_template). Errors name the file and the reason.
  static expected<model_tokenizer> load(const std::string& dir);

  // The ids of vLLM's POST /tokenize body (openai_body's
  // tokenize_request): a chat's messages rendered with the template then
  // encoded (add_special_tokens false unless the body says so), or a
  // completion's prompt encoded (add_special_tokens true unless it says
  // so). A result with `handoff` set leaves the prompt to the engine (a
  // request this cannot do exactly: tools, a request's own
  // template...). Errors: ec::invalid_argument, a prompt the engine would
  // refuse too (the template's raise_exception, for one), with its reason.
  expected<tokenize_result> tokenize(
      const nlohmann::ordered_json& request) const;

  // One line for the start log: the tokenizer and the template.
  std::string describe() const;

  struct impl;

 private:
  model_tokenizer() = default;
  std::shared_ptr<const impl> impl_;
};

// The labels of tokenize_result::handoff, in a fixed set.
inline constexpr const char* handoff_reasons[] = {
    "no_template",      // DIR has no chat template (the engine may have one)
    "tools",            // tools: the engine reshapes them through its schema
    "tool_calls",       // an assistant's tool calls (reshaped likewise)
    "content",          // content parts other than plain text
    "message",          // a message field read differently across versions
    "request_field",    // chat_template, documents, continue_final_message,
                        // a flag that is not a JSON boolean
    "template_kwargs",  // a chat_template_kwargs key transformers consumes,
                        // or one contradicting the request's own flags
    "renderer",         // what the renderer or the tokenizer leaves out
};

// The in-process tokenizers of the models given: a short prompt encoded
// where it is asked, a longer one on `threads` threads of their own (so
// that a long prompt holds no HTTP thread).
class local_tokenizers {
 public:
  // Stops after the encodes under way; those queued are dropped.
  ~local_tokenizers();
  local_tokenizers(const local_tokenizers&) = delete;
  local_tokenizers& operator=(const local_tokenizers&) = delete;

  static std::unique_ptr<local_tokenizers> start(
      std::map<std::string, model_tokenizer> models, size_t threads);

  // The tokenizer of the pool's model (a LoRA adapter's: its base
  // model's), or null: the engine's then. Its answers come on its threads.
  std::shared_ptr<prompt_tokenizer> for_pool(const pool_model& pool) const;

  struct impl;

 private:
  explicit local_tokenizers(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvmesh::gateway
