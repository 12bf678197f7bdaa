// The NATS mesh's processes: node agents serving their WORKERs, router
// processes (ROUTER, membership and ADMIN), index shards, and the clients.
#include "cluster/mesh.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "cluster/bridge.hpp"
#include "cluster/remote.hpp"
#include "core/log.hpp"
#include "messages/codec.hpp"
#include "messages/json.hpp"
#include "messages/limits.hpp"

// A durable request's delivery travels with it to the front, which acks it
// once the decision is out; it never leaves the process.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<kvmesh::delivery>)

namespace kvmesh {

work_queue_options durable_queue(const subjects& subj) {
  work_queue_options o;
  std::string name = subj.prefix;
  for (char& c : name)
    c = std::isalnum(static_cast<unsigned char>(c))
            ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
            : '_';
  o.stream = name + "_ROUTE";
  // The client's reply subject follows the prefix: JetStream keeps the
  // subject, not a reply.
  o.subject = subj.route_durable() + ".>";
  return o;
}

// The record of a durable request's answer: its stream sequence (the same
// across redeliveries) and its id (so that a stream deleted and made again,
// which restarts sequences, cannot match an old record).
std::string record_key(uint64_t sequence, uint64_t request) {
  return std::to_string(sequence) + "-" + std::to_string(request);
}

record_options durable_records(const subjects& subj) {
  record_options o;
  o.bucket = durable_queue(subj).stream + "_DECISIONS";
  return o;
}

record_options durable_claims(const subjects& subj,
                              std::chrono::milliseconds lease) {
  record_options o;
  o.bucket = durable_queue(subj).stream + "_CLAIMS";
  o.ttl = lease;
  return o;
}

status check_name(const std::string& what, const std::string& name) {
  if (name.empty() || name.size() > 64)
    return make_error(ec::invalid_argument,
                      what + " must have 1 to 64 characters: '" + name + "'");
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'))
      return make_error(ec::invalid_argument,
                        what + " '" + name +
                            "' may hold only letters, digits, '-' and '_' "
                            "(it is a NATS subject token)");
  return ok;
}

namespace {

using steady = std::chrono::steady_clock;

caf::error to_caf(const error& e) {
  return caf::make_error(e.code, e.message);
}

std::string verb_of(const std::string& subject) {
  auto p = subject.rfind('.');
  return p == std::string::npos ? subject : subject.substr(p + 1);
}

// Refused (and counted by the bus) unless `reply` is an inbox.
void answer(nats_bus& bus, const std::string& reply, const bytes& payload) {
  if (!reply.empty()) (void)bus.publish_reply(reply, payload);
}

// A gate for one actor's NATS feeds, by the [limits] in force.
std::shared_ptr<mailbox_gate> new_gate() {
  const auto l = current_wire_limits();
  return std::make_shared<mailbox_gate>(l.max_mailbox_messages,
                                        l.max_mailbox_bytes);
}

// The "overloaded" answers, each in the type its subject's callers decode.
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

std::optional<bytes> query_overloaded(const std::string&,
                                      const std::string& why) {
  return encode(index_reply{{}, why});
}

std::optional<bytes> admin_overloaded(const std::string& subject,
                                      const std::string& why) {
  // weights.get answers a PriceConfig, which has no room for an error: its
  // caller times out, as it would with a router gone.
  if (verb_of(subject) == "get") return std::nullopt;
  admin_reply r;
  r.error = why;
  return encode(r);
}

// A worker is gone once its heartbeat is older than this: half a beat
// before the last of `missed_beats`, so a dead worker is out within
// missed_beats heartbeats of its death even when it died right after one.
caf::timespan stale_after(const mesh_options& m) {
  return std::chrono::duration_cast<caf::timespan>(
      m.heartbeat * (std::max<uint32_t>(m.missed_beats, 1) - 0.5));
}

// -- node agent ---------------------------------------------------------------

struct agent_state {
  static inline const char* name = "agent_endpoint";
  nats_bus* bus = nullptr;
  std::shared_ptr<inbox> box;
  mesh_options mesh;
  std::string shard_beat_subject;  // mesh.subj.shard_beat(), built once
  std::string agent;
  std::unordered_map<uint32_t, worker_actor> workers;
  std::vector<uint32_t> ids;
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

// The index has `n` shards (a shard's heartbeat said so): KV events go to
// stand-ins of them from now on, and each worker announces what it holds
// (its events before went nowhere).
void agent_learn_shards(agent_pointer self, uint32_t n) {
  auto& st = self->state;
  if (n == st.shards || n == 0 || n > 4096) return;
  st.shards = n;
  st.proxies.clear();
  st.seen.clear();
  for (uint32_t i = 0; i < n; ++i)
    st.proxies.push_back(
        spawn_remote_shard(self->system(), st.box, st.mesh, i));
  for (auto& [id, w] : st.workers)
    self->send(w, put_atom::value, shards_atom::value, st.proxies);
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
  for (auto& [id, w] : st.workers)
    self->send(w, put_atom::value, shards_atom::value, st.proxies);
}

caf::behavior agent_endpoint(agent_pointer self, nats_bus* bus,
                             std::shared_ptr<inbox> box, mesh_options mesh,
                             std::string agent,
                             std::vector<std::pair<uint32_t, worker_actor>> ws,
                             std::shared_ptr<mailbox_gate> gate) {
  auto& st = self->state;
  st.gate = std::move(gate);
  st.bus = bus;
  st.box = std::move(box);
  st.mesh = std::move(mesh);
  st.shard_beat_subject = st.mesh.subj.shard_beat();
  st.agent = std::move(agent);
  for (auto& [id, w] : ws) {
    st.workers.emplace(id, w);
    st.ids.push_back(id);
  }
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
        for (auto& [id, w] : st.workers)
          self->request(w, st.mesh.heartbeat, status_atom::value)
              .then(
                  [self](worker_status s) {
                    s.agent = self->state.agent;
                    (void)self->state.bus->publish(
                        self->state.mesh.subj.worker_beat(), encode(s));
                  },
                  [](caf::error&) {
                    // A worker that cannot answer sends no heartbeat:
                    // routers count it out, as they should.
                  });
        self->delayed_send(self, st.mesh.heartbeat, beat_atom::value);
      },
  };
}

// -- index shard --------------------------------------------------------------

struct shard_host_state {
  static inline const char* name = "shard_endpoint";
  nats_bus* bus = nullptr;
  mesh_options mesh;
  std::string kv_subject;  // mesh.subj.kv(index), built once
  index_shard_actor shard;
  uint32_t index = 0;
  uint32_t shards = 1;
  batcher out;  // replies, sent when the mailbox has drained
  std::shared_ptr<const shard_meters> meters;  // null: not counted
  // What NATS handed it. A KV message keeps its place until the shard has
  // applied it, a query until the shard answered: the shard's own mailbox
  // is where a flood would wait.
  std::shared_ptr<mailbox_gate> gate;
  uint64_t incarnation = 0;  // random, nonzero: tells restarts (heartbeat)
  // KV messages the gate refused, for the heartbeat (null: not counted).
  std::shared_ptr<std::atomic<uint64_t>> kv_refused;
  // KV messages sent on to the shard and not yet known written, and their
  // bytes; an empty query confirms them all (the shard handles this
  // endpoint's messages in order), one in flight at a time.
  uint64_t kv_unconfirmed = 0;
  uint64_t kv_unconfirmed_bytes = 0;
  bool kv_confirming = false;
};

using shard_host_pointer = caf::stateful_actor<shard_host_state>*;

// Gives back the gate's places of the KV messages sent to the shard so far
// once it has handled them: one request per round rather than a reply per
// batch (kv_atom has none, and a shard's interface need not know about
// NATS). The request is a query of no blocks, which costs a loop over the
// workers; not a status request, which lists the RocksDB directory (the
// chaos run's timings suffered from one per round).
void confirm_kv(shard_host_pointer self) {
  auto& st = self->state;
  if (st.kv_confirming || st.kv_unconfirmed == 0) return;
  st.kv_confirming = true;
  const uint64_t n = st.kv_unconfirmed;
  const uint64_t b = st.kv_unconfirmed_bytes;
  st.kv_unconfirmed = 0;
  st.kv_unconfirmed_bytes = 0;
  auto done = [self, n, b] {
    auto& st = self->state;
    if (st.gate) st.gate->leave(b, n);
    st.kv_confirming = false;
    confirm_kv(self);
  };
  self->request(st.shard, caf::infinite, query_atom::value,
                std::vector<uint64_t>{})
      .then([done](const std::vector<holder_match>&) { done(); },
            [done](caf::error&) { done(); });
}

caf::behavior shard_endpoint(
    shard_host_pointer self, nats_bus* bus, mesh_options mesh,
    index_shard_actor shard, uint32_t index, uint32_t shards,
    std::shared_ptr<const shard_meters> meters,
    std::shared_ptr<mailbox_gate> gate,
    std::shared_ptr<std::atomic<uint64_t>> kv_refused) {
  auto& st = self->state;
  st.gate = std::move(gate);
  st.kv_refused = std::move(kv_refused);
  st.meters = std::move(meters);
  st.bus = bus;
  st.mesh = std::move(mesh);
  st.shard = std::move(shard);
  st.index = index;
  st.kv_subject = st.mesh.subj.kv(index);
  st.shards = shards;
  std::random_device rd;
  while (st.incarnation == 0)
    st.incarnation = uint64_t{rd()} << 32 | rd();
  self->send(self, beat_atom::value);
  return {
      [=](nats_atom, const std::string& subject, const std::string& reply,
          const bytes& payload) {
        auto& st = self->state;
        gate_pass pass(st.gate.get(), payload.size());
        if (subject == st.kv_subject) {
          // A malformed batch is counted by the codec and dropped: nobody
          // awaits an answer to KV events.
          if (auto b = decode<kv_batch>(payload)) {
            if (b->resync) self->send(st.shard, drop_atom::value, b->worker);
            if (!b->events.empty())
              self->send(st.shard, kv_atom::value, b->worker,
                         std::move(b->events));
            if (st.gate && (b->resync || !b->events.empty())) {
              pass.keep();
              ++st.kv_unconfirmed;
              st.kv_unconfirmed_bytes += payload.size();
              confirm_kv(self);
            }
          }
          return;
        }
        auto q = decode<index_query>(payload);
        if (!q) {
          answer(*st.bus, reply, encode(index_reply{{}, q.err().message}));
          return;
        }
        pass.keep();
        const size_t size = payload.size();
        auto leave = [self, size] {
          if (self->state.gate) self->state.gate->leave(size);
        };
        // The local shard always answers (a dead one fails at once).
        self->request(st.shard, caf::infinite, query_atom::value,
                      std::move(q->chain))
            .then(
                [self, reply, leave](std::vector<holder_match>& h) {
                  leave();
                  if (self->state.meters) self->state.meters->queries->inc();
                  answer_batched(self, *self->state.bus, self->state.out, reply,
                                 encode(index_reply{std::move(h), {}}));
                },
                [self, reply, leave](caf::error& e) {
                  leave();
                  answer_batched(self, *self->state.bus, self->state.out, reply,
                                 encode(index_reply{{}, describe(e)}));
                });
      },
      [=](flush_atom) { self->state.out.flush(*self->state.bus); },
      [=](beat_atom) {
        auto& st = self->state;
        self->request(st.shard, st.mesh.heartbeat, status_atom::value)
            .then(
                [self](shard_status s) {
                  s.shards = self->state.shards;
                  s.incarnation = self->state.incarnation;
                  if (self->state.kv_refused)
                    s.refused_events = self->state.kv_refused->load();
                  (void)self->state.bus->publish(
                      self->state.mesh.subj.shard_beat(), encode(s));
                },
                [](caf::error&) {});
        self->delayed_send(self, st.mesh.heartbeat, beat_atom::value);
      },
  };
}

// -- router process: the front (route requests, weights, heartbeats) ---------

// What durable intake needs beyond the queue (null stores: not durable).
struct durable_intake {
  // Where each durable request's answer is kept before it goes out.
  std::shared_ptr<record_store> records;
  // Where a router claims a request before auctioning it, for `lease` (the
  // bucket's TTL), under the name `claimant` (the router's, and a number
  // its process drew: a restarted router is another claimant).
  std::shared_ptr<record_store> claims;
  std::vector<uint8_t> claimant;
  std::chrono::milliseconds lease{5000};
  uint32_t deliveries = 10;  // router_node_options::durable_deliveries
  // The test-only fault of dying between answering and acking.
  bool exit_before_ack = false;
};

struct front_state {
  static inline const char* name = "router_front";
  nats_bus* bus = nullptr;
  mesh_options mesh;
  std::string route_subject;  // mesh.subj.route(), built once
  router_actor router;
  std::string name_;
  uint32_t block_tokens = 512;
  bool warned_text = false;
  // Set when the process stops: durable requests in flight are then left
  // unacked, as a killed process leaves them, for another router.
  std::shared_ptr<std::atomic<bool>> stopping;
  std::shared_ptr<const router_meters> meters;  // null: not counted
  // What NATS handed it. A route request leaves it once passed to the
  // ROUTER, which bounds what it holds itself (--max-held: "overloaded").
  std::shared_ptr<mailbox_gate> gate;
  uint64_t block_mismatches = 0;
  durable_intake durable;
  uint64_t durable_retries = 0;  // requests handed back (logged)
  uint64_t claim_failures = 0;   // claims not taken or let go (logged)
  // Durable requests being decided, in arrival order: swept
  // (progress_atom) every quarter ack_wait while any is open.
  struct open_delivery {
    steady::time_point arrived;
    steady::time_point told;     // when the server last started its ack_wait
    steady::time_point claimed;  // when its claim's lease last started
    std::shared_ptr<delivery> d;
    uint64_t id;
  };
  std::vector<open_delivery> working;
  bool sweeping = false;
  uint64_t progress_failures = 0;  // in-progress signals not sent (logged)
};

using front_pointer = caf::stateful_actor<front_state>*;

// The front's counts, when the process has a metrics endpoint: a request
// as it comes in (the time it came, for its decision's latency), then its
// decision or the class of its failure.
steady::time_point took(front_pointer self, intake i) {
  const auto& m = self->state.meters;
  if (!m) return {};
  m->took(i);
  return steady::now();
}

void decided(front_pointer self, const decision& d, steady::time_point since) {
  if (const auto& m = self->state.meters)
    m->decided(d, std::chrono::duration<double>(steady::now() - since).count());
}

void failed(front_pointer self, const caf::error& e) {
  if (const auto& m = self->state.meters)
    m->failed(e.category() == caf::atom("kvmesh")
                  ? classify_route_error(static_cast<ec>(e.code()), describe(e))
                  : route_failure::other);
}

void failed(front_pointer self, route_failure f) {
  if (const auto& m = self->state.meters) m->failed(f);
}

// A route request off the wire, refused when its client hashed it with
// another block size than this mesh: no hash of it could match a cached
// block, and routing it would look like a cold cache, not an error.
expected<route_request_msg> decode_route(front_state& st,
                                         const bytes& payload) {
  auto r = decode<route_request_msg>(payload);
  if (r) {  // the router's to say, not the client's
    r->redelivered = false;
    r->stream_sequence = 0;
  }
  if (r && r->block_tokens != 0 && r->block_tokens != st.block_tokens) {
    ++st.block_mismatches;
    return make_error(
        ec::invalid_argument,
        "request " + std::to_string(r->id) + " was hashed in " +
            std::to_string(r->block_tokens) + "-token blocks; this mesh uses " +
            std::to_string(st.block_tokens) + " (--block-tokens)");
  }
  return r;
}

// A durable request's answer, once kept (or not): sent, then acked.
void send_durable(front_pointer self, const std::string& reply,
                  const bytes& payload, delivery& d) {
  auto& st = self->state;
  answer(*st.bus, reply, payload);
  if (st.durable.exit_before_ack) {
    // KVMESH_TEST_FAULT=exit_before_ack: the answer is out, the ack never
    // leaves, as when a router is killed between the two.
    (void)st.bus->flush(std::chrono::seconds(2));
    std::_Exit(137);
  }
  (void)d.ack();
}

// A durable request's answer: kept first, so that a redelivery (this
// router dying before its ack reaches the server) is answered with it
// rather than auctioned again; then sent, then acked. The write is not
// waited for here: its answer comes back as recorded_atom, and the front
// decides others meanwhile (a round trip each held one router to 3,000
// durable requests a second). A record that cannot be kept does not hold
// the answer back: the award is made, and only a death before the ack
// would cost a second decision.
void answer_durable(front_pointer self, const std::string& reply, bytes payload,
                    const std::shared_ptr<delivery>& d, uint64_t id) {
  auto& st = self->state;
  if (!st.durable.records || d->stream_sequence() == 0) {
    send_durable(self, reply, payload, *d);
    return;
  }
  const auto key = record_key(d->stream_sequence(), id);
  st.durable.records->put_async(
      key, payload, false,
      [front = caf::actor_cast<caf::actor>(self), reply, payload, d,
       id](status kept) mutable {
        caf::anon_send(front, recorded_atom::value, std::move(reply),
                       std::move(payload), std::move(d), id,
                       kept ? std::string() : kept.err().message);
      });
}

// Whether a durable request may be auctioned here: one router at a time
// holds its claim (a create in the claims bucket, so that of two routers
// exactly one takes it) until the lease runs out (the bucket's TTL: a
// router that died holding one lets go by itself) or it hands the request
// back. Without it, a request the queue hands to two routers at once (as
// while a cluster settles after its stream's leader moved) is caught only
// by a router that hears every bid (the workers' contested flag).
// Asked for on the queue's fetch thread without waiting (put_async, only
// new); the server's answer brings the request to the front. `refused`:
// the key had a message, a holder's or the marker a handback leaves, which
// the front tells apart with create() (a round trip, but only for a
// request handed out again); `own` is the front's to settle too.
enum class claim_outcome : uint8_t { taken, held, own, unknown, refused };

// The full create, for a quick claim refused (the fetch thread asked only
// for requests with a sequence, with a claims bucket).
claim_outcome take_claim(record_store& claims,
                         const std::vector<uint8_t>& claimant,
                         const delivery& d, uint64_t id, std::string& error) {
  std::vector<uint8_t> holder;
  auto took =
      claims.create(record_key(d.stream_sequence(), id), claimant, &holder);
  if (!took) {
    error = took.err().message;
    return claim_outcome::unknown;
  }
  if (*took) return claim_outcome::taken;
  return holder == claimant ? claim_outcome::own : claim_outcome::held;
}

// This router's own claim: one it failed to let go of is taken again, but
// not while the request's first delivery is being decided here.
claim_outcome settle_own(front_state& st, const delivery& d) {
  const bool open =
      std::any_of(st.working.begin(), st.working.end(), [&](const auto& x) {
        return x.d->stream_sequence() == d.stream_sequence() && !x.d->settled();
      });
  return open ? claim_outcome::held : claim_outcome::taken;
}

// Lets go of the claim on a request handed back, so that the next
// delivery, to any router, may take it at once.
void unclaim(front_state& st, const delivery& d, uint64_t id) {
  if (!st.durable.claims || d.stream_sequence() == 0) return;
  if (auto s = st.durable.claims->erase(record_key(d.stream_sequence(), id));
      !s && st.claim_failures++ == 0)
    KVMESH_WARN(
        "durable request %llu: claim not let go: %s (it lapses after the "
        "lease; logged once)",
        static_cast<unsigned long long>(id), s.err().message.c_str());
}

// Sends a durable request back to its queue undecided, for another
// delivery a heartbeat later.
void hand_back(front_pointer self, delivery& d, uint64_t id, handback cause,
               const std::string& why) {
  auto& st = self->state;
  if (const auto& m = st.meters) m->handed_back(cause);
  const auto beat =
      std::chrono::duration_cast<std::chrono::milliseconds>(st.mesh.heartbeat);
  if (st.durable_retries++ == 0)
    KVMESH_WARN(
        "durable request %llu not decided (%s): handed back to the queue "
        "for %lld ms, up to %u deliveries (logged once)",
        static_cast<unsigned long long>(id), why.c_str(),
        static_cast<long long>(beat.count()), st.durable.deliveries);
  (void)d.nak(beat);
}

// Route requests wait for the router's own deadlines; this only bounds a
// router that never answers (the stand-in of a remote one).
constexpr auto route_timeout = std::chrono::seconds(60);

caf::behavior router_front(front_pointer self, nats_bus* bus, mesh_options mesh,
                           router_actor router, std::string name,
                           uint32_t block_tokens,
                           std::shared_ptr<std::atomic<bool>> stopping,
                           std::shared_ptr<const router_meters> meters,
                           durable_intake durable,
                           std::shared_ptr<mailbox_gate> gate) {
  auto& st = self->state;
  st.gate = std::move(gate);
  st.durable = std::move(durable);
  st.stopping = std::move(stopping);
  st.meters = std::move(meters);
  st.bus = bus;
  st.mesh = std::move(mesh);
  st.route_subject = st.mesh.subj.route();
  st.router = std::move(router);
  st.name_ = std::move(name);
  st.block_tokens = block_tokens;
  self->send(self, beat_atom::value);
  return {
      [=](nats_atom, const std::string& subject, const std::string& reply,
          const bytes& payload) {
        auto& st = self->state;
        gate_pass pass(st.gate.get(), payload.size());
        if (subject == st.route_subject) {
          const auto since = took(self, intake::core);
          auto r = decode_route(st, payload);
          if (!r) {
            failed(self, route_failure::other);
            decision d;
            d.error = r.err().message;
            answer(*st.bus, reply, encode(d));
            return;
          }
          const uint64_t id = r->id;
          // The local router always answers by its own deadlines; a timer
          // per request would cost the clock thread two wake-ups.
          self->request(st.router, caf::infinite, route_atom::value,
                        std::move(*r))
              .then(
                  [self, reply, since](const decision& d) {
                    decided(self, d, since);
                    answer(*self->state.bus, reply, encode(d));
                  },
                  [self, reply, id](caf::error& e) {
                    failed(self, e);
                    decision d;
                    d.request = id;
                    d.error = describe(e);
                    answer(*self->state.bus, reply, encode(d));
                  });
        } else if (subject == st.mesh.subj.route_json()) {
          const auto since = took(self, intake::json);
          auto r = parse_route_json(
              std::string_view(reinterpret_cast<const char*>(payload.data()),
                               payload.size()),
              st.block_tokens);
          auto to_bytes = [](const std::string& s) {
            return bytes(s.begin(), s.end());
          };
          if (!r) {
            failed(self, route_failure::other);
            decision d;
            d.error = r.err().message;
            answer(*st.bus, reply, to_bytes(decision_json(d)));
            return;
          }
          if (!st.warned_text && text_route_requests() > 0) {
            st.warned_text = true;
            KVMESH_LOG(
                "router %s takes route requests as text: their blocks "
                "are chunks of bytes, approximate, matching no "
                "engine's cache (counted in text_requests; logged "
                "once)",
                st.name_.c_str());
          }
          const uint64_t id = r->id;
          self->request(st.router, caf::infinite, route_atom::value,
                        std::move(*r))
              .then(
                  [self, reply, to_bytes, since](const decision& d) {
                    decided(self, d, since);
                    answer(*self->state.bus, reply, to_bytes(decision_json(d)));
                  },
                  [self, reply, id, to_bytes](caf::error& e) {
                    failed(self, e);
                    decision d;
                    d.request = id;
                    d.error = describe(e);
                    answer(*self->state.bus, reply, to_bytes(decision_json(d)));
                  });
        } else if (subject == st.mesh.subj.router(st.name_, "weights.get")) {
          self->request(st.router, st.mesh.call_timeout, get_atom::value,
                        weights_atom::value)
              .then([self, reply](const price_config& p) {
                answer(*self->state.bus, reply, encode(p));
              });
        } else if (subject == st.mesh.subj.router(st.name_, "weights.set")) {
          auto p = decode<price_config>(payload);
          admin_reply out;
          if (!p) {
            out.error = p.err().message;
          } else if (auto bad = validate(*p); !bad) {
            out.error = bad.err().message;
          } else {
            self->send(st.router, put_atom::value, weights_atom::value, *p);
            out.count = 1;
          }
          answer(*st.bus, reply, encode(out));
        }
      },
      [=](durable_atom, const std::string& reply, const bytes& payload,
          std::shared_ptr<delivery> d, uint8_t claimed,
          const std::string& claim_error) {
        auto& st = self->state;
        const auto since = took(self, intake::durable);
        // Acked once the answer is out: a router that dies before leaves
        // the request to another one. Malformed requests are answered and
        // acked too, or they would come back forever.
        auto r = decode_route(st, payload);
        if (!r) {
          failed(self, route_failure::other);
          decision out;
          out.error = r.err().message;
          answer(*st.bus, reply, encode(out));
          (void)d->ack();
          return;
        }
        const uint64_t id = r->id;
        // Another router holds it: that one answers. The claims bucket not
        // answering: back to the queue while deliveries are left, then
        // auctioned unclaimed (better a decision than none).
        auto c = static_cast<claim_outcome>(claimed);
        std::string why = claim_error;
        if (c == claim_outcome::refused)
          c = take_claim(*st.durable.claims, st.durable.claimant, *d, id, why);
        if (c == claim_outcome::own) c = settle_own(st, *d);
        if (c == claim_outcome::unknown && st.claim_failures++ == 0)
          KVMESH_WARN("durable request %llu: claim not taken: %s (logged once)",
                      static_cast<unsigned long long>(id), why.c_str());
        if (c == claim_outcome::held) {
          hand_back(self, *d, id, handback::contested,
                    "another router holds its claim");
          return;
        } else if (c == claim_outcome::unknown && d->delivery_count() != 0 &&
                   d->delivery_count() < st.durable.deliveries) {
          hand_back(self, *d, id, handback::unclaimed,
                    "its claim could not be taken");
          return;
        }
        // Its decision may take longer than the ack_wait (an awardee that
        // went silent is waited out for up to 3 heartbeats): the sweep
        // tells the server it is in progress until it is answered, and
        // renews its claim.
        const auto now = steady::now();
        st.working.push_back({now, now, now, d, id});
        if (!st.sweeping) {
          st.sweeping = true;
          self->delayed_send(self, d->ack_wait() / 4, progress_atom::value);
        }
        r->redelivered = d->delivery_count() > 1;
        r->stream_sequence = d->stream_sequence();
        self->request(st.router, caf::infinite, route_atom::value,
                      std::move(*r))
            .then(
                [self, reply, d, since, id](const decision& out) {
                  if (*self->state.stopping) return;
                  decided(self, out, since);
                  answer_durable(self, reply, encode(out), d, id);
                },
                [self, reply, id, d](caf::error& e) {
                  if (*self->state.stopping) return;
                  // Only the router's own verdicts (no worker, overloaded)
                  // are answers; a router that went away mid-auction hands
                  // the request back for another one.
                  if (e.category() != caf::atom("kvmesh")) {
                    unclaim(self->state, *d, id);
                    (void)d->nak();
                    return;
                  }
                  // No worker to take it, for now, or another router's
                  // auction of it is open (ec::conflict): back to the
                  // queue for a heartbeat while deliveries are left. Not
                  // when an award went unanswered (ec::timeout): a worker
                  // may run it, and deciding it again could run it twice.
                  auto& st = self->state;
                  const auto code = static_cast<ec>(e.code());
                  if ((code == ec::not_found || code == ec::capacity_exceeded ||
                       code == ec::conflict) &&
                      d->delivery_count() != 0 &&
                      d->delivery_count() < st.durable.deliveries) {
                    unclaim(st, *d, id);
                    hand_back(self, *d, id,
                              code == ec::conflict ? handback::contested
                              : code == ec::capacity_exceeded
                                  ? handback::overloaded
                                  : handback::no_workers,
                              describe(e));
                    return;
                  }
                  failed(self, e);
                  decision out;
                  out.request = id;
                  out.error = describe(e);
                  answer_durable(self, reply, encode(out), d, id);
                });
      },
      [=](recorded_atom, const std::string& reply, const bytes& payload,
          std::shared_ptr<delivery>& d, uint64_t id,
          const std::string& not_kept) {
        // A stopping router leaves it unacked, for another one.
        if (*self->state.stopping) return;
        if (!not_kept.empty())
          KVMESH_WARN("durable request %llu answered without a record: %s",
                      static_cast<unsigned long long>(id), not_kept.c_str());
        send_durable(self, reply, payload, *d);
      },
      [=](progress_atom) {
        auto& st = self->state;
        auto& w = st.working;
        const auto now = steady::now();
        // Settled, or past every deadline of the router (a decision that
        // never comes): no longer held back from the other routers.
        w.erase(std::remove_if(w.begin(), w.end(),
                               [now](const auto& x) {
                                 return x.d->settled() ||
                                        now - x.arrived > route_timeout;
                               }),
                w.end());
        // A stopping router leaves what it holds to the others.
        if (w.empty() || *st.stopping) {
          w.clear();
          st.sweeping = false;
          return;
        }
        for (auto& x : w) {
          // A claim outliving half its lease is renewed: a decision this
          // slow is rare, and another router must not take it meanwhile.
          if (st.durable.claims && now - x.claimed > st.durable.lease / 2) {
            x.claimed = now;
            if (auto s = st.durable.claims->put(
                    record_key(x.d->stream_sequence(), x.id),
                    st.durable.claimant);
                !s && st.claim_failures++ == 0)
              KVMESH_WARN(
                  "durable request %llu: claim not renewed: %s "
                  "(logged once)",
                  static_cast<unsigned long long>(x.id),
                  s.err().message.c_str());
          }
          if (now - x.told < x.d->ack_wait() / 2) continue;
          x.told = now;
          if (auto s = x.d->in_progress(); !s && st.progress_failures++ == 0)
            KVMESH_WARN(
                "durable request not told in progress: %s (logged "
                "once; it may be handed to another router)",
                s.err().message.c_str());
        }
        self->delayed_send(self, w.front().d->ack_wait() / 4,
                           progress_atom::value);
      },
      [=](beat_atom) {
        auto& st = self->state;
        self->request(st.router, st.mesh.heartbeat, status_atom::value)
            .then(
                [self](router_status s) {
                  const auto t = self->state.bus->stats();
                  s.nats_in = t.in_msgs;
                  s.nats_out = t.out_msgs;
                  s.text_requests = text_route_requests();
                  s.block_mismatches = self->state.block_mismatches;
                  (void)self->state.bus->publish(
                      self->state.mesh.subj.router_beat(), encode(s));
                },
                [](caf::error&) {});
        self->delayed_send(self, st.mesh.heartbeat, beat_atom::value);
      },
  };
}

// -- router process: membership and the ADMIN
// ----------------------------------

// The distributed ADMIN: the mesh as heartbeats show it. It also keeps the
// local ROUTER's members and shards current.
using directory_actor = admin_actor::extend<
    caf::reacts_to<nats_atom, std::string, std::string, bytes>,
    caf::reacts_to<reply_atom, uint64_t, bytes>, caf::reacts_to<sweep_atom>,
    caf::reacts_to<flush_atom>>;

struct directory_state {
  static inline const char* name = "directory";
  struct worker_entry {
    worker_status last;
    steady::time_point seen;
    remote_worker_actor proxy;
  };
  struct router_entry {
    router_status last;
    steady::time_point seen;
  };
  struct shard_entry {
    shard_status last;
    steady::time_point seen;
  };
  std::shared_ptr<inbox> box;
  mesh_options mesh;
  router_actor router;
  pending_calls calls;
  std::map<uint32_t, worker_entry> workers;
  std::unordered_map<std::string, agent_link_actor> links;
  std::map<std::string, router_entry> routers;
  std::map<uint32_t, shard_entry> shards;
  std::vector<remote_shard_actor> shard_proxies;
  std::shared_ptr<mailbox_gate> gate;  // what NATS handed it (heartbeats)
};

using dir_pointer = directory_actor::stateful_pointer<directory_state>;

bool fresh(const directory_state& st, steady::time_point seen) {
  return steady::now() - seen <= stale_after(st.mesh);
}

void directory_worker_beat(dir_pointer self, worker_status s) {
  auto& st = self->state;
  if (s.worker >= max_worker_id || !check_name("agent", s.agent) ||
      !(s.speed > 0))
    return;
  auto& e = st.workers[s.worker];
  if (!e.proxy || e.last.agent != s.agent) {
    // New, or moved to another agent (a restarted node): a new stand-in.
    auto& link = st.links[s.agent];
    if (!link)
      link = spawn_agent_link(self->system(), st.box, st.mesh, s.agent);
    e.proxy = spawn_remote_worker(self->system(), s.worker, link,
                                  stale_after(st.mesh));
  }
  e.last = s;
  e.seen = steady::now();
  self->send(e.proxy, put_atom::value, s);
  // Every beat re-announces the worker: a router that counted it out
  // (silence) takes it back as soon as it is heard again.
  self->send(st.router, put_atom::value, workers_atom::value, s.worker,
             caf::actor_cast<worker_actor>(e.proxy),
             caf::actor_cast<bidder_actor>(st.links[s.agent]), s.speed);
}

void directory_shard_beat(dir_pointer self, shard_status s) {
  auto& st = self->state;
  if (s.shards == 0 || s.shards > 4096 || s.shard >= s.shards) return;
  if (s.shards != st.shard_proxies.size()) {
    st.shard_proxies.clear();
    std::vector<index_shard_actor> handles;
    for (uint32_t i = 0; i < s.shards; ++i) {
      st.shard_proxies.push_back(
          spawn_remote_shard(self->system(), st.box, st.mesh, i));
      handles.push_back(st.shard_proxies.back());
    }
    self->send(st.router, put_atom::value, shards_atom::value, handles);
  }
  self->send(st.shard_proxies[s.shard], put_atom::value, s);
  st.shards[s.shard] = {s, steady::now()};
}

directory_actor::behavior_type directory(dir_pointer self,
                                         std::shared_ptr<inbox> box,
                                         mesh_options mesh, router_actor router,
                                         std::shared_ptr<mailbox_gate> gate) {
  auto& st = self->state;
  st.gate = std::move(gate);
  st.box = box;
  st.mesh = std::move(mesh);
  st.router = std::move(router);
  st.calls.attach(std::move(box));
  return {
      [=](nats_atom, const std::string& subject, const std::string&,
          const bytes& payload) {
        auto& st = self->state;
        gate_pass pass(st.gate.get(), payload.size());
        if (subject == st.mesh.subj.worker_beat()) {
          if (auto s = decode<worker_status>(payload))
            directory_worker_beat(self, std::move(*s));
        } else if (subject == st.mesh.subj.router_beat()) {
          if (auto s = decode<router_status>(payload);
              s && check_name("router", s->name)) {
            auto& e = st.routers[s->name];
            e.last = std::move(*s);
            e.seen = steady::now();
          }
        } else if (subject == st.mesh.subj.shard_beat()) {
          if (auto s = decode<shard_status>(payload))
            directory_shard_beat(self, std::move(*s));
        }
      },
      [=](reply_atom, uint64_t seq, bytes& payload) {
        self->state.calls.complete(seq, std::move(payload));
      },
      [=](sweep_atom) { self->state.calls.sweep(self); },
      [=](flush_atom) { self->state.calls.flush(); },
      [=](get_atom, workers_atom) -> std::vector<worker_status> {
        auto& st = self->state;
        std::vector<worker_status> out;
        for (auto& [id, e] : st.workers) {
          out.push_back(e.last);
          out.back().gone = !fresh(st, e.seen);
        }
        return out;
      },
      [=](get_atom, routers_atom) -> std::vector<router_status> {
        auto& st = self->state;
        std::vector<router_status> out;
        for (auto& [name, e] : st.routers)
          if (fresh(st, e.seen)) out.push_back(e.last);
        return out;
      },
      [=](get_atom, shards_atom) -> std::vector<shard_status> {
        auto& st = self->state;
        std::vector<shard_status> out;
        for (auto& [i, e] : st.shards)
          if (fresh(st, e.seen)) out.push_back(e.last);
        return out;
      },
      [=](get_atom, weights_atom) -> caf::result<price_config> {
        return self->delegate(self->state.router, get_atom::value,
                              weights_atom::value);
      },
      [=](put_atom, weights_atom,
          const price_config& p) -> caf::result<uint32_t> {
        auto& st = self->state;
        auto rp = self->make_response_promise<uint32_t>();
        struct tally {
          uint32_t ok = 0;
          size_t left = 0;
        };
        auto t = std::make_shared<tally>();
        for (auto& [name, e] : st.routers)
          if (fresh(st, e.seen)) ++t->left;
        if (t->left == 0) {
          rp.deliver(uint32_t{0});
          return rp;
        }
        for (auto& [name, e] : st.routers) {
          if (!fresh(st, e.seen)) continue;
          st.calls.call(
              self, st.mesh.subj.router(name, "weights.set"), encode(p),
              st.mesh.call_timeout, [rp, t](expected<bytes> r) mutable {
                if (r)
                  if (auto a = decode<admin_reply>(*r); a && a->error.empty())
                    t->ok += a->count;
                if (--t->left == 0) rp.deliver(t->ok);
              });
        }
        return rp;
      },
      [=](put_atom, drain_atom, uint32_t w, bool on) -> caf::result<bool> {
        auto& st = self->state;
        auto it = st.workers.find(w);
        if (it == st.workers.end()) return false;
        auto rp = self->make_response_promise<bool>();
        admin_request req;
        req.worker = w;
        req.on = on;
        st.calls.call(self, st.mesh.subj.agent(it->second.last.agent, "drain"),
                      encode(req), st.mesh.call_timeout,
                      [rp](expected<bytes> r) mutable {
                        if (!r) {
                          rp.deliver(to_caf(r.err()));
                          return;
                        }
                        auto a = decode<admin_reply>(*r);
                        rp.deliver(a && a->error.empty() && a->count == 1);
                      });
        return rp;
      },
      [=](query_atom, std::vector<uint64_t>& chain)
          -> caf::result<std::vector<holder_match>> {
        auto& st = self->state;
        if (chain.empty())
          return caf::make_error(ec::empty_input, "empty prefix");
        if (st.shard_proxies.empty())
          return caf::make_error(ec::not_found, "no index shard is known");
        const auto& shard =
            st.shard_proxies[shard_of(chain.front(), st.shard_proxies.size())];
        return self->delegate(caf::actor_cast<index_shard_actor>(shard),
                              query_atom::value, std::move(chain));
      },
  };
}

// -- the ADMIN on NATS -------------------------------------------------------

struct admin_front_state {
  static inline const char* name = "admin_front";
  nats_bus* bus = nullptr;
  admin_actor admin;
  caf::timespan timeout{};
  size_t page_bytes = 0;  // of a workers listing; 0: half the max payload
  std::shared_ptr<mailbox_gate> gate;  // what NATS handed it
};

using admin_front_pointer = caf::stateful_actor<admin_front_state>*;

// Asks the ADMIN with `msg...` and answers `reply` with what `fill` puts in
// an AdminReply, or with the error.
template <class Result, class Fill, class... Ts>
void relay(admin_front_pointer self, const std::string& reply, Fill fill,
           Ts... msg) {
  self->request(self->state.admin, self->state.timeout, msg...)
      .then(
          [self, reply, fill](Result& x) {
            admin_reply r;
            fill(r, x);
            answer(*self->state.bus, reply, encode(r));
          },
          [self, reply](caf::error& e) {
            admin_reply r;
            r.error = describe(e);
            answer(*self->state.bus, reply, encode(r));
          });
}

caf::behavior admin_front(admin_front_pointer self, nats_bus* bus,
                          admin_actor admin, caf::timespan timeout,
                          size_t page_bytes,
                          std::shared_ptr<mailbox_gate> gate) {
  self->state.gate = std::move(gate);
  self->state.bus = bus;
  self->state.admin = std::move(admin);
  self->state.timeout = timeout;
  self->state.page_bytes = page_bytes;
  return {
      [=](nats_atom, const std::string& subject, const std::string& reply,
          const bytes& payload) {
        gate_pass pass(self->state.gate.get(), payload.size());
        if (reply.empty()) return;  // nobody to tell
        const std::string verb =
            subject.substr(subject.find(".admin.") + std::strlen(".admin."));
        auto refuse = [&](std::string why) {
          admin_reply r;
          r.error = std::move(why);
          answer(*self->state.bus, reply, encode(r));
        };
        // Listing verbs take no arguments: any payload (even none, from a
        // NATS CLI) will do. Workers come in pages to an asker that says
        // it pages (AdminRequest.paged).
        if (verb == "workers") {
          auto q = decode<admin_request>(payload);
          const bool paged = q && q->paged;
          const uint32_t from = paged ? q->from : 0;
          // A page takes half the server's limit: the list is most of the
          // reply, and what it leaves is ample for the rest. One that does
          // not page gets all in one message, or an error if they do not
          // fit (not a cut list it would take for the whole).
          const size_t limit = self->state.bus->max_payload();
          size_t budget = self->state.page_bytes;
          if (budget == 0)
            budget = paged ? std::max<size_t>(limit / 2, 1)
                           : std::max<size_t>(limit, 8192) - 4096;
          return relay<std::vector<worker_status>>(
              self, reply,
              [paged, from, budget](admin_reply& r,
                                    std::vector<worker_status>& x) {
                const size_t n = x.size();
                fill_worker_page(x, from, budget, r);
                if (r.more && !paged) {
                  r = admin_reply{};
                  r.error = std::to_string(n) +
                            " workers do not fit in one NATS message: ask "
                            "for them in pages (AdminRequest.paged and "
                            "from, as kvmesh admin does)";
                }
              },
              get_atom::value, workers_atom::value);
        }
        if (verb == "routers")
          return relay<std::vector<router_status>>(
              self, reply,
              [](admin_reply& r, std::vector<router_status>& x) {
                r.routers = std::move(x);
              },
              get_atom::value, routers_atom::value);
        if (verb == "shards")
          return relay<std::vector<shard_status>>(
              self, reply,
              [](admin_reply& r, std::vector<shard_status>& x) {
                r.shards = std::move(x);
              },
              get_atom::value, shards_atom::value);
        if (verb == "weights.get")
          return relay<price_config>(
              self, reply,
              [](admin_reply& r, price_config& x) { r.weights = x; },
              get_atom::value, weights_atom::value);
        auto req = decode<admin_request>(payload);
        if (!req) return refuse(req.err().message);
        if (verb == "prefix")
          return relay<std::vector<holder_match>>(
              self, reply,
              [](admin_reply& r, std::vector<holder_match>& x) {
                r.holders = std::move(x);
              },
              query_atom::value, std::move(req->chain));
        if (verb == "weights.set") {
          if (auto bad = validate(req->weights); !bad)
            return refuse(bad.err().message);
          return relay<uint32_t>(
              self, reply, [](admin_reply& r, uint32_t& n) { r.count = n; },
              put_atom::value, weights_atom::value, req->weights);
        }
        if (verb == "drain" || verb == "undrain") {
          const uint32_t w = req->worker;
          return relay<bool>(
              self, reply,
              [w](admin_reply& r, bool& done) {
                if (done)
                  r.count = 1;
                else
                  r.error = "no worker " + std::to_string(w);
              },
              put_atom::value, drain_atom::value, w, verb == "drain");
        }
        refuse("unknown admin verb '" + verb +
               "' (workers, routers, shards, prefix, weights.get, "
               "weights.set, drain, undrain)");
      },
  };
}

// -- the remote router (a client's view of the router pool)
// --------------------

// (router_actor's sweep_atom expires its calls.)
using remote_router_actor = router_actor::extend<
    caf::reacts_to<nats_atom, std::string, std::string, bytes>,
    caf::reacts_to<reply_atom, uint64_t, bytes>, caf::reacts_to<flush_atom>>;

struct remote_router_state {
  static inline const char* name = "remote_router";
  subjects subj;
  pending_calls calls;
  listener_actor listener;
  uint64_t decisions = 0;
  std::shared_ptr<mailbox_gate> gate;  // what NATS handed it (events)
};

remote_router_actor::behavior_type remote_router(
    remote_router_actor::stateful_pointer<remote_router_state> self,
    std::shared_ptr<inbox> box, subjects subj, listener_actor listener,
    std::shared_ptr<mailbox_gate> gate) {
  self->state.gate = std::move(gate);
  self->state.subj = std::move(subj);
  self->state.calls.attach(std::move(box));
  self->state.listener = std::move(listener);
  return {
      [=](route_atom, const route_request_msg& r) -> caf::result<decision> {
        auto& st = self->state;
        auto rp = self->make_response_promise<decision>();
        st.calls.call(self, st.subj.route(), encode(r), route_timeout,
                      [self, rp](expected<bytes> reply) mutable {
                        if (!reply) {
                          rp.deliver(to_caf(reply.err()));
                          return;
                        }
                        auto d = decode<decision>(*reply);
                        if (!d)
                          rp.deliver(to_caf(d.err()));
                        else if (!d->error.empty())
                          rp.deliver(caf::make_error(ec::not_found, d->error));
                        else {
                          ++self->state.decisions;
                          rp.deliver(std::move(*d));
                        }
                      });
        return rp;
      },
      [=](get_atom, weights_atom) -> caf::result<price_config> {
        return caf::make_error(ec::not_found,
                               "ask the ADMIN for the routers' weights");
      },
      [=](put_atom, weights_atom, const price_config&) {},
      [=](status_atom) -> router_status {
        router_status s;
        s.name = "remote";
        s.decisions = self->state.decisions;
        return s;
      },
      [=](tick_atom) {},
      [=](put_atom, workers_atom, uint32_t, worker_actor, bidder_actor,
          double) {},
      [=](put_atom, shards_atom, std::vector<index_shard_actor>&) {},
      [=](nats_atom, const std::string&, const std::string&,
          const bytes& payload) {
        auto& st = self->state;
        gate_pass pass(st.gate.get(), payload.size());
        if (!st.listener) return;
        auto ev = decode<request_events>(payload);
        if (!ev) return;
        for (const auto& e : ev->events) {
          if (e.done)
            self->send(st.listener, done_atom::value, e.request);
          else
            self->send(st.listener, first_atom::value, e.request, e.gpu, e.host,
                       e.disk);
        }
      },
      [=](reply_atom, uint64_t seq, bytes& payload) {
        self->state.calls.complete(seq, std::move(payload));
      },
      [=](sweep_atom) { self->state.calls.sweep(self); },
      [=](flush_atom) { self->state.calls.flush(); },
  };
}

// Subscriptions and actors of one node: unsubscribed and stopped together.
struct node_base {
  nats_bus* bus = nullptr;
  std::vector<uint64_t> subs;
  std::vector<caf::actor> actors;
  std::shared_ptr<inbox> box;

