// The in-process tokenizer (local_tokenizer.hpp): a model's files checked
// at load, a request's prompt rendered and encoded as vLLM does, on a small
// thread pool.
#include "gateway/local_tokenizer.hpp"

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "core/json_guard.hpp"
#include "tokens/chat_template.hpp"
#include "tokens/tokenizer.hpp"

namespace kvmesh::gateway {

namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

expected<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ec::io_error, path + ": cannot open");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return make_error(ec::io_error, path + ": cannot read");
  return buf.str();
}

// Python's text mode (transformers reads chat_template.jinja with open()):
// "\r\n" and "\r" are "\n".
std::string universal_newlines(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\r') {
      out += s[i];
    } else {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    }
  }
  return out;
}

// Tokenizer classes whose Python code leaves tokenizer.json's ids alone,
// and the Llama ones, which rebuild its post_processor from add_bos_token
// (true unless said) and add_eos_token (false unless said).
constexpr const char* plain_classes[] = {
    "PreTrainedTokenizerFast", "TokenizersBackend", "GPT2Tokenizer",
    "GPT2TokenizerFast",       "Qwen2Tokenizer",    "Qwen2TokenizerFast"};
constexpr const char* llama_classes[] = {"LlamaTokenizer",
                                         "LlamaTokenizerFast"};

template <size_t N>
bool one_of(const std::string& s, const char* const (&set)[N]) {
  return std::any_of(std::begin(set), std::end(set),
                     [&](const char* x) { return s == x; });
}

// The special tokens transformers hands a chat template (its
// special_tokens_map), as tokenizer_config.json names them.
constexpr const char* special_keys[] = {"bos_token", "eos_token", "unk_token",
                                        "sep_token", "pad_token", "cls_token",
                                        "mask_token"};

// What a class's __init__ takes for a special token tokenizer_config.json
// leaves out (transformers 4's defaults), or null.
const char* class_default(const std::string& cls, std::string_view key) {
  if (cls.rfind("Llama", 0) == 0)
    return key == "bos_token"   ? "<s>"
           : key == "eos_token" ? "</s>"
           : key == "unk_token" ? "<unk>"
                                : nullptr;
  if (cls.rfind("GPT2", 0) == 0)
    return key == "bos_token" || key == "eos_token" || key == "unk_token"
               ? "<|endoftext|>"
               : nullptr;
  if (cls.rfind("Qwen2", 0) == 0)
    return key == "eos_token" || key == "unk_token" || key == "pad_token"
               ? "<|endoftext|>"
               : nullptr;
  return nullptr;
}

// apply_chat_template's own parameters: as chat_template_kwargs they are
// consumed by transformers, not handed to the template, except the two
// vLLM overrides with the request's own.
constexpr const char* consumed_kwargs[] = {
    "conversation",    "messages",      "tools",
    "documents",       "chat_template", "tokenize",
    "padding",         "truncation",    "max_length",
    "return_tensors",  "return_dict",   "return_assistant_tokens_mask",
    "tokenizer_kwargs"};

tokenize_result handoff(const char* reason) {
  tokenize_result r;
  r.handoff = reason;
  return r;
}

}  // namespace

struct model_tokenizer::impl {
  std::optional<tokenizer> tok;
  std::optional<chat_template> tmpl;
  std::string template_from;  // the file it came from
  bool parts = false;         // content as a list of parts (vLLM's "openai")
  ojson special = ojson::object();  // bos_token ... for the template

  // Loading: what the config says without the vocabulary (cheap, first),
  // the template, then the special tokens against the vocabulary.
  status read_class(const std::string& path, const ojson& cfg);
  status read_template(const std::string& dir, const ojson& cfg);
  status read_tokens(const std::string& path, const ojson& cfg);
  std::string cls;  // tokenizer_class
  bool llama = false;

  // vLLM's conversation (renderers/chat_utils, parse_chat_messages) of
  // the request's messages, or the handoff reason.
  std::optional<tokenize_result> conversation(const ojson& messages,
                                              ojson& out) const;
  expected<tokenize_result> chat(const ojson& req) const;
  expected<tokenize_result> completion(const ojson& req) const;
  expected<tokenize_result> encode(const std::string& text,
                                   bool add_special) const;
};

namespace {

// A special token as tokenizer_config.json writes it: a string, an
// AddedToken object {"content": ...}, or null (nullopt).
expected<std::optional<std::string>> token_text(const ojson& v,
                                                const std::string& what) {
  if (v.is_null()) return std::optional<std::string>();
  if (v.is_string()) return std::optional<std::string>(v.get<std::string>());
  if (v.is_object()) {
    auto c = v.find("content");
    if (c != v.end() && c->is_string())
      return std::optional<std::string>(c->get<std::string>());
  }
  return make_error(ec::invalid_argument,
                    what + " is neither a string nor {\"content\": ...}");
}

// A boolean of tokenizer_config.json: absent or null gives nullopt.
expected<std::optional<bool>> config_flag(const ojson& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean())
    return make_error(ec::invalid_argument,
                      std::string(key) + " is not a boolean");
  return std::optional<bool>(it->get<bool>());
}

std::string ids_text(const std::vector<uint32_t>& ids) {
  if (ids.empty()) return "nothing";
  std::string s;
  for (uint32_t id : ids)
    s += (s.empty() ? "id " : ", ") + std::to_string(id);
  return s;
}

}  // namespace

status model_tokenizer::impl::read_class(const std::string& path,
                                         const ojson& cfg) {
  auto refuse = [&](const std::string& why) {
    return make_error(ec::invalid_argument, path + ": " + why);
  };
  auto cls_it = cfg.find("tokenizer_class");
  if (cls_it == cfg.end() || !cls_it->is_string())
    return refuse(
        "no tokenizer_class (transformers would pick a class from the "
        "model's config.json, and some change the ids)");
  cls = cls_it->get<std::string>();
  llama = one_of(cls, llama_classes);
  if (!llama && !one_of(cls, plain_classes))
    return refuse("tokenizer_class '" + cls +
                  "' is not supported (its Python code may change the ids; "
                  "taken: PreTrainedTokenizerFast, TokenizersBackend, "
                  "GPT2Tokenizer[Fast], Qwen2Tokenizer[Fast], "
                  "LlamaTokenizer[Fast])");
  for (const char* key : {"split_special_tokens", "do_lower_case"}) {
    auto f = config_flag(cfg, key);
    if (!f) return refuse(f.err().message);
    if (f->value_or(false))
      return refuse(std::string(key) + " true is not supported");
  }
  auto prefix_space = config_flag(cfg, "add_prefix_space");
  if (!prefix_space) return refuse(prefix_space.err().message);
  if (llama && prefix_space->has_value())
    return refuse(
        "add_prefix_space with a Llama tokenizer is not supported "
        "(transformers then converts the slow tokenizer instead)");
  if (prefix_space->value_or(false))
    return refuse("add_prefix_space true is not supported");
  return ok;
}

