// The node agent's endpoint: calls for bids gathered from its workers,
// awards, withdraws and releases passed on, their heartbeats, and the
// shards' heartbeats that make its workers announce their caches again.
#include "cluster/agent_node.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <unordered_map>

#include "actors/router.hpp"
#include "cluster/bridge.hpp"
#include "cluster/node_base.hpp"
#include "cluster/remote.hpp"
#include "core/log.hpp"
#include "messages/codec.hpp"
#include "messages/limits.hpp"

namespace kvmesh {
namespace detail {
namespace {

// The "overloaded" answers of an agent's subjects, each in the type its
// callers decode.
std::optional<bytes> agent_overloaded(const std::string& subject,
                                      const std::string& why) {
  const std::string verb = verb_of(subject);
  if (verb == "bid") return encode(bid_list{{}, why});
  if (verb == "award") return encode(award_reply{false, why, {}});
  if (verb == "drain") {
    admin_reply r;
    r.error = why;
    return encode(r);
  }
  // Releases await no answer. A withdraw refused goes unanswered, never
  // "withdrawn" (the worker may hold the request): the router asks again.
  return std::nullopt;
}

// agent_node::announcements as the endpoint counts them and a scrape reads.
struct announce_counts {
  std::atomic<uint64_t> made{0};
  std::atomic<uint64_t> deferred{0};
};

struct agent_state {
  static inline const char* name = "agent_endpoint";
  nats_bus* bus = nullptr;
  std::shared_ptr<inbox> box;
  mesh_options mesh;
  std::string shard_beat_subject;  // mesh.subj.shard_beat(), built once
  std::string beat_subject;        // mesh.subj.worker_beat(agent), likewise
  std::string agent;
  std::unordered_map<uint32_t, worker_actor> workers;
  std::vector<uint32_t> ids;
  // The real engines' workers, which gateways calling the engines report
  // to, and those gateways' reporters: when each was last heard.
  std::unordered_map<uint32_t, engine_worker_actor> engines;
  std::unordered_map<uint64_t, steady::time_point> reporters;
  uint32_t shards = 0;
  std::vector<index_shard_actor> proxies;  // one per shard, once known
  // Each shard's last heartbeat: when, and the events it had applied.
  struct shard_seen {
    steady::time_point at;
    uint64_t events = 0;
    uint64_t incarnation = 0;
    uint64_t refused = 0;  // KV messages it refused (overloaded)
    // It refused some since: the workers announce their caches again
    // once it has stopped (sooner would add to its load).
    bool announce_due = false;
    // An announcement can overflow the shard again and be refused in
    // turn: the next one for refusals waits this many heartbeats (doubling
    // to 32; back to 0 after twice that without refusals).
    uint32_t backoff = 0;
    steady::time_point quiet_until{};
  };
  std::map<uint32_t, shard_seen> seen;
  // The workers' last announcement, and whether one waits for its turn
  // (agent_announce); counted for the metrics.
  steady::time_point announced{};
  bool announce_waiting = false;
  std::shared_ptr<announce_counts> counts;
  batcher out;  // replies, sent when the mailbox has drained
  std::shared_ptr<mailbox_gate> gate;  // what NATS handed it (bridge)
  // Calls for bids whose workers' answers are still coming, by tag.
  struct open_call {
    bid_gather_ptr bids;
    std::string reply;
    steady::time_point since;
  };
  std::unordered_map<uint64_t, open_call> calls;
  uint64_t next_tag = 0;
};

using agent_pointer = caf::stateful_actor<agent_state>*;

// The bids a gather holds, as a call's answer.
bid_list bids_of(const bid_gather& g) {
  bid_list out;
  g.collect(out.bids);
  return out;
}

void agent_bid(agent_pointer self, const std::string& reply,
               const bytes& payload) {
  auto& st = self->state;
  auto cfb = decode<call_for_bids>(payload);
  if (!cfb) {
    answer(*st.bus, reply, encode(bid_list{{}, cfb.err().message}));
    return;
  }
  // The asked workers hosted here, as the call's list: each worker finds
  // itself in it.
  std::vector<uint32_t> here;
  here.reserve(cfb->workers.size());
  for (uint32_t w : cfb->workers)
    if (st.workers.count(w) != 0) here.push_back(w);
  if (here.empty()) {
    answer(*st.bus, reply,
           encode(bid_list{{}, "agent " + st.agent + " hosts none of them"}));
    return;
  }
  const uint64_t tag = st.next_tag++;
  auto bids = std::make_shared<bid_gather>(
      here.size(), caf::actor_cast<caf::actor_addr>(self), tag);
  st.calls.emplace(tag, agent_state::open_call{bids, reply, steady::now()});
  // One message for all of them: CAF shares it (copy on write, and the
  // workers only read it), where a call each would copy the prompt's
  // blocks once per worker. Each puts its bid in the gather, the last one
  // tells this actor (agent_bids); a worker never fails to, short of its
  // death, which agent_sweep covers.
  const caf::message call =
      caf::make_message(bid_atom::value,
                        call_for_bids{std::move(cfb->request),
                                      cfb->bidders_speed, here, cfb->auction},
                        std::move(bids));
  for (uint32_t w : here)
    self->send(caf::actor_cast<caf::actor>(st.workers.at(w)), call);
}

// Every worker asked by call `tag` answered: the call is answered with
// their bids.
void agent_bids(agent_pointer self, uint64_t tag) {
  auto& st = self->state;
  auto it = st.calls.find(tag);
  if (it == st.calls.end()) return;  // swept: answered without them
  answer_batched(self, *st.bus, st.out, it->second.reply,
                 encode(bids_of(*it->second.bids)));
  st.calls.erase(it);
}

// Calls still missing answers a heartbeat after they came (a worker died
// meanwhile) are answered with the bids they have: the router's deadline
// passed long ago, but the call's place is freed.
void agent_sweep(agent_pointer self) {
  auto& st = self->state;
  const auto old = steady::now() - st.mesh.heartbeat;
  for (auto it = st.calls.begin(); it != st.calls.end();)
    if (it->second.since < old) {
      answer(*st.bus, it->second.reply, encode(bids_of(*it->second.bids)));
      it = st.calls.erase(it);
    } else {
      ++it;
    }
}

// Gateway reporters a flood of forged reports can make the agent keep (one
// per gateway thread is the norm).
constexpr size_t max_reporters = 65536;

// A gateway's report of a request at this agent's engine: to its worker,
// and the reporter's lease renewed.
void agent_progress(agent_pointer self, const bytes& payload) {
  auto& st = self->state;
  auto p = decode<request_progress>(payload);
  if (!p) return;  // counted by the codec, per kind
  if (p->reporter == 0) {
    KVMESH_DEBUG("agent %s: a gateway's report with reporter id 0",
                 st.agent.c_str());
    return;
  }
  auto s = st.reporters.find(p->reporter);
  if (s != st.reporters.end()) {
    s->second = steady::now();
  } else if (st.reporters.size() < max_reporters) {
    st.reporters.emplace(p->reporter, steady::now());
  } else {
    KVMESH_WARN(
        "agent %s: past %zu gateway reporters; a report of a new one is "
        "dropped",
        st.agent.c_str(), max_reporters);
    return;
  }
  if (p->event == progress_event::lease) {
    // It lists the reporter's requests at every engine here: one message,
    // shared, for all of them.
    const caf::message m =
        caf::make_message(progress_atom::value, std::move(*p));
    for (auto& [id, w] : st.engines)
      self->send(caf::actor_cast<caf::actor>(w), m);
    return;
  }
  auto it = st.engines.find(p->worker);
  if (it == st.engines.end()) {
    KVMESH_DEBUG("agent %s: a gateway's report names no engine worker %u",
                 st.agent.c_str(), p->worker);
    return;
  }
  self->send(it->second, progress_atom::value, std::move(*p));
}

// Reporters unheard for progress_lease_timeout: their gateway died or lost
// the mesh, and nothing will say that their requests ended.
void agent_expire_reporters(agent_pointer self) {
  auto& st = self->state;
  const auto old = steady::now() - progress_lease_timeout;
  for (auto it = st.reporters.begin(); it != st.reporters.end();) {
    if (it->second >= old) {
      ++it;
      continue;
    }
    for (auto& [id, w] : st.engines)
      self->send(w, drop_atom::value, it->first);
    it = st.reporters.erase(it);
  }
}

void agent_award(agent_pointer self, const std::string& reply,
                 const bytes& payload) {
  auto& st = self->state;
  auto a = decode<award_msg>(payload);
  if (!a) {
    answer(*st.bus, reply, encode(award_reply{false, a.err().message, {}}));
    return;
  }
  auto it = st.workers.find(a->worker);
  if (it == st.workers.end()) {
    answer(*st.bus, reply,
           encode(award_reply{false,
                              "no worker " + std::to_string(a->worker) +
                                  " at agent " + st.agent,
                              {}}));
    return;
  }
  self->request(it->second, caf::infinite, award_atom::value, std::move(*a))
      .then(
          [self, reply](const award_reply& r) {
            answer_batched(self, *self->state.bus, self->state.out, reply,
                           encode(r));
          },
          [self, reply](caf::error& e) {
            answer_batched(self, *self->state.bus, self->state.out, reply,
                           encode(award_reply{false, describe(e), {}}));
          });
}

// A withdraw goes to the awardee behind any award of it still on its way
// there (one mailbox, in order): its answer is final.
void agent_withdraw(agent_pointer self, const std::string& reply,
                    const bytes& payload) {
  auto& st = self->state;
  auto w = decode<withdraw_msg>(payload);
  if (!w) return;  // no answer: the router asks again, then counts it out
  auto it = st.workers.find(w->worker);
  if (it == st.workers.end()) {
    // None here by that id runs anything.
    answer(*st.bus, reply, encode(withdraw_reply{}));
    return;
  }
  self->request(it->second, caf::infinite, withdraw_atom::value, *w)
      .then(
          [self, reply](const withdraw_reply& r) {
            answer_batched(self, *self->state.bus, self->state.out, reply,
                           encode(r));
          },
          [](caf::error&) {
            // The worker is gone: it runs nothing, and the router, hearing
            // nothing, counts it out by its heartbeats.
          });
}

// Each worker announces its cache to every shard (its stand-ins, after a
// drop of what the shard held of it), at most once per announce_beats
// heartbeats: a shard's heartbeat is anyone's to forge on an open server,
// and an announcement costs the shards a write of every cached block. One
// due sooner is made when its turn comes (the beat handler).
bool announce_turn(const agent_state& st) {
  return st.counts->made == 0 || steady::now() - st.announced >=
                                     st.mesh.heartbeat * st.mesh.announce_beats;
}

void agent_announce(agent_pointer self) {
  auto& st = self->state;
  const auto now = steady::now();
  if (!announce_turn(st)) {
    if (!st.announce_waiting) ++st.counts->deferred;
    st.announce_waiting = true;
    return;
  }
  st.announce_waiting = false;
  st.announced = now;
  ++st.counts->made;
  for (auto& [id, w] : st.workers)
    self->send(w, put_atom::value, shards_atom::value, st.proxies);
}

// The index has `n` shards (a shard's heartbeat said so): KV events go to
// stand-ins of them from now on, and each worker announces what it holds
// (its events before went nowhere).
void agent_learn_shards(agent_pointer self, uint32_t n) {
  auto& st = self->state;
  if (n == st.shards || n == 0 || n > 4096) return;
  // A new count means a new announcement: it waits for its turn too (a
  // later heartbeat brings the count again).
  if (!announce_turn(st)) {
    ++st.counts->deferred;
    return;
  }
  st.shards = n;
  st.proxies.clear();
  st.seen.clear();
  for (uint32_t i = 0; i < n; ++i)
    st.proxies.push_back(
        spawn_remote_shard(self->system(), st.box, st.mesh, i, st.agent));
  agent_announce(self);
}

// A shard's heartbeat: one heard for the first time, or from a new
// incarnation (it restarted) has missed KV events. Its RocksDB kept what it
// had, not what came meanwhile: the workers announce their caches again (to
// every shard: one message names them all; a shard restart is rare). A
// shard that was only late is not new: announcing every cache to a busy
// shard (a million events at 64 workers) made it later still, and the
// mesh collapsed under its own announcements. Shards that do not tell
// their incarnation are judged as before: by a silence past the missed
// beats or fewer applied events.
void agent_shard_beat(agent_pointer self, const shard_status& s) {
  auto& st = self->state;
  const bool learnt = s.shards != st.shards;
  agent_learn_shards(self, s.shards);
  if (s.shards != st.shards || s.shard >= st.shards) return;
  const auto now = steady::now();
  auto it = st.seen.find(s.shard);
  // Heard first right after learning the count: the workers have just
  // announced themselves to every shard.
  bool lost_track = it == st.seen.end() ? !learnt
                    : s.incarnation != 0 && it->second.incarnation != 0
                        ? s.incarnation != it->second.incarnation
                        : now - it->second.at > stale_after(st.mesh) ||
                              s.events < it->second.events;
  // Refused KV events are missing from its index, and the refusals'
  // senders are unknown (the message was not read): every worker
  // announces again, once the shard refused nothing for a heartbeat.
  agent_state::shard_seen next{
      now, s.events, s.incarnation, s.refused_events, false, 0, {}};
  if (it != st.seen.end() && !lost_track) {
    const auto& last = it->second;
    next.announce_due = last.announce_due;
    next.backoff = last.backoff;
    next.quiet_until = last.quiet_until;
    if (s.refused_events > last.refused) {
      next.announce_due = true;
    } else if (next.announce_due && now >= last.quiet_until) {
      next.announce_due = false;
      next.backoff =
          std::min<uint32_t>(std::max<uint32_t>(1, last.backoff * 2), 32);
      next.quiet_until = now + st.mesh.heartbeat * next.backoff;
      lost_track = true;
      KVMESH_WARN(
          "shard %u refused KV events (%llu since it started, overloaded): "
          "workers of agent %s re-announce their caches",
          s.shard, static_cast<unsigned long long>(s.refused_events),
          st.agent.c_str());
    } else if (!next.announce_due && next.backoff > 0 &&
               now >= last.quiet_until + st.mesh.heartbeat * next.backoff) {
      next.backoff = 0;
    }
  }
  st.seen[s.shard] = next;
  if (!lost_track) return;
  KVMESH_INFO("shard %u is new or back: workers of agent %s re-announce",
              s.shard, st.agent.c_str());
  agent_announce(self);
}

caf::behavior agent_endpoint(
    agent_pointer self, nats_bus* bus, std::shared_ptr<inbox> box,
    mesh_options mesh, std::string agent,
    std::vector<std::pair<uint32_t, worker_actor>> ws,
    std::unordered_map<uint32_t, engine_worker_actor> engines,
    std::shared_ptr<mailbox_gate> gate,
    std::shared_ptr<announce_counts> counts) {
  auto& st = self->state;
  st.gate = std::move(gate);
  st.bus = bus;
  st.box = std::move(box);
  st.mesh = std::move(mesh);
  st.shard_beat_subject = st.mesh.subj.shard_beat();
  st.beat_subject = st.mesh.subj.worker_beat(agent);
  st.agent = std::move(agent);
  st.counts = std::move(counts);
  for (auto& [id, w] : ws) {
    st.workers.emplace(id, w);
    st.ids.push_back(id);
  }
  st.engines = std::move(engines);
  self->send(self, beat_atom::value);
  return {
      [=](nats_atom, const std::string& subject, const std::string& reply,
          const bytes& payload) {
        auto& st = self->state;
        // Handled once asked: the workers answer bids at once, and what
        // they queue is bounded by their own ledgers.
        gate_pass pass(st.gate.get(), payload.size());
        if (subject == st.shard_beat_subject) {
          if (auto s = decode<shard_status>(payload))
            agent_shard_beat(self, *s);
          return;
        }
        const std::string verb = verb_of(subject);
        if (verb == "bid") {
          agent_bid(self, reply, payload);
        } else if (verb == "award") {
          agent_award(self, reply, payload);
        } else if (verb == "withdraw") {
          agent_withdraw(self, reply, payload);
        } else if (verb == "progress") {
          agent_progress(self, payload);
        } else if (verb == "release") {
          if (auto r = decode<release_msg>(payload)) {
            // One message for all of them (CAF shares it): a worker reads
            // only the request.
            const caf::message m =
                caf::make_message(release_atom::value, std::move(*r));
            for (uint32_t w : m.get_as<release_msg>(1).workers)
              if (auto it = st.workers.find(w); it != st.workers.end())
                self->send(caf::actor_cast<caf::actor>(it->second), m);
          }
        } else if (verb == "drain") {
          auto r = decode<admin_request>(payload);
          admin_reply out;
          if (!r) {
            out.error = r.err().message;
          } else if (auto it = st.workers.find(r->worker);
                     it == st.workers.end()) {
            out.error = "no worker " + std::to_string(r->worker) +
                        " at agent " + st.agent;
          } else {
            self->send(it->second, put_atom::value, drain_atom::value, r->on);
            out.count = 1;
          }
          answer(*st.bus, reply, encode(out));
        }
      },
      [=](bid_atom, uint64_t tag) { agent_bids(self, tag); },
      [=](flush_atom) { self->state.out.flush(*self->state.bus); },
      [=](beat_atom) {
        auto& st = self->state;
        agent_sweep(self);
        agent_expire_reporters(self);
        if (st.announce_waiting) agent_announce(self);
        for (auto& [id, w] : st.workers)
          self->request(w, st.mesh.heartbeat, status_atom::value)
              .then(
                  [self](worker_status s) {
                    s.agent = self->state.agent;
                    (void)self->state.bus->publish(self->state.beat_subject,
                                                   encode(s));
                  },
                  [](caf::error&) {
                    // A worker that cannot answer sends no heartbeat:
                    // routers count it out, as they should.
                  });
        self->delayed_send(self, st.mesh.heartbeat, beat_atom::value);
      },
  };
}

}  // namespace
}  // namespace detail

using namespace detail;

struct agent_node::impl : node_base {
  std::vector<worker_actor> workers;
  std::shared_ptr<announce_counts> counts = std::make_shared<announce_counts>();
};

agent_node::agent_node(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
agent_node::~agent_node() {
  impl_->stop();
}
const std::vector<worker_actor>& agent_node::workers() const {
  return impl_->workers;
}
agent_node::announcements agent_node::announced() const {
  return {impl_->counts->made.load(), impl_->counts->deferred.load()};
}

expected<std::unique_ptr<agent_node>> agent_node::start(
    caf::actor_system& sys, nats_bus& bus, const agent_options& opt) {
  if (auto st = check_agent_name(opt.name); !st) return st.err();
  if (opt.workers.empty() && opt.external.empty())
    return make_error(ec::invalid_argument, "an agent needs workers");
  if (!opt.external.empty() && !opt.spawn_external)
    return make_error(ec::invalid_argument,
                      "external workers need a spawn function");
  auto p = std::make_unique<impl>();
  p->bus = &bus;
  // Its inbox under its name, which per-agent permissions let it read.
  auto box = inbox::open(bus, opt.name);
  if (!box) return box.err();
  p->box = *box;
  auto events = spawn_event_publisher(sys, bus, opt.mesh.subj);
  p->actors.push_back(caf::actor_cast<caf::actor>(events));
  std::vector<std::pair<uint32_t, worker_actor>> ws;
  std::unordered_map<uint32_t, engine_worker_actor> engines;
  for (auto wo : opt.workers) {
    if (wo.ledger.id >= max_worker_id)
      return make_error(ec::invalid_argument,
                        "worker id " + std::to_string(wo.ledger.id) +
                            " is not below " + std::to_string(max_worker_id));
    wo.listener = events;
    auto w = spawn_worker(sys, wo);
    if (!w) {
      p->stop();
      return w.err();
    }
    p->workers.push_back(*w);
    p->actors.push_back(caf::actor_cast<caf::actor>(*w));
    ws.emplace_back(wo.ledger.id, *w);
  }
  for (uint32_t id : opt.external) {
    if (id >= max_worker_id) {
      p->stop();
      return make_error(ec::invalid_argument,
                        "worker id " + std::to_string(id) + " is not below " +
                            std::to_string(max_worker_id));
    }
    auto w = opt.spawn_external(id, events);
    if (!w) {
      p->stop();
      return w.err();
    }
    const auto as_worker = caf::actor_cast<worker_actor>(*w);
    p->workers.push_back(as_worker);
    p->actors.push_back(caf::actor_cast<caf::actor>(*w));
    ws.emplace_back(id, as_worker);
    engines.emplace(id, *w);
  }
  auto gate = new_gate();
  auto ep = sys.spawn(agent_endpoint, &bus, p->box, opt.mesh, opt.name, ws,
                      std::move(engines), gate, p->counts);
  p->actors.push_back(ep);
  const auto& s = opt.mesh.subj;
  for (const char* verb :
       {"bid", "award", "release", "withdraw", "drain", "batch", "progress"})
    if (auto st = p->listen(s.agent(opt.name, verb), "", ep,
                            {gate, feed_kind::agent, agent_overloaded});
        !st) {
      p->stop();
      return st.err();
    }
  if (auto st = p->listen(s.shard_beat(), "", ep,
                          {gate, feed_kind::heartbeat, nullptr});
      !st) {
    p->stop();
    return st.err();
  }
  return std::unique_ptr<agent_node>(new agent_node(std::move(p)));
}

}  // namespace kvmesh
