// The routing policies. Each keeps only the state its real router keeps.
#include "core/policy.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <unordered_map>

#include "core/auction.hpp"
#include "core/engine.hpp"
#include "core/routed_index.hpp"

namespace kvmesh {

namespace {

constexpr std::pair<policy_kind, const char*> names[] = {
    {policy_kind::random, "random"},
    {policy_kind::round_robin, "round_robin"},
    {policy_kind::least_loaded, "least_loaded"},
    {policy_kind::prefix, "prefix"},
    {policy_kind::dynamo, "dynamo"},
    {policy_kind::sglang, "sglang"},
    {policy_kind::llmd, "llmd"},
    {policy_kind::preble, "preble"},
    {policy_kind::mooncake, "mooncake"},
    {policy_kind::kvmesh, "kvmesh"},
};

// Picks uniformly among the indices where `better` says "equal" to the best;
// `cmp(a, b)` < 0 when a is better than b. Reservoir sampling, one pass.
template <class Cmp>
uint32_t argbest(size_t count, uint64_t& rng, Cmp cmp) {
  uint32_t best = 0;
  uint32_t ties = 1;
  for (uint32_t i = 1; i < count; ++i) {
    const int c = cmp(i, best);
    if (c < 0) {
      best = i;
      ties = 1;
    } else if (c == 0 && next_random(rng) % ++ties == 0) {
      best = i;
    }
  }
  return best;
}

template <class T>
int compare(T a, T b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

// In-flight requests per worker, as a router counts them from its own
// routing decisions and the ends of their streams.
class inflight {
 public:
  explicit inflight(size_t workers) : count_(workers, 0) {}
  void add(uint64_t request, uint32_t worker) {
    where_[request] = worker;
    ++count_[worker];
  }
  void finish(uint64_t request) {
    auto it = where_.find(request);
    if (it == where_.end()) return;
    --count_[it->second];
    where_.erase(it);
  }
  uint32_t operator[](size_t w) const { return count_[w]; }
  const std::vector<uint32_t>& counts() const { return count_; }

 private:
  std::vector<uint32_t> count_;
  std::unordered_map<uint64_t, uint32_t> where_;
};

class random_policy final : public router_policy {
 public:
  explicit random_policy(const policy_config& c) : cfg_(c), rng_(c.seed) {}
  uint32_t route(const route_request&, const fleet_view&) override {
    return static_cast<uint32_t>(next_random(rng_) % cfg_.workers);
  }

 private:
  policy_config cfg_;
  uint64_t rng_;
};

class round_robin_policy final : public router_policy {
 public:
  explicit round_robin_policy(const policy_config& c)
      : cfg_(c), next_(static_cast<uint32_t>(c.seed % c.workers)) {}
  uint32_t route(const route_request&, const fleet_view&) override {
    const uint32_t w = next_;
    next_ = static_cast<uint32_t>((next_ + 1) % cfg_.workers);
    return w;
  }

 private:
  policy_config cfg_;
  uint32_t next_;
};

class least_loaded_policy final : public router_policy {
 public:
  explicit least_loaded_policy(const policy_config& c)
      : cfg_(c), rng_(c.seed), load_(c.workers) {}
  uint32_t route(const route_request& r, const fleet_view&) override {
    const uint32_t w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
      return compare(load_[a], load_[b]);
    });
    load_.add(r.id, w);
    return w;
  }
  void finished(uint64_t request, uint32_t, uint32_t) override {
    load_.finish(request);
  }

 private:
  policy_config cfg_;
  uint64_t rng_;
  inflight load_;
};

// Pure affinity: the longest prefix this router sent somewhere wins; ties by
// in-flight load, then random. No balancing at all: the failure mode.
class prefix_policy final : public router_policy {
 public:
  explicit prefix_policy(const policy_config& c)
      : cfg_(c),
        rng_(c.seed),
        load_(c.workers),
        tree_(*routed_index::make(c.workers, routed_index::unbounded)),
        match_(c.workers) {}
  uint32_t route(const route_request& r, const fleet_view&) override {
    for (uint32_t w = 0; w < cfg_.workers; ++w)
      match_[w] = tree_.match(w, r.blocks, r.n);
    const uint32_t w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
      if (int c = compare(match_[b], match_[a])) return c;
      return compare(load_[a], load_[b]);
    });
    tree_.insert(w, r.blocks, r.n);
    load_.add(r.id, w);
    return w;
  }
  void finished(uint64_t request, uint32_t, uint32_t) override {
    load_.finish(request);
  }

 private:
  policy_config cfg_;
  uint64_t rng_;
  inflight load_;
  routed_index tree_;
  std::vector<uint32_t> match_;
};