status model_tokenizer::impl::read_tokens(const std::string& path,
                                          const ojson& cfg) {
  auto refuse = [&](const std::string& why) {
    return make_error(ec::invalid_argument, path + ": " + why);
  };
  const tokenizer& t = *tok;
  // Special tokens: each must be one of tokenizer.json's added tokens
  // (transformers would make it one, with a new id if it is missing, and
  // match it in the text before anything else).
  auto known = [&](const std::string& key, const std::string& text) -> status {
    if (!t.is_added(text))
      return refuse(key + " '" + text +
                    "' is not an added token of tokenizer.json "
                    "(transformers would add it)");
    return ok;
  };
  for (const char* key : special_keys) {
    auto it = cfg.find(key);
    std::optional<std::string> text;
    if (it != cfg.end()) {
      auto v = token_text(*it, key);
      if (!v) return refuse(v.err().message);
      text = *v;
    } else if (const char* d = class_default(cls, key)) {
      text = d;
    }
    if (!text) continue;
    if (auto st = known(key, *text); !st) return st;
    special[key] = *text;
  }
  if (auto it = cfg.find("additional_special_tokens");
      it != cfg.end() && !it->is_null()) {
    if (!it->is_array())
      return refuse("additional_special_tokens is not a list");
    ojson list = ojson::array();
    for (const auto& v : *it) {
      auto text = token_text(v, "an additional_special_tokens item");
      if (!text) return refuse(text.err().message);
      if (!*text) continue;
      if (auto st = known("additional_special_tokens", **text); !st) return st;
      list.push_back(**text);
    }
    special["additional_special_tokens"] = std::move(list);
  }
  // Added tokens transformers re-adds when they differ from
  // tokenizer.json's: same id, no stripping, not normalized.
  if (auto it = cfg.find("added_tokens_decoder");
      it != cfg.end() && !it->is_null()) {
    if (!it->is_object()) return refuse("added_tokens_decoder is not a map");
    for (const auto& [id_text, entry] : it->items()) {
      const std::string where = "added_tokens_decoder[" + id_text + "]";
      if (!entry.is_object() || !entry.contains("content") ||
          !entry["content"].is_string())
        return refuse(where + " has no content string");
      const std::string content = entry["content"].get<std::string>();
      const auto id = t.token_id(content);
      if (!id || std::to_string(*id) != id_text || !t.is_added(content))
        return refuse(where + " '" + content + "' is not added token " +
                      id_text + " in tokenizer.json");
      for (const char* flag :
           {"lstrip", "rstrip", "single_word", "normalized"}) {
        auto f = entry.find(flag);
        if (f != entry.end() && f->is_boolean() && f->get<bool>())
          return refuse(where + " '" + content + "': " + flag +
                        " true is not supported");
      }
    }
  }

  // What add_special_tokens adds, against what the config says it adds.
  std::vector<uint32_t> with, without;
  if (auto st = t.encode("a", true, with); !st) return refuse(st.err().message);
  if (auto st = t.encode("a", false, without); !st)
    return refuse(st.err().message);
  auto at =
      std::search(with.begin(), with.end(), without.begin(), without.end());
  if (at == with.end())
    return refuse("tokenizer.json's template drops the text");
  const std::vector<uint32_t> before(with.begin(), at);
  const std::vector<uint32_t> after(
      at + static_cast<std::ptrdiff_t>(without.size()), with.end());
  struct side {
    const char* flag;
    const char* token;
    const std::vector<uint32_t>& added;
    const char* where;
    bool llama_default;
  };
  for (const side& x :
       {side{"add_bos_token", "bos_token", before, "before", true},
        side{"add_eos_token", "eos_token", after, "after", false}}) {
    auto f = config_flag(cfg, x.flag);
    if (!f) return refuse(f.err().message);
    std::optional<bool> adds = *f;
    if (llama && !adds) adds = x.llama_default;
    if (!adds) continue;  // tokenizer.json's post_processor decides
    std::vector<uint32_t> want;
    if (*adds) {
      if (!special.contains(x.token))
        return refuse(std::string(x.flag) + " is true but there is no " +
                      x.token);
      want.push_back(*t.token_id(special[x.token].get<std::string>()));
    }
    if (x.added != want)
      return refuse(std::string(x.flag) + " " + (*adds ? "true" : "false") +
                    (f->has_value() ? "" : " (the Llama class's default)") +
                    " means " + ids_text(want) + " " + x.where +
                    " the text, but tokenizer.json's post_processor adds " +
                    ids_text(x.added) +
                    " (transformers versions disagree on which wins)");
  }
  return ok;
}

