// Validation of OpenAI request bodies (see openai_body.hpp).
#include "gateway/openai_body.hpp"

#include <limits>

namespace kvmesh::gateway {

namespace {

// Ordered: the prompt's objects keep the client's key order (a template's
// tojson prints them so, as the engine's Python does).
using json = nlohmann::ordered_json;

body_error missing(const std::string& param) {
  return {400, "you must provide a '" + param + "' parameter", param,
          "missing_field"};
}

body_error wrong_type(const std::string& param, const char* want) {
  return {400, "'" + param + "' must be " + want, param, "wrong_type"};
}

body_error bad_value(const std::string& param, const std::string& why) {
  return {400, "'" + param + "' " + why, param, "bad_value"};
}

// A member that is present and not null.
const json* member(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// A token id: an integer in [0, 2^32).
bool token_id(const json& v, uint32_t& out) {
  if (v.is_number_unsigned()) {
    const auto x = v.get<uint64_t>();
    if (x > std::numeric_limits<uint32_t>::max()) return false;
    out = static_cast<uint32_t>(x);
    return true;
  }
  if (v.is_number_integer()) {
    const auto x = v.get<int64_t>();
    if (x < 0 || x > int64_t{std::numeric_limits<uint32_t>::max()})
      return false;
    out = static_cast<uint32_t>(x);
    return true;
  }
  return false;
}

// A count of tokens: a non-negative integer (capped at 2^32 - 1).
std::optional<body_error> token_count(const json& obj, const char* key,
                                      uint32_t& out) {
  const json* v = member(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return wrong_type(key, "an integer");
  if (v->is_number_unsigned()) {
    const auto x = v->get<uint64_t>();
    out = x > std::numeric_limits<uint32_t>::max()
              ? std::numeric_limits<uint32_t>::max()
              : static_cast<uint32_t>(x);
    return std::nullopt;
  }
  if (v->get<int64_t>() < 0) return bad_value(key, "must be >= 0");
  out = static_cast<uint32_t>(v->get<int64_t>());
  return std::nullopt;
}

// Chat content: a string, or an array of parts {type, ...}; text parts
// carry a string "text". Counts the text's bytes.
std::optional<body_error> check_content(const json& content,
                                        const std::string& param,
                                        size_t& bytes) {
  if (content.is_string()) {
    bytes += content.get_ref<const std::string&>().size();
    return std::nullopt;
  }
  if (!content.is_array())
    return wrong_type(param, "a string or an array of content parts");
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return wrong_type(p, "an object");
    const json* type = member(part, "type");
    if (!type) return missing(p + ".type");
    if (!type->is_string()) return wrong_type(p + ".type", "a string");
    if (type->get_ref<const std::string&>() != "text") continue;
    const json* text = member(part, "text");
    if (!text) return missing(p + ".text");
    if (!text->is_string()) return wrong_type(p + ".text", "a string");
    bytes += text->get_ref<const std::string&>().size();
  }
  return std::nullopt;
}

std::optional<body_error> parse_chat(const json& doc, openai_body& out) {
  const json* messages = member(doc, "messages");
  if (!messages) return missing("messages");
  if (!messages->is_array()) return wrong_type("messages", "an array");
  if (messages->empty())
    return bad_value("messages", "must hold at least one message");
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return wrong_type(p, "an object");
    const json* role = member(m, "role");
    if (!role) return missing(p + ".role");
    if (!role->is_string()) return wrong_type(p + ".role", "a string");
    // An assistant's message with tool calls may have no content.
    if (const json* content = member(m, "content"))
      if (auto e = check_content(*content, p + ".content", out.prompt_bytes))
        return e;
  }
  if (auto e = token_count(doc, "max_completion_tokens", out.output_tokens))
    return e;
  if (out.output_tokens == 0)
    if (auto e = token_count(doc, "max_tokens", out.output_tokens)) return e;
  json t = {{"model", out.model}, {"messages", *messages}};
  // vLLM's chat request knobs that change the rendered prompt go to the
  // tokenizer as they are.
  bool prompt_flag = false;
  for (const char* key : {"add_generation_prompt", "continue_final_message",
                          "tools", "chat_template", "chat_template_kwargs",
                          "add_special_tokens", "documents"})
    if (const json* v = member(doc, key)) {
      t[key] = *v;
      if (std::string_view(key) == "add_generation_prompt") prompt_flag = true;
    }
  if (!prompt_flag) {
    const json* cont = member(doc, "continue_final_message");
    t["add_generation_prompt"] =
        !(cont && cont->is_boolean() && cont->get<bool>());
  }
  out.tokenize_request = std::move(t);
  return std::nullopt;
}

std::optional<body_error> parse_completions(const json& doc, openai_body& out) {
  const json* prompt = member(doc, "prompt");
  if (!prompt) return missing("prompt");
  const char* shapes =
      "a string, an array of strings, an array of token ids or an array of "
      "arrays of token ids";
  auto ids = [&](const json& arr,
                 const std::string& param) -> std::optional<body_error> {
    std::vector<uint32_t> tokens;
    tokens.reserve(arr.size());
    for (size_t i = 0; i < arr.size(); ++i) {
      uint32_t t = 0;
      if (!token_id(arr[i], t))
        return arr[i].is_number_integer()
                   ? bad_value(param + "[" + std::to_string(i) + "]",
                               "is not a token id")
                   : wrong_type(param + "[" + std::to_string(i) + "]",
                                "a token id");
      tokens.push_back(t);
    }
    if (!out.prompt_tokens) out.prompt_tokens = std::move(tokens);
    return std::nullopt;
  };
  std::string text;
  bool have_text = false;
  if (prompt->is_string()) {
    text = prompt->get<std::string>();
    have_text = true;
  } else if (prompt->is_array()) {
    if (prompt->empty()) return bad_value("prompt", "must not be empty");
    const json& first = (*prompt)[0];
    if (first.is_number()) {
      if (auto e = ids(*prompt, "prompt")) return e;
    } else if (first.is_string()) {
      for (size_t i = 0; i < prompt->size(); ++i)
        if (!(*prompt)[i].is_string())
          return wrong_type("prompt[" + std::to_string(i) + "]", "a string");
      text = first.get<std::string>();
      have_text = true;
    } else if (first.is_array()) {
      for (size_t i = 0; i < prompt->size(); ++i) {
        const std::string p = "prompt[" + std::to_string(i) + "]";
        if (!(*prompt)[i].is_array())
          return wrong_type(p, "an array of token ids");
        if (auto e = ids((*prompt)[i], p)) return e;
      }
    } else {
      return wrong_type("prompt[0]", shapes);
    }
  } else {
    return wrong_type("prompt", shapes);
  }
  if (auto e = token_count(doc, "max_tokens", out.output_tokens)) return e;
  if (have_text) {
    out.prompt_bytes = text.size();
    out.tokenize_request = {{"model", out.model}, {"prompt", std::move(text)}};
    if (const json* v = member(doc, "add_special_tokens"))
      out.tokenize_request["add_special_tokens"] = *v;
  }
  return std::nullopt;
}

}  // namespace

body_result parse_openai_body(std::string_view body, openai_api api) {
  json doc = json::parse(body, nullptr, false);
  if (doc.is_discarded())
    return body_error{400, "the body is not valid JSON", "", "not_json"};
  if (!doc.is_object())
    return body_error{400, "the body must be a JSON object", "", "not_json"};
  openai_body out;
  out.api = api;
  const json* model = member(doc, "model");
  if (!model) return missing("model");
  if (!model->is_string()) return wrong_type("model", "a string");
  out.model = model->get<std::string>();
  if (out.model.empty()) return bad_value("model", "must not be empty");
  if (const json* s = member(doc, "stream")) {
    if (!s->is_boolean()) return wrong_type("stream", "a boolean");
    out.stream = s->get<bool>();
  }
  if (const json* so = member(doc, "stream_options")) {
    if (!so->is_object()) return wrong_type("stream_options", "an object");
    if (const json* u = member(*so, "include_usage")) {
      if (!u->is_boolean())
        return wrong_type("stream_options.include_usage", "a boolean");
      out.include_usage = u->get<bool>();
    }
  }
  auto e = api == openai_api::chat ? parse_chat(doc, out)
                                   : parse_completions(doc, out);
  if (e) return *e;
  return out;
}

}  // namespace kvmesh::gateway
