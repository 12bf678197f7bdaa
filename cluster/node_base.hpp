// Inside the mesh's processes (not for callers): a node's subscriptions and
// actors, stopped together (also when its start fails half way), and the
// small helpers every role uses.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cluster/bridge.hpp"
#include "cluster/nats.hpp"
#include "cluster/subjects.hpp"
#include "core/error.hpp"

namespace kvmesh::detail {

using steady = std::chrono::steady_clock;

// The last token of `subject`: the verb of an agent's or a router's subject.
std::string verb_of(const std::string& subject);

// Refused (and counted by the bus) unless `reply` is an inbox.
void answer(nats_bus& bus, const std::string& reply, const bytes& payload);

// A gate for one actor's NATS feeds, by the [limits] in force.
std::shared_ptr<mailbox_gate> new_gate();
// A gate for heartbeats: a quarter of a round of every member the limits
// admit (workers and routers) and 1,024 more (shards, bursts), at most 384
// bytes each. Beats come spread over a heartbeat, so an honest fleet
// queues far fewer; a flood holds a few megabytes in a mailbox rather than
// max_mailbox_bytes, and beats wait a fraction of a heartbeat, not a
// second. A heartbeat refused is a beat missed, which liveness tolerates.
std::shared_ptr<mailbox_gate> new_heartbeat_gate();

// A worker is gone once its heartbeat is older than this: half a beat
// before the last of `missed_beats`, so a dead worker is out within
// missed_beats heartbeats of its death even when it died right after one.
caf::timespan stale_after(const mesh_options& m);

// How long a silent member is kept (listed as gone) before it is forgotten.
caf::timespan forget_after(const mesh_options& m);

// Route requests wait for the router's own deadlines; this only bounds a
// router that never answers (the stand-in of a remote one).
constexpr auto route_timeout = std::chrono::seconds(60);

// Subscriptions and actors of one node: unsubscribed and stopped together.
struct node_base {
  nats_bus* bus = nullptr;
  std::vector<uint64_t> subs;
  std::vector<caf::actor> actors;
  std::shared_ptr<inbox> box;

  status listen(const std::string& subject, const std::string& queue,
                caf::actor to, admission adm);
  // For subjects no one batches to (the ADMIN's verbs): a batch there is
  // dropped whole, so that a batch on an allowed subject cannot carry a
  // verb the sender's NATS permissions refuse (weights.set inside
  // admin.weights.batch).
  status listen_single(const std::string& subject, const std::string& queue,
                       caf::actor to, admission adm);
  void stop();
};

}  // namespace kvmesh::detail
