// Chat templates: renders a model's Jinja2 chat template over a chat request
// exactly as transformers' apply_chat_template (and so vLLM) does.
//
// Debian 12 ships no C++ Jinja library (only Python ones), so this is a
// hand-written lexer, parser and evaluator of the Jinja subset that chat
// templates use, with Python's semantics (str(), repr(), json.dumps, ==,
// truthiness, Undefined) and transformers' environment (trim_blocks and
// lstrip_blocks on, tojson without HTML escaping, raise_exception,
// strftime_now, loop controls, the generation tag). Anything outside that
// subset fails parse() with its name and line, never renders approximately.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace kvmesh {

struct chat_template_render_options {
  // strftime_now()'s clock, read as local time like Python's datetime.now();
  // unset: the system clock. Tests fix it.
  std::optional<std::chrono::system_clock::time_point> now;
  // Refuses a render whose output (or any string it builds) grows past this.
  std::size_t max_output = std::size_t{64} << 20;
  // Refuses a render that evaluates more nodes than this (hostile loops).
  std::size_t max_steps = 50'000'000;
};

class chat_template {
 public:
  // Parses the template source; errors (ec::parse_error) name the
  // unsupported construct and its line: "chat template line 3: filter
  // 'wordcount' is not supported".
  static expected<chat_template> parse(std::string_view source);

  // Renders with `context` as the template's variables (messages,
  // add_generation_prompt, bos_token, eos_token, tools, and any
  // chat_template_kwargs). Errors:
  // - ec::invalid_argument: the template's raise_exception(), and what
  //   Python would raise (undefined attribute of an undefined value,
  //   str + None, ...);
  // - ec::parse_error: what Python would render but this renderer leaves
  //   out, seen only in the values ("upper of non-ASCII text is not
  //   supported", an integer past 64 bits);
  // - ec::capacity_exceeded: the output or step bounds, nesting deeper
  //   than 512, range() past a million items.
  //
  // The context is an ordered_json: the engine's Python keeps a request's
  // object keys in their order, and tojson prints them so.
  expected<std::string> render(const nlohmann::ordered_json& context) const;
  expected<std::string> render(
      const nlohmann::ordered_json& context,
      const chat_template_render_options& options) const;
  // nlohmann::json sorts object keys: tojson over it would print a tool's
  // keys in another order than the engine. Convert nothing silently.
  expected<std::string> render(const nlohmann::json& context) const = delete;
  expected<std::string> render(
      const nlohmann::json& context,
      const chat_template_render_options& options) const = delete;

  // Whether vLLM hands this template each message's content as a list of
  // parts ([{"type": "text", "text": ...}]) rather than as a string: its
  // "openai" content format, which it detects (--chat-template-content-
  // format auto) by a loop over a message's content, as here.
  bool takes_content_parts() const;

  struct program;

 private:
  explicit chat_template(std::shared_ptr<const program> p)
      : program_(std::move(p)) {}
  std::shared_ptr<const program> program_;
};

}  // namespace kvmesh
