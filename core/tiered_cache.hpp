// A worker's KV cache in tiers (GPU, host, disk): block hash sets with
// capacities, LRU order, offload on eviction and reference counts for blocks
// that running sequences hold.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/block_map.hpp"
#include "core/error.hpp"

namespace kvmesh {

enum class tier : uint8_t { gpu = 0, host = 1, disk = 2 };
inline constexpr size_t tier_count = 3;
const char* to_string(tier t);

// How deep a chain of block hashes is cached, per tier: walking the chain,
// each block counts in the tier that holds it; the walk stops at the first
// block that no tier holds.
struct tier_match {
  uint32_t gpu = 0;
  uint32_t host = 0;
  uint32_t disk = 0;
  uint32_t active_overlap = 0;  // matched GPU blocks held by running sequences
  uint32_t total() const { return gpu + host + disk; }
  void add(tier t) {
    (t == tier::gpu ? gpu : t == tier::host ? host : disk) += 1;
  }
};

// What a real engine reports of its cache: a block appeared in or left a tier.
struct cache_event {
  enum kind_t : uint8_t { stored, removed } kind = stored;
  tier where = tier::gpu;
  uint64_t hash = 0;
  // The first block of the chain `hash` was computed in: index shards are
  // chosen by it, so that one prefix query touches one shard.
  uint64_t root = 0;
};

// Drops from `events` (one worker's, in order) each event that a later
// `stored` of the same block makes moot: a store sets the block's tier
// whatever came before it, so a tier move (removed from one tier, stored in
// the next, the moves it caused below in between) travels as one event. An
// index that applies what is left ends where the whole list would have
// left it, with a third fewer events under offload churn. Looks a few
// events ahead only: enough for one eviction's cascade through the tiers.
void drop_superseded(std::vector<cache_event>& events);

struct cache_config {
  uint64_t gpu_blocks = 0;   // must be > 0
  uint64_t host_blocks = 0;  // 0: no host tier
  uint64_t disk_blocks = 0;  // 0: no disk tier
};

// Each block lives in exactly one tier. GPU capacity is shared by cached
// blocks (held or pooled) and anonymous blocks (allocated to a running
// sequence but not, or not yet, addressable by hash). Only pooled GPU blocks
// (reference count 0) can be evicted; eviction offloads GPU -> host -> disk
// where those tiers exist, else drops the block. Every change is appended to
// the event sink, if one is set.
class tiered_cache {
 public:
  static expected<tiered_cache> make(const cache_config& cfg);

  void set_event_sink(std::vector<cache_event>* sink) { sink_ = sink; }

  // --- queries -----------------------------------------------------------
  tier_match match(const uint64_t* chain, size_t n) const;
  tier_match match(const std::vector<uint64_t>& chain) const {
    return match(chain.data(), chain.size());
  }
  // Where `hash` is, or false if no tier holds it.
  bool find(uint64_t hash, tier* where) const;
  uint64_t size(tier t) const { return used_[idx(t)]; }
  uint64_t capacity(tier t) const { return cap_[idx(t)]; }
  // GPU blocks held by running sequences (cached and anonymous).
  uint64_t active() const { return held_ + anon_; }
  uint64_t anonymous() const { return anon_; }
  // GPU blocks that could be allocated now (free or evictable).
  uint64_t gpu_available() const { return cap_[0] - used_[0] + gpu_lru_.count; }

  // --- a plain tiered set (mirroring an engine's reported state) ----------
  // Places `hash` in tier `t` as most recently used (moving it if another
  // tier holds it). Returns false if tier t has no room that can be freed.
  bool store(uint64_t hash, tier t, uint64_t root = 0);
  // Removes `hash` from whatever tier holds it (a no-op for held blocks).
  bool remove(uint64_t hash);
  // Marks `hash` most recently used in its tier.
  void touch(uint64_t hash);
  // Drops every unheld block (an engine's "all blocks cleared").
  void clear();

  // --- reference counting for running sequences --------------------------
  // Takes one reference to a cached block; a host or disk block is loaded
  // into GPU first. Returns the tier it was found in; false if absent or if
  // no GPU room could be freed.
  bool acquire(uint64_t hash, tier* found);
  // Drops one reference; at zero the block joins the GPU pool as MRU.
  void release(uint64_t hash);
  // Allocates `n` anonymous GPU blocks (all or none).
  bool allocate(uint64_t n);
  void free_anonymous(uint64_t n);
  // Turns one anonymous block into the cached, held block `hash` (the block
  // was just computed). If a tier already holds `hash`, that copy is reused
  // and the anonymous block freed. Never fails: the block already has room.
  void commit(uint64_t hash, uint64_t root = 0);

  // Calls f(hash, tier, root) for every block held, in no particular order:
  // what a worker re-announces to an index shard that lost track of it.
  template <class F>
  void for_each(F&& f) const {
    std::vector<bool> gone(entries_.size(), false);
    for (uint32_t e : free_)
      gone[e] = true;
    for (uint32_t e = 0; e < entries_.size(); ++e)
      if (!gone[e]) f(entries_[e].hash, entries_[e].where, entries_[e].root);
  }

 private:
  static constexpr uint32_t nil = UINT32_MAX;
  static size_t idx(tier t) { return static_cast<size_t>(t); }

  struct entry {
    uint64_t hash = 0;
    uint64_t root = 0;
    uint32_t prev = nil;
    uint32_t next = nil;
    uint32_t refs = 0;
    tier where = tier::gpu;
  };

  // Intrusive LRU list over entries: head is most recent, tail least.
  struct lru {
    uint32_t head = nil;
    uint32_t tail = nil;
    uint64_t count = 0;
  };

  explicit tiered_cache(const cache_config& cfg);

  lru& list(tier t) { return t == tier::gpu ? gpu_lru_ : lower_[idx(t) - 1]; }
  void link_front(lru& l, uint32_t e);
  void unlink(lru& l, uint32_t e);
  uint32_t new_entry(uint64_t hash, tier t);
  // The map keeps each block's tier and held bit beside its key so that a
  // chain walk touches one cache line per block; call after changing either.
  static uint8_t meta_of(const entry& en) {
    return static_cast<uint8_t>(static_cast<uint8_t>(en.where) |
                                (en.refs > 0 ? 4 : 0));
  }
  void sync(uint32_t e) {
    map_.set_meta(entries_[e].hash, meta_of(entries_[e]));
  }
  void drop_entry(uint32_t e);
  // Makes room for one more block in tier t by evicting its LRU block
  // downwards. Returns false if nothing evictable.
  bool make_room(tier t);
  void emit(cache_event::kind_t k, tier t, uint32_t e) {
    if (sink_)
      sink_->push_back(cache_event{k, t, entries_[e].hash, entries_[e].root});
  }

  std::array<uint64_t, tier_count> cap_{};
  std::array<uint64_t, tier_count> used_{};  // gpu: entries + anonymous
  uint64_t held_ = 0;                        // GPU entries with refs > 0
  uint64_t anon_ = 0;
  lru gpu_lru_;               // GPU entries with refs == 0 (the pool)
  std::array<lru, 2> lower_;  // host, disk
  std::vector<entry> entries_;
  std::vector<uint32_t> free_;
  block_map map_;
  std::vector<cache_event>* sink_ = nullptr;
};

}  // namespace kvmesh
