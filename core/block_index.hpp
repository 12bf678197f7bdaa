// The block map an index (or a router following KV events) keeps: block
// hash -> the workers holding it and in which tier.
#pragma once

#include <cstdint>
#include <vector>

#include "core/block_map.hpp"
#include "core/tiered_cache.hpp"

namespace kvmesh {

// Learned from KV events, so it is only as fresh as they are. A worker holds
// a block in one tier at a time, as its cache does.
class block_index {
 public:
  struct holder {
    uint32_t worker;
    tier where;
  };

  // Applies one KV event of `worker`. A removal names the tier it left; one
  // that does not match what is known is ignored (a newer store won).
  void apply(uint32_t worker, const cache_event& e);
  // Forgets every block of `worker` (it left, or cleared its cache).
  void drop_worker(uint32_t worker);

  // For each worker w < workers, the match of `chain` on w (as the worker's
  // own cache would compute it: best tier per block, up to the first block
  // w does not hold), into out[w]. active_overlap stays 0: KV events do not
  // say which blocks are in use.
  void match(const uint64_t* chain, size_t n, size_t workers,
             tier_match* out) const;

  size_t blocks() const { return map_.size(); }
  const std::vector<holder>* holders(uint64_t hash) const;

 private:
  struct slot {
    uint64_t hash = 0;
    bool used = false;
    std::vector<holder> holders;
  };
  void release(uint32_t s);

  block_map map_;
  std::vector<slot> slots_;
  std::vector<uint32_t> free_;
  mutable std::vector<uint32_t> depth_;  // scratch for match()
};

}  // namespace kvmesh
