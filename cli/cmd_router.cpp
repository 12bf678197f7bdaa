// `kvmesh router`: a router's flags (pricing, auctions, the durable queue).
#include <unistd.h>

#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "cli/mesh_flags.hpp"
#include "core/pricing.hpp"

namespace kvmesh::cli {

namespace {

struct router_flags {
  bus_flags bus;
  std::string name;
  bool durable = false;
  uint32_t durable_ack_wait_ms = 5000;
  uint32_t durable_replicas = 1;
  uint32_t durable_deliveries = 10;
  metrics_flags metrics;
  uint32_t threads = 0;  // the actor system's; 0: one per core
  wire_limits limits;
  uint32_t heartbeat_ms = 1000;
  uint32_t missed_beats = 3;
  router_options router;  // pricing, fan-out, auctions, seed
};

void add_price_flags(CLI::App& cmd, price_config& p) {
  cmd.add_option("--c-host", p.c_host,
                 "credit of a block in host memory, for workers that do not "
                 "measure their own")
      ->check(credit)
      ->capture_default_str();
  cmd.add_option("--c-disk", p.c_disk,
                 "credit of a block on disk, for workers that do not measure "
                 "their own")
      ->check(credit)
      ->capture_default_str();
  cmd.add_option("--beta", p.beta, "weight of occupancy")
      ->check(non_negative)
      ->capture_default_str();
  cmd.add_option("--k", p.k, "GPU credit decay with excess queue")
      ->check(non_negative)
      ->capture_default_str();
  cmd.add_option("--overflow", p.overflow, "price per block beyond capacity")
      ->check(non_negative)
      ->capture_default_str();
  cmd.add_option("--ceiling", p.overload_ceiling,
                 "cheapest price per request block above which the fleet is "
                 "saturated and requests wait (0: never)")
      ->check(non_negative)
      ->capture_default_str();
}

int run_router(router_flags f) {
  const char* cmd = "router";
  set_wire_limits(f.limits);
  if (auto why = check_bus_flags(f.bus); !why.empty())
    return usage_error(cmd, why);
  if (auto st =
          take_name("router", f.name, "router-" + std::to_string(getpid()));
      !st)
    return usage_error(cmd, st.err().message);
  if (auto st = validate(f.router.price); !st)
    return usage_error(cmd, st.err().message);
  router_node_options rn;
  rn.mesh = make_mesh_options(f.bus.prefix, f.heartbeat_ms);
  rn.mesh.missed_beats = f.missed_beats;
  rn.name = f.name;
  rn.router = f.router;
  rn.router.name = f.name;
  rn.router.heartbeat = rn.mesh.heartbeat;
  rn.router.missed_beats = f.missed_beats;
  rn.durable = f.durable;
  rn.durable_ack_wait = std::chrono::milliseconds(f.durable_ack_wait_ms);
  rn.durable_replicas = static_cast<int>(f.durable_replicas);
  rn.durable_deliveries = f.durable_deliveries;
  auto p = start_process(f.bus, f.metrics, f.threads, f.name,
                         [&] { return process_metrics::for_router(rn); });
  if (!p) return start_error(cmd, p.err());
  auto node = router_node::start(*p->sys, *p->bus, rn);
  if (!node) return start_error(cmd, f.name, node.err());
  p->watch(**node);
  KVMESH_INFO(
      "routes on %s, prefix %s (fanout %zu, max inflight %zu, "
      "max held %zu, durable queue %s)",
      p->url.c_str(), f.bus.prefix.c_str(), f.router.fanout,
      f.router.max_inflight, f.router.max_held, f.durable ? "on" : "off");
  return p->serve(*node);
}

}  // namespace

void add_router(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<router_flags>();
  auto* cmd = app.add_subcommand(
      "router",
      "run a router: auctions route requests among the workers it hears "
      "heartbeats from, and serves `kvmesh admin`; until SIGINT/SIGTERM");
  add_bus_flags(*cmd, f->bus);
  cmd->add_option("--name", f->name,
                  "the router's name, unique in the mesh (default "
                  "router-<pid>)");
  cmd->add_flag("--durable", f->durable,
                "also take requests from the durable JetStream queue "
                "(needs nats-server -js)");
  cmd->add_option("--durable-ack-wait-ms", f->durable_ack_wait_ms,
                  "a durable request not acked within this (its router "
                  "died) is handed to another router; the last router to "
                  "start sets it for all")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--durable-deliveries", f->durable_deliveries,
                  "a durable request no worker could take (none live, "
                  "none answered, overloaded) is handed back to the queue "
                  "for a heartbeat until delivered this often, then "
                  "answered with the error")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--durable-replicas", f->durable_replicas,
                  "copies of the durable queue and its decision records in "
                  "a NATS cluster (3: survives one server of three), when "
                  "this router creates them")
      ->check(CLI::Range(1, 5))
      ->capture_default_str();
  add_metrics_flags(*cmd, f->metrics);
  add_threads_flag(*cmd, f->threads);
  add_limit_flags(*cmd, f->limits);
  cmd->add_option("--heartbeat-ms", f->heartbeat_ms,
                  "push this router's status this often; workers' beats are "
                  "expected as often")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--missed-beats", f->missed_beats,
                  "count a worker out after missing this many heartbeats")
      ->check(positive)
      ->capture_default_str();
  router_options& r = f->router;
  cmd->add_option("--fanout", r.fanout,
                  "above this many workers, bids come from the index's "
                  "holders plus the least loaded")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--max-auctions", r.max_auctions,
                  "auctions per request at most (refusals re-auction)")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--max-inflight", r.max_inflight,
                  "auctions in flight at once; later requests wait")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--max-held", r.max_held,
                  "requests waiting or held at most; beyond, 'overloaded'")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--block-tokens", r.block_tokens,
                  "tokens per block, for the output-length estimate")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--seed", r.seed, "seed of the tie-breaking")
      ->capture_default_str();
  add_price_flags(*cmd, r.price);
  cmd->callback([f, &run] { run = [f] { return run_router(*f); }; });
}

}  // namespace kvmesh::cli
