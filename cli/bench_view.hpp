// What `kvmesh bench` prints and writes of a run.
// The overhead, CPU and baseline tables, and their JSON and report lines.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cli/report.hpp"
#include "harness/accounting.hpp"
#include "harness/baselines.hpp"
#include "harness/launcher.hpp"

namespace kvmesh::cli::bench_view {

// `v` through printf format `f` ("%.2f").
std::string fmt(const char* f, double v);

// Prints rows (the first the header) as columns, the first left-aligned,
// the others right-aligned.
void print_rows(const std::vector<std::vector<std::string>>& rows);

// The routing overhead: a row per router and the total, the re-auctions
// by cause, what the columns count, and the accounting's warning.
void print_overhead(const harness::overhead_result& h);

// Where the run's CPU went, as a table; the same as JSON.
json print_cpu(const harness::child_mesh& m, const harness::cpu_use& before,
               const harness::cpu_use& after, uint64_t decisions);

// The raw NATS rounds on `url`, and the auction's p99 over theirs.
void print_baseline(const harness::baseline_report& b,
                    const harness::overhead_result& h, const std::string& url);

// A warning per kind of error, with its count.
void print_errors(const harness::error_counts& errors);

json errors_json(const harness::error_counts& errors);
json overhead_json(const harness::overhead_result& h);
json baseline_json(const harness::baseline_report& b);

// The report's figures beyond the simulator's table: routing overhead,
// raw NATS latency and why requests failed.
std::vector<std::pair<std::string, std::string>> report_extra(
    const harness::overhead_result& h, const harness::baseline_report& b,
    const harness::error_counts& errors);

}  // namespace kvmesh::cli::bench_view