// NVIDIA Dynamo's KV router: cache state from KV events, active prefill
// tokens and active blocks tracked router-side.
class dynamo_policy final : public router_policy {
 public:
  explicit dynamo_policy(const policy_config& c)
      : cfg_(c),
        rng_(c.seed),
        workers_(c.workers),
        match_(c.workers),
        cost_(c.workers) {}

  uint32_t route(const route_request& r, const fleet_view& v) override {
    v.kv->match(r.blocks, r.n, cfg_.workers, match_.data());
    const double bt = cfg_.block_tokens;
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      const worker_state& ws = workers_[w];
      uint32_t already = 0;
      for (uint32_t i = 0; i < r.n; ++i)
        already += ws.blocks.count(r.blocks[i]) > 0;
      dynamo_inputs in;
      in.active_prefill_tokens = ws.prefill_tokens;
      in.request_tokens = r.input_tokens;
      in.block_tokens = bt;
      in.device_blocks = match_[w].gpu;
      in.host_blocks = match_[w].host;
      in.disk_blocks = match_[w].disk;
      in.active_blocks = static_cast<double>(ws.blocks.size());
      in.new_blocks = r.n - already;
      cost_[w] = dynamo_cost(in);
    }
    const uint32_t w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
      return compare(cost_[a], cost_[b]);
    });
    // Track the request: its new tokens count as prefill until its first
    // token; its blocks are active until it ends.
    worker_state& ws = workers_[w];
    tracked t;
    t.worker = w;
    t.prefill_tokens =
        std::max(0.0, r.input_tokens - static_cast<double>(match_[w].gpu) * bt);
    t.blocks.assign(r.blocks, r.blocks + r.n);
    ws.prefill_tokens += t.prefill_tokens;
    for (uint64_t h : t.blocks)
      ++ws.blocks[h];
    requests_.emplace(r.id, std::move(t));
    return w;
  }

  void first_token(uint64_t request, uint32_t) override {
    auto it = requests_.find(request);
    if (it == requests_.end() || it->second.prefill_done) return;
    it->second.prefill_done = true;
    worker_state& ws = workers_[it->second.worker];
    ws.prefill_tokens =
        std::max(0.0, ws.prefill_tokens - it->second.prefill_tokens);
  }

  void finished(uint64_t request, uint32_t w, uint32_t out) override {
    first_token(request, w);
    (void)out;
    auto it = requests_.find(request);
    if (it == requests_.end()) return;
    worker_state& ws = workers_[it->second.worker];
    for (uint64_t h : it->second.blocks) {
      auto b = ws.blocks.find(h);
      if (b != ws.blocks.end() && --b->second == 0) ws.blocks.erase(b);
    }
    requests_.erase(it);
  }

 private:
  struct worker_state {
    double prefill_tokens = 0;
    std::unordered_map<uint64_t, uint32_t> blocks;  // refcounted, unique
  };
  struct tracked {
    uint32_t worker = 0;
    double prefill_tokens = 0;
    bool prefill_done = false;
    std::vector<uint64_t> blocks;
  };

  policy_config cfg_;
  uint64_t rng_;
  std::vector<worker_state> workers_;
  std::unordered_map<uint64_t, tracked> requests_;
  std::vector<tier_match> match_;
  std::vector<double> cost_;
};

