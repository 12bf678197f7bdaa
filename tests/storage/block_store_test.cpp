// Tests of storage/block_store: crash recovery, round trips, bad directories.
#include "storage/block_store.hpp"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace kvmesh {
namespace {

namespace fs = std::filesystem;

cache_event stored(uint64_t h, tier t) {
  return cache_event{cache_event::stored, t, h};
}
cache_event removed(uint64_t h, tier t) {
  return cache_event{cache_event::removed, t, h};
}

constexpr uint32_t workers = 8;

// What a few engines report over a while: chains stored, offloaded (a
// removal from one tier then a store in the next), dropped, stale removals
// that must change nothing, and workers that leave.
struct step {
  bool drop = false;
  uint32_t worker = 0;
  std::vector<cache_event> events;
};

struct workload {
  std::vector<std::vector<uint64_t>> chains;
  std::vector<step> steps;
};

workload make_workload(uint64_t seed, size_t chains, size_t steps) {
  workload w;
  std::mt19937_64 rng(seed);
  w.chains.resize(chains);
  for (auto& c : w.chains) {
    c.resize(4 + rng() % 28);
    for (auto& h : c)
      h = rng();
  }
  // Chains share prefixes, as conversation turns do.
  for (size_t i = 1; i < chains; i += 3) {
    const auto& base = w.chains[i - 1];
    const size_t k = std::min(base.size(), w.chains[i].size()) / 2;
    std::copy(base.begin(), base.begin() + k, w.chains[i].begin());
  }
  for (size_t s = 0; s < steps; ++s) {
    step st;
    st.worker = static_cast<uint32_t>(rng() % workers);
    if (s % 97 == 96) {
      st.drop = true;
      w.steps.push_back(st);
      continue;
    }
    const auto& c = w.chains[rng() % chains];
    const size_t len = 1 + rng() % c.size();
    const int what = static_cast<int>(rng() % 4);
    for (size_t i = 0; i < len; ++i) {
      const tier t = static_cast<tier>(rng() % 3);
      if (what <= 1) {
        st.events.push_back(stored(c[i], t));
      } else if (what == 2) {
        st.events.push_back(removed(c[len - 1 - i], tier::gpu));
        st.events.push_back(stored(c[len - 1 - i], tier::host));
      } else {
        st.events.push_back(removed(c[len - 1 - i], t));  // some are stale
      }
    }
    w.steps.push_back(std::move(st));
  }
  return w;
}

void feed(block_index& idx, const workload& w) {
  for (const auto& st : w.steps) {
    if (st.drop) {
      idx.drop_worker(st.worker);
      continue;
    }
    for (const auto& e : st.events)
      idx.apply(st.worker, e);
  }
}

// Persists every few steps, as the shard does every period, and at the end.
status feed(block_store& store, const workload& w) {
  size_t n = 0;
  for (const auto& st : w.steps) {
    status s = st.drop ? store.drop_worker(st.worker)
                       : store.apply(st.worker, st.events);
    if (s && ++n % 7 == 0) s = store.persist();
    if (!s) return s;
  }
  if (status s = store.persist(); !s) return s;
  return store.settle();
}

using entry = std::tuple<uint64_t, uint32_t, tier>;
std::vector<entry> entries_of(const block_index& idx) {
  std::vector<entry> out;
  idx.for_each(
      [&](uint64_t h, uint32_t wk, tier t) { out.emplace_back(h, wk, t); });
  std::sort(out.begin(), out.end());
  return out;
}

// Same entries, and the same match() answers for every chain of the
// workload and for every prefix length.
void expect_same(const block_index& got, const block_index& want,
                 const workload& w) {
  EXPECT_EQ(got.blocks(), want.blocks());
  EXPECT_EQ(got.entries(), want.entries());
  EXPECT_EQ(entries_of(got), entries_of(want));
  size_t matched = 0;
  for (const auto& c : w.chains) {
    for (size_t n = 1; n <= c.size(); n += 3) {
      tier_match a[workers], b[workers];
      got.match(c.data(), n, workers, a);
      want.match(c.data(), n, workers, b);
      for (uint32_t k = 0; k < workers; ++k) {
        ASSERT_EQ(a[k].gpu, b[k].gpu) << "worker " << k;
        ASSERT_EQ(a[k].host, b[k].host) << "worker " << k;
        ASSERT_EQ(a[k].disk, b[k].disk) << "worker " << k;
        matched += b[k].total();
      }
    }
  }
  EXPECT_GT(matched, 0u);  // the comparison saw real matches
}

// A death test re-runs this test in a fresh process (threadsafe style),
// which must use the parent's directory: the parent passes it through the
// environment.
constexpr const char* dir_env = "KVMESH_BLOCK_STORE_TEST_DIR";

class block_store_test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* d = std::getenv(dir_env)) {
      dir_ = d;
      child_ = true;
      return;
    }
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = ::testing::TempDir() + "kvmesh_block_store_" + info->name() + "_" +
           std::to_string(getpid());
    fs::remove_all(dir_);
    setenv(dir_env, dir_.c_str(), 1);
  }
  void TearDown() override {
    if (child_) return;
    unsetenv(dir_env);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  block_store_options options(bool create) const {
    block_store_options o;
    o.dir = dir_;
    o.create = create;
    return o;
  }

  // Opens with create, writes `w`, closes cleanly.
  void write_shard(const workload& w) {
    block_index idx;
    auto st = block_store::open(options(true), idx);
    ASSERT_TRUE(st) << st.err().message;
    ASSERT_TRUE(feed(**st, w));
    ASSERT_TRUE((*st)->close());
  }

  std::string dir_;
  bool child_ = false;
};

