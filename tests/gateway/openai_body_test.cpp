// The checks of OpenAI bodies: what is taken, and each mistake named by
// its field.
#include "gateway/openai_body.hpp"

#include <gtest/gtest.h>

namespace kvmesh::gateway {
namespace {

openai_body ok_body(const std::string& text, openai_api api) {
  auto r = parse_openai_body(text, api);
  if (auto* e = std::get_if<body_error>(&r))
    ADD_FAILURE() << text << ": " << e->message;
  return std::get_if<openai_body>(&r) ? std::get<openai_body>(r)
                                      : openai_body{};
}

body_error bad_body(const std::string& text, openai_api api) {
  auto r = parse_openai_body(text, api);
  if (!std::get_if<body_error>(&r)) {
    ADD_FAILURE() << text << " was taken";
    return {};
  }
  return std::get<body_error>(r);
}

TEST(OpenaiBody, ChatTakesTheModelStreamAndOutput) {
  auto b = ok_body(R"({"model":"m","stream":true,
      "stream_options":{"include_usage":true},"max_completion_tokens":7,
      "max_tokens":3,
      "messages":[{"role":"system","content":"be brief"},
                  {"role":"user","content":[{"type":"text","text":"hi"},
                                            {"type":"image_url",
                                             "image_url":{"url":"x"}}]}]})",
                   openai_api::chat);
  EXPECT_EQ(b.model, "m");
  EXPECT_TRUE(b.stream);
  EXPECT_TRUE(b.include_usage);
  EXPECT_EQ(b.output_tokens, 7u);
  EXPECT_FALSE(b.prompt_tokens);
  EXPECT_EQ(b.tokenize_request["model"], "m");
  EXPECT_EQ(b.tokenize_request["messages"].size(), 2u);
  EXPECT_EQ(b.tokenize_request["add_generation_prompt"], true);
  EXPECT_EQ(b.prompt_bytes, 10u);
}

TEST(OpenaiBody, ChatContinuingTheLastMessageAddsNoGenerationPrompt) {
  auto b = ok_body(R"({"model":"m","continue_final_message":true,
      "messages":[{"role":"assistant","content":"Once"}]})",
                   openai_api::chat);
  EXPECT_EQ(b.tokenize_request["add_generation_prompt"], false);
  EXPECT_EQ(b.tokenize_request["continue_final_message"], true);
}

TEST(OpenaiBody, CompletionsPromptShapes) {
  auto text = ok_body(R"({"model":"m","prompt":"hello","max_tokens":5})",
                      openai_api::completions);
  EXPECT_EQ(text.tokenize_request["prompt"], "hello");
  EXPECT_EQ(text.output_tokens, 5u);
  EXPECT_FALSE(text.prompt_tokens);
  auto ids = ok_body(R"({"model":"m","prompt":[1,2,4294967295]})",
                     openai_api::completions);
  ASSERT_TRUE(ids.prompt_tokens);
  EXPECT_EQ(*ids.prompt_tokens, (std::vector<uint32_t>{1, 2, 4294967295u}));
  auto batch = ok_body(R"({"model":"m","prompt":["first","second"]})",
                       openai_api::completions);
  EXPECT_EQ(batch.tokenize_request["prompt"], "first");
  auto id_batch =
      ok_body(R"({"model":"m","prompt":[[5,6],[7]]})", openai_api::completions);
  ASSERT_TRUE(id_batch.prompt_tokens);
  EXPECT_EQ(*id_batch.prompt_tokens, (std::vector<uint32_t>{5, 6}));
  // Nulls are absent values.
  ok_body(R"({"model":"m","prompt":"x","stream":null,"max_tokens":null})",
          openai_api::completions);
}

TEST(OpenaiBody, MistakesNameTheirField) {
  struct bad {
    const char* body;
    openai_api api;
    const char* param;
    const char* reason;
  };
  const bad cases[] = {
      {"{not json", openai_api::chat, "", "not_json"},
      {"[1,2]", openai_api::chat, "", "not_json"},
      {R"({"messages":[{"role":"user","content":"x"}]})", openai_api::chat,
       "model", "missing_field"},
      {R"({"model":5,"messages":[]})", openai_api::chat, "model", "wrong_type"},
      {R"({"model":"m"})", openai_api::chat, "messages", "missing_field"},
      {R"({"model":"m","messages":{}})", openai_api::chat, "messages",
       "wrong_type"},
      {R"({"model":"m","messages":[]})", openai_api::chat, "messages",
       "bad_value"},
      {R"({"model":"m","messages":[{"content":"x"}]})", openai_api::chat,
       "messages[0].role", "missing_field"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"},
          {"role":"user","content":5}]})",
       openai_api::chat, "messages[1].content", "wrong_type"},
      {R"({"model":"m","messages":[{"role":"user",
          "content":[{"type":"text","text":1}]}]})",
       openai_api::chat, "messages[0].content[0].text", "wrong_type"},
      {R"({"model":"m","stream":"yes","messages":[{"role":"u",
          "content":"x"}]})",
       openai_api::chat, "stream", "wrong_type"},
      {R"({"model":"m","stream_options":{"include_usage":1},
          "messages":[{"role":"u","content":"x"}]})",
       openai_api::chat, "stream_options.include_usage", "wrong_type"},
      {R"({"model":"m","max_tokens":-1,"messages":[{"role":"u",
          "content":"x"}]})",
       openai_api::chat, "max_tokens", "bad_value"},
      {R"({"model":"m","max_tokens":"9","prompt":"x"})",
       openai_api::completions, "max_tokens", "wrong_type"},
      {R"({"model":"m"})", openai_api::completions, "prompt", "missing_field"},
      {R"({"model":"m","prompt":5})", openai_api::completions, "prompt",
       "wrong_type"},
      {R"({"model":"m","prompt":[]})", openai_api::completions, "prompt",
       "bad_value"},
      {R"({"model":"m","prompt":[1,"x"]})", openai_api::completions,
       "prompt[1]", "wrong_type"},
      {R"({"model":"m","prompt":[1,-3]})", openai_api::completions, "prompt[1]",
       "bad_value"},
      {R"({"model":"m","prompt":["a",2]})", openai_api::completions,
       "prompt[1]", "wrong_type"},
  };
  for (const auto& c : cases) {
    auto e = bad_body(c.body, c.api);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(e.reason, c.reason) << c.body;
    EXPECT_FALSE(e.message.empty()) << c.body;
  }
}

}  // namespace
}  // namespace kvmesh::gateway
