// Inside a router process: the front's state and counts, shared by its
// route intake (router_front.cpp) and its durable intake
// (durable_intake.cpp).
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/actors.hpp"
#include "cluster/bridge.hpp"
#include "cluster/durable_intake.hpp"
#include "cluster/meters.hpp"
#include "cluster/nats.hpp"
#include "cluster/node_base.hpp"
#include "cluster/subjects.hpp"
#include "core/block_hash.hpp"
#include "core/error.hpp"
#include "messages/types.hpp"

namespace kvmesh::detail {

struct front_state {
  static inline const char* name = "router_front";
  nats_bus* bus = nullptr;
  mesh_options mesh;
  std::string route_subject;  // mesh.subj.route(), built once
  router_actor router;
  std::string name_;
  uint32_t block_tokens = default_block_tokens;
  bool warned_text = false;
  // Set when the process stops: durable requests in flight are then left
  // unacked, as a killed process leaves them, for another router.
  std::shared_ptr<std::atomic<bool>> stopping;
  std::shared_ptr<const router_meters> meters;  // null: not counted
  // What NATS handed it. A route request leaves it once passed to the
  // ROUTER, which bounds what it holds itself (--max-held: "overloaded").
  std::shared_ptr<mailbox_gate> gate;
  uint64_t block_mismatches = 0;
  durable_intake durable;
  uint64_t durable_retries = 0;     // requests handed back (logged)
  uint64_t claim_failures = 0;      // claims not taken or let go (logged)
  uint64_t mesh_inbox_replies = 0;  // refused for their reply (logged)
  // Durable requests being decided, in arrival order: swept
  // (progress_atom) every quarter ack_wait while any is open.
  struct open_delivery {
    steady::time_point arrived;
    steady::time_point told;     // when the server last started its ack_wait
    steady::time_point claimed;  // when its claim's lease last started
    std::shared_ptr<delivery> d;
    uint64_t id;
  };
  std::vector<open_delivery> working;
  bool sweeping = false;
  uint64_t progress_failures = 0;  // in-progress signals not sent (logged)
};

// The front's counts, when the process has a metrics endpoint: a request
// as it comes in (the time it came, for its decision's latency), then its
// decision or the class of its failure.
steady::time_point took(front_pointer self, intake i);
void decided(front_pointer self, const decision& d, steady::time_point since);
// A ROUTER's error, counted, as the decision that tells the client.
decision failed(front_pointer self, const caf::error& e, uint64_t id,
                std::string client_id);
void failed(front_pointer self, route_failure f);

// A route request whose reply subject is one of the mesh's own inboxes
// (refuse_mesh_reply): true when refused, counted.
bool refused_reply(front_pointer self, const std::string& reply,
                   const char* what);

// A route request off the wire, refused when its client hashed it with
// another block size than this mesh: no hash of it could match a cached
// block, and routing it would look like a cold cache, not an error.
expected<route_request_msg> decode_route(front_state& st, const bytes& payload);

// The front of router process `name`: route requests (Cap'n Proto, JSON
// and durable ones) passed to `router` and answered, its weights, its
// heartbeat.
caf::actor spawn_router_front(caf::actor_system& sys, nats_bus* bus,
                              mesh_options mesh, router_actor router,
                              std::string name, uint32_t block_tokens,
                              std::shared_ptr<std::atomic<bool>> stopping,
                              std::shared_ptr<const router_meters> meters,
                              durable_intake durable,
                              std::shared_ptr<mailbox_gate> gate);

}  // namespace kvmesh::detail
