// Block hash -> holders by tier, maintained from KV events.
#include "core/block_index.hpp"

#include <algorithm>

namespace kvmesh {

void block_index::release(uint32_t s) {
  map_.erase(slots_[s].hash);
  slots_[s].used = false;
  slots_[s].holders.clear();
  free_.push_back(s);
}

void block_index::apply(uint32_t worker, const cache_event& e) {
  uint32_t s = map_.find(e.hash);
  if (e.kind == cache_event::stored) {
    if (s == block_map::npos) {
      if (!free_.empty()) {
        s = free_.back();
        free_.pop_back();
      } else {
        s = static_cast<uint32_t>(slots_.size());
        slots_.emplace_back();
      }
      slots_[s].hash = e.hash;
      slots_[s].used = true;
      map_.put(e.hash, s);
    }
    auto& hs = slots_[s].holders;
    for (auto& h : hs) {
      if (h.worker == worker) {
        h.where = e.where;
        return;
      }
    }
    hs.push_back(holder{worker, e.where});
    return;
  }
  if (s == block_map::npos) return;
  auto& hs = slots_[s].holders;
  for (size_t i = 0; i < hs.size(); ++i) {
    if (hs[i].worker == worker && hs[i].where == e.where) {
      hs[i] = hs.back();
      hs.pop_back();
      break;
    }
  }
  if (hs.empty()) release(s);
}

void block_index::drop_worker(uint32_t worker) {
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    if (!slots_[s].used) continue;
    auto& hs = slots_[s].holders;
    hs.erase(
        std::remove_if(hs.begin(), hs.end(),
                       [&](const holder& h) { return h.worker == worker; }),
        hs.end());
    if (hs.empty()) release(s);
  }
}

const std::vector<block_index::holder>* block_index::holders(
    uint64_t hash) const {
  const uint32_t s = map_.find(hash);
  return s == block_map::npos ? nullptr : &slots_[s].holders;
}

void block_index::match(const uint64_t* chain, size_t n, size_t workers,
                        tier_match* out) const {
  // depth[w] is how far w's match has got; a holder extends it only if it is
  // exactly at this block, so a gap ends w's match for good.
  depth_.assign(workers, 0);
  for (size_t w = 0; w < workers; ++w)
    out[w] = tier_match{};
  for (size_t i = 0; i < n; ++i) {
    const uint32_t s = map_.find(chain[i]);
    if (s == block_map::npos) return;
    bool any = false;
    for (const holder& h : slots_[s].holders) {
      if (h.worker >= workers || depth_[h.worker] != i) continue;
      depth_[h.worker] = static_cast<uint32_t>(i + 1);
      any = true;
      out[h.worker].add(h.where);
    }
    if (!any) return;
  }
}

}  // namespace kvmesh
