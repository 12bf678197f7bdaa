// Byte-level BPE: the rank table over pairs of ids and the merge loop, the
// same merges in the same order as HF tokenizers' Word::merge_all.
#include "tokens/bpe.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <unordered_set>

namespace kvmesh {

namespace {

// GPT-2's printable bytes, which stand for themselves.
bool printable(unsigned b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) ||
         (b >= 174 && b <= 255);
}

struct byte_alphabet {
  uint32_t code_point[256];   // byte -> its character
  int16_t byte_of_extra[68];  // character 256 + k -> byte
  byte_alphabet() {
    unsigned n = 0;
    for (unsigned b = 0; b < 256; ++b) {
      if (printable(b)) {
        code_point[b] = b;
      } else {
        code_point[b] = 256 + n;
        byte_of_extra[n++] = static_cast<int16_t>(b);
      }
    }
  }
};

const byte_alphabet& alphabet() {
  static const byte_alphabet a;
  return a;
}

void append_utf8(uint32_t cp, std::string& s) {
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t table_size(size_t entries) {
  size_t n = 16;
  while (n < entries * 2)
    n <<= 1;
  return n;
}

// Pre-tokens up to this many bytes merge by scanning an array of pair
// ranks (no heap, no allocation); longer ones by HF's heap of merges.
constexpr size_t kShort = 64;
// Scratch of the long merge kept per thread up to this many symbols.
constexpr size_t kKeepScratch = 1 << 16;

}  // namespace

std::string bpe_model::byte_char(uint8_t b) {
  std::string s;
  append_utf8(alphabet().code_point[b], s);
  return s;
}

bool bpe_model::decode_byte_level(std::string_view token, std::string& bytes) {
  bytes.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  const size_t n = token.size();
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    if (p[i] < 0x80) {
      cp = p[i];
      i += 1;
    } else if ((p[i] & 0xE0) == 0xC0 && i + 1 < n) {
      cp = ((p[i] & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
      i += 2;
    } else {
      return false;  // three bytes and more: above U+07FF, not in the 256
    }
    if (cp < 256 && printable(cp)) {
      bytes.push_back(static_cast<char>(cp));
    } else if (cp >= 256 && cp < 256 + 68) {
      bytes.push_back(static_cast<char>(alphabet().byte_of_extra[cp - 256]));
    } else {
      return false;
    }
  }
  return true;
}

void bpe_model::put_pair(uint32_t a, uint32_t b, uint32_t rank, uint32_t id) {
  const uint64_t key = (uint64_t{a} << 32) | b;
  size_t i = (key * 0x9E3779B97F4A7C15ull) >> pair_shift_;
  for (;;) {
    pair_slot& s = pairs_[i];
    if (s.key == key || s.key == kEmpty) {
      s = pair_slot{key, rank, id};
      return;
    }
    i = (i + 1) & pair_mask_;
  }
}

void bpe_model::put_bytes(std::string_view bytes, uint32_t id) {
  size_t i = XXH3_64bits(bytes.data(), bytes.size()) & bytes_mask_;
  while (bytes_[i].used)
    i = (i + 1) & bytes_mask_;
  bytes_[i] = bytes_slot{static_cast<uint32_t>(arena_.size()),
                         static_cast<uint32_t>(bytes.size()), id, 1};
  arena_.append(bytes);
}

const bpe_model::bytes_slot* bpe_model::find_bytes(
    std::string_view bytes) const {
  if (bytes_.empty()) return nullptr;
  size_t i = XXH3_64bits(bytes.data(), bytes.size()) & bytes_mask_;
  for (;;) {
    const bytes_slot& s = bytes_[i];
    if (!s.used) return nullptr;
    if (s.length == bytes.size() &&
        std::memcmp(arena_.data() + s.offset, bytes.data(), bytes.size()) == 0)
      return &s;
    i = (i + 1) & bytes_mask_;
  }
}

expected<bpe_model> bpe_model::build(
    const std::vector<std::pair<std::string, uint32_t>>& vocab,
    const std::vector<std::pair<std::string, std::string>>& merges,
    bool ignore_merges) {
  bpe_model m;
  m.ignore_merges_ = ignore_merges;
  std::unordered_map<std::string, uint32_t> ids;
  ids.reserve(vocab.size() * 2);
  std::unordered_set<uint32_t> seen;
  seen.reserve(vocab.size() * 2);
  for (const auto& [token, id] : vocab) {
    if (id == ~uint32_t{0})
      return make_error(ec::invalid_argument,
                        "tokenizer.json: model vocab id out of range");
    if (!seen.insert(id).second)
      return make_error(ec::invalid_argument,
                        "tokenizer.json: model vocab gives id " +
                            std::to_string(id) + " to two tokens");
    ids.emplace(token, id);
  }
  for (unsigned b = 0; b < 256; ++b) {
    auto it = ids.find(byte_char(static_cast<uint8_t>(b)));
    if (it == ids.end())
      return make_error(ec::invalid_argument,
                        "tokenizer.json: model vocab lacks the byte-level "
                        "token of byte " +
                            std::to_string(b) +
                            " (HF would drop that byte: not supported)");
    m.byte_id_[b] = it->second;
  }
  const size_t size = table_size(merges.size());
  m.pairs_.assign(size, pair_slot{kEmpty, 0, 0});
  m.pair_mask_ = size - 1;
  m.pair_shift_ = 64;
  for (size_t s = size; s > 1; s >>= 1)
    --m.pair_shift_;
  std::string joined;
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = ids.find(a);
    auto ib = ids.find(b);
    joined = a + b;
    auto ij = ids.find(joined);
    const std::string* missing = ia == ids.end()   ? &a
                                 : ib == ids.end() ? &b
                                 : ij == ids.end() ? &joined
                                                   : nullptr;
    if (missing)
      return make_error(ec::invalid_argument,
                        "tokenizer.json: merge " + std::to_string(r) + " ('" +
                            a + "' '" + b + "') names '" + *missing +
                            "', which is not in the vocab");
    m.put_pair(ia->second, ib->second, static_cast<uint32_t>(r), ij->second);
  }
  m.merge_count_ = merges.size();
  if (ignore_merges) {
    const size_t bsize = table_size(vocab.size());
    m.bytes_.assign(bsize, bytes_slot{0, 0, 0, 0});
    m.bytes_mask_ = bsize - 1;
    std::string raw;
    for (const auto& [token, id] : vocab)
      if (decode_byte_level(token, raw)) m.put_bytes(raw, id);
  }
  return m;
}

void bpe_model::encode(std::string_view bytes,
                       std::vector<uint32_t>& out) const {
  const size_t n = bytes.size();
  if (n == 0) return;
  const auto* b = reinterpret_cast<const uint8_t*>(bytes.data());
  if (ignore_merges_) {
    if (const bytes_slot* s = find_bytes(bytes)) {
      out.push_back(s->id);
      return;
    }
  }
  if (n == 1) {
    out.push_back(byte_id_[b[0]]);
  } else if (n <= kShort) {
    merge_short(b, n, out);
  } else {
    merge_long(b, n, out);
  }
}

// Each round merges the pair of lowest rank, the leftmost of equals: the
// order in which HF's heap (rank, then position) takes them.
void bpe_model::merge_short(const uint8_t* b, size_t n,
                            std::vector<uint32_t>& out) const {
  constexpr uint32_t none = ~uint32_t{0};
  uint32_t sym[kShort], rank[kShort], merged[kShort];
  size_t m = n;
  for (size_t i = 0; i < n; ++i)
    sym[i] = byte_id_[b[i]];
  auto rate = [&](size_t j) {
    const pair_slot* s = find_pair(sym[j], sym[j + 1]);
    rank[j] = s ? s->rank : none;
    merged[j] = s ? s->id : 0;
  };
  for (size_t j = 0; j + 1 < m; ++j)
    rate(j);
  while (m > 1) {
    size_t best = 0;
    uint32_t r = rank[0];
    for (size_t j = 1; j + 1 < m; ++j)
      if (rank[j] < r) r = rank[j], best = j;
    if (r == none) break;
    sym[best] = merged[best];
    // Symbols after best + 1 and pairs after best + 1 move left by one.
    std::memmove(sym + best + 1, sym + best + 2,
                 (m - best - 2) * sizeof(uint32_t));
    if (best + 2 < m - 1) {
      std::memmove(rank + best + 1, rank + best + 2,
                   (m - best - 3) * sizeof(uint32_t));
      std::memmove(merged + best + 1, merged + best + 2,
                   (m - best - 3) * sizeof(uint32_t));
    }
    --m;
    if (best > 0) rate(best - 1);
    if (best + 1 < m) rate(best);
  }
  out.insert(out.end(), sym, sym + m);
}

namespace {

// A candidate merge: (rank << 32) | position, so that the smallest is the
// next to apply (lowest rank, then leftmost), as in HF's heap.
using merge_key = uint64_t;
constexpr std::greater<merge_key> later{};

struct long_scratch {
  std::vector<uint32_t> sym;
  std::vector<int32_t> prev, next;
  std::vector<uint8_t> alive;
  std::vector<merge_key> heap;
  void trim() {
    if (sym.capacity() > kKeepScratch) *this = long_scratch{};
  }
};

}  // namespace

// HF's Word::merge_all: a heap of candidate merges by (rank, position);
// an entry whose pair changed since it was pushed is skipped. HF tells one
// by the merged id; here by the rank, which is as exact: each rank belongs
// to one pair (a pair listed twice keeps its last), each id to one token.
void bpe_model::merge_long(const uint8_t* b, size_t n,
                           std::vector<uint32_t>& out) const {
  thread_local long_scratch t;
  t.sym.resize(n);
  t.prev.resize(n);
  t.next.resize(n);
  t.alive.assign(n, 1);
  t.heap.clear();
  for (size_t i = 0; i < n; ++i) {
    t.sym[i] = byte_id_[b[i]];
    t.prev[i] = static_cast<int32_t>(i) - 1;
    t.next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  auto key = [](uint32_t rank, size_t pos) {
    return (merge_key{rank} << 32) | pos;
  };
  for (size_t i = 0; i + 1 < n; ++i)
    if (const pair_slot* s = find_pair(t.sym[i], t.sym[i + 1]))
      t.heap.push_back(key(s->rank, i));
  std::make_heap(t.heap.begin(), t.heap.end(), later);
  while (!t.heap.empty()) {
    std::pop_heap(t.heap.begin(), t.heap.end(), later);
    const merge_key top = t.heap.back();
    t.heap.pop_back();
    const uint32_t pos = static_cast<uint32_t>(top);
    if (!t.alive[pos]) continue;
    const int32_t nx = t.next[pos];
    if (nx < 0) continue;
    const pair_slot* s = find_pair(t.sym[pos], t.sym[nx]);
    if (!s || s->rank != (top >> 32)) continue;  // stale
    t.sym[pos] = s->id;
    t.alive[nx] = 0;
    const int32_t nn = t.next[nx];
    t.next[pos] = nn;
    if (nn >= 0) t.prev[nn] = static_cast<int32_t>(pos);
    const int32_t pv = t.prev[pos];
    if (pv >= 0) {
      if (const pair_slot* q = find_pair(t.sym[pv], t.sym[pos])) {
        t.heap.push_back(key(q->rank, static_cast<size_t>(pv)));
        std::push_heap(t.heap.begin(), t.heap.end(), later);
      }
    }
    if (nn >= 0) {
      if (const pair_slot* q = find_pair(t.sym[pos], t.sym[nn])) {
        t.heap.push_back(key(q->rank, pos));
        std::push_heap(t.heap.begin(), t.heap.end(), later);
      }
    }
  }
  for (int32_t i = 0; i >= 0; i = t.next[i])
    out.push_back(t.sym[i]);
  t.trim();
}

}  // namespace kvmesh
