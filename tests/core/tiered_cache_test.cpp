// Tests of core/tiered_cache: LRU per tier, offload, match depth, refcounts.
#include "core/tiered_cache.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "core/block_index.hpp"

namespace kvmesh {
namespace {

tiered_cache make(uint64_t gpu, uint64_t host = 0, uint64_t disk = 0) {
  auto c = tiered_cache::make({gpu, host, disk});
  EXPECT_TRUE(c);
  return std::move(*c);
}

tier where(const tiered_cache& c, uint64_t h) {
  tier t = tier::gpu;
  EXPECT_TRUE(c.find(h, &t)) << "block " << h << " is not cached";
  return t;
}

TEST(tiered_cache, zero_gpu_capacity_is_an_error) {
  auto c = tiered_cache::make({0, 10, 10});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.err().code, ec::invalid_argument);
}

// What a worker re-announces: every block held, once, in its tier and with
// its chain's root; evicted and removed blocks not.
TEST(tiered_cache, for_each_lists_every_block_held) {
  auto c = make(2, 1);
  ASSERT_TRUE(c.store(1, tier::gpu, 10));
  ASSERT_TRUE(c.store(2, tier::gpu, 10));
  ASSERT_TRUE(c.store(3, tier::gpu, 30));  // 1 goes to host
  ASSERT_TRUE(c.store(4, tier::gpu, 40));  // 2 to host, 1 out
  ASSERT_TRUE(c.remove(3));
  std::map<uint64_t, std::pair<tier, uint64_t>> seen;
  c.for_each([&](uint64_t h, tier t, uint64_t root) {
    EXPECT_TRUE(seen.emplace(h, std::make_pair(t, root)).second) << h;
  });
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[2], std::make_pair(tier::host, uint64_t{10}));
  EXPECT_EQ(seen[4], std::make_pair(tier::gpu, uint64_t{40}));
}

TEST(tiered_cache, gpu_evicts_least_recently_used) {
  auto c = make(3);
  for (uint64_t h : {1, 2, 3})
    ASSERT_TRUE(c.store(h, tier::gpu));
  c.touch(1);  // 2 is now the least recently used
  ASSERT_TRUE(c.store(4, tier::gpu));
  EXPECT_FALSE(c.find(2, nullptr));
  EXPECT_TRUE(c.find(1, nullptr));
  EXPECT_TRUE(c.find(3, nullptr));
  EXPECT_TRUE(c.find(4, nullptr));
  EXPECT_EQ(c.size(tier::gpu), 3u);
}

TEST(tiered_cache, eviction_offloads_gpu_to_host_to_disk) {
  auto c = make(2, 2, 2);
  std::vector<cache_event> ev;
  c.set_event_sink(&ev);
  for (uint64_t h = 1; h <= 6; ++h)
    ASSERT_TRUE(c.store(h, tier::gpu));
  // Oldest blocks sink a tier per eviction: 1,2 on disk; 3,4 host; 5,6 GPU.
  EXPECT_EQ(where(c, 1), tier::disk);
  EXPECT_EQ(where(c, 2), tier::disk);
  EXPECT_EQ(where(c, 3), tier::host);
  EXPECT_EQ(where(c, 4), tier::host);
  EXPECT_EQ(where(c, 5), tier::gpu);
  EXPECT_EQ(where(c, 6), tier::gpu);
  // One more drops the disk tier's LRU block.
  ASSERT_TRUE(c.store(7, tier::gpu));
  EXPECT_FALSE(c.find(1, nullptr));
  EXPECT_EQ(where(c, 2), tier::disk);
  EXPECT_EQ(where(c, 3), tier::disk);
  // The events tell a mirror everything: the last store removed 1 from disk,
  // moved 3 host->disk and 5 gpu->host, and stored 7 on the GPU.
  const std::vector<std::tuple<int, tier, uint64_t>> last{
      {cache_event::removed, tier::gpu, 5},
      {cache_event::removed, tier::host, 3},
      {cache_event::removed, tier::disk, 1},
      {cache_event::stored, tier::disk, 3},
      {cache_event::stored, tier::host, 5},
      {cache_event::stored, tier::gpu, 7}};
  ASSERT_GE(ev.size(), last.size());
  for (size_t i = 0; i < last.size(); ++i) {
    const auto& e = ev[ev.size() - last.size() + i];
    EXPECT_EQ(e.kind, std::get<0>(last[i])) << i;
    EXPECT_EQ(e.where, std::get<1>(last[i])) << i;
    EXPECT_EQ(e.hash, std::get<2>(last[i])) << i;
  }
}

