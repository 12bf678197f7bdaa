// A real engine's KV cache as kvmesh sees it: the engine's events applied
// to kvmesh's block hashes, recomputed from the token ids, per tier.
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "core/tiered_cache.hpp"
#include "engines/kv_events.hpp"

namespace kvmesh {

// Why an engine event (or part of one) was not applied.
enum class mirror_fault : uint8_t {
  block_size,      // stored blocks of another size than --block-tokens
  token_count,     // token_ids that do not fill the stored blocks exactly
  unknown_parent,  // stored after a parent block the mirror does not know
  unknown_medium,  // a medium naming no tier (applied as gpu)
  unknown_block,   // a removal of a block the mirror does not hold there
  other_group,     // an event of a KV cache group other than 0 (ignored)
};
inline constexpr size_t mirror_fault_count = 6;
const char* to_string(mirror_fault f);

// The engine's blocks, keyed by its own hashes, each with the kvmesh chain
// hash its tokens give and the tiers it is in. A block the engine keeps in
// several tiers at once (offloaded to CPU and still on the GPU) counts in
// each; kvmesh's matching sees it in its best tier, as the tiered cache of
// a simulated worker would hold it.
class kv_mirror {
 public:
  // Errors: block_tokens == 0.
  static expected<kv_mirror> make(uint32_t block_tokens);

  // Applies one event or a batch in order. What changes in kvmesh's view
  // (a block entering or leaving its best tier) is appended to `out` when
  // set: the index shards' KV events.
  void apply(const engine_kv_event& e, std::vector<cache_event>* out);
  void apply(const engine_kv_batch& b, std::vector<cache_event>* out);
  // Forgets every block: the engine restarted or events were lost.
  void clear(std::vector<cache_event>* out);

  // The engine's blocks in tier t (a block in two tiers counts in both).
  uint64_t blocks(tier t) const { return per_tier_[static_cast<size_t>(t)]; }
  // Distinct engine blocks, whatever their tiers.
  size_t engine_blocks() const { return engine_.size(); }
  // kvmesh's blocks, each in its best tier: what bids match against.
  const tiered_cache& cache() const { return cache_; }
  uint32_t block_tokens() const { return block_tokens_; }

  uint64_t faults(mirror_fault f) const {
    return faults_[static_cast<size_t>(f)];
  }
  uint64_t faults_total() const;
  // Counts one fault; true when it is the first of its kind (to log once).
  bool fault(mirror_fault f);
  // The kinds whose first fault has not been collected yet; collecting
  // clears them.
  std::vector<mirror_fault> take_new_faults();

 private:
  struct engine_block {
    uint64_t seq = 0;   // kvmesh's chain hash of its tokens
    uint64_t root = 0;  // the first block of that chain (the shard key)
    uint8_t tiers = 0;  // bit t: the engine holds it in tier t
  };
  struct mesh_block {
    std::array<uint32_t, tier_count> holders{};  // engine blocks per tier
    uint64_t root = 0;
  };

  kv_mirror(uint32_t block_tokens, tiered_cache cache);
  void store(const engine_kv_event& e, tier t);
  void remove(const engine_kv_event& e, tier t);
  void add(uint64_t key, uint64_t seq, uint64_t root, tier t);
  void drop(uint64_t key, engine_block& b, tier t);
  // Puts kvmesh block `seq` in the cache at its best tier, or removes it.
  void place(uint64_t seq);

  uint32_t block_tokens_;
  tiered_cache cache_;
  std::unordered_map<uint64_t, engine_block> engine_;
  std::unordered_map<uint64_t, mesh_block> mesh_;
  std::array<uint64_t, tier_count> per_tier_{};
  std::array<uint64_t, mirror_fault_count> faults_{};
  uint32_t unreported_ = 0;  // bit f: first fault of kind f not collected
};

// Follows one publisher's sequence numbers. A ZMQ SUB socket sees one
// publisher's messages in increasing order; a number at or below the last
// one seen there means the publisher started over (the engine restarted,
// its cache empty).
class kv_sequence {
 public:
  enum verdict : uint8_t {
    first,      // nothing seen yet
    next,       // the expected one
    gap,        // messages expected() .. seq - 1 were lost
    duplicate,  // already applied (from a replay)
    restart,    // the publisher started over
  };

  verdict observe(uint64_t seq) const {
    if (!started_) return first;
    if (has_sub_ && seq <= last_sub_) return restart;
    if (seq < expected_) return duplicate;
    return seq == expected_ ? next : gap;
  }
  // Message `seq` was applied; from_sub: it came on the SUB socket (not
  // from a replay).
  void applied(uint64_t seq, bool from_sub) {
    started_ = true;
    if (seq + 1 > expected_) expected_ = seq + 1;
    if (from_sub && (!has_sub_ || seq > last_sub_)) last_sub_ = seq;
    has_sub_ = has_sub_ || from_sub;
  }
  // Forgets what was seen (the publisher started over).
  void reset() { *this = kv_sequence{}; }
  uint64_t expected() const { return expected_; }
  bool started() const { return started_; }

 private:
  bool started_ = false;
  bool has_sub_ = false;
  uint64_t expected_ = 0;
  uint64_t last_sub_ = 0;
};

}  // namespace kvmesh
