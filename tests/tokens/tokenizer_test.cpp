// Tests of tokens/: refused tokenizer.json features named, merge order,
// ignore_merges, added tokens in text, templates, NFC, the regex rewrite,
// invalid UTF-8, and a few ids of the real Llama 3 and Qwen 2.5 checked by
// hand.
#include "tokens/tokenizer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokens/bpe.hpp"
#include "tokens/split_regex.hpp"

using kvmesh::bpe_model;
using kvmesh::split_regex;
using kvmesh::tokenizer;
using json = nlohmann::json;
using ids = std::vector<uint32_t>;

namespace {

// A small byte-level tokenizer: bytes are ids 0-255 (by byte value), then
// the given tokens (byte-level strings of ASCII are themselves) from 256.
json small(const std::vector<std::string>& tokens,
           const std::vector<std::string>& merges) {
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b)
    vocab[bpe_model::byte_char(static_cast<uint8_t>(b))] = b;
  uint32_t id = 256;
  for (const auto& t : tokens)
    vocab[t] = id++;
  return json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", json::array({{{"type", "Split"},
                                        {"pattern",
                                         {{"Regex",
                                           "(?i:'s)| ?\\p{L}+|\\p{N}+|\\s+|"
                                           "[^\\s\\p{L}\\p{N}]+"}}},
                                        {"behavior", "Isolated"},
                                        {"invert", false}},
                                       {{"type", "ByteLevel"},
                                        {"add_prefix_space", false},
                                        {"trim_offsets", true},
                                        {"use_regex", false}}})}}},
      {"post_processor", nullptr},
      {"decoder", nullptr},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", merges}}}};
}

json added(uint32_t id, const std::string& content, bool special = true) {
  return {{"id", id},          {"content", content}, {"single_word", false},
          {"lstrip", false},   {"rstrip", false},    {"normalized", false},
          {"special", special}};
}

ids encode(const tokenizer& t, const std::string& text, bool special = false) {
  ids out;
  kvmesh::status s = t.encode(text, special, out);
  EXPECT_TRUE(s) << (s ? "" : s.err().message);
  return out;
}

// Loads `j`; a load error fails the test (by an exception gtest reports).
tokenizer make(const json& j) {
  auto t = tokenizer::from_json(j.dump());
  if (!t) throw std::runtime_error("load failed: " + t.err().message);
  return std::move(*t);
}

// The load error of `j`, which must fail.
std::string refusal(const json& j) {
  auto t = tokenizer::from_json(j.dump());
  EXPECT_FALSE(t) << "loaded, but should have been refused";
  return t ? "" : t.err().message;
}

}  // namespace

TEST(tokenizer, merges_in_rank_order_leftmost_first) {
  // "a b" first, then "aa aa": runs of a pair up from the left.
  tokenizer t = make(small({"aa", "aaaa"}, {"a a", "aa aa"}));
  EXPECT_EQ(encode(t, "aaaa"), (ids{257}));
  EXPECT_EQ(encode(t, "aaa"), (ids{256, 'a'}));
  EXPECT_EQ(encode(t, "aaaaaaa"), (ids{257, 256, 'a'}));
  // Longer than the short path's 64 bytes: the heap gives the same order.
  EXPECT_EQ(encode(t, std::string(200, 'a')), ids(50, 257));
  ids want(49, 257);
  want.push_back(256);
  want.push_back('a');
  EXPECT_EQ(encode(t, std::string(199, 'a')), want);
  ids want63(15, 257);
  want63.push_back(256);
  want63.push_back('a');
  EXPECT_EQ(encode(t, std::string(63, 'a')), want63);
}

TEST(tokenizer, lower_rank_wins_over_position) {
  // "b c" ranks before "a b": abc is a + bc, not ab + c.
  tokenizer t = make(small({"ab", "bc"}, {"b c", "a b"}));
  EXPECT_EQ(encode(t, "abc"), (ids{'a', 257}));
  tokenizer u = make(small({"ab", "bc"}, {"a b", "b c"}));
  EXPECT_EQ(encode(u, "abc"), (ids{256, 'c'}));
}

TEST(tokenizer, merges_in_either_form) {
  json j = small({"ab"}, {});
  j["model"]["merges"] = json::array({json::array({"a", "b"})});
  EXPECT_EQ(encode(make(j), "ab"), (ids{256}));
}

