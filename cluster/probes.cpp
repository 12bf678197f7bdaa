// Readiness per role: NATS, then what the node's actors say in time.
#include "cluster/probes.hpp"

namespace kvmesh {

namespace {

using steady = std::chrono::steady_clock;

template <class T, class Handle>
std::optional<T> ask(caf::scoped_actor& self, const Handle& h,
                     steady::time_point deadline) {
  return ask_until<T>(self, h, deadline, nullptr, status_atom::value);
}

void nats_up(const nats_bus& bus, std::vector<std::string>& why) {
  if (!bus.connected()) why.emplace_back("not connected to NATS");
}

readiness workers_ready(const nats_bus& bus, std::vector<worker_actor> ws) {
  return [&bus, ws](caf::scoped_actor& self, steady::time_point deadline) {
    std::vector<std::string> why;
    nats_up(bus, why);
    for (const auto& w : ws) {
      auto s = ask<worker_status>(self, w, deadline);
      if (!s)
        why.emplace_back("a worker does not answer");
      else if (s->unhealthy)
        why.emplace_back("worker " + std::to_string(s->worker) + ": " +
                         unhealthy_reason);
    }
    return why;
  };
}

}  // namespace

readiness readiness_of(const nats_bus& bus, const agent_node& node) {
  return workers_ready(bus, node.workers());
}

readiness readiness_of(const nats_bus& bus, const engine_agent& node) {
  std::vector<worker_actor> ws;
  for (const auto& w : node.workers())
    ws.push_back(caf::actor_cast<worker_actor>(w));
  return workers_ready(bus, std::move(ws));
}

readiness readiness_of(const nats_bus& bus, const router_node& node) {
  return [&bus, router = node.router()](caf::scoped_actor& self,
                                        steady::time_point deadline) {
    std::vector<std::string> why;
    nats_up(bus, why);
    auto s = ask<router_status>(self, router, deadline);
    if (!s)
      why.emplace_back("the ROUTER does not answer");
    else if (s->live_workers == 0)
      why.emplace_back("no live worker known yet");
    return why;
  };
}

readiness readiness_of(const nats_bus& bus, const shard_node& node) {
  return [&bus, shard = node.shard()](caf::scoped_actor& self,
                                      steady::time_point deadline) {
    std::vector<std::string> why;
    nats_up(bus, why);
    if (!ask<shard_status>(self, shard, deadline))
      why.emplace_back("the index shard does not answer");
    return why;
  };
}

}  // namespace kvmesh