// The child writes and dies without closing: only the WAL has the data (a
// shard this small is never flushed to an SST file).
void kill_after_writing(const std::string& dir, const workload& w,
                        bool sigkill) {
  block_index idx;
  block_store_options o;
  o.dir = dir;
  o.create = true;
  auto st = block_store::open(o, idx);
  if (!st) _exit(3);
  if (status s = feed(**st, w); !s) {
    std::fprintf(stderr, "%s\n", s.err().message.c_str());
    _exit(3);
  }
  if (sigkill) raise(SIGKILL);
  _exit(0);
}

TEST_F(block_store_test, exit_without_close_keeps_what_was_persisted) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const workload w = make_workload(1, 60, 600);
  EXPECT_EXIT(kill_after_writing(dir_, w, false), ::testing::ExitedWithCode(0),
              "");
  block_index want;
  feed(want, w);
  ASSERT_GT(want.entries(), 100u);
  block_index got;
  auto st = block_store::open(options(false), got);
  ASSERT_TRUE(st) << st.err().message;
  expect_same(got, want, w);
}

TEST_F(block_store_test, sigkill_without_close_keeps_what_was_persisted) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const workload w = make_workload(2, 60, 600);
  EXPECT_EXIT(kill_after_writing(dir_, w, true),
              ::testing::KilledBySignal(SIGKILL), "");
  block_index want;
  feed(want, w);
  block_index got;
  auto st = block_store::open(options(false), got);
  ASSERT_TRUE(st) << st.err().message;
  expect_same(got, want, w);
  // The recovered shard keeps working: more writes, another reopen.
  const workload more = make_workload(3, 60, 200);
  ASSERT_TRUE(feed(**st, more));
  feed(want, more);
  ASSERT_TRUE((*st)->close());
  block_index again;
  st = block_store::open(options(false), again);
  ASSERT_TRUE(st) << st.err().message;
  expect_same(again, want, more);
  // Loading into an index that is in use is refused, and leaves it alone.
  auto twice = block_store::open(options(false), got);
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.err().code, ec::invalid_argument);
  EXPECT_GT(got.entries(), 0u);
}