  status listen(const std::string& subject, const std::string& queue,
                caf::actor to, admission adm) {
    auto id = forward(*bus, subject, queue, std::move(to), std::move(adm));
    if (!id) return id.err();
    subs.push_back(*id);
    return ok;
  }
  // For subjects no one batches to (the ADMIN's verbs): a batch there is
  // dropped whole, so that a batch on an allowed subject cannot carry a
  // verb the sender's NATS permissions refuse (weights.set inside
  // admin.weights.batch).
  status listen_single(const std::string& subject, const std::string& queue,
                       caf::actor to, admission adm) {
    nats_bus* b = bus;
    auto id = bus->subscribe(subject, queue,
                             [b, to, adm = std::move(adm)](nats_message m) {
                               if (is_batch(m.subject)) return;
                               (void)admit(*b, adm, to, std::move(m));
                             });
    if (!id) return id.err();
    subs.push_back(*id);
    return ok;
  }
  void stop() {
    for (uint64_t id : subs)
      (void)bus->unsubscribe(id);
    subs.clear();
    for (auto& a : actors)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    actors.clear();
    box.reset();
  }
};

}  // namespace

// -- agent_node
// -----------------------------------------------------------------

struct agent_node::impl : node_base {
  std::vector<worker_actor> workers;
};

