// Tests of cli/top_view: a frame of `kvmesh top` from two snapshots.
#include "cli/top_view.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "tests/samples.hpp"

namespace kvmesh::cli {
namespace {

using test::sample_router;
using test::sample_worker;

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
  const std::string frame = render_top("kvmesh top", now, &before);
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
  const std::string first = render_top("t", now, nullptr);
  EXPECT_EQ(cell(first, "worker", "0", "awards/s"), "-") << first;
  EXPECT_EQ(cell(first, "worker", "0", "last_price"), "-") << first;
  EXPECT_EQ(cell(first, "router", "router-0", "bids/round"), "-") << first;
  EXPECT_NE(first.find("rates: next frame"), std::string::npos);
  // Counters that went back: a restarted process, not a negative rate.
  const std::string frame = render_top("t", now, &before);
  EXPECT_EQ(cell(frame, "worker", "0", "awards/s"), "-") << frame;
  EXPECT_EQ(cell(frame, "router", "router-0", "decisions/s"), "-") << frame;
}

TEST(top_view, an_empty_fleet_and_errors_are_said) {
  fleet_snapshot now;
  now.error = "workers: no reply";
  const std::string frame = render_top("t", now, nullptr);
  EXPECT_NE(frame.find("error: workers: no reply"), std::string::npos);
  EXPECT_NE(frame.find("no workers"), std::string::npos);
  EXPECT_NE(frame.find("no routers"), std::string::npos);
  EXPECT_EQ(frame.find("\x1b"), std::string::npos);  // the caller clears
}

}  // namespace
}  // namespace kvmesh::cli
