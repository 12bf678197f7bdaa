// Dynamo-compatible block hashing (XXH3_64, seed 1337, little-endian input).
#include "core/block_hash.hpp"

#include <xxhash.h>

#include <cstring>

namespace kvmesh {

namespace {

// The hashes are defined over little-endian bytes; serialise explicitly so
// the result does not depend on the host's byte order.
inline void put_le32(unsigned char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out[i] = static_cast<unsigned char>(v >> (8 * i));
}

inline void put_le64(unsigned char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace

uint64_t block_hash_seed_for(std::string_view salt) {
  if (salt.empty()) return block_hash_seed;
  return block_hash_seed + XXH3_64bits_withSeed(salt.data(), salt.size(), 0);
}

namespace {

// Hashes the full blocks of `tokens`, chained after `parent` when given.
expected<std::vector<block_hash>> chain(const uint64_t* parent,
                                        const uint32_t* tokens, size_t count,
                                        uint32_t block_tokens,
                                        std::string_view salt) {
  if (block_tokens == 0)
    return make_error(ec::invalid_argument,
                      "block size must be at least 1 token");
  if (count == 0) return make_error(ec::empty_input, "token list is empty");
  const uint64_t seed = block_hash_seed_for(salt);
  const size_t blocks = count / block_tokens;
  std::vector<block_hash> out;
  out.reserve(blocks);
  std::vector<unsigned char> bytes(size_t{block_tokens} * 4);
  for (size_t b = 0; b < blocks; ++b) {
    const uint32_t* t = tokens + b * block_tokens;
    for (uint32_t i = 0; i < block_tokens; ++i)
      put_le32(bytes.data() + 4 * i, t[i]);
    block_hash h;
    h.local = XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
    const uint64_t* prev = b > 0 ? &out.back().seq : parent;
    if (prev == nullptr) {
      h.seq = h.local;
    } else {
      unsigned char pair[16];
      put_le64(pair, *prev);
      put_le64(pair + 8, h.local);
      // The chain always uses the plain seed, as Dynamo's router does: the
      // salt already changed every local hash, hence seq[0] and all after.
      h.seq = XXH3_64bits_withSeed(pair, sizeof(pair), block_hash_seed);
    }
    out.push_back(h);
  }
  return out;
}

// Seed of the text chunks' local hashes: not the token seed, so that a
// chunk of text and a block of token ids never hash alike by design.
constexpr uint64_t text_seed = block_hash_seed ^ 0x7465787400000000ull;

}  // namespace

expected<std::vector<block_hash>> hash_blocks(const uint32_t* tokens,
                                              size_t count,
                                              uint32_t block_tokens,
                                              std::string_view salt) {
  return chain(nullptr, tokens, count, block_tokens, salt);
}

expected<std::vector<block_hash>> hash_blocks_after(uint64_t parent_seq,
                                                    const uint32_t* tokens,
                                                    size_t count,
                                                    uint32_t block_tokens,
                                                    std::string_view salt) {
  return chain(&parent_seq, tokens, count, block_tokens, salt);
}

expected<std::vector<uint64_t>> hash_text_blocks(std::string_view text,
                                                 uint32_t block_tokens) {
  if (block_tokens == 0)
    return make_error(ec::invalid_argument,
                      "block size must be at least 1 token");
  if (text.empty()) return make_error(ec::empty_input, "text is empty");
  const size_t chunk = size_t{block_tokens} * text_bytes_per_token;
  std::vector<uint64_t> out;
  out.reserve(text.size() / chunk);
  for (size_t at = 0; at + chunk <= text.size(); at += chunk) {
    const uint64_t local =
        XXH3_64bits_withSeed(text.data() + at, chunk, text_seed);
    if (out.empty()) {
      out.push_back(local);
      continue;
    }
    unsigned char pair[16];
    put_le64(pair, out.back());
    put_le64(pair + 8, local);
    out.push_back(XXH3_64bits_withSeed(pair, sizeof(pair), block_hash_seed));
  }
  return out;
}

}  // namespace kvmesh
