// What keeps a mesh process from being ready (its /readyz): per role, what
// it needs from NATS and from its node's actors before it can do its job.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "cluster/agent_node.hpp"
#include "cluster/engine_agent.hpp"
#include "cluster/router_node.hpp"
#include "cluster/shard_node.hpp"

namespace kvmesh {

// Each unmet condition in words; empty: ready. Actors not answering by the
// deadline count as not ready.
using readiness = std::function<std::vector<std::string>(
    caf::scoped_actor&, std::chrono::steady_clock::time_point deadline)>;

// Every role: connected to NATS. An agent: each worker answers and none is
// unhealthy (for a real engine: the engine answers). A router: the ROUTER
// answers and knows a live worker to route to. An index shard: the shard
// (its RocksDB store) answers.
readiness readiness_of(const nats_bus& bus, const agent_node& node);
readiness readiness_of(const nats_bus& bus, const engine_agent& node);
readiness readiness_of(const nats_bus& bus, const router_node& node);
readiness readiness_of(const nats_bus& bus, const shard_node& node);

}  // namespace kvmesh
