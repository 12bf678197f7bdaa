// Tests of engines/kv_mirror: an engine's events applied to kvmesh's block
// hashes and tiers, and the sequence numbers that reveal lost messages.
#include "engines/kv_mirror.hpp"

#include <gtest/gtest.h>

#include <numeric>

#include "core/block_hash.hpp"

namespace kvmesh {
namespace {

constexpr uint32_t bt = 4;

std::vector<uint32_t> tokens(uint32_t first, size_t n) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

engine_kv_event stored(std::vector<uint64_t> hashes, std::vector<uint32_t> t,
                       const char* medium = "GPU", bool has_parent = false,
                       uint64_t parent = 0) {
  engine_kv_event e;
  e.kind = engine_kv_event::stored;
  e.hashes = std::move(hashes);
  e.tokens = std::move(t);
  e.block_size = bt;
  e.medium = medium;
  e.has_parent = has_parent;
  e.parent = parent;
  return e;
}

engine_kv_event removed(std::vector<uint64_t> hashes,
                        const char* medium = "GPU") {
  engine_kv_event e;
  e.kind = engine_kv_event::removed;
  e.hashes = std::move(hashes);
  e.medium = medium;
  return e;
}

std::vector<uint64_t> chain(const std::vector<uint32_t>& t,
                            std::string_view salt = {}) {
  std::vector<uint64_t> out;
  auto hashes = hash_blocks(t, bt, salt);  // kept: the loop reads into it
  for (const auto& h : *hashes)
    out.push_back(h.seq);
  return out;
}

kv_mirror mirror() {
  return std::move(*kv_mirror::make(bt));
}

TEST(kv_mirror, stored_blocks_match_the_routers_hashes) {
  auto m = mirror();
  std::vector<cache_event> out;
  const auto t = tokens(100, 12);
  // The engine caches the first two blocks, then a third after them.
  m.apply(stored({901, 902}, tokens(100, 8)), &out);
  m.apply(stored({903}, tokens(108, 4), "GPU", true, 902), &out);
  EXPECT_EQ(m.blocks(tier::gpu), 3u);
  EXPECT_EQ(m.engine_blocks(), 3u);
  const auto c = chain(t);
  const tier_match got = m.cache().match(c);
  EXPECT_EQ(got.gpu, 3u);
  ASSERT_EQ(out.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].kind, cache_event::stored);
    EXPECT_EQ(out[i].hash, c[i]);
    EXPECT_EQ(out[i].root, c[0]);  // one shard per chain
  }
  EXPECT_EQ(m.faults_total(), 0u);
}

TEST(kv_mirror, offload_then_evict_moves_a_block_down) {
  auto m = mirror();
  std::vector<cache_event> out;
  const auto t = tokens(1, 8);
  const auto c = chain(t);
  m.apply(stored({1, 2}, t), &out);
  // vLLM's CPU offloading stores the same blocks with medium CPU while the
  // GPU keeps them: both tiers count, matching sees the GPU.
  m.apply(stored({1, 2}, t, "CPU"), &out);
  EXPECT_EQ(m.blocks(tier::gpu), 2u);
  EXPECT_EQ(m.blocks(tier::host), 2u);
  EXPECT_EQ(m.cache().match(c).gpu, 2u);
  out.clear();
  m.apply(removed({2}), &out);  // evicted from the GPU
  EXPECT_EQ(m.blocks(tier::gpu), 1u);
  EXPECT_EQ(m.blocks(tier::host), 2u);
  auto got = m.cache().match(c);
  EXPECT_EQ(got.gpu, 1u);
  EXPECT_EQ(got.host, 1u);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].kind, cache_event::removed);
  EXPECT_EQ(out[0].where, tier::gpu);
  EXPECT_EQ(out[1].kind, cache_event::stored);
  EXPECT_EQ(out[1].where, tier::host);
  m.apply(removed({1, 2}, "CPU"), &out);
  EXPECT_EQ(m.blocks(tier::host), 0u);
  EXPECT_EQ(m.blocks(tier::gpu), 1u);
  got = m.cache().match(c);
  EXPECT_EQ(got.gpu, 1u);
  EXPECT_EQ(got.host, 0u);
  m.apply(removed({1}), &out);
  EXPECT_EQ(m.engine_blocks(), 0u);
  EXPECT_EQ(m.cache().match(c).total(), 0u);
  EXPECT_EQ(m.faults_total(), 0u);
}

TEST(kv_mirror, cleared_forgets_every_tier) {
  auto m = mirror();
  std::vector<cache_event> out;
  m.apply(stored({1, 2}, tokens(1, 8)), &out);
  m.apply(stored({3}, tokens(50, 4), "DISK"), &out);
  EXPECT_EQ(m.blocks(tier::disk), 1u);
  out.clear();
  engine_kv_event c;
  c.kind = engine_kv_event::cleared;
  m.apply(c, &out);
  EXPECT_EQ(m.engine_blocks(), 0u);
  for (tier t : {tier::gpu, tier::host, tier::disk})
    EXPECT_EQ(m.blocks(t), 0u);
  EXPECT_EQ(out.size(), 3u);
  for (const auto& e : out)
    EXPECT_EQ(e.kind, cache_event::removed);
  // After a clear the chain starts over: a parent from before is unknown.
  m.apply(stored({4}, tokens(9, 4), "GPU", true, 2), &out);
  EXPECT_EQ(m.faults(mirror_fault::unknown_parent), 1u);
}