TEST_F(block_store_test, clean_round_trip_keeps_moves_removals_and_drops) {
  const workload w = make_workload(4, 80, 800);
  block_index want;
  {
    block_index live;
    auto st = block_store::open(options(true), live);
    ASSERT_TRUE(st) << st.err().message;
    ASSERT_TRUE(feed(**st, w));
    feed(want, w);
    expect_same(live, want, w);
    // A worker that leaves is gone after the reopen too.
    ASSERT_TRUE((*st)->drop_worker(3));
    want.drop_worker(3);
    // A stale removal (wrong tier) is not persisted as a deletion.
    const uint64_t h = w.chains[0][0];
    ASSERT_TRUE((*st)->apply(5, {stored(h, tier::disk)}));
    ASSERT_TRUE((*st)->apply(5, {removed(h, tier::gpu)}));
    want.apply(5, stored(h, tier::disk));
    EXPECT_GT((*st)->disk_bytes(), 0u);
    EXPECT_EQ((*st)->errors(), 0u);
  }  // the destructor closes
  block_index got;
  auto st = block_store::open(options(false), got);
  ASSERT_TRUE(st) << st.err().message;
  expect_same(got, want, w);
  tier t = tier::gpu;
  EXPECT_FALSE(got.find(w.chains[0][1], 3, &t));
  ASSERT_TRUE(got.find(w.chains[0][0], 5, &t));
  EXPECT_EQ(t, tier::disk);
  // Removing everything leaves an empty shard, not stale keys.
  for (uint32_t k = 0; k < workers; ++k)
    ASSERT_TRUE((*st)->drop_worker(k));
  ASSERT_TRUE((*st)->close());
  block_index empty;
  st = block_store::open(options(false), empty);
  ASSERT_TRUE(st) << st.err().message;
  EXPECT_EQ(empty.entries(), 0u);
}

TEST_F(block_store_test, persist_writes_each_changed_entry_once) {
  block_index idx;
  auto st = block_store::open(options(true), idx);
  ASSERT_TRUE(st) << st.err().message;
  block_store& s = **st;
  // A block stored, moved twice and removed between two persists is one
  // write (its deletion), not four.
  ASSERT_TRUE(s.apply(1, {stored(10, tier::gpu)}));
  ASSERT_TRUE(s.apply(1, {stored(10, tier::host)}));
  ASSERT_TRUE(s.apply(1, {stored(10, tier::disk)}));
  ASSERT_TRUE(s.apply(1, {removed(10, tier::disk)}));
  ASSERT_TRUE(s.apply(1, {stored(11, tier::gpu), stored(12, tier::gpu)}));
  ASSERT_TRUE(s.apply(1, {stored(11, tier::host)}));
  // A stale removal changes nothing and marks nothing.
  ASSERT_TRUE(s.apply(1, {removed(12, tier::disk)}));
  EXPECT_EQ(s.unpersisted(), 7u);
  ASSERT_TRUE(s.persist());
  EXPECT_EQ(s.unpersisted(), 0u);
  ASSERT_TRUE(s.settle());
  EXPECT_EQ(s.written(), 3u);
  ASSERT_TRUE(s.persist());  // nothing new: nothing written
  ASSERT_TRUE(s.settle());
  EXPECT_EQ(s.written(), 3u);
  // Changes not yet persisted are written by close().
  ASSERT_TRUE(s.apply(2, {stored(13, tier::gpu)}));
  ASSERT_TRUE(s.close());
  block_index again;
  st = block_store::open(options(false), again);
  ASSERT_TRUE(st) << st.err().message;
  EXPECT_EQ(again.entries(), 3u);
  tier t = tier::gpu;
  EXPECT_FALSE(again.find(10, 1, &t));
  ASSERT_TRUE(again.find(11, 1, &t));
  EXPECT_EQ(t, tier::host);
  ASSERT_TRUE(again.find(12, 1, &t));
  EXPECT_EQ(t, tier::gpu);
  ASSERT_TRUE(again.find(13, 2, &t));
}

