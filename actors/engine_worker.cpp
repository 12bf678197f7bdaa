// The real engine's WORKER: bids and awards as any worker, its cache from
// the engine's KV events, its queue from the front, its health from the
// engine's endpoints.
#include "actors/engine_worker.hpp"

#include <algorithm>
#include <limits>
#include <memory>

#include "core/log.hpp"

namespace kvmesh {

namespace {

struct engine_worker_state {
  static inline const char* name = "engine_worker";
  std::unique_ptr<engine_state> eng;
  caf::actor_clock::time_point origin;
  listener_actor listener;
  std::vector<index_shard_actor> shards;
  std::vector<cache_event> changes;
  std::vector<std::vector<cache_event>> kv_out;  // one batch per shard
  caf::timespan sweep{};
  uint64_t kv_batches = 0;
  uint64_t resyncs = 0;
  // Awards accepted and the router's price of the last one: kept here, as
  // engine_state knows requests, not auctions.
  uint64_t awards = 0;
  double last_price = std::numeric_limits<double>::quiet_NaN();
  bool was_healthy = true;
  uint32_t unseen_polls = 0;  // polls in a row the engine ran more
  bool warned_unseen = false;
  std::shared_ptr<const worker_meters> meters;  // null: not counted
  // Gateways' reports of requests not awaiting arrival here, and requests
  // a gateway sent whose end it did not report (lease, silence).
  uint64_t stray_progress = 0;
  uint64_t unreported = 0;
};

using epointer = engine_worker_actor::stateful_pointer<engine_worker_state>;

double now_ms(epointer self) {
  const auto d = self->clock().now() - self->state.origin;
  return std::chrono::duration<double, std::milli>(d).count();
}

uint32_t id_of(epointer self) {
  return self->state.eng->ledger().config().id;
}

// Sends what the mirror changed to the index shards, one batch per shard
// (shards write batches, not single events).
void publish_changes(epointer self) {
  auto& st = self->state;
  if (st.shards.empty()) {
    st.changes.clear();
    return;
  }
  for (const cache_event& e : st.changes)
    st.kv_out[shard_of(e.root, st.shards.size())].push_back(e);
  st.changes.clear();
  for (size_t i = 0; i < st.kv_out.size(); ++i) {
    drop_superseded(st.kv_out[i]);
    if (st.kv_out[i].empty()) continue;
    if (const worker_meters* m = st.meters.get()) {
      size_t stored = 0;
      for (const cache_event& e : st.kv_out[i])
        stored += e.kind == cache_event::stored;
      m->kv_events[0]->Increment(static_cast<double>(stored));
      m->kv_events[1]->Increment(
          static_cast<double>(st.kv_out[i].size() - stored));
    }
    // A copy of exactly its size travels; the buffer keeps its capacity,
    // so that the next batch does not grow it again from nothing.
    self->send(st.shards[i], kv_atom::value, id_of(self),
               std::vector<cache_event>(st.kv_out[i]));
    st.kv_out[i].clear();
  }
}

// The engine's state as a status, with what the actor counts itself.
worker_status status_of(epointer self) {
  auto& st = self->state;
  worker_status s = st.eng->status();
  s.awards = st.awards;
  s.last_price = st.last_price;
  return s;
}

// Logs each kind of event the mirror could not apply, the first time.
void log_new_faults(epointer self) {
  for (mirror_fault f : self->state.eng->mirror().take_new_faults())
    KVMESH_WARN(
        "worker %u skips engine KV events: %s (counted from now on, "
        "logged once)",
        id_of(self), to_string(f));
}

// A request's first token, from the front or a gateway.
void first_token(epointer self, uint64_t request) {
  auto& st = self->state;
  tier_match hits;
  const auto at = st.eng->arrived_ms(request);
  if (!st.eng->first_token(request, now_ms(self), &hits)) return;
  if (st.meters && st.meters->ttft && at)
    metrics::observe(*st.meters->ttft, (now_ms(self) - *at) / 1e3);
  if (st.listener)
    self->send(st.listener, first_atom::value, request, hits.gpu, hits.host,
               hits.disk);
}

// A request's end, from the front or a gateway.
void finish(epointer self, uint64_t request) {
  auto& st = self->state;
  const auto at = st.eng->arrived_ms(request);
  if (!st.eng->finish(request)) return;
  // The front streams bytes, not tokens: no inter-token figure here (the
  // engine's own metrics have it).
  if (st.meters && st.meters->e2e && at)
    metrics::observe(*st.meters->e2e, (now_ms(self) - *at) / 1e3);
  if (st.listener) self->send(st.listener, done_atom::value, request);
}

// Requests a gateway sent to the engine whose end it did not report, and
// why they are taken to have ended.
void end_unreported(epointer self, const std::vector<uint64_t>& ids,
                    const char* why) {
  if (ids.empty()) return;
  KVMESH_WARN("worker %u ends %zu request(s) whose end no report brought: %s",
              id_of(self), ids.size(), why);
  for (uint64_t id : ids)
    finish(self, id);
  self->state.unreported += ids.size();
}

// Bids for `cfb` (if this worker was asked), holding a soft reservation.
bid_list bid_for(epointer self, const call_for_bids& cfb) {
  auto& st = self->state;
  const uint32_t id = id_of(self);
  // Asked by id (an agent's stand-in forwards its list); empty: me.
  if (!asked_in_call(cfb, id))
    return {{}, "worker " + std::to_string(id) + " was not asked"};
  const auto& r = cfb.request;
  const uint32_t n = static_cast<uint32_t>(r.blocks.size());
  bid b = st.eng->make_bid(r.blocks.data(), n);
  st.eng->reserve(
      r.id,
      expected_share(n, st.eng->ledger().config().speed, cfb.bidders_speed), n,
      now_ms(self));
  b.worker = id;
  return {{b}, {}};
}

engine_worker_actor::behavior_type engine_worker(epointer self,
                                                 engine_worker_options opt) {
  auto& st = self->state;
  // spawn_engine_worker validated the options: this cannot fail here.
  st.eng =
      std::make_unique<engine_state>(std::move(*engine_state::make(opt.state)));
  st.origin = self->clock().now();
  st.listener = opt.listener;
  st.shards = opt.shards;
  st.kv_out.resize(st.shards.size());
  st.sweep = opt.sweep;
  st.meters = opt.meters;
  self->delayed_send(self, st.sweep, step_atom::value);
  return {
      [=](bid_atom, const call_for_bids& cfb) -> bid_list {
        return bid_for(self, cfb);
      },
      [=](bid_atom, const call_for_bids& cfb, const bid_gather_ptr& g) {
        const bid_list l = bid_for(self, cfb);
        g->put(place_in_call(cfb, id_of(self)),
               l.bids.empty() ? nullptr : &l.bids[0]);
      },
      [=](award_atom, const award_msg& a) -> award_reply {
        auto& st = self->state;
        bid held;
        award_reply r =
            st.eng->award(a.request, a.expected_queued, now_ms(self), &held);
        if (r.accepted) {
          ++st.awards;
          st.last_price = a.price;
        }
        if (const worker_meters* m = st.meters.get()) {
          // engine_state's reasons; any other (the engine not answering)
          // is the engine's refusal.
          const auto x = r.accepted               ? worker_meters::accepted
                         : r.reason == "draining" ? worker_meters::draining
                         : r.reason == "queue grew since the bid"
                             ? worker_meters::queue_grew
                         : r.reason == "withdrawn"
                             ? worker_meters::withdrawn
                             : worker_meters::engine_refused;
          m->awards[x]->Increment();
          if (r.accepted) {
            m->prompt_blocks->Increment(
                static_cast<double>(a.request.blocks.size()));
            m->hit_blocks[0]->Increment(held.gpu);
            m->hit_blocks[1]->Increment(held.host);
            m->hit_blocks[2]->Increment(held.disk);
          }
        }
        return r;
      },
      [=](release_atom, const release_msg& r) {
        self->state.eng->release(r.request);
      },
      [=](withdraw_atom, const withdraw_msg& w) -> withdraw_reply {
        return self->state.eng->withdraw(w.request);
      },
      [=](status_atom) -> worker_status { return status_of(self); },
      [=](put_atom, drain_atom, bool on) { self->state.eng->set_draining(on); },
      [=](put_atom, shards_atom, std::vector<index_shard_actor>& shards) {
        auto& st = self->state;
        st.shards = std::move(shards);
        st.kv_out.assign(st.shards.size(), {});
      },
      [=](step_atom) {
        auto& st = self->state;
        if (size_t n = st.eng->expire(now_ms(self)); n > 0)
          KVMESH_WARN(
              "worker %u drops %zu awarded request(s) that never "
              "reached its front",
              id_of(self), n);
        self->delayed_send(self, st.sweep, step_atom::value);
      },
      [=](kv_atom, const engine_kv_batch& b) {
        auto& st = self->state;
        ++st.kv_batches;
        st.eng->mirror().apply(b, &st.changes);
        publish_changes(self);
        log_new_faults(self);
      },
      [=](kv_atom, drop_atom) {
        auto& st = self->state;
        ++st.resyncs;
        st.eng->mirror().clear(&st.changes);
        publish_changes(self);
      },
      [=](arrive_atom, const front_request& r) {
        self->state.eng->arrive(r, now_ms(self));
      },
      [=](first_atom, uint64_t request) { first_token(self, request); },
      [=](done_atom, uint64_t request) { finish(self, request); },
      [=](progress_atom, const request_progress& p) {
        auto& st = self->state;
        switch (p.event) {
          case progress_event::arrived:
            if (!st.eng->arrive_awarded(p.request, p.reporter, now_ms(self)))
              ++st.stray_progress;
            break;
          case progress_event::first:
            first_token(self, p.request);
            break;
          case progress_event::ended:
            finish(self, p.request);
            break;
          case progress_event::lease:
            end_unreported(self,
                           st.eng->lease(p.reporter, p.in_flight, now_ms(self)),
                           "its gateway's lease no longer lists them");
            break;
        }
      },
      [=](drop_atom, uint64_t reporter) {
        end_unreported(self, self->state.eng->of_reporter(reporter),
                       "their gateway fell silent");
      },
      [=](put_atom, const engine_metrics& m) {
        auto& st = self->state;
        st.eng->set_metrics(m);
        if (st.was_healthy != m.answering)
          KVMESH_WARN("worker %u's engine %s", id_of(self),
                      m.answering ? "answers again: taking awards"
                                  : "stopped answering: refusing awards");
        st.was_healthy = m.answering;
        // The cross-check: requests the engine runs that its front never
        // saw load the GPU without the bids knowing. A few polls in a row,
        // not one: the metrics lag the front.
        const worker_status s = st.eng->status();
        const double seen = static_cast<double>(s.waiting + s.running);
        st.unseen_polls = m.has_metrics && m.waiting + m.running > seen
                              ? st.unseen_polls + 1
                              : 0;
        if (st.unseen_polls >= 5 && !st.warned_unseen) {
          st.warned_unseen = true;
          KVMESH_WARN(
              "worker %u's engine runs %g requests, its front saw "
              "%g: clients that call the engine directly load it "
              "unseen by the bids (logged once)",
              id_of(self), m.waiting + m.running, seen);
        }
      },
      [=](get_atom, stats_atom) -> engine_worker_stats {
        auto& st = self->state;
        engine_worker_stats s;
        s.status = status_of(self);
        s.metrics = st.eng->metrics();
        for (size_t i = 0; i < mirror_fault_count; ++i)
          s.mirror_faults[i] =
              st.eng->mirror().faults(static_cast<mirror_fault>(i));
        s.kv_batches = st.kv_batches;
        s.resyncs = st.resyncs;
        s.abandoned = st.eng->abandoned();
        s.bypassed = st.eng->bypassed();
        s.approximate = st.eng->approximate();
        s.stray_progress = st.stray_progress;
        s.unreported = st.unreported;
        return s;
      },
  };
}

}  // namespace

expected<engine_worker_actor> spawn_engine_worker(
    caf::actor_system& sys, const engine_worker_options& opt) {
  if (auto s = engine_state::make(opt.state); !s) return s.err();
  if (opt.sweep <= caf::timespan{0})
    return make_error(ec::invalid_argument, "sweep period must be > 0");
  return sys.spawn(engine_worker, opt);
}

}  // namespace kvmesh
