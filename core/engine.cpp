// The engine model (after Dynamo's mocker): scheduling, KV blocks, timing.
#include "core/engine.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace kvmesh {

double prefill_ms(double t) {
  if (t <= 0) return 0;
  return 4.209989e-07 * t * t + 1.518344e-02 * t + 16.50142;
}

double decode_ms(double p) {
  p = std::clamp(p, 0.0, 1.0);
  return std::max(1.0, -25.74 * p * p + 54.01 * p + 5.74);
}

double decode_overhead(double kv_fraction, uint32_t batched_tokens) {
  return decode_ms(kv_fraction) / prefill_ms(batched_tokens);
}

expected<engine> engine::make(const engine_config& cfg) {
  if (cfg.block_tokens == 0)
    return make_error(ec::invalid_argument,
                      "block size must be at least 1 token");
  if (cfg.max_num_batched_tokens == 0)
    return make_error(ec::invalid_argument,
                      "max_num_batched_tokens must be at least 1");
  if (cfg.max_num_seqs == 0)
    return make_error(ec::invalid_argument, "max_num_seqs must be at least 1");
  if (!(cfg.speed > 0) || !(cfg.model_factor > 0))
    return make_error(ec::invalid_argument,
                      "speed and model factor must be > 0");
  if (!(cfg.kv_bytes_per_token >= 0) || !(cfg.host_bandwidth > 0) ||
      !(cfg.disk_bandwidth > 0))
    return make_error(
        ec::invalid_argument,
        "KV bytes per token must be >= 0 and tier bandwidths > 0");
  auto cache = tiered_cache::make(cfg.cache);
  if (!cache) return cache.err();
  return engine{cfg, std::move(*cache)};
}

engine::engine(const engine_config& cfg, tiered_cache cache)
    : cfg_(cfg), cache_(std::move(cache)) {}

double engine::load_ms(tier t) const {
  const double bytes = cfg_.kv_bytes_per_token * cfg_.block_tokens;
  switch (t) {
    case tier::gpu:
      return 0;
    case tier::host:
      return 1e3 * bytes / cfg_.host_bandwidth;
    case tier::disk:
      return 1e3 * bytes / cfg_.disk_bandwidth;
  }
  return 0;
}

double engine::recompute_ms() const {
  const double full = cfg_.max_num_batched_tokens;
  const double b = std::min<double>(cfg_.block_tokens, full);
  return (prefill_ms(full) - prefill_ms(full - b)) * cfg_.model_factor /
         cfg_.speed;
}

double engine::step_overhead() const {
  if (running_.empty()) return 0;
  return decode_overhead(kv_fraction(), cfg_.max_num_batched_tokens);
}

double engine::space_wait_ms(uint64_t blocks) const {
  uint64_t demand = blocks;
  for (uint32_t w : waiting_)
    demand += blocks_for(context_tokens(seqs_[w]));
  const uint64_t free = cache_.gpu_available();
  const size_t r = running_.size();
  if (demand <= free || r == 0) return 0;
  const double active = static_cast<double>(cache_.active());
  const double per_sequence = active / static_cast<double>(r);
  if (!(per_sequence > 0)) return 0;
  // Finishes needed to free the deficit, at most every running sequence.
  const double deficit = static_cast<double>(demand - free);
  const size_t k = std::min<size_t>(
      r, static_cast<size_t>(std::ceil(deficit / per_sequence)));
  double mean_out = mean_output_tokens();
  if (!(mean_out > 0))
    for (uint32_t slot : running_)
      mean_out = std::max<double>(mean_out, seqs_[slot].generated + 1);
  double steps = 0;
  for (size_t i = 0; i < k; ++i)
    steps += mean_out / static_cast<double>(r - i);
  return steps * decode_ms(kv_fraction()) * cfg_.model_factor / cfg_.speed;
}

status engine::check(engine_request& req) const {
  if (req.prompt_tokens == 0)
    return make_error(ec::empty_input, "request " + std::to_string(req.id) +
                                           ": prompt_tokens is 0");
  if (req.blocks.size() > blocks_for(req.prompt_tokens))
    return make_error(ec::invalid_argument,
                      "request " + std::to_string(req.id) + ": " +
                          std::to_string(req.blocks.size()) + " blocks for " +
                          std::to_string(req.prompt_tokens) + " prompt tokens");
  if (req.output_tokens == 0)
    req.output_tokens = 1;  // an engine always produces the first token
  // A request that could never fit would wait forever: refuse it. The last
  // output token's KV is never written.
  const uint64_t tokens = uint64_t{req.prompt_tokens} + req.output_tokens - 1;
  const uint64_t need = (tokens + cfg_.block_tokens - 1) / cfg_.block_tokens;
  if (need > cfg_.cache.gpu_blocks)
    return make_error(ec::capacity_exceeded,
                      "request " + std::to_string(req.id) + " needs " +
                          std::to_string(need) + " KV blocks, GPU has " +
                          std::to_string(cfg_.cache.gpu_blocks));
  return ok;
}

status engine::submit(engine_request req, double now_ms) {
  if (auto st = check(req); !st) {
    ++refused_;
    return st;
  }
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = static_cast<uint32_t>(seqs_.size());
    seqs_.emplace_back();
  }
  seqs_[slot] = sequence{};
  seqs_[slot].req = std::move(req);
  seqs_[slot].arrival_ms = now_ms;
  waiting_.push_back(slot);
  return ok;
}

bool engine::cancel(uint64_t request) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    sequence& s = seqs_[*it];
    if (s.req.id != request) continue;
    if (s.first_token_sent) return false;  // preempted after its prefill
    release_blocks(s);
    s.req.blocks = {};
    free_.push_back(*it);
    waiting_.erase(it);
    return true;
  }
  for (size_t i = 0; i < running_.size(); ++i) {
    sequence& s = seqs_[running_[i]];
    if (s.req.id != request) continue;
    if (s.first_token_sent || s.cancelled) return false;
    // Part of the step in progress: dropped when it ends.
    if (in_step()) {
      s.cancelled = true;
      return true;
    }
    release_blocks(s);
    s.req.blocks = {};
    free_.push_back(running_[i]);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    return true;
  }
  return false;
}

uint64_t engine::pending_prefill_tokens() const {
  uint64_t sum = 0;
  for (uint32_t s : waiting_)
    sum += context_tokens(seqs_[s]) - seqs_[s].done_tokens;
  for (uint32_t s : running_)
    if (seqs_[s].done_tokens < seqs_[s].prefill_end)
      sum += seqs_[s].prefill_end - seqs_[s].done_tokens;
  return sum;
}

// Takes the sequence's cached prefix and allocates the rest of its context.
// Returns false (holding nothing) when the GPU cannot make room.
bool engine::admit(uint32_t slot, double& load) {
  sequence& s = seqs_[slot];
  const auto& blocks = s.req.blocks;
  // The longest prefix cached in any tier.
  size_t hit = 0;
  uint32_t in_tier[tier_count] = {0, 0, 0};
  for (tier t; hit < blocks.size() && cache_.find(blocks[hit], &t); ++hit)
    ++in_tier[static_cast<size_t>(t)];
  const uint32_t context = context_tokens(s);
  const uint64_t total = blocks_for(context);
  // Take GPU hits first so room-making cannot evict them; then host hits,
  // whose freed host slots absorb the GPU evictions; then disk hits. In that
  // order no eviction cascade can push one of this prefix's blocks out.
  double load_time = 0;
  for (size_t pass = 0; pass < tier_count; ++pass) {
    if (pass == 1 && cache_.gpu_available() < total - in_tier[0]) {
      for (size_t i = 0; i < hit; ++i)
        if (tier t; cache_.find(blocks[i], &t) && t == tier::gpu)
          cache_.release(blocks[i]);
      return false;  // lower-tier hits and misses need a GPU block each
    }
    for (size_t i = 0; i < hit; ++i) {
      tier t;
      if (cache_.find(blocks[i], &t) && static_cast<size_t>(t) == pass) {
        cache_.acquire(blocks[i], &t);
        load_time += load_ms(t);
      }
    }
  }
  if (!cache_.allocate(total - hit)) {
    // Cannot happen after the check above; keep the accounting whole anyway.
    for (size_t i = 0; i < hit; ++i)
      cache_.release(blocks[i]);
    return false;
  }
  s.held = static_cast<uint32_t>(hit);
  s.anon = static_cast<uint32_t>(total - hit);
  // The last token is always computed, so that the step yields logits.
  const uint64_t cached =
      std::min<uint64_t>(uint64_t{hit} * cfg_.block_tokens, context - 1);
  s.done_tokens = static_cast<uint32_t>(cached);
  s.prefill_end = context;
  if (!s.first_token_sent) std::copy(in_tier, in_tier + tier_count, s.hits);
  load += load_time;
  return true;
}

