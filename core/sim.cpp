// Discrete-event trace simulation of a routed fleet of engine models.
#include "core/sim.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <memory>
#include <queue>
#include <string>
#include <unordered_set>

#include "core/block_index.hpp"
#include "core/worker.hpp"

namespace kvmesh {

status validate(const sim_config& cfg) {
  auto bad = [](const std::string& what) {
    return make_error(ec::invalid_argument, what);
  };
  if (cfg.workers == 0) return bad("--workers must be at least 1");
  if (cfg.routers == 0) return bad("--routers must be at least 1");
  if (cfg.block_tokens == 0) return bad("--block-tokens must be at least 1");
  if (cfg.gpu_blocks == 0) return bad("--gpu-blocks must be at least 1");
  if (!(cfg.speedup > 0) || !std::isfinite(cfg.speedup))
    return bad("--speedup must be a positive number");
  if (!(cfg.model_factor > 0) || !std::isfinite(cfg.model_factor))
    return bad("--model-factor must be a positive number");
  if (!(cfg.state_delay_ms >= 0) || !std::isfinite(cfg.state_delay_ms))
    return bad("--state-delay-ms must be >= 0");
  if (!(cfg.auction_ms >= 0) || !std::isfinite(cfg.auction_ms))
    return bad("--auction-ms must be >= 0");
  if (!(cfg.refuse_growth >= 0) || !std::isfinite(cfg.refuse_growth))
    return bad("--refuse-growth must be >= 0");
  if (cfg.max_auctions == 0) return bad("--max-auctions must be at least 1");
  if (!(cfg.queued_sample_ms >= 0) || !std::isfinite(cfg.queued_sample_ms))
    return bad("queued_sample_ms must be >= 0");
  if (cfg.queued_sample_ms > 0 && cfg.queued_max_samples < 2)
    return bad("queued_max_samples must be at least 2");
  if (!cfg.worker_speeds.empty()) {
    if (cfg.worker_speeds.size() != cfg.workers)
      return bad("--worker-speeds has " +
                 std::to_string(cfg.worker_speeds.size()) + " entries for " +
                 std::to_string(cfg.workers) + " workers");
    for (double s : cfg.worker_speeds)
      if (!(s > 0) || !std::isfinite(s))
        return bad("--worker-speeds entries must be positive numbers");
  }
  return ok;
}

namespace {

struct event {
  enum kind_t : uint8_t { arrival, step_end, award };
  double time;
  uint64_t seq;
  kind_t kind;
  uint32_t a;  // request index (arrival, award) or worker (step_end)
  uint32_t b;  // worker (award)
};

struct later {
  bool operator()(const event& x, const event& y) const {
    return x.time > y.time || (x.time == y.time && x.seq > y.seq);
  }
};

struct record {
  double arrival = 0;
  uint32_t auctions = 0;  // kvmesh: re-auctions after refusals
  double first = -1;
  double finish = -1;
  uint32_t router = 0;
  uint32_t worker = 0;
  uint32_t hits[tier_count] = {0, 0, 0};
};

struct kv_entry {
  double time;
  uint32_t worker;
  cache_event e;
};

class simulation final : public bid_source {
 public:
  simulation(const sim_config& cfg, const std::vector<trace_request>& trace,
             policy_kind kind)
      : cfg_(cfg), trace_(trace), kind_(kind) {}

  expected<sim_result> run(const std::function<void(double)>& progress);

  void call_for_bids(const route_request& r, bid* out) override {
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      auto& ws = workers_[w];
      ws.ledger->expire(now_);
      out[w] = make_bid(*ws.eng, *ws.ledger, r.blocks, r.n);
      // Each bidder holds its expected share of the request: the in-flight
      // work of open auctions is visible, spread as a balanced fleet absorbs
      // it (by speed), so it shifts every bidder's time alike and biases no
      // one. Holding each bidder's own read cost instead made the workers
      // caching the open requests' prefixes look lighter, the opposite of
      // where that work heads; holding the full size at every bidder made
      // slow GPUs look far busier than they are (both measured worse, see
      // docs/benchmarks.md). A refused reservation (too many open bids)
      // still leaves a valid bid.
      const double amount = expected_share(r.n, speeds_[w], total_speed_);
      (void)ws.ledger->reserve(r.id, amount, now_ + reservation_ms(), r.n);
    }
  }

