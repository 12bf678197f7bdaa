// The llmd policy: llm-d's router (llm-d/llm-d-router v0.10.0, August 2026,
// the EPP that left gateway-api-inference-extension) at its default
// profile (pkg/epp/config/loader/defaults.go and the Helm chart):
// queue-scorer 2, kv-cache-utilization-scorer 2, prefix-cache-scorer 3,
// max-score-picker (ties at random).
//
// The approximate prefix producer, autoTune on:
//  - block size: the engine's (CacheBlockSize metric), clamped to at least
//    64 tokens (minBlockSizeTokens); the last partial chunk is hashed too;
//  - at most maxPrefixTokensToMatch = 131072 tokens of the prompt, i.e.
//    131072 / block size blocks (2048 at 64 tokens);
//  - per server an LRU of the hashes sent there, of the pod's CacheNumBlocks
//    entries (31250 when the engine does not say);
//  - the match walks the prompt's hashes and stops at the first that no
//    server holds; each server scores the run's hashes it holds / the
//    prompt's hashes (matchLengthWeight 0).
// queue: (max - q) / (max - min) of the waiting queues (1 when all equal);
// kv: 1 - GPU KV usage. The weighted sum, not normalised, highest wins.
#include "core/policy.hpp"

#include <algorithm>
#include <limits>

#include "core/policies/common.hpp"
#include "core/routed_index.hpp"

namespace kvmesh {
namespace policies {
namespace {

class llmd_policy final : public router_policy {
 public:
  explicit llmd_policy(const policy_config& c)
      : cfg_(c),
        geom_(llmd_geometry_for(c.block_tokens, c.gpu_blocks)),
        rng_(c.seed),
        tree_(*routed_index::make(c.workers, geom_.lru_entries)),
        held_(c.workers),
        score_(c.workers) {}
  uint32_t route(const route_request& r, const fleet_view& v) override {
    // The prompt's hashes in llm-d's blocks: chunk k ends at kvmesh block
    // (k + 1) * group - 1 (or the prompt's last block), whose chained id
    // names the chunk and all before it.
    chunks_.clear();
    for (uint32_t k = 0; k < geom_.max_blocks; ++k) {
      const uint64_t first = uint64_t{k} * geom_.group;
      if (first >= r.n) break;
      chunks_.push_back(
          r.blocks[std::min<uint64_t>(first + geom_.group, r.n) - 1]);
    }
    std::fill(held_.begin(), held_.end(), 0);
    for (uint64_t h : chunks_) {
      bool any = false;
      for (uint32_t w = 0; w < cfg_.workers; ++w)
        if (tree_.holds(w, h)) ++held_[w], any = true;
      if (!any) break;
    }
    uint32_t qmin = std::numeric_limits<uint32_t>::max(), qmax = 0;
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      qmin = std::min(qmin, v.loads[w].waiting);
      qmax = std::max(qmax, v.loads[w].waiting);
    }
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      llmd_inputs in;
      in.matched_blocks = held_[w];
      in.prompt_blocks = static_cast<uint32_t>(chunks_.size());
      in.waiting = v.loads[w].waiting;
      in.min_waiting = qmin;
      in.max_waiting = qmax;
      in.kv_usage = v.loads[w].kv_usage;
      score_[w] = llmd_score(in);
    }
    const uint32_t w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
      return compare(score_[b], score_[a]);
    });
    tree_.insert(w, chunks_.data(), chunks_.size());
    return w;
  }

 private:
  policy_config cfg_;
  llmd_geometry geom_;
  uint64_t rng_;
  routed_index tree_;
  std::vector<uint32_t> held_;
  std::vector<uint64_t> chunks_;
  std::vector<double> score_;
};

}  // namespace

std::unique_ptr<router_policy> make_llmd(const policy_config& c) {
  return std::make_unique<llmd_policy>(c);
}

}  // namespace policies

llmd_geometry llmd_geometry_for(uint32_t engine_block_tokens,
                                uint64_t engine_blocks) {
  constexpr uint32_t min_block_tokens = 64;
  constexpr uint32_t max_prefix_tokens = 131072;
  constexpr uint64_t default_lru = 31250;
  llmd_geometry g;
  const uint32_t bt = std::max<uint32_t>(1, engine_block_tokens);
  g.group = (min_block_tokens + bt - 1) / bt;  // kvmesh blocks a chunk
  g.block_tokens = std::max(min_block_tokens, bt);
  if (bt < min_block_tokens) g.block_tokens = g.group * bt;
  g.max_blocks = std::max<uint32_t>(1, max_prefix_tokens / g.block_tokens);
  g.lru_entries = engine_blocks > 0 ? engine_blocks : default_lru;
  return g;
}

double llmd_score(const llmd_inputs& in) {
  const double prefix =
      in.prompt_blocks
          ? static_cast<double>(in.matched_blocks) / in.prompt_blocks
          : 0;
  const double kv = 1.0 - std::clamp(in.kv_usage, 0.0, 1.0);
  const double queue =
      in.max_waiting == in.min_waiting
          ? 1.0
          : static_cast<double>(in.max_waiting - in.waiting) /
                static_cast<double>(in.max_waiting - in.min_waiting);
  return 3 * std::clamp(prefix, 0.0, 1.0) + 2 * kv +
         2 * std::clamp(queue, 0.0, 1.0);
}

}  // namespace kvmesh
