// `kvmesh top`: a live view of a running mesh: a terminal UI (ncurses) on a
// terminal, frames of text into a pipe, or JSON for scripts.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "cli/mesh_flags.hpp"
#include "cli/report.hpp"
#include "cli/top_view.hpp"
#include "core/secret.hpp"
#include "harness/process.hpp"

// Last, and without its macros (erase, clear, timeout, ...), which would
// rewrite the C++ above.
#define NCURSES_NOMACROS
#include <curses.h>

namespace kvmesh::cli {

namespace {

struct top_flags {
  bus_flags bus;
  uint32_t interval_ms = 1000;
  uint32_t timeout_ms = 2000;
  bool once = false;
  bool json = false;
  std::string sort = "worker";
  std::string filter;
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

std::string top_title(const top_flags& f, bool tui) {
  char clock[16] = "";
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  if (localtime_r(&t, &tm))
    std::strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
  return "kvmesh top  " + redact_url(url_list(f.bus.nats)) + "  prefix " +
         f.bus.prefix + "  " + clock + "  every " +
         std::to_string(f.interval_ms) + " ms" +
         (f.once || tui ? "" : ", Ctrl-C quits");
}

// The snapshot with per-second rates over the one before, for scripts.
json snapshot_json(const fleet_snapshot& now, const fleet_snapshot& prev) {
  const double dt = now.time_s - prev.time_s;
  std::map<uint32_t, uint64_t> awards;
  std::map<std::string, uint64_t> decisions;
  for (const auto& w : prev.workers)
    awards[w.worker] = w.awards;
  for (const auto& r : prev.routers)
    decisions[r.name] = r.decisions;
  auto per_s = [dt](uint64_t v, auto it, auto end) -> json {
    if (it == end || v < it->second || !(dt > 0)) return nullptr;
    return static_cast<double>(v - it->second) / dt;
  };
  json ws = workers_json(now.workers);
  for (size_t i = 0; i < now.workers.size(); ++i)
    ws[i]["awards_per_s"] = per_s(now.workers[i].awards,
                                  awards.find(now.workers[i].worker),
                                  awards.end());
  json rs = routers_json(now.routers);
  for (size_t i = 0; i < now.routers.size(); ++i)
    rs[i]["decisions_per_s"] =
        per_s(now.routers[i].decisions, decisions.find(now.routers[i].name),
              decisions.end());
  return {{"interval_s", dt}, {"workers", ws}, {"routers", rs}};
}

bool stop_pending(const sigset_t& stop) {
  sigset_t pending;
  sigemptyset(&pending);
  if (sigpending(&pending) != 0) return false;
  for (int s : {SIGINT, SIGTERM})
    if (sigismember(&stop, s) && sigismember(&pending, s)) return true;
  return false;
}

// The terminal UI: a frame sized to the window each time, keys between
// frames. ncurses sends only what changed.
class tui {
 public:
  tui() {
    initscr();
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    if (has_colors()) {
      start_color();
      use_default_colors();
      init_pair(1, COLOR_YELLOW, -1);  // draining
      init_pair(2, COLOR_RED, -1);     // unhealthy, errors
      init_pair(3, COLOR_BLUE, -1);    // gone
      colours_ = true;
    }
  }
  ~tui() { endwin(); }
  tui(const tui&) = delete;
  tui& operator=(const tui&) = delete;

  void size(size_t& width, size_t& height) const {
    int h = 0, w = 0;
    getmaxyx(stdscr, h, w);
    width = static_cast<size_t>(w > 0 ? w : 80);
    height = static_cast<size_t>(h > 0 ? h : 24);
  }

  void draw(const top_frame& f, const std::string& prompt) {
    werase(stdscr);
    size_t width = 0, height = 0;
    size(width, height);
    for (size_t i = 0; i < f.lines.size() && i < height; ++i) {
      const attr_t a = attr(f.lines[i].style);
      wattron(stdscr, static_cast<int>(a));
      mvwaddnstr(stdscr, static_cast<int>(i), 0, f.lines[i].text.c_str(),
                 static_cast<int>(width));
      wattroff(stdscr, static_cast<int>(a));
    }
    if (!prompt.empty())
      mvwaddnstr(stdscr, static_cast<int>(height - 1), 0, prompt.c_str(),
                 static_cast<int>(width));
    wrefresh(stdscr);
  }