 private:
  struct worker {
    std::unique_ptr<engine> eng;
    std::unique_ptr<worker_ledger> ledger;
    bool stepping = false;
    bool kicked = false;  // in kicks_: starts a step after this instant
    std::deque<std::pair<double, load_report>> reports;
  };

  double reservation_ms() const { return 10 * cfg_.auction_ms + 100; }

  void push(double t, event::kind_t k, uint32_t a, uint32_t b = 0) {
    queue_.push(event{t, seq_++, k, a, b});
  }

  void publish(uint32_t w) {
    worker& ws = workers_[w];
    load_report r;
    r.waiting = static_cast<uint32_t>(ws.eng->waiting());
    r.running = static_cast<uint32_t>(ws.eng->running());
    r.kv_usage = static_cast<double>(ws.eng->cache().active()) /
                 static_cast<double>(cfg_.gpu_blocks);
    r.pending_prefill_tokens = ws.eng->pending_prefill_tokens();
    queued_[w] =
        static_cast<double>(r.pending_prefill_tokens) / cfg_.block_tokens;
    ws.reports.emplace_back(now_, r);
  }

  // Worker w may start a step once every event of this instant is done
  // (engine::step_due): arrivals and awards that come together share it.
  void kick(uint32_t w) {
    worker& ws = workers_[w];
    if (ws.stepping || ws.kicked) return;
    ws.kicked = true;
    kicks_.push_back(w);
  }

  // Starts the kicked workers' steps, in the order they were kicked, unless
  // more events of this instant are to come.
  void start_kicked() {
    if (kicks_.empty()) return;
    const double next = queue_.empty() ? std::numeric_limits<double>::infinity()
                                       : queue_.top().time;
    if (next <= now_) return;
    for (uint32_t w : kicks_) {
      worker& ws = workers_[w];
      ws.kicked = false;
      if (!ws.eng->step_due(now_, next)) continue;
      if (auto end = ws.eng->start_step(now_)) {
        ws.stepping = true;
        push(*end, event::step_end, w);
        publish(w);
      }
    }
    kicks_.clear();
  }

  void submit(uint32_t idx, uint32_t w) {
    const trace_request& t = trace_[idx];
    engine_request req;
    req.id = idx;
    req.prompt_tokens = t.input_tokens;
    req.output_tokens = std::max<uint32_t>(1, t.output_tokens);
    const size_t max_blocks =
        (size_t{t.input_tokens} + cfg_.block_tokens - 1) / cfg_.block_tokens;
    req.blocks.assign(t.blocks.begin(),
                      t.blocks.begin() + static_cast<long>(std::min(
                                             max_blocks, t.blocks.size())));
    records_[idx].worker = w;
    ++assigned_[w];
    if (auto st = workers_[w].eng->submit(std::move(req), now_); !st) {
      // As a live worker does: the refused request holds no read work.
      workers_[w].ledger->done(idx);
      routers_[records_[idx].router]->failed(idx, w);
      ++refused_;
      return;
    }
    kick(w);
    publish(w);
  }

  // Brings the routers' delayed views up to now - delay.
  void refresh_views() {
    const double horizon = now_ - cfg_.state_delay_ms;
    while (!kv_log_.empty() && kv_log_.front().time <= horizon) {
      index_.apply(kv_log_.front().worker, kv_log_.front().e);
      kv_log_.pop_front();
    }
    for (uint32_t w = 0; w < cfg_.workers; ++w) {
      auto& reps = workers_[w].reports;
      while (reps.size() > 1 && reps[1].first <= horizon)
        reps.pop_front();
      loads_[w] =
          reps.front().first <= horizon ? reps.front().second : load_report{};
    }
  }

  void route(uint32_t idx) {
    const trace_request& t = trace_[idx];
    record& rec = records_[idx];
    refresh_views();
    route_request r;
    r.id = idx;
    r.now_ms = now_;
    r.blocks = t.blocks.data();
    r.n = static_cast<uint32_t>(t.blocks.size());
    r.input_tokens = t.input_tokens;
    fleet_view v;
    v.speeds = speeds_.data();
    v.kv = &index_;
    v.loads = loads_.data();
    v.bids = this;
    const uint32_t w = routers_[rec.router]->route(r, v);
    if (kind_ == policy_kind::kvmesh) {
      push(now_ + cfg_.auction_ms, event::award, idx, w);
    } else {
      submit(idx, w);
    }
  }

