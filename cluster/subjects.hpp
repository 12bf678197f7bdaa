// The mesh's names: every subject kvmesh uses, the check of a name fit for
// one subject token, and the options every role shares.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace kvmesh {

// Every subject kvmesh uses, under one prefix (docs/wire.md lists them).
struct subjects {
  std::string prefix = "kvmesh";

  std::string route() const { return prefix + ".route"; }
  std::string route_json() const { return prefix + ".route.json"; }
  // Durable intake: a route request published on route_durable() + "." +
  // the client's reply subject, stored in a JetStream work queue.
  std::string route_durable() const { return prefix + ".route.durable"; }
  // Pushed heartbeats: WorkerStatus, RouterStatus, ShardStatus. An agent
  // beats for its workers on a subject of its own (worker_beat(agent)), so
  // that NATS permissions can bind an agent's name to its credential; the
  // receivers hear every agent's (worker_beats()) and hold each message to
  // the name its subject carries (agent_of).
  std::string worker_beat_root() const { return prefix + ".heartbeat.worker"; }
  std::string worker_beat(const std::string& agent) const {
    return worker_beat_root() + "." + agent;
  }
  std::string worker_beats() const { return worker_beat_root() + ".*"; }
  std::string router_beat() const { return prefix + ".heartbeat.router"; }
  std::string shard_beat() const { return prefix + ".heartbeat.shard"; }
  // A node agent's verbs: bid, award, release, withdraw, drain.
  std::string agent(const std::string& name, const char* verb) const {
    std::string out;
    agent_into(out, name, verb);
    return out;
  }
  // The same into `out`, whose buffer is reused: a router's agent links
  // build one per call.
  void agent_into(std::string& out, const std::string& name,
                  const char* verb) const {
    out.assign(prefix).append(".agent.").append(name).append(".").append(verb);
  }
  // A router's verbs: weights.get, weights.set.
  std::string router(const std::string& name, const char* verb) const {
    return prefix + ".router." + name + "." + verb;
  }
  // KV events of `agent`'s workers for index shard `shard`: the agent's
  // name in the subject, as for its heartbeats.
  std::string kv_root(uint32_t shard) const {
    return prefix + ".kv." + std::to_string(shard);
  }
  std::string kv(uint32_t shard, const std::string& agent) const {
    return kv_root(shard) + "." + agent;
  }
  // An agent's KV events of several workers in one Batch (its items on
  // kv(shard, agent)): the agent's own.
  std::string kv_batch(uint32_t shard, const std::string& agent) const {
    return kv(shard, agent) + ".batch";
  }
  // What a shard hears: every agent's KV events, alone and batched.
  std::string kv_all(uint32_t shard) const { return kv_root(shard) + ".*"; }
  std::string kv_batches(uint32_t shard) const {
    return kv_all(shard) + ".batch";
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
// An agent's name: a subject token, and not "batch" (its subjects would
// read as a batch of another's).
status check_agent_name(const std::string& name);

// `name` as an upper-case token ('_' for anything not a letter or digit):
// JetStream's stream names and environment variables derived from names.
std::string upper_token(const std::string& name);

// The agent a message came from: the token after `root` + "." in
// `subject` (worker_beat_root's, kv_root's); empty when `subject` is not
// below `root`.
std::string agent_of(const std::string& subject, const std::string& root);

struct mesh_options {
  subjects subj;
  // Agents push heartbeats this often; routers count a worker out after
  // missing `missed_beats` of them (or at once when an award goes
  // unanswered).
  caf::timespan heartbeat = std::chrono::seconds(1);
  uint32_t missed_beats = 3;
  // Members silent for this many heartbeats are forgotten (their state
  // freed); heard again, they join anew.
  uint32_t forget_beats = 30;
  // A node agent announces its workers' caches again (a shard is new, came
  // back or refused events) at most once per this many heartbeats, whatever
  // shards' heartbeats say: one due sooner waits for the next turn.
  uint32_t announce_beats = 10;
  // How long a process waits for a reply on the wire before giving up.
  caf::timespan call_timeout = std::chrono::seconds(2);
};

}  // namespace kvmesh