agent_node::agent_node(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
agent_node::~agent_node() {
  impl_->stop();
}
const std::vector<worker_actor>& agent_node::workers() const {
  return impl_->workers;
}

expected<std::unique_ptr<agent_node>> agent_node::start(
    caf::actor_system& sys, nats_bus& bus, const agent_options& opt) {
  if (auto st = check_name("agent name", opt.name); !st) return st.err();
  if (opt.workers.empty() && opt.external.empty())
    return make_error(ec::invalid_argument, "an agent needs workers");
  if (!opt.external.empty() && !opt.spawn_external)
    return make_error(ec::invalid_argument,
                      "external workers need a spawn function");
  auto p = std::make_unique<impl>();
  p->bus = &bus;
  auto box = inbox::open(bus);
  if (!box) return box.err();
  p->box = *box;
  auto events = spawn_event_publisher(sys, bus, opt.mesh.subj);
  p->actors.push_back(caf::actor_cast<caf::actor>(events));
  std::vector<std::pair<uint32_t, worker_actor>> ws;
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
    p->workers.push_back(*w);
    p->actors.push_back(caf::actor_cast<caf::actor>(*w));
    ws.emplace_back(id, *w);
  }
  auto gate = new_gate();
  auto ep =
      sys.spawn(agent_endpoint, &bus, p->box, opt.mesh, opt.name, ws, gate);
  p->actors.push_back(ep);
  const auto& s = opt.mesh.subj;
  for (const char* verb :
       {"bid", "award", "release", "withdraw", "drain", "batch"})
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

// -- router_node
// ----------------------------------------------------------------

struct router_node::impl : node_base {
  router_actor router;
  admin_actor admin;
  std::unique_ptr<work_queue> queue;
  std::shared_ptr<record_store> records;
  std::shared_ptr<std::atomic<bool>> stopping =
      std::make_shared<std::atomic<bool>>(false);
};

router_node::router_node(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
router_node::~router_node() {
  // No more durable requests, none answered from now on, then the actors:
  // unacked ones go elsewhere.
  *impl_->stopping = true;
  impl_->queue.reset();
  impl_->records.reset();
  impl_->stop();
}
router_actor router_node::router() const {
  return impl_->router;
}
admin_actor router_node::admin() const {
  return impl_->admin;
}

expected<std::unique_ptr<router_node>> router_node::start(
    caf::actor_system& sys, nats_bus& bus, const router_node_options& opt) {
  if (auto st = check_name("router name", opt.name); !st) return st.err();
  auto p = std::make_unique<impl>();
  p->bus = &bus;
  auto box = inbox::open(bus);
  if (!box) return box.err();
  p->box = *box;
  router_options ro = opt.router;
  ro.name = opt.name;
  ro.workers.clear();
  ro.speeds.clear();
  ro.shards.clear();
  // Liveness comes from the stand-ins (stale heartbeats answer with an
  // error): one miss is enough, and a tick four times per heartbeat
  // notices it soon.
  ro.heartbeat = std::max<caf::timespan>(opt.mesh.heartbeat / 4,
                                         std::chrono::milliseconds(5));
  ro.missed_beats = 1;
  p->router = sys.spawn(kvmesh::router, ro);
  p->actors.push_back(caf::actor_cast<caf::actor>(p->router));
  auto dir_gate = new_gate();
  auto dir = sys.spawn(directory, p->box, opt.mesh, p->router, dir_gate);
  p->admin = caf::actor_cast<admin_actor>(dir);
  p->actors.push_back(caf::actor_cast<caf::actor>(dir));
  // Durable intake keeps its answers (record_store) and takes its claims
  // before the front may give any: opened first.
  durable_intake durable;
  if (opt.durable) {
    record_options ro_rec = durable_records(opt.mesh.subj);
    ro_rec.replicas = opt.durable_replicas;
    auto rec = record_store::open(bus, ro_rec);
    if (!rec) {
      p->stop();
      return rec.err();
    }
    p->records = std::move(*rec);
    durable.records = p->records;
    // A claim lasts as long as a delivery without an ack: a dead router's
    // claims have lapsed by the time the queue hands its requests out
    // again.
    durable.lease = opt.durable_ack_wait;
    record_options ro_claims = durable_claims(opt.mesh.subj, durable.lease);
    ro_claims.replicas = opt.durable_replicas;
    auto claims = record_store::open(bus, ro_claims);
    if (!claims) {
      p->stop();
      return claims.err();
    }
    durable.claims = std::move(*claims);
    const std::string claimant =
        opt.name + "/" + std::to_string(std::random_device{}());
    durable.claimant.assign(claimant.begin(), claimant.end());
    durable.deliveries = opt.durable_deliveries;
    const char* fault = std::getenv("KVMESH_TEST_FAULT");
    durable.exit_before_ack = fault && std::string(fault) == "exit_before_ack";
    if (durable.exit_before_ack)
      KVMESH_WARN(
          "KVMESH_TEST_FAULT=exit_before_ack: exits after its first "
          "durable answer, before acking it (a test's fault)");
  }
  // The fetch thread takes the claims (below).
  const auto claims = durable.claims;
  const auto claimant = durable.claimant;
  auto front_gate = new_gate();
  auto front = sys.spawn(router_front, &bus, opt.mesh, p->router, opt.name,
                         opt.router.block_tokens, p->stopping, opt.meters,
                         std::move(durable), front_gate);
  p->actors.push_back(front);
  auto admin_gate = new_gate();
  auto admin_ep = sys.spawn(admin_front, &bus, p->admin, opt.mesh.call_timeout,
                            opt.admin_page_bytes, admin_gate);
  p->actors.push_back(admin_ep);
  const auto& s = opt.mesh.subj;
  const auto dir_handle = caf::actor_cast<caf::actor>(dir);
  for (auto [subject, queue, to] :
       std::vector<std::tuple<std::string, std::string, caf::actor>>{
           {s.worker_beat(), "", dir_handle},
           {s.router_beat(), "", dir_handle},
           {s.shard_beat(), "", dir_handle},
       }) {
    if (auto st = p->listen(subject, queue, to,
                            {dir_gate, feed_kind::heartbeat, nullptr});
        !st) {
      p->stop();
      return st.err();
    }
  }
  // Joins the routers' queue group once a worker has been heard (or after
  // a heartbeat and a quarter, for a mesh without any): a router restarted
  // into a running mesh would otherwise answer "no workers" to requests
  // the other routers would have routed (scripts/chaos found it).
  {
    caf::scoped_actor waiter{sys};
    const auto until = steady::now() + opt.mesh.heartbeat * 5 / 4;
    bool heard = false;
    while (!heard && steady::now() < until) {
      waiter
          ->request(p->admin, opt.mesh.call_timeout, get_atom::value,
                    workers_atom::value)
          .receive([&](std::vector<worker_status>& ws) { heard = !ws.empty(); },
                   [](caf::error&) {});
      if (!heard) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  const subjects subj = s;
  auto route_overloaded = [subj](
                              const std::string& subject,
                              const std::string& why) -> std::optional<bytes> {
    decision d;
    d.error = why;
    if (subject != subj.route_json()) return encode(d);
    const std::string text = decision_json(d);
    return bytes(text.begin(), text.end());
  };
  for (auto [subject, queue, kind] :
       std::vector<std::tuple<std::string, std::string, feed_kind>>{
           {s.route(), "routers", feed_kind::route},
           {s.route_json(), "routers", feed_kind::route},
           {s.router(opt.name, "weights.get"), "", feed_kind::admin},
           {s.router(opt.name, "weights.set"), "", feed_kind::admin},
       }) {
    admission adm{front_gate, kind, route_overloaded};
    if (kind == feed_kind::admin) adm.overloaded = admin_overloaded;
    if (auto st = p->listen(subject, queue, front, std::move(adm)); !st) {
      p->stop();
      return st.err();
    }
  }
  if (auto st =
          p->listen_single(s.prefix + ".admin.>", "admin", admin_ep,
                           {admin_gate, feed_kind::admin, admin_overloaded});
      !st) {
    p->stop();
    return st.err();
  }
  if (opt.durable) {
    auto qo = durable_queue(s);
    qo.ack_wait_ms = opt.durable_ack_wait.count();
    qo.replicas = opt.durable_replicas;
    auto q = work_queue::open(bus, qo);
    if (!q) {
      p->stop();
      return q.err();
    }
    const size_t skip = s.route_durable().size() + 1;
    auto records = p->records;
    nats_bus* b = &bus;
    auto started = (*q)->start([front, skip, records, b, claims, claimant](
                                   nats_message m,
                                   std::shared_ptr<delivery> d) {
      std::string reply =
          m.subject.size() > skip ? m.subject.substr(skip) : std::string();
      // Decoded once here for its id; a malformed one the front answers,
      // claimed or not.
      auto r = decode<route_request_msg>(m.payload);
      // Handed out before: a router may have decided it and died before
      // its ack. Its kept answer goes out again (the client takes the
      // first; the worker is not awarded twice). Without one (never
      // decided, or the store not answering), it is auctioned: better a
      // second decision than none.
      if (r && d->delivery_count() > 1)
        if (auto kept = records->get(record_key(d->stream_sequence(), r->id))) {
          if (!reply.empty()) (void)b->publish(reply, *kept);
          (void)d->ack();
          return;
        }
      auto pass = [front](std::string reply, bytes payload,
                          std::shared_ptr<delivery> d, claim_outcome c,
                          std::string error) {
        caf::anon_send(front, durable_atom::value, std::move(reply),
                       std::move(payload), std::move(d),
                       static_cast<uint8_t>(c), std::move(error));
      };
      if (!r || !claims || d->stream_sequence() == 0) {
        pass(std::move(reply), std::move(m.payload), std::move(d),
             claim_outcome::taken, {});
        return;
      }
      const auto key = record_key(d->stream_sequence(), r->id);
      claims->put_async(
          key, claimant, true,
          [pass, reply = std::move(reply), payload = std::move(m.payload),
           d = std::move(d)](status s) mutable {
            auto c = claim_outcome::taken;
            std::string error;
            if (!s && s.err().code == ec::conflict) {
              c = claim_outcome::refused;
            } else if (!s) {
              c = claim_outcome::unknown;
              error = s.err().message;
            }
            pass(std::move(reply), std::move(payload), std::move(d), c,
                 std::move(error));
          });
    });
    if (!started) {
      p->stop();
      return started.err();
    }
    p->queue = std::move(*q);
  }
  return std::unique_ptr<router_node>(new router_node(std::move(p)));
}

// -- shard_node
// -------------------------------------------------------------------

struct shard_node::impl : node_base {
  index_shard_actor shard;
};

shard_node::shard_node(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
shard_node::~shard_node() {
  impl_->stop();
}
index_shard_actor shard_node::shard() const {
  return impl_->shard;
}

expected<std::unique_ptr<shard_node>> shard_node::start(
    caf::actor_system& sys, nats_bus& bus, const shard_node_options& opt) {
  if (opt.shards == 0 || opt.shard.shard >= opt.shards)
    return make_error(ec::invalid_argument,
                      "shard " + std::to_string(opt.shard.shard) + "/" +
                          std::to_string(opt.shards) + ": need I < N");
  auto p = std::make_unique<impl>();
  p->bus = &bus;
  auto shard = spawn_index_shard(sys, opt.shard);
  if (!shard) return shard.err();
  p->shard = *shard;
  p->actors.push_back(caf::actor_cast<caf::actor>(*shard));
  auto gate = new_gate();
  auto kv_refused = std::make_shared<std::atomic<uint64_t>>(0);
  auto ep = sys.spawn(shard_endpoint, &bus, opt.mesh, *shard, opt.shard.shard,
                      opt.shards, opt.meters, gate, kv_refused);
  p->actors.push_back(ep);
  const auto& s = opt.mesh.subj;
  // Queries also come batched, on the query subject's parent + ".batch";
  // KV events on kv_batch (an agent's workers' batches of one drain).
  // A refused KV message is lost to the index (KvBatch has no reply): it
  // is counted, logged and reported in the shard's heartbeat, on which
  // the agents have their workers announce their caches again.
  for (const auto& [subject, kind] :
       {std::make_pair(s.kv(opt.shard.shard), feed_kind::kv),
        std::make_pair(s.kv_batch(opt.shard.shard), feed_kind::kv),
        std::make_pair(s.index_query(opt.shard.shard), feed_kind::query),
        std::make_pair(s.index_batch(opt.shard.shard), feed_kind::query)})
    if (auto st = p->listen(
            subject, "", ep,
            {gate, kind, kind == feed_kind::kv ? nullptr : query_overloaded,
             kind == feed_kind::kv ? kv_refused : nullptr});
        !st) {
      p->stop();
      return st.err();
    }
  return std::unique_ptr<shard_node>(new shard_node(std::move(p)));
}

// -- clients
// ------------------------------------------------------------------------

expected<decision> route_once(nats_bus& bus, const subjects& subj,
                              const route_request_msg& r,
                              std::chrono::milliseconds timeout) {
  auto reply = bus.request(subj.route(), encode(r), timeout);
  if (!reply) return reply.err();
  auto d = decode<decision>(*reply);
  if (!d) return d.err();
  if (!d->error.empty()) return make_error(ec::not_found, d->error);
  return d;
}

expected<decision> route_durable_once(nats_bus& bus, const subjects& subj,
                                      const route_request_msg& r,
                                      std::chrono::milliseconds timeout) {
  auto qo = durable_queue(subj);
  qo.consume = false;
  auto q = work_queue::open(bus, qo);
  if (!q) return q.err();
  // Without the bucket (no durable router has run yet) only the live
  // answer can come.
  auto ro = durable_records(subj);
  ro.create = false;
  auto records = record_store::open(bus, ro);
  struct waiter {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<bytes> reply;
  };
  auto w = std::make_shared<waiter>();
  std::random_device rd;
  const uint64_t token = (uint64_t{rd()} << 32) ^ rd();
  // Not under _INBOX.kvmesh., the mesh's own inboxes, which a client's
  // credential may not read (deploy/nats/auth.conf).
  const std::string inbox = "_INBOX.route." + std::to_string(token);
  auto sub = bus.subscribe(inbox, "", [w](nats_message m) {
    std::lock_guard<std::mutex> g(w->mu);
    if (!w->reply) w->reply = std::move(m.payload);  // the first one counts
    w->cv.notify_all();
  });
  if (!sub) return sub.err();
  auto unsubscribe = [&] { (void)bus.unsubscribe(*sub); };
  uint64_t reconnects = bus.reconnects();
  auto sequence = (*q)->publish(subj.route_durable() + "." + inbox, encode(r));
  if (!sequence) {
    unsubscribe();
    return sequence.err();
  }
  // The router keeps the answer before it sends it: one sent while this
  // client was away is in the record by the time the client is back.
  auto kept = [&]() -> std::optional<bytes> {
    if (!records) return std::nullopt;
    auto v = (*records)->get(record_key(*sequence, r.id));
    if (!v) return std::nullopt;
    return std::move(*v);
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::optional<bytes> reply;
  for (;;) {
    std::unique_lock<std::mutex> lock(w->mu);
    const auto slice = std::min(deadline, std::chrono::steady_clock::now() +
                                              std::chrono::milliseconds(100));
    if (w->cv.wait_until(lock, slice, [&] { return w->reply.has_value(); })) {
      reply = std::move(*w->reply);
      break;
    }
    lock.unlock();
    const bool expired = std::chrono::steady_clock::now() >= deadline;
    if (expired || bus.reconnects() != reconnects) {
      reconnects = bus.reconnects();
      if ((reply = kept())) break;
    }
    if (expired) break;
  }
  unsubscribe();
  if (!reply)
    return make_error(ec::timeout, "no decision for request " +
                                       std::to_string(r.id) + " within " +
                                       std::to_string(timeout.count()) +
                                       " ms (it stays queued for the routers)");
  auto d = decode<decision>(*reply);
  if (!d) return d.err();
  if (!d->error.empty()) return make_error(ec::not_found, d->error);
  return d;
}

namespace {

expected<admin_reply> admin_call_once(nats_bus& bus, const subjects& subj,
                                      const std::string& verb,
                                      const admin_request& req,
                                      std::chrono::milliseconds timeout) {
  auto reply = bus.request(subj.admin(verb), encode(req), timeout);
  if (!reply) return reply.err();
  auto a = decode<admin_reply>(*reply);
  if (!a) return a.err();
  if (!a->error.empty()) return make_error(ec::invalid_argument, a->error);
  return a;
}

}  // namespace

expected<admin_reply> admin_request_call(nats_bus& bus, const subjects& subj,
                                         const std::string& verb,
                                         const admin_request& req,
                                         std::chrono::milliseconds timeout) {
  if (verb != "workers") return admin_call_once(bus, subj, verb, req, timeout);
  admin_request paged = req;
  paged.paged = true;
  auto first = admin_call_once(bus, subj, verb, paged, timeout);
  if (!first) return first;
  // The rest of the pages, each from after the last worker listed (a
  // router answering without pages says no more). A page that says more
  // must move on, or paging would never end.
  admin_request next = paged;
  for (bool more = first->more; more;) {
    const auto& got = first->workers;
    if (got.empty() || got.back().worker < next.from ||
        got.back().worker == UINT32_MAX)
      return make_error(ec::parse_error,
                        "admin workers: the page from worker " +
                            std::to_string(next.from) +
                            " says more follow but lists none past it");
    next.from = got.back().worker + 1;
    auto page = admin_call_once(bus, subj, verb, next, timeout);
    if (!page)
      return make_error(page.err().code, "admin workers from worker " +
                                             std::to_string(next.from) + ": " +
                                             page.err().message);
    more = page->more;  // an empty page that says more fails above
    for (auto& w : page->workers)
      first->workers.push_back(std::move(w));
  }
  first->more = false;
  return first;
}

expected<router_actor> spawn_remote_router(caf::actor_system& sys,
                                           nats_bus& bus,
                                           const mesh_options& opt,
                                           listener_actor listener) {
  auto box = inbox::open(bus);
  if (!box) return box.err();
  auto gate = new_gate();
  auto r = sys.spawn(remote_router, *box, opt.subj, listener, gate);
  auto sub = forward(bus, opt.subj.events(), "", caf::actor_cast<caf::actor>(r),
                     {gate, feed_kind::events, nullptr});
  if (!sub) {
    caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
    return sub.err();
  }
  // The subscription and the inbox end with the actor.
  const uint64_t id = *sub;
  nats_bus* b = &bus;
  auto keep = *box;
  r->attach_functor([b, id, keep]() mutable {
    (void)b->unsubscribe(id);
    keep.reset();
  });
  return caf::actor_cast<router_actor>(r);
}

}  // namespace kvmesh
