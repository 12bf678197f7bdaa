// A real engine's worker state: bids from the mirrored cache, queue and
// occupancy from the requests its front sees.
#include "engines/engine_state.hpp"

#include <algorithm>
#include <limits>

namespace kvmesh {

expected<engine_state> engine_state::make(const engine_state_config& cfg) {
  auto mirror = kv_mirror::make(cfg.block_tokens);
  if (!mirror) return mirror.err();
  auto ledger = worker_ledger::make(cfg.ledger);
  if (!ledger) return ledger.err();
  if (!(cfg.award_ttl_ms > 0))
    return make_error(ec::invalid_argument, "award TTL must be > 0");
  return engine_state(cfg, std::move(*mirror), std::move(*ledger));
}

engine_state::engine_state(const engine_state_config& cfg, kv_mirror mirror,
                           worker_ledger ledger)
    : cfg_(cfg), mirror_(std::move(mirror)), ledger_(std::move(ledger)) {}

uint64_t engine_state::capacity() const {
  return cfg_.gpu_blocks > 0 ? cfg_.gpu_blocks : metrics_.gpu_blocks;
}

bid engine_state::make_bid(const uint64_t* chain, uint32_t n) const {
  bid b = kvmesh::make_bid(mirror_.cache(), ledger_, chain, n);
  // The mirror holds no references: occupancy is what the front's requests
  // hold, and the capacity is the engine's, not the mirror's bound.
  b.active = occupancy_;
  b.active_overlap = 0;
  b.capacity = capacity();
  // Its steps slow with what decodes as the reference engine's do: the
  // decode pass at this occupancy over a full step's prefill. Its wait
  // for space is not modelled (NaN, the make_bid default): the router
  // prices space beyond capacity instead.
  if (occupancy_ > 0 && b.capacity > 0)
    b.step_overhead = decode_overhead(
        static_cast<double>(occupancy_) / static_cast<double>(b.capacity),
        engine_config{}.max_num_batched_tokens);
  // A prompt this engine has just computed is on its GPU, whether or not
  // its KV events have come yet.
  if (!fresh_blocks_.empty()) {
    uint32_t p = 0;
    while (p < n && fresh_blocks_.count(chain[p]))
      ++p;
    if (p > b.gpu + b.host + b.disk) {
      b.gpu = p;
      b.host = b.disk = 0;
    }
  }
  // A real engine's tier credits are not measured here: the routers'
  // configured ones apply.
  b.c_host = std::numeric_limits<double>::quiet_NaN();
  b.c_disk = std::numeric_limits<double>::quiet_NaN();
  return b;
}

void engine_state::reserve(uint64_t request, double share, uint32_t n,
                           double now_ms) {
  ledger_.expire(now_ms);
  // A full table of open bids still yields a valid bid; the auction just
  // cannot hold the work here.
  (void)ledger_.reserve(request, share, now_ms + cfg_.ledger.reservation_ms, n);
}

award_reply engine_state::award(const route_request_msg& r,
                                double expected_queued, double now_ms,
                                bid* held) {
  // Empty unless awards went unanswered: no cost on the hot path.
  if (!withdrawn_.empty() &&
      std::find(withdrawn_.begin(), withdrawn_.end(), r.id) != withdrawn_.end())
    return {false, "withdrawn", {}};
  if (draining_) return {false, "draining", {}};
  if (!healthy()) return {false, unhealthy_reason, {}};
  if (ledger_.should_refuse(r.id, expected_queued))
    return {false, "queue grew since the bid", {}};
  const uint32_t n = static_cast<uint32_t>(r.blocks.size());
  const bid b = make_bid(r.blocks.data(), n);
  if (held) *held = b;
  const double read = ledger_.read_cost(b, n);
  ledger_.accept(r.id, read);
  request& q = requests_[r.id];
  if (q.at == phase::awarded) {
    q.since_ms = now_ms;
    q.n = n;
    q.prompt_tokens = r.input_tokens;
    q.output_tokens = r.output_tokens;
    q.hits = {b.gpu, b.host, b.disk, b.active_overlap};
    if (cfg_.fresh_prefill_ms > 0) q.chain = r.blocks;
  }
  return {true, {}, cfg_.endpoint, ledger_.accepted()};
}

withdraw_reply engine_state::withdraw(uint64_t id) {
  auto it = requests_.find(id);
  if (it != requests_.end() && it->second.at != phase::awarded)
    return {false, cfg_.endpoint, ledger_.accepted()};
  if (it != requests_.end()) {
    ledger_.done(id);
    requests_.erase(it);
  } else {
    ledger_.release(id);  // its bid's reservation, if the award never came
  }
  if (std::find(withdrawn_.begin(), withdrawn_.end(), id) == withdrawn_.end()) {
    if (withdrawn_.size() < withdrawn_window)
      withdrawn_.push_back(id);
    else
      withdrawn_[withdrawn_next_++ % withdrawn_window] = id;
  }
  return {};
}

void engine_state::arrive(const front_request& r, double now_ms) {
  auto it = requests_.find(r.id);
  const uint32_t n = static_cast<uint32_t>(r.blocks.size());
  if (it == requests_.end()) {
    // Not routed here: queue it as an award would, from the front's view
    // of its prompt.
    ++bypassed_;
    const double read = ledger_.read_cost(make_bid(r.blocks.data(), n), n);
    ledger_.accept(r.id, read);
    it = requests_.emplace(r.id, request{}).first;
    it->second.n = n;
    it->second.prompt_tokens = r.prompt_tokens;
    it->second.output_tokens = r.output_tokens;
  } else if (it->second.at != phase::awarded) {
    return;  // arrived already
  }
  if (r.approximate) ++approximate_;
  request& q = it->second;
  // The route's sizes win over the front's estimate from text; a client's
  // max_tokens over the router's guess of the output.
  if (q.prompt_tokens == 0) q.prompt_tokens = r.prompt_tokens;
  if (r.output_tokens > 0) q.output_tokens = r.output_tokens;
  if (!r.blocks.empty())
    q.hits = mirror_.cache().match(r.blocks.data(), r.blocks.size());
  if (q.chain.empty() && !r.approximate && cfg_.fresh_prefill_ms > 0)
    q.chain = r.blocks;
  enter(q, now_ms);
}

void engine_state::enter(request& q, double now_ms) {
  q.at = phase::waiting;
  q.since_ms = now_ms;
  q.holds = blocks_for(uint64_t{q.prompt_tokens} + q.output_tokens);
  if (q.holds < q.n) q.holds = q.n;
  occupancy_ += q.holds;
}

bool engine_state::arrive_awarded(uint64_t id, uint64_t reporter,
                                  double now_ms) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second.at != phase::awarded) return false;
  it->second.reporter = reporter;
  enter(it->second, now_ms);
  return true;
}

