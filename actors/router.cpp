// ROUTER: call for bids, gather them until all answered or the deadline,
// price, award the cheapest, and on refusal or silence try again.
#include "actors/router.hpp"

#include <algorithm>
#include <random>

#include "core/log.hpp"
#include "messages/member_checks.hpp"

namespace kvmesh {

static_assert(sizeof(router_state::member) <= 64,
              "a member is made for every id below the highest");

namespace {

using rpointer = router_actor::stateful_pointer<router_state>;
using auction_ptr = std::shared_ptr<auction>;

void call_for_bids_(rpointer self, auction_ptr a);

// An auction ended (decided or failed): the next waiting one starts.
void ended(rpointer self) {
  auto& st = self->state;
  --st.inflight;
  while (st.inflight < st.opt.max_inflight && !st.waiting.empty()) {
    auto next = std::move(st.waiting.front());
    st.waiting.pop_front();
    ++st.inflight;
    call_for_bids_(self, std::move(next));
  }
}

// An auction runs again, for `why`.
void again(router_state& st, router_state::cause why) {
  ++st.reauctions;
  ++st.reauctions_by[why];
}

void fail(rpointer self, auction_ptr a, ec code, const std::string& what) {
  // Whether a worker took the request is unknown: say so, so that no one
  // takes the failure as proof that none did (a durable request handed
  // back and decided again would run twice).
  if (code == ec::not_found && a->award_unanswered) code = ec::timeout;
  a->promise.deliver(caf::make_error(code, what));
  ended(self);
}

// `workers` by the bidder that answers for them, in order of first
// appearance: one call per bidder.
std::vector<std::pair<uint32_t, std::vector<uint32_t>>> by_bidder(
    const router_state& st, const std::vector<uint32_t>& workers) {
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> out;
  out.reserve(4);  // an auction's workers sit on a few agents
  for (uint32_t w : workers) {
    const uint32_t b = st.members[w].bidder;
    auto it = std::find_if(out.begin(), out.end(),
                           [b](const auto& g) { return g.first == b; });
    if (it == out.end()) {
      out.emplace_back(b, std::vector<uint32_t>{});
      it = out.end() - 1;
      // Once, not grown a worker at a time.
      it->second.reserve(workers.size());
    }
    it->second.push_back(w);
  }
  return out;
}

// Worker `w` leaves the auctions until a heartbeat brings it back; logged
// once per departure, with the time an operator (and scripts/chaos) reads
// as "out of the auctions".
void count_out(rpointer self, uint32_t w, const char* why) {
  auto& m = self->state.members[w];
  if (!m.live) return;
  m.live = false;
  KVMESH_INFO("worker %u out of the auctions of router %s (%s)", w,
              self->state.opt.name.c_str(), why);
}

// The auction waits for `what` until `timeout` from now; returns the wait,
// which answers must still match when they come.
uint32_t await(rpointer self, const auction_ptr& a, auction::waiting what,
               caf::timespan timeout) {
  auto& st = self->state;
  a->awaits = what;
  a->deadline = self->clock().now() + timeout;
  st.timed.emplace_back(a, ++a->wait);
  if (!st.sweep_armed) {
    st.sweep_armed = true;
    self->delayed_send(self, st.opt.deadline_sweep, sweep_atom::value);
  }
  return a->wait;
}

// The wait `w` ended: true when it was still the auction's current one
// (then the caller goes on), false for a late answer.
bool end_wait(const auction_ptr& a, uint32_t w) {
  if (a->wait != w || a->awaits == auction::none) return false;
  a->awaits = auction::none;
  ++a->wait;
  return true;
}

// Releases the reservations `workers` made bidding for `a`.
void release(rpointer self, const auction_ptr& a,
             const std::vector<uint32_t>& workers) {
  auto& st = self->state;
  for (auto& [g, ws] : by_bidder(st, workers))
    self->send(st.bidders[g], release_atom::value,
               release_msg{a->request.id, std::move(ws)});
}

// Releases the reservations of every bidder but `keep`.
void release_others(rpointer self, const auction_ptr& a, uint32_t keep) {
  std::vector<uint32_t> others;
  others.reserve(a->bids.size());
  for (const bid& b : a->bids)
    if (b.worker != keep) others.push_back(b.worker);
  release(self, a, others);
}

// Bidder `g` did not answer a call for bids in time (or its call failed):
// its workers sit out the auctions for a tick, twice as long at each
// silence in a row up to 32 ticks, whatever their heartbeats say.
// Members that beat but never bid (a forged flood, a wedged agent) would
// otherwise make every auction that asks them wait out the bid deadline.
void quiet(rpointer self, uint32_t g) {
  if (!self->state.opt.quiet_silent_bidders) return;
  auto& q = self->state.bidder_quiet[g];
  const uint32_t shift = std::min<uint32_t>(q.strikes, 5);
  ++q.strikes;
  q.until = self->clock().now() + self->state.opt.heartbeat * (1u << shift);
  if ((q.strikes & (q.strikes - 1)) == 0)  // 1, 2, 4, ...
    KVMESH_INFO(
        "a bidder of router %s did not answer a call for bids (%u "
        "times in a row): its workers sit out for %u heartbeats",
        self->state.opt.name.c_str(), q.strikes, 1u << shift);
}

// Bidder `g`'s call for auction `a` ended (answered or failed).
void ended_call(auction& a, uint32_t g) {
  auto it = std::find(a.unanswered.begin(), a.unanswered.end(), g);
  if (it != a.unanswered.end()) a.unanswered.erase(it);
}

void award_next(rpointer self, auction_ptr a);
void withdraw(rpointer self, auction_ptr a, uint32_t w, uint32_t attempt);

// Worker `w` left its award unanswered past the deadline (or its stand-in
// failed the call). It stays out of the auctions until a heartbeat says
// otherwise; the request goes on once it withdrew the award
// (docs/reliability.md, "Late awards"): a release alone cannot take back a
// request its engine started, and the request would run twice.
void award_unanswered(rpointer self, const auction_ptr& a, uint32_t w) {
  count_out(self, w, "its award went unanswered");
  withdraw(self, a, w, 0);
}

// Worker `w` took the request (its award's reply, or its answer to a
// withdraw that it runs it): the decision.
void won(rpointer self, const auction_ptr& a, uint32_t w, uint64_t count,
         const std::string& endpoint) {
  auto& st = self->state;
  st.auction->confirmed(a->request.id, count);
  release_others(self, a, w);
  ++st.decisions;
  st.members[w].since_beat += static_cast<double>(a->request.blocks.size());
  const float us =
      std::chrono::duration<float, std::micro>(self->clock().now() - a->arrived)
          .count();
  if (st.latency_us.size() < router_state::latency_window)
    st.latency_us.push_back(us);
  else
    st.latency_us[st.latency_next++ % router_state::latency_window] = us;
  decision d;
  d.request = a->request.id;
  d.worker = w;
  d.auctions = a->round;
  d.prices = a->prices;
  d.endpoint = endpoint;
  d.client_id = a->request.client_id;
  KVMESH_DEBUG("router %s decides %s: worker %u (%u auction%s)",
               st.opt.name.c_str(), request_name(a->request).c_str(), w,
               a->round, a->round == 1 ? "" : "s");
  a->promise.deliver(std::move(d));
  ended(self);
}

// Worker `w` left its award unanswered past the deadline: it may be gone,
// or only slow, and a slow one may have started the request. Before the
// request goes elsewhere, `w` must withdraw the award or say it runs it;
// the auction stays pending meanwhile (its award too). Silence is asked
// again, each time waiting twice as long up to a heartbeat, until `w`'s
// heartbeats count it out: a dead worker runs nothing.
void withdraw(rpointer self, auction_ptr a, uint32_t w, uint32_t attempt) {
  auto& st = self->state;
  auto wait = st.opt.award_deadline * (1 << std::min<uint32_t>(attempt, 10));
  if (wait > st.opt.heartbeat) wait = st.opt.heartbeat;
  self->request(st.bidders[st.members[w].bidder], wait, withdraw_atom::value,
                withdraw_msg{a->request.id, w})
      .then(
          [=](const withdraw_reply& r) {
            // Logged: unanswered awards are rare, and scripts/chaos reads
            // how they ended.
            KVMESH_INFO(
                "worker %u %s %s after its award went unanswered (router %s)",
                w, r.withdrawn ? "withdrew" : "runs",
                request_name(a->request).c_str(), self->state.opt.name.c_str());
            if (!r.withdrawn) {
              won(self, a, w, r.count, r.endpoint);
              return;
            }
            self->state.auction->settle(a->request.id);
            award_next(self, a);
          },
          [=](caf::error&) {
            auto& st = self->state;
            const auto& m = st.members[w];
            if (m.present && m.missed < st.opt.missed_beats) {
              withdraw(self, a, w, attempt + 1);
              return;
            }
            // Whether it took the request before it died is unknown: a
            // failure says so (fail), and should it come back after all,
            // the release takes the award back if it can.
            a->award_unanswered = true;
            self->send(st.bidders[m.bidder], release_atom::value,
                       release_msg{a->request.id, {w}});
            st.auction->settle(a->request.id);
            award_next(self, a);
          });
}

void award_next(rpointer self, auction_ptr a) {
  auto& st = self->state;
  if (a->next >= a->ranked.size()) {
    // Every bidder refused or stayed silent: the silent ones are out now,
    // so a fresh round asks the rest while rounds are left.
    if (a->round < st.opt.max_auctions) {
      again(st, router_state::unanswered);
      release_others(self, a, UINT32_MAX);
      call_for_bids_(self, a);
      return;
    }
    fail(self, a, ec::not_found,
         "no worker took request " + std::to_string(a->request.id) +
             (a->refusal.empty() ? std::string()
                                 : " (last refusal: " + a->refusal + ")"));
    return;
  }
  const uint32_t idx = a->ranked[a->next];
  if (a->next++ > 0) {  // a runner-up: its award is now the pending one
    ++st.runner_up_awards;
    st.auction->award(a->request.id, a->bids[idx], a->prices[idx]);
  }
  const uint32_t w = a->bids[idx].worker;
  a->awardee = w;
  const uint32_t wt =
      await(self, a, auction::award_reply, st.opt.award_deadline);
  self->request(
          st.bidders[st.members[w].bidder], caf::infinite, award_atom::value,
          award_msg{a->request, st.auction->expected_queued(a->request.id), w,
                    a->prices[idx].price})
      .then(
          [=](const award_reply& reply) {
            // Past its deadline the award is being withdrawn, whose answer
            // decides.
            if (!end_wait(a, wt)) return;
            auto& st = self->state;
            if (reply.accepted) {
              won(self, a, w, reply.count, reply.endpoint);
              return;
            }
            st.auction->settle(a->request.id);
            // A draining worker, or one whose engine stopped answering,
            // stays out until a heartbeat says otherwise.
            if (reply.reason == "draining") st.members[w].last.draining = true;
            if (reply.reason == unhealthy_reason)
              st.members[w].last.unhealthy = true;
            a->refusal = reply.reason;
            // The bid no longer holds: auction again on fresh bids while
            // rounds are left, else try the runner-up.
            if (a->round < st.opt.max_auctions) {
              again(st, router_state::refused);
              release_others(self, a, UINT32_MAX);
              call_for_bids_(self, a);
            } else {
              award_next(self, a);
            }
          },
          [=](caf::error&) {
            if (end_wait(a, wt)) award_unanswered(self, a, w);
          });
}

void decide(rpointer self, auction_ptr a) {
  auto& st = self->state;
  // A bidder took this request already (only a durable one may be taken).
  const bool claimed = may_be_taken(a->request) &&
                       std::any_of(a->bids.begin(), a->bids.end(),
                                   [](const bid& b) { return b.holds; });
  if (!claimed && may_be_taken(a->request) &&
      std::any_of(a->bids.begin(), a->bids.end(),
                  [](const bid& b) { return b.contested; })) {
    // Handed to another router at the same time (a queue that hands a
    // request out twice): neither auction knows where the other awards
    // it. This one steps back; the other ends, and a later delivery finds
    // its taker's claim.
    release_others(self, a, UINT32_MAX);
    fail(self, a, ec::conflict,
         "request " + std::to_string(a->request.id) +
             " is in another auction at the same time: try again");
    return;
  }
  if (!claimed && !a->claimers.empty()) {
    // Nobody claims it: only the eligible may win; the claimers let go of
    // their reservations.
    auto out = std::stable_partition(
        a->bids.begin(), a->bids.end(), [&](const bid& b) {
          return std::binary_search(a->eligible.begin(), a->eligible.end(),
                                    b.worker);
        });
    std::vector<uint32_t> dropped;
    for (auto it = out; it != a->bids.end(); ++it)
      dropped.push_back(it->worker);
    a->bids.erase(out, a->bids.end());
    release(self, a, dropped);
  }
  if (a->bids.empty()) {
    // Silence from every bidder is more often a hiccup (a busy host, a
    // reconnect) than a dead fleet: call again while rounds are left.
    if (a->round < st.opt.max_auctions) {
      again(st, router_state::no_bids);
      call_for_bids_(self, a);
      return;
    }
    fail(self, a, ec::not_found,
         "no worker answered the call for bids for request " +
             std::to_string(a->request.id));
    return;
  }
  const uint32_t n = static_cast<uint32_t>(a->request.blocks.size());
  a->prices.resize(a->bids.size());
  size_t win = st.auction->decide(a->request.id, n, a->bids.data(),
                                  a->bids.size(), a->prices.data());
  // A redelivered request that a bidder took already goes there again,
  // whatever the prices: anywhere else it would run twice.
  if (claimed) {
    const size_t i =
        static_cast<size_t>(std::find_if(a->bids.begin(), a->bids.end(),
                                         [](const bid& b) { return b.holds; }) -
                            a->bids.begin());
    if (i != win) {
      win = i;
      st.auction->award(a->request.id, a->bids[i], a->prices[i]);
    }
  }
  if (!claimed && saturated(st.auction->price(), n, a->prices[win].price)) {
    // Even the cheapest worker is past the ceiling: hold the request and
    // try again on the next tick, or turn it away when the queue is full.
    st.auction->settle(a->request.id);
    release_others(self, a, UINT32_MAX);
    if (st.held.size() < st.opt.max_held) {
      again(st, router_state::saturated);  // on the next tick
      st.held.push_back(a);
      return;
    }
    ++st.overloaded;
    fail(self, a, ec::capacity_exceeded,
         "overloaded: every worker is past the price ceiling and " +
             std::to_string(st.held.size()) + " requests are held");
    return;
  }
  // The winner first (the pricing broke its ties), then the rest by price.
  a->ranked.clear();
  a->ranked.reserve(a->bids.size());
  a->ranked.push_back(static_cast<uint32_t>(win));
  for (uint32_t i = 0; i < a->bids.size(); ++i)
    if (i != win) a->ranked.push_back(i);
  // Equal prices keep bid order, as a stable sort would, without the
  // buffer one allocates on every call.
  std::sort(a->ranked.begin() + 1, a->ranked.end(),
            [&](uint32_t x, uint32_t y) {
              const double px = a->prices[x].price, py = a->prices[y].price;
              return px < py || (px == py && x < y);
            });
  a->next = 0;
  award_next(self, a);
}

// Sends the call for bids to `picked` (indices into opt.workers) and to
// the auction's claimers.
void send_bids(rpointer self, auction_ptr a,
               const std::vector<uint32_t>& picked) {
  auto& st = self->state;
  std::vector<uint32_t> with_claimers;
  if (!a->claimers.empty()) {
    with_claimers.reserve(picked.size() + a->claimers.size());
    with_claimers = picked;
    with_claimers.insert(with_claimers.end(), a->claimers.begin(),
                         a->claimers.end());
  }
  const auto& candidates = a->claimers.empty() ? picked : with_claimers;
  // Their total speed sizes each bidder's reservation (expected_share).
  double bidders_speed = 0;
  for (uint32_t i : candidates)
    bidders_speed += st.opt.speeds[i];
  auto groups = by_bidder(st, candidates);
  a->bids.reserve(candidates.size());
  a->unanswered.clear();
  for (const auto& g : groups)
    a->unanswered.push_back(g.first);
  ++st.rounds;
  const uint32_t w = await(self, a, auction::bids_in, st.opt.bid_deadline);
  for (auto& [g_, ws] : groups) {
    const uint32_t g = g_;  // a structured binding is not captured
    // No CAF timeout: the sweep ends the wait at the deadline, and a
    // bidder always answers (a remote one with its own call's timeout).
    self->request(st.bidders[g], caf::infinite, bid_atom::value,
                  call_for_bids{a->request, bidders_speed, ws, a->name})
        .then(
            [=, asked = ws](bid_list& got) mutable {
              if (a->wait != w) return;  // past the deadline
              auto& st = self->state;
              st.bidder_quiet[g].strikes = 0;
              st.bidder_quiet[g].answered = true;
              ended_call(*a, g);
              // Only workers asked of this bidder, each once: a bidder
              // cannot bid for others.
              const auto n = static_cast<uint32_t>(a->request.blocks.size());
              for (const bid& b : got.bids) {
                auto it = std::find(asked.begin(), asked.end(), b.worker);
                if (it == asked.end()) continue;
                asked.erase(it);
                // Checked before it is priced: one bad value (a NaN, more
                // cached blocks than the request has) would win the
                // auction for whoever sent it.
                const auto& m = st.members[b.worker];
                const auto fault =
                    check_bid(b, n, m.heard ? m.last.speed : 0.0);
                if (fault != member_fault::none) {
                  refuse_member(member_message::bid, fault,
                                st.bidder_agent[m.bidder], b.worker);
                  continue;
                }
                a->bids.push_back(b);
                ++st.bids;
              }
              if (a->unanswered.empty() && end_wait(a, w)) decide(self, a);
            },
            [=](caf::error&) {
              if (a->wait != w) return;
              // A silent bidder's workers are left out of this auction,
              // and of the next ones for a while.
              quiet(self, g);
              ended_call(*a, g);
              if (a->unanswered.empty() && end_wait(a, w)) decide(self, a);
            });
  }
}

// Appends the `n` least loaded of `load` (pairs of load and index into
// `rest`) to `out`, least loaded first.
void take_least(std::vector<std::pair<double, uint32_t>>& load, size_t n,
                const std::vector<uint32_t>& rest, std::vector<uint32_t>& out) {
  n = std::min(n, load.size());
  // (The index makes every pair distinct: the same few, in the same order,
  // as a partial sort, which costs a heap operation per candidate.)
  if (n < load.size())
    std::nth_element(load.begin(), load.begin() + n, load.end());
  std::sort(load.begin(), load.begin() + n);
  for (size_t k = 0; k < n; ++k)
    out.push_back(rest[load[k].second]);
}

// Up to `fanout` candidates: first the holders (deepest first) that are
// eligible, then the least loaded of the rest by their last heartbeat.
std::vector<uint32_t> pick(rpointer self, const std::vector<uint32_t>& eligible,
                           const std::vector<holder_match>& holders) {
  auto& st = self->state;
  const size_t fanout = std::max<size_t>(st.opt.fanout, 1);
  std::vector<uint32_t> out;
  out.reserve(fanout);
  // Per worker: 1 eligible, 2 eligible and taken.
  auto& mark = st.pick_mark;
  // Sized once to the id bound and cleared after use: a pick costs
  // O(eligible), not O(highest id).
  if (mark.size() < st.opt.workers.size()) mark.resize(st.opt.workers.size());
  for (uint32_t i : eligible)
    mark[i] = 1;
  for (const auto& h : holders) {
    if (out.size() >= (fanout + 1) / 2) break;
    if (h.worker < mark.size() && mark[h.worker] == 1) {
      out.push_back(h.worker);
      mark[h.worker] = 2;
    }
  }
  auto& rest = st.pick_rest;
  rest.clear();
  for (uint32_t i : eligible) {
    if (mark[i] == 1) rest.push_back(i);
    mark[i] = 0;
  }
  if (rest.empty()) return out;
  // Equal loads take turns rather than the lowest ids: an idle fleet, or a
  // burst whose calls all go out before a single award.
  std::rotate(rest.begin(), rest.begin() + st.picks++ % rest.size(),
              rest.end());
  // Each load once (the last heartbeat plus what this router awarded
  // since), then only the few least loaded in order; equal loads keep the
  // rotated order. Workers of bidders that never answered a call (a new
  // agent, or forged heartbeats, which claim to be idle) get one place of
  // a call (two or more left), and any the others leave empty.
  auto& load = st.pick_load;
  auto& unproven = st.pick_unproven;
  load.clear();
  unproven.clear();
  for (uint32_t k = 0; k < rest.size(); ++k) {
    const auto& m = st.members[rest[k]];
    const bool proven =
        !st.opt.quiet_silent_bidders || st.bidder_quiet[m.bidder].answered;
    (proven ? load : unproven)
        .emplace_back(m.last.queued + m.last.reserved + m.since_beat +
                          st.auction->pending(rest[k]),
                      k);
  }
  const size_t want = std::min(rest.size(), fanout - out.size());
  size_t new_ones = 0;
  if (!unproven.empty())
    new_ones =
        std::min(unproven.size(),
                 load.size() >= want ? size_t{want >= 2} : want - load.size());
  take_least(load, want - new_ones, rest, out);
  take_least(unproven, new_ones, rest, out);
  return out;
}

void call_for_bids_(rpointer self, auction_ptr a) {
  auto& st = self->state;
  ++a->round;
  a->bids.clear();
  auto& eligible = a->eligible;
  eligible.clear();
  eligible.reserve(st.present.size());
  // Maybe handed out before: a worker may have taken it that this router
  // has since counted out, for the outage that lost the first answer's ack
  // (a nats-server restart) silenced its heartbeats too, or that drains
  // now. Asked, it claims the request (bid.holds); elsewhere it would run
  // twice. Not only when redelivered: a server that restarts before its
  // consumer state is on disk hands a request out again as if for the
  // first time (delivery count 1).
  a->claimers.clear();
  const bool taken = may_be_taken(a->request);
  const auto now = self->clock().now();
  // Bidders that answered before but sit out now (late under load, say):
  // asked again when no bidder that ever answered is left, for forged
  // heartbeats alone would make the auction all silent.
  auto& sitting_out = st.sitting_out;
  sitting_out.clear();
  // Only the request's pool bids; a model no worker serves is an error of
  // its own (a gateway answers 404, not "try later").
  const auto model = st.pools.find(a->request.model);
  if (!model) {
    fail(self, a, ec::not_found,
         "unknown model '" + a->request.model + "' for request " +
             std::to_string(a->request.id));
    return;
  }
  bool proven = !st.opt.quiet_silent_bidders;
  for (uint32_t i : st.present) {
    const auto& m = st.members[i];
    if (!st.pools.serves(i, *model) ||
        std::find(a->request.exclude.begin(), a->request.exclude.end(), i) !=
            a->request.exclude.end())
      continue;
    const auto& q = st.bidder_quiet[m.bidder];
    const bool able = m.live && !m.last.draining && !m.last.unhealthy;
    if (able && q.until <= now) {
      eligible.push_back(i);
      proven = proven || q.answered;
    } else {
      if (able && q.answered) sitting_out.push_back(i);
      if (taken) a->claimers.push_back(i);
    }
  }
  if (!proven && !sitting_out.empty()) {
    const auto mid =
        eligible.insert(eligible.end(), sitting_out.begin(), sitting_out.end());
    std::inplace_merge(eligible.begin(), mid, eligible.end());
    // Not also claimers: each worker is asked once.
    auto& c = a->claimers;
    c.erase(std::remove_if(c.begin(), c.end(),
                           [&](uint32_t i) {
                             return std::binary_search(sitting_out.begin(),
                                                       sitting_out.end(), i);
                           }),
            c.end());
  }
  if (!eligible.empty() && a->request.redelivered) {
    // Surely handed out before, and rare: skip the index and ask everyone,
    // for the taker may hold none of the prefix.
    send_bids(self, a, eligible);
    return;
  }
  if (eligible.empty()) {
    // Heartbeats may only be late (a busy host): hold the request for the
    // next ticks while rounds are left.
    if (a->round < st.opt.max_auctions && st.held.size() < st.opt.max_held) {
      again(st, router_state::no_live_worker);  // on the next tick
      st.held.push_back(a);
      return;
    }
    fail(self, a, ec::not_found,
         "no live worker for request " + std::to_string(a->request.id));
    return;
  }
  if (eligible.size() <= st.opt.fanout || st.opt.shards.empty()) {
    send_bids(self, a, eligible);
    return;
  }
  if (a->request.blocks.empty()) {
    // A prompt shorter than one block: no holder to ask about.
    send_bids(self, a, pick(self, eligible, {}));
    return;
  }
  // Too many to ask them all: ask the shard of the chain's first block who
  // holds the prefix. Without its answer by the deadline, the least loaded
  // alone (the sweep).
  const auto& shard =
      st.opt.shards[shard_of(a->request.blocks.front(), st.opt.shards.size())];
  const uint32_t w = await(self, a, auction::holders, st.opt.query_deadline);
  self->request(shard, caf::infinite, query_atom::value, a->request.blocks)
      .then(
          [=](const std::vector<holder_match>& holders) {
            if (end_wait(a, w))
              send_bids(self, a, pick(self, a->eligible, holders));
          },
          [=](caf::error&) {
            if (end_wait(a, w)) send_bids(self, a, pick(self, a->eligible, {}));
          });
}

// Ends the waits past their deadline as a silent answer would; a wait
// that ended otherwise leaves the list here.
void sweep(rpointer self) {
  auto& st = self->state;
  const auto now = self->clock().now();
  st.sweeping.clear();
  st.sweeping.swap(st.timed);  // what expiring starts goes to st.timed
  for (auto& [a, w] : st.sweeping) {
    if (a->wait != w || a->awaits == auction::none) continue;
    if (a->deadline > now) {
      st.timed.emplace_back(std::move(a), w);
      continue;
    }
    const auto what = a->awaits;
    end_wait(a, w);
    if (what == auction::holders)
      send_bids(self, a, pick(self, a->eligible, {}));
    else if (what == auction::award_reply)
      award_unanswered(self, a, a->awardee);
    else {
      for (uint32_t g : a->unanswered)
        quiet(self, g);
      a->unanswered.clear();
      decide(self, a);  // with the bids that came in time
    }
  }
  st.sweeping.clear();
  st.sweep_armed = !st.timed.empty();
  if (st.sweep_armed)
    self->delayed_send(self, st.opt.deadline_sweep, sweep_atom::value);
}

// A present member stops using bidder `g`.
void unuse(router_state& st, uint32_t g) {
  if (g < st.bidder_users.size() && --st.bidder_users[g] == 0)
    ++st.bidders_unused;
}

// The bidder of `agent`'s workers through `b` (an agent's workers share
// one, which one call for bids asks for all of them): its slot, or the
// slot of a bidder no worker uses any more, or a new one.
uint32_t bidder_slot(router_state& st, bidder_actor b,
                     const std::string& agent) {
  if (auto it = st.agent_bidder.find(agent);
      it != st.agent_bidder.end() && st.bidders[it->second] == b)
    return it->second;
  uint32_t g = static_cast<uint32_t>(st.bidders.size());
  if (st.bidders_unused > 0)
    g = static_cast<uint32_t>(
        std::find(st.bidder_users.begin(), st.bidder_users.end(), uint32_t{0}) -
        st.bidder_users.begin());
  if (g == st.bidders.size()) {
    st.bidders.emplace_back();
    st.bidder_users.push_back(0);
    st.bidder_quiet.emplace_back();
    st.bidder_agent.emplace_back();
  } else {
    --st.bidders_unused;
    auto was = st.agent_bidder.find(st.bidder_agent[g]);
    if (was != st.agent_bidder.end() && was->second == g)
      st.agent_bidder.erase(was);
    st.bidder_quiet[g] = {};
  }
  st.bidders[g] = std::move(b);
  st.bidder_agent[g] = agent;
  st.agent_bidder[agent] = g;
  return g;
}

// Member `id` joins, or comes back with another bidder: `agent`'s through
// `b`.
void admit(router_state& st, uint32_t id, bidder_actor b,
           const std::string& agent) {
  auto& m = st.members[id];
  st.opt.workers[id] = nullptr;  // pushed: never pinged
  if (m.present) unuse(st, m.bidder);
  m.bidder = bidder_slot(st, std::move(b), agent);
  ++st.bidder_users[m.bidder];
  if (!m.present)
    st.present.insert(
        std::lower_bound(st.present.begin(), st.present.end(), id), id);
  st.auction->join(id);
  m.present = true;
}

// Member `i` was heard: its heartbeat, pushed or answered.
void heard(router_state& st, uint32_t i, const worker_status& s) {
  auto& m = st.members[i];
  m.heard = true;
  m.live = true;
  m.missed = 0;
  m.last = {s.queued, s.reserved, s.speed, s.draining, s.unhealthy};
  m.since_beat = 0;
  st.pools.set(i, s.models);
  // Names the sender of what its bidder refuses (a pushed member's bidder
  // is its agent's already).
  auto& agent = st.bidder_agent[m.bidder];
  if (!m.pushed && agent != s.agent) agent = s.agent;
}

// Liveness. A member whose heartbeats come to the router is out once its
// last is older than stale_after; one the router holds in process is
// pinged, and out after missed_beats unanswered pings. Either is back
// with its next beat or answer. Then held requests get another try.
void tick(rpointer self) {
  auto& st = self->state;
  const auto now = self->clock().now();
  // One line for all: a node that dies takes its workers along.
  std::string silenced;
  uint32_t n_silenced = 0;
  for (uint32_t i : st.present) {
    auto& m = st.members[i];
    if (m.pushed) {
      if (m.live && now - m.beat_at > st.opt.stale_after) {
        m.live = false;
        if (++n_silenced <= 8)
          silenced += (n_silenced > 1 ? ", " : "") + std::to_string(i);
      }
      continue;
    }
    self->request(st.opt.workers[i], st.opt.heartbeat, status_atom::value)
        .then([=](const worker_status& s) { heard(self->state, i, s); },
              [=](caf::error&) {
                auto& m = self->state.members[i];
                if (++m.missed >= self->state.opt.missed_beats)
                  count_out(self, i, "no heartbeat");
              });
  }
  if (n_silenced > 8)
    silenced += " and " + std::to_string(n_silenced - 8) + " more";
  if (n_silenced > 0)
    KVMESH_INFO("worker%s %s out of the auctions of router %s (no heartbeat)",
                n_silenced > 1 ? "s" : "", silenced.c_str(),
                st.opt.name.c_str());
  auto held = std::move(st.held);
  st.held.clear();
  for (auto& a : held)
    call_for_bids_(self, a);
  self->delayed_send(self, st.opt.heartbeat, tick_atom::value);
}

}  // namespace

router_actor::behavior_type router(rpointer self, router_options opt) {
  auto& st = self->state;
  st.opt = std::move(opt);
  st.auction = std::make_unique<auctioneer>(
      st.opt.workers.size(), st.opt.block_tokens, st.opt.price, st.opt.seed);
  if (st.opt.speeds.size() != st.opt.workers.size())
    st.opt.speeds.assign(st.opt.workers.size(), 1.0);
  st.members.resize(st.opt.workers.size());
  for (size_t i = 0; i < st.members.size(); ++i) {
    st.members[i].present = static_cast<bool>(st.opt.workers[i]);
    st.members[i].bidder = static_cast<uint32_t>(st.bidders.size());
    st.bidders.emplace_back(st.opt.workers[i]);
    st.bidder_users.push_back(st.members[i].present ? 1 : 0);
    st.bidders_unused += !st.members[i].present;
    st.bidder_quiet.emplace_back();
    st.bidder_agent.emplace_back();
    if (st.members[i].present) st.present.push_back(static_cast<uint32_t>(i));
  }
  std::random_device rd;
  st.next_name = (uint64_t{rd()} << 32) ^ rd();
  self->delayed_send(self, st.opt.heartbeat, tick_atom::value);
  return {
      [=](route_atom, route_request_msg& r) -> caf::result<decision> {
        auto& st = self->state;
        if (st.present.empty())
          return caf::make_error(ec::not_found, "router has no workers");
        // No blocks is a prompt shorter than one: no reuse to price, but
        // queue and occupancy still decide.
        if (r.input_tokens == 0)
          return caf::make_error(
              ec::empty_input,
              "request " + std::to_string(r.id) + " has no prompt tokens");
        // Turned away before a promise exists: once one does, it owns the
        // response and an error returned here would not reach the client.
        const bool wait = st.inflight >= st.opt.max_inflight;
        if (wait && st.waiting.size() >= st.opt.max_held) {
          ++st.overloaded;
          return caf::make_error(ec::capacity_exceeded,
                                 "overloaded: " + std::to_string(st.inflight) +
                                     " auctions in flight and " +
                                     std::to_string(st.waiting.size()) +
                                     " requests waiting");
        }
        auto a = std::make_shared<auction>();
        a->arrived = self->clock().now();
        a->request = std::move(r);
        a->name = st.next_name++;
        if (a->name == 0) a->name = st.next_name++;
        a->promise = self->make_response_promise<decision>();
        if (wait) {
          st.waiting.push_back(a);
          return a->promise;
        }
        ++st.inflight;
        call_for_bids_(self, a);
        return a->promise;
      },
      [=](get_atom, weights_atom) -> price_config {
        return self->state.auction->price();
      },
      [=](put_atom, weights_atom, const price_config& p) {
        self->state.auction->set_price(p);
      },
      [=](status_atom) -> router_status {
        auto& st = self->state;
        router_status s;
        s.name = st.opt.name;
        s.decisions = st.decisions;
        s.reauctions = st.reauctions;
        s.held = st.held.size() + st.waiting.size();
        s.overloaded = st.overloaded;
        s.reauctions_refused = st.reauctions_by[router_state::refused];
        s.reauctions_unanswered = st.reauctions_by[router_state::unanswered];
        s.reauctions_no_bids = st.reauctions_by[router_state::no_bids];
        s.reauctions_saturated = st.reauctions_by[router_state::saturated];
        s.reauctions_no_live_worker =
            st.reauctions_by[router_state::no_live_worker];
        s.rounds = st.rounds;
        s.bids = st.bids;
        s.runner_up_awards = st.runner_up_awards;
        s.workers = st.present.size();
        for (uint32_t i : st.present)
          s.live_workers += st.members[i].live;
        if (!st.latency_us.empty()) {
          std::vector<float> v = st.latency_us;
          auto at = [&](double q) {
            auto k = static_cast<size_t>(q * static_cast<double>(v.size() - 1));
            std::nth_element(v.begin(), v.begin() + k, v.end());
            return static_cast<double>(v[k]);
          };
          s.auction_p50_us = at(0.5);
          s.auction_p99_us = at(0.99);
        }
        return s;
      },
      [=](put_atom, workers_atom, const worker_status& s, bidder_actor b) {
        auto& st = self->state;
        const uint32_t id = s.worker;
        // Ids index dense tables: a bound keeps a bad id from growing them.
        if (id >= max_worker_id || !b || !(s.speed > 0)) {
          CAF_LOG_WARNING("router ignores worker" << id);
          return;
        }
        if (id >= st.opt.workers.size()) {
          st.opt.workers.resize(id + 1);
          st.opt.speeds.resize(id + 1, 1.0);
          router_state::member absent;
          absent.present = false;
          st.members.resize(id + 1, absent);
        }
        auto& m = st.members[id];
        // Most beats are of a member with the same bidder: nothing to look
        // up.
        if (!m.present || st.opt.workers[id] || st.bidders[m.bidder] != b ||
            st.bidder_agent[m.bidder] != s.agent)
          admit(st, id, std::move(b), s.agent);
        st.opt.speeds[id] = s.speed;
        m.pushed = true;
        m.beat_at = self->clock().now();
        heard(st, id, s);
      },
      [=](drop_atom, workers_atom, uint32_t id) {
        auto& st = self->state;
        if (id >= st.members.size() || !st.members[id].present) return;
        // Auctions in flight that asked it end as with a silent bidder
        // (its bidder slot stays until another stand-in takes it).
        auto& m = st.members[id];
        unuse(st, m.bidder);
        const uint32_t b = m.bidder;
        m = router_state::member{};
        m.present = false;
        m.live = false;
        m.bidder = b;
        st.opt.workers[id] = nullptr;
        st.pools.clear(id);
        st.present.erase(
            std::lower_bound(st.present.begin(), st.present.end(), id));
        st.auction->leave(id);
      },
      [=](put_atom, answered_atom, const bidder_actor& b,
          const std::string& agent) {
        auto& st = self->state;
        auto it = st.agent_bidder.find(agent);
        if (it != st.agent_bidder.end() && st.bidders[it->second] == b)
          st.bidder_quiet[it->second].answered = true;
      },
      [=](put_atom, shards_atom, std::vector<index_shard_actor>& shards) {
        self->state.opt.shards = std::move(shards);
      },
      [=](tick_atom) { tick(self); },
      [=](sweep_atom) { sweep(self); },
  };
}

}  // namespace kvmesh