status model_tokenizer::impl::read_template(const std::string& dir,
                                            const ojson& cfg) {
  // A processor's template is what vLLM prefers for a multimodal model:
  // not read, so refused.
  for (const char* f : {"chat_template.json", "processor_config.json",
                        "preprocessor_config.json"})
    if (fs::exists(dir + "/" + f))
      return make_error(ec::invalid_argument,
                        dir + "/" + f +
                            ": a multimodal model's processor is not "
                            "supported (vLLM may take its chat template)");
  std::string source;
  const std::string jinja = dir + "/chat_template.jinja";
  if (fs::exists(jinja)) {
    auto text = read_file(jinja);
    if (!text) return text.err();
    source = universal_newlines(*text);
    template_from = jinja;
  } else {
    template_from = dir + "/tokenizer_config.json";
    auto it = cfg.find("chat_template");
    if (it == cfg.end() || it->is_null()) return ok;  // none: the engine's
    if (it->is_string()) {
      source = it->get<std::string>();
    } else if (it->is_array()) {
      // Named templates: "default" (a "tool_use" one serves tools, which
      // are the engine's here).
      bool found = false;
      for (const auto& n : *it)
        if (n.is_object() && n.value("name", ojson()) == "default" &&
            n.contains("template") && n["template"].is_string()) {
          source = n["template"].get<std::string>();
          found = true;
        }
      if (!found)
        return make_error(
            ec::invalid_argument,
            template_from + ": chat_template names no 'default' template");
    } else {
      return make_error(
          ec::invalid_argument,
          template_from + ": chat_template is neither a string nor a list");
    }
  }
  auto t = chat_template::parse(source);
  if (!t)
    return make_error(t.err().code, template_from + ": " + t.err().message);
  tmpl = *t;
  parts = tmpl->takes_content_parts();
  return ok;
}

expected<model_tokenizer> model_tokenizer::load(const std::string& dir) {
  if (!fs::is_directory(dir))
    return make_error(ec::io_error, dir + ": not a directory");
  auto p = std::make_shared<impl>();
  // The config and the template first: their mistakes need no vocabulary.
  const std::string cfg_path = dir + "/tokenizer_config.json";
  auto text = read_file(cfg_path);
  if (!text) return text.err();
  if (!json_depth_within(*text))
    return make_error(ec::parse_error, cfg_path + ": nested too deeply");
  const ojson cfg = ojson::parse(*text, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object())
    return make_error(ec::parse_error, cfg_path + ": not a JSON object");
  if (auto st = p->read_class(cfg_path, cfg); !st) return st.err();
  if (auto st = p->read_template(dir, cfg); !st) return st.err();
  const std::string json_path = dir + "/tokenizer.json";
  auto t = tokenizer::load(json_path);
  if (!t) {
    // tokenizer::load names the file and its reasons "tokenizer.json: ...".
    std::string m = t.err().message;
    const std::string twice = json_path + ": tokenizer.json: ";
    if (m.rfind(twice, 0) == 0) m = json_path + ": " + m.substr(twice.size());
    if (m.rfind("tokenizer: cannot open ", 0) == 0)
      m = json_path + ": cannot open";
    return make_error(t.err().code, m);
  }
  p->tok = *t;
  if (auto st = p->read_tokens(cfg_path, cfg); !st) return st.err();
  model_tokenizer m;
  m.impl_ = std::move(p);
  return m;
}

std::string model_tokenizer::describe() const {
  std::string s = impl_->tok->describe();
  if (!impl_->tmpl)
    return s + "; no chat template (chat prompts are the engine's)";
  return s + "; chat template from " + impl_->template_from +
         (impl_->parts ? " (content as a list of parts)" : "");
}

expected<tokenize_result> model_tokenizer::impl::encode(
    const std::string& text, bool add_special) const {
  tokenize_result r;
  if (!tok->encode(text, add_special, r.tokens)) return handoff("renderer");
  return r;
}

expected<tokenize_result> model_tokenizer::impl::completion(
    const ojson& req) const {
  bool add_special = true;  // vLLM's default for a completion
  if (auto it = req.find("add_special_tokens");
      it != req.end() && !it->is_null()) {
    // Pydantic reads "yes", 1... as booleans too: the engine's to say.
    if (!it->is_boolean()) return handoff("request_field");
    add_special = it->get<bool>();
  }
  return encode(req["prompt"].get<std::string>(), add_special);
}

