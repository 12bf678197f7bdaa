// Tests of messages/json: route requests from JSON, decisions to JSON.
#include "messages/json.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/block_hash.hpp"
#include "tests/samples.hpp"

namespace kvmesh {
namespace {

TEST(json, tokens_are_hashed_like_dynamo) {
  auto r = parse_route_json(
      R"({"id": 7, "tokens": [1,2,3,4,5,6,7,8,9,10], "output_tokens": 20})", 4);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_EQ(r->id, 7u);
  EXPECT_EQ(r->input_tokens, 10u);
  EXPECT_EQ(r->output_tokens, 20u);
  // The vectors of tests/core/block_hash_test.cpp: two full blocks.
  EXPECT_EQ(r->blocks, (std::vector<uint64_t>{0xcb38e4d7fb2dca5cull,
                                              0x44a2b2379d6d3c3dull}));
  auto salted = parse_route_json(
      R"({"id": 7, "tokens": [1,2,3,4], "salt": "lora-a"})", 4);
  ASSERT_TRUE(salted);
  EXPECT_EQ(salted->blocks.front(), 0xebe499ac3e8056dcull);
}

TEST(json, blocks_are_taken_as_chained_hashes) {
  auto r = parse_route_json(R"({"id": 1, "blocks": [46, 47, 2353],
                                "input_tokens": 1200, "extra": true})",
                            512);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_EQ(r->blocks, (std::vector<uint64_t>{46, 47, 2353}));
  EXPECT_EQ(r->input_tokens, 1200u);
  EXPECT_EQ(r->output_tokens, 0u);  // unknown: the router estimates
  auto implied = parse_route_json(R"({"id": 1, "blocks": [5, 6]})", 512);
  EXPECT_EQ(implied->input_tokens, 1024u);
}

TEST(json, text_is_hashed_in_byte_chunks_and_counted) {
  const uint64_t before = text_route_requests();
  const std::string text(4 * 4 * 2 + 3, 'z');  // 2 chunks of 4 tokens
  auto r = parse_route_json(R"({"id": 3, "text": ")" + text + R"("})", 4);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_EQ(r->blocks, *hash_text_blocks(text, 4));
  EXPECT_EQ(r->blocks.size(), 2u);
  EXPECT_EQ(r->input_tokens, 9u);  // 35 bytes at 4 bytes per token
  EXPECT_EQ(text_route_requests() - before, 1u);
}

TEST(json, bad_requests_name_the_field_and_count) {
  const uint64_t before = json_decode_errors();
  const std::pair<const char*, const char*> cases[] = {
      {"{oops", "not valid JSON"},
      {"[1]", "not a JSON object"},
      {R"({"tokens": [1,2,3,4]})", "'id' is missing"},
      {R"({"id": -1, "tokens": [1,2,3,4]})", "'id'"},
      {R"({"id": 1})", "exactly one of 'tokens', 'blocks' and 'text'"},
      {R"({"id": 1, "tokens": [1,2,3,4], "text": "abc"})", "exactly one of"},
      {R"({"id": 1, "text": 5})", "'text' must be a string"},
      {R"({"id": 1, "text": ""})", "'text' is empty"},
      {R"({"id": 1, "tokens": [1], "blocks": [1]})", "exactly one of"},
      {R"({"id": 1, "tokens": "1,2"})", "'tokens' must be an array"},
      {R"({"id": 1, "tokens": [1, 4294967296]})", "not a token id"},
      {R"({"id": 1, "tokens": []})", "'tokens' is empty"},
      {R"({"id": 1, "tokens": [1,2,3,4], "salt": 5})", "'salt' must be"},
      {R"({"id": 1, "blocks": []})", "needs 'input_tokens'"},
      {R"({"id": 1, "blocks": {}})", "'blocks' must be an array"},
      {R"({"id": 1, "blocks": [1, "x"]})", "not a hash"},
      {R"({"id": 1, "blocks": [1], "output_tokens": 1.5})",
       "'output_tokens' must be an integer"},
  };
  for (const auto& [text, needle] : cases) {
    auto r = parse_route_json(text, 4);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.err().code, ec::parse_error);
    EXPECT_NE(r.err().message.find(needle), std::string::npos)
        << text << " -> " << r.err().message;
  }
  EXPECT_EQ(json_decode_errors() - before, std::size(cases));
  EXPECT_FALSE(parse_route_json(R"({"id": 1, "blocks": [1]})", 0));
}

TEST(json, a_prompt_shorter_than_a_block_has_no_blocks_but_its_length) {
  auto t = parse_route_json(R"({"id": 3, "tokens": [7]})", 16);
  ASSERT_TRUE(t) << t.err().message;
  EXPECT_EQ(t->id, 3u);
  EXPECT_TRUE(t->blocks.empty());
  EXPECT_EQ(t->input_tokens, 1u);
  auto x = parse_route_json(R"({"id": 4, "text": "hello world"})", 16);
  ASSERT_TRUE(x) << x.err().message;
  EXPECT_TRUE(x->blocks.empty());
  EXPECT_GE(x->input_tokens, 1u);
  auto b =
      parse_route_json(R"({"id": 5, "blocks": [], "input_tokens": 2})", 16);
  ASSERT_TRUE(b) << b.err().message;
  EXPECT_TRUE(b->blocks.empty());
  EXPECT_EQ(b->input_tokens, 2u);
}

