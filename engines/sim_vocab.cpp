// The simulated engine's fixed vocabulary (see sim_vocab.hpp).
#include "engines/sim_vocab.hpp"

#include <array>

namespace kvmesh {

namespace {

error bad(const std::string& what) {
  return make_error(ec::invalid_argument, what);
}

void append_bytes(const std::string& text, std::vector<uint32_t>& out) {
  for (unsigned char c : text)
    out.push_back(sim_byte_base + c);
}

}  // namespace

expected<std::string> sim_render_chat(const nlohmann::json& messages,
                                      bool add_generation_prompt) {
  if (!messages.is_array()) return bad("messages is not an array");
  if (messages.empty()) return bad("messages is empty");
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad(at + " is not an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return bad(at + ".role is not a string");
    std::string content;
    if (auto c = m.find("content"); c != m.end() && !c->is_null()) {
      if (c->is_string()) {
        content = c->get<std::string>();
      } else if (c->is_array()) {
        for (const auto& part : *c) {
          if (!part.is_object()) return bad(at + ".content has a non-object");
          auto type = part.find("type");
          if (type == part.end() || *type != "text") continue;
          auto text = part.find("text");
          if (text == part.end() || !text->is_string())
            return bad(at + ".content has a text part without text");
          content += text->get<std::string>();
        }
      } else {
        return bad(at + ".content is neither a string nor an array");
      }
    }
    out += "<|" + role->get<std::string>() + "|>" + content + "\n";
  }
  if (add_generation_prompt) out += "<|assistant|>";
  return out;
}

expected<std::vector<uint32_t>> sim_prompt_tokens(const nlohmann::json& body) {
  if (!body.is_object()) return bad("the body is not a JSON object");
  std::vector<uint32_t> out;
  if (auto m = body.find("messages"); m != body.end()) {
    bool gen = true;
    if (auto g = body.find("add_generation_prompt"); g != body.end()) {
      if (!g->is_boolean()) return bad("add_generation_prompt is not a bool");
      gen = g->get<bool>();
    }
    auto text = sim_render_chat(*m, gen);
    if (!text) return text.err();
    append_bytes(*text, out);
    return out;
  }
  auto p = body.find("prompt");
  if (p == body.end()) return bad("the body has neither prompt nor messages");
  if (p->is_string()) {
    append_bytes(p->get<std::string>(), out);
  } else if (p->is_array()) {
    for (const auto& t : *p) {
      if (!t.is_number_unsigned() || t.get<uint64_t>() >= (uint64_t{1} << 31))
        return bad(t.is_string() || t.is_array()
                       ? "prompt: a batch of prompts is not served"
                       : "prompt: token ids must be integers 0 to 2^31-1");
      out.push_back(t.get<uint32_t>());
    }
  } else {
    return bad("prompt is neither a string nor an array of token ids");
  }
  if (out.empty()) return bad("prompt is empty");
  return out;
}

const std::string& sim_output_piece(uint32_t i) {
  static const std::array<std::string, 8> words = {
      "Hello", " from",      " a",      " simulated",
      " GPU",  " caf\u00e9", " \u2014", " ok."};
  return words[i % words.size()];
}

}  // namespace kvmesh