std::vector<uint64_t> engine_state::lease(
    uint64_t reporter, const std::vector<uint64_t>& in_flight, double now_ms) {
  std::vector<uint64_t> listed(in_flight);
  std::sort(listed.begin(), listed.end());
  for (uint64_t id : listed)
    if (auto it = requests_.find(id);
        it != requests_.end() && it->second.at == phase::awarded) {
      it->second.reporter = reporter;
      enter(it->second, now_ms);
    }
  std::vector<uint64_t> ended;
  for (const auto& [id, q] : requests_)
    if (q.reporter == reporter && q.at != phase::awarded &&
        !std::binary_search(listed.begin(), listed.end(), id))
      ended.push_back(id);
  return ended;
}

std::vector<uint64_t> engine_state::of_reporter(uint64_t reporter) const {
  std::vector<uint64_t> out;
  for (const auto& [id, q] : requests_)
    if (q.reporter == reporter && q.at != phase::awarded) out.push_back(id);
  return out;
}

bool engine_state::first_token(uint64_t id, double now_ms, tier_match* hits) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second.at == phase::running) return false;
  ledger_.done(id);
  request& q = it->second;
  q.at = phase::running;
  if (hits) *hits = q.hits;
  if (!q.chain.empty() && cfg_.fresh_prefill_ms > 0) {
    if (fresh_.size() >= max_fresh) drop_fresh();
    for (uint64_t h : q.chain)
      ++fresh_blocks_[h];
    fresh_.push_back({now_ms, std::move(q.chain)});
    q.chain = {};
  }
  return true;
}

void engine_state::drop_fresh() {
  for (uint64_t h : fresh_.front().chain)
    if (auto it = fresh_blocks_.find(h);
        it != fresh_blocks_.end() && --it->second == 0)
      fresh_blocks_.erase(it);
  fresh_.pop_front();
}

bool engine_state::finish(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  ledger_.done(id);
  occupancy_ -= it->second.holds;
  requests_.erase(it);
  ++completed_;
  return true;
}

std::optional<double> engine_state::arrived_ms(uint64_t id) const {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second.at == phase::awarded)
    return std::nullopt;
  return it->second.since_ms;
}

size_t engine_state::expire(double now_ms) {
  ledger_.expire(now_ms);
  while (!fresh_.empty() &&
         now_ms - fresh_.front().at_ms >= cfg_.fresh_prefill_ms)
    drop_fresh();
  size_t dropped = 0;
  for (auto it = requests_.begin(); it != requests_.end();) {
    if (it->second.at == phase::awarded &&
        now_ms - it->second.since_ms >= cfg_.award_ttl_ms) {
      ledger_.done(it->first);
      it = requests_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  abandoned_ += dropped;
  return dropped;
}

void engine_state::set_metrics(const engine_metrics& m) {
  metrics_ = m;
}

worker_status engine_state::status() const {
  worker_status s;
  s.worker = ledger_.config().id;
  s.queued = ledger_.queued();
  s.reserved = ledger_.reserved();
  for (const auto& [id, q] : requests_) {
    if (q.at == phase::waiting) ++s.waiting;
    if (q.at == phase::running) ++s.running;
  }
  s.gpu_blocks = mirror_.blocks(tier::gpu);
  s.host_blocks = mirror_.blocks(tier::host);
  s.disk_blocks = mirror_.blocks(tier::disk);
  s.active = occupancy_;
  s.completed = completed_;
  s.draining = draining_;
  s.capacity = capacity();
  s.speed = ledger_.config().speed;
  s.unhealthy = !healthy();
  s.endpoint = cfg_.endpoint;
  s.models = metrics_.models;
  s.engine = cfg_.engine;
  s.engine_rank = cfg_.engine_rank;
  return s;
}

}  // namespace kvmesh
