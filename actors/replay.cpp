// The replay client: arrivals on the actor clock, decisions from routers,
// first tokens and ends from workers, and a sim-style result at the end.
#include "actors/replay.hpp"

#include <algorithm>
#include <chrono>

namespace kvmesh {

namespace {

using rself = replay_actor::stateful_pointer<replay_state>;

// Engine milliseconds between two points of the actor clock.
double engine_ms(rself self, caf::actor_clock::time_point from,
                 caf::actor_clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count() *
         self->state.opt.time_scale;
}

caf::timespan wall(rself self, double engine_delay_ms) {
  const double ms = engine_delay_ms / self->state.opt.time_scale;
  return std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double, std::milli>(std::max(0.0, ms)));
}

void finish_if_done(rself self) {
  auto& st = self->state;
  if (st.ended + st.failed < st.records.size()) return;
  sim_result res;
  res.policy = policy_kind::kvmesh;
  res.requests = st.records.size();
  res.completed = st.ended;
  res.assigned = st.assigned;
  std::vector<request_outcome> outcomes(st.records.size());
  for (size_t i = 0; i < st.records.size(); ++i) {
    const auto& r = st.records[i];
    const auto& t = (*st.opt.trace)[i];
    request_outcome& o = outcomes[i];
    o.arrival_ms = t.arrival_ms / st.opt.speedup;
    o.ttft_ms = r.ttft_ms;
    o.e2e_ms = r.e2e_ms;
    o.worker = r.worker;
    o.prompt_blocks = static_cast<uint32_t>(t.blocks.size());
    o.output_tokens = std::max<uint32_t>(1, t.output_tokens);
    std::copy(r.hits, r.hits + 3, o.hits);
  }
  summarize_outcomes(outcomes, res);
  res.refused = st.failed;
  st.opt.done->set_value(std::move(res));
  self->quit();
}

void arrive(rself self, size_t i) {
  auto& st = self->state;
  const auto& trace = *st.opt.trace;
  if (i + 1 < trace.size())
    self->delayed_send(
        self,
        wall(self,
             (trace[i + 1].arrival_ms - trace[i].arrival_ms) / st.opt.speedup),
        arrive_atom::value, i + 1);
  const trace_request& t = trace[i];
  route_request_msg req;
  req.id = i;
  req.blocks = t.blocks;
  req.input_tokens = t.input_tokens;
  req.output_tokens = std::max<uint32_t>(1, t.output_tokens);
  st.records[i].sent = self->clock().now();
  const auto& router = st.routers[i % st.routers.size()];
  self->request(router, caf::infinite, route_atom::value, req)
      .then(
          [=](const decision& d) {
            auto& st = self->state;
            st.records[i].worker = d.worker;
            if (d.worker < st.assigned.size()) ++st.assigned[d.worker];
          },
          [=](caf::error&) {
            auto& st = self->state;
            st.records[i].failed = true;
            ++st.failed;
            finish_if_done(self);
          });
}

}  // namespace

replay_actor::behavior_type replay(rself self, replay_options opt) {
  auto& st = self->state;
  st.opt = std::move(opt);
  st.records.resize(st.opt.trace->size());
  st.assigned.assign(st.opt.workers, 0);
  return {
      [=](start_atom, std::vector<router_actor> routers) {
        auto& st = self->state;
        if (routers.empty() || st.opt.trace->empty()) {
          finish_if_done(self);
          return;
        }
        st.routers = std::move(routers);
        self->delayed_send(
            self, wall(self, st.opt.trace->front().arrival_ms / st.opt.speedup),
            arrive_atom::value, size_t{0});
      },
      [=](arrive_atom, size_t i) { arrive(self, i); },
      [=](first_atom, uint64_t id, uint32_t g, uint32_t h, uint32_t d) {
        auto& r = self->state.records.at(id);
        r.ttft_ms = engine_ms(self, r.sent, self->clock().now());
        r.hits[0] = g;
        r.hits[1] = h;
        r.hits[2] = d;
      },
      [=](done_atom, uint64_t id) {
        auto& st = self->state;
        auto& r = st.records.at(id);
        r.e2e_ms = engine_ms(self, r.sent, self->clock().now());
        ++st.ended;
        finish_if_done(self);
      },
  };
}

}  // namespace kvmesh
