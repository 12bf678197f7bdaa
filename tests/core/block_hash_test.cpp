// Tests of core/block_hash: Dynamo-compatible local and sequence hashes.
#include "core/block_hash.hpp"

#include <gtest/gtest.h>
#include <xxhash.h>

namespace kvmesh {
namespace {

// Expected values were computed outside this code base with Debian's
// python3-xxhash (an independent binding of the reference xxHash):
//   local = xxh3_64_intdigest(struct.pack('<%dI' % B, *block), seed=1337)
//   seq[i] = xxh3_64_intdigest(struct.pack('<QQ', seq[i-1], local[i]),
//                              seed=1337)
//   salted seed = 1337 + xxh3_64_intdigest(salt, seed=0)
TEST(block_hash, matches_reference_vectors) {
  std::vector<uint32_t> tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto h = hash_blocks(tokens, 4);
  ASSERT_TRUE(h);
  ASSERT_EQ(h->size(), 2u);  // tokens 9 and 10 make no full block
  EXPECT_EQ((*h)[0].local, 0xcb38e4d7fb2dca5cull);
  EXPECT_EQ((*h)[0].seq, 0xcb38e4d7fb2dca5cull);
  EXPECT_EQ((*h)[1].local, 0xe8d3ec39b907b74cull);
  EXPECT_EQ((*h)[1].seq, 0x44a2b2379d6d3c3dull);
}

TEST(block_hash, tokens_are_little_endian_u32) {
  std::vector<uint32_t> tokens{4294967295u, 0, 123456789, 7};
  auto h = hash_blocks(tokens, 2);
  ASSERT_TRUE(h);
  ASSERT_EQ(h->size(), 2u);
  EXPECT_EQ((*h)[0].local, 0x281d4ec618d46521ull);
  EXPECT_EQ((*h)[1].local, 0xdfeb53b7bdda20ecull);
  EXPECT_EQ((*h)[1].seq, 0x7bb04297f44527acull);
}

TEST(block_hash, salt_changes_the_seed) {
  std::vector<uint32_t> tokens{1, 2, 3, 4, 5, 6, 7, 8};
  auto h = hash_blocks(tokens, 4, "lora-a");
  ASSERT_TRUE(h);
  EXPECT_EQ((*h)[0].local, 0xebe499ac3e8056dcull);
  EXPECT_EQ((*h)[1].local, 0x1be53f000517c189ull);
  EXPECT_EQ((*h)[1].seq, 0x999198c2aa118cccull);
}

// The one literal in Dynamo's own tests: compute_block_hash(b"test data").
TEST(block_hash, seed_matches_dynamo_literal) {
  const char data[] = "test data";
  EXPECT_EQ(XXH3_64bits_withSeed(data, 9, block_hash_seed),
            13226331709069118873ull);
}

TEST(block_hash, shared_prefix_shares_hashes) {
  std::vector<uint32_t> a{1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint32_t> b{1, 2, 3, 4, 9, 9, 9, 9};
  auto ha = hash_blocks(a, 4);
  auto hb = hash_blocks(b, 4);
  EXPECT_EQ((*ha)[0].seq, (*hb)[0].seq);
  EXPECT_NE((*ha)[1].seq, (*hb)[1].seq);
  // Same block content after a different prefix: same local, other seq.
  std::vector<uint32_t> c{9, 9, 9, 9, 5, 6, 7, 8};
  auto hc = hash_blocks(c, 4);
  EXPECT_EQ((*ha)[1].local, (*hc)[1].local);
  EXPECT_NE((*ha)[1].seq, (*hc)[1].seq);
}

TEST(block_hash, bad_input_is_an_error) {
  std::vector<uint32_t> tokens{1, 2, 3};
  auto zero = hash_blocks(tokens, 0);
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.err().code, ec::invalid_argument);
  auto empty = hash_blocks(std::vector<uint32_t>{}, 4);
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.err().code, ec::empty_input);
  auto partial = hash_blocks(tokens, 4);
  ASSERT_TRUE(partial);
  EXPECT_TRUE(partial->empty());
}

TEST(block_hash, a_chain_continues_after_its_parent) {
  std::vector<uint32_t> all{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  auto whole = hash_blocks(all, 4, "salt");
  ASSERT_TRUE(whole);
  auto tail = hash_blocks_after((*whole)[0].seq, all.data() + 4, 8, 4, "salt");
  ASSERT_TRUE(tail);
  ASSERT_EQ(tail->size(), 2u);
  EXPECT_EQ((*tail)[0].seq, (*whole)[1].seq);
  EXPECT_EQ((*tail)[1].seq, (*whole)[2].seq);
  EXPECT_EQ((*tail)[1].local, (*whole)[2].local);
  EXPECT_FALSE(hash_blocks_after(1, all.data(), 4, 0));
}

TEST(block_hash, text_is_hashed_in_chunks_of_bytes) {
  const std::string text(4 * 4 * 3 + 5, 'a');  // 3 chunks of 4 tokens
  auto c = hash_text_blocks(text, 4);
  ASSERT_TRUE(c);
  ASSERT_EQ(c->size(), 3u);
  // Same chunks, different positions: the chain tells them apart.
  EXPECT_NE((*c)[0], (*c)[1]);
  auto prefix = hash_text_blocks(text.substr(0, 32), 4);
  ASSERT_TRUE(prefix);
  EXPECT_EQ(*prefix, std::vector<uint64_t>(c->begin(), c->begin() + 2));
  EXPECT_TRUE(hash_text_blocks("short", 4)->empty());
  EXPECT_EQ(hash_text_blocks("", 4).err().code, ec::empty_input);
  EXPECT_EQ(hash_text_blocks("x", 0).err().code, ec::invalid_argument);
}

}  // namespace
}  // namespace kvmesh
