// Tests of engines/openai: prompts of completions and chat bodies, exact
// from token ids, approximate from text.
#include "engines/openai.hpp"

#include <gtest/gtest.h>

#include <string>

#include "core/block_hash.hpp"
#include "messages/limits.hpp"

namespace kvmesh {
namespace {

TEST(openai, token_id_prompts_hash_exactly) {
  auto r = parse_openai_request(
      R"({"model": "m", "prompt": [1,2,3,4,5,6,7,8,9], "max_tokens": 5,
          "stream": true})",
      false, 4);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_TRUE(r->stream);
  EXPECT_FALSE(r->prompt.approximate);
  EXPECT_EQ(r->prompt.prompt_tokens, 9u);
  EXPECT_EQ(r->prompt.output_tokens, 5u);
  auto h = hash_blocks(std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 7, 8}, 4);
  ASSERT_EQ(r->prompt.blocks.size(), 2u);
  EXPECT_EQ(r->prompt.blocks[1], (*h)[1].seq);
}

TEST(openai, text_prompts_are_approximate) {
  const std::string text(40, 'a');
  auto r = parse_openai_request(R"({"prompt": ")" + text + R"("})", false, 4);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_FALSE(r->stream);
  EXPECT_TRUE(r->prompt.approximate);
  EXPECT_EQ(r->prompt.prompt_tokens, 10u);
  EXPECT_EQ(r->prompt.blocks, *hash_text_blocks(text, 4));
  // A batch is sized by its first prompt.
  auto batch =
      parse_openai_request(R"({"prompt": [[1,2,3,4], [5,6,7,8,9]]})", false, 4);
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->prompt.prompt_tokens, 4u);
}

TEST(openai, chat_messages_of_strings_and_parts) {
  auto r = parse_openai_request(
      R"({"messages": [{"role": "system", "content": "be brief"},
                       {"role": "user", "content": [
                          {"type": "text", "text": "hello there"},
                          {"type": "image_url", "image_url": {"url": "x"}}]}],
          "max_completion_tokens": 7})",
      true, 2);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_TRUE(r->prompt.approximate);
  EXPECT_EQ(r->prompt.output_tokens, 7u);
  const std::string joined = "be brief\nhello there";
  EXPECT_EQ(r->prompt.blocks, *hash_text_blocks(joined, 2));
}

TEST(openai, bodies_without_a_prompt_are_errors) {
  for (auto [body, chat] : std::initializer_list<std::pair<const char*, bool>>{
           {"not json", false},
           {"[1]", false},
           {R"({"model": "m"})", false},
           {R"({"prompt": 5})", false},
           {R"({"prompt": [1, -2]})", false},
           {R"({"messages": []})", true},
           {R"({"messages": [5]})", true},
       }) {
    auto r = parse_openai_request(body, chat, 4);
    EXPECT_FALSE(r) << body;
  }
}

// vLLM lists the served model and each loaded LoRA adapter (with a
// "parent"); both are models a worker serves.
TEST(openai, a_models_list_names_base_models_and_adapters) {
  auto m = parse_models_list(
      R"({"object": "list", "data": [
           {"id": "meta-llama/Llama-3.1-8B-Instruct", "object": "model",
            "root": "meta-llama/Llama-3.1-8B-Instruct", "parent": null},
           {"id": "sql-lora", "object": "model", "root": "/adapters/sql",
            "parent": "meta-llama/Llama-3.1-8B-Instruct"}]})");
  ASSERT_TRUE(m) << m.err().message;
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0].name, "meta-llama/Llama-3.1-8B-Instruct");
  EXPECT_EQ((*m)[0].parent, "");
  EXPECT_EQ((*m)[1].name, "sql-lora");
  EXPECT_EQ((*m)[1].parent, "meta-llama/Llama-3.1-8B-Instruct");
  for (const char* bad :
       {"[]", "{}", R"({"data": 5})", R"({"data": [{}]})",
        R"({"data": [{"id": 7}]})", R"({"data": [{"id": ""}]})",
        R"({"data": [{"id": "a", "parent": 5}]})", "not json"})
    EXPECT_FALSE(parse_models_list(bad)) << bad;
  std::string many = R"({"data": [)";
  for (size_t i = 0; i <= max_models_per_worker; ++i)
    many +=
        std::string(i ? "," : "") + R"({"id": "m)" + std::to_string(i) + "\"}";
  EXPECT_FALSE(parse_models_list(many + "]}"));
}

// A body of deeply nested arrays is refused by depth before parsing: 1 MB
// of brackets would otherwise become a tree of some 100 MB.
TEST(openai, deep_nesting_is_refused) {
  const size_t n = 400000;
  const std::string deep =
      R"({"prompt": [)" + std::string(n, '[') + std::string(n, ']') + "]}";
  auto r = parse_openai_request(deep, false, 4);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message.find("nesting deeper than 64 levels"),
            std::string::npos)
      << r.err().message;
  // Brackets inside strings do not count.
  auto s = parse_openai_request(
      R"({"prompt": ")" + std::string(1000, '[') + R"("})", false, 4);
  ASSERT_TRUE(s) << s.err().message;
}

}  // namespace
}  // namespace kvmesh
