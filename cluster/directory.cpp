// The directory: workers, routers and shards from their heartbeats (each
// worker's beats handed to the ROUTER with the agents' links, each shard a
// stand-in the ROUTER calls), and the distributed ADMIN's answers:
// listings, weights set on every router, drains.
#include "cluster/directory.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/router.hpp"
#include "cluster/node_base.hpp"
#include "cluster/remote.hpp"
#include "core/log.hpp"
#include "messages/codec.hpp"
#include "messages/limits.hpp"
#include "messages/member_checks.hpp"

namespace kvmesh::detail {
namespace {

struct directory_state {
  static inline const char* name = "directory";
  struct worker_entry {
    worker_status last;
    steady::time_point seen;
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
  agent_links_actor links;  // the bidder of every agent's workers
  std::unordered_map<std::string, uint32_t> agent_workers;  // per agent
  std::map<std::string, router_entry> routers;
  std::map<uint32_t, shard_entry> shards;
  std::vector<remote_shard_actor> shard_proxies;
  std::shared_ptr<mailbox_gate> gate;  // what NATS handed it (heartbeats)
  std::string worker_beats;  // mesh.subj.worker_beat_root(), built once
};

using dir_pointer = directory_actor::stateful_pointer<directory_state>;

bool fresh(const directory_state& st, steady::time_point seen) {
  return steady::now() - seen <= stale_after(st.mesh);
}

// A worker of `agent` left the directory; the agent's count goes with its
// last worker.
void left_agent(directory_state& st, const std::string& agent) {
  auto n = st.agent_workers.find(agent);
  if (n == st.agent_workers.end() || --n->second > 0) return;
  st.agent_workers.erase(n);
}

// A worker's heartbeat, which came on `sender`'s subject (worker_beat):
// under per-agent NATS permissions only that agent's credential may
// publish there, so a beat naming another agent is refused.
void directory_worker_beat(dir_pointer self, worker_status s,
                           const std::string& sender) {
  auto& st = self->state;
  auto fault = check_worker_beat(s);
  if (fault == member_fault::none && !check_name("agent", s.agent))
    fault = member_fault::bad_name;
  if (fault == member_fault::none && s.agent != sender)
    fault = member_fault::wrong_subject;
  auto it = st.workers.find(s.worker);
  const auto limits = current_wire_limits();
  if (fault == member_fault::none && it != st.workers.end() &&
      it->second.last.agent != s.agent && fresh(st, it->second.seen))
    // Its id belongs to the agent that announced it while that one is
    // heard: another agent's beat would move it (and its auctions) there.
    fault = member_fault::owned;
  if (fault == member_fault::none && it == st.workers.end()) {
    if (st.workers.size() >= limits.max_workers)
      fault = member_fault::too_many;
    else if (st.agent_workers[s.agent] >= limits.max_workers_per_agent)
      fault = member_fault::too_many_of_agent;
  }
  if (fault != member_fault::none) {
    refuse_member(member_message::worker_beat, fault, s.agent, s.worker);
    return;
  }
  const bool joins = it == st.workers.end();
  if (joins) {
    it = st.workers.emplace(s.worker, directory_state::worker_entry{}).first;
    ++st.agent_workers[s.agent];
  } else if (it->second.last.agent != s.agent) {
    // Moved to another agent (a node restarted under another name, after
    // its old one fell silent).
    KVMESH_INFO("worker %u moved from agent '%s' to agent '%s'", s.worker,
                it->second.last.agent.c_str(), s.agent.c_str());
    left_agent(st, it->second.last.agent);
    ++st.agent_workers[s.agent];
  }
  // The links learn the worker's agent before the ROUTER can call it.
  if (joins || it->second.last.agent != s.agent)
    self->send(st.links, put_atom::value, workers_atom::value, s.worker,
               s.agent);
  auto& e = it->second;
  e.seen = steady::now();
  e.last = s;
  // Every beat goes to the ROUTER as it comes: liveness costs one message
  // a beat, never a ping per member, and a router that counted the worker
  // out (silence) takes it back as soon as it is heard again.
  self->send(st.router, put_atom::value, workers_atom::value, std::move(s),
             caf::actor_cast<bidder_actor>(st.links));
}

void directory_router_beat(dir_pointer self, router_status s) {
  auto& st = self->state;
  auto fault = check_name("router", s.name) ? member_fault::none
                                            : member_fault::bad_name;
  auto it = st.routers.find(s.name);
  if (fault == member_fault::none && it == st.routers.end() &&
      st.routers.size() >= current_wire_limits().max_routers)
    fault = member_fault::too_many;
  if (fault != member_fault::none) {
    refuse_member(member_message::router_beat, fault, s.name);
    return;
  }
  auto& e = st.routers[s.name];
  e.last = std::move(s);
  e.seen = steady::now();
}

// Members silent for forget_after are dropped with all they hold: the
// ROUTER's entry, the agent's link once it has no worker left. Heard
// again, a member joins as new.
void forget_silent(dir_pointer self) {
  auto& st = self->state;
  const auto before = steady::now() - forget_after(st.mesh);
  uint32_t gone = 0;
  std::string first;
  for (auto it = st.workers.begin(); it != st.workers.end();) {
    if (it->second.seen >= before) {
      ++it;
      continue;
    }
    // One line for all: a node that dies takes many workers along.
    if (gone++ == 0)
      first = "worker " + std::to_string(it->first) + " of agent '" +
              it->second.last.agent + "'";
    self->send(st.router, drop_atom::value, workers_atom::value, it->first);
    self->send(st.links, drop_atom::value, workers_atom::value, it->first);
    left_agent(st, it->second.last.agent);
    it = st.workers.erase(it);
  }
  if (gone > 0)
    KVMESH_INFO("%s%s forgotten after %lld s of silence", first.c_str(),
                gone == 1 ? ""
                          : (" and " + std::to_string(gone - 1) + " more")
                                .c_str(),
                static_cast<long long>(
                    std::chrono::duration_cast<std::chrono::seconds>(
                        forget_after(st.mesh))
                        .count()));
  for (auto it = st.routers.begin(); it != st.routers.end();)
    it = it->second.seen < before ? st.routers.erase(it) : std::next(it);
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
  st.worker_beats = st.mesh.subj.worker_beat_root();
  st.router = std::move(router);
  st.links = spawn_agent_links(self->system(), box, st.mesh, st.router);
  st.calls.attach(std::move(box));
  self->delayed_send(self, st.mesh.heartbeat, tick_atom::value);
  return {
      [=](nats_atom, const std::string& subject, const std::string&,
          const bytes& payload) {
        auto& st = self->state;
        gate_pass pass(st.gate.get(), payload.size());
        if (auto agent = agent_of(subject, st.worker_beats); !agent.empty()) {
          if (auto s = decode<worker_status>(payload))
            directory_worker_beat(self, std::move(*s), agent);
        } else if (subject == st.mesh.subj.router_beat()) {
          if (auto s = decode<router_status>(payload))
            directory_router_beat(self, std::move(*s));
        } else if (subject == st.mesh.subj.shard_beat()) {
          if (auto s = decode<shard_status>(payload))
            directory_shard_beat(self, std::move(*s));
        }
      },
      [=](reply_atom, uint64_t seq, bytes& payload) {
        self->state.calls.complete(seq, std::move(payload));
      },
      [=](sweep_atom) { self->state.calls.sweep(self); },
      [=](tick_atom) {
        forget_silent(self);
        self->delayed_send(self, self->state.mesh.heartbeat, tick_atom::value);
      },
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

}  // namespace

directory_actor spawn_directory(caf::actor_system& sys,
                                std::shared_ptr<inbox> box, mesh_options mesh,
                                router_actor router,
                                std::shared_ptr<mailbox_gate> gate) {
  return sys.spawn(directory, std::move(box), std::move(mesh),
                   std::move(router), std::move(gate));
}

}  // namespace kvmesh::detail
