// Per-worker LRU prefix sets of routed prompts.
#include "core/routed_index.hpp"

namespace kvmesh {

expected<routed_index> routed_index::make(size_t workers,
                                          uint64_t blocks_per_worker) {
  if (workers == 0)
    return make_error(ec::invalid_argument, "a router needs >= 1 worker");
  routed_index r;
  r.sets_.reserve(workers);
  for (size_t w = 0; w < workers; ++w) {
    auto set = tiered_cache::make({blocks_per_worker, 0, 0});
    if (!set) return set.err();
    r.sets_.push_back(std::move(*set));
  }
  return r;
}

void routed_index::insert(uint32_t worker, const uint64_t* chain, size_t n) {
  tiered_cache& set = sets_[worker];
  for (size_t i = n; i-- > 0;)
    set.store(chain[i], tier::gpu);
}

}  // namespace kvmesh
