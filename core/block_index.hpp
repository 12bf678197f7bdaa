// The block map an index (or a router following KV events) keeps: block
// hash -> the workers holding it and in which tier.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tiered_cache.hpp"

namespace kvmesh {

// Learned from KV events, so it is only as fresh as they are. A worker holds
// a block in one tier at a time, as its cache does.
//
// An index shard keeps tens of millions of blocks, almost all held by one or
// two workers, so the layout is built for that case: one open-addressing
// table of 16-byte slots (the hash and two holders packed as worker << 2 |
// tier), and a side pool only for blocks with three or more holders. A
// lookup touches one slot and, for the common case, no other memory.
class block_index {
 public:
  struct holder {
    uint32_t worker;
    tier where;
  };

  // A holder packs its worker and tier into 32 bits, so worker ids must be
  // below this (and tiers must be real tiers).
  static constexpr uint32_t max_workers = uint32_t{1} << 30;
  static bool valid(uint32_t worker, const cache_event& e) {
    return worker < max_workers && static_cast<uint8_t>(e.where) < tier_count &&
           (e.kind == cache_event::stored || e.kind == cache_event::removed);
  }

  block_index();

  // Applies one KV event of `worker`; returns whether the index changed. A
  // removal names the tier it left; one that does not match what is known
  // is ignored (a newer store won). An event that is not valid() is
  // ignored too: it cannot be represented, and the index must not guess.
  bool apply(uint32_t worker, const cache_event& e);
  // Forgets every block of `worker` (it left, or cleared its cache); returns
  // how many (block, holder) entries went.
  size_t drop_worker(uint32_t worker);

  // For each worker w < workers, the match of `chain` on w (as the worker's
  // own cache would compute it: best tier per block, up to the first block
  // w does not hold), into out[w]. active_overlap stays 0: KV events do not
  // say which blocks are in use. Allocates nothing and writes only `out`,
  // so concurrent readers are safe.
  void match(const uint64_t* chain, size_t n, size_t workers,
             tier_match* out) const;

  size_t blocks() const { return size_; }
  // (block, holder) pairs.
  size_t entries() const { return entries_; }
  // Where `worker` holds `hash`, or false if it does not.
  bool find(uint64_t hash, uint32_t worker, tier* where) const;
  // A copy of the holders of `hash` (empty if none); for tests and admin
  // queries, not the hot path (use for_each_holder there).
  std::vector<holder> holders(uint64_t hash) const;

  // Calls f(worker, tier) for each holder of `hash`.
  template <class F>
  void for_each_holder(uint64_t hash, F&& f) const {
    if (const slot* s = lookup(hash))
      visit(*s, [&](uint32_t p) { f(worker_of(p), tier_of(p)); });
  }
  // Calls f(hash, worker, tier) for every entry, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (const slot& s : slots_) {
      if (s.h[0] == none) continue;
      visit(s, [&](uint32_t p) { f(s.hash, worker_of(p), tier_of(p)); });
    }
  }

  // Hints that `hash` will be applied or looked up soon: a bulk load
  // prefetches a run of hashes so that their cache misses overlap.
  void prefetch(uint64_t hash) const {
    __builtin_prefetch(&slots_[home(hash)]);
  }

  // Pre-sizes the table for `n` blocks.
  void reserve(size_t n);
  void clear();
  // Heap bytes held by the index (table, overflow pool and its lists).
  size_t memory_bytes() const;

 private:
  // h[0] == none: a free slot. h[1] == none: a single holder. h[0] with tier
  // bits 3 (no real tier) and not none: (h[0] >> 2) indexes spill_, which
  // then holds every holder of the block.
  static constexpr uint32_t none = UINT32_MAX;
  struct slot {
    uint64_t hash;
    uint32_t h[2];
  };
  static_assert(sizeof(slot) == 16, "a slot must stay 16 bytes");

  static uint32_t pack(uint32_t worker, tier t) {
    return worker << 2 | static_cast<uint32_t>(t);
  }
  static uint32_t worker_of(uint32_t p) { return p >> 2; }
  static tier tier_of(uint32_t p) { return static_cast<tier>(p & 3); }
  static bool spilled(uint32_t h0) { return (h0 & 3) == 3 && h0 != none; }

  template <class F>
  void visit(const slot& s, F&& f) const {
    if (spilled(s.h[0])) {
      for (uint32_t p : spill_[s.h[0] >> 2])
        f(p);
      return;
    }
    f(s.h[0]);
    if (s.h[1] != none) f(s.h[1]);
  }

  size_t home(uint64_t hash) const {
    return static_cast<size_t>((hash * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  const slot* lookup(uint64_t hash) const {
    for (size_t i = home(hash);; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.h[0] == none) return nullptr;
      if (s.hash == hash) return &s;
    }
  }
  size_t insert_slot(uint64_t hash);
  void erase_at(size_t i);
  void rehash(size_t cap);
  bool add(slot& s, uint32_t worker, tier t);
  // Removes the holder of `worker` if its tier is `t` (any tier if t is
  // null); returns whether one went.
  bool remove(slot& s, uint32_t worker, const tier* t);
  uint32_t new_spill();

  std::vector<slot> slots_;
  size_t mask_ = 0;
  unsigned shift_ = 64;
  size_t size_ = 0;
  size_t entries_ = 0;
  std::vector<std::vector<uint32_t>> spill_;
  std::vector<uint32_t> spill_free_;
};

}  // namespace kvmesh