std::optional<tokenize_result> model_tokenizer::impl::conversation(
    const ojson& messages, ojson& out) const {
  static const std::string billing = "x-anthropic-billing-header";
  out = ojson::array();
  for (const ojson& m : messages) {
    const std::string role = m.at("role").get<std::string>();
    // vLLM gives a developer message the tools it names (newer versions).
    if (role == "developer") return handoff("message");
    // The text parts; null content has none.
    std::vector<std::string> texts;
    if (auto c = m.find("content"); c != m.end() && !c->is_null()) {
      if (c->is_string()) {
        texts.push_back(c->get<std::string>());
      } else {
        for (const ojson& part : *c) {
          auto type = part.find("type");
          auto text = part.find("text");
          if (part.size() != 2 || type == part.end() || *type != "text" ||
              text == part.end() || !text->is_string())
            return handoff("content");
          texts.push_back(text->get<std::string>());
        }
      }
    }
    // vLLM strips this header line from system texts (newer versions only).
    if (role == "system")
      for (const auto& t : texts)
        if (t.rfind(billing, 0) == 0) return handoff("content");
    // vLLM's ConversationMessage, its keys in its order.
    ojson msg = ojson::object();
    msg["role"] = role;
    if (parts && role != "tool") {
      ojson list = ojson::array();
      for (const auto& t : texts)
        list.push_back(ojson{{"type", "text"}, {"text", t}});
      msg["content"] = std::move(list);
    } else {
      std::string joined;
      for (size_t i = 0; i < texts.size(); ++i)
        joined += (i ? "\n" : "") + texts[i];
      msg["content"] = std::move(joined);
    }
    for (const auto& [key, v] : m.items()) {
      if (key == "tool_calls" && role == "assistant") {
        // None or [] is no tool calls; others are reshaped by the engine.
        if (!v.is_null() && !(v.is_array() && v.empty()))
          return handoff("tool_calls");
      } else if (key == "reasoning" || key == "reasoning_content" ||
                 key == "task" || key == "tools") {
        if (!v.is_null()) return handoff("message");
      } else if (key == "name" && !v.is_null() && !v.is_string()) {
        return handoff("message");
      }
      // Anything else vLLM drops.
    }
    if (role == "tool")
      if (auto id = m.find("tool_call_id"); id != m.end()) {
        if (!id->is_null() && !id->is_string()) return handoff("message");
        msg["tool_call_id"] = *id;
      }
    if (auto n = m.find("name"); n != m.end() && n->is_string())
      msg["name"] = *n;
    out.push_back(std::move(msg));
  }
  return std::nullopt;
}

expected<tokenize_result> model_tokenizer::impl::chat(const ojson& req) const {
  if (!tmpl) return handoff("no_template");
  auto present = [&](const char* key) {
    auto it = req.find(key);
    return it != req.end() && !it->is_null();
  };
  // A template of the request's own, documents, a continued final message:
  // the engine's (transformers cuts the render after the last message).
  if (present("chat_template") || present("documents"))
    return handoff("request_field");
  auto flag = [&](const char* key, bool dflt) -> std::optional<bool> {
    auto it = req.find(key);
    if (it == req.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) return std::nullopt;
    return it->get<bool>();
  };
  const auto gen = flag("add_generation_prompt", true);
  const auto cont = flag("continue_final_message", false);
  const auto add_special = flag("add_special_tokens", false);
  if (!gen || !cont || !add_special || *cont) return handoff("request_field");
  // An empty tools list is rendered as it is; tools are the engine's.
  ojson tools;
  if (present("tools")) {
    const ojson& t = req["tools"];
    if (!t.is_array() || !t.empty()) return handoff("tools");
    tools = ojson::array();
  }
  ojson context = ojson::object();
  if (auto h = conversation(req["messages"], context["messages"])) return *h;
  context["tools"] = std::move(tools);
  context["documents"] = nullptr;
  context["add_generation_prompt"] = *gen;
  for (const auto& [k, v] : special.items())
    context[k] = v;
  if (present("chat_template_kwargs")) {
    const ojson& kw = req["chat_template_kwargs"];
    if (!kw.is_object()) return handoff("template_kwargs");
    for (const auto& [k, v] : kw.items()) {
      // vLLM overrides these with the request's own now; older versions
      // let the kwargs win: exact only when both agree.
      if (k == "add_generation_prompt" || k == "continue_final_message") {
        if (v != ojson(k == "add_generation_prompt" ? *gen : false))
          return handoff("template_kwargs");
        continue;
      }
      if (one_of(k, consumed_kwargs)) return handoff("template_kwargs");
      context[k] = v;  // over a special token of the same name, as in HF
    }
  }
  auto text = tmpl->render(context);
  if (!text) {
    if (text.err().code == ec::invalid_argument) return text.err();
    return handoff("renderer");
  }
  return encode(*text, *add_special);
}

