// A node agent beside a real engine (vLLM or SGLang): one WORKER per
// data-parallel rank served on NATS like simulated ones, fed by the
// engine's KV events (ZMQ), its OpenAI front per rank (HTTP) and its
// health and metrics (HTTP), all started and stopped together.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "actors/engine_worker.hpp"
#include "cluster/agent_node.hpp"
#include "cluster/kv_subscriber.hpp"
#include "engines/engine_state.hpp"

namespace kvmesh {

struct engine_agent_options {
  mesh_options mesh;
  std::string name;             // the agent's name in its subjects
  std::string engine = "vllm";  // vllm or sglang (the same protocols)
  // The engine's KV event publisher of rank 0, tcp://HOST:PORT; rank r is
  // at PORT + r, as the engines bind them.
  std::string kv_events;
  std::string kv_replay;  // its replay endpoint of rank 0, "" for none
  std::string kv_topic;
  // The engine's OpenAI API, http://HOST:PORT; "" for none (then no front,
  // no health and no metrics: the worker only mirrors the cache).
  std::string engine_url;
  uint32_t dp_size = 1;   // data-parallel ranks: one worker each
  uint32_t first_id = 0;  // worker of rank r has id first_id + r
  // Ledger (speed, credits), block size and GPU blocks of each worker; the
  // endpoint is set per rank.
  engine_state_config state;
  // The fronts listen on front_host:front_port + r; front_port 0 picks
  // free ports. Decisions name http://advertise_host:port.
  std::string front_host = "0.0.0.0";
  std::string advertise_host;  // "" : front_host, or this host's name
  int front_port = 0;
  // The engine's URL as gateways reach it, for them to call the engine
  // themselves (advertised_engine_url): "" for the rule, "off" for none.
  std::string engine_advertise;
  // Each front's I/O threads (any number of requests and streams).
  size_t front_threads = 2;
  // /health and /metrics are read this often; after unhealthy_after
  // failures in a row the workers refuse awards until one succeeds.
  std::chrono::milliseconds poll{1000};
  uint32_t unhealthy_after = 3;
  std::chrono::milliseconds replay_timeout{2000};
  // Each rank's worker's meters (cluster/mesh_metrics.hpp makes them);
  // missing: not counted.
  std::vector<std::shared_ptr<const worker_meters>> meters;
};

// The engine URL a worker advertises to gateways (worker_status::engine):
// `flag` when it is a URL; none for "off" or no engine; else the engine's
// own URL, unless its host is this host's loopback while the fronts are
// named by another host (`front_host`): a gateway elsewhere could not reach
// it, and goes through the front. Errors: `flag` is not http://HOST[:PORT].
expected<std::string> advertised_engine_url(const std::string& engine_url,
                                            const std::string& flag,
                                            const std::string& front_host);

class engine_agent {
 public:
  static expected<std::unique_ptr<engine_agent>> start(
      caf::actor_system& sys, nats_bus& bus, const engine_agent_options& opt);
  // Stops the subscriber, the fronts and the poller, then the workers.
  ~engine_agent();
  // The front of rank r ("" without an engine URL).
  std::string endpoint(uint32_t rank) const;
  const std::vector<engine_worker_actor>& workers() const;
  // The KV event subscriber's counters (all zero without --kv-events).
  kv_subscriber_counters kv_counters() const;

  struct impl;

 private:
  explicit engine_agent(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvmesh
