// The sglang policy: SGLang's model gateway (SMG, smg-project/smg at
// 5bf7c80c, August 2026; model_gateway/src/policies/cache_aware.rs) in its
// cache_aware mode at the CLI defaults (cache_threshold 0.3,
// balance_abs_threshold 64, balance_rel_threshold 1.5, max_tree_size 2^26,
// eviction every 120 s).
//
//  - The approximate tree: one radix tree of routed prompts shared by all
//    workers (tenants). A request's match is the deepest node any tenant
//    holds; its rate is matched / input tokens.
//  - rate <= 0.3: the least-loaded worker (gateway in-flight count), ties by
//    (load, processed requests, index). Not the smallest tree: the header
//    comment says so, the code does not.
//  - rate > 0.3: the least loaded of (at most 8) tenants of the deepest
//    node, ties at random; then the per-request gate: if its load exceeds
//    1.5 x and 64 + the fleet's mean load, the request spills to the least
//    loaded. (SMG replaced the fleet-wide "max - min > 64 and max > 1.5 min"
//    switch with this gate; the fleet-wide trigger left is on KV usage,
//    off by default.)
//  - The chosen worker becomes a tenant of the whole prompt.
//  - Size: the tree's total (shared nodes once), capped at 2^26 characters.
//    kvmesh routes blocks, not text, so the cap is converted at 4
//    characters a token (English text under BPE tokenisers; the same ratio
//    GAIE used for its character blocks): 2^24 tokens. Eviction is SMG's
//    background pass every 120 s, never on the request path: (leaf, tenant)
//    pairs, least recently used first, until the total is within the cap.
//
// The sglang_events policy is the same gateway's event-driven mode
// (select_worker_event_driven, gRPC workers publishing KV events): each
// worker's overlap is the number of the prompt's complete blocks, from the
// first, that its KV events say it holds (any tier); the most overlapping
// wins, ties by lower load then at random (SMG dropped the tree-size
// tie-break); nothing overlapping (or a prompt under one block) goes to the
// least loaded; the overlap winner passes the same per-request gate. Until
// the first event arrives it routes as cache_aware does.
#include "core/policy.hpp"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/policies/common.hpp"

namespace kvmesh {
namespace policies {

namespace {

constexpr double eviction_interval_ms = 120e3;
constexpr uint64_t max_tree_chars = uint64_t{1} << 26;
constexpr uint64_t chars_per_token = 4;
constexpr size_t matched_tenants_cap = 8;

class sglang_policy final : public router_policy {
 public:
  sglang_policy(const policy_config& c, bool events)
      : cfg_(c),
        events_(events),
        match_(c.workers),
        rng_(c.seed),
        load_(c.workers),
        processed_(c.workers, 0),
        tree_(std::max<uint64_t>(
            1, max_tree_chars / chars_per_token / c.block_tokens)) {}

  uint32_t route(const route_request& r, const fleet_view& v) override {
    if (r.now_ms >= next_eviction_ms_) {
      tree_.evict();
      next_eviction_ms_ = r.now_ms + eviction_interval_ms;
    }
    const auto& loads = load_.counts();
    if (events_ && v.kv && v.kv->blocks() > 0) {
      const uint32_t w = route_by_events(r, *v.kv);
      tree_.insert(w, r.blocks, r.n, r.now_ms);
      load_.add(r.id, w);
      ++processed_[w];
      return w;
    }
    const uint32_t depth = tree_.deepest(r.blocks, r.n, &tenants_);
    const double matched = std::min<double>(
        static_cast<double>(depth) * cfg_.block_tokens, r.input_tokens);
    const double rate = r.input_tokens ? matched / r.input_tokens : 0;
    uint32_t w;
    if (!(rate > thresholds_.cache_threshold) || tenants_.empty()) {
      w = sglang_least_loaded(loads, processed_);
    } else {
      if (tenants_.size() > matched_tenants_cap)
        tenants_.resize(matched_tenants_cap);
      const uint32_t k =
          argbest(tenants_.size(), rng_, [&](uint32_t a, uint32_t b) {
            return compare(loads[tenants_[a]], loads[tenants_[b]]);
          });
      w = tenants_[k];
      double sum = 0;
      for (uint32_t l : loads)
        sum += l;
      if (sglang_gate_spills(loads[w], sum / cfg_.workers, thresholds_))
        w = sglang_least_loaded(loads, processed_);
    }
    tree_.insert(w, r.blocks, r.n, r.now_ms);
    load_.add(r.id, w);
    ++processed_[w];
    return w;
  }
  void finished(uint64_t request, uint32_t, uint32_t) override {
    load_.finish(request);
  }

