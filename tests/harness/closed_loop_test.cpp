// Tests of harness/closed_loop's requests and harness/baselines' payload.
// What a throughput run sends, the same for the same seed.
#include "harness/closed_loop.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "harness/baselines.hpp"
#include "messages/codec.hpp"

namespace kvmesh::harness {
namespace {

TEST(Synthetic, TheSameSeedGivesTheSameRequests) {
  const auto a = synthetic_requests(500, 16, 7);
  const auto b = synthetic_requests(500, 16, 7);
  ASSERT_EQ(a.size(), 500u);
  ASSERT_EQ(b.size(), 500u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_EQ(a[i].blocks, b[i].blocks);
  }
  const auto c = synthetic_requests(500, 16, 8);
  EXPECT_NE(a[0].id, c[0].id);
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i)
    same += a[i].blocks == c[i].blocks;
  EXPECT_LT(same, 5u);
}

// What seed 1 gives, so that runs of `kvmesh bench --mode throughput`
// stay comparable across versions: a change here changes the load.
TEST(Synthetic, SeedOneIsPinned) {
  const auto r = synthetic_requests(3, 512, 1);
  ASSERT_EQ(r.size(), 3u);
  std::vector<size_t> lengths;
  for (const auto& x : r)
    lengths.push_back(x.blocks.size());
  EXPECT_EQ(lengths, (std::vector<size_t>{58, 10, 62}));
  EXPECT_EQ(r[0].id, 7949918356759379968ull);
  EXPECT_EQ(r[0].blocks[0], 9294658745891930847ull);
}

TEST(Synthetic, ShapeOfEachRequest) {
  const auto r = synthetic_requests(2000, 16, 1);
  std::set<uint64_t> ids;
  for (size_t i = 0; i < r.size(); ++i) {
    ids.insert(r[i].id);
    EXPECT_EQ(r[i].id, r[0].id + i);  // a random base, then a counter
    EXPECT_GE(r[i].blocks.size(), 8u);
    EXPECT_LE(r[i].blocks.size(), 64u);
    EXPECT_EQ(r[i].input_tokens, r[i].blocks.size() * 16);
    EXPECT_EQ(r[i].output_tokens, synthetic_output_tokens);
  }
  EXPECT_EQ(ids.size(), r.size());
  EXPECT_LT(r[0].id >> 32, 0x80000000ull);
}

// Half the requests start with one of the families' prefixes: their first
// blocks repeat, at most synthetic_families of them; the other half's are
// unique.
TEST(Synthetic, HalfShareAFamilysPrefix) {
  const auto r = synthetic_requests(4000, 16, 3);
  std::map<uint64_t, size_t> first;
  for (const auto& x : r)
    ++first[x.blocks[0]];
  size_t shared = 0, families = 0;
  for (const auto& [block, n] : first)
    if (n > 1) {
      shared += n;
      ++families;
    }
  EXPECT_GT(shared, 1800u);
  EXPECT_LT(shared, 2200u);
  EXPECT_LE(families, synthetic_families);
}

TEST(Payload, TheMedianRequestByPromptLength) {
  std::vector<route_request_msg> sample(3);
  sample[0].blocks.assign(30, 7);
  sample[1].blocks.assign(2, 7);
  sample[2].blocks.assign(10, 7);
  EXPECT_EQ(median_payload(sample), encode(sample[2]).size());
  EXPECT_EQ(median_payload({}), 0u);
}

TEST(Payload, ATracesRequestsAsTheyAreRouted) {
  std::vector<trace_request> trace(3);
  for (size_t i = 0; i < trace.size(); ++i) {
    trace[i].blocks.assign(5 * (i + 1), 3);
    trace[i].input_tokens = 100;
    trace[i].output_tokens = 0;  // routed as 1
  }
  route_request_msg mid;
  mid.id = 1;
  mid.blocks = trace[1].blocks;
  mid.input_tokens = 100;
  mid.output_tokens = 1;
  EXPECT_EQ(trace_payload(trace), encode(mid).size());
}

}  // namespace
}  // namespace kvmesh::harness
