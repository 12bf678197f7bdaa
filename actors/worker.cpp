// WORKER: bids from exact state, takes or refuses awards, drives its engine
// on the actor clock.
#include "actors/worker.hpp"

#include <algorithm>

#include <chrono>

namespace kvmesh {

void worker_meters::finished(double arrival_ms, double first_ms, double end_ms,
                             uint32_t generated) const {
  if (ttft) metrics::observe(*ttft, (first_ms - arrival_ms) / 1e3);
  if (e2e) metrics::observe(*e2e, (end_ms - arrival_ms) / 1e3);
  if (itl && generated > 1)
    metrics::observe(*itl, (end_ms - first_ms) / 1e3 / (generated - 1));
}

namespace {

using wpointer = worker_actor::stateful_pointer<worker_state>;

double now_ms(wpointer self) {
  const auto d = self->clock().now() - self->state.origin;
  return std::chrono::duration<double, std::milli>(d).count() *
         self->state.time_scale;
}

// The hint slot of request `id`.
size_t taken_hint_slot(uint64_t id) {
  return static_cast<size_t>((id * 0x9E3779B97F4A7C15ull) >> 48);
}

constexpr uint64_t any_sequence = ~uint64_t{0};

// This worker's count of accepted requests when it took request `id` (with
// `sequence`, unless any_sequence), or 0: it did not, or too long ago to
// say (the ring of recent awards).
uint64_t taken_count(const worker_state& st, uint64_t id, uint64_t sequence) {
  if (!st.taken_hint.empty() && st.taken_hint[taken_hint_slot(id)] == 0)
    return 0;
  for (const auto& t : st.taken)
    if (t.request == id && t.count > 0 &&
        (sequence == any_sequence || t.stream_sequence == sequence))
      return t.count;
  return 0;
}

void remember_taken(worker_state& st, const route_request_msg& r,
                    uint64_t count) {
  auto& slot = st.taken[st.taken_next++ % worker_state::taken_window];
  if (!st.taken_hint.empty()) {
    if (slot.count > 0) --st.taken_hint[taken_hint_slot(slot.request)];
    ++st.taken_hint[taken_hint_slot(r.id)];
  }
  slot = {r.id, r.stream_sequence, count};
}

// Whether this worker took `r` already, when it may have (taken_count's
// count, else 0); the hint is built at the first such look.
uint64_t taken_before(worker_state& st, const route_request_msg& r) {
  if (!may_be_taken(r)) return 0;
  if (st.taken_hint.empty()) {
    st.taken_hint.assign(worker_state::taken_hint_slots, 0);
    for (const auto& t : st.taken)
      if (t.count > 0) ++st.taken_hint[taken_hint_slot(t.request)];
  }
  return taken_count(st, r.id, r.stream_sequence);
}

// Engine steps one handler runs at most when it catches up.
constexpr size_t max_steps_per_handler = 16;

void schedule_step_end(wpointer self, double end, double now) {
  auto& st = self->state;
  st.stepping = true;
  st.step_end = end;
  const auto wall = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double, std::milli>((end - now) / st.time_scale));
  self->delayed_send(self, wall, step_atom::value);
}

// Has the engine's next step start once the messages already in the
// mailbox are handled: CAF handles them in order, so awards that came
// together are all submitted first and share the step, as vLLM's engine
// core takes its whole input queue before each step (engine::step_due).
void kick(wpointer self) {
  auto& st = self->state;
  if (st.stepping || st.kicked) return;
  st.kicked = true;
  self->send(self, step_atom::value);
}

// Starts the engine's next step if it is idle and has work, and schedules
// its end on the actor clock.
void maybe_step(wpointer self) {
  auto& st = self->state;
  if (st.stepping) return;
  const double now = now_ms(self);
  if (auto end = st.eng->start_step(now)) schedule_step_end(self, *end, now);
}

// Ends the step in progress (its timer fired) or, when there is none, starts
// the one a kick asked for: the loop below starts it at the latest arrival,
// the time an engine loop would have started it.
void finish_step(wpointer self) {
  auto& st = self->state;
  st.stepping = false;
  st.kicked = false;
  st.events.clear();
  st.eng->finish_step(st.events);
  // Steps that would have ended by now (the timer fired late: a loaded
  // machine, or a sped-up engine whose steps are microseconds) run here,
  // back to back, each starting where the last ended but never before the
  // newest request arrived (no step sees a request before its arrival).
  // Late timers then no longer slow the simulated GPU down. A long backlog
  // goes in slices, so that bids and awards waiting in the mailbox are
  // answered in between (their deadlines are tens of milliseconds).
  const double now = now_ms(self);
  double t = st.step_end;
  size_t slice = max_steps_per_handler;
  while (auto end = st.eng->start_step(std::max(t, st.last_submit))) {
    if (*end > now) {
      schedule_step_end(self, *end, now);
      break;
    }
    if (--slice == 0) {  // ends in the next handler, after the mailbox
      st.stepping = true;
      st.step_end = *end;
      self->send(self, step_atom::value);
      break;
    }
    st.eng->finish_step(st.events);
    t = *end;
  }
  const double bt = st.eng->config().block_tokens;
  for (const engine_event& e : st.events) {
    switch (e.kind) {
      case engine_event::progress:
        st.ledger->progress(e.request, e.remaining / bt);
        break;
      case engine_event::first_token:
        st.ledger->done(e.request);
        if (st.listener)
          self->send(st.listener, first_atom::value, e.request, e.hits[0],
                     e.hits[1], e.hits[2]);
        break;
      case engine_event::finished:
        ++st.completed;
        if (st.meters)
          st.meters->finished(e.arrival_ms, e.first_ms, e.time_ms, e.generated);
        if (st.listener) self->send(st.listener, done_atom::value, e.request);
        break;
      case engine_event::stored:
      case engine_event::removed:
        if (!st.shards.empty())
          st.kv_out[shard_of(e.root, st.shards.size())].push_back(
              cache_event{e.kind == engine_event::stored ? cache_event::stored
                                                         : cache_event::removed,
                          e.where, e.hash, e.root});
        break;
      default:
        break;
    }
  }
  // One batch per shard and step: shards write batches, not single events.
  for (size_t i = 0; i < st.kv_out.size(); ++i) {
    drop_superseded(st.kv_out[i]);
    if (st.kv_out[i].empty()) continue;
    if (st.meters) {
      size_t stored = 0;
      for (const cache_event& e : st.kv_out[i])
        stored += e.kind == cache_event::stored;
      st.meters->kv_events[0]->Increment(static_cast<double>(stored));
      st.meters->kv_events[1]->Increment(
          static_cast<double>(st.kv_out[i].size() - stored));
    }
    // A copy of exactly its size travels; the buffer keeps its capacity,
    // so that the next batch does not grow it again from nothing.
    self->send(st.shards[i], kv_atom::value, st.ledger->config().id,
               std::vector<cache_event>(st.kv_out[i]));
    st.kv_out[i].clear();
  }
  maybe_step(self);
}

// Tells every shard all this worker holds in its part, after a drop of what
// the shard had: the shards are new to it (events before it knew them went
// nowhere), came back from a restart (events sent meanwhile were lost), or
// the worker itself is new (a restarted agent: the shard still holds its
// predecessor's blocks). Later events follow in order, so the shard ends
// where the worker is.
void announce_cache(wpointer self) {
  auto& st = self->state;
  if (st.shards.empty()) return;
  const uint32_t id = st.ledger->config().id;
  std::vector<std::vector<cache_event>> out(st.shards.size());
  st.eng->cache().for_each([&](uint64_t hash, tier where, uint64_t root) {
    out[shard_of(root, st.shards.size())].push_back(
        cache_event{cache_event::stored, where, hash, root});
  });
  for (size_t i = 0; i < st.shards.size(); ++i) {
    self->send(st.shards[i], drop_atom::value, id);
    if (!out[i].empty())
      self->send(st.shards[i], kv_atom::value, id, std::move(out[i]));
  }
}

bool was_withdrawn(const worker_state& st, uint64_t request) {
  return std::find(st.withdrawn.begin(), st.withdrawn.end(), request) !=
         st.withdrawn.end();
}

void remember_withdrawn(worker_state& st, uint64_t request) {
  if (st.withdrawn.size() < worker_state::withdrawn_window)
    st.withdrawn.push_back(request);
  else
    st.withdrawn[st.withdrawn_next++ % worker_state::withdrawn_window] =
        request;
}

// Bids for `cfb` into `b`, holding a soft reservation; false when this
// worker was not asked.
bool bid_for(wpointer self, const call_for_bids& cfb, bid& b) {
  auto& st = self->state;
  const uint32_t id = st.ledger->config().id;
  // Asked by id (an agent's stand-in forwards its list); empty: me.
  if (!asked_in_call(cfb, id)) return false;
  const double now = now_ms(self);
  st.ledger->expire(now);
  const auto& r = cfb.request;
  const uint32_t n = static_cast<uint32_t>(r.blocks.size());
  b = make_bid(*st.eng, *st.ledger, r.blocks.data(), n);
  b.worker = id;
  // Perhaps handed out again by the durable queue (its answer lost,
  // or the queue's cluster lost a node): if it is here already, the
  // router must award it here.
  if (taken_before(st, r) > 0) {
    b.holds = true;
    return true;
  }
  // Or handed to two routers at once: the other auction's open bid here
  // says so, and neither knows where the other will award it.
  if (may_be_taken(r)) b.contested = st.ledger->contested(r.id, cfb.auction);
  // A full table of open bids still yields a valid bid; the auction just
  // cannot hold the work here.
  (void)st.ledger->reserve(
      r.id, expected_share(n, st.ledger->config().speed, cfb.bidders_speed),
      now + st.ledger->config().reservation_ms, n, cfb.auction);
  return true;
}

std::string not_asked(wpointer self) {
  return "worker " + std::to_string(self->state.ledger->config().id) +
         " was not asked";
}

}  // namespace

