// Tests of cli/top_view: a frame of `kvmesh top` from two snapshots.
#include "cli/top_view.hpp"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace kvmesh::cli {
namespace {

worker_status worker(uint32_t id, uint64_t completed) {
  worker_status w;
  w.worker = id;
  w.queued = 12.5;
  w.active = 256;
  w.capacity = 1024;
  w.gpu_blocks = 512;
  w.host_blocks = 2000;
  w.disk_blocks = 7;
  w.waiting = 1;
  w.running = 2;
  w.completed = completed;
  w.agent = "agent-0";
  return w;
}

router_status router(const std::string& name, uint64_t decisions) {
  router_status r;
  r.name = name;
  r.decisions = decisions;
  r.auction_p99_us = 850;
  r.live_workers = 2;
  r.workers = 2;
  return r;
}

// The line of the frame that starts with `first`, "" when none does.
std::string line_of(const std::string& frame, const std::string& first) {
  std::istringstream in(frame);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(first, 0) == 0) return line;
  return "";
}

TEST(top_view, rates_come_from_the_previous_snapshot) {
  fleet_snapshot before{
      10, {worker(0, 100), worker(1, 50)}, {router("router-0", 1000)}, ""};
  fleet_snapshot now{
      12, {worker(1, 70), worker(0, 100)}, {router("router-0", 1300)}, ""};
  now.workers[0].draining = true;
  const std::string frame = render_top("kvmesh top", now, &before);
  // Worker 1: 20 more completed, as many waiting and running: 10 awards/s.
  const std::string w1 = line_of(frame, "1 ");
  EXPECT_NE(w1.find("draining"), std::string::npos) << frame;
  EXPECT_NE(w1.find("512/1024"), std::string::npos) << w1;
  EXPECT_NE(w1.find("25%"), std::string::npos) << w1;  // occupancy
  EXPECT_NE(w1.find("50%"), std::string::npos) << w1;  // gpu fill
  EXPECT_NE(w1.find("12.5"), std::string::npos) << w1;
  EXPECT_EQ(w1.substr(w1.size() - 4), "10.0") << w1;
  const std::string w0 = line_of(frame, "0 ");
  EXPECT_EQ(w0.substr(w0.size() - 3), "0.0") << w0;
  // Worker 0 comes first: sorted by id.
  EXPECT_LT(frame.find("\n0 "), frame.find("\n1 "));
  const std::string r0 = line_of(frame, "router-0");
  EXPECT_NE(r0.find(" 150.0 "), std::string::npos) << r0;  // 300 in 2 s
  EXPECT_NE(r0.find(" 850 "), std::string::npos) << r0;
  EXPECT_NE(frame.find("2 workers (1 live, 1 draining, 0 gone)"),
            std::string::npos)
      << frame;
}

TEST(top_view, first_frame_and_restarts_show_no_rate) {
  fleet_snapshot before{10, {worker(0, 100)}, {router("router-0", 1000)}, ""};
  fleet_snapshot now{11, {worker(0, 5)}, {router("router-0", 1)}, ""};
  const std::string first = render_top("t", now, nullptr);
  EXPECT_EQ(line_of(first, "0 ").back(), '-') << first;
  EXPECT_NE(first.find("rates: next frame"), std::string::npos);
  // Counters that went back: a restarted process, not a negative rate.
  const std::string frame = render_top("t", now, &before);
  EXPECT_EQ(line_of(frame, "0 ").back(), '-') << frame;
  EXPECT_NE(line_of(frame, "router-0").find(" - "), std::string::npos) << frame;
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
