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

expected<std::vector<block_hash>> hash_blocks(const uint32_t* tokens,
                                              size_t count,
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
    if (b == 0) {
      h.seq = h.local;
    } else {
      unsigned char pair[16];
      put_le64(pair, out.back().seq);
      put_le64(pair + 8, h.local);
      // The chain always uses the plain seed, as Dynamo's router does: the
      // salt already changed every local hash, hence seq[0] and all after.
      h.seq = XXH3_64bits_withSeed(pair, sizeof(pair), block_hash_seed);
    }
    out.push_back(h);
  }
  return out;
}

}  // namespace kvmesh