TEST(tiered_cache, without_lower_tiers_eviction_drops) {
  auto c = make(1);
  ASSERT_TRUE(c.store(1, tier::gpu));
  ASSERT_TRUE(c.store(2, tier::gpu));
  EXPECT_FALSE(c.find(1, nullptr));
  EXPECT_FALSE(c.store(3, tier::host));  // no host tier
}

TEST(tiered_cache, match_counts_each_tier_and_stops_at_first_miss) {
  auto c = make(2, 2, 2);
  // Build: 10,11 disk; 12,13 host; 14,15 GPU.
  for (uint64_t h = 10; h <= 15; ++h)
    ASSERT_TRUE(c.store(h, tier::gpu));
  std::vector<uint64_t> chain{14, 12, 10, 15, 99, 11};
  tier_match m = c.match(chain);
  EXPECT_EQ(m.gpu, 2u);
  EXPECT_EQ(m.host, 1u);
  EXPECT_EQ(m.disk, 1u);
  EXPECT_EQ(m.total(), 4u);  // 11 lies past the miss at 99
  EXPECT_EQ(c.match(std::vector<uint64_t>{99, 14}).total(), 0u);
}

TEST(tiered_cache, held_blocks_are_not_evicted_and_count_as_overlap) {
  auto c = make(2, 1);
  ASSERT_TRUE(c.store(1, tier::gpu));
  ASSERT_TRUE(c.store(2, tier::gpu));
  tier t;
  ASSERT_TRUE(c.acquire(1, &t));
  EXPECT_EQ(t, tier::gpu);
  EXPECT_EQ(c.active(), 1u);
  EXPECT_EQ(c.match(std::vector<uint64_t>{1, 2}).active_overlap, 1u);
  // Storing two more can only evict 2 and then 3: 1 is held.
  ASSERT_TRUE(c.store(3, tier::gpu));
  ASSERT_TRUE(c.store(4, tier::gpu));
  EXPECT_EQ(where(c, 1), tier::gpu);
  EXPECT_EQ(where(c, 3), tier::host);
  EXPECT_FALSE(c.find(2, nullptr));
  c.release(1);
  EXPECT_EQ(c.active(), 0u);
  // Released, 1 joins the pool as most recent: 4 is evicted, not 1.
  ASSERT_TRUE(c.store(5, tier::gpu));
  EXPECT_EQ(where(c, 1), tier::gpu);
  EXPECT_EQ(where(c, 4), tier::host);
}

TEST(tiered_cache, full_of_held_blocks_refuses) {
  auto c = make(2);
  ASSERT_TRUE(c.allocate(2));
  EXPECT_EQ(c.gpu_available(), 0u);
  EXPECT_FALSE(c.store(1, tier::gpu));
  EXPECT_FALSE(c.allocate(1));
  c.free_anonymous(1);
  EXPECT_TRUE(c.allocate(1));
}

TEST(tiered_cache, acquire_loads_host_block_into_gpu) {
  auto c = make(1, 1);
  ASSERT_TRUE(c.store(1, tier::gpu));
  ASSERT_TRUE(c.store(2, tier::gpu));  // 1 -> host
  tier t;
  ASSERT_TRUE(c.acquire(1, &t));
  EXPECT_EQ(t, tier::host);
  EXPECT_EQ(where(c, 1), tier::gpu);
  EXPECT_EQ(where(c, 2), tier::host);  // swapped places
  EXPECT_EQ(c.size(tier::gpu), 1u);
  EXPECT_EQ(c.size(tier::host), 1u);
  EXPECT_FALSE(c.acquire(99, &t));
}