worker_actor::behavior_type worker(wpointer self, worker_options opt) {
  auto& st = self->state;
  // spawn_worker validated the options: these cannot fail here.
  st.eng = std::make_unique<engine>(std::move(*engine::make(opt.engine)));
  st.ledger = std::make_unique<worker_ledger>(
      std::move(*worker_ledger::make(opt.ledger)));
  st.time_scale = opt.time_scale;
  st.models = opt.models;
  st.listener = opt.listener;
  st.shards = opt.shards;
  st.meters = opt.meters;
  st.kv_out.resize(st.shards.size());
  st.origin = self->clock().now();
  st.taken.assign(worker_state::taken_window, {});
  return {
      [=](bid_atom, const call_for_bids& cfb) -> bid_list {
        bid b;
        if (!bid_for(self, cfb, b)) return {{}, not_asked(self)};
        return {{b}, {}};
      },
      [=](bid_atom, const call_for_bids& cfb, const bid_gather_ptr& g) {
        bid b;
        const bool asked = bid_for(self, cfb, b);
        g->put(place_in_call(cfb, self->state.ledger->config().id),
               asked ? &b : nullptr);
      },
      [=](award_atom, award_msg& a) -> award_reply {
        auto& st = self->state;
        auto& r = a.request;
        const double expected = a.expected_queued;
        const worker_meters* m = st.meters.get();
        auto count = [m](worker_meters::award_result x) {
          if (m) m->awards[x]->Increment();
        };
        // Withdrawn before it came (its router gave up on this worker
        // and the request went elsewhere): taking it would run it twice.
        // Empty unless awards went unanswered: no cost on the hot path.
        if (!st.withdrawn.empty() && was_withdrawn(st, r.id)) {
          count(worker_meters::withdrawn);
          return {false, "withdrawn", {}};
        }
        // Taken already (a durable request handed out again): accepted
        // again, run once.
        if (const uint64_t c = taken_before(st, r)) return {true, {}, {}, c};
        if (st.draining) {
          count(worker_meters::draining);
          return {false, "draining", {}};
        }
        if (st.ledger->should_refuse(r.id, expected)) {
          count(worker_meters::queue_grew);
          return {false, "queue grew since the bid", {}};
        }
        const uint32_t n = static_cast<uint32_t>(r.blocks.size());
        const bid held =
            make_bid(st.eng->cache(), *st.ledger, r.blocks.data(), n);
        const double read = st.ledger->read_cost(held, n);
        engine_request req;
        req.id = r.id;
        req.prompt_tokens = r.input_tokens;
        req.output_tokens = r.output_tokens;
        req.blocks = std::move(r.blocks);
        st.last_submit = now_ms(self);
        if (auto ok = st.eng->submit(std::move(req), st.last_submit); !ok) {
          st.ledger->release(r.id);
          count(worker_meters::engine_refused);
          return {false, ok.err().message, {}};
        }
        st.ledger->accept(r.id, read);
        ++st.awards;
        st.last_price = a.price;
        if (m) {
          count(worker_meters::accepted);
          m->prompt_blocks->Increment(n);
          m->hit_blocks[0]->Increment(held.gpu);
          m->hit_blocks[1]->Increment(held.host);
          m->hit_blocks[2]->Increment(held.disk);
        }
        remember_taken(st, r, st.ledger->accepted());
        kick(self);
        return {true, {}, {}, st.ledger->accepted()};
      },
      [=](release_atom, const release_msg& r) {
        auto& st = self->state;
        if (st.ledger->release(r.request)) return;  // a loser's reservation
        // No reservation: an award this worker accepted after the router
        // had counted it out as dead (its award and withdraw unanswered)
        // and gone to the next bidder. Taken back unless the engine has
        // started it, and refused should it come again.
        if (st.eng->cancel(r.request)) {
          st.ledger->done(r.request);
          remember_withdrawn(st, r.request);
        }
      },
      [=](withdraw_atom, const withdraw_msg& w) -> withdraw_reply {
        auto& st = self->state;
        if (was_withdrawn(st, w.request)) return {};  // a retry
        // Its bid's reservation, if the award never came.
        st.ledger->release(w.request);
        if (st.eng->cancel(w.request)) {
          // Accepted, but the engine had not started it: taken back.
          st.ledger->done(w.request);
          remember_withdrawn(st, w.request);
          return {};
        }
        // Accepted and started (or run already): it stays here, and the
        // router decides for this worker.
        if (const uint64_t c = taken_count(st, w.request, any_sequence))
          return {false, {}, c};
        // Never came (lost, or still on its way): refused when it does.
        remember_withdrawn(st, w.request);
        return {};
      },
      [=](status_atom) -> worker_status {
        auto& st = self->state;
        worker_status s;
        s.worker = st.ledger->config().id;
        s.queued = st.ledger->queued();
        s.reserved = st.ledger->reserved();
        s.waiting = st.eng->waiting();
        s.running = st.eng->running();
        s.gpu_blocks = st.eng->cache().size(tier::gpu);
        s.host_blocks = st.eng->cache().size(tier::host);
        s.disk_blocks = st.eng->cache().size(tier::disk);
        s.active = st.eng->cache().active();
        s.completed = st.completed;
        s.models = st.models;
        s.draining = st.draining;
        s.capacity = st.eng->cache().capacity(tier::gpu);
        s.host_capacity = st.eng->cache().capacity(tier::host);
        s.disk_capacity = st.eng->cache().capacity(tier::disk);
        s.awards = st.awards;
        s.last_price = st.last_price;
        s.speed = st.ledger->config().speed;
        return s;
      },
      [=](put_atom, drain_atom, bool on) { self->state.draining = on; },
      [=](put_atom, shards_atom, std::vector<index_shard_actor>& shards) {
        auto& st = self->state;
        st.shards = std::move(shards);
        st.kv_out.assign(st.shards.size(), {});
        announce_cache(self);
      },
      [=](step_atom) { finish_step(self); },
  };
}

expected<worker_actor> spawn_worker(caf::actor_system& sys,
                                    const worker_options& opt) {
  if (!(opt.time_scale > 0))
    return make_error(ec::invalid_argument, "time scale must be > 0");
  if (auto e = engine::make(opt.engine); !e) return e.err();
  if (auto l = worker_ledger::make(opt.ledger); !l) return l.err();
  return sys.spawn(worker, opt);
}

}  // namespace kvmesh