void engine::release_blocks(sequence& s) {
  for (uint32_t i = 0; i < s.held; ++i)
    cache_.release(s.req.blocks[i]);
  cache_.free_anonymous(s.anon);
  s.held = 0;
  s.anon = 0;
}

void engine::preempt(uint32_t slot) {
  sequence& s = seqs_[slot];
  release_blocks(s);
  s.done_tokens = 0;
  s.chunk = 0;
  s.decoding = false;
  ++preemptions_;
  engine_event e{engine_event::preempted};
  e.request = s.req.id;
  pending_.push_back(e);
  waiting_.push_front(slot);
}

void engine::flush_cache_events(double t) {
  for (const cache_event& c : cache_events_) {
    engine_event e{c.kind == cache_event::stored ? engine_event::stored
                                                 : engine_event::removed};
    e.where = c.where;
    e.hash = c.hash;
    e.root = c.root;
    e.time_ms = t;
    pending_.push_back(e);
  }
  cache_events_.clear();
}

std::optional<double> engine::start_step(double now) {
  if (!busy() || in_step()) return std::nullopt;
  cache_.set_event_sink(&cache_events_);
  uint32_t budget = cfg_.max_num_batched_tokens;
  uint64_t prefill_tokens = 0;
  bool decodes = false;
  double load = 0;
  // Running sequences first, in admission order: chunks of unfinished
  // prefills, one token for the others.
  for (size_t i = 0; i < running_.size(); ++i) {
    const uint32_t slot = running_[i];
    sequence& s = seqs_[slot];
    const uint32_t context = context_tokens(s);
    if (s.done_tokens < s.prefill_end) {
      const uint32_t chunk = std::min(s.prefill_end - s.done_tokens, budget);
      s.chunk = chunk;
      budget -= chunk;
      prefill_tokens += chunk;
      continue;
    }
    if (budget == 0) continue;
    // Decoding writes the last token's KV: it needs a slot. Free one by
    // preempting the newest running sequence (vLLM's and the mocker's LIFO
    // rule), possibly this one.
    bool self_preempted = false;
    while (blocks_for(context) > s.held + s.anon) {
      if (cache_.allocate(1)) {
        ++s.anon;
        continue;
      }
      const uint32_t victim = running_.back();
      running_.pop_back();
      preempt(victim);
      if (victim == slot) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // everything after it was preempted already
    s.decoding = true;
    --budget;
    decodes = true;
  }
  // Admit waiting sequences while seats and budget last.
  while (!waiting_.empty() && running_.size() < cfg_.max_num_seqs &&
         budget > 0) {
    const uint32_t slot = waiting_.front();
    if (!admit(slot, load)) break;  // head-of-line: wait for blocks to free up
    waiting_.pop_front();
    running_.push_back(slot);
    sequence& s = seqs_[slot];
    const uint32_t chunk = std::min(s.prefill_end - s.done_tokens, budget);
    s.chunk = chunk;
    budget -= chunk;
    prefill_tokens += chunk;
  }
  if (running_.empty()) {
    // Nothing could run (the head request does not fit yet); no step.
    cache_.set_event_sink(nullptr);
    flush_cache_events(now);
    return std::nullopt;
  }
  // Prefill of the batch's new tokens plus one decode pass when any sequence
  // decodes (a mixed step). A prefill's first token is sampled from its own
  // forward pass, so a prefill-only step costs the prefill alone. Loads from
  // host and disk add on top, unaffected by compute speed.
  double compute = prefill_ms(static_cast<double>(prefill_tokens));
  if (decodes) {
    compute += decode_ms(kv_fraction());
  }
  const double duration = compute * cfg_.model_factor / cfg_.speed + load;
  flush_cache_events(now);
  cache_.set_event_sink(nullptr);
  step_start_ = now;
  step_end_ = now + duration;
  ++steps_;
  return step_end_;
}

void engine::finish_step(std::vector<engine_event>& out) {
  if (!in_step()) return;
  const double end = step_end_;
  for (auto& e : pending_)
    if (e.time_ms == 0) e.time_ms = step_start_;
  cache_.set_event_sink(&cache_events_);
  // Swapped with running_ below: both keep their capacity, and a step
  // allocates nothing here.
  std::vector<uint32_t>& still_running = still_running_;
  still_running.clear();
  for (uint32_t slot : running_) {
    sequence& s = seqs_[slot];
    if (s.cancelled) {
      // Taken back during the step (cancel): nothing of it is reported,
      // what it held is freed.
      s.chunk = 0;
      s.decoding = false;
      release_blocks(s);
      s.req.blocks = {};
      free_.push_back(slot);
      continue;
    }
    bool token = false;
    if (s.chunk > 0) {
      s.done_tokens += s.chunk;
      s.chunk = 0;
      // Full blocks (and, once the prompt is done, its partial tail block
      // when it has a hash) become cached.
      uint32_t full = s.done_tokens / cfg_.block_tokens;
      if (s.done_tokens >= s.req.prompt_tokens)
        full = blocks_for(s.req.prompt_tokens);
      const uint32_t hashed =
          std::min<uint32_t>(full, static_cast<uint32_t>(s.req.blocks.size()));
      for (; s.held < hashed; ++s.held) {
        cache_.commit(s.req.blocks[s.held], s.req.blocks[0]);
        --s.anon;
      }
      if (s.done_tokens == s.prefill_end) {
        token = true;
      } else {
        engine_event e{engine_event::progress};
        e.request = s.req.id;
        e.time_ms = end;
        e.remaining = s.prefill_end - s.done_tokens;
        pending_.push_back(e);
      }
    } else if (s.decoding) {
      s.decoding = false;
      s.done_tokens = context_tokens(s);  // the last token's KV is written
      token = true;
    }
    if (token) {
      ++s.generated;
      if (!s.first_token_sent) {
        s.first_token_sent = true;
        s.first_ms = end;
        engine_event e{engine_event::first_token};
        e.request = s.req.id;
        e.time_ms = end;
        e.arrival_ms = s.arrival_ms;
        std::copy(s.hits, s.hits + tier_count, e.hits);
        pending_.push_back(e);
      }
      if (s.generated >= s.req.output_tokens) {
        ++finished_;
        finished_tokens_ += s.generated;
        release_blocks(s);
        engine_event e{engine_event::finished};
        e.request = s.req.id;
        e.time_ms = end;
        e.arrival_ms = s.arrival_ms;
        e.first_ms = s.first_ms;
        e.generated = s.generated;
        pending_.push_back(e);
        s.req.blocks = {};
        free_.push_back(slot);
        continue;
      }
    }
    still_running.push_back(slot);
  }
  running_.swap(still_running);
  flush_cache_events(end);
  cache_.set_event_sink(nullptr);
  for (auto& e : pending_)
    out.push_back(e);
  pending_.clear();
  step_start_ = step_end_ = -1;
}

}  // namespace kvmesh