// SGLang's cache_aware router (sgl-router): approximate tree of routed
// prompts with LRU eviction, balancing on router-counted in-flight requests.
class sglang_policy final : public router_policy {
 public:
  // The tree is bounded by max_tree_size = 2^24 characters per worker; at
  // about 4 characters a token that is 2^22 tokens.
  explicit sglang_policy(const policy_config& c)
      : cfg_(c),
        rng_(c.seed),
        load_(c.workers),
        tree_(*routed_index::make(
            c.workers,
            std::max<uint64_t>(1, (uint64_t{1} << 22) / c.block_tokens))),
        match_(c.workers) {}
  uint32_t route(const route_request& r, const fleet_view&) override {
    const auto& counts = load_.counts();
    const auto [mn, mx] = std::minmax_element(counts.begin(), counts.end());
    uint32_t w;
    if (sglang_imbalanced(*mx, *mn, thresholds_)) {
      w = static_cast<uint32_t>(mn - counts.begin());
    } else {
      for (uint32_t i = 0; i < cfg_.workers; ++i)
        match_[i] = tree_.match(i, r.blocks, r.n);
      w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
        return compare(match_[b], match_[a]);
      });
      const double rate = r.n ? static_cast<double>(match_[w]) / r.n : 0;
      if (!(rate > thresholds_.cache_threshold)) {
        w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
          return compare(tree_.size(a), tree_.size(b));
        });
      }
    }
    tree_.insert(w, r.blocks, r.n);
    load_.add(r.id, w);
    return w;
  }
  void finished(uint64_t request, uint32_t, uint32_t) override {
    load_.finish(request);
  }

 private:
  policy_config cfg_;
  uint64_t rng_;
  sglang_thresholds thresholds_;
  inflight load_;
  routed_index tree_;
  std::vector<uint32_t> match_;  // per worker, this request's
};

// llm-d inference scheduler at its helm defaults: weighted scorers over an
// approximate prefix index (LRU per server) and scraped engine metrics.
class llmd_policy final : public router_policy {
 public:
  // Approximate prefix plugin: 31,250 entries of 64-token blocks per server
  // (2,000,000 tokens), expressed in this trace's blocks.
  explicit llmd_policy(const policy_config& c)
      : cfg_(c),
        rng_(c.seed),
        tree_(*routed_index::make(
            c.workers, std::max<uint64_t>(1, 2000000 / c.block_tokens))),
        score_(c.workers) {}
  uint32_t route(const route_request& r, const fleet_view& v) override {
    uint32_t qmin = std::numeric_limits<uint32_t>::max(), qmax = 0;
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      qmin = std::min(qmin, v.loads[w].waiting);
      qmax = std::max(qmax, v.loads[w].waiting);
    }
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      const double prefix =
          r.n ? static_cast<double>(tree_.match(w, r.blocks, r.n)) / r.n : 0;
      const double kv = 1.0 - std::clamp(v.loads[w].kv_usage, 0.0, 1.0);
      const double queue =
          qmax == qmin ? 1.0
                       : static_cast<double>(qmax - v.loads[w].waiting) /
                             static_cast<double>(qmax - qmin);
      score_[w] = 3 * prefix + 2 * kv + 2 * queue;
    }
    const uint32_t w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
      return compare(score_[b], score_[a]);
    });
    tree_.insert(w, r.blocks, r.n);
    return w;
  }

 private:
  policy_config cfg_;
  uint64_t rng_;
  routed_index tree_;
  std::vector<double> score_;
};

// Preble (ICLR'25) E2 scheduling: exploit a long cached prefix, explore
// otherwise, over a load cost from a 3-minute window of its own decisions.
class preble_policy final : public router_policy {
 public:
  explicit preble_policy(const policy_config& c)
      : cfg_(c),
        rng_(c.seed),
        load_(c.workers),
        tree_(*routed_index::make(c.workers,
                                  std::max<uint64_t>(1, c.gpu_blocks))),
        window_(c.workers),
        window_sum_(c.workers, 0),
        match_(c.workers),
        cost_(c.workers),
        miss_(c.workers) {}

