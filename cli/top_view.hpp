// One frame of `kvmesh top`: the fleet as the ADMIN sees it, as lines that
// fit a terminal of a given size.
#pragma once

#include <cstddef>
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

// The worker rows' order: by id, or the busiest first.
enum class top_sort { worker, queued, occupancy, awards_rate, last_price };
inline constexpr size_t top_sort_count = 5;
const char* to_string(top_sort s);

// How the frame is cut to the terminal.
struct top_layout {
  size_t width = 0;   // columns; 0: every column, however wide
  size_t height = 0;  // lines; 0: every worker
  top_sort sort = top_sort::worker;
  // Workers whose id, state or agent contains it ("" : all).
  std::string filter;
  size_t scroll = 0;  // the first matching worker shown
  bool keys = false;  // a last line naming the keys (interactive)
};

// A line and how a terminal may show it.
enum class top_style { plain, title, header, draining, unhealthy, gone, error };
struct top_line {
  std::string text;
  top_style style = top_style::plain;
};

struct top_frame {
  std::vector<top_line> lines;
  size_t matching = 0;  // workers that pass the filter
  size_t shown = 0;     // of them, rows in the frame
  size_t scroll = 0;    // the first shown (clamped)
};

// The frame for `now`: a title line, a summary line, a line per worker
// (state, queued work, occupancy, tier fill, awards accepted and per
// second, the price of the last one) and a line per router (decisions per
// second, auction latency, bids per round). Rates are differences of
// counters from `prev`, the snapshot before (nullptr: none yet, shown as
// "-"). Columns are dropped, least useful first, until the rows fit
// `width`; workers scroll within `height` (the routers, few, are all
// shown). The ADMIN knows the fleet from heartbeats, so figures are as of
// each process's last beat.
top_frame render_top(const std::string& title, const fleet_snapshot& now,
                     const fleet_snapshot* prev, const top_layout& layout);

// The frame as text, a line each (--once, and frames into a pipe).
std::string frame_text(const top_frame& f);

}  // namespace kvmesh::cli
