// The bench's accounting: heartbeats to overhead, CPU per process, errors.
#include "harness/accounting.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>

namespace kvmesh::harness {

std::string error_kind(const std::string& msg) {
  std::string out;
  for (size_t i = 0; i < msg.size();) {
    if (std::isdigit(static_cast<unsigned char>(msg[i]))) {
      while (i < msg.size() && std::isdigit(static_cast<unsigned char>(msg[i])))
        ++i;
      out += 'N';
    } else {
      out += msg[i++];
    }
  }
  return out;
}

void beat_log::add(router_status s) {
  std::lock_guard<std::mutex> g(mu);
  by_router[s.name].push_back({steady::now(), std::move(s)});
}

size_t beat_log::routers_with(size_t n, steady::time_point t) {
  std::lock_guard<std::mutex> g(mu);
  size_t out = 0;
  for (auto& [name, beats] : by_router) {
    size_t k = 0;
    for (const auto& b : beats)
      k += b.at >= t;
    out += k >= n;
  }
  return out;
}

void add_causes(router_status& to, const router_status& now,
                const router_status& then) {
  to.reauctions_refused += now.reauctions_refused - then.reauctions_refused;
  to.reauctions_unanswered +=
      now.reauctions_unanswered - then.reauctions_unanswered;
  to.reauctions_no_bids += now.reauctions_no_bids - then.reauctions_no_bids;
  to.reauctions_saturated +=
      now.reauctions_saturated - then.reauctions_saturated;
  to.reauctions_no_live_worker +=
      now.reauctions_no_live_worker - then.reauctions_no_live_worker;
}

overhead_result overhead_of(beat_log& log, steady::time_point start,
                            steady::time_point end) {
  overhead_result out;
  out.wall_s = seconds(end - start);
  std::lock_guard<std::mutex> g(log.mu);
  double p50_weighted = 0;
  for (auto& [name, beats] : log.by_router) {
    router_overhead r;
    r.name = name;
    const beat_log::beat* before = nullptr;
    const beat_log::beat* idle = nullptr;
    for (const auto& b : beats)
      if (b.at <= start) {
        idle = before;
        before = &b;
      }
    const beat_log::beat& last = beats.back();
    if (last.at < end)
      out.warning += "router " + name + "'s last heartbeat came " +
                     arg(std::round(seconds(end - last.at) * 10) / 10) +
                     " s before the end of the run: its counts miss the "
                     "end; ";
    const router_status zero;
    const router_status& s0 = before ? before->s : zero;
    r.decisions = last.s.decisions - s0.decisions;
    r.reauctions = last.s.reauctions - s0.reauctions;
    add_causes(r.causes, last.s, s0);
    add_causes(out.causes, last.s, s0);
    r.nats_msgs = traffic(last.s) - traffic(s0);
    r.auction_p50_us = last.s.auction_p50_us;
    r.auction_p99_us = last.s.auction_p99_us;
    if (before) r.span_s = seconds(last.at - before->at);
    if (before && idle && before->at > idle->at)
      r.background_per_s = (traffic(before->s) - traffic(idle->s)) /
                           seconds(before->at - idle->at);
    out.decisions += r.decisions;
    out.reauctions += r.reauctions;
    out.nats_msgs += r.nats_msgs;
    out.background_msgs += r.background_per_s * r.span_s;
    p50_weighted += r.auction_p50_us * static_cast<double>(r.decisions);
    out.auction_p99_us = std::max(out.auction_p99_us, r.auction_p99_us);
    out.routers.push_back(r);
  }
  if (out.decisions > 0) {
    const auto d = static_cast<double>(out.decisions);
    out.auction_p50_us = p50_weighted / d;
    out.nats_msgs_per_decision = static_cast<double>(out.nats_msgs) / d;
    out.nats_msgs_per_decision_net =
        std::max(0.0,
                 static_cast<double>(out.nats_msgs) - out.background_msgs) /
        d;
  }
  if (out.wall_s > 0)
    out.decisions_per_s = static_cast<double>(out.decisions) / out.wall_s;
  return out;
}

std::string wait_idle_beats(beat_log& log, child_mesh& m, uint32_t routers,
                            uint32_t heartbeat_ms) {
  const auto from = steady::now();
  const auto deadline = from + 4 * std::chrono::milliseconds(heartbeat_ms) +
                        std::chrono::seconds(1);
  while (log.routers_with(2, from) < routers) {
    if (auto why = watch(m, 50); !why.empty()) return why;
    if (steady::now() > deadline)
      return "routers stopped sending heartbeats (" +
             std::to_string(log.routers_with(2, from)) + " of " +
             std::to_string(routers) + " sent two in " +
             std::to_string(seconds(deadline - from)) + " s)";
  }
  return {};
}

std::string wait_end_beats(beat_log& log, child_mesh& m, uint32_t routers,
                           uint32_t heartbeat_ms, steady::time_point start,
                           steady::time_point end, uint64_t expected) {
  const auto deadline = steady::now() + std::chrono::seconds(30) +
                        4 * std::chrono::milliseconds(heartbeat_ms);
  while (steady::now() < deadline) {
    if (auto why = watch(m, 50); !why.empty()) return why;
    if (log.routers_with(1, end) < routers) continue;
    if (log.routers_with(3, end) >= routers ||
        overhead_of(log, start, end).decisions >= expected)
      break;
  }
  return {};
}

cpu_use cpu_now(const child_mesh& m) {
  cpu_use u;
  u.at = steady::now();
  for (const auto* list : {&m.procs, &m.nats})
    for (const auto& p : *list)
      u.procs.push_back(p.pid > 0 ? cpu_seconds(p.pid) : -1);
  u.procs.push_back(cpu_seconds(getpid()));
  return u;
}

std::vector<cpu_row> cpu_rows(const child_mesh& m, const cpu_use& before,
                              const cpu_use& after, uint64_t decisions) {
  std::vector<std::string> names;
  for (const auto* list : {&m.procs, &m.nats})
    for (const auto& p : *list)
      names.push_back(p.name.empty() || p.role == "nats-server" ? p.role
                                                                : p.name);
  names.push_back("bench client");
  const double wall = seconds(after.at - before.at);
  std::vector<cpu_row> out;
  for (size_t i = 0;
       i < names.size() && i < before.procs.size() && i < after.procs.size();
       ++i) {
    if (before.procs[i] < 0 || after.procs[i] < 0) continue;
    const double s = after.procs[i] - before.procs[i];
    const double per = decisions ? s * 1e6 / static_cast<double>(decisions) : 0;
    out.push_back({names[i], s, wall > 0 ? s / wall : 0, per});
  }
  return out;
}

}  // namespace kvmesh::harness