TEST(tiered_cache, commit_turns_anonymous_block_into_cached) {
  auto c = make(4, 4);
  ASSERT_TRUE(c.allocate(2));
  c.commit(7);
  EXPECT_EQ(c.anonymous(), 1u);
  EXPECT_EQ(c.active(), 2u);
  EXPECT_EQ(where(c, 7), tier::gpu);
  // Committing a block someone else already cached reuses that copy.
  ASSERT_TRUE(c.store(8, tier::gpu));
  c.commit(8);
  EXPECT_EQ(c.anonymous(), 0u);
  EXPECT_EQ(c.size(tier::gpu), 2u);
  c.release(7);
  c.release(8);
  EXPECT_EQ(c.active(), 0u);
  EXPECT_EQ(c.match(std::vector<uint64_t>{7, 8}).gpu, 2u);
}

TEST(tiered_cache, remove_and_clear_spare_held_blocks) {
  auto c = make(4, 4);
  for (uint64_t h : {1, 2, 3})
    ASSERT_TRUE(c.store(h, tier::gpu));
  tier t;
  ASSERT_TRUE(c.acquire(2, &t));
  EXPECT_TRUE(c.remove(1));
  EXPECT_FALSE(c.remove(2));
  c.clear();
  EXPECT_FALSE(c.find(3, nullptr));
  EXPECT_TRUE(c.find(2, nullptr));
  EXPECT_EQ(c.size(tier::gpu), 1u);
}

TEST(tiered_cache, a_move_through_the_tiers_travels_as_one_event) {
  auto c = make(1, 1, 1);
  std::vector<cache_event> ev;
  c.set_event_sink(&ev);
  ASSERT_TRUE(c.store(1, tier::gpu));
  ASSERT_TRUE(c.store(2, tier::gpu));
  ASSERT_TRUE(c.store(3, tier::gpu));  // 1 to disk, 2 to host
  ev.clear();
  ASSERT_TRUE(c.store(4, tier::gpu));  // drops 1, 2 to disk, 3 to host
  // removed 3 gpu, removed 2 host, removed 1 disk, stored 2 disk,
  // stored 3 host, stored 4 gpu.
  ASSERT_EQ(ev.size(), 6u);
  drop_superseded(ev);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].kind, cache_event::removed);
  EXPECT_EQ(ev[0].hash, 1u);
  EXPECT_EQ(ev[1].hash, 2u);
  EXPECT_EQ(ev[1].where, tier::disk);
  EXPECT_EQ(ev[2].hash, 3u);
  EXPECT_EQ(ev[2].where, tier::host);
  EXPECT_EQ(ev[3].hash, 4u);
  EXPECT_EQ(ev[3].kind, cache_event::stored);
}

// An index fed the compacted batches ends where the full ones leave it,
// under random stores, hits, holds and removals.
TEST(tiered_cache, dropping_superseded_events_leaves_the_index_alike) {
  std::mt19937_64 rng(7);
  auto c = make(8, 8, 8);
  std::vector<cache_event> ev;
  c.set_event_sink(&ev);
  block_index full, compact;
  size_t sent_full = 0, sent_compact = 0;
  for (int round = 0; round < 2000; ++round) {
    const size_t ops = 1 + rng() % 6;
    for (size_t k = 0; k < ops; ++k) {
      const uint64_t h = 1 + rng() % 40;
      switch (rng() % 6) {
        case 0:
        case 1:
          (void)c.store(h, tier::gpu);
          break;
        case 2: {
          tier found;
          if (c.acquire(h, &found)) c.release(h);
          break;
        }
        case 3:
          c.touch(h);
          break;
        case 4:
          (void)c.remove(h);
          break;
        default:
          if (c.allocate(1)) {
            c.commit(h);
            c.release(h);
          }
          break;
      }
    }
    for (const auto& e : ev)
      full.apply(0, e);
    sent_full += ev.size();
    drop_superseded(ev);
    for (const auto& e : ev)
      compact.apply(0, e);
    sent_compact += ev.size();
    ev.clear();
  }
  ASSERT_EQ(full.entries(), compact.entries());
  for (uint64_t h = 1; h <= 40; ++h) {
    tier a = tier::gpu, b = tier::gpu;
    const bool in_full = full.find(h, 0, &a);
    ASSERT_EQ(in_full, compact.find(h, 0, &b)) << "block " << h;
    if (in_full) {
      EXPECT_EQ(a, b) << "block " << h;
    }
  }
  EXPECT_LT(sent_compact, sent_full * 9 / 10);
}

}  // namespace
}  // namespace kvmesh