TEST(tokenizer, ignore_merges_takes_a_whole_pre_token_from_the_vocab) {
  // "abc" is in the vocab, but no merge reaches it.
  json j = small({"bc", "abc"}, {"b c"});
  EXPECT_EQ(encode(make(j), "abc"), (ids{'a', 256}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(encode(make(j), "abc"), (ids{257}));
  // Only a whole pre-token: "abcd" still merges.
  EXPECT_EQ(encode(make(j), "abcd"), (ids{'a', 256, 'd'}));
}

TEST(tokenizer, added_tokens_in_text_match_leftmost_then_longest) {
  json j = small({}, {});
  j["added_tokens"] = json::array(
      {added(256, "<|end|>"), added(257, "<s>"), added(258, "<s>x", false)});
  tokenizer t = make(j);
  for (bool special : {false, true}) {
    EXPECT_EQ(encode(t, "x<|end|>y", special), (ids{'x', 256, 'y'}));
    EXPECT_EQ(encode(t, "<s>xy", special), (ids{258, 'y'}));
    EXPECT_EQ(encode(t, "<s><s>", special), (ids{257, 257}));
    EXPECT_EQ(encode(t, "<|end", special), (ids{'<', '|', 'e', 'n', 'd'}));
  }
  EXPECT_EQ(t.token_id("<|end|>"), std::optional<uint32_t>(256));
  EXPECT_EQ(t.token_id("a"), std::optional<uint32_t>('a'));
  EXPECT_EQ(t.token_id("nope"), std::nullopt);
}

TEST(tokenizer, template_adds_its_tokens_only_with_add_special_tokens) {
  json j = small({}, {});
  j["added_tokens"] = json::array({added(256, "<bos>"), added(257, "<eos>")});
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       json::array(
           {{{"type", "ByteLevel"},
             {"add_prefix_space", true},
             {"trim_offsets", false},
             {"use_regex", true}},
            {{"type", "TemplateProcessing"},
             {"single",
              json::array(
                  {{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                   {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                   {{"SpecialToken", {{"id", "<eos>"}, {"type_id", 0}}}}})},
             {"pair", json::array()},
             {"special_tokens",
              {{"<bos>",
                {{"id", "<bos>"}, {"ids", {256}}, {"tokens", {"<bos>"}}}},
               {"<eos>",
                {{"id", "<eos>"},
                 {"ids", {257}},
                 {"tokens", {"<eos>"}}}}}}}})}};
  tokenizer t = make(j);
  EXPECT_EQ(encode(t, "a", true), (ids{256, 'a', 257}));
  EXPECT_EQ(encode(t, "", true), (ids{256, 257}));
  EXPECT_EQ(encode(t, "a", false), (ids{'a'}));
  EXPECT_NE(t.describe().find("adds <bos> before and <eos> after"),
            std::string::npos)
      << t.describe();
}

TEST(tokenizer, nfc_composes_before_the_model) {
  json j = small({}, {});
  j["normalizer"] = {{"type", "NFC"}};
  tokenizer t = make(j);
  // e + U+0301 is é (C3 A9); U+212B (Angstrom sign) is Å (C3 85).
  EXPECT_EQ(encode(t, "e\xCC\x81"), (ids{0xC3, 0xA9}));
  EXPECT_EQ(encode(t, "\xE2\x84\xAB"), (ids{0xC3, 0x85}));
  // Only the stretches around unstable code points are normalized: at the
  // start, between and after stable ones, a Hangul LV syllable with its T
  // jamo (U+AC00 U+11A8 is U+AC01), a mark after a CJK ideograph (stays).
  EXPECT_EQ(encode(t,
                   "e\xCC\x81\xE4\xB8\xAD a\xCC\x88\xE4\xB8\xAD "
                   "\xEA\xB0\x80\xE1\x86\xA8 x\xE4\xB8\xAD\xCC\x81"),
            encode(t,
                   "\xC3\xA9\xE4\xB8\xAD \xC3\xA4\xE4\xB8\xAD "
                   "\xEA\xB0\x81 x\xE4\xB8\xAD\xCC\x81"));
  tokenizer raw = make(small({}, {}));
  EXPECT_EQ(encode(raw, "e\xCC\x81"), (ids{'e', 0xCC, 0x81}));
}

TEST(tokenizer, invalid_utf8_is_an_error_not_a_crash) {
  tokenizer t = make(small({}, {}));
  for (std::string bad : {std::string("ab\xFF"), std::string("\xC3"),
                          std::string("\xED\xA0\x80"),  // a surrogate
                          std::string("\xC0\xAF"),      // overlong
                          std::string("\xF4\x90\x80\x80")}) {
    ids out{1, 2, 3};
    kvmesh::status s = t.encode(bad, true, out);
    ASSERT_FALSE(s) << bad;
    EXPECT_NE(s.err().message.find("not valid UTF-8"), std::string::npos);
    EXPECT_TRUE(out.empty());
  }
  EXPECT_EQ(encode(t, std::string("a\0b", 3)), (ids{'a', 0, 'b'}));
}

TEST(tokenizer, refused_features_are_named) {
  struct refused {
    const char* name;
    std::function<void(json&)> change;
    const char* message;
  };
  const std::vector<refused> cases = {
      {"precompiled",
       [](json& j) {
         j["normalizer"] = {{"type", "Precompiled"},
                            {"precompiled_charsmap", ""}};
       },
       "tokenizer.json: normalizer type 'Precompiled' is not supported"},
      {"nfkc",
       [](json& j) {
         j["normalizer"] = {{"type", "NFKC"}};
       },
       "normalizer type 'NFKC' is not supported"},
      {"wordpiece", [](json& j) { j["model"]["type"] = "WordPiece"; },
       "model type 'WordPiece' is not supported"},
      {"byte_fallback", [](json& j) { j["model"]["byte_fallback"] = true; },
       "model BPE with byte_fallback=true is not supported"},
      {"dropout", [](json& j) { j["model"]["dropout"] = 0.1; },
       "model BPE dropout is not supported"},
      {"prefix",
       [](json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "model BPE continuing_subword_prefix is not supported"},
      {"metaspace",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       "pre_tokenizer type 'Metaspace' is not supported"},
      {"behavior",
       [](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["behavior"] =
             "MergedWithPrevious";
       },
       "Split behavior 'MergedWithPrevious' is not supported"},
      {"invert",
       [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; },
       "Split with invert=true is not supported"},
      {"string pattern",
       [](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}};
       },
       "Split pattern other than"},
      {"\\w",
       [](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {
             {"Regex", "\\w+"}};
       },
       "Split regex escape '\\w' is not supported"},
      {"possessive",
       [](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "a++"}};
       },
       "possessive quantifier"},
      {"anchor",
       [](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "^a"}};
       },
       "anchor '^'"},
      {"empty match",
       [](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "a*"}};
       },
       "may match the empty string"},
      {"ss fold",
       [](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {
             {"Regex", "(?i:ss)"}};
       },
       "multi-character fold"},
      {"byte level prefix",
       [](json& j) {
         j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true;
       },
       "pre_tokenizer ByteLevel with add_prefix_space=true is not supported"},
      {"byte level regex",
       [](json& j) {
         j["pre_tokenizer"]["pretokenizers"][1].erase("use_regex");
       },
       "pre_tokenizer ByteLevel with use_regex=true is not supported"},
      {"two splits",
       [](json& j) {
         auto& steps = j["pre_tokenizer"]["pretokenizers"];
         const json split = steps[0];
         steps.insert(steps.begin(), split);
       },
       "pre_tokenizer with 2 Splits (one is) is not supported"},
      {"no split",
       [](json& j) { j["pre_tokenizer"]["pretokenizers"].erase(0); },
       "pre_tokenizer with 0 Splits"},
      {"no byte level",
       [](json& j) { j["pre_tokenizer"]["pretokenizers"].erase(1); },
       "without ByteLevel"},
      {"lstrip",
       [](json& j) {
         json a = added(256, "<x>");
         a["lstrip"] = true;
         j["added_tokens"] = json::array({a});
       },
       "added token '<x>' with lstrip=true is not supported"},
      {"normalized",
       [](json& j) {
         json a = added(256, "<x>");
         a["normalized"] = true;
         j["added_tokens"] = json::array({a});
       },
       "added token '<x>' with normalized=true is not supported"},
      {"wrong id",
       [](json& j) { j["added_tokens"] = json::array({added(300, "<x>")}); },
       "added token '<x>' with id 300 (HF tokenizers gives it id 256)"},
      {"truncation",
       [](json& j) {
         j["truncation"] = {{"max_length", 8}};
       },
       "truncation is not supported"},
      {"padding",
       [](json& j) {
         j["padding"] = {{"strategy", "BatchLongest"}};
       },
       "padding is not supported"},
      {"unknown field", [](json& j) { j["mystery"] = 1; },
       "field 'mystery' in the top level is not supported"},
      {"roberta",
       [](json& j) {
         j["post_processor"] = {{"type", "RobertaProcessing"}};
       },
       "post_processor type 'RobertaProcessing' is not supported"},
      {"missing byte",
       [](json& j) { j["model"]["vocab"].erase(bpe_model::byte_char(0)); },
       "lacks the byte-level token of byte 0"},
      {"merge out of vocab",
       [](json& j) { j["model"]["merges"] = json::array({"a b"}); },
       "merge 0 ('a' 'b') names 'ab', which is not in the vocab"},
  };
  for (const auto& c : cases) {
    json j = small({}, {});
    c.change(j);
    const std::string m = refusal(j);
    EXPECT_NE(m.find(c.message), std::string::npos)
        << c.name << ": got \"" << m << "\"";
  }
}

