// The router process's front: route requests in Cap'n Proto and in JSON
// passed to its ROUTER and answered, its price weights read and set, its
// heartbeat. Durable requests go to durable_intake.cpp's handlers.
#include "cluster/router_front.hpp"

#include <string_view>

#include "core/log.hpp"
#include "messages/codec.hpp"
#include "messages/json.hpp"

namespace kvmesh::detail {

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

decision failed(front_pointer self, const caf::error& e, uint64_t id,
                std::string client_id) {
  decision d;
  d.request = id;
  d.client_id = std::move(client_id);
  d.error = describe(e);
  d.failure = e.category() == caf::atom("kvmesh")
                  ? classify_route_error(static_cast<ec>(e.code()), d.error)
                  : route_failure::other;
  if (const auto& m = self->state.meters) m->failed(d.failure);
  return d;
}

void failed(front_pointer self, route_failure f) {
  if (const auto& m = self->state.meters) m->failed(f);
}

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

bool refused_reply(front_pointer self, const std::string& reply,
                   const char* what) {
  auto& st = self->state;
  if (!refuse_mesh_reply(reply, what, st.mesh_inbox_replies)) return false;
  if (const auto& m = st.meters) m->refused_mesh_inbox();
  return true;
}

namespace {

// A route request in Cap'n Proto: its decision, or why there is none.
void front_route(front_pointer self, const std::string& reply,
                 const bytes& payload) {
  auto& st = self->state;
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
  std::string client = r->client_id;
  // The local router always answers by its own deadlines; a timer
  // per request would cost the clock thread two wake-ups.
  self->request(st.router, caf::infinite, route_atom::value, std::move(*r))
      .then(
          [self, reply, since](const decision& d) {
            decided(self, d, since);
            answer(*self->state.bus, reply, encode(d));
          },
          [self, reply, id, client](caf::error& e) {
            answer(*self->state.bus, reply,
                   encode(failed(self, e, id, client)));
          });
}

// A route request in JSON (messages/json.hpp), answered in JSON.
void front_route_json(front_pointer self, const std::string& reply,
                      const bytes& payload) {
  auto& st = self->state;
  const auto since = took(self, intake::json);
  uint64_t asked_id = 0;
  auto r = parse_route_json(
      std::string_view(reinterpret_cast<const char*>(payload.data()),
                       payload.size()),
      st.block_tokens, &asked_id);
  auto to_bytes = [](const std::string& s) {
    return bytes(s.begin(), s.end());
  };
  if (!r) {
    failed(self, route_failure::other);
    decision d;
    d.request = asked_id;
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
  std::string client = r->client_id;
  self->request(st.router, caf::infinite, route_atom::value, std::move(*r))
      .then(
          [self, reply, to_bytes, since](const decision& d) {
            decided(self, d, since);
            answer(*self->state.bus, reply, to_bytes(decision_json(d)));
          },
          [self, reply, id, client, to_bytes](caf::error& e) {
            answer(*self->state.bus, reply,
                   to_bytes(decision_json(failed(self, e, id, client))));
          });
}

// This router's price weights, for an ADMIN.
void front_weights_get(front_pointer self, const std::string& reply) {
  auto& st = self->state;
  self->request(st.router, st.mesh.call_timeout, get_atom::value,
                weights_atom::value)
      .then([self, reply](const price_config& p) {
        answer(*self->state.bus, reply, encode(p));
      });
}

// New price weights for this router, refused unless valid.
void front_weights_set(front_pointer self, const std::string& reply,
                       const bytes& payload) {
  auto& st = self->state;
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

// The router's heartbeat: its ROUTER's status and the process's counts.
void front_beat(front_pointer self) {
  auto& st = self->state;
  self->request(st.router, st.mesh.heartbeat, status_atom::value)
      .then(
          [self](router_status s) {
            const auto t = self->state.bus->stats();
            s.nats_in = t.in_msgs;
            s.nats_out = t.out_msgs;
            s.text_requests = text_route_requests();
            s.block_mismatches = self->state.block_mismatches;
            (void)self->state.bus->publish(self->state.mesh.subj.router_beat(),
                                           encode(s));
          },
          [](caf::error&) {});
  self->delayed_send(self, st.mesh.heartbeat, beat_atom::value);
}

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
          if (!refused_reply(self, reply, "a route request"))
            front_route(self, reply, payload);
        } else if (subject == st.mesh.subj.route_json()) {
          if (!refused_reply(self, reply, "a JSON route request"))
            front_route_json(self, reply, payload);
        } else if (subject == st.mesh.subj.router(st.name_, "weights.get")) {
          front_weights_get(self, reply);
        } else if (subject == st.mesh.subj.router(st.name_, "weights.set")) {
          front_weights_set(self, reply, payload);
        }
      },
      [=](durable_atom, const std::string& reply, const bytes& payload,
          std::shared_ptr<delivery> d, uint8_t claimed,
          const std::string& claim_error) {
        front_durable(self, reply, payload, std::move(d), claimed, claim_error);
      },
      [=](recorded_atom, const std::string& reply, const bytes& payload,
          std::shared_ptr<delivery>& d, uint64_t id,
          const std::string& not_kept) {
        front_recorded(self, reply, payload, d, id, not_kept);
      },
      [=](progress_atom) { front_progress(self); },
      [=](beat_atom) { front_beat(self); },
  };
}

}  // namespace

caf::actor spawn_router_front(caf::actor_system& sys, nats_bus* bus,
                              mesh_options mesh, router_actor router,
                              std::string name, uint32_t block_tokens,
                              std::shared_ptr<std::atomic<bool>> stopping,
                              std::shared_ptr<const router_meters> meters,
                              durable_intake durable,
                              std::shared_ptr<mailbox_gate> gate) {
  return sys.spawn(router_front, bus, std::move(mesh), std::move(router),
                   std::move(name), block_tokens, std::move(stopping),
                   std::move(meters), std::move(durable), std::move(gate));
}

}  // namespace kvmesh::detail
