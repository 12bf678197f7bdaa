// A router's own record of the prompts it sent to each worker: the
// approximate prefix trees that SGLang, llm-d and Preble routers keep.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "core/tiered_cache.hpp"

namespace kvmesh {

// Per worker, an LRU set of prefix block ids with a capacity. Block ids are
// chained (an id names its whole prefix), so a set of ids is a prefix tree.
// Inserting a chain touches its blocks deepest first, so a prefix is always
// more recent than its extensions and eviction trims leaves, as a tree's
// LRU eviction does.
class routed_index {
 public:
  static constexpr uint64_t unbounded = uint64_t{1} << 30;

  static expected<routed_index> make(size_t workers,
                                     uint64_t blocks_per_worker);

  void insert(uint32_t worker, const uint64_t* chain, size_t n);
  // How many leading blocks of `chain` were sent to `worker`.
  uint32_t match(uint32_t worker, const uint64_t* chain, size_t n) const {
    return sets_[worker].match(chain, n).gpu;
  }
  // Whether `hash` was sent to `worker` (and not evicted since).
  bool holds(uint32_t worker, uint64_t hash) const {
    tier t;
    return sets_[worker].find(hash, &t);
  }
  uint64_t size(uint32_t worker) const { return sets_[worker].size(tier::gpu); }
  size_t workers() const { return sets_.size(); }

 private:
  std::vector<tiered_cache> sets_;
};

}  // namespace kvmesh