TEST(tokenizer, malformed_json_is_a_parse_error) {
  for (const char* text : {"", "{", "[]", "{\"model\": 3}", "nul"}) {
    auto t = tokenizer::from_json(text);
    ASSERT_FALSE(t) << text;
  }
  auto t = tokenizer::load("/nonexistent/tokenizer.json");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.err().code, kvmesh::ec::io_error);
}

TEST(tokenizer_regex, white_space_is_oniguruma_s) {
  auto re = split_regex::compile("\\s+");
  ASSERT_TRUE(re) << re.err().message;
  size_t b = 0, e = 0;
  // U+0085 is White_Space; U+180E no longer is (PCRE2's \s still takes it).
  auto found = re->find("\xC2\x85", 0, &b, &e);
  ASSERT_TRUE(found);
  EXPECT_TRUE(*found);
  found = re->find("\xE1\xA0\x8E", 0, &b, &e);
  ASSERT_TRUE(found);
  EXPECT_FALSE(*found);
  // \S takes U+180E.
  auto non = split_regex::compile("\\S+");
  ASSERT_TRUE(non);
  found = non->find("\xE1\xA0\x8E", 0, &b, &e);
  ASSERT_TRUE(found);
  EXPECT_TRUE(*found);
  EXPECT_EQ(e, 3u);
}