TEST_F(block_store_test, the_last_change_of_each_entry_wins_across_workers) {
  // Workers whose ids differ in every digit of the writer's sort, hashes
  // spread over all 64 bits, each entry changed several times in one
  // persist: what is read back is each entry's last state.
  const std::vector<uint32_t> ids = {0, 3, 5000, (1u << 29) + 7};
  std::mt19937_64 rng(11);
  std::vector<uint64_t> hashes(3000);
  for (auto& h : hashes)
    h = rng();
  block_index want;
  {
    block_index live;
    auto st = block_store::open(options(true), live);
    ASSERT_TRUE(st) << st.err().message;
    for (size_t round = 0; round < 3; ++round)
      for (uint32_t w : ids)
        for (size_t i = 0; i < hashes.size(); ++i) {
          // Round 0 stores on GPU, round 1 moves to host, round 2 moves a
          // third on to disk and removes another third.
          const uint64_t h = hashes[i];
          std::vector<cache_event> ev;
          if (round == 0) ev = {stored(h, tier::gpu)};
          if (round == 1) ev = {stored(h, tier::host)};
          if (round == 2 && i % 3 == 1) ev = {stored(h, tier::disk)};
          if (round == 2 && i % 3 == 2) ev = {removed(h, tier::host)};
          if (ev.empty()) continue;
          ASSERT_TRUE((*st)->apply(w, ev));
          for (const auto& e : ev)
            want.apply(w, e);
        }
    ASSERT_TRUE((*st)->close());
  }
  block_index got;
  auto st = block_store::open(options(false), got);
  ASSERT_TRUE(st) << st.err().message;
  EXPECT_EQ(got.entries(), want.entries());
  EXPECT_EQ(got.entries(), ids.size() * 2000);
  for (uint32_t w : ids)
    for (size_t i = 0; i < hashes.size(); ++i) {
      tier t = tier::gpu;
      const bool held = got.find(hashes[i], w, &t);
      ASSERT_EQ(held, i % 3 != 2) << "worker " << w << " block " << i;
      if (held) {
        EXPECT_EQ(t, i % 3 == 0 ? tier::host : tier::disk);
      }
    }
}

// A crash loses what was applied after the last persist, and nothing
// before it (the shard then learns the rest from the workers' re-announce).
void kill_after_persisting_part(const std::string& dir) {
  block_index idx;
  block_store_options o;
  o.dir = dir;
  o.create = true;
  auto st = block_store::open(o, idx);
  if (!st || !(*st)->apply(1, {stored(20, tier::gpu)}) || !(*st)->persist() ||
      !(*st)->settle() || !(*st)->apply(1, {stored(21, tier::gpu)}))
    _exit(3);
  raise(SIGKILL);
}

TEST_F(block_store_test, a_crash_loses_only_what_was_not_persisted) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(kill_after_persisting_part(dir_),
              ::testing::KilledBySignal(SIGKILL), "");
  block_index got;
  auto st = block_store::open(options(false), got);
  ASSERT_TRUE(st) << st.err().message;
  tier t = tier::gpu;
  EXPECT_TRUE(got.find(20, 1, &t));
  EXPECT_FALSE(got.find(21, 1, &t));
  EXPECT_EQ(got.entries(), 1u);
}

TEST_F(block_store_test, a_bad_batch_changes_nothing) {
  block_index idx;
  auto st = block_store::open(options(true), idx);
  ASSERT_TRUE(st) << st.err().message;
  ASSERT_TRUE((*st)->apply(1, {stored(10, tier::gpu)}));
  const std::vector<cache_event> bad{stored(11, tier::gpu),
                                     stored(12, static_cast<tier>(7))};
  status s = (*st)->apply(1, bad);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.err().code, ec::invalid_argument);
  s = (*st)->apply(block_index::max_workers, {stored(13, tier::gpu)});
  ASSERT_FALSE(s);
  EXPECT_EQ((*st)->errors(), 2u);
  EXPECT_EQ(idx.entries(), 1u);
  ASSERT_TRUE((*st)->close());
  EXPECT_FALSE((*st)->apply(1, {stored(14, tier::gpu)}));  // closed
  block_index again;
  st = block_store::open(options(false), again);
  ASSERT_TRUE(st) << st.err().message;
  EXPECT_EQ(again.entries(), 1u);
  EXPECT_EQ(again.blocks(), 1u);
}

// The writer builds each second's changes as an SST file in the DB's
// directory before ingesting it: a failure there is an error naming the
// file, retried until it works, and a file left by a crash is ignored.
TEST_F(block_store_test, a_failed_ingest_is_reported_and_retried) {
  const fs::path file = fs::path(dir_) / "kvmesh-ingest.sst";
  {
    block_index idx;
    auto st = block_store::open(options(true), idx);
    ASSERT_TRUE(st) << st.err().message;
    // A directory where the file goes: the writer cannot create it.
    fs::create_directories(file / "blocker");
    ASSERT_TRUE((*st)->apply(1, {stored(10, tier::gpu)}));
    // The writer may fail before persist() returns, which then reports it.
    status s = (*st)->persist();
    if (s) s = (*st)->settle();
    ASSERT_FALSE(s);
    EXPECT_NE(s.err().message.find(file.string()), std::string::npos)
        << s.err().message;
    EXPECT_GE((*st)->errors(), 1u);
    fs::remove_all(file);
    EXPECT_TRUE((*st)->settle());  // the retry, a second later
    EXPECT_EQ((*st)->written(), 1u);
    ASSERT_TRUE((*st)->close());
  }
  // What a crash mid-write leaves behind.
  { std::ofstream(file) << "half an SST file"; }
  block_index again;
  auto st = block_store::open(options(false), again);
  ASSERT_TRUE(st) << st.err().message;
  EXPECT_EQ(again.entries(), 1u);
  EXPECT_FALSE(fs::exists(file));
}

