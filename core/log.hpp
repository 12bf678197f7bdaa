// The project's log: leveled events, one line each on stderr, as text or
// JSON, safe from any thread.
// Hand-written rather than Debian's spdlog: each line is one write(2) of a
// buffer on the caller's stack (lines never interleave, nothing to flush
// at a crash), the same fields as text or JSON, and core/ stays free of
// dependencies.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace kvmesh::log {

// From the most to the least severe; a process shows its level and above.
enum class level { error = 0, warn, info, debug };

// text: "2026-11-30T21:00:00.123Z warn router r1: ..." for a person or a
// journal; json: one object per line for a log pipeline; plain: "kvmesh
// route: ...", for commands that a person runs at a terminal (clients,
// batch tools), which have no --log-format.
enum class format { plain, text, json };

const char* to_string(level l);
const char* to_string(format f);
expected<level> parse_level(std::string_view text);
expected<format> parse_format(std::string_view text);

struct event {
  std::chrono::system_clock::time_point time;
  level lvl = level::info;
  std::string proc;  // who: "router r1", "agent agent-0", "up"
  std::string msg;
};

// The event as one line, '\n' included: control characters in the message
// are escaped, so that no event spans two lines; JSON is valid UTF-8
// whatever bytes the message holds.
std::string format_line(const event& e, format f);

// "2026-11-30T21:00:00.123Z" (UTC, milliseconds).
std::string timestamp(std::chrono::system_clock::time_point t);

// JSON string contents for `s` (no quotes): quotes, backslashes and
// control characters escaped, bytes that are not UTF-8 replaced by U+FFFD.
std::string json_escape(std::string_view s);

// The process's settings: level info, format plain, proc "" until a command
// sets them.
void set_level(level l);
void set_format(format f);
void set_proc(std::string proc);
level current_level();
format current_format();

namespace detail {
extern std::atomic<int> threshold;  // the level shown, as an int
}

inline bool enabled(level l) {
  return static_cast<int>(l) <=
         detail::threshold.load(std::memory_order_relaxed);
}

// Writes one event (when its level is enabled) to stderr in one write(2),
// or to the sink a test set. Lines of several threads do not mix.
void write(level l, std::string_view msg);
void writef(level l, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

// Replaces stderr as the destination (tests); an empty function restores it.
void set_sink(std::function<void(std::string_view line)> sink);

inline void error(std::string_view msg) {
  write(level::error, msg);
}
inline void warn(std::string_view msg) {
  write(level::warn, msg);
}
inline void info(std::string_view msg) {
  write(level::info, msg);
}
inline void debug(std::string_view msg) {
  write(level::debug, msg);
}

}  // namespace kvmesh::log

namespace kvmesh {

// An info event, printf-style: the engine adapters' older name for it.
void log_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace kvmesh

// printf-style, "subject verb object": the arguments are not evaluated when
// the level is off.
#define KVMESH_LOG_AT(lvl, ...)                                               \
  do {                                                                        \
    if (::kvmesh::log::enabled(lvl)) ::kvmesh::log::writef(lvl, __VA_ARGS__); \
  } while (false)
#define KVMESH_ERROR(...) \
  KVMESH_LOG_AT(::kvmesh::log::level::error, __VA_ARGS__)
#define KVMESH_WARN(...) KVMESH_LOG_AT(::kvmesh::log::level::warn, __VA_ARGS__)
#define KVMESH_INFO(...) KVMESH_LOG_AT(::kvmesh::log::level::info, __VA_ARGS__)
#define KVMESH_DEBUG(...) \
  KVMESH_LOG_AT(::kvmesh::log::level::debug, __VA_ARGS__)
// An event of no particular severity.
#define KVMESH_LOG(...) KVMESH_INFO(__VA_ARGS__)
