// Tiered KV cache: LRU per tier, offload on eviction, reference counts.
#include "core/tiered_cache.hpp"

#include <string>

namespace kvmesh {

const char* to_string(tier t) {
  switch (t) {
    case tier::gpu:
      return "gpu";
    case tier::host:
      return "host";
    case tier::disk:
      return "disk";
  }
  return "unknown";
}

expected<tiered_cache> tiered_cache::make(const cache_config& cfg) {
  if (cfg.gpu_blocks == 0)
    return make_error(ec::invalid_argument,
                      "GPU capacity must be at least 1 block");
  if (cfg.gpu_blocks >= UINT32_MAX / 2 || cfg.host_blocks >= UINT32_MAX / 2 ||
      cfg.disk_blocks >= UINT32_MAX / 2)
    return make_error(ec::invalid_argument,
                      "a tier capacity above 2^31 blocks is not supported");
  return tiered_cache{cfg};
}

tiered_cache::tiered_cache(const cache_config& cfg) {
  cap_ = {cfg.gpu_blocks, cfg.host_blocks, cfg.disk_blocks};
}

void tiered_cache::link_front(lru& l, uint32_t e) {
  entry& en = entries_[e];
  en.prev = nil;
  en.next = l.head;
  if (l.head != nil) entries_[l.head].prev = e;
  l.head = e;
  if (l.tail == nil) l.tail = e;
  ++l.count;
}

void tiered_cache::unlink(lru& l, uint32_t e) {
  entry& en = entries_[e];
  if (en.prev != nil)
    entries_[en.prev].next = en.next;
  else
    l.head = en.next;
  if (en.next != nil)
    entries_[en.next].prev = en.prev;
  else
    l.tail = en.prev;
  en.prev = en.next = nil;
  --l.count;
}

uint32_t tiered_cache::new_entry(uint64_t hash, tier t) {
  uint32_t e;
  if (!free_.empty()) {
    e = free_.back();
    free_.pop_back();
  } else {
    e = static_cast<uint32_t>(entries_.size());
    entries_.emplace_back();
  }
  entries_[e] = entry{hash, hash, nil, nil, 0, t};
  map_.put(hash, e, meta_of(entries_[e]));
  return e;
}

void tiered_cache::drop_entry(uint32_t e) {
  map_.erase(entries_[e].hash);
  free_.push_back(e);
}

bool tiered_cache::make_room(tier t) {
  const size_t i = idx(t);
  if (used_[i] < cap_[i]) return true;
  lru& l = list(t);
  const uint32_t victim = l.tail;
  if (victim == nil) return false;
  unlink(l, victim);
  --used_[i];
  emit(cache_event::removed, t, victim);
  if (i + 1 < tier_count && cap_[i + 1] > 0) {
    const tier below = static_cast<tier>(i + 1);
    if (make_room(below)) {
      entries_[victim].where = below;
      sync(victim);
      link_front(list(below), victim);
      ++used_[i + 1];
      emit(cache_event::stored, below, victim);
      return true;
    }
  }
  drop_entry(victim);
  return true;
}

tier_match tiered_cache::match(const uint64_t* chain, size_t n) const {
  // Prefetching a few blocks ahead overlaps the cache misses of a walk over
  // a large map; the metadata byte spares a second miss into entries_.
  constexpr size_t ahead = 8;
  for (size_t i = 0; i < n && i < ahead; ++i)
    map_.prefetch(chain[i]);
  tier_match m;
  for (size_t i = 0; i < n; ++i) {
    if (i + ahead < n) map_.prefetch(chain[i + ahead]);
    uint8_t meta = 0;
    if (map_.find(chain[i], &meta) == block_map::npos) break;
    m.add(static_cast<tier>(meta & 3));
    m.active_overlap += (meta >> 2) & 1;  // only GPU blocks are ever held
  }
  return m;
}

bool tiered_cache::find(uint64_t hash, tier* where) const {
  const uint32_t e = map_.find(hash);
  if (e == block_map::npos) return false;
  if (where) *where = entries_[e].where;
  return true;
}

bool tiered_cache::store(uint64_t hash, tier t, uint64_t root) {
  if (cap_[idx(t)] == 0) return false;
  const uint32_t e = map_.find(hash);
  if (e != block_map::npos) {
    entry& en = entries_[e];
    if (en.where == t || idx(en.where) < idx(t)) {
      // Already in this tier or a better one: it counts where it is best.
      if (!(en.where == tier::gpu && en.refs > 0)) {
        unlink(list(en.where), e);
        link_front(list(en.where), e);
      }
      return true;
    }
    // Moving up from a lower tier.
    const tier from = en.where;
    unlink(list(from), e);
    --used_[idx(from)];
    if (!make_room(t)) {
      link_front(list(from), e);
      ++used_[idx(from)];
      return false;
    }
    emit(cache_event::removed, from, e);
    entries_[e].where = t;
    sync(e);
    link_front(list(t), e);
    ++used_[idx(t)];
    emit(cache_event::stored, t, e);
    return true;
  }
  if (!make_room(t)) return false;
  const uint32_t n = new_entry(hash, t);
  if (root != 0) entries_[n].root = root;
  link_front(list(t), n);
  ++used_[idx(t)];
  emit(cache_event::stored, t, n);
  return true;
}

bool tiered_cache::remove(uint64_t hash) {
  const uint32_t e = map_.find(hash);
  if (e == block_map::npos) return false;
  entry& en = entries_[e];
  if (en.where == tier::gpu && en.refs > 0) return false;
  const tier t = en.where;
  unlink(list(t), e);
  --used_[idx(t)];
  emit(cache_event::removed, t, e);
  drop_entry(e);
  return true;
}

void tiered_cache::touch(uint64_t hash) {
  const uint32_t e = map_.find(hash);
  if (e == block_map::npos) return;
  entry& en = entries_[e];
  if (en.where == tier::gpu && en.refs > 0) return;
  unlink(list(en.where), e);
  link_front(list(en.where), e);
}

void tiered_cache::clear() {
  for (size_t i = 0; i < tier_count; ++i) {
    const tier t = static_cast<tier>(i);
    lru& l = list(t);
    while (l.tail != nil) {
      const uint32_t e = l.tail;
      unlink(l, e);
      --used_[i];
      emit(cache_event::removed, t, e);
      drop_entry(e);
    }
  }
}

bool tiered_cache::acquire(uint64_t hash, tier* found) {
  const uint32_t e = map_.find(hash);
  if (e == block_map::npos) return false;
  entry& en = entries_[e];
  const tier from = en.where;
  if (from == tier::gpu) {
    if (en.refs++ == 0) {
      unlink(gpu_lru_, e);
      ++held_;
      sync(e);
    }
  } else {
    unlink(list(from), e);
    --used_[idx(from)];
    if (!make_room(tier::gpu)) {
      link_front(list(from), e);
      ++used_[idx(from)];
      return false;
    }
    emit(cache_event::removed, from, e);
    entries_[e].where = tier::gpu;
    entries_[e].refs = 1;
    sync(e);
    ++used_[0];
    ++held_;
    emit(cache_event::stored, tier::gpu, e);
  }
  if (found) *found = from;
  return true;
}

void tiered_cache::release(uint64_t hash) {
  const uint32_t e = map_.find(hash);
  if (e == block_map::npos) return;
  entry& en = entries_[e];
  if (en.where != tier::gpu || en.refs == 0) return;
  if (--en.refs == 0) {
    --held_;
    sync(e);
    link_front(gpu_lru_, e);
  }
}

bool tiered_cache::allocate(uint64_t n) {
  if (gpu_available() < n) return false;
  for (uint64_t i = 0; i < n; ++i) {
    make_room(tier::gpu);
    ++used_[0];
    ++anon_;
  }
  return true;
}

void tiered_cache::free_anonymous(uint64_t n) {
  if (n > anon_) n = anon_;
  anon_ -= n;
  used_[0] -= n;
}

void tiered_cache::commit(uint64_t hash, uint64_t root) {
  const uint32_t e = map_.find(hash);
  if (e != block_map::npos && entries_[e].where == tier::gpu) {
    entry& en = entries_[e];
    if (en.refs++ == 0) {
      unlink(gpu_lru_, e);
      ++held_;
      sync(e);
    }
    free_anonymous(1);
    return;
  }
  if (anon_ > 0) {
    --anon_;
  } else {
    // No anonymous block to convert: the caller did not allocate one. Keep
    // the accounting honest by taking a fresh slot.
    if (!make_room(tier::gpu)) return;
    ++used_[0];
  }
  uint32_t n;
  if (e != block_map::npos) {
    const tier from = entries_[e].where;
    unlink(list(from), e);
    --used_[idx(from)];
    emit(cache_event::removed, from, e);
    n = e;
    entries_[n].where = tier::gpu;
  } else {
    n = new_entry(hash, tier::gpu);
    if (root != 0) entries_[n].root = root;
  }
  entries_[n].refs = 1;
  sync(n);
  ++held_;
  emit(cache_event::stored, tier::gpu, n);
}

void drop_superseded(std::vector<cache_event>& events) {
  // make_room's cascade puts at most one removed per tier between a
  // block's removed and its stored below.
  constexpr size_t ahead = 2 * tier_count;
  const size_t n = events.size();
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t h = events[i].hash;
    bool moot = false;
    for (size_t j = i + 1; j < n && j <= i + ahead && !moot; ++j)
      moot = events[j].hash == h && events[j].kind == cache_event::stored;
    if (!moot) events[kept++] = events[i];
  }
  events.resize(kept);
}

}  // namespace kvmesh
