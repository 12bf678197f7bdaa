// OpenAI request bodies: the prompt (token ids or text), stream, max_tokens.
#include "engines/openai.hpp"

#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "core/block_hash.hpp"
#include "core/json_guard.hpp"
#include "messages/limits.hpp"

namespace kvmesh {

namespace {

using json = nlohmann::json;

error bad(const std::string& why) {
  return make_error(ec::parse_error, "OpenAI request: " + why);
}

// The text of a chat message's content: a string, or parts of which the
// text ones count.
void append_content(const json& content, std::string& out) {
  if (content.is_string()) {
    out += content.get_ref<const std::string&>();
  } else if (content.is_array()) {
    for (const auto& part : content)
      if (part.is_object())
        if (auto t = part.find("text"); t != part.end() && t->is_string())
          out += t->get_ref<const std::string&>();
  }
}

bool token_list(const json& v, std::vector<uint32_t>& out) {
  if (!v.is_array() || v.empty()) return false;
  for (const auto& t : v) {
    if (!t.is_number_unsigned() ||
        t.get<uint64_t>() > std::numeric_limits<uint32_t>::max())
      return false;
    out.push_back(t.get<uint32_t>());
  }
  return true;
}

}  // namespace

expected<openai_request> parse_openai_request(std::string_view body, bool chat,
                                              uint32_t block_tokens) {
  if (block_tokens == 0)
    return make_error(ec::invalid_argument,
                      "block size must be at least 1 token");
  // Deep nesting would blow a small body up into a large parsed tree.
  if (!json_depth_within(body))
    return bad("nesting deeper than " + std::to_string(max_json_depth) +
               " levels");
  auto obj = json::parse(body.begin(), body.end(), nullptr, false);
  if (obj.is_discarded() || !obj.is_object())
    return bad("the body is not a JSON object");
  openai_request out;
  if (auto s = obj.find("stream"); s != obj.end() && s->is_boolean())
    out.stream = s->get<bool>();
  for (const char* key : {"max_tokens", "max_completion_tokens"})
    if (auto m = obj.find(key); m != obj.end() && m->is_number_unsigned())
      out.prompt.output_tokens = static_cast<uint32_t>(std::min<uint64_t>(
          m->get<uint64_t>(), std::numeric_limits<uint32_t>::max()));
  std::string text;
  std::vector<uint32_t> tokens;
  if (chat) {
    auto msgs = obj.find("messages");
    if (msgs == obj.end() || !msgs->is_array() || msgs->empty())
      return bad("'messages' must be a non-empty array");
    for (const auto& m : *msgs) {
      if (!m.is_object()) return bad("a message is not an object");
      if (auto c = m.find("content"); c != m.end()) {
        if (!text.empty()) text += '\n';
        append_content(*c, text);
      }
    }
  } else {
    auto p = obj.find("prompt");
    if (p == obj.end()) return bad("'prompt' is missing");
    const json* prompt = &*p;
    // A batch of prompts ([str, ...] or [[ids], ...]) is sized by its first.
    if (prompt->is_array() && !prompt->empty() &&
        ((*prompt)[0].is_string() || (*prompt)[0].is_array()))
      prompt = &(*prompt)[0];
    if (prompt->is_string())
      text = prompt->get_ref<const std::string&>();
    else if (!token_list(*prompt, tokens))
      return bad("'prompt' is neither text nor token ids");
  }
  front_request& r = out.prompt;
  if (!tokens.empty()) {
    r.prompt_tokens = static_cast<uint32_t>(tokens.size());
    if (auto h = hash_blocks(tokens, block_tokens))
      for (const auto& b : *h)
        r.blocks.push_back(b.seq);
    return out;
  }
  r.approximate = true;
  r.prompt_tokens = static_cast<uint32_t>(std::min<uint64_t>(
      (text.size() + text_bytes_per_token - 1) / text_bytes_per_token,
      std::numeric_limits<uint32_t>::max()));
  if (!text.empty())
    if (auto h = hash_text_blocks(text, block_tokens)) r.blocks = std::move(*h);
  return out;
}

expected<std::vector<served_model>> parse_models_list(std::string_view body) {
  auto bad = [](const std::string& why) {
    return make_error(ec::parse_error, "/v1/models: " + why);
  };
  if (!json_depth_within(body)) return bad("nested too deep");
  auto obj = json::parse(body.begin(), body.end(), nullptr, false);
  if (obj.is_discarded() || !obj.is_object()) return bad("not a JSON object");
  auto data = obj.find("data");
  if (data == obj.end() || !data->is_array()) return bad("no 'data' list");
  if (data->size() > max_models_per_worker)
    return bad(std::to_string(data->size()) + " models, more than " +
               std::to_string(max_models_per_worker));
  std::vector<served_model> out;
  auto name_of = [](const json& e, const char* key, std::string& to) {
    auto f = e.find(key);
    if (f == e.end() || f->is_null()) return true;  // absent: none
    if (!f->is_string() ||
        f->get_ref<const std::string&>().size() > max_name_bytes)
      return false;
    to = f->get<std::string>();
    return true;
  };
  for (const auto& m : *data) {
    served_model s;
    if (!m.is_object() || !name_of(m, "id", s.name) || s.name.empty())
      return bad("an entry without an 'id' of 1 to " +
                 std::to_string(max_name_bytes) + " bytes");
    if (!name_of(m, "parent", s.parent))
      return bad("model '" + s.name + "': a 'parent' that is not a name");
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace kvmesh
