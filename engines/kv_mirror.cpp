// The mirror of an engine's cache: engine hashes to kvmesh chain hashes,
// tiers per block, and the best tier of each kvmesh block in a tiered cache.
#include "engines/kv_mirror.hpp"

#include "core/block_hash.hpp"

namespace kvmesh {

const char* to_string(mirror_fault f) {
  switch (f) {
    case mirror_fault::block_size:
      return "block_size";
    case mirror_fault::token_count:
      return "token_count";
    case mirror_fault::unknown_parent:
      return "unknown_parent";
    case mirror_fault::unknown_medium:
      return "unknown_medium";
    case mirror_fault::unknown_block:
      return "unknown_block";
    case mirror_fault::other_group:
      return "other_group";
  }
  return "unknown";
}

namespace {

// The cache never evicts: the engine says what leaves. Its capacities are
// only bounds on the structure (tiered_cache refuses 2^31 and more).
constexpr uint64_t unbounded = (uint64_t{1} << 31) - 2;

}  // namespace

expected<kv_mirror> kv_mirror::make(uint32_t block_tokens) {
  if (block_tokens == 0)
    return make_error(ec::invalid_argument,
                      "block size must be at least 1 token");
  auto cache = tiered_cache::make({unbounded, unbounded, unbounded});
  if (!cache) return cache.err();
  return kv_mirror(block_tokens, std::move(*cache));
}

kv_mirror::kv_mirror(uint32_t block_tokens, tiered_cache cache)
    : block_tokens_(block_tokens), cache_(std::move(cache)) {}

uint64_t kv_mirror::faults_total() const {
  uint64_t t = 0;
  for (uint64_t x : faults_)
    t += x;
  return t;
}

bool kv_mirror::fault(mirror_fault f) {
  const size_t i = static_cast<size_t>(f);
  if (faults_[i]++ > 0) return false;
  unreported_ |= 1u << i;
  return true;
}

std::vector<mirror_fault> kv_mirror::take_new_faults() {
  std::vector<mirror_fault> out;
  for (size_t i = 0; i < mirror_fault_count; ++i)
    if (unreported_ & (1u << i)) out.push_back(static_cast<mirror_fault>(i));
  unreported_ = 0;
  return out;
}

void kv_mirror::apply(const engine_kv_batch& b, std::vector<cache_event>* out) {
  for (const auto& e : b.events)
    apply(e, out);
}

void kv_mirror::apply(const engine_kv_event& e, std::vector<cache_event>* out) {
  cache_.set_event_sink(out);
  if (e.kind == engine_kv_event::cleared) {
    clear(out);
    return;
  }
  // Hybrid models report every KV cache group's blocks; group 0 (full
  // attention) is the one whose blocks a prefix reuses.
  if (e.group != 0) {
    fault(mirror_fault::other_group);
    cache_.set_event_sink(nullptr);
    return;
  }
  tier t = tier::gpu;
  if (!tier_of_medium(e.medium, t)) fault(mirror_fault::unknown_medium);
  if (e.kind == engine_kv_event::stored)
    store(e, t);
  else
    remove(e, t);
  cache_.set_event_sink(nullptr);
}

void kv_mirror::clear(std::vector<cache_event>* out) {
  cache_.set_event_sink(out);
  cache_.clear();
  cache_.set_event_sink(nullptr);
  engine_.clear();
  mesh_.clear();
  per_tier_ = {};
}

void kv_mirror::store(const engine_kv_event& e, tier t) {
  if (e.block_size != block_tokens_) {
    fault(mirror_fault::block_size);
    return;
  }
  if (e.tokens.size() != e.hashes.size() * size_t{e.block_size}) {
    fault(mirror_fault::token_count);
    return;
  }
  if (e.hashes.empty()) return;
  uint64_t parent_seq = 0;
  uint64_t root = 0;
  if (e.has_parent) {
    auto it = engine_.find(e.parent);
    if (it == engine_.end()) {
      // The chain cannot be computed without the parent's: these blocks
      // would match nothing a router asks for.
      fault(mirror_fault::unknown_parent);
      return;
    }
    parent_seq = it->second.seq;
    root = it->second.root;
  }
  auto chain = e.has_parent ? hash_blocks_after(parent_seq, e.tokens.data(),
                                                e.tokens.size(), block_tokens_,
                                                e.lora_name)
                            : hash_blocks(e.tokens.data(), e.tokens.size(),
                                          block_tokens_, e.lora_name);
  if (!chain || chain->size() != e.hashes.size()) {
    fault(mirror_fault::token_count);
    return;
  }
  if (!e.has_parent) root = chain->front().seq;
  for (size_t i = 0; i < e.hashes.size(); ++i)
    add(e.hashes[i], (*chain)[i].seq, root, t);
}

void kv_mirror::add(uint64_t key, uint64_t seq, uint64_t root, tier t) {
  const uint8_t bit = static_cast<uint8_t>(1u << static_cast<size_t>(t));
  auto [it, fresh] = engine_.try_emplace(key);
  engine_block& b = it->second;
  if (!fresh && b.seq != seq) {
    // The engine reused a hash for other tokens (a collision of its hash,
    // or of ours for byte strings): the old block is gone everywhere.
    const uint8_t had = b.tiers;
    for (size_t i = 0; i < tier_count; ++i) {
      auto f = engine_.find(key);  // drop() erases it with its last tier
      if ((had & (1u << i)) && f != engine_.end())
        drop(key, f->second, static_cast<tier>(i));
    }
    it = engine_.try_emplace(key).first;
  }
  engine_block& cur = it->second;
  cur.seq = seq;
  cur.root = root;
  if (cur.tiers & bit) {
    cache_.touch(seq);
    return;
  }
  cur.tiers |= bit;
  ++per_tier_[static_cast<size_t>(t)];
  mesh_block& m = mesh_[seq];
  m.root = root;
  if (m.holders[static_cast<size_t>(t)]++ == 0) place(seq);
}

void kv_mirror::remove(const engine_kv_event& e, tier t) {
  for (uint64_t key : e.hashes) {
    auto it = engine_.find(key);
    if (it == engine_.end() ||
        !(it->second.tiers & (1u << static_cast<size_t>(t)))) {
      fault(mirror_fault::unknown_block);
      continue;
    }
    drop(key, it->second, t);
  }
}

// Takes engine block `key` out of tier t; erases it when no tier is left
// (which invalidates `b`).
void kv_mirror::drop(uint64_t key, engine_block& b, tier t) {
  const size_t ti = static_cast<size_t>(t);
  b.tiers &= static_cast<uint8_t>(~(1u << ti));
  --per_tier_[ti];
  const uint64_t seq = b.seq;
  if (b.tiers == 0) engine_.erase(key);
  auto m = mesh_.find(seq);
  if (m == mesh_.end()) return;
  if (--m->second.holders[ti] == 0) place(seq);
}

void kv_mirror::place(uint64_t seq) {
  auto m = mesh_.find(seq);
  int best = -1;
  if (m != mesh_.end())
    for (size_t i = 0; i < tier_count; ++i)
      if (m->second.holders[i] > 0) {
        best = static_cast<int>(i);
        break;
      }
  tier cur = tier::gpu;
  const bool cached = cache_.find(seq, &cur);
  if (best < 0) {
    if (cached) cache_.remove(seq);
    if (m != mesh_.end()) mesh_.erase(m);
    return;
  }
  const tier want = static_cast<tier>(best);
  if (cached && cur == want) return;
  // store() moves a block up but not down: take it out first.
  if (cached) cache_.remove(seq);
  cache_.store(seq, want, m->second.root);
}

}  // namespace kvmesh
