// `kvmesh top`: a live view of a running mesh, frame after frame.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "cli/mesh_flags.hpp"
#include "harness/process.hpp"
#include "cli/top_view.hpp"
#include "core/secret.hpp"

namespace kvmesh::cli {

namespace {

struct top_flags {
  bus_flags bus;
  uint32_t interval_ms = 1000;
  uint32_t timeout_ms = 2000;
  bool once = false;
};

// Asks the ADMIN for workers and routers; what it could not get is named
// in the snapshot's error.
fleet_snapshot take_snapshot(nats_bus& bus, const subjects& subj,
                             std::chrono::milliseconds timeout) {
  fleet_snapshot s;
  s.time_s = std::chrono::duration<double>(
                 std::chrono::steady_clock::now().time_since_epoch())
                 .count();
  auto note = [&](const std::string& verb, const std::string& why) {
    s.error += (s.error.empty() ? "" : "; ") + verb + ": " + why;
  };
  auto w = admin_request_call(bus, subj, "workers", admin_request{}, timeout);
  if (!w)
    note("workers", w.err().message);
  else if (!w->error.empty())
    note("workers", w->error);
  else
    s.workers = std::move(w->workers);
  auto r = admin_request_call(bus, subj, "routers", admin_request{}, timeout);
  if (!r)
    note("routers", r.err().message);
  else if (!r->error.empty())
    note("routers", r->error);
  else
    s.routers = std::move(r->routers);
  return s;
}

std::string top_title(const top_flags& f) {
  char clock[16] = "";
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  if (localtime_r(&t, &tm))
    std::strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
  return "kvmesh top  " + redact_url(url_list(f.bus.nats)) + "  prefix " +
         f.bus.prefix + "  " + clock + "  every " +
         std::to_string(f.interval_ms) + " ms" +
         (f.once ? "" : ", Ctrl-C quits");
}

int run_top(const top_flags& f) {
  const char* cmd = "top";
  if (auto why = check_bus_flags(f.bus); !why.empty())
    return usage_error(cmd, why);
  // Ctrl-C ends the wait between frames (sigtimedwait), not the process
  // half-way through drawing one.
  const sigset_t stop = harness::block_signals({SIGINT, SIGTERM});
  auto bus = connect_bus(f.bus, "kvmesh-top");
  if (!bus) return run_error(cmd, bus.err().message);
  subjects subj;
  subj.prefix = f.bus.prefix;
  const std::chrono::milliseconds timeout(f.timeout_ms);
  // Waits one interval; false when a signal asked to stop.
  auto pause = [&] {
    timespec ts{static_cast<time_t>(f.interval_ms / 1000),
                static_cast<long>(f.interval_ms % 1000) * 1000000L};
    return sigtimedwait(&stop, nullptr, &ts) < 0;
  };
  fleet_snapshot prev = take_snapshot(**bus, subj, timeout);
  if (f.once) {
    // Rates need two readings: the one frame comes one interval later.
    if (prev.error.empty() && pause()) {
      fleet_snapshot now = take_snapshot(**bus, subj, timeout);
      std::fputs(render_top(top_title(f), now, &prev).c_str(), stdout);
      if (!now.error.empty()) return run_error(cmd, now.error);
      return 0;
    }
    if (!prev.error.empty()) return run_error(cmd, prev.error);
    return 0;
  }
  // On a terminal each frame replaces the last (cursor home, clear);
  // into a file or pipe frames follow each other.
  const bool tty = isatty(fileno(stdout)) != 0;
  const fleet_snapshot* before = nullptr;
  fleet_snapshot now = std::move(prev);
  while (true) {
    const std::string frame = render_top(top_title(f), now, before);
    std::fputs(tty ? ("\x1b[H\x1b[2J" + frame).c_str() : (frame + "\n").c_str(),
               stdout);
    std::fflush(stdout);
    if (!pause()) break;
    prev = std::move(now);
    before = &prev;
    now = take_snapshot(**bus, subj, timeout);
  }
  return 0;
}

}  // namespace

void add_top(CLI::App& app, std::function<int()>& run) {
  auto f = std::make_shared<top_flags>();
  auto* cmd = app.add_subcommand(
      "top",
      "a live view of a running mesh, refreshed in place: per worker its "
      "state, queued work, occupancy, tier fill, awards per second and the "
      "price of its last award; per router its decisions per second, "
      "auction latency and bids per round");
  add_bus_flags(*cmd, f->bus);
  cmd->add_option("--interval-ms", f->interval_ms, "time between frames")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--timeout-ms", f->timeout_ms,
                  "wait this long for each answer of the ADMIN")
      ->check(positive)
      ->capture_default_str();
  cmd->add_flag("--once", f->once,
                "print one frame (after one interval, to measure rates) and "
                "exit");
  cmd->footer(
      "Exit status: 0 done, 1 no answer from the mesh (--once), 2 bad flag "
      "or value.");
  cmd->callback([f, &run] { run = [f] { return run_top(*f); }; });
}

}  // namespace kvmesh::cli