 private:
  uint32_t route_by_events(const route_request& r, const block_index& kv) {
    const auto& loads = load_.counts();
    const uint32_t n =
        std::min<uint32_t>(r.n, r.input_tokens / cfg_.block_tokens);
    uint32_t best = 0;
    if (n > 0) {
      kv.match(r.blocks, n, cfg_.workers, match_.data());
      for (const tier_match& m : match_)
        best = std::max(best, m.total());
    }
    if (best == 0) return sglang_least_loaded(loads, processed_);
    const uint32_t w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
      const int c = compare(match_[b].total(), match_[a].total());
      return c != 0 ? c : compare(loads[a], loads[b]);
    });
    double sum = 0;
    for (uint32_t l : loads)
      sum += l;
    if (sglang_gate_spills(loads[w], sum / cfg_.workers, thresholds_))
      return sglang_least_loaded(loads, processed_);
    return w;
  }

  policy_config cfg_;
  bool events_;
  std::vector<tier_match> match_;
  uint64_t rng_;
  sglang_thresholds thresholds_;
  inflight load_;
  std::vector<uint64_t> processed_;
  sglang_tree tree_;
  std::vector<uint32_t> tenants_;
  double next_eviction_ms_ = eviction_interval_ms;
};

}  // namespace

std::unique_ptr<router_policy> make_sglang(const policy_config& c) {
  return std::make_unique<sglang_policy>(c, false);
}

std::unique_ptr<router_policy> make_sglang_events(const policy_config& c) {
  return std::make_unique<sglang_policy>(c, true);
}

// --- sglang_tree ----------------------------------------------------------

sglang_tree::tenant* sglang_tree::find(node& n, uint32_t worker) {
  for (tenant& t : n.tenants)
    if (t.worker == worker) return &t;
  return nullptr;
}

void sglang_tree::insert(uint32_t worker, const uint64_t* chain, size_t n,
                         double now) {
  for (size_t i = 0; i < n; ++i) {
    node& nd = nodes_[chain[i]];
    if (i > 0) nd.parent = chain[i - 1], nd.has_parent = true;
    if (tenant* t = find(nd, worker)) {
      t->last = now;
      continue;
    }
    nd.tenants.push_back(tenant{worker, now, 0});
    if (i > 0) find(nodes_.at(chain[i - 1]), worker)->children += 1;
  }
}

uint32_t sglang_tree::deepest(const uint64_t* chain, size_t n,
                              std::vector<uint32_t>* tenants) const {
  tenants->clear();
  uint32_t depth = 0;
  const node* last = nullptr;
  for (size_t i = 0; i < n; ++i) {
    auto it = nodes_.find(chain[i]);
    if (it == nodes_.end()) break;
    last = &it->second;
    ++depth;
  }
  if (last)
    for (const tenant& t : last->tenants)
      tenants->push_back(t.worker);
  return depth;
}

uint32_t sglang_tree::match(uint32_t worker, const uint64_t* chain,
                            size_t n) const {
  uint32_t depth = 0;
  for (size_t i = 0; i < n; ++i) {
    auto it = nodes_.find(chain[i]);
    if (it == nodes_.end()) break;
    bool held = false;
    for (const tenant& t : it->second.tenants)
      held = held || t.worker == worker;
    if (!held) break;
    ++depth;
  }
  return depth;
}

void sglang_tree::evict() {
  if (nodes_.size() <= cap_) return;
  struct item {
    double last;
    uint64_t hash;
    uint32_t worker;
    bool operator>(const item& o) const { return last > o.last; }
  };
  std::priority_queue<item, std::vector<item>, std::greater<>> heap;
  for (const auto& [h, nd] : nodes_)
    for (const tenant& t : nd.tenants)
      if (t.children == 0) heap.push(item{t.last, h, t.worker});
  while (nodes_.size() > cap_ && !heap.empty()) {
    const item it = heap.top();
    heap.pop();
    auto n = nodes_.find(it.hash);
    if (n == nodes_.end()) continue;
    node& nd = n->second;
    auto t =
        std::find_if(nd.tenants.begin(), nd.tenants.end(),
                     [&](const tenant& x) { return x.worker == it.worker; });
    if (t == nd.tenants.end() || t->children != 0) continue;
    nd.tenants.erase(t);
    const bool has_parent = nd.has_parent;
    const uint64_t parent = nd.parent;
    if (nd.tenants.empty()) nodes_.erase(n);
    if (!has_parent) continue;
    auto p = nodes_.find(parent);
    if (p == nodes_.end()) continue;
    tenant* pt = find(p->second, it.worker);
    if (pt && --pt->children == 0) heap.push(item{pt->last, parent, it.worker});
  }
}

}  // namespace policies

bool sglang_imbalanced(double max_load, double min_load,
                       const sglang_thresholds& t) {
  return max_load - min_load > t.abs_threshold &&
         max_load > t.rel_threshold * min_load;
}

bool sglang_gate_spills(double load, double mean_load,
                        const sglang_thresholds& t) {
  return load > mean_load * t.rel_threshold &&
         load > mean_load + t.abs_threshold;
}

uint32_t sglang_least_loaded(const std::vector<uint32_t>& loads,
                             const std::vector<uint64_t>& processed) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < loads.size(); ++i)
    if (loads[i] < loads[best] ||
        (loads[i] == loads[best] && processed[i] < processed[best]))
      best = i;
  return best;
}

}  // namespace kvmesh
