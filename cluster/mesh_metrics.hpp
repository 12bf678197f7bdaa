// The Prometheus series of a mesh process (docs/metrics.md): what each role
// registers, the meters its actors count with, and what a scrape asks them;
// with its probes, what the process's HTTP endpoint serves.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "cluster/engine_agent.hpp"
#include "cluster/probes.hpp"
#include "cluster/router_node.hpp"
#include "cluster/shard_node.hpp"
#include "core/error.hpp"
#include "metrics/endpoint.hpp"
#include "metrics/registry.hpp"

namespace kvmesh {

// The version kvmesh_build_info reports: the project's (CMakeLists.txt).
inline constexpr const char* kvmesh_version = KVMESH_VERSION;

// One process's metrics. Made before its node starts (the node's options
// get the meters its actors count with), watching the node once it runs:
// each scrape then asks the node's actors for their status (all of them
// within `collect_timeout`), reads the NATS connection's and the codecs'
// counters, and renders. What an actor did not answer in time keeps its
// last value, and the scrape says so on stderr.
class process_metrics {
 public:
  // Registers the series of every process and of the role; gives each of
  // opt's workers (opt's front) its meters.
  static expected<std::unique_ptr<process_metrics>> for_agent(
      agent_options& opt);
  // An agent beside a real engine: a worker per rank.
  static expected<std::unique_ptr<process_metrics>> for_agent(
      engine_agent_options& opt);
  static expected<std::unique_ptr<process_metrics>> for_router(
      router_node_options& opt);
  static expected<std::unique_ptr<process_metrics>> for_shard(
      shard_node_options& opt);
  // A role whose series its node registers itself (registry()): only those
  // of every process here.
  static expected<std::unique_ptr<process_metrics>> for_role(
      const std::string& role);
  ~process_metrics();

  // From now on a scrape asks the node's actors and reads `bus`. Both must
  // outlive the scrapes: stop the server first.
  void watch(caf::actor_system& sys, nats_bus& bus, const agent_node& node);
  void watch(caf::actor_system& sys, nats_bus& bus, const engine_agent& node);
  void watch(caf::actor_system& sys, nats_bus& bus, const router_node& node);
  void watch(caf::actor_system& sys, nats_bus& bus, const shard_node& node);
  // A for_role process: its readiness is `ready`'s.
  void watch(caf::actor_system& sys, nats_bus& bus, readiness ready);

  // Asks the node's actors and reads the bus: the series' values now.
  void collect();
  // Collects, then renders every series (text format 0.0.4).
  std::string scrape();
  // What a scrape of the endpoint collects (the series, collected first).
  std::shared_ptr<prometheus::Collectable> collectable();
  // What keeps the process from being ready (probes.hpp): "starting"
  // until watch(). Called on the endpoint's threads.
  std::vector<std::string> not_ready();
  // Counts an answer of the endpoint (kvmesh_metrics_requests_total).
  void answered(int status);

  metrics::registry& registry();

  std::chrono::milliseconds collect_timeout{1000};

  struct impl;

 private:
  explicit process_metrics(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

// Serves `pm` on opt.address:opt.port (/metrics, /healthz, /readyz) until
// destroyed.
expected<std::unique_ptr<metrics::endpoint>> serve_metrics(
    process_metrics& pm, const metrics::endpoint_options& opt);

}  // namespace kvmesh
