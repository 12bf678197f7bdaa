// The router process's wiring: its ROUTER, directory, fronts and durable
// intake, spawned and subscribed in order and stopped together.
#include "cluster/router_node.hpp"

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "cluster/admin_front.hpp"
#include "cluster/bridge.hpp"
#include "cluster/directory.hpp"
#include "cluster/durable_intake.hpp"
#include "cluster/node_base.hpp"
#include "cluster/router_front.hpp"
#include "messages/codec.hpp"
#include "messages/json.hpp"

namespace kvmesh {
namespace detail {
namespace {

// The process's ROUTER: its workers and shards come from the directory.
router_actor spawn_router(caf::actor_system& sys,
                          const router_node_options& opt) {
  router_options ro = opt.router;
  ro.name = opt.name;
  ro.workers.clear();
  ro.speeds.clear();
  ro.shards.clear();
  // Liveness comes from the heartbeats the directory hands on: a worker
  // is out once its last is stale, which a tick four times per heartbeat
  // notices soon.
  ro.heartbeat = std::max<caf::timespan>(opt.mesh.heartbeat / 4,
                                         std::chrono::milliseconds(5));
  ro.missed_beats = 1;
  ro.stale_after = stale_after(opt.mesh);
  ro.quiet_silent_bidders = true;
  return sys.spawn(kvmesh::router, ro);
}

// Every heartbeat to the directory (no queue group: each router hears all).
status listen_heartbeats(node_base& p, const subjects& s, caf::actor dir,
                         const std::shared_ptr<mailbox_gate>& dir_gate) {
  for (auto [subject, queue, to] :
       std::vector<std::tuple<std::string, std::string, caf::actor>>{
           {s.worker_beats(), "", dir},
           {s.router_beat(), "", dir},
           {s.shard_beat(), "", dir},
       }) {
    if (auto st = p.listen(subject, queue, to,
                           {dir_gate, feed_kind::heartbeat, nullptr});
        !st)
      return st;
  }
  return ok;
}

// Joins the routers' queue group once a worker has been heard (or after
// a heartbeat and a quarter, for a mesh without any): a router restarted
// into a running mesh would otherwise answer "no workers" to requests
// the other routers would have routed (scripts/chaos found it).
void wait_for_a_worker(caf::actor_system& sys, const admin_actor& admin,
                       const mesh_options& mesh) {
  caf::scoped_actor waiter{sys};
  const auto until = steady::now() + mesh.heartbeat * 5 / 4;
  bool heard = false;
  while (!heard && steady::now() < until) {
    waiter
        ->request(admin, mesh.call_timeout, get_atom::value,
                  workers_atom::value)
        .receive([&](std::vector<worker_status>& ws) { heard = !ws.empty(); },
                 [](caf::error&) {});
    if (!heard) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The front's subjects: route requests in the routers' queue group, this
// router's own weights subjects.
status listen_front(node_base& p, const router_node_options& opt,
                    caf::actor front,
                    const std::shared_ptr<mailbox_gate>& front_gate) {
  const auto& s = opt.mesh.subj;
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
    if (auto st = p.listen(subject, queue, front, std::move(adm)); !st)
      return st;
  }
  return ok;
}

}  // namespace
}  // namespace detail

using namespace detail;

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
  p->router = spawn_router(sys, opt);
  p->actors.push_back(caf::actor_cast<caf::actor>(p->router));
  auto dir_gate = new_heartbeat_gate();
  auto dir = spawn_directory(sys, p->box, opt.mesh, p->router, dir_gate);
  p->admin = caf::actor_cast<admin_actor>(dir);
  p->actors.push_back(caf::actor_cast<caf::actor>(dir));
  // Durable intake keeps its answers (record_store) and takes its claims
  // before the front may give any: opened first.
  durable_intake durable;
  if (opt.durable) {
    auto opened = open_durable_intake(bus, opt);
    if (!opened) {
      p->stop();
      return opened.err();
    }
    durable = std::move(*opened);
    p->records = durable.records;
  }
  // The fetch thread takes the claims (below).
  const auto claims = durable.claims;
  const auto claimant = durable.claimant;
  auto front_gate = new_gate();
  auto front = spawn_router_front(sys, &bus, opt.mesh, p->router, opt.name,
                                  opt.router.block_tokens, p->stopping,
                                  opt.meters, std::move(durable), front_gate);
  p->actors.push_back(front);
  auto admin_gate = new_gate();
  auto admin_ep = spawn_admin_front(sys, &bus, p->admin, opt.mesh.call_timeout,
                                    opt.admin_page_bytes, admin_gate);
  p->actors.push_back(admin_ep);
  const auto& s = opt.mesh.subj;
  if (auto st =
          listen_heartbeats(*p, s, caf::actor_cast<caf::actor>(dir), dir_gate);
      !st) {
    p->stop();
    return st.err();
  }
  wait_for_a_worker(sys, p->admin, opt.mesh);
  if (auto st = listen_front(*p, opt, front, front_gate); !st) {
    p->stop();
    return st.err();
  }
  if (auto st =
          p->listen_single(s.prefix + ".admin.>", "admin", admin_ep,
                           {admin_gate, feed_kind::admin, admin_overloaded});
      !st) {
    p->stop();
    return st.err();
  }
  if (opt.durable) {
    auto q = start_durable_queue(bus, opt, front, p->records, claims, claimant);
    if (!q) {
      p->stop();
      return q.err();
    }
    p->queue = std::move(*q);
  }
  return std::unique_ptr<router_node>(new router_node(std::move(p)));
}

}  // namespace kvmesh