TEST(tokenizer_regex, case_insensitive_contractions_and_lookahead) {
  auto re = split_regex::compile("(?i:'s|'ll)|\\s+(?!\\S)|\\s+");
  ASSERT_TRUE(re) << re.err().message;
  size_t b = 0, e = 0;
  auto found = re->find("x'LL", 0, &b, &e);
  ASSERT_TRUE(found && *found);
  EXPECT_EQ(b, 1u);
  EXPECT_EQ(e, 4u);
  // Three spaces before a word: the lookahead leaves the last one.
  found = re->find("   a", 0, &b, &e);
  ASSERT_TRUE(found && *found);
  EXPECT_EQ(e - b, 2u);
  EXPECT_EQ(split_regex::compile("\\v")->pcre2_pattern(), "\\x0B");
}

// -- the real vocabularies (tests/npm)
// ------------------------------------------

namespace {
std::string model_path(const char* package) {
  return std::string(KVMESH_NPM_MODULES) + "/@lenml/" + package +
         "/models/tokenizer.json";
}
}  // namespace

TEST(tokenizer, llama3_by_hand) {
  auto t = tokenizer::load(model_path("tokenizer-llama3"));
  ASSERT_TRUE(t) << t.err().message
                 << " (scripts/install-deps --tests installs tests/npm)";
  EXPECT_EQ(encode(*t, "Hello world"), (ids{9906, 1917}));
  EXPECT_EQ(encode(*t, "<|eot_id|>"), (ids{128009}));
  EXPECT_EQ(encode(*t, "<|begin_of_text|>hi", true), (ids{128000, 6151}));
  EXPECT_EQ(t->token_id("<|eot_id|>"), std::optional<uint32_t>(128009));
  EXPECT_TRUE(t->is_added("<|eot_id|>"));
  EXPECT_FALSE(t->is_added("Hello"));  // in the vocabulary, not added
  EXPECT_FALSE(t->is_added("<|eot_id|>x"));
  EXPECT_FALSE(t->is_added("<|eot_"));
  EXPECT_FALSE(t->is_added(""));
  EXPECT_NE(t->describe().find("Llama 3"), std::string::npos) << t->describe();
  EXPECT_NE(t->describe().find("ignore_merges"), std::string::npos);
}