  uint32_t route(const route_request& r, const fleet_view& v) override {
    const double bt = cfg_.block_tokens;
    // Per-token decode time from the profiled engine at mid occupancy.
    const double per_token = decode_ms(0.5) * cfg_.model_factor;
    const double median_out = median_output();
    uint32_t best_match = 0;
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      expire(w, r.now_ms);
      match_[w] = tree_.match(w, r.blocks, r.n);
      best_match = std::max(best_match, match_[w]);
      const double speed = v.speeds ? v.speeds[w] : 1.0;
      cost_[w] = (window_sum_[w] + load_[w] * median_out * per_token) / speed;
    }
    const auto [mn, mx] = std::minmax_element(cost_.begin(), cost_.end());
    const bool imbalanced = *mx > 1.5 * *mn;
    // This request's prefill time on each worker, given what it caches.
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      const double cached = std::min<double>(match_[w] * bt, r.input_tokens);
      const double speed = v.speeds ? v.speeds[w] : 1.0;
      miss_[w] = estimated_prefill_ms(r.input_tokens - cached,
                                      cfg_.max_batched_tokens) *
                 cfg_.model_factor / speed;
    }
    const double cached = std::min<double>(best_match * bt, r.input_tokens);
    const bool exploit =
        !imbalanced && best_match > 0 && cached > r.input_tokens - cached;
    uint32_t w;
    if (imbalanced) {
      w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
        return compare(cost_[a], cost_[b]);
      });
    } else {
      w = argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
        if (exploit) {
          const bool ha = match_[a] == best_match, hb = match_[b] == best_match;
          if (ha != hb) return ha ? -1 : 1;
        }
        return compare(cost_[a] + miss_[a], cost_[b] + miss_[b]);
      });
    }
    const double prefill = miss_[w];
    window_[w].push_back({r.now_ms, prefill});
    window_sum_[w] += prefill;
    tree_.insert(w, r.blocks, r.n);
    load_.add(r.id, w);
    return w;
  }

  void finished(uint64_t request, uint32_t, uint32_t out) override {
    load_.finish(request);
    outputs_.push_back(out);
    if (outputs_.size() > 1024) outputs_.pop_front();
  }

 private:
  static constexpr double window_ms = 180000;

  void expire(uint32_t w, double now) {
    auto& q = window_[w];
    while (!q.empty() && q.front().first < now - window_ms) {
      window_sum_[w] -= q.front().second;
      q.pop_front();
    }
    if (q.empty()) window_sum_[w] = 0;
  }

  double median_output() {
    if (outputs_.empty()) return 0;
    scratch_.assign(outputs_.begin(), outputs_.end());
    auto mid = scratch_.begin() + scratch_.size() / 2;
    std::nth_element(scratch_.begin(), mid, scratch_.end());
    return *mid;
  }

  policy_config cfg_;
  uint64_t rng_;
  inflight load_;
  routed_index tree_;
  std::vector<std::deque<std::pair<double, double>>> window_;
  std::vector<double> window_sum_;
  std::deque<uint32_t> outputs_;
  std::vector<uint32_t> scratch_;
  std::vector<uint32_t> match_;
  std::vector<double> cost_;
  std::vector<double> miss_;
};

// Mooncake's Conductor (FAST'25), local-prefix form: the instance with the
// least queueing time plus prefill time given its cached prefix.
class mooncake_policy final : public router_policy {
 public:
  explicit mooncake_policy(const policy_config& c)
      : cfg_(c), rng_(c.seed), match_(c.workers), cost_(c.workers) {}
  uint32_t route(const route_request& r, const fleet_view& v) override {
    v.kv->match(r.blocks, r.n, cfg_.workers, match_.data());
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      const double speed = v.speeds ? v.speeds[w] : 1.0;
      const double queue = estimated_prefill_ms(
          static_cast<double>(v.loads[w].pending_prefill_tokens),
          cfg_.max_batched_tokens);
      const double cached = std::min<double>(
          match_[w].total() * static_cast<double>(cfg_.block_tokens),
          r.input_tokens);
      const double prefill = estimated_prefill_ms(r.input_tokens - cached,
                                                  cfg_.max_batched_tokens);
      cost_[w] = (queue + prefill) * cfg_.model_factor / speed;
    }
    return argbest(cfg_.workers, rng_, [&](uint32_t a, uint32_t b) {
      return compare(cost_[a], cost_[b]);
    });
  }

 private:
  policy_config cfg_;
  uint64_t rng_;
  std::vector<tier_match> match_;
  std::vector<double> cost_;
};

