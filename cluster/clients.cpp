// The clients: route requests (core NATS, and durable through the work
// queue with the decision record as fallback), ADMIN calls joining the
// workers' pages, and the remote router a replay client drives.
#include "cluster/clients.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>

#include "cluster/bridge.hpp"
#include "cluster/durable_intake.hpp"
#include "cluster/node_base.hpp"
#include "messages/codec.hpp"

namespace kvmesh {
namespace detail {
namespace {

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
      [=](put_atom, workers_atom, const worker_status&, bidder_actor) {},
      [=](drop_atom, workers_atom, uint32_t) {},
      [=](put_atom, answered_atom, const bidder_actor&, const std::string&) {},
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

}  // namespace
}  // namespace detail

using namespace detail;

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
  // answer can come. A bucket this credential cannot read is an error:
  // an answer sent while the client reconnects would be lost.
  auto ro = durable_records(subj);
  ro.create = false;
  auto records = record_store::open(bus, ro);
  if (!records && records.err().code != ec::not_found) return records.err();
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
  // A refused subscription would show only as a timeout.
  if (auto st = bus.confirm(inbox,
                            std::min(timeout, std::chrono::milliseconds(5000)));
      !st) {
    unsubscribe();
    return make_error(st.err().code, "the decision's inbox " + inbox + ": " +
                                         st.err().message);
  }
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
  auto box = inbox::open_client(bus);
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
