// Block hash -> holders by tier, maintained from KV events.
#include "core/block_index.hpp"

namespace kvmesh {

// Linear probing up to a load of 3/4 with backward-shift deletion (no
// tombstones under churn). 3/4 rather than the 1/2 of block_map because
// this table is the shard's whole memory: at 3/4, a miss still probes
// only a few 16-byte slots, mostly in one cache line.
namespace {
constexpr size_t max_load_num = 3;
constexpr size_t max_load_den = 4;
constexpr size_t min_capacity = 16;
}  // namespace

block_index::block_index() {
  rehash(min_capacity);
}

void block_index::clear() {
  slots_.clear();
  slots_.shrink_to_fit();
  spill_.clear();
  spill_.shrink_to_fit();
  spill_free_.clear();
  spill_free_.shrink_to_fit();
  size_ = 0;
  entries_ = 0;
  rehash(min_capacity);
}

void block_index::reserve(size_t n) {
  size_t cap = slots_.size();
  while (n * max_load_den > cap * max_load_num)
    cap *= 2;
  if (cap != slots_.size()) rehash(cap);
}

size_t block_index::memory_bytes() const {
  size_t b = slots_.capacity() * sizeof(slot) +
             spill_.capacity() * sizeof(spill_[0]) +
             spill_free_.capacity() * sizeof(uint32_t);
  for (const auto& v : spill_)
    b += v.capacity() * sizeof(uint32_t);
  return b;
}

void block_index::rehash(size_t cap) {
  std::vector<slot> old;
  old.swap(slots_);
  slots_.assign(cap, slot{0, {none, none}});
  mask_ = cap - 1;
  shift_ = 64;
  for (size_t c = cap; c > 1; c >>= 1)
    --shift_;
  for (const slot& s : old) {
    if (s.h[0] == none) continue;
    size_t i = home(s.hash);
    while (slots_[i].h[0] != none)
      i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

// The slot of `hash`, inserting an empty one (h[0] still none; the caller
// fills it) if absent.
size_t block_index::insert_slot(uint64_t hash) {
  if ((size_ + 1) * max_load_den > slots_.size() * max_load_num)
    rehash(slots_.size() * 2);
  size_t i = home(hash);
  while (slots_[i].h[0] != none) {
    if (slots_[i].hash == hash) return i;
    i = (i + 1) & mask_;
  }
  slots_[i].hash = hash;
  return i;
}

void block_index::erase_at(size_t i) {
  // Shift later members of the probe run back into the hole when their home
  // does not lie cyclically in (hole, j].
  for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
    if (slots_[j].h[0] == none) break;
    const size_t h = home(slots_[j].hash);
    if (((j - h) & mask_) >= ((j - i) & mask_)) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i].h[0] = none;
  slots_[i].h[1] = none;
  --size_;
}

uint32_t block_index::new_spill() {
  if (!spill_free_.empty()) {
    const uint32_t k = spill_free_.back();
    spill_free_.pop_back();
    return k;
  }
  spill_.emplace_back();
  return static_cast<uint32_t>(spill_.size() - 1);
}

bool block_index::add(slot& s, uint32_t worker, tier t) {
  const uint32_t p = pack(worker, t);
  if (spilled(s.h[0])) {
    auto& v = spill_[s.h[0] >> 2];
    for (uint32_t& q : v) {
      if (worker_of(q) != worker) continue;
      if (q == p) return false;
      q = p;
      return true;
    }
    v.push_back(p);
    ++entries_;
    return true;
  }
  for (uint32_t& q : s.h) {
    if (q == none || worker_of(q) != worker) continue;
    if (q == p) return false;
    q = p;
    return true;
  }
  ++entries_;
  if (s.h[0] == none) {
    s.h[0] = p;
  } else if (s.h[1] == none) {
    s.h[1] = p;
  } else {
    const uint32_t k = new_spill();
    spill_[k].assign({s.h[0], s.h[1], p});
    s.h[0] = k << 2 | 3;
    s.h[1] = none;
  }
  return true;
}

bool block_index::remove(slot& s, uint32_t worker, const tier* t) {
  auto hit = [&](uint32_t q) {
    return q != none && worker_of(q) == worker && (!t || tier_of(q) == *t);
  };
  if (spilled(s.h[0])) {
    const uint32_t k = s.h[0] >> 2;
    auto& v = spill_[k];
    for (size_t i = 0; i < v.size(); ++i) {
      if (!hit(v[i])) continue;
      v[i] = v.back();
      v.pop_back();
      --entries_;
      if (v.size() == 2) {
        // Back inline; release the list's memory, a shard churns through
        // many short-lived popular blocks.
        s.h[0] = v[0];
        s.h[1] = v[1];
        std::vector<uint32_t>().swap(v);
        spill_free_.push_back(k);
      }
      return true;
    }
    return false;
  }
  if (hit(s.h[0])) {
    s.h[0] = s.h[1];
    s.h[1] = none;
  } else if (hit(s.h[1])) {
    s.h[1] = none;
  } else {
    return false;
  }
  --entries_;
  return true;
}

bool block_index::apply(uint32_t worker, const cache_event& e) {
  if (!valid(worker, e)) return false;
  if (e.kind == cache_event::stored) {
    const size_t i = insert_slot(e.hash);
    if (slots_[i].h[0] == none) ++size_;
    return add(slots_[i], worker, e.where);
  }
  const slot* found = lookup(e.hash);
  if (!found) return false;
  const size_t i = static_cast<size_t>(found - slots_.data());
  if (!remove(slots_[i], worker, &e.where)) return false;
  if (slots_[i].h[0] == none) erase_at(i);
  return true;
}

size_t block_index::drop_worker(uint32_t worker) {
  const size_t before = entries_;
  // An erase shifts a later slot into i, so i is looked at again; slots
  // that wrap around from the front were already cleaned, and revisiting
  // them is harmless.
  for (size_t i = 0; i < slots_.size();) {
    slot& s = slots_[i];
    if (s.h[0] != none && remove(s, worker, nullptr) && s.h[0] == none) {
      erase_at(i);
      continue;
    }
    ++i;
  }
  return before - entries_;
}

bool block_index::find(uint64_t hash, uint32_t worker, tier* where) const {
  bool found = false;
  for_each_holder(hash, [&](uint32_t w, tier t) {
    if (w != worker) return;
    *where = t;
    found = true;
  });
  return found;
}

std::vector<block_index::holder> block_index::holders(uint64_t hash) const {
  std::vector<holder> out;
  for_each_holder(hash, [&](uint32_t w, tier t) {
    out.push_back(holder{w, t});
  });
  return out;
}

void block_index::match(const uint64_t* chain, size_t n, size_t workers,
                        tier_match* out) const {
  // out[w].total() is how far w's match has got; a holder extends it only
  // if it is exactly at this block, so a gap ends w's match for good.
  for (size_t w = 0; w < workers; ++w)
    out[w] = tier_match{};
  for (size_t i = 0; i < n; ++i) {
    // The walk is a chain of dependent cache misses at shard scale; start
    // the next block's miss while this one is worked on.
    if (i + 1 < n) __builtin_prefetch(&slots_[home(chain[i + 1])]);
    const slot* s = lookup(chain[i]);
    if (!s) return;
    bool any = false;
    visit(*s, [&](uint32_t p) {
      const uint32_t w = worker_of(p);
      if (w >= workers || out[w].total() != i) return;
      out[w].add(tier_of(p));
      any = true;
    });
    if (!any) return;
  }
}

}  // namespace kvmesh
