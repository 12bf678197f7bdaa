// Block hashing compatible with NVIDIA Dynamo's KV router: per-block local
// hashes and chained sequence hashes over token ids.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace kvmesh {

// Tokens per block wherever a command or a component is not told: every
// agent, router, load and trace of the mesh must agree on it (Mooncake's
// traces are in 512-token blocks).
inline constexpr uint32_t default_block_tokens = 512;

// Seed of every block hash, as Dynamo uses it.
inline constexpr uint64_t block_hash_seed = 1337;

struct block_hash {
  uint64_t local = 0;  // hash of this block's tokens alone
  uint64_t seq = 0;    // hash of the whole prefix ending at this block
};

// Seed of the local hashes for a salt or LoRA name: block_hash_seed +
// XXH3_64(name, seed 0) (wrapping); the plain seed when the name is empty.
uint64_t block_hash_seed_for(std::string_view salt);

// Hashes the full blocks of `tokens` (a trailing partial block is not hashed).
// Errors: block_tokens == 0 (invalid_argument); no tokens (empty_input).
// Fewer tokens than one block yields an empty list, not an error.
expected<std::vector<block_hash>> hash_blocks(const uint32_t* tokens,
                                              size_t count,
                                              uint32_t block_tokens,
                                              std::string_view salt = {});

inline expected<std::vector<block_hash>> hash_blocks(
    const std::vector<uint32_t>& tokens, uint32_t block_tokens,
    std::string_view salt = {}) {
  return hash_blocks(tokens.data(), tokens.size(), block_tokens, salt);
}

// Like hash_blocks, for blocks that continue a chain whose last block has
// sequence hash `parent_seq`: what an engine reports when it caches the
// blocks after a cached prefix. Same errors.
expected<std::vector<block_hash>> hash_blocks_after(uint64_t parent_seq,
                                                    const uint32_t* tokens,
                                                    size_t count,
                                                    uint32_t block_tokens,
                                                    std::string_view salt = {});

// Bytes of UTF-8 text per token, for requests that carry text and no
// token ids: about four in English with the common BPE vocabularies.
inline constexpr uint32_t text_bytes_per_token = 4;

// An approximate chain for a prompt known only as text: its UTF-8 bytes in
// chunks of block_tokens * text_bytes_per_token, each chunk a block hashed
// and chained as token blocks are (a trailing partial chunk is not hashed).
// These hashes never equal token-block hashes: they size a request and let
// requests with the same text prefix meet, nothing more.
// Errors: block_tokens == 0 (invalid_argument); empty text (empty_input).
expected<std::vector<uint64_t>> hash_text_blocks(std::string_view text,
                                                 uint32_t block_tokens);

}  // namespace kvmesh
