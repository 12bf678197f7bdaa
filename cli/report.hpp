// Reports shared by the commands: of trace replays (sim, up, bench), and
// the fleet as admin and top print it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/sim.hpp"
#include "messages/json.hpp"
#include "messages/types.hpp"

namespace kvmesh::cli {

using json = nlohmann::ordered_json;

json to_json(const summary& s);
json result_json(const sim_result& r);
// The fleet as `kvmesh admin workers|routers --json` and `kvmesh top
// --json` print it: one object per worker, per router.
json workers_json(const std::vector<worker_status>& ws);
json routers_json(const std::vector<router_status>& rs);
// A router's re-auctions by cause ({"refused": .., "unanswered": .., ...}),
// as `kvmesh admin routers --json` and `kvmesh bench --json` give them.
json reauctions_by_cause(const router_status& s);
// The comparison table's cells as print_table prints them (and the HTML
// report shows them): a header, one row per result, then the oracle's
// bound, which stops after the hit ratio.
std::vector<std::vector<std::string>> table_cells(
    const oracle_result& oracle, const std::vector<sim_result>& results);
// One row per result, then the oracle's bound.
void print_table(const oracle_result& oracle,
                 const std::vector<sim_result>& results);

}  // namespace kvmesh::cli