// kvmesh: an auction over bids from the workers' exact state, priced in
// cache blocks (core/pricing).
class kvmesh_policy final : public router_policy {
 public:
  explicit kvmesh_policy(const policy_config& c)
      : auction_(c.workers, c.block_tokens, c.price, c.seed),
        bids_(c.workers),
        prices_(c.workers) {}
  uint32_t route(const route_request& r, const fleet_view& v) override {
    v.bids->call_for_bids(r, bids_.data());
    return static_cast<uint32_t>(
        auction_.decide(r.id, r.n, bids_.data(), bids_.size(), prices_.data()));
  }
  void refused(uint64_t request, uint32_t) override {
    auction_.settle(request);
  }
  double expected_queued(uint64_t request) const override {
    return auction_.expected_queued(request);
  }
  void confirmed(uint64_t request, uint32_t, uint64_t count) override {
    auction_.confirmed(request, count);
  }
  void finished(uint64_t, uint32_t, uint32_t out) override {
    auction_.finished(out);
  }

 private:
  auctioneer auction_;
  std::vector<bid> bids_;
  std::vector<price_breakdown> prices_;
};

}  // namespace

const char* to_string(policy_kind k) {
  for (const auto& [kind, name] : names)
    if (kind == k) return name;
  return "unknown";
}

expected<policy_kind> parse_policy(std::string_view name) {
  for (const auto& [kind, n] : names)
    if (name == n) return kind;
  std::string known;
  for (const auto& [kind, n] : names)
    known += std::string(known.empty() ? "" : ", ") + n;
  return make_error(
      ec::invalid_argument,
      "unknown policy '" + std::string(name) + "' (known: " + known + ")");
}

const std::vector<policy_kind>& all_policies() {
  static const std::vector<policy_kind> all = [] {
    std::vector<policy_kind> v;
    for (const auto& [kind, name] : names)
      v.push_back(kind);
    return v;
  }();
  return all;
}

double dynamo_cost(const dynamo_inputs& in, const dynamo_weights& w) {
  const double raw =
      (in.active_prefill_tokens + in.request_tokens) / in.block_tokens;
  const double credit = w.overlap_credit * in.decay * in.device_blocks +
                        w.host_hit * in.host_blocks +
                        w.disk_hit * in.disk_blocks;
  const double prefill = w.prefill_load_scale * std::max(raw - credit, 0.0);
  return prefill + in.active_blocks + in.new_blocks;
}

bool sglang_imbalanced(double max_load, double min_load,
                       const sglang_thresholds& t) {
  return max_load - min_load > t.abs_threshold &&
         max_load > t.rel_threshold * min_load;
}

double estimated_prefill_ms(double tokens, uint32_t max_batched) {
  if (tokens <= 0) return 0;
  const double full = std::floor(tokens / max_batched);
  const double rest = tokens - full * max_batched;
  return full * prefill_ms(max_batched) + prefill_ms(rest);
}

expected<std::unique_ptr<router_policy>> make_policy(policy_kind kind,
                                                     const policy_config& cfg) {
  if (cfg.workers == 0)
    return make_error(ec::invalid_argument, "a policy needs >= 1 worker");
  if (cfg.block_tokens == 0)
    return make_error(ec::invalid_argument, "block size must be >= 1 token");
  std::unique_ptr<router_policy> p;
  switch (kind) {
    case policy_kind::random:
      p.reset(new random_policy(cfg));
      break;
    case policy_kind::round_robin:
      p.reset(new round_robin_policy(cfg));
      break;
    case policy_kind::least_loaded:
      p.reset(new least_loaded_policy(cfg));
      break;
    case policy_kind::prefix:
      p.reset(new prefix_policy(cfg));
      break;
    case policy_kind::dynamo:
      p.reset(new dynamo_policy(cfg));
      break;
    case policy_kind::sglang:
      p.reset(new sglang_policy(cfg));
      break;
    case policy_kind::llmd:
      p.reset(new llmd_policy(cfg));
      break;
    case policy_kind::preble:
      p.reset(new preble_policy(cfg));
      break;
    case policy_kind::mooncake:
      p.reset(new mooncake_policy(cfg));
      break;
    case policy_kind::kvmesh:
      p.reset(new kvmesh_policy(cfg));
      break;
  }
  return p;
}

}  // namespace kvmesh
