// One frame of `kvmesh top`: the fleet as the ADMIN sees it, as text.
#pragma once

#include <string>
#include <vector>

#include "messages/types.hpp"

namespace kvmesh::cli {

// What the ADMIN answered at one time.
struct fleet_snapshot {
  double time_s = 0;  // on a monotonic clock: rates divide by differences
  std::vector<worker_status> workers;
  std::vector<router_status> routers;
  std::string error;  // why workers or routers are missing, "" if none
};

// The frame for `now`: a title line, a summary line, a line per worker
// (state, queued work, occupancy, tier fill, awards accepted and per
// second, the price of the last one) and a line per router (decisions per
// second, auction latency, bids per round). Rates are differences of
// counters from `prev`, the snapshot before (nullptr: none yet, shown as
// "-").
// Plain text: the caller clears the screen. The ADMIN knows the fleet from
// heartbeats, so figures are as of each process's last beat and rates over
// an interval shorter than the heartbeat jump between beats.
std::string render_top(const std::string& title, const fleet_snapshot& now,
                       const fleet_snapshot* prev);

}  // namespace kvmesh::cli
