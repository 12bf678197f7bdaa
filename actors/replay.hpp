// The replay client: sends a trace's requests to routers at their arrival
// times on the actor clock and measures what a client would see.
#pragma once

#include <future>
#include <memory>
#include <vector>

#include "actors/actors.hpp"
#include "core/sim.hpp"
#include "core/trace.hpp"

namespace kvmesh {

// The replay client: a LISTENER that also drives arrivals.
using replay_actor = listener_actor::extend<
    // Starts the replay: request i goes to routers[i % R].
    caf::reacts_to<start_atom, std::vector<router_actor>>,
    // Request i arrives (sent to itself on the actor clock).
    caf::reacts_to<arrive_atom, size_t>>;

struct replay_options {
  std::shared_ptr<const std::vector<trace_request>> trace;
  size_t workers = 0;
  double speedup = 1;     // arrival times are divided by this
  double time_scale = 1;  // engine ms per wall ms, as the workers run
  // Set once every request has ended or failed.
  std::shared_ptr<std::promise<sim_result>> done;
};

struct replay_state {
  static inline const char* name = "replay";
  struct record {
    caf::actor_clock::time_point sent;
    double ttft_ms = -1;
    double e2e_ms = -1;
    uint32_t worker = 0;
    uint32_t hits[3] = {0, 0, 0};
    bool failed = false;
  };
  replay_options opt;
  std::vector<router_actor> routers;
  std::vector<record> records;
  size_t ended = 0;
  size_t failed = 0;
  std::vector<uint64_t> assigned;
};

replay_actor::behavior_type replay(
    replay_actor::stateful_pointer<replay_state> self, replay_options opt);

}  // namespace kvmesh
