// A trace replayed through the mesh on NATS (`kvmesh bench --mode trace`).
// The replay client in this process, its route requests over NATS to the
// routers' queue group, with why requests failed counted by kind.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cluster/mesh.hpp"
#include "cluster/nats_baseline.hpp"
#include "core/sim.hpp"
#include "core/trace.hpp"
#include "harness/accounting.hpp"
#include "harness/launcher.hpp"

namespace kvmesh::harness {

struct replay_run_options {
  std::string prefix;  // the mesh's subjects
  uint32_t workers = 0;
  double speedup = 1;     // arrivals divided by this
  double time_scale = 1;  // the replay's clock this many times the wall's
  uint32_t heartbeat_ms = 1000;
  double timeout_s = 0;  // the run fails past this
};

struct trace_run {
  sim_result result;
  error_counts errors;  // why requests failed to route
  steady::time_point start, end;
};

// Replays `trace` through a remote router, its first tokens and ends coming
// from the agents' events, until every request ended, the mesh failed
// (watch) or the timeout passed. With a `sampler`, the workers' queues are
// polled through the ADMIN while the replay runs. With `rounds`, a raw
// scatter-gather round starts at each arrival instant of the trace beside
// the replay's route request.
expected<trace_run> replay_trace(
    nats_bus& bus, const replay_run_options& o,
    std::shared_ptr<const std::vector<trace_request>> trace, child_mesh& m,
    queued_sampler* sampler, scatter_gather_rounds* rounds);

}  // namespace kvmesh::harness
