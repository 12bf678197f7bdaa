// The HTML report of a trace replay (`kvmesh sim --report`, `kvmesh bench
// --report`): one self-contained page of SVG charts and the result table.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cli/report.hpp"
#include "core/error.hpp"
#include "core/sim.hpp"

namespace kvmesh::cli {

struct report_page {
  std::string title;  // e.g. "kvmesh sim"
  json scenario;      // the run's settings, shown as key = value
  oracle_result oracle;
  std::vector<sim_result> results;
  // What the queued-work chart shows and how it was measured.
  std::string queued_note;
  // Further figures of the run (bench: routing overhead), shown as a table.
  std::vector<std::pair<std::string, std::string>> extra;
};

// The page's HTML. Chart ids (the tests look for them): ttft-cdf,
// queued-<policy> (one small chart per policy), hit-ratio, requests.
std::string html_report(const report_page& page);

// Writes html_report(page) to `path`; an error names the path.
status write_report(const std::string& path, const report_page& page);

}  // namespace kvmesh::cli
