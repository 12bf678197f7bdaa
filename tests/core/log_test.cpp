// Tests of core/log: the line formats, JSON escaping, the level filter.
#include "core/log.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <thread>
#include <vector>

namespace kvmesh::log {
namespace {

// 2026-11-30T21:00:00.123Z
const std::chrono::system_clock::time_point when =
    std::chrono::system_clock::time_point(
        std::chrono::milliseconds(int64_t{1796072400} * 1000 + 123));

TEST(log, text_line) {
  const event e{when, level::warn, "router r1", "worker 3 refused"};
  EXPECT_EQ(format_line(e, format::text),
            "2026-11-30T21:00:00.123Z warn router r1: worker 3 refused\n");
}

TEST(log, plain_line_is_what_commands_always_wrote) {
  EXPECT_EQ(
      format_line({when, level::error, "route", "no router"}, format::plain),
      "kvmesh route: no router\n");
  EXPECT_EQ(format_line({when, level::info, "", "hi"}, format::plain),
            "kvmesh: hi\n");
}

TEST(log, json_line) {
  const event e{when, level::info, "agent agent-0", "serves workers 0-3"};
  EXPECT_EQ(format_line(e, format::json),
            "{\"ts\":\"2026-11-30T21:00:00.123Z\",\"level\":\"info\","
            "\"proc\":\"agent agent-0\",\"msg\":\"serves workers 0-3\"}\n");
}

TEST(log, one_line_per_event_whatever_the_message) {
  const event e{when, level::error, "up", "nats-server died; its log:\nA\r\nB"};
  const std::string text = format_line(e, format::text);
  EXPECT_EQ(text.find('\n'), text.size() - 1);
  EXPECT_NE(text.find("its log:\\nA\\r\\nB"), std::string::npos);
  const std::string json = format_line(e, format::json);
  EXPECT_EQ(json.find('\n'), json.size() - 1);
}

TEST(log, json_escapes_and_stays_valid) {
  EXPECT_EQ(json_escape("a\"b\\c"), "a\\\"b\\\\c");
  EXPECT_EQ(json_escape("\n\t\x01\x7f"), "\\n\\t\\u0001\\u007f");
  EXPECT_EQ(json_escape("caf\xc3\xa9 \xe2\x82\xac"),
            "caf\xc3\xa9 \xe2\x82\xac");
  // A lone continuation byte, a truncated sequence, an overlong '/', a
  // surrogate: each bad byte becomes U+FFFD.
  EXPECT_EQ(json_escape("\x80"), "\\ufffd");
  EXPECT_EQ(json_escape("x\xc3"), "x\\ufffd");
  EXPECT_EQ(json_escape("\xc0\xaf"), "\\ufffd\\ufffd");
  EXPECT_EQ(json_escape("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd");
  // Whatever the bytes, a JSON parser reads the line back.
  std::string nasty;
  for (int c = 0; c < 256; ++c)
    nasty += static_cast<char>(c);
  const event e{when, level::debug, "index \"0\"", nasty};
  const auto j = nlohmann::json::parse(format_line(e, format::json));
  EXPECT_EQ(j["level"], "debug");
  EXPECT_EQ(j["proc"], "index \"0\"");
  EXPECT_EQ(j["msg"].get<std::string>().substr(0, 3),
            std::string("\x00\x01\x02", 3));
}

TEST(log, timestamps_are_utc_milliseconds) {
  EXPECT_EQ(timestamp(std::chrono::system_clock::time_point{}),
            "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(timestamp(when), "2026-11-30T21:00:00.123Z");
}

TEST(log, names_parse_back) {
  for (level l : {level::error, level::warn, level::info, level::debug})
    EXPECT_EQ(*parse_level(to_string(l)), l);
  EXPECT_FALSE(parse_level("verbose"));
  EXPECT_NE(parse_level("verbose").err().message.find("'verbose'"),
            std::string::npos);
  EXPECT_EQ(*parse_format("json"), format::json);
  EXPECT_EQ(*parse_format("text"), format::text);
  EXPECT_FALSE(parse_format("plain"));  // the commands' own, not a choice
  EXPECT_FALSE(parse_format("JSON"));
}

// Captures what the process logs, restoring the settings after.
class capture : public ::testing::Test {
 protected:
  void SetUp() override {
    set_sink([this](std::string_view line) { lines.emplace_back(line); });
    set_format(format::text);
    set_proc("test");
  }
  void TearDown() override {
    set_sink({});
    set_level(level::info);
    set_format(format::plain);
    set_proc("");
  }
  std::vector<std::string> lines;
};

TEST_F(capture, level_filters_less_severe_events) {
  set_level(level::warn);
  KVMESH_ERROR("e %d", 1);
  KVMESH_WARN("w %s", "2");
  KVMESH_INFO("i");
  KVMESH_DEBUG("d");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find(" error test: e 1\n"), std::string::npos);
  EXPECT_NE(lines[1].find(" warn test: w 2\n"), std::string::npos);
  set_level(level::debug);
  debug("now");
  EXPECT_EQ(lines.size(), 3u);
  set_level(level::error);
  warn("hidden");
  EXPECT_EQ(lines.size(), 3u);
}

TEST_F(capture, arguments_of_a_filtered_event_are_not_evaluated) {
  set_level(level::info);
  int calls = 0;
  auto count = [&] { return ++calls; };
  KVMESH_DEBUG("%d", count());
  EXPECT_EQ(calls, 0);
  KVMESH_INFO("%d", count());
  EXPECT_EQ(calls, 1);
}

TEST_F(capture, long_messages_are_whole) {
  const std::string big(5000, 'x');
  KVMESH_INFO("%s!", big.c_str());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(big + "!\n"), std::string::npos);
}

TEST_F(capture, threads_do_not_mix_lines) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i)
        KVMESH_INFO("thread %d event %d", t, i);
    });
  for (auto& t : threads)
    t.join();
  ASSERT_EQ(lines.size(), 800u);
  for (const auto& l : lines) {
    EXPECT_EQ(l.find('\n'), l.size() - 1);
    EXPECT_NE(l.find(" info test: thread "), std::string::npos);
  }
}

}  // namespace
}  // namespace kvmesh::log