TEST(json, an_error_after_the_id_still_names_the_request) {
  uint64_t id = 0;
  auto r = parse_route_json(R"({"id": 12, "tokens": "1,2"})", 16, &id);
  ASSERT_FALSE(r);
  EXPECT_EQ(id, 12u);
}

TEST(json, a_decision_carries_every_bidders_breakdown) {
  auto j = nlohmann::json::parse(decision_json(test::sample_decision()));
  EXPECT_EQ(j["request"], 9);
  EXPECT_EQ(j["worker"], 2);
  EXPECT_EQ(j["endpoint"], "http://gpu-2.example:8001");
  EXPECT_EQ(j["auctions"], 1);
  ASSERT_EQ(j["prices"].size(), 1u);
  EXPECT_EQ(j["prices"][0]["read"], 10.5);
  EXPECT_EQ(j["prices"][0]["credit_gpu"], 3.0);
  EXPECT_EQ(j["prices"][0]["price"], 12.25);
  EXPECT_EQ(j["prices"][0]["delta"], -1.0);
}

TEST(json, a_decision_with_an_error_carries_only_the_request_and_why) {
  decision d;
  d.request = (1ull << 60) + 7;  // beyond a double's exact integers
  // Set but meaningless with an error: none of them may appear.
  d.worker = 2;
  d.auctions = 3;
  price_breakdown p;
  p.worker = 2;
  p.price = 12.25;
  d.prices = {p};
  d.error = "overloaded: \"40\" queued (d\xC3\xA9j\xC3\xA0)";
  d.failure = route_failure::overloaded;
  EXPECT_EQ(decision_json(d),
            "{\"request\":1152921504606846983,"
            "\"error\":\"overloaded: \\\"40\\\" queued (d\xC3\xA9j\xC3\xA0)\","
            "\"failure\":\"overloaded\"}");
  auto j = nlohmann::json::parse(decision_json(d));
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), 3u);
  EXPECT_EQ(j["request"].get<uint64_t>(), (1ull << 60) + 7);
  EXPECT_EQ(j["error"].get<std::string>(), d.error);
}

// A request names its model and the client's own id; the decision echoes
// the id, with an error too.
TEST(json, a_model_and_a_client_id_are_read_and_the_id_echoed) {
  auto r = parse_route_json(
      R"({"id": 1, "tokens": [1, 2, 3], "model": "qwen2.5-7b",
          "client_id": "chat-\u00e9-1"})",
      16);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_EQ(r->model, "qwen2.5-7b");
  EXPECT_EQ(r->client_id, "chat-\xC3\xA9-1");
  EXPECT_FALSE(parse_route_json(R"({"id": 1, "tokens": [1], "model": 5})", 16));
  auto long_id = parse_route_json(R"({"id": 1, "tokens": [1], "client_id": ")" +
                                      std::string(300, 'x') + "\"}",
                                  16);
  ASSERT_FALSE(long_id);
  EXPECT_NE(long_id.err().message.find("client_id"), std::string::npos);
  decision d;
  d.request = 1;
  d.client_id = "chat-1";
  EXPECT_EQ(nlohmann::json::parse(decision_json(d))["client_id"], "chat-1");
  d.error = "unknown model 'x'";
  d.failure = route_failure::unknown_model;
  auto j = nlohmann::json::parse(decision_json(d));
  EXPECT_EQ(j["client_id"], "chat-1");
  EXPECT_EQ(j["failure"], "unknown_model");
}

// Found by tests/fuzz/route_json_fuzz's long inputs: 800 KB of nested
// arrays (under NATS' 1 MB payload limit) where a token id goes overflowed
// the stack while the error message rendered them. Now refused by depth
// before parsing, and counted.
TEST(json, deep_nesting_is_refused_not_a_stack_overflow) {
  const size_t n = 400000;
  const std::string deep = R"({"id": 1, "tokens": [)" + std::string(n, '[') +
                           std::string(n, ']') + "]}";
  const uint64_t before = json_decode_errors();
  auto r = parse_route_json(deep, 16);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message.find("nesting deeper than 64 levels"),
            std::string::npos)
      << r.err().message;
  EXPECT_EQ(json_decode_errors(), before + 1);
  // 64 levels still parse (and are refused for what they hold).
  const std::string ok = R"({"id": 1, "tokens": [)" + std::string(62, '[') +
                         std::string(62, ']') + "]}";
  auto s = parse_route_json(ok, 16);
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message.find("not a token id: an array"), std::string::npos)
      << s.err().message;
}

// An error shows a bad value cut short, at a character boundary: the
// router answers with it as JSON, whose writer refuses broken UTF-8.
TEST(json, long_bad_values_are_cut_at_a_character) {
  std::string value;
  for (int i = 0; i < 100; ++i)
    value += "\xc3\xa9";  // é
  auto r = parse_route_json(R"({"id": 1, "tokens": [")" + value + R"("]})", 16);
  ASSERT_FALSE(r);
  EXPECT_LT(r.err().message.size(), 200u);
  decision d;
  d.request = 1;
  d.error = r.err().message;
  auto back = nlohmann::json::parse(decision_json(d), nullptr, false);
  ASSERT_FALSE(back.is_discarded());
  EXPECT_EQ(back["error"], d.error);
}

}  // namespace
}  // namespace kvmesh
