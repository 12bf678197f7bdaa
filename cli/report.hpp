// Reports shared by the commands that replay traces (sim, up, bench).
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "core/sim.hpp"

namespace kvmesh::cli {

using json = nlohmann::ordered_json;

json to_json(const summary& s);
json result_json(const sim_result& r);
// One row per result, then the oracle's bound.
void print_table(const oracle_result& oracle,
                 const std::vector<sim_result>& results);

}  // namespace kvmesh::cli
