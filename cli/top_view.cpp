// Renders a frame of `kvmesh top` from two snapshots of the fleet.
#include "cli/top_view.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>

#include "cli/report.hpp"

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

// A table's columns, each with a rank: the lower, the longer it stays
// when the terminal is narrow.
struct table {
  std::vector<std::string> names;
  std::vector<int> rank;
  std::vector<row> rows;  // cells in the order of names
};

// The columns kept for `width` (0: all), in their order.
std::vector<size_t> fitting(const table& t, size_t width) {
  std::vector<size_t> w(t.names.size());
  for (size_t c = 0; c < w.size(); ++c) {
    w[c] = t.names[c].size();
    for (const row& r : t.rows)
      w[c] = std::max(w[c], r[c].size());
  }
  std::vector<size_t> by_rank(w.size());
  std::iota(by_rank.begin(), by_rank.end(), 0);
  std::stable_sort(by_rank.begin(), by_rank.end(),
                   [&](size_t a, size_t b) { return t.rank[a] < t.rank[b]; });
  std::vector<size_t> keep;
  size_t used = 0;
  for (size_t c : by_rank) {
    const size_t need = w[c] + (keep.empty() ? 0 : 2);
    if (width > 0 && used + need > width) continue;
    keep.push_back(c);
    used += need;
  }
  std::sort(keep.begin(), keep.end());
  return keep;
}

// The header and `rows` of t's `cols`, two spaces apart: the first (the
// name) and words left-aligned, numbers right-aligned.
std::vector<std::string> columns(const table& t,
                                 const std::vector<size_t>& cols,
                                 const std::vector<size_t>& rows) {
  std::vector<size_t> width;
  std::vector<bool> right;
  for (size_t c : cols) {
    size_t w = t.names[c].size();
    bool r = c > 0;
    for (size_t i : rows) {
      w = std::max(w, t.rows[i][c].size());
      if (!numeric(t.rows[i][c])) r = false;
    }
    width.push_back(w);
    right.push_back(r);
  }
  auto line = [&](const std::function<const std::string&(size_t)>& cell) {
    std::string out;
    for (size_t k = 0; k < cols.size(); ++k) {
      const std::string& v = cell(cols[k]);
      const std::string pad(width[k] - v.size(), ' ');
      out += (k == 0 ? "" : "  ") + (right[k] ? pad + v : v + pad);
    }
    while (!out.empty() && out.back() == ' ')
      out.pop_back();
    return out;
  };
  std::vector<std::string> out{
      line([&](size_t c) -> const std::string& { return t.names[c]; })};
  for (size_t i : rows)
    out.push_back(
        line([&](size_t c) -> const std::string& { return t.rows[i][c]; }));
  return out;
}

top_style style_of(const worker_status& w) {
  return w.gone        ? top_style::gone
         : w.draining  ? top_style::draining
         : w.unhealthy ? top_style::unhealthy
                       : top_style::plain;
}

// Per second from two counter readings; NaN without a previous reading or
// when the counter went back (its process restarted).
double rate(uint64_t now, const uint64_t* before, double dt) {
  if (!before || !(dt > 0) || now < *before) return std::nan("");
  return static_cast<double>(now - *before) / dt;
}

std::string shown(double v, const char* format) {
  return std::isnan(v) ? "-" : num(format, v);
}

double occupancy(const worker_status& w) {
  return w.capacity ? static_cast<double>(w.active) / w.capacity : 0;
}

}  // namespace

const char* to_string(top_sort s) {
  switch (s) {
    case top_sort::worker:
      return "worker";
    case top_sort::queued:
      return "queued";
    case top_sort::occupancy:
      return "occupancy";
    case top_sort::awards_rate:
      return "awards/s";
    case top_sort::last_price:
      return "last_price";
  }
  return "worker";
}

top_frame render_top(const std::string& title, const fleet_snapshot& now,
                     const fleet_snapshot* prev, const top_layout& layout) {
  const double dt = prev ? now.time_s - prev->time_s : 0;
  std::map<uint32_t, uint64_t> awards_before;
  std::map<std::string, uint64_t> decisions_before;
  if (prev) {
    for (const worker_status& w : prev->workers)
      awards_before[w.worker] = w.awards;
    for (const router_status& r : prev->routers)
      decisions_before[r.name] = r.decisions;
  }
  top_frame f;
  auto add = [&](std::string text, top_style s = top_style::plain) {
    f.lines.push_back({std::move(text), s});
  };

  size_t live = 0, draining = 0, gone = 0, unhealthy = 0;
  double queued = 0;
  for (const worker_status& w : now.workers) {
    live += !w.gone && !w.draining && !w.unhealthy;
    draining += !w.gone && w.draining;
    unhealthy += !w.gone && !w.draining && w.unhealthy;
    gone += w.gone;
    queued += w.queued;
  }
  add(title, top_style::title);
  // Only real engines' workers can be unhealthy: named when there are any.
  add(std::to_string(now.workers.size()) + " workers (" + std::to_string(live) +
      " live, " + std::to_string(draining) + " draining, " +
      (unhealthy ? std::to_string(unhealthy) + " unhealthy, " : "") +
      std::to_string(gone) + " gone), queued " + num("%.1f", queued) +
      " blocks; " + std::to_string(now.routers.size()) + " routers" +
      (prev ? num("; rates over %.1f s", dt) : "; rates: next frame"));
  if (!now.error.empty()) add("error: " + now.error, top_style::error);

  // Routers first in the budget: few, and each one matters.
  std::vector<top_line> router_lines;
  if (now.routers.empty()) {
    router_lines.push_back({"no routers", top_style::plain});
  } else {
    // bids/round: bids received per call for bids, since the router
    // started; reauctions: all causes (`kvmesh admin routers` splits them).
    table t{{"router", "decisions", "decisions/s", "auction_p50_us",
             "auction_p99_us", "bids/round", "reauctions", "held", "overloaded",
             "live_workers"},
            {0, 5, 1, 4, 2, 6, 7, 8, 9, 3},
            {}};
    std::vector<router_status> rs = now.routers;
    std::sort(rs.begin(), rs.end(),
              [](const router_status& a, const router_status& b) {
                return a.name < b.name;
              });
    for (const router_status& r : rs) {
      const auto before = decisions_before.find(r.name);
      t.rows.push_back(
          {r.name, std::to_string(r.decisions),
           shown(rate(r.decisions,
                      before == decisions_before.end() ? nullptr
                                                       : &before->second,
                      dt),
                 "%.1f"),
           num("%.0f", r.auction_p50_us), num("%.0f", r.auction_p99_us),
           r.rounds ? num("%.1f", static_cast<double>(r.bids) / r.rounds) : "-",
           std::to_string(r.reauctions), std::to_string(r.held),
           std::to_string(r.overloaded),
           std::to_string(r.live_workers) + "/" + std::to_string(r.workers)});
    }
    std::vector<size_t> all(t.rows.size());
    std::iota(all.begin(), all.end(), 0);
    auto text = columns(t, fitting(t, layout.width), all);
    for (size_t i = 0; i < text.size(); ++i)
      router_lines.push_back(
          {text[i], i == 0 ? top_style::header : top_style::plain});
  }

  add("");
  // The workers that pass the filter, in the sort's order.
  std::vector<const worker_status*> ws;
  std::map<uint32_t, double> per_s;
  for (const worker_status& w : now.workers) {
    const auto before = awards_before.find(w.worker);
    per_s[w.worker] =
        rate(w.awards,
             before == awards_before.end() ? nullptr : &before->second, dt);
    const std::string id = std::to_string(w.worker);
    const std::string& q = layout.filter;
    if (q.empty() || id.find(q) != std::string::npos ||
        std::string(worker_state_name(w)).find(q) != std::string::npos ||
        w.agent.find(q) != std::string::npos)
      ws.push_back(&w);
  }
  // Descending keys, NaN last; ties by id.
  auto key = [&](const worker_status& w) -> double {
    switch (layout.sort) {
      case top_sort::worker:
        return -static_cast<double>(w.worker);
      case top_sort::queued:
        return w.queued;
      case top_sort::occupancy:
        return occupancy(w);
      case top_sort::awards_rate:
        return per_s[w.worker];
      case top_sort::last_price:
        return w.last_price;
    }
    return 0;
  };
  std::sort(ws.begin(), ws.end(),
            [&](const worker_status* a, const worker_status* b) {
              const double ka = key(*a), kb = key(*b);
              if (std::isnan(ka) != std::isnan(kb)) return std::isnan(kb);
              if (!std::isnan(ka) && ka != kb) return ka > kb;
              return a->worker < b->worker;
            });
  f.matching = ws.size();
  if (now.workers.empty()) {
    add("no workers");
  } else if (ws.empty()) {
    add("no worker matches '" + layout.filter + "'");
  } else {
    // occupancy: blocks of running requests in GPU memory, of its
    // capacity; gpu, host, disk: blocks cached in each tier and the tier's
    // fill ("-" for a tier of unknown size: a real engine's offloading).
    // awards/s: accepted awards between the two snapshots; last_price: the
    // router's price of the last one, in blocks.
    table t{
        {"worker", "state", "agent", "queued", "reserved", "active",
         "occupancy", "gpu", "gpu_fill", "host", "host_fill", "disk",
         "disk_fill", "waiting", "running", "awards", "awards/s", "last_price"},
        {0, 1, 8, 2, 11, 13, 3, 14, 5, 15, 10, 16, 12, 9, 7, 17, 4, 6},
        {}};
    for (const worker_status* p : ws) {
      const worker_status& w = *p;
      t.rows.push_back(
          {std::to_string(w.worker), worker_state_name(w), w.agent,
           num("%.1f", w.queued), num("%.1f", w.reserved),
           std::to_string(w.active), percent(w.active, w.capacity),
           std::to_string(w.gpu_blocks) + "/" + std::to_string(w.capacity),
           percent(w.gpu_blocks, w.capacity), std::to_string(w.host_blocks),
           percent(w.host_blocks, w.host_capacity),
           std::to_string(w.disk_blocks),
           percent(w.disk_blocks, w.disk_capacity), std::to_string(w.waiting),
           std::to_string(w.running), std::to_string(w.awards),
           shown(per_s[w.worker], "%.1f"), shown(w.last_price, "%.1f")});
    }
    // Rows left for workers: the height less every other line (the
    // header, a blank line before the routers, the keys' line).
    size_t rows = ws.size();
    if (layout.height > 0) {
      const size_t fixed =
          f.lines.size() + 1 + 1 + router_lines.size() + (layout.keys ? 1 : 0);
      rows = layout.height > fixed + 1 ? layout.height - fixed : 1;
      rows = std::min(rows, ws.size());
    }
    f.scroll = std::min(layout.scroll, ws.size() - rows);
    f.shown = rows;
    std::vector<size_t> picked(rows);
    std::iota(picked.begin(), picked.end(), f.scroll);
    // Columns fit every worker's values, not only the shown ones: they do
    // not jump while scrolling.
    const auto cols = fitting(t, layout.width);
    const auto text = columns(t, cols, picked);
    add(text[0], top_style::header);
    for (size_t i = 0; i < picked.size(); ++i)
      add(text[i + 1], style_of(*ws[picked[i]]));
  }
  add("");
  for (auto& l : router_lines)
    f.lines.push_back(std::move(l));
  if (layout.keys) {
    // Where the view is first: a narrow terminal cuts the line's end.
    std::string keys;
    if (f.shown > 0)
      keys = "workers " + std::to_string(f.scroll + 1) + "-" +
             std::to_string(f.scroll + f.shown) + " of " +
             std::to_string(f.matching) + "  ";
    keys += "sort: " + std::string(to_string(layout.sort)) +
            (layout.filter.empty() ? "" : "  filter: " + layout.filter) +
            "  q quit  s sort  / filter  up/down PgUp/PgDn scroll";
    add(keys, top_style::title);
  }
  if (layout.width > 0)
    for (auto& l : f.lines)
      if (l.text.size() > layout.width) l.text.resize(layout.width);
  return f;
}

std::string frame_text(const top_frame& f) {
  std::string out;
  for (const auto& l : f.lines)
    out += l.text + "\n";
  return out;
}

}  // namespace kvmesh::cli
