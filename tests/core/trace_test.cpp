// Tests of core/trace: parsing Mooncake lines and naming what is wrong.
#include "core/trace.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace kvmesh {
namespace {

TEST(trace, parses_a_mooncake_line) {
  auto r = parse_trace_line(
      R"({"timestamp": 27482, "input_length": 6955, "output_length": 52, )"
      R"("hash_ids": [46, 47, 2353]})",
      "t:1");
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_DOUBLE_EQ(r->arrival_ms, 27482);
  EXPECT_EQ(r->input_tokens, 6955u);
  EXPECT_EQ(r->output_tokens, 52u);
  EXPECT_EQ(r->blocks, (std::vector<uint64_t>{46, 47, 2353}));
}

void expect_error(const std::string& line, const std::string& needle) {
  auto r = parse_trace_line(line, "f.jsonl:7");
  ASSERT_FALSE(r) << line;
  EXPECT_EQ(r.err().code, ec::parse_error);
  EXPECT_NE(r.err().message.find("f.jsonl:7"), std::string::npos)
      << r.err().message;
  EXPECT_NE(r.err().message.find(needle), std::string::npos) << r.err().message;
}

TEST(trace, malformed_lines_name_line_and_field) {
  expect_error("{not json", "not valid JSON");
  expect_error("[1,2]", "not a JSON object");
  expect_error(R"({"input_length": 5, "output_length": 1, "hash_ids": [1]})",
               "'timestamp' is missing");
  expect_error(R"({"timestamp": "x", "input_length": 5, "output_length": 1,)"
               R"( "hash_ids": [1]})",
               "'timestamp' must be a non-negative integer");
  expect_error(R"({"timestamp": 1, "input_length": -5, "output_length": 1,)"
               R"( "hash_ids": [1]})",
               "'input_length'");
  expect_error(R"({"timestamp": 1, "input_length": 0, "output_length": 1,)"
               R"( "hash_ids": [1]})",
               "'input_length' must be at least 1");
  expect_error(R"({"timestamp": 1, "input_length": 5, "output_length": 1,)"
               R"( "hash_ids": [1, "a"]})",
               "'hash_ids' holds a non-integer");
  expect_error(R"({"timestamp": 1, "input_length": 5, "output_length": 1,)"
               R"( "hash_ids": []})",
               "'hash_ids' is empty");
  expect_error(R"({"timestamp": 1, "input_length": 5, "output_length": 1})",
               "'hash_ids' is missing");
  expect_error(R"({"timestamp": 1, "input_length": 99999999999,)"
               R"( "output_length": 1, "hash_ids": [1]})",
               "'input_length' is too large");
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(trace, load_reports_file_errors) {
  auto missing = load_trace("/nonexistent/trace.jsonl");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.err().code, ec::io_error);
  auto empty = load_trace(write_file("empty.jsonl", "\n\n"));
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.err().code, ec::empty_input);
  auto bad = load_trace(write_file(
      "bad.jsonl",
      R"({"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]})"
      "\n"
      R"({"timestamp": 1, "input_length": 5, "output_length": 1})"
      "\n"));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().message.find("bad.jsonl:2"), std::string::npos);
  auto back = load_trace(write_file(
      "back.jsonl",
      R"({"timestamp": 5, "input_length": 5, "output_length": 1, "hash_ids": [1]})"
      "\n"
      R"({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1]})"
      "\n"));
  ASSERT_FALSE(back);
  EXPECT_NE(back.err().message.find("back in time"), std::string::npos);
}

TEST(trace, loads_the_sample_trace) {
  auto t = load_trace(KVMESH_TEST_DATA "/sample_trace.jsonl");
  ASSERT_TRUE(t) << t.err().message;
  EXPECT_EQ(t->size(), 20u);
  for (const auto& r : *t)
    EXPECT_EQ(r.blocks.size(), (r.input_tokens + 511) / 512);
}

// A line of deeply nested arrays is refused by depth before parsing: the
// parsed tree and the error's rendering of it would recurse that deep.
TEST(trace, deep_nesting_is_refused_not_a_stack_overflow) {
  const size_t n = 400000;
  const std::string deep = R"({"timestamp": 0, "input_length": 1, )"
                           R"("hash_ids": [)" +
                           std::string(n, '[') + std::string(n, ']') + "]}";
  auto r = parse_trace_line(deep, "t:9");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code, ec::parse_error);
  EXPECT_EQ(r.err().message, "t:9: nesting deeper than 64 levels");
  // A structured value where an integer belongs is named by its type.
  auto s = parse_trace_line(
      R"({"timestamp": 0, "input_length": 1, "output_length": 1, )"
      R"("hash_ids": [[[1]]]})",
      "t:10");
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message.find("id: an array"), std::string::npos)
      << s.err().message;
}

}  // namespace
}  // namespace kvmesh
