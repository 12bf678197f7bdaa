// The directory: workers, routers and shards from their heartbeats (each
// worker and shard a stand-in the ROUTER calls), and the distributed
// ADMIN's answers: listings, weights set on every router, drains.
#include "cluster/directory.hpp"

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/router.hpp"
#include "cluster/node_base.hpp"
#include "cluster/remote.hpp"
#include "messages/codec.hpp"

namespace kvmesh::detail {
namespace {

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

}  // namespace

directory_actor spawn_directory(caf::actor_system& sys,
                                std::shared_ptr<inbox> box, mesh_options mesh,
                                router_actor router,
                                std::shared_ptr<mailbox_gate> gate) {
  return sys.spawn(directory, std::move(box), std::move(mesh),
                   std::move(router), std::move(gate));
}

}  // namespace kvmesh::detail
