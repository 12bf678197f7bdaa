// Tests of core/block_index: holders by tier from KV events, prefix matches.
#include "core/block_index.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>
#include <vector>

namespace kvmesh {
namespace {

cache_event stored(uint64_t h, tier t) {
  return cache_event{cache_event::stored, t, h};
}
cache_event removed(uint64_t h, tier t) {
  return cache_event{cache_event::removed, t, h};
}

TEST(block_index, follows_stores_moves_and_removals) {
  block_index idx;
  idx.apply(0, stored(1, tier::gpu));
  idx.apply(1, stored(1, tier::host));
  EXPECT_EQ(idx.holders(1).size(), 2u);
  // Worker 0 offloads block 1: removed from GPU, stored in host.
  idx.apply(0, removed(1, tier::gpu));
  idx.apply(0, stored(1, tier::host));
  for (const auto& h : idx.holders(1))
    EXPECT_EQ(h.where, tier::host);
  // A removal naming the wrong tier is stale and ignored.
  idx.apply(1, removed(1, tier::gpu));
  EXPECT_EQ(idx.holders(1).size(), 2u);
  idx.apply(0, removed(1, tier::host));
  idx.apply(1, removed(1, tier::host));
  EXPECT_TRUE(idx.holders(1).empty());
  EXPECT_EQ(idx.blocks(), 0u);
}

TEST(block_index, match_per_worker_stops_at_each_workers_gap) {
  block_index idx;
  // Worker 0: 10 11 12 (GPU, host, disk); worker 1: 10 only; worker 2: 11
  // 12 but not 10, so nothing.
  idx.apply(0, stored(10, tier::gpu));
  idx.apply(0, stored(11, tier::host));
  idx.apply(0, stored(12, tier::disk));
  idx.apply(1, stored(10, tier::gpu));
  idx.apply(1, stored(12, tier::gpu));
  idx.apply(2, stored(11, tier::gpu));
  idx.apply(2, stored(12, tier::gpu));
  std::vector<uint64_t> chain{10, 11, 12, 13};
  tier_match m[3];
  idx.match(chain.data(), chain.size(), 3, m);
  EXPECT_EQ(m[0].gpu, 1u);
  EXPECT_EQ(m[0].host, 1u);
  EXPECT_EQ(m[0].disk, 1u);
  EXPECT_EQ(m[1].total(), 1u);  // 12 lies past its gap at 11
  EXPECT_EQ(m[2].total(), 0u);
}

TEST(block_index, drop_worker_forgets_its_blocks) {
  block_index idx;
  idx.apply(0, stored(1, tier::gpu));
  idx.apply(0, stored(2, tier::gpu));
  idx.apply(1, stored(2, tier::gpu));
  idx.drop_worker(0);
  EXPECT_TRUE(idx.holders(1).empty());
  ASSERT_EQ(idx.holders(2).size(), 1u);
  EXPECT_EQ(idx.holders(2).front().worker, 1u);
  EXPECT_EQ(idx.blocks(), 1u);
  // Freed slots are reused.
  idx.apply(3, stored(7, tier::gpu));
  EXPECT_EQ(idx.blocks(), 2u);
}

TEST(block_index, many_holders_spill_and_come_back_inline) {
  block_index idx;
  for (uint32_t w = 0; w < 5; ++w)
    idx.apply(w, stored(9, w % 2 ? tier::host : tier::gpu));
  EXPECT_EQ(idx.holders(9).size(), 5u);
  EXPECT_EQ(idx.entries(), 5u);
  // Moving a spilled holder changes its tier, not the count.
  EXPECT_TRUE(idx.apply(4, stored(9, tier::disk)));
  tier t = tier::gpu;
  ASSERT_TRUE(idx.find(9, 4, &t));
  EXPECT_EQ(t, tier::disk);
  EXPECT_FALSE(idx.apply(4, stored(9, tier::disk)));  // no change
  EXPECT_TRUE(idx.apply(0, removed(9, tier::gpu)));
  EXPECT_TRUE(idx.apply(1, removed(9, tier::host)));
  EXPECT_TRUE(idx.apply(2, removed(9, tier::gpu)));
  auto hs = idx.holders(9);
  ASSERT_EQ(hs.size(), 2u);
  std::sort(hs.begin(), hs.end(),
            [](auto a, auto b) { return a.worker < b.worker; });
  EXPECT_EQ(hs[0].worker, 3u);
  EXPECT_EQ(hs[0].where, tier::host);
  EXPECT_EQ(hs[1].worker, 4u);
  EXPECT_EQ(hs[1].where, tier::disk);
  // A third holder again spills; the freed list is reused.
  idx.apply(7, stored(9, tier::gpu));
  EXPECT_EQ(idx.holders(9).size(), 3u);
  EXPECT_EQ(idx.blocks(), 1u);
}

TEST(block_index, rejects_events_it_cannot_represent) {
  block_index idx;
  EXPECT_FALSE(idx.apply(block_index::max_workers, stored(1, tier::gpu)));
  EXPECT_FALSE(idx.apply(0, stored(1, static_cast<tier>(3))));
  EXPECT_EQ(idx.blocks(), 0u);
  EXPECT_EQ(idx.entries(), 0u);
  EXPECT_TRUE(idx.apply(block_index::max_workers - 1, stored(1, tier::disk)));
  tier t = tier::gpu;
  ASSERT_TRUE(idx.find(1, block_index::max_workers - 1, &t));
  EXPECT_EQ(t, tier::disk);
}

// The index against a plain map under random churn that grows the table,
// spills and shifts probe runs: the same entries and the same matches.
TEST(block_index, agrees_with_a_plain_map_under_churn) {
  using model_t = std::map<uint64_t, std::map<uint32_t, tier>>;
  model_t model;
  block_index idx;
  std::mt19937_64 rng(7);
  const uint32_t workers = 6;
  // Few distinct hashes so blocks are shared, moved and removed often;
  // random ones, so probe runs form as they do with content hashes.
  std::vector<uint64_t> pool(30000);
  for (auto& h : pool)
    h = rng();
  auto pick_hash = [&] { return pool[rng() % pool.size()]; };
  for (int step = 0; step < 200000; ++step) {
    const uint32_t w = static_cast<uint32_t>(rng() % workers);
    const uint64_t h = pick_hash();
    const tier t = static_cast<tier>(rng() % 3);
    if (step % 20000 == 19999) {
      idx.drop_worker(w);
      for (auto it = model.begin(); it != model.end();) {
        it->second.erase(w);
        it = it->second.empty() ? model.erase(it) : std::next(it);
      }
      size_t n = 0;
      for (const auto& b : model)
        n += b.second.size();
      ASSERT_EQ(idx.entries(), n);
      ASSERT_EQ(idx.blocks(), model.size());
      continue;
    }
    if (rng() % 3) {
      idx.apply(w, stored(h, t));
      model[h][w] = t;
    } else {
      idx.apply(w, removed(h, t));
      auto it = model.find(h);
      if (it != model.end()) {
        auto jt = it->second.find(w);
        if (jt != it->second.end() && jt->second == t) it->second.erase(jt);
        if (it->second.empty()) model.erase(it);
      }
    }
  }
  ASSERT_GT(model.size(), 1000u);
  EXPECT_EQ(idx.blocks(), model.size());
  std::vector<std::tuple<uint64_t, uint32_t, tier>> got, want;
  idx.for_each(
      [&](uint64_t h, uint32_t w, tier t) { got.emplace_back(h, w, t); });
  for (const auto& [h, hs] : model)
    for (const auto& [w, t] : hs)
      want.emplace_back(h, w, t);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(idx.entries(), want.size());
  // Chains of held hashes, with a miss now and then.
  for (int q = 0; q < 2000; ++q) {
    std::vector<uint64_t> chain(1 + rng() % 12);
    for (auto& h : chain)
      h = pick_hash();
    tier_match m[workers];
    idx.match(chain.data(), chain.size(), workers, m);
    for (uint32_t w = 0; w < workers; ++w) {
      tier_match r;
      for (uint64_t h : chain) {
        auto it = model.find(h);
        if (it == model.end()) break;
        auto jt = it->second.find(w);
        if (jt == it->second.end()) break;
        r.add(jt->second);
      }
      EXPECT_EQ(m[w].gpu, r.gpu);
      EXPECT_EQ(m[w].host, r.host);
      EXPECT_EQ(m[w].disk, r.disk);
    }
  }
}

TEST(block_index, one_holder_blocks_cost_under_64_bytes) {
  block_index idx;
  for (uint64_t h = 0; h < 100000; ++h)
    idx.apply(static_cast<uint32_t>(h % 4),
              stored(h * 0x9E3779B97F4A7C15ull, tier::gpu));
  EXPECT_EQ(idx.entries(), 100000u);
  EXPECT_LT(idx.memory_bytes(), 64u * idx.entries());
}

}  // namespace
}  // namespace kvmesh