  void award(uint32_t idx, uint32_t winner) {
    record& rec = records_[idx];
    if (rec.auctions + 1 < cfg_.max_auctions &&
        workers_[winner].ledger->should_refuse(
            idx, routers_[rec.router]->expected_queued(idx))) {
      // Awards from other routers landed since the bid: the router runs a
      // fresh auction on the state as it is now.
      ++rec.auctions;
      ++reauctions_;
      routers_[rec.router]->refused(idx, winner);
      for (uint32_t w = 0; w < cfg_.workers; ++w)
        workers_[w].ledger->release(idx);
      route(idx);
      return;
    }
    for (uint32_t w = 0; w < cfg_.workers; ++w)
      if (w != winner) workers_[w].ledger->release(idx);
    // The winner books the request at its read cost as of now.
    const trace_request& t = trace_[idx];
    worker& ws = workers_[winner];
    const uint32_t n = static_cast<uint32_t>(t.blocks.size());
    ws.ledger->accept(
        idx, ws.ledger->read_cost(
                 make_bid(ws.eng->cache(), *ws.ledger, t.blocks.data(), n), n));
    routers_[records_[idx].router]->confirmed(idx, winner,
                                              ws.ledger->accepted());
    submit(idx, winner);
  }

  void step_end(uint32_t w) {
    worker& ws = workers_[w];
    ws.stepping = false;
    events_.clear();
    ws.eng->finish_step(events_);
    for (const engine_event& e : events_) {
      switch (e.kind) {
        case engine_event::stored:
        case engine_event::removed:
          kv_log_.push_back(kv_entry{
              now_, w,
              cache_event{e.kind == engine_event::stored ? cache_event::stored
                                                         : cache_event::removed,
                          e.where, e.hash}});
          break;
        case engine_event::progress:
          ws.ledger->progress(
              e.request, static_cast<double>(e.remaining) / cfg_.block_tokens);
          break;
        case engine_event::first_token: {
          record& rec = records_[e.request];
          rec.first = now_;
          std::copy(e.hits, e.hits + tier_count, rec.hits);
          ws.ledger->done(e.request);
          routers_[rec.router]->first_token(e.request, w);
          break;
        }
        case engine_event::finished: {
          record& rec = records_[e.request];
          rec.finish = now_;
          ++completed_;
          routers_[rec.router]->finished(
              e.request, w,
              std::max<uint32_t>(1, trace_[e.request].output_tokens));
          break;
        }
        case engine_event::preempted:
          break;
      }
    }
    kick(w);
    publish(w);
  }

  void account_imbalance(double t) {
    const double dt = t - last_time_;
    last_time_ = t;
    if (dt <= 0) return;
    double sum = 0, mx = 0;
    for (double q : queued_) {
      sum += q;
      mx = std::max(mx, q);
    }
    if (sum <= 0) return;
    imbalance_area_ += dt * mx / (sum / static_cast<double>(queued_.size()));
    imbalance_time_ += dt;
  }

