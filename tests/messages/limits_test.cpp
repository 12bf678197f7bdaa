// Tests of messages/limits: each size limit refuses what exceeds it with an
// error naming the limit, counts the refusal, and lets its equal through.
#include "messages/limits.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "messages/codec.hpp"
#include "messages/json.hpp"

namespace kvmesh {
namespace {

// Limits are process-wide: each test sets its own and restores them.
struct limits_guard {
  explicit limits_guard(const wire_limits& l) { set_wire_limits(l); }
  ~limits_guard() { set_wire_limits(wire_limits{}); }
};

bool names(const error& e, const char* limit) {
  return e.message.find(limit) != std::string::npos;
}

route_request_msg request_of(size_t blocks) {
  route_request_msg r;
  r.id = 7;
  r.blocks.assign(blocks, 42);
  r.input_tokens = 16;
  return r;
}

TEST(limits, defaults_are_documented_values) {
  const wire_limits l = current_wire_limits();
  EXPECT_EQ(l.max_payload_bytes, 1u << 20);
  EXPECT_EQ(l.max_request_blocks, 1u << 16);
  EXPECT_EQ(l.max_call_workers, 1024u);
  EXPECT_STREQ(to_string(wire_limit::payload_bytes),
               "limits.max_payload_bytes");
}

TEST(limits, payload_bytes_are_checked_before_decoding) {
  const auto big = encode(request_of(100));  // some 900 bytes
  limits_guard g({big.size() - 8, 1u << 16, 1024});
  const uint64_t refused = wire_limit_refusals(wire_limit::payload_bytes);
  const uint64_t errors = decode_errors(msg_kind::route_request);
  auto r = decode<route_request_msg>(big);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code, ec::parse_error);
  EXPECT_TRUE(names(r.err(), "limits.max_payload_bytes")) << r.err().message;
  EXPECT_NE(r.err().message.find("RouteRequest: payload bytes: " +
                                 std::to_string(big.size()) + " exceeds"),
            std::string::npos)
      << r.err().message;
  EXPECT_EQ(wire_limit_refusals(wire_limit::payload_bytes), refused + 1);
  EXPECT_EQ(decode_errors(msg_kind::route_request), errors + 1);
  // Its equal passes.
  set_wire_limits({big.size(), 1u << 16, 1024});
  EXPECT_TRUE(decode<route_request_msg>(big));
  // JSON route requests count their bytes too.
  const std::string json = R"({"id": 1, "blocks": [1, 2, 3], "pad": ")" +
                           std::string(2000, 'x') + R"("})";
  auto j = parse_route_json(json, 16);
  ASSERT_FALSE(j);
  EXPECT_TRUE(names(j.err(), "limits.max_payload_bytes")) << j.err().message;
  EXPECT_EQ(wire_limit_refusals(wire_limit::payload_bytes), refused + 2);
}

TEST(limits, blocks_per_route_request) {
  limits_guard g({1u << 20, 8, 1024});
  const uint64_t refused = wire_limit_refusals(wire_limit::request_blocks);
  auto r = decode<route_request_msg>(encode(request_of(9)));
  ASSERT_FALSE(r);
  EXPECT_NE(
      r.err().message.find("blocks: 9 exceeds limits.max_request_blocks = 8"),
      std::string::npos)
      << r.err().message;
  EXPECT_TRUE(decode<route_request_msg>(encode(request_of(8))));
  // Nested in a call for bids and in an award alike.
  auto c = decode<call_for_bids>(encode(call_for_bids{request_of(9), 1, {1}}));
  ASSERT_FALSE(c);
  EXPECT_TRUE(names(c.err(), "limits.max_request_blocks"));
  auto a = decode<award_msg>(encode(award_msg{request_of(9), 1, 1}));
  ASSERT_FALSE(a);
  EXPECT_TRUE(names(a.err(), "limits.max_request_blocks"));
  EXPECT_EQ(wire_limit_refusals(wire_limit::request_blocks), refused + 3);
  // Every JSON form, counted before hashing: blocks, tokens, text.
  const uint64_t json_errors = json_decode_errors();
  std::string tokens = R"({"id": 1, "tokens": [1)";
  for (int i = 1; i < 36; ++i)  // 9 blocks of 4 tokens
    tokens += ",1";
  tokens += "]}";
  const std::string text =
      R"({"id": 1, "text": ")" + std::string(9 * 4 * 4, 'w') + R"("})";
  for (const std::string& json :
       {std::string(R"({"id": 1, "blocks": [1,2,3,4,5,6,7,8,9]})"), tokens,
        text}) {
    auto j = parse_route_json(json, 4);
    ASSERT_FALSE(j) << json;
    EXPECT_NE(j.err().message.find(
                  "route request: blocks: 9 exceeds limits.max_request_blocks"),
              std::string::npos)
        << j.err().message;
  }
  EXPECT_EQ(json_decode_errors(), json_errors + 3);
  EXPECT_EQ(wire_limit_refusals(wire_limit::request_blocks), refused + 6);
  EXPECT_TRUE(parse_route_json(R"({"id": 1, "blocks": [1,2,3,4,5,6,7,8]})", 4));
}

TEST(limits, workers_per_call_for_bids_and_release) {
  limits_guard g({1u << 20, 1u << 16, 4});
  const uint64_t refused = wire_limit_refusals(wire_limit::call_workers);
  auto c = decode<call_for_bids>(
      encode(call_for_bids{request_of(1), 1, {1, 1, 1, 1, 1}}));
  ASSERT_FALSE(c);
  EXPECT_NE(c.err().message.find(
                "CallForBids: workers: 5 exceeds limits.max_call_workers = 4"),
            std::string::npos)
      << c.err().message;
  EXPECT_TRUE(decode<call_for_bids>(
      encode(call_for_bids{request_of(1), 1, {1, 2, 3, 4}})));
  auto r = decode<release_msg>(encode(release_msg{7, {1, 2, 3, 4, 5}}));
  ASSERT_FALSE(r);
  EXPECT_TRUE(names(r.err(), "limits.max_call_workers"));
  EXPECT_EQ(wire_limit_refusals(wire_limit::call_workers), refused + 2);
}

}  // namespace
}  // namespace kvmesh