TEST_F(block_store_test, missing_directory_without_create_names_the_path) {
  block_index idx;
  auto st = block_store::open(options(false), idx);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.err().code, ec::not_found);
  EXPECT_NE(st.err().message.find(dir_), std::string::npos) << st.err().message;
  EXPECT_FALSE(fs::exists(dir_));  // and nothing was created
  // An existing but empty directory is no DB either.
  fs::create_directories(dir_);
  st = block_store::open(options(false), idx);
  ASSERT_FALSE(st);
  EXPECT_NE(st.err().message.find(dir_), std::string::npos) << st.err().message;
}

void overwrite(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

std::string garbage(size_t n) {
  std::mt19937_64 rng(9);
  std::string s(n, '\0');
  for (auto& c : s)
    c = static_cast<char>(rng());
  return s;
}

fs::path manifest_of(const std::string& dir) {
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().filename().string().rfind("MANIFEST-", 0) == 0)
      return f.path();
  return {};
}

TEST_F(block_store_test, garbage_current_is_an_error_not_an_empty_shard) {
  const workload w = make_workload(5, 20, 100);
  write_shard(w);
  for (const std::string& junk :
       {garbage(64), std::string("MANIFEST-999999\n"), std::string()}) {
    overwrite(fs::path(dir_) / "CURRENT", junk);
    for (bool create : {false, true}) {
      block_index idx;
      auto st = block_store::open(options(create), idx);
      ASSERT_FALSE(st) << "CURRENT of " << junk.size() << " bytes";
      EXPECT_EQ(st.err().code, ec::io_error);
      EXPECT_NE(st.err().message.find(dir_), std::string::npos)
          << st.err().message;
      EXPECT_EQ(idx.entries(), 0u);
    }
  }
}

TEST_F(block_store_test, garbage_manifest_is_an_error_not_an_empty_shard) {
  const workload w = make_workload(6, 20, 100);
  write_shard(w);
  const fs::path m = manifest_of(dir_);
  ASSERT_FALSE(m.empty());
  overwrite(m, garbage(4096));
  block_index idx;
  auto st = block_store::open(options(false), idx);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.err().code, ec::io_error);
  EXPECT_NE(st.err().message.find(dir_), std::string::npos) << st.err().message;
  EXPECT_NE(st.err().message.find("Corruption"), std::string::npos)
      << st.err().message;
  EXPECT_EQ(idx.entries(), 0u);
}

TEST_F(block_store_test, lost_current_is_not_recreated_as_an_empty_shard) {
  write_shard(make_workload(7, 20, 100));
  fs::remove(fs::path(dir_) / "CURRENT");
  block_index idx;
  auto st = block_store::open(options(true), idx);
  ASSERT_FALSE(st);
  EXPECT_NE(st.err().message.find("no CURRENT"), std::string::npos)
      << st.err().message;
  EXPECT_TRUE(fs::exists(manifest_of(dir_)));  // left for a human
}

TEST_F(block_store_test, an_entry_that_does_not_decode_is_an_error) {
  write_shard(make_workload(8, 20, 100));
  {
    // Another program's key in the directory.
    rocksdb::DB* raw = nullptr;
    rocksdb::Options o;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir_, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "hello", "world").ok());
    ASSERT_TRUE(db->Close().ok());
  }
  block_index idx;
  auto st = block_store::open(options(false), idx);
  ASSERT_FALSE(st);
  EXPECT_NE(st.err().message.find("does not decode"), std::string::npos)
      << st.err().message;
  EXPECT_NE(st.err().message.find(dir_), std::string::npos);
  EXPECT_EQ(idx.entries(), 0u);  // no half-loaded index
}

}  // namespace
}  // namespace kvmesh