  const sim_config& cfg_;
  const std::vector<trace_request>& trace_;
  policy_kind kind_;
  std::vector<worker> workers_;
  std::vector<double> speeds_;
  double total_speed_ = 0;
  std::vector<std::unique_ptr<router_policy>> routers_;
  std::priority_queue<event, std::vector<event>, later> queue_;
  std::vector<uint32_t> kicks_;  // workers to start after this instant
  uint64_t seq_ = 0;
  double now_ = 0;
  std::vector<record> records_;
  std::vector<uint64_t> assigned_;
  std::vector<engine_event> events_;
  std::deque<kv_entry> kv_log_;
  block_index index_;
  std::vector<load_report> loads_;
  std::vector<double> queued_;
  double last_time_ = 0;
  double imbalance_area_ = 0;
  double imbalance_time_ = 0;
  uint64_t completed_ = 0;
  uint64_t refused_ = 0;
  uint64_t reauctions_ = 0;
};

expected<sim_result> simulation::run(
    const std::function<void(double)>& progress) {
  if (auto st = validate(cfg_); !st) return st.err();
  if (trace_.empty())
    return make_error(ec::empty_input, "the trace has no requests");
  const uint32_t n = cfg_.workers;
  speeds_ = cfg_.worker_speeds.empty() ? std::vector<double>(n, 1.0)
                                       : cfg_.worker_speeds;
  total_speed_ = 0;
  for (double sp : speeds_)
    total_speed_ += sp;
  workers_.resize(n);
  for (uint32_t w = 0; w < n; ++w) {
    auto eng = engine::make(fleet_engine_config(cfg_, w));
    if (!eng) return eng.err();
    workers_[w].eng = std::make_unique<engine>(std::move(*eng));
    const worker_config wc = fleet_worker_config(cfg_, w, *workers_[w].eng);
    auto ledger = worker_ledger::make(wc);
    if (!ledger) return ledger.err();
    workers_[w].ledger = std::make_unique<worker_ledger>(std::move(*ledger));
    workers_[w].reports.emplace_back(-std::numeric_limits<double>::infinity(),
                                     load_report{});
  }
  loads_.assign(n, load_report{});
  kicks_.reserve(n);
  queued_.assign(n, 0);
  assigned_.assign(n, 0);
  records_.assign(trace_.size(), record{});
  for (uint32_t r = 0; r < cfg_.routers; ++r) {
    policy_config pc;
    pc.workers = n;
    pc.block_tokens = cfg_.block_tokens;
    pc.gpu_blocks = cfg_.gpu_blocks;
    pc.model_factor = cfg_.model_factor;
    pc.max_batched_tokens = cfg_.engine.max_num_batched_tokens;
    pc.price = cfg_.price;
    pc.seed = router_seed(cfg_.seed, r);
    auto p = make_policy(kind_, pc);
    if (!p) return p.err();
    routers_.push_back(std::move(*p));
  }
  // Arrivals enter the queue one at a time, keeping it small.
  size_t next = 0;
  auto push_arrival = [&] {
    if (next < trace_.size()) {
      push(trace_[next].arrival_ms / cfg_.speedup, event::arrival,
           static_cast<uint32_t>(next));
      ++next;
    }
  };
  push_arrival();
  const size_t tick = std::max<size_t>(1, trace_.size() / 20);
  std::unique_ptr<queued_sampler> sampler;
  if (cfg_.queued_sample_ms > 0)
    sampler = std::make_unique<queued_sampler>(
        cfg_.queued_sample_ms, cfg_.queued_max_samples,
        trace_.front().arrival_ms / cfg_.speedup);
  while (!queue_.empty()) {
    const event e = queue_.top();
    queue_.pop();
    account_imbalance(e.time);
    // Queues change only at events: what they hold now held until e.time.
    if (sampler)
      while (sampler->next_ms() <= e.time)
        sampler->add(queued_);
    now_ = e.time;
    switch (e.kind) {
      case event::arrival:
        push_arrival();
        records_[e.a].arrival = now_;
        records_[e.a].router = e.a % cfg_.routers;
        route(e.a);
        if (progress && (e.a + 1) % tick == 0)
          progress(static_cast<double>(e.a + 1) / trace_.size());
        break;
      case event::award:
        award(e.a, e.b);
        break;
      case event::step_end:
        step_end(e.a);
        break;
    }
    start_kicked();
  }
  // Results.
  sim_result res;
  res.policy = kind_;
  res.requests = trace_.size();
  res.completed = completed_;
  res.assigned = assigned_;
  std::vector<request_outcome> outcomes(records_.size());
  for (size_t i = 0; i < records_.size(); ++i) {
    const record& rec = records_[i];
    request_outcome& o = outcomes[i];
    o.arrival_ms = rec.arrival;
    o.worker = rec.worker;
    o.prompt_blocks = static_cast<uint32_t>(trace_[i].blocks.size());
    o.output_tokens = std::max<uint32_t>(1, trace_[i].output_tokens);
    std::copy(rec.hits, rec.hits + tier_count, o.hits);
    if (rec.first >= 0) o.ttft_ms = rec.first - rec.arrival;
    if (rec.finish >= 0) o.e2e_ms = rec.finish - rec.arrival;
  }
  summarize_outcomes(outcomes, res);
  res.imbalance = imbalance_time_ > 0 ? imbalance_area_ / imbalance_time_ : 1;
  for (const auto& ws : workers_)
    res.preemptions += ws.eng->preemptions();
  res.refused = refused_;
  res.reauctions = reauctions_;
  if (sampler) {
    sampler->add(queued_);  // as the run ended
    res.queued_over_time = sampler->take();
  }
  return res;
}

}  // namespace

queued_sampler::queued_sampler(double interval_ms, size_t max, double start_ms)
    : interval_ms_(interval_ms),
      max_(std::max<size_t>(2, max)),
      next_ms_(start_ms) {
  samples_.reserve(max_);
}

