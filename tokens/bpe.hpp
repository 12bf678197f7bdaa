// The byte-level BPE model of a tokenizer.json: a pre-token's bytes to ids,
// merging pairs by rank exactly as HF tokenizers' BPE does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace kvmesh {

// Byte-level BPE (GPT-2's alphabet: each byte is one printable character in
// the vocabulary's strings). The model is kept over raw bytes: the 256
// one-byte symbols' ids, a rank table over pairs of ids, and for
// ignore_merges the vocabulary keyed by the bytes a token stands for.
class bpe_model {
 public:
  // `vocab`: token strings as tokenizer.json writes them (byte-level
  // characters) and their ids. `merges`: pairs in rank order (rank = index;
  // a pair listed twice takes its last rank, as HF's map does). Errors: a
  // byte without its one-character token, a merge naming a token outside
  // the vocabulary, two tokens with one id.
  static expected<bpe_model> build(
      const std::vector<std::pair<std::string, uint32_t>>& vocab,
      const std::vector<std::pair<std::string, std::string>>& merges,
      bool ignore_merges);

  // Appends the ids of one pre-token, given as the bytes it stands for.
  void encode(std::string_view bytes, std::vector<uint32_t>& out) const;

  size_t merge_count() const { return merge_count_; }
  bool ignore_merges() const { return ignore_merges_; }

  // GPT-2's byte-to-character map: the UTF-8 of byte b's character.
  static std::string byte_char(uint8_t b);
  // The bytes a byte-level token string stands for; false when a character
  // of it is not one of the 256.
  static bool decode_byte_level(std::string_view token, std::string& bytes);

 private:
  struct pair_slot {
    uint64_t key;  // (left id << 32) | right id; kEmpty when free
    uint32_t rank;
    uint32_t id;  // the merged token's
  };
  struct bytes_slot {
    uint32_t offset;  // into arena_
    uint32_t length;
    uint32_t id;
    uint32_t used;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  void put_pair(uint32_t a, uint32_t b, uint32_t rank, uint32_t id);
  const pair_slot* find_pair(uint32_t a, uint32_t b) const {
    const uint64_t key = (uint64_t{a} << 32) | b;
    size_t i = (key * 0x9E3779B97F4A7C15ull) >> pair_shift_;
    for (;;) {
      const pair_slot& s = pairs_[i];
      if (s.key == key) return &s;
      if (s.key == kEmpty) return nullptr;
      i = (i + 1) & pair_mask_;
    }
  }
  void put_bytes(std::string_view bytes, uint32_t id);
  const bytes_slot* find_bytes(std::string_view bytes) const;
  void merge_short(const uint8_t* b, size_t n,
                   std::vector<uint32_t>& out) const;
  void merge_long(const uint8_t* b, size_t n, std::vector<uint32_t>& out) const;

  uint32_t byte_id_[256] = {};
  std::vector<pair_slot> pairs_;
  size_t pair_mask_ = 0;
  unsigned pair_shift_ = 64;
  std::vector<bytes_slot> bytes_;
  size_t bytes_mask_ = 0;
  std::string arena_;
  size_t merge_count_ = 0;
  bool ignore_merges_ = false;
};

}  // namespace kvmesh
