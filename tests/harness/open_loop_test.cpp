// Tests of harness/open_loop: the requests, outcomes and counts of load.
// What each answer, record and event does to a request's outcome, and the
// counts scripts/chaos checks.
#include "harness/open_loop.hpp"

#include <gtest/gtest.h>

#include "messages/codec.hpp"

namespace kvmesh::harness {
namespace {

open_loop_options small() {
  open_loop_options o;
  o.blocks = 4;
  o.block_tokens = 16;
  o.output_tokens = 9;
  return o;
}

TEST(OpenLoopRequest, AGroupSharesAllBlocksButTheLast) {
  const auto o = small();
  auto a = open_loop_request(1000, 2, o);
  auto b = open_loop_request(1001, 2, o);
  auto c = open_loop_request(1002, 3, o);
  ASSERT_TRUE(a && b && c);
  ASSERT_EQ(a->blocks.size(), 4u);
  EXPECT_EQ(a->id, 1000u);
  EXPECT_EQ(a->input_tokens, 64u);
  EXPECT_EQ(a->output_tokens, 9u);
  EXPECT_EQ(a->block_tokens, 16u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(a->blocks[i], b->blocks[i]) << i;
  EXPECT_NE(a->blocks[3], b->blocks[3]);
  EXPECT_NE(a->blocks[0], c->blocks[0]);
  // A chain: the same id in the same group is the same request.
  EXPECT_EQ(open_loop_request(1000, 2, o)->blocks, a->blocks);
}

std::vector<uint8_t> decided_by(uint32_t worker) {
  decision d;
  d.worker = worker;
  return encode(d);
}

std::vector<uint8_t> refused(const std::string& why) {
  decision d;
  d.error = why;
  return encode(d);
}

class Books : public ::testing::Test {
 protected:
  void SetUp() override {
    for (uint64_t id : {1, 2, 3})
      rec.by_id[id].sent_ms = wall_ms();
  }
  recorder rec;
};

TEST_F(Books, AnswersToOthersRequestsAreIgnored) {
  rec.answer(99, decided_by(1));
  EXPECT_EQ(rec.by_id.size(), 3u);
}

TEST_F(Books, DecisionsRepeatsAndDuplicates) {
  rec.answer(1, decided_by(4));
  rec.answer(1, decided_by(4));  // the same answer again: a repeat
  rec.answer(2, decided_by(4));
  rec.answer(2, decided_by(5));  // another worker: a duplicate
  const outcome& a = rec.by_id[1];
  EXPECT_GT(a.answered_ms, 0);
  EXPECT_EQ(a.decisions, 2u);
  EXPECT_EQ(a.winners, (std::set<uint32_t>{4}));
  EXPECT_EQ(a.worker, 4u);
  EXPECT_EQ(rec.by_id[2].winners, (std::set<uint32_t>{4, 5}));
  EXPECT_EQ(rec.by_id[2].worker, 4u);  // the first decision's
}

TEST_F(Books, ErrorsAndUndecodableAnswersKeepTheFirstWhy) {
  rec.answer(1, refused("no bids"));
  rec.answer(1, refused("overloaded"));
  rec.answer(2, {0xff, 0x00, 0x13});
  EXPECT_EQ(rec.by_id[1].error, "no bids");
  EXPECT_EQ(rec.by_id[1].decisions, 0u);
  EXPECT_EQ(rec.by_id[2].error, "undecodable answer");
  EXPECT_GT(rec.by_id[2].answered_ms, 0);
}

TEST_F(Books, ARecordedAnswerIsNotCountedAgainWhenTheLiveOneComes) {
  rec.kept(1, decided_by(6));
  rec.answer(1, decided_by(6));  // the live copy, late
  EXPECT_TRUE(rec.by_id[1].from_record);
  EXPECT_EQ(rec.by_id[1].decisions, 1u);
  // After a live answer, the record has nothing to add.
  rec.answer(2, decided_by(6));
  rec.kept(2, decided_by(7));
  EXPECT_FALSE(rec.by_id[2].from_record);
  EXPECT_EQ(rec.by_id[2].winners, (std::set<uint32_t>{6}));
}

TEST_F(Books, LookUpsAreForUnansweredDurableRequests) {
  rec.by_id[1].sequence = 11;
  rec.by_id[2].sequence = 12;
  rec.by_id[3].sequence = 0;  // not durable (or not acked): no record
  rec.answer(2, decided_by(1));
  // Within the timeout only a reconnect asks for all of them.
  EXPECT_TRUE(rec.to_look_up(false, 60000).empty());
  EXPECT_EQ(rec.to_look_up(true, 60000),
            (std::vector<std::pair<uint64_t, uint64_t>>{{1, 11}}));
  // Past the timeout, once a second each.
  rec.by_id[1].sent_ms -= 10000;
  rec.by_id[1].looked_ms = 0;
  EXPECT_EQ(rec.to_look_up(false, 2000).size(), 1u);
  EXPECT_TRUE(rec.to_look_up(false, 2000).empty());
}

TEST_F(Books, EachFirstTokenEventCountsARun) {
  request_events ev;
  ev.events = {
      {1, 0, false}, {1, 0, true}, {1, 3, false}, {2, 0, true}, {77, 0, false}};
  rec.events(encode(ev));
  EXPECT_EQ(rec.by_id[1].started, 2u);  // run twice
  EXPECT_EQ(rec.by_id[2].started, 0u);
  EXPECT_EQ(rec.by_id.count(77), 0u);
}

TEST(OpenLoopCounts, EveryFateCounted) {
  std::map<uint64_t, outcome> by_id;
  const int64_t now = 100000;
  auto& decided = by_id[1];
  decided.sent_ms = now - 5000;
  decided.answered_ms = now - 4900;
  decided.decisions = 1;
  decided.winners = {3};
  decided.started = 1;
  auto& late = by_id[2];
  late.sent_ms = now - 5000;
  late.answered_ms = now - 2000;  // 3 s after: past 2 s
  late.decisions = 2;             // and once more: a repeat
  late.winners = {3};
  late.from_record = true;
  auto& twice = by_id[3];
  twice.sent_ms = now - 5000;
  twice.answered_ms = now - 4950;
  twice.decisions = 2;
  twice.winners = {3, 4};
  twice.started = 2;
  auto& refused = by_id[4];
  refused.sent_ms = now - 5000;
  refused.answered_ms = now - 4990;
  refused.error = "no bids";
  auto& lost = by_id[5];
  lost.sent_ms = now - 5000;
  auto& unsent = by_id[6];
  unsent.publish_failed = true;
  auto& pending = by_id[7];
  pending.sent_ms = now - 100;  // unanswered, but not yet timed out

  const open_loop_counts c = count_outcomes(by_id, 2000, now);
  EXPECT_EQ(c.sent, 7u);
  EXPECT_EQ(c.publish_errors, 1u);
  EXPECT_EQ(c.decided, 3u);
  EXPECT_EQ(c.late, 1u);
  EXPECT_EQ(c.errors, 1u);
  EXPECT_EQ(c.timeouts, 2u);  // the late one and the lost one
  EXPECT_EQ(c.lost, 2u);      // never answered, timed out or not yet
  EXPECT_EQ(c.duplicates, 1u);
  EXPECT_EQ(c.repeats, 1u);
  EXPECT_EQ(c.double_runs, 1u);
  EXPECT_EQ(c.recovered, 1u);
  EXPECT_FALSE(by_id[1].timed_out);
  EXPECT_TRUE(by_id[2].timed_out);
  EXPECT_TRUE(by_id[5].timed_out);
  EXPECT_FALSE(by_id[6].timed_out);  // never sent: never timed
  EXPECT_FALSE(by_id[7].timed_out);
}

}  // namespace
}  // namespace kvmesh::harness