TEST(kv_mirror, what_it_cannot_apply_is_counted) {
  auto m = mirror();
  std::vector<cache_event> out;
  auto wrong_size = stored({1}, tokens(1, 8));
  wrong_size.block_size = 8;
  m.apply(wrong_size, &out);
  m.apply(stored({1, 2}, tokens(1, 7)), &out);  // 7 tokens for 2 blocks
  m.apply(stored({3}, tokens(1, 4), "GPU", true, 999), &out);
  m.apply(removed({42}), &out);
  auto group = stored({5}, tokens(1, 4));
  group.group = 1;
  m.apply(group, &out);
  EXPECT_EQ(m.engine_blocks(), 0u);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(m.faults(mirror_fault::block_size), 1u);
  EXPECT_EQ(m.faults(mirror_fault::token_count), 1u);
  EXPECT_EQ(m.faults(mirror_fault::unknown_parent), 1u);
  EXPECT_EQ(m.faults(mirror_fault::unknown_block), 1u);
  EXPECT_EQ(m.faults(mirror_fault::other_group), 1u);
  // An unknown medium is applied as GPU, and counted.
  m.apply(stored({6}, tokens(1, 4), "EXTERNAL"), &out);
  EXPECT_EQ(m.blocks(tier::gpu), 1u);
  EXPECT_EQ(m.faults(mirror_fault::unknown_medium), 1u);
  // A removal from a tier the block is not in is unknown too.
  m.apply(removed({6}, "CPU"), &out);
  EXPECT_EQ(m.faults(mirror_fault::unknown_block), 2u);
  EXPECT_EQ(m.blocks(tier::gpu), 1u);
  // Each kind is reported once.
  EXPECT_EQ(m.take_new_faults().size(), 6u);
  m.apply(removed({43}), &out);
  EXPECT_TRUE(m.take_new_faults().empty());
}

TEST(kv_mirror, lora_blocks_hash_with_the_lora_name) {
  auto m = mirror();
  auto e = stored({1}, tokens(1, 4));
  e.lora_name = "adapter";
  m.apply(e, nullptr);
  EXPECT_EQ(m.cache().match(chain(tokens(1, 4), "adapter")).gpu, 1u);
  EXPECT_EQ(m.cache().match(chain(tokens(1, 4))).gpu, 0u);
}

TEST(kv_mirror, engine_blocks_of_the_same_tokens_share_one_block) {
  auto m = mirror();
  // Two engine hashes (e.g. other extra keys) for the same tokens.
  m.apply(stored({1}, tokens(1, 4)), nullptr);
  m.apply(stored({2}, tokens(1, 4)), nullptr);
  EXPECT_EQ(m.blocks(tier::gpu), 2u);
  EXPECT_EQ(m.cache().size(tier::gpu), 1u);
  m.apply(removed({1}), nullptr);
  EXPECT_EQ(m.cache().match(chain(tokens(1, 4))).gpu, 1u);
  m.apply(removed({2}), nullptr);
  EXPECT_EQ(m.cache().size(tier::gpu), 0u);
  // A hash the engine reuses for other tokens replaces the old block.
  m.apply(stored({7}, tokens(1, 4)), nullptr);
  m.apply(stored({7}, tokens(30, 4)), nullptr);
  EXPECT_EQ(m.blocks(tier::gpu), 1u);
  EXPECT_EQ(m.cache().match(chain(tokens(1, 4))).gpu, 0u);
  EXPECT_EQ(m.cache().match(chain(tokens(30, 4))).gpu, 1u);
}

TEST(kv_mirror, zero_block_tokens_is_refused) {
  EXPECT_FALSE(kv_mirror::make(0));
}

TEST(kv_sequence, verdicts) {
  kv_sequence s;
  EXPECT_EQ(s.observe(5), kv_sequence::first);
  s.applied(5, true);
  EXPECT_EQ(s.observe(6), kv_sequence::next);
  s.applied(6, true);
  EXPECT_EQ(s.observe(9), kv_sequence::gap);
  EXPECT_EQ(s.expected(), 7u);
  // A replay of 7..10 covers the gap and one message more.
  for (uint64_t r = 7; r <= 10; ++r)
    s.applied(r, false);
  EXPECT_EQ(s.observe(9), kv_sequence::duplicate);
  s.applied(9, true);
  EXPECT_EQ(s.observe(10), kv_sequence::duplicate);
  s.applied(10, true);
  EXPECT_EQ(s.observe(11), kv_sequence::next);
  // Back at 0 on the SUB socket: the engine started over.
  EXPECT_EQ(s.observe(0), kv_sequence::restart);
  EXPECT_EQ(s.observe(10), kv_sequence::restart);
  s.reset();
  EXPECT_EQ(s.observe(0), kv_sequence::first);
}

}  // namespace
}  // namespace kvmesh
