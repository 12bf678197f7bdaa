// ADMIN: gathers status from every worker and router, sets weights on
// every router, drains workers.
#include "actors/admin.hpp"

#include <memory>

namespace kvmesh {

namespace {

using apointer = admin_actor::stateful_pointer<admin_state>;

// Asks every actor in `to` with `msg...` and answers with the replies in
// the same order; one that does not answer by the deadline leaves a
// default-constructed entry (CAF 0.17 has no fan-out request: by hand).
template <class Reply, class Handle, class... Ts>
caf::typed_response_promise<std::vector<Reply>> gather(
    apointer self, const std::vector<Handle>& to, Ts... msg) {
  auto rp = self->template make_response_promise<std::vector<Reply>>();
  struct acc {
    std::vector<Reply> replies;
    size_t left;
  };
  auto a = std::make_shared<acc>(acc{std::vector<Reply>(to.size()), to.size()});
  if (to.empty()) {
    rp.deliver(std::vector<Reply>{});
    return rp;
  }
  for (size_t i = 0; i < to.size(); ++i) {
    self->request(to[i], self->state.opt.deadline, msg...)
        .then(
            [=](const Reply& r) mutable {
              a->replies[i] = r;
              if (--a->left == 0) rp.deliver(std::move(a->replies));
            },
            [=](caf::error&) mutable {
              if (--a->left == 0) rp.deliver(std::move(a->replies));
            });
  }
  return rp;
}

}  // namespace

admin_actor::behavior_type admin(apointer self, admin_options opt) {
  self->state.opt = std::move(opt);
  return {
      [=](get_atom, workers_atom) -> caf::result<std::vector<worker_status>> {
        return gather<worker_status>(self, self->state.opt.workers,
                                     status_atom::value);
      },
      [=](get_atom, routers_atom) -> caf::result<std::vector<router_status>> {
        return gather<router_status>(self, self->state.opt.routers,
                                     status_atom::value);
      },
      [=](get_atom, weights_atom) -> caf::result<price_config> {
        if (self->state.opt.routers.empty())
          return caf::make_error(ec::not_found, "no routers");
        return self->delegate(self->state.opt.routers.front(), get_atom::value,
                              weights_atom::value);
      },
      [=](put_atom, weights_atom, const price_config& p) -> uint32_t {
        for (auto& r : self->state.opt.routers)
          self->send(r, put_atom::value, weights_atom::value, p);
        return static_cast<uint32_t>(self->state.opt.routers.size());
      },
      [=](put_atom, drain_atom, uint32_t worker, bool on) -> caf::result<bool> {
        auto& ws = self->state.opt.workers;
        if (worker >= ws.size())
          return caf::make_error(
              ec::not_found, "no worker " + std::to_string(worker) + " (of " +
                                 std::to_string(ws.size()) + ")");
        self->send(ws[worker], put_atom::value, drain_atom::value, on);
        return on;
      },
      [=](get_atom, shards_atom) -> caf::result<std::vector<shard_status>> {
        return gather<shard_status>(self, self->state.opt.shards,
                                    status_atom::value);
      },
      [=](query_atom, std::vector<uint64_t>& chain)
          -> caf::result<std::vector<holder_match>> {
        const auto& shards = self->state.opt.shards;
        if (shards.empty())
          return caf::make_error(ec::not_found, "no index shards");
        if (chain.empty())
          return caf::make_error(ec::empty_input, "the prefix has no blocks");
        const auto& shard = shards[shard_of(chain.front(), shards.size())];
        return self->delegate(shard, query_atom::value, std::move(chain));
      },
  };
}

}  // namespace kvmesh