 private:
  attr_t attr(top_style s) const {
    switch (s) {
      case top_style::title:
        return A_REVERSE;
      case top_style::header:
        return A_BOLD;
      case top_style::draining:
        return colours_ ? COLOR_PAIR(1) : A_NORMAL;
      case top_style::unhealthy:
      case top_style::error:
        return colours_ ? COLOR_PAIR(2) : A_BOLD;
      case top_style::gone:
        return colours_ ? COLOR_PAIR(3) : A_DIM;
      case top_style::plain:
        return A_NORMAL;
    }
    return A_NORMAL;
  }
  bool colours_ = false;
};

int run_tui(const top_flags& f, nats_bus& bus, const subjects& subj,
            top_layout layout, const sigset_t& stop) {
  const std::chrono::milliseconds ask(f.timeout_ms);
  const auto interval = std::chrono::milliseconds(f.interval_ms);
  tui screen;
  layout.keys = true;
  fleet_snapshot now = take_snapshot(bus, subj, ask), prev;
  bool have_prev = false;
  auto next = std::chrono::steady_clock::now() + interval;
  std::string typing;  // the filter being typed after '/'
  bool filtering = false;
  while (!stop_pending(stop)) {
    screen.size(layout.width, layout.height);
    const top_frame frame =
        render_top(top_title(f, true), now, have_prev ? &prev : nullptr,
                   layout);
    layout.scroll = frame.scroll;
    screen.draw(frame, filtering ? "filter: " + typing : "");
    // Keys until the next frame is due; a key redraws at once.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        next - std::chrono::steady_clock::now());
    wtimeout(stdscr, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    const int key = wgetch(stdscr);
    const size_t page = frame.shown > 1 ? frame.shown - 1 : 1;
    if (filtering) {
      if (key == '\n' || key == KEY_ENTER) {
        filtering = false;
        layout.filter = typing;
        layout.scroll = 0;
      } else if (key == 27) {
        filtering = false;
      } else if (key == KEY_BACKSPACE || key == 127 || key == 8) {
        if (!typing.empty()) typing.pop_back();
      } else if (key >= 32 && key < 127) {
        typing += static_cast<char>(key);
      }
    } else if (key == 'q' || key == 'Q') {
      return 0;
    } else if (key == 's') {
      layout.sort = static_cast<top_sort>(
          (static_cast<size_t>(layout.sort) + 1) % top_sort_count);
    } else if (key == '/') {
      filtering = true;
      typing = layout.filter;
    } else if (key == KEY_DOWN || key == 'j') {
      ++layout.scroll;
    } else if (key == KEY_UP || key == 'k') {
      if (layout.scroll > 0) --layout.scroll;
    } else if (key == KEY_NPAGE || key == ' ') {
      layout.scroll += page;
    } else if (key == KEY_PPAGE) {
      layout.scroll = layout.scroll > page ? layout.scroll - page : 0;
    } else if (key == KEY_HOME || key == 'g') {
      layout.scroll = 0;
    } else if (key == KEY_END || key == 'G') {
      layout.scroll = SIZE_MAX / 2;  // clamped by the frame
    }
    if (std::chrono::steady_clock::now() >= next) {
      prev = std::move(now);
      have_prev = true;
      now = take_snapshot(bus, subj, ask);
      next = std::chrono::steady_clock::now() + interval;
    }
  }
  return 0;
}

int run_top(const top_flags& f) {
  const char* cmd = "top";
  if (auto why = check_bus_flags(f.bus); !why.empty())
    return usage_error(cmd, why);
  top_layout layout;
  layout.filter = f.filter;
  bool known = false;
  for (size_t s = 0; s < top_sort_count; ++s)
    if (f.sort == to_string(static_cast<top_sort>(s))) {
      layout.sort = static_cast<top_sort>(s);
      known = true;
    }
  if (!known)
    return usage_error(cmd, "--sort: '" + f.sort +
                                "' is not worker, queued, occupancy, "
                                "awards/s or last_price");
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
  if (f.once || f.json) {
    // Rates need two readings: the one frame comes one interval later.
    if (!prev.error.empty()) return run_error(cmd, prev.error);
    if (!pause()) return 0;
    fleet_snapshot now = take_snapshot(**bus, subj, timeout);
    if (f.json)
      std::printf("%s\n", snapshot_json(now, prev).dump().c_str());
    else
      std::fputs(
          frame_text(render_top(top_title(f, false), now, &prev, layout))
              .c_str(),
          stdout);
    if (!now.error.empty()) return run_error(cmd, now.error);
    return 0;
  }
  if (isatty(fileno(stdout)) && isatty(fileno(stdin)))
    return run_tui(f, **bus, subj, layout, stop);
  // Into a file or pipe: frames follow each other, every column.
  const fleet_snapshot* before = nullptr;
  fleet_snapshot now = std::move(prev);
  while (true) {
    std::fputs(
        (frame_text(render_top(top_title(f, false), now, before, layout)) +
         "\n")
            .c_str(),
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
      "a live view of a running mesh: per worker its state, queued work, "
      "occupancy, tier fill, awards per second and the price of its last "
      "award; per router its decisions per second, auction latency and "
      "bids per round. On a terminal: q quits, s sorts, / filters, arrows "
      "and PgUp/PgDn scroll");
  add_bus_flags(*cmd, f->bus);
  cmd->add_option("--interval-ms", f->interval_ms, "time between frames")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--timeout-ms", f->timeout_ms,
                  "wait this long for each answer of the ADMIN")
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--sort", f->sort,
                  "workers by: worker (id), queued, occupancy, awards/s or "
                  "last_price, the busiest first")
      ->capture_default_str();
  cmd->add_option("--filter", f->filter,
                  "only workers whose id, state or agent contains this");
  cmd->add_flag("--once", f->once,
                "print one frame (after one interval, to measure rates) and "
                "exit");
  cmd->add_flag("--json", f->json,
                "print the fleet as JSON (after one interval: rates per "
                "second included) and exit");
  cmd->footer(
      "Exit status: 0 done, 1 no answer from the mesh (--once, --json), 2 "
      "bad flag or value.");
  cmd->callback([f, &run] { run = [f] { return run_top(*f); }; });
}

}  // namespace kvmesh::cli
