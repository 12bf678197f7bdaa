// Tests of actors/index_shard: ingest, prefix queries, persistence, and the
// KV events a WORKER publishes.
#include "actors/index_shard.hpp"

#include <filesystem>
#include <fstream>

#include "actors/worker.hpp"
#include "fixture.hpp"

namespace kvmesh::test {
namespace {

namespace fs = std::filesystem;

cache_event stored(uint64_t h, tier t) {
  return cache_event{cache_event::stored, t, h, 1};
}

class index_shard_test : public actor_fixture {
 protected:
  ~index_shard_test() override {
    if (!dir.empty()) fs::remove_all(dir);
  }
  index_shard_actor spawn(const std::string& d = {}) {
    index_shard_options opt;
    opt.dir = d;
    auto s = spawn_index_shard(*sys, opt);
    EXPECT_TRUE(s) << s.err().message;
    return track(*s);
  }
  void ingest(const index_shard_actor& s, uint32_t worker,
              std::vector<cache_event> batch) {
    sys->spawn([=](caf::event_based_actor* self) {
      self->send(s, kv_atom::value, worker, batch);
    });
    run();
  }
  std::vector<holder_match> query(const index_shard_actor& s,
                                  std::vector<uint64_t> chain) {
    auto r = ask<std::vector<holder_match>>(s, query_atom::value, chain);
    EXPECT_TRUE(r->has_value() && **r);
    return r->has_value() && **r ? ***r : std::vector<holder_match>{};
  }
  std::string dir;
};

TEST_F(index_shard_test, answers_each_holders_depth_deepest_first) {
  auto s = spawn();
  ingest(s, 1, {stored(10, tier::gpu), stored(11, tier::host)});
  ingest(
      s, 0,
      {stored(10, tier::gpu), stored(11, tier::gpu), stored(12, tier::disk)});
  auto h = query(s, {10, 11, 12, 13});
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].worker, 0u);
  EXPECT_EQ(h[0].gpu, 2u);
  EXPECT_EQ(h[0].disk, 1u);
  EXPECT_EQ(h[1].worker, 1u);
  EXPECT_EQ(h[1].gpu, 1u);
  EXPECT_EQ(h[1].host, 1u);
  EXPECT_TRUE(query(s, {99}).empty());
  // A worker that left is forgotten.
  sys->spawn([=](caf::event_based_actor* self) {
    self->send(s, drop_atom::value, uint32_t{0});
  });
  run();
  h = query(s, {10, 11, 12});
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].worker, 1u);
}

TEST_F(index_shard_test, a_restarted_shard_answers_as_before) {
  dir = ::testing::TempDir() + "kvmesh_shard_actor";
  fs::remove_all(dir);
  auto s = spawn(dir);
  ingest(s, 0, {stored(10, tier::gpu), stored(11, tier::gpu)});
  ingest(s, 2, {stored(10, tier::host)});
  const auto before = query(s, {10, 11});
  ASSERT_EQ(before.size(), 2u);
  auto st = ask<shard_status>(s, status_atom::value);
  EXPECT_EQ((**st)->entries, 3u);
  EXPECT_EQ((**st)->events, 3u);
  EXPECT_GT((**st)->disk_bytes, 0u);
  caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  run();
  tracked_.clear();
  run();
  auto again = spawn(dir);
  const auto after = query(again, {10, 11});
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].worker, before[i].worker);
    EXPECT_EQ(after[i].gpu, before[i].gpu);
    EXPECT_EQ(after[i].host, before[i].host);
  }
}

TEST_F(index_shard_test, a_corrupted_directory_is_an_error) {
  dir = ::testing::TempDir() + "kvmesh_shard_corrupt";
  fs::remove_all(dir);
  {
    auto s = spawn(dir);
    ingest(s, 0, {stored(10, tier::gpu)});
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    run();
    tracked_.clear();
  }
  run();
  std::ofstream(dir + "/CURRENT", std::ios::trunc) << "garbage\n";
  index_shard_options opt;
  opt.dir = dir;
  auto s = spawn_index_shard(*sys, opt);
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().message.find(dir), std::string::npos) << s.err().message;
}

TEST_F(index_shard_test, a_bad_event_is_counted_not_applied) {
  auto s = spawn();
  cache_event bad{cache_event::stored, static_cast<tier>(7), 10, 10};
  ingest(s, 0, {bad});
  auto st = ask<shard_status>(s, status_atom::value);
  EXPECT_EQ((**st)->errors, 1u);
  EXPECT_EQ((**st)->blocks, 0u);
}

TEST_F(index_shard_test, a_worker_publishes_its_kv_events) {
  auto s = spawn();
  worker_options opt;
  opt.engine.block_tokens = 16;
  opt.engine.cache = {64, 0, 0};
  opt.ledger.id = 3;
  opt.shards = {s};
  auto w = track(*spawn_worker(*sys, opt));
  route_request_msg r;
  r.id = 1;
  r.blocks = {500, 501, 502, 503};
  r.input_tokens = 64;
  r.output_tokens = 2;
  ask<award_reply>(w, award_atom::value, award_msg{r, -1.0, 0});
  advance(std::chrono::seconds(1));
  auto h = query(s, {500, 501, 502, 503});
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].worker, 3u);
  EXPECT_EQ(h[0].gpu, 4u);
}

}  // namespace
}  // namespace kvmesh::test
