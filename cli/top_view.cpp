// Renders a frame of `kvmesh top` from two snapshots of the fleet.
#include "cli/top_view.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace kvmesh::cli {

namespace {

using row = std::vector<std::string>;

std::string num(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string percent(uint64_t part, uint64_t whole) {
  return whole ? num("%.0f%%", 100.0 * part / whole) : "-";
}

bool numeric(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789.-/%") == s.npos;
}

// Columns two spaces apart: the first (the name) and words left-aligned,
// numbers right-aligned.
std::string columns(const std::vector<row>& rows) {
  std::vector<size_t> width;
  std::vector<bool> right;
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t c = 0; c < rows[r].size(); ++c) {
      if (width.size() <= c) {
        width.push_back(0);
        right.push_back(c > 0);
      }
      width[c] = std::max(width[c], rows[r][c].size());
      if (r > 0 && !numeric(rows[r][c])) right[c] = false;
    }
  std::string out;
  for (const row& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      const std::string pad(width[c] - r[c].size(), ' ');
      line += (c == 0 ? "" : "  ") + (right[c] ? pad + r[c] : r[c] + pad);
    }
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    out += line + "\n";
  }
  return out;
}

const char* state_of(const worker_status& w) {
  return w.gone        ? "gone"
         : w.draining  ? "draining"
         : w.unhealthy ? "unhealthy"
                       : "live";
}

// Per second from two counter readings; "-" without a previous reading or
// when the counter went back (its process restarted).
std::string rate(uint64_t now, const uint64_t* before, double dt) {
  if (!before || !(dt > 0) || now < *before) return "-";
  return num("%.1f", static_cast<double>(now - *before) / dt);
}

}  // namespace

std::string render_top(const std::string& title, const fleet_snapshot& now,
                       const fleet_snapshot* prev) {
  const double dt = prev ? now.time_s - prev->time_s : 0;
  std::map<uint32_t, uint64_t> awards_before;
  std::map<std::string, uint64_t> decisions_before;
  if (prev) {
    for (const worker_status& w : prev->workers)
      awards_before[w.worker] = w.awards;
    for (const router_status& r : prev->routers)
      decisions_before[r.name] = r.decisions;
  }

  size_t live = 0, draining = 0, gone = 0, unhealthy = 0;
  double queued = 0;
  for (const worker_status& w : now.workers) {
    live += !w.gone && !w.draining && !w.unhealthy;
    draining += !w.gone && w.draining;
    unhealthy += !w.gone && !w.draining && w.unhealthy;
    gone += w.gone;
    queued += w.queued;
  }
  std::string out = title + "\n";
  // Only real engines' workers can be unhealthy: named when there are any.
  out += std::to_string(now.workers.size()) + " workers (" +
         std::to_string(live) + " live, " + std::to_string(draining) +
         " draining, " +
         (unhealthy ? std::to_string(unhealthy) + " unhealthy, " : "") +
         std::to_string(gone) + " gone), queued " + num("%.1f", queued) +
         " blocks; " + std::to_string(now.routers.size()) + " routers" +
         (prev ? num("; rates over %.1f s", dt) : "; rates: next frame") + "\n";
  if (!now.error.empty()) out += "error: " + now.error + "\n";

  out += "\n";
  if (now.workers.empty()) {
    out += "no workers\n";
  } else {
    // occupancy: blocks of running requests in GPU memory, of its
    // capacity; gpu, host, disk: blocks cached in each tier and the tier's
    // fill ("-" for a tier of unknown size: a real engine's offloading).
    // awards/s: accepted awards between the two snapshots; last_price: the
    // router's price of the last one, in blocks.
    std::vector<row> rows{{"worker", "state", "agent", "queued", "reserved",
                           "active", "occupancy", "gpu", "gpu_fill", "host",
                           "host_fill", "disk", "disk_fill", "waiting",
                           "running", "awards", "awards/s", "last_price"}};
    std::vector<worker_status> ws = now.workers;
    std::sort(ws.begin(), ws.end(),
              [](const worker_status& a, const worker_status& b) {
                return a.worker < b.worker;
              });
    for (const worker_status& w : ws) {
      const auto before = awards_before.find(w.worker);
      rows.push_back(
          {std::to_string(w.worker), state_of(w), w.agent,
           num("%.1f", w.queued), num("%.1f", w.reserved),
           std::to_string(w.active), percent(w.active, w.capacity),
           std::to_string(w.gpu_blocks) + "/" + std::to_string(w.capacity),
           percent(w.gpu_blocks, w.capacity), std::to_string(w.host_blocks),
           percent(w.host_blocks, w.host_capacity),
           std::to_string(w.disk_blocks),
           percent(w.disk_blocks, w.disk_capacity), std::to_string(w.waiting),
           std::to_string(w.running), std::to_string(w.awards),
           rate(w.awards,
                before == awards_before.end() ? nullptr : &before->second, dt),
           std::isnan(w.last_price) ? "-" : num("%.1f", w.last_price)});
    }
    out += columns(rows);
  }

  out += "\n";
  if (now.routers.empty()) {
    out += "no routers\n";
  } else {
    // bids/round: bids received per call for bids, since the router
    // started; reauctions: all causes (`kvmesh admin routers` splits them).
    std::vector<row> rows{{"router", "decisions", "decisions/s",
                           "auction_p50_us", "auction_p99_us", "bids/round",
                           "reauctions", "held", "overloaded", "live_workers"}};
    std::vector<router_status> rs = now.routers;
    std::sort(rs.begin(), rs.end(),
              [](const router_status& a, const router_status& b) {
                return a.name < b.name;
              });
    for (const router_status& r : rs) {
      const auto before = decisions_before.find(r.name);
      rows.push_back(
          {r.name, std::to_string(r.decisions),
           rate(r.decisions,
                before == decisions_before.end() ? nullptr : &before->second,
                dt),
           num("%.0f", r.auction_p50_us), num("%.0f", r.auction_p99_us),
           r.rounds ? num("%.1f", static_cast<double>(r.bids) / r.rounds) : "-",
           std::to_string(r.reauctions), std::to_string(r.held),
           std::to_string(r.overloaded),
           std::to_string(r.live_workers) + "/" + std::to_string(r.workers)});
    }
    out += columns(rows);
  }
  return out;
}

}  // namespace kvmesh::cli