expected<tokenize_result> model_tokenizer::tokenize(
    const ojson& request) const {
  if (request.contains("messages")) return impl_->chat(request);
  if (request.contains("prompt") && request["prompt"].is_string())
    return impl_->completion(request);
  return make_error(ec::invalid_argument, "no messages and no prompt");
}

// -- the pool -----------------------------------------------------------------

namespace {

// Text bytes up to which a prompt is encoded where it is asked.
constexpr size_t inline_prompt_bytes = 2048;

// Whether the request's text (its prompt, or its messages' string
// contents) is at most inline_prompt_bytes. What the byte count does not
// see goes to the pool: many request fields (tools, documents), many
// messages, or messages with more than a role and a content.
bool short_prompt(const nlohmann::ordered_json& request) {
  size_t bytes = 0;
  auto add = [&](const nlohmann::ordered_json& text) {
    if (!text.is_string()) return false;
    bytes += text.get_ref<const std::string&>().size();
    return bytes <= inline_prompt_bytes;
  };
  if (request.size() > 8) return false;
  if (auto p = request.find("prompt"); p != request.end()) return add(*p);
  auto m = request.find("messages");
  if (m == request.end() || !m->is_array() || m->size() > 16) return false;
  for (const auto& msg : *m) {
    if (!msg.is_object() || msg.size() > 2) return false;
    auto c = msg.find("content");
    if (c == msg.end() || !add(*c)) return false;
  }
  return true;
}

// One model's prompt_tokenizer: its encodes on the shared pool. A job holds
// the model's tokenizer, never the pool, so that no pool thread is left
// holding what stops the pool. A stopped pool runs nothing more: a prompt
// asked of it then waits for the server's end, which drops it.
class pooled_tokenizer final : public prompt_tokenizer {
 public:
  pooled_tokenizer(std::shared_ptr<const model_tokenizer> model,
                   std::shared_ptr<boost::asio::thread_pool> pool)
      : model_(std::move(model)), pool_(std::move(pool)) {}

  void tokenize(tokenize_ask ask,
                std::function<void(expected<tokenize_result>)> done) override {
    // A short prompt is encoded on the caller's thread: its tens of
    // microseconds cost less than the two thread hand-offs of the pool.
    if (short_prompt(ask.request)) {
      done(model_->tokenize(ask.request));
      return;
    }
    boost::asio::post(
        *pool_, [m = model_, ask = std::move(ask), done = std::move(done)]() {
          done(m->tokenize(ask.request));
        });
  }

 private:
  std::shared_ptr<const model_tokenizer> model_;
  std::shared_ptr<boost::asio::thread_pool> pool_;
};

}  // namespace

struct local_tokenizers::impl {
  std::shared_ptr<boost::asio::thread_pool> pool;
  std::map<std::string, std::shared_ptr<prompt_tokenizer>> models;
};

local_tokenizers::local_tokenizers(std::unique_ptr<impl> p)
    : impl_(std::move(p)) {}

local_tokenizers::~local_tokenizers() {
  impl_->pool->stop();
  impl_->pool->join();
}

std::unique_ptr<local_tokenizers> local_tokenizers::start(
    std::map<std::string, model_tokenizer> models, size_t threads) {
  auto p = std::make_unique<impl>();
  p->pool =
      std::make_shared<boost::asio::thread_pool>(std::max<size_t>(threads, 1));
  for (auto& [name, m] : models)
    p->models.emplace(
        name,
        std::make_shared<pooled_tokenizer>(
            std::make_shared<const model_tokenizer>(std::move(m)), p->pool));
  return std::unique_ptr<local_tokenizers>(new local_tokenizers(std::move(p)));
}

std::shared_ptr<prompt_tokenizer> local_tokenizers::for_pool(
    const pool_model& pool) const {
  auto it = impl_->models.find(pool.lora ? pool.parent : pool.name);
  return it == impl_->models.end() ? nullptr : it->second;
}

}  // namespace kvmesh::gateway