void queued_sampler::add(const std::vector<double>& queued) {
  const double due = next_ms_;
  if (samples_.size() == max_) {
    // Keep samples 0, 2, 4, ...: the interval doubles and the spacing stays
    // even. With an odd `max` the sample due now falls between two of the
    // new spacing's and is skipped.
    size_t kept = 0;
    for (size_t i = 0; i < samples_.size(); i += 2, ++kept)
      if (kept != i) samples_[kept] = std::move(samples_[i]);
    samples_.resize(kept);
    interval_ms_ *= 2;
    next_ms_ = samples_.back().time_ms + interval_ms_;
    if (next_ms_ > due) return;
  }
  samples_.push_back(queued_sample{next_ms_, queued});
  next_ms_ += interval_ms_;
}

void queued_sampler::skip_to(double now_ms) {
  if (next_ms_ <= now_ms)
    next_ms_ +=
        interval_ms_ * (std::floor((now_ms - next_ms_) / interval_ms_) + 1);
}

double imbalance_of(const std::vector<queued_sample>& samples) {
  if (samples.size() < 2) return std::numeric_limits<double>::quiet_NaN();
  double area = 0, time = 0;
  for (size_t i = 0; i + 1 < samples.size(); ++i) {
    const double dt = samples[i + 1].time_ms - samples[i].time_ms;
    const auto& q = samples[i].queued;
    double sum = 0, mx = 0;
    for (double v : q) {
      sum += v;
      mx = std::max(mx, v);
    }
    if (!(dt > 0) || !(sum > 0)) continue;
    area += dt * mx / (sum / static_cast<double>(q.size()));
    time += dt;
  }
  return time > 0 ? area / time : 1;
}

void summarize_outcomes(const std::vector<request_outcome>& outcomes,
                        sim_result& res) {
  std::vector<double> ttft, e2e, itl;
  uint64_t blocks = 0, hits[tier_count] = {0, 0, 0}, out_tokens = 0;
  double first = std::numeric_limits<double>::infinity(), last = 0;
  res.worker_of.clear();
  for (const request_outcome& o : outcomes) {
    res.worker_of.push_back(o.worker);
    if (o.ttft_ms < 0) continue;
    ttft.push_back(o.ttft_ms);
    blocks += o.prompt_blocks;
    for (size_t k = 0; k < tier_count; ++k)
      hits[k] += o.hits[k];
    first = std::min(first, o.arrival_ms);
    if (o.e2e_ms >= 0) {
      e2e.push_back(o.e2e_ms);
      out_tokens += o.output_tokens;
      last = std::max(last, o.arrival_ms + o.e2e_ms);
      if (o.output_tokens > 1)
        itl.push_back((o.e2e_ms - o.ttft_ms) / (o.output_tokens - 1));
    }
  }
  res.ttft_ms = summarize(ttft);  // sorts ttft
  res.ttft_cdf_ms = quantiles(ttft, ttft_cdf_points);
  res.e2e_ms = summarize(e2e);
  res.itl_ms = summarize(itl);
  const double b = blocks ? static_cast<double>(blocks) : 1.0;
  res.hit_ratio.gpu = hits[0] / b;
  res.hit_ratio.host = hits[1] / b;
  res.hit_ratio.disk = hits[2] / b;
  res.hit_ratio.total = (hits[0] + hits[1] + hits[2]) / b;
  res.prefill_blocks = blocks - (hits[0] + hits[1] + hits[2]);
  res.throughput_tok_s = last > first ? out_tokens / ((last - first) / 1e3) : 0;
}

