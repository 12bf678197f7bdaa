// The router process: a ROUTER serving route requests, the mesh's
// membership from heartbeats and an ADMIN serving operators.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "actors/actors.hpp"
#include "actors/router.hpp"
#include "cluster/meters.hpp"
#include "cluster/nats.hpp"
#include "cluster/subjects.hpp"
#include "core/error.hpp"

namespace kvmesh {

struct router_node_options {
  mesh_options mesh;
  std::string name;  // unique per router process
  // Pricing, deadlines, fan-out; workers and shards come from heartbeats.
  router_options router;
  // Pull route requests from the JetStream work queue too (acked once the
  // decision is sent).
  bool durable = false;
  // A durable request not acked within this (its router died) goes to
  // another router.
  std::chrono::milliseconds durable_ack_wait{5000};
  // Copies of the durable stream and of its decision records in a NATS
  // cluster, when this router creates them.
  int durable_replicas = 1;
  // A durable request this router could not decide for want of workers
  // (none live, none answered, all past the price ceiling) goes back to
  // the queue for a heartbeat and is tried again, until it has been handed
  // out this many times; then its answer is the error. Such failures are
  // mostly passing (a NATS outage takes every heartbeat with it), and a
  // durable request is one the client wants decided.
  uint32_t durable_deliveries = 10;
  // Where the front counts requests, decisions and failures
  // (cluster/mesh_metrics.hpp makes it); null: not counted.
  std::shared_ptr<const router_meters> meters;
  // The bytes of workers in one page of the ADMIN's listing; 0: half the
  // server's max payload. Set, it bounds an unpaged listing too (tests).
  size_t admin_page_bytes = 0;
};

// A running router process: a ROUTER serving route requests (Cap'n Proto
// and JSON, queue group "routers"), the mesh's membership from heartbeats,
// and an ADMIN serving operators' requests (queue group "admin").
class router_node {
 public:
  static expected<std::unique_ptr<router_node>> start(
      caf::actor_system& sys, nats_bus& bus, const router_node_options& opt);
  ~router_node();
  router_actor router() const;
  admin_actor admin() const;

  struct impl;

 private:
  explicit router_node(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvmesh
