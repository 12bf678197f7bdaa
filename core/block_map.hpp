// An open-addressing hash map from 64-bit block hash to a 32-bit index and
// one byte of metadata, the lookup structure on the bid path (no allocation
// per lookup; one cache line touched per hit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvmesh {

// Linear probing at load factor <= 1/2 with backward-shift deletion, so there
// are no tombstones and probe chains stay short under churn. Keys are mixed by
// Fibonacci hashing: trace block ids are small consecutive integers, and
// content hashes are already uniform, so one multiply suits both.
class block_map {
 public:
  static constexpr uint32_t npos = UINT32_MAX;

  block_map() { rehash(16); }

  size_t size() const { return size_; }

  uint32_t find(uint64_t key) const {
    const slot* s = lookup(key);
    return s ? s->val : npos;
  }

  // Like find, and also yields the key's metadata byte.
  uint32_t find(uint64_t key, uint8_t* meta) const {
    const slot* s = lookup(key);
    if (!s) return npos;
    *meta = s->meta;
    return s->val;
  }

  // Sets the metadata byte of a present key.
  void set_meta(uint64_t key, uint8_t meta) {
    if (slot* s = const_cast<slot*>(lookup(key))) s->meta = meta;
  }

  // Hints that `key` will be looked up soon (walks of a known chain).
  void prefetch(uint64_t key) const { __builtin_prefetch(&slots_[home(key)]); }

  // Inserts or overwrites. `val` must not be npos.
  void put(uint64_t key, uint32_t val, uint8_t meta = 0) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      slot& s = slots_[i];
      if (s.val == npos) {
        s = slot{key, val, meta};
        ++size_;
        return;
      }
      if (s.key == key) {
        s.val = val;
        s.meta = meta;
        return;
      }
    }
  }

  // Removes `key`; returns whether it was present.
  bool erase(uint64_t key) {
    size_t i = home(key);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].val == npos) return false;
      if (slots_[i].key == key) break;
    }
    // Shift later members of the probe run back into the hole when their home
    // does not lie cyclically in (hole, j].
    for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      if (slots_[j].val == npos) break;
      const size_t h = home(slots_[j].key);
      if (((j - h) & mask_) >= ((j - i) & mask_)) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].val = npos;
    --size_;
    return true;
  }

  void clear() {
    for (auto& s : slots_)
      s.val = npos;
    size_ = 0;
  }

  // Pre-sizes for `n` keys so that filling up to n never rehashes.
  void reserve(size_t n) {
    size_t cap = slots_.size();
    while (cap < n * 2)
      cap *= 2;
    if (cap != slots_.size()) rehash(cap);
  }

 private:
  struct slot {
    uint64_t key = 0;
    uint32_t val = npos;
    uint8_t meta = 0;  // lives in what would be padding
  };

  const slot* lookup(uint64_t key) const {
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.val == npos) return nullptr;
      if (s.key == key) return &s;
    }
  }

  size_t home(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }

  void rehash(size_t cap) {
    std::vector<slot> old;
    old.swap(slots_);
    slots_.assign(cap, slot{});
    mask_ = cap - 1;
    shift_ = 64;
    for (size_t c = cap; c > 1; c >>= 1)
      --shift_;
    size_ = 0;
    for (const slot& s : old)
      if (s.val != npos) put(s.key, s.val, s.meta);
  }

  std::vector<slot> slots_;
  size_t mask_ = 0;
  unsigned shift_ = 64;
  size_t size_ = 0;
};

}  // namespace kvmesh
