// The NATS mesh: the processes' roles (node agent, router, index shard) and
// the clients (route, admin, remote router) over Cap'n Proto on NATS.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/actors.hpp"
#include "actors/index_shard.hpp"
#include "actors/router.hpp"
#include "actors/worker.hpp"
#include "cluster/jetstream.hpp"
#include "cluster/meters.hpp"
#include "cluster/nats.hpp"
#include "core/error.hpp"
#include "messages/types.hpp"

namespace kvmesh {

// Every subject kvmesh uses, under one prefix (docs/wire.md lists them).
struct subjects {
  std::string prefix = "kvmesh";

  std::string route() const { return prefix + ".route"; }
  std::string route_json() const { return prefix + ".route.json"; }
  // Durable intake: a route request published on route_durable() + "." +
  // the client's reply subject, stored in a JetStream work queue.
  std::string route_durable() const { return prefix + ".route.durable"; }
  // Pushed heartbeats: WorkerStatus, RouterStatus, ShardStatus.
  std::string worker_beat() const { return prefix + ".heartbeat.worker"; }
  std::string router_beat() const { return prefix + ".heartbeat.router"; }
  std::string shard_beat() const { return prefix + ".heartbeat.shard"; }
  // A node agent's verbs: bid, award, release, withdraw, drain.
  std::string agent(const std::string& name, const char* verb) const {
    return prefix + ".agent." + name + "." + verb;
  }
  // A router's verbs: weights.get, weights.set.
  std::string router(const std::string& name, const char* verb) const {
    return prefix + ".router." + name + "." + verb;
  }
  std::string kv(uint32_t shard) const {
    return prefix + ".kv." + std::to_string(shard);
  }
  // An agent's KV events of several workers in one Batch (its items on
  // kv(shard)): the shard's own, as kv(shard)'s parent is every shard's.
  std::string kv_batch(uint32_t shard) const {
    return kv(shard) + ".batch";
  }
  std::string index_query(uint32_t shard) const {
    return prefix + ".index." + std::to_string(shard) + ".query";
  }
  // Several queries in one Batch (cluster/bridge.hpp's batcher); agents'
  // batches come on agent(name, "batch").
  std::string index_batch(uint32_t shard) const {
    return prefix + ".index." + std::to_string(shard) + ".batch";
  }
  // First tokens and ends of requests (RequestEvents).
  std::string events() const { return prefix + ".events"; }
  // workers, routers, shards, prefix, weights.get, weights.set, drain,
  // undrain; served by any router process (queue group "admin").
  std::string admin(const std::string& verb) const {
    return prefix + ".admin." + verb;
  }
};

// A name fit for one subject token: letters, digits, '-' and '_'.
status check_name(const std::string& what, const std::string& name);

struct mesh_options {
  subjects subj;
  // Agents push heartbeats this often; routers count a worker out after
  // missing `missed_beats` of them (or at once when an award goes
  // unanswered).
  caf::timespan heartbeat = std::chrono::seconds(1);
  uint32_t missed_beats = 3;
  // How long a process waits for a reply on the wire before giving up.
  caf::timespan call_timeout = std::chrono::seconds(2);
};

// -- node agent ---------------------------------------------------------------

struct agent_options {
  mesh_options mesh;
  std::string name;  // unique per agent: its subjects carry it
  // One WORKER per entry; each one's ledger.id is its worker id.
  std::vector<worker_options> workers;
  // Workers of real engines, which the caller makes: spawn_external(id,
  // events) for each id, `events` being the agent's publisher of request
  // events (the workers' listener).
  std::vector<uint32_t> external;
  std::function<expected<worker_actor>(uint32_t id, listener_actor events)>
      spawn_external;
};

// A running node agent: its WORKERs, served on NATS. Destroying it stops
// them and unsubscribes.
class agent_node {
 public:
  static expected<std::unique_ptr<agent_node>> start(caf::actor_system& sys,
                                                     nats_bus& bus,
                                                     const agent_options& opt);
  ~agent_node();
  const std::vector<worker_actor>& workers() const;

  struct impl;

 private:
  explicit agent_node(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

// -- router -------------------------------------------------------------------

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

// -- index shard --------------------------------------------------------------

struct shard_node_options {
  mesh_options mesh;
  index_shard_options shard;  // shard index, RocksDB directory
  uint32_t shards = 1;        // how many shards the index has
  // Where the front counts the queries it answers; null: not counted.
  std::shared_ptr<const shard_meters> meters;
};

class shard_node {
 public:
  static expected<std::unique_ptr<shard_node>> start(
      caf::actor_system& sys, nats_bus& bus, const shard_node_options& opt);
  ~shard_node();
  index_shard_actor shard() const;

  struct impl;

 private:
  explicit shard_node(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

// -- clients (blocking: for command-line tools, not inside actors)
// -------------

// Routes one request and waits for the decision (an error names why there
// is none: no reply in time, or the router's reason).
expected<decision> route_once(nats_bus& bus, const subjects& subj,
                              const route_request_msg& r,
                              std::chrono::milliseconds timeout);

// Like route_once, through the JetStream work queue: stored before any
// router sees it, so a router that dies mid-auction loses nothing (another
// one gets it after the ack wait). The stream is created when missing. The
// answer travels on core NATS, lost if it comes while this client is
// reconnecting: after a reconnect, and at the timeout, the answer is read
// from the request's decision record instead.
expected<decision> route_durable_once(nats_bus& bus, const subjects& subj,
                                      const route_request_msg& r,
                                      std::chrono::milliseconds timeout);

// The JetStream work queue of durable route requests under `subj`.
work_queue_options durable_queue(const subjects& subj);

// The bucket where routers keep each durable request's answer before
// sending it (`<stream>_DECISIONS`); `create` false for clients.
record_options durable_records(const subjects& subj);

// The bucket where a router claims a durable request before auctioning
// it (`<stream>_CLAIMS`), each claim lasting `lease` unless renewed.
record_options durable_claims(const subjects& subj,
                              std::chrono::milliseconds lease);

// The key of the answer kept for request `request`, stored in the durable
// queue at `sequence` (the publish's value).
std::string record_key(uint64_t sequence, uint64_t request);

// Sends `verb` (see subjects::admin) to the mesh's ADMIN and waits. The
// workers listing comes in pages (AdminReply.more); this asks for each in
// turn and returns them as one, `timeout` per page.
expected<admin_reply> admin_request_call(nats_bus& bus, const subjects& subj,
                                         const std::string& verb,
                                         const admin_request& req,
                                         std::chrono::milliseconds timeout);

// A ROUTER in another process as an actor of this one: route requests go
// over NATS (queue group "routers"), so a replay client can drive the mesh.
// Request events (first tokens, ends) published by agents go to
// `listener` when set.
expected<router_actor> spawn_remote_router(caf::actor_system& sys,
                                           nats_bus& bus,
                                           const mesh_options& opt,
                                           listener_actor listener);

}  // namespace kvmesh
