// Tests of cli/top_view: a frame of `kvmesh top` from two snapshots.
#include "cli/top_view.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/samples.hpp"

namespace kvmesh::cli {
namespace {

using test::sample_router;
using test::sample_worker;

// The frame as text, laid out by `layout` (default: every column and row).
std::string text(const std::string& title, const fleet_snapshot& now,
                 const fleet_snapshot* prev, const top_layout& layout = {}) {
  return frame_text(render_top(title, now, prev, layout));
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}

// The cell of column `column` in the row whose first cell is `first`, of
// the table whose header starts with `table` ("worker", "router"); "?"
// when there is none. Cells hold no spaces, so words line up with the
// header's.
std::string cell(const std::string& frame, const std::string& table,
                 const std::string& first, const std::string& column) {
  std::istringstream in(frame);
  std::vector<std::string> header;
  for (std::string line; std::getline(in, line);) {
    auto w = words(line);
    if (w.empty()) continue;
    if (w[0] == table) {
      header = w;
      continue;
    }
    if (header.empty() || header[0] != table || w[0] != first) continue;
    for (size_t i = 0; i < header.size() && i < w.size(); ++i)
      if (header[i] == column) return w[i];
  }
  return "?";
}

TEST(top_view, rates_come_from_the_previous_snapshot) {
  fleet_snapshot before{10,
                        {sample_worker(0, 100), sample_worker(1, 50)},
                        {sample_router("router-0", 1000)},
                        ""};
  fleet_snapshot now{12,
                     {sample_worker(1, 70), sample_worker(0, 100)},
                     {sample_router("router-0", 1300)},
                     ""};
  now.workers[0].draining = true;
  now.workers[0].last_price = 7.5;
  const std::string frame = text("kvmesh top", now, &before);
  auto w = [&](const char* id, const char* column) {
    return cell(frame, "worker", id, column);
  };
  // Worker 1: 20 more awards accepted in 2 s.
  EXPECT_EQ(w("1", "state"), "draining") << frame;
  EXPECT_EQ(w("1", "gpu"), "512/1024") << frame;
  EXPECT_EQ(w("1", "occupancy"), "25%") << frame;
  EXPECT_EQ(w("1", "gpu_fill"), "50%") << frame;
  EXPECT_EQ(w("1", "host_fill"), "25%") << frame;
  EXPECT_EQ(w("1", "disk_fill"), "-") << frame;
  EXPECT_EQ(w("1", "queued"), "12.5") << frame;
  EXPECT_EQ(w("1", "awards"), "70") << frame;
  EXPECT_EQ(w("1", "awards/s"), "10.0") << frame;
  EXPECT_EQ(w("1", "last_price"), "7.5") << frame;
  EXPECT_EQ(w("0", "awards/s"), "0.0") << frame;
  EXPECT_EQ(w("0", "last_price"), "41.5") << frame;
  // Worker 0 comes first: sorted by id.
  EXPECT_LT(frame.find("\n0 "), frame.find("\n1 "));
  auto r = [&](const char* column) {
    return cell(frame, "router", "router-0", column);
  };
  EXPECT_EQ(r("decisions/s"), "150.0") << frame;  // 300 in 2 s
  EXPECT_EQ(r("auction_p99_us"), "850") << frame;
  EXPECT_EQ(r("bids/round"), "3.2") << frame;  // 130 bids in 40 rounds
  EXPECT_NE(frame.find("2 workers (1 live, 1 draining, 0 gone)"),
            std::string::npos)
      << frame;
}

TEST(top_view, first_frame_restarts_and_no_award_show_no_value) {
  fleet_snapshot before{
      10, {sample_worker(0, 100)}, {sample_router("router-0", 1000)}, ""};
  fleet_snapshot now{
      11, {sample_worker(0, 5)}, {sample_router("router-0", 1)}, ""};
  now.workers[0].last_price = std::numeric_limits<double>::quiet_NaN();
  now.routers[0].rounds = 0;
  const std::string first = text("t", now, nullptr);
  EXPECT_EQ(cell(first, "worker", "0", "awards/s"), "-") << first;
  EXPECT_EQ(cell(first, "worker", "0", "last_price"), "-") << first;
  EXPECT_EQ(cell(first, "router", "router-0", "bids/round"), "-") << first;
  EXPECT_NE(first.find("rates: next frame"), std::string::npos);
  // Counters that went back: a restarted process, not a negative rate.
  const std::string frame = text("t", now, &before);
  EXPECT_EQ(cell(frame, "worker", "0", "awards/s"), "-") << frame;
  EXPECT_EQ(cell(frame, "router", "router-0", "decisions/s"), "-") << frame;
}

TEST(top_view, an_empty_fleet_and_errors_are_said) {
  fleet_snapshot now;
  now.error = "workers: no reply";
  const std::string frame = text("t", now, nullptr);
  EXPECT_NE(frame.find("error: workers: no reply"), std::string::npos);
  EXPECT_NE(frame.find("no workers"), std::string::npos);
  EXPECT_NE(frame.find("no routers"), std::string::npos);
  EXPECT_EQ(frame.find("\x1b"), std::string::npos);  // the caller clears
}

// A fleet of n workers, worker i with i queued blocks.
fleet_snapshot fleet(uint32_t n) {
  fleet_snapshot s{20, {}, {sample_router("router-0", 1000)}, ""};
  for (uint32_t i = 0; i < n; ++i) {
    s.workers.push_back(sample_worker(i, i));
    s.workers.back().queued = i;
    s.workers.back().agent = i % 2 ? "node-odd" : "node-even";
  }
  return s;
}

std::vector<std::string> lines_of(const top_frame& f) {
  std::vector<std::string> out;
  for (const auto& l : f.lines)
    out.push_back(l.text);
  return out;
}

TEST(top_view, columns_are_dropped_least_useful_first_to_fit_the_width) {
  const fleet_snapshot now = fleet(12);
  const std::string wide = text("t", now, nullptr);
  size_t widest = 0;
  for (const auto& l : lines_of(render_top("t", now, nullptr, {})))
    widest = std::max(widest, l.size());
  ASSERT_GT(widest, 120u) << wide;  // every column: wider than a terminal
  for (size_t width : {80u, 120u}) {
    top_layout layout;
    layout.width = width;
    const top_frame f = render_top("t", now, nullptr, layout);
    std::string frame;
    for (const auto& l : lines_of(f)) {
      EXPECT_LE(l.size(), width) << l;
      frame += l + "\n";
    }
    // What matters most stays.
    for (const char* column : {"state", "queued", "occupancy", "awards/s"})
      EXPECT_NE(cell(frame, "worker", "3", column), "?")
          << width << ": " << column << "\n" << frame;
    EXPECT_EQ(cell(frame, "worker", "3", "queued"), "3.0") << frame;
    EXPECT_NE(cell(frame, "router", "router-0", "decisions/s"), "?") << frame;
  }
  top_layout narrow, wider;
  narrow.width = 80;
  wider.width = 120;
  EXPECT_LT(words(text("t", now, nullptr, narrow).substr(
                text("t", now, nullptr, narrow).find("\nworker") + 1))
                .size(),
            words(text("t", now, nullptr, wider).substr(
                text("t", now, nullptr, wider).find("\nworker") + 1))
                .size());
}

TEST(top_view, workers_sort_filter_and_scroll_within_the_height) {
  const fleet_snapshot now = fleet(1000);
  top_layout layout;
  layout.width = 80;
  layout.height = 24;
  layout.keys = true;
  top_frame f = render_top("t", now, nullptr, layout);
  EXPECT_LE(f.lines.size(), 24u);
  EXPECT_EQ(f.matching, 1000u);
  ASSERT_GT(f.shown, 5u);
  const size_t page = f.shown;
  EXPECT_NE(f.lines.back().text.find("workers 1-" + std::to_string(page) +
                                     " of 1000"),
            std::string::npos)
      << f.lines.back().text;
  // The busiest first.
  layout.sort = top_sort::queued;
  std::string frame = frame_text(render_top("t", now, nullptr, layout));
  EXPECT_LT(frame.find("\n999 "), frame.find("\n998 ")) << frame;
  EXPECT_EQ(frame.find("\n0 "), std::string::npos);
  // Scrolled past the end: the last page.
  layout.scroll = 5000;
  f = render_top("t", now, nullptr, layout);
  EXPECT_EQ(f.scroll, 1000 - page);
  frame = frame_text(f);
  EXPECT_NE(frame.find("\n0 "), std::string::npos) << frame;
  // A filter on the agent's name, then on an id.
  layout = {};
  layout.filter = "node-odd";
  f = render_top("t", now, nullptr, layout);
  EXPECT_EQ(f.matching, 500u);
  frame = frame_text(f);
  EXPECT_EQ(cell(frame, "worker", "2", "state"), "?");
  EXPECT_EQ(cell(frame, "worker", "3", "state"), "live");
  layout.filter = "nothing-like-it";
  frame = frame_text(render_top("t", now, nullptr, layout));
  EXPECT_NE(frame.find("no worker matches 'nothing-like-it'"),
            std::string::npos);
}

TEST(top_view, states_are_styled_for_colour) {
  fleet_snapshot now = fleet(3);
  now.workers[1].draining = true;
  now.workers[2].unhealthy = true;
  const top_frame f = render_top("t", now, nullptr, {});
  std::map<std::string, top_style> style;
  for (const auto& l : f.lines)
    if (!words(l.text).empty()) style[words(l.text)[0]] = l.style;
  EXPECT_EQ(style["worker"], top_style::header);
  EXPECT_EQ(style["0"], top_style::plain);
  EXPECT_EQ(style["1"], top_style::draining);
  EXPECT_EQ(style["2"], top_style::unhealthy);
}

}  // namespace
}  // namespace kvmesh::cli