engine_replay replay_engine(engine& eng,
                            const std::vector<trace_request>& trace,
                            double speedup) {
  engine_replay res;
  res.outcomes.resize(trace.size());
  std::vector<engine_event> events;
  constexpr double never = std::numeric_limits<double>::infinity();
  auto arrival = [&](size_t i) {
    return i < trace.size() ? trace[i].arrival_ms / speedup : never;
  };
  size_t next = 0;
  double now = 0, step_end = -1;
  // Two event sources in virtual time: arrivals and the end of a step. A
  // step that ends as requests arrive finishes first: they join the next.
  for (;;) {
    if (step_end >= 0 && step_end <= arrival(next)) {
      now = step_end;
      step_end = -1;
      events.clear();
      eng.finish_step(events);
      for (const auto& e : events) {
        switch (e.kind) {
          case engine_event::stored:
            ++res.stored;
            break;
          case engine_event::removed:
            ++res.removed;
            break;
          case engine_event::first_token: {
            auto& o = res.outcomes[e.request];
            o.ttft_ms = e.time_ms - o.arrival_ms;
            std::copy(e.hits, e.hits + tier_count, o.hits);
            break;
          }
          case engine_event::finished:
            res.outcomes[e.request].e2e_ms =
                e.time_ms - res.outcomes[e.request].arrival_ms;
            break;
          default:
            break;
        }
      }
    } else if (next < trace.size()) {
      now = arrival(next);
      const trace_request& r = trace[next];
      engine_request req;
      req.id = next;
      req.prompt_tokens = r.input_tokens;
      req.output_tokens = std::max<uint32_t>(r.output_tokens, 1);
      req.blocks = r.blocks;
      request_outcome& o = res.outcomes[next];
      o.arrival_ms = now;
      o.output_tokens = req.output_tokens;
      o.prompt_blocks = static_cast<uint32_t>(r.blocks.size());
      if (auto st = eng.submit(std::move(req), now); !st)
        res.refused.push_back(st.err().message);
      else
        res.prompt_blocks += r.blocks.size();
      ++next;
    } else {
      break;  // no arrivals left and the engine cannot start a step
    }
    if (step_end < 0 && eng.step_due(now, arrival(next)))
      if (auto end = eng.start_step(now)) step_end = *end;
  }
  res.end_ms = now;
  return res;
}

engine_config fleet_engine_config(const sim_config& cfg, uint32_t w) {
  engine_config ec = cfg.engine;
  ec.block_tokens = cfg.block_tokens;
  ec.cache = {cfg.gpu_blocks, cfg.host_blocks, cfg.disk_blocks};
  ec.speed = w < cfg.worker_speeds.size() ? cfg.worker_speeds[w] : 1.0;
  ec.model_factor = cfg.model_factor;
  return ec;
}

worker_config fleet_worker_config(const sim_config& cfg, uint32_t w,
                                  const engine& eng) {
  worker_config wc;
  wc.id = w;
  wc.speed = eng.config().speed;
  // Workers measure what a host or disk hit saves on their GPU.
  wc.c_host = eng.tier_credit(tier::host);
  wc.c_disk = eng.tier_credit(tier::disk);
  wc.refuse_growth = cfg.refuse_growth;
  return wc;
}

uint64_t router_seed(uint64_t seed, uint32_t r) {
  uint64_t s = seed * 1000003 + r;
  return next_random(s);
}

expected<sim_result> simulate(const sim_config& cfg,
                              const std::vector<trace_request>& trace,
                              policy_kind policy,
                              const std::function<void(double)>& progress) {
  simulation s(cfg, trace, policy);
  return s.run(progress);
}

oracle_result oracle(const sim_config& cfg,
                     const std::vector<trace_request>& trace) {
  oracle_result res;
  std::unordered_set<uint64_t> seen;
  double speed = 1;
  if (!cfg.worker_speeds.empty())
    speed =
        *std::max_element(cfg.worker_speeds.begin(), cfg.worker_speeds.end());
  const uint32_t budget = cfg.engine.max_num_batched_tokens;
  const double bt = cfg.block_tokens;
  std::vector<double> ttft;
  uint64_t blocks = 0, hits = 0;
  for (const trace_request& t : trace) {
    size_t h = 0;
    while (h < t.blocks.size() && seen.count(t.blocks[h]))
      ++h;
    seen.insert(t.blocks.begin(), t.blocks.end());
    blocks += t.blocks.size();
    hits += h;
    const double cached = std::min<double>(h * bt, t.input_tokens - 1.0);
    double left = t.input_tokens - cached;
    double ms = 0;
    while (left > budget) {
      ms += prefill_ms(budget);
      left -= budget;
    }
    const double p =
        std::ceil(t.input_tokens / bt) / static_cast<double>(cfg.gpu_blocks);
    ms += prefill_ms(left) + decode_ms(p);
    ttft.push_back(ms * cfg.model_factor / speed);
  }
  res.ttft_ms = summarize(ttft);  // sorts ttft
  res.ttft_cdf_ms = quantiles(ttft, ttft_cdf_points);
  res.hit_ratio = blocks ? static_cast<double>(hits) / blocks : 0;
  return res;
}

}  // namespace kvmesh
