// The ADMIN's verbs on NATS (workers, routers, shards, prefix, weights,
// drain), each relayed to the directory and answered in an AdminReply.
#include "cluster/admin_front.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cluster/node_base.hpp"
#include "core/pricing.hpp"
#include "messages/codec.hpp"

namespace kvmesh::detail {

std::optional<bytes> admin_overloaded(const std::string& subject,
                                      const std::string& why) {
  // weights.get answers a PriceConfig, which has no room for an error: its
  // caller times out, as it would with a router gone.
  if (verb_of(subject) == "get") return std::nullopt;
  admin_reply r;
  r.error = why;
  return encode(r);
}

namespace {

struct admin_front_state {
  static inline const char* name = "admin_front";
  nats_bus* bus = nullptr;
  admin_actor admin;
  caf::timespan timeout{};
  size_t page_bytes = 0;  // of a workers listing; 0: half the max payload
  std::shared_ptr<mailbox_gate> gate;  // what NATS handed it
  uint64_t mesh_inbox_replies = 0;     // refused for their reply (logged)
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
        if (refuse_mesh_reply(reply, "an ADMIN request",
                              self->state.mesh_inbox_replies))
          return;
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

}  // namespace

caf::actor spawn_admin_front(caf::actor_system& sys, nats_bus* bus,
                             admin_actor admin, caf::timespan timeout,
                             size_t page_bytes,
                             std::shared_ptr<mailbox_gate> gate) {
  return sys.spawn(admin_front, bus, std::move(admin), timeout, page_bytes,
                   std::move(gate));
}

}  // namespace kvmesh::detail
