// Stand-ins for remote actors: node agents and their workers, index shards,
// and the publisher of request events.
#include "cluster/remote.hpp"

#include "actors/worker.hpp"

#include "messages/codec.hpp"

namespace kvmesh {

namespace {

using steady = std::chrono::steady_clock;

// -- agent links --------------------------------------------------------------

struct links_state {
  static inline const char* name = "agent_links";
  subjects subj;
  std::unordered_map<uint32_t, std::string> agent_of;    // worker -> agent
  std::unordered_map<std::string, uint32_t> workers_of;  // agent -> count
  std::string to;  // the subject of the call at hand, its buffer kept
  caf::timespan timeout{};
  // A probe waits a quarter of a heartbeat: a real agent answers within
  // a bid deadline, and a flood's unanswered probes are dropped soon.
  caf::timespan probe_timeout{};
  router_actor router;  // told which agents answered a probe
  pending_calls calls;
};

using links_pointer = agent_links_actor::stateful_pointer<links_state>;

// The subject of `verb` of the agent that holds `worker`; null when no
// agent does (it left between the ROUTER's call and this).
const std::string* verb_of(links_state& st, uint32_t worker,
                           const char* verb) {
  auto it = st.agent_of.find(worker);
  if (it == st.agent_of.end()) return nullptr;
  st.subj.agent_into(st.to, it->second, verb);
  return &st.to;
}

// A call for bids that asks no worker, which a node agent answers at once
// ("hosts none of them"): whoever answers on the agent's subject is there,
// which heartbeats, anyone's to forge, do not show. The answer's content
// does not matter, only that it decodes.
void probe(links_pointer self, const std::string& agent) {
  auto& st = self->state;
  st.subj.agent_into(st.to, agent, "bid");
  st.calls.call(self, st.to, encode(call_for_bids{}), st.probe_timeout,
                [self, agent](expected<bytes> r) {
                  if (r && decode<bid_list>(*r))
                    self->send(self->state.router, put_atom::value,
                               answered_atom::value,
                               caf::actor_cast<bidder_actor>(self), agent);
                });
}

// Worker `id` is `agent`'s from now on (empty: no agent's).
void place(links_pointer self, uint32_t id, std::string agent) {
  auto& st = self->state;
  auto it = st.agent_of.find(id);
  if (it != st.agent_of.end()) {
    if (it->second == agent) return;
    auto n = st.workers_of.find(it->second);
    if (n != st.workers_of.end() && --n->second == 0) st.workers_of.erase(n);
    if (agent.empty()) {
      st.agent_of.erase(it);
      return;
    }
    it->second = agent;
  } else if (agent.empty()) {
    return;
  } else {
    st.agent_of.emplace(id, agent);
  }
  if (st.workers_of[agent]++ == 0) probe(self, agent);
}

caf::error no_agent(uint32_t worker) {
  return caf::make_error(ec::not_found, "no agent holds worker " +
                                            std::to_string(worker));
}

// `payload` to `subject` as a call whose reply decodes as R; errors (none
// in time, undecodable, the agent's own) go to `rp`.
template <class R>
void call_agent(links_pointer self, const std::string& subject, bytes payload,
                caf::typed_response_promise<R> rp) {
  auto& st = self->state;
  st.calls.call(self, subject, std::move(payload), st.timeout,
                [rp](expected<bytes> reply) mutable {
                  auto r = reply ? decode<R>(*reply) : expected<R>(reply.err());
                  if (!r)
                    rp.deliver(to_caf(r.err()));
                  else
                    rp.deliver(std::move(*r));
                });
}

agent_links_actor::behavior_type agent_links(links_pointer self,
                                             std::shared_ptr<inbox> box,
                                             mesh_options mesh,
                                             router_actor router) {
  auto& st = self->state;
  st.subj = mesh.subj;
  st.timeout = mesh.call_timeout;
  st.probe_timeout = mesh.heartbeat / 4;
  st.router = std::move(router);
  st.calls.attach(std::move(box), true);
  return {
      [=](bid_atom, const call_for_bids& cfb) -> caf::result<bid_list> {
        auto& st = self->state;
        // The ROUTER asks one agent's workers per call.
        const auto* to = cfb.workers.empty()
                             ? nullptr
                             : verb_of(st, cfb.workers.front(), "bid");
        if (!to)
          return no_agent(cfb.workers.empty() ? 0 : cfb.workers.front());
        auto rp = self->make_response_promise<bid_list>();
        st.calls.call(self, *to, encode(cfb), st.timeout,
                      [rp](expected<bytes> r) mutable {
                        auto bids = r ? decode<bid_list>(*r)
                                      : expected<bid_list>(r.err());
                        if (!bids)
                          rp.deliver(to_caf(bids.err()));
                        else if (!bids->error.empty())
                          rp.deliver(caf::make_error(ec::not_found,
                                                     std::move(bids->error)));
                        else
                          rp.deliver(std::move(*bids));
                      });
        return rp;
      },
      [=](award_atom, const award_msg& a) -> caf::result<award_reply> {
        const auto* to = verb_of(self->state, a.worker, "award");
        if (!to) return no_agent(a.worker);
        auto rp = self->make_response_promise<award_reply>();
        call_agent(self, *to, encode(a), rp);
        return rp;
      },
      [=](release_atom, const release_msg& r) {
        if (r.workers.empty()) return;
        if (const auto* to = verb_of(self->state, r.workers.front(), "release"))
          (void)self->state.calls.publish(self, *to, encode(r));
      },
      [=](withdraw_atom, const withdraw_msg& w) -> caf::result<withdraw_reply> {
        const auto* to = verb_of(self->state, w.worker, "withdraw");
        if (!to) return no_agent(w.worker);
        auto rp = self->make_response_promise<withdraw_reply>();
        call_agent(self, *to, encode(w), rp);
        return rp;
      },
      [=](put_atom, workers_atom, uint32_t id, std::string& agent) {
        place(self, id, std::move(agent));
      },
      [=](drop_atom, workers_atom, uint32_t id) { place(self, id, {}); },
      [=](reply_atom, uint64_t seq, bytes& payload) {
        self->state.calls.complete(seq, std::move(payload));
      },
      [=](sweep_atom) { self->state.calls.sweep(self); },
      [=](flush_atom) { self->state.calls.flush(); },
  };
}

// -- remote index shard -------------------------------------------------------

struct remote_shard_state {
  static inline const char* name = "remote_shard";
  subjects subj;
  uint32_t shard = 0;
  // Its verbs' subjects, built once: every KV batch and query uses one
  // (kv empty: a router's stand-in, which publishes none).
  std::string kv, query;
  caf::timespan timeout{};
  pending_calls calls;
  shard_status last;
  bool heard = false;
};

remote_shard_actor::behavior_type remote_shard(
    remote_shard_actor::stateful_pointer<remote_shard_state> self,
    std::shared_ptr<inbox> box, mesh_options mesh, uint32_t shard,
    std::string agent) {
  auto& st = self->state;
  st.subj = mesh.subj;
  st.shard = shard;
  if (!agent.empty()) st.kv = st.subj.kv(shard, agent);
  st.query = st.subj.index_query(shard);
  st.timeout = mesh.call_timeout;
  st.calls.attach(std::move(box), true);
  return {
      // The agent's workers' batches of one drain go in one NATS message,
      // in the order they came (kv_batch subject: see subjects).
      [=](kv_atom, uint32_t worker, std::vector<cache_event>& events) {
        auto& st = self->state;
        if (st.kv.empty()) return;  // a router's: it has no KV events
        (void)st.calls.publish(
            self, st.kv, encode(kv_batch{worker, std::move(events)}), {}, true);
      },
      [=](query_atom, std::vector<uint64_t>& chain)
          -> caf::result<std::vector<holder_match>> {
        auto& st = self->state;
        auto rp = self->make_response_promise<std::vector<holder_match>>();
        st.calls.call(self, st.query, encode(index_query{std::move(chain)}),
                      st.timeout, [rp](expected<bytes> reply) mutable {
                        if (!reply) {
                          rp.deliver(to_caf(reply.err()));
                          return;
                        }
                        auto r = decode<index_reply>(*reply);
                        if (!r)
                          rp.deliver(to_caf(r.err()));
                        else if (!r->error.empty())
                          rp.deliver(caf::make_error(ec::not_found, r->error));
                        else
                          rp.deliver(std::move(r->holders));
                      });
        return rp;
      },
      // A worker that left is forgotten by the shard's own process.
      // Over NATS a drop travels as a resync batch without events: the
      // worker re-announcing its cache sends it first, then its blocks.
      [=](drop_atom, uint32_t worker) {
        auto& st = self->state;
        if (st.kv.empty()) return;
        kv_batch b;
        b.worker = worker;
        b.resync = true;
        (void)st.calls.publish(self, st.kv, encode(b), {}, true);
      },
      [=](status_atom) -> caf::result<shard_status> {
        auto& st = self->state;
        if (!st.heard)
          return caf::make_error(ec::timeout, "no heartbeat from shard " +
                                                  std::to_string(st.shard));
        return st.last;
      },
      // The shard's own process persists on its own clock.
      [=](persist_atom) {},
      [=](reply_atom, uint64_t seq, bytes& payload) {
        self->state.calls.complete(seq, std::move(payload));
      },
      [=](sweep_atom) { self->state.calls.sweep(self); },
      [=](flush_atom) { self->state.calls.flush(); },
      [=](put_atom, shard_status& s) {
        self->state.last = std::move(s);
        self->state.heard = true;
      },
  };
}

// -- request events -----------------------------------------------------------

struct event_publisher_state {
  static inline const char* name = "event_publisher";
  nats_bus* bus = nullptr;
  std::string subject;
  request_events out;
  bool flushing = false;
};

event_publisher_actor::behavior_type event_publisher(
    event_publisher_actor::stateful_pointer<event_publisher_state> self,
    nats_bus* bus, std::string subject) {
  self->state.bus = bus;
  self->state.subject = std::move(subject);
  auto add = [=](request_event e) {
    auto& st = self->state;
    st.out.events.push_back(e);
    if (!st.flushing) {
      st.flushing = true;
      self->send(self, flush_atom::value);
    }
  };
  return {
      [=](first_atom, uint64_t id, uint32_t gpu, uint32_t host, uint32_t disk) {
        add(request_event{id, 0, false, gpu, host, disk});
      },
      [=](done_atom, uint64_t id) {
        add(request_event{id, 0, true, 0, 0, 0});
      },
      [=](flush_atom) {
        auto& st = self->state;
        st.flushing = false;
        if (st.out.events.empty()) return;
        (void)st.bus->publish(st.subject, encode(st.out));
        st.out.events.clear();
      },
  };
}

}  // namespace

agent_links_actor spawn_agent_links(caf::actor_system& sys,
                                    std::shared_ptr<inbox> box,
                                    const mesh_options& mesh,
                                    router_actor router) {
  return sys.spawn(agent_links, std::move(box), mesh, std::move(router));
}

remote_shard_actor spawn_remote_shard(caf::actor_system& sys,
                                      std::shared_ptr<inbox> box,
                                      const mesh_options& mesh, uint32_t shard,
                                      const std::string& agent) {
  return sys.spawn(remote_shard, std::move(box), mesh, shard, agent);
}

event_publisher_actor spawn_event_publisher(caf::actor_system& sys,
                                            nats_bus& bus,
                                            const subjects& subj) {
  return sys.spawn(event_publisher, &bus, subj.events());
}

}  // namespace kvmesh