TEST(tokenizer, qwen2_5_by_hand) {
  auto t = tokenizer::load(model_path("tokenizer-qwen2_5"));
  ASSERT_TRUE(t) << t.err().message;
  EXPECT_EQ(encode(*t, "Hello world"), (ids{9707, 1879}));
  EXPECT_EQ(encode(*t, "<|im_start|>user"), (ids{151644, 872}));
  EXPECT_EQ(encode(*t, "<tool_call>", true), (ids{151657}));
  EXPECT_NE(t->describe().find("Qwen 2"), std::string::npos) << t->describe();
  EXPECT_NE(t->describe().find("NFC"), std::string::npos);
}

TEST(tokenizer, ten_megabyte_inputs) {
  auto t = tokenizer::load(model_path("tokenizer-llama3"));
  ASSERT_TRUE(t) << t.err().message;
  // Mixed text: many pieces. Each result equals the concatenation of its
  // parts' results (the parts end on a newline, where pieces end too).
  const std::string part =
      "The router hashes every prompt into blocks. 路由器把提示分成块。 "
      "def f(x):\n    return x + 42  # 🙂👍🏽\n";
  std::string text;
  while (text.size() < (10u << 20))
    text += part;
  const ids one = encode(*t, part);
  const ids all = encode(*t, text);
  ASSERT_EQ(all.size() % one.size(), 0u);
  for (size_t i = 0; i < all.size(); ++i)
    ASSERT_EQ(all[i], one[i % one.size()]) << i;
  // One 4 MB run of spaces: one regex match over all of it, then one 4 MB
  // pre-token through the heap merge.
  const ids spaces = encode(*t, std::string(4u << 20, ' '));
  EXPECT_FALSE(spaces.empty());
  // One 3 MB \p{L}+ run (CJK, no spaces).
  std::string cjk;
  while (cjk.size() < (3u << 20))
    cjk += "\xE4\xB8\xAD\xE6\x96\x87";
  EXPECT_FALSE(encode(*t, cjk).empty());
}

TEST(tokenizer, threads_share_one_tokenizer) {
  auto t = tokenizer::load(model_path("tokenizer-qwen2_5"));
  ASSERT_TRUE(t) << t.err().message;
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i)
    texts.push_back(std::string(static_cast<size_t>(i) * 37, 'a') +
                    " café e\xCC\x81 <|im_start|> 中文 " + std::to_string(i) +
                    std::string(static_cast<size_t>(i) * 11, ' ') + "x");
  std::vector<ids> want;
  for (const auto& s : texts)
    want.push_back(encode(*t, s, true));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      ids out;
      for (int round = 0; round < 10; ++round)
        for (size_t i = 0; i < texts.size(); ++i)
          if (!t->encode(texts[i], true, out) || out != want[i]) ++wrong;
    });
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(tokenizer_regex, a_ten_megabyte_run_is_one_match) {
  // Past PCRE2's default match limit (\s*[\r\n]+ backtracks through the
  // run once); Oniguruma in HF still matches it.
  auto re = split_regex::compile("\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
  ASSERT_TRUE(re);
  const std::string spaces(10u << 20, ' ');
  size_t b = 0, e = 0;
  auto found = re->find(spaces, 0, &b, &e);
  ASSERT_TRUE(found) << found.err().message;
  EXPECT_TRUE(*found);
  EXPECT_EQ(e - b, spaces.size());
}
