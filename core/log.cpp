// The log's formatter and its one sink, stderr, behind a lock.
#include "core/log.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace kvmesh::log {

namespace detail {
std::atomic<int> threshold{static_cast<int>(level::info)};
}  // namespace detail

namespace {

struct settings {
  std::mutex mu;  // guards everything below and serializes the writes
  format fmt = format::plain;
  std::string proc;
  std::function<void(std::string_view)> sink;
};

settings& state() {
  static settings* s = new settings();  // never destroyed: logs at exit work
  return *s;
}

constexpr const char* level_names[] = {"error", "warn", "info", "debug"};
constexpr const char* format_names[] = {"plain", "text", "json"};

void write_all(int fd, const char* data, size_t len) {
  while (len > 0) {
    const ssize_t n = ::write(fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere left to say so
    data += n;
    len -= static_cast<size_t>(n);
  }
}

// Text and plain lines: only line breaks and other control characters
// are escaped; the rest is shown as it came.
void append_text(std::string& out, std::string_view s) {
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
}

// Length of the UTF-8 sequence at s[i], or 0 when it is not one (bad lead
// byte, truncated, overlong, a surrogate, past U+10FFFF).
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  uint32_t cp = 0;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

}  // namespace

const char* to_string(level l) {
  return level_names[static_cast<int>(l)];
}

const char* to_string(format f) {
  return format_names[static_cast<int>(f)];
}

expected<level> parse_level(std::string_view text) {
  for (int i = 0; i < 4; ++i)
    if (text == level_names[i]) return static_cast<level>(i);
  return make_error(ec::parse_error, "unknown log level '" + std::string(text) +
                                         "' (want error, warn, info or debug)");
}

expected<format> parse_format(std::string_view text) {
  // plain is the commands' own, not a choice for a process's log.
  if (text == "text") return format::text;
  if (text == "json") return format::json;
  return make_error(
      ec::parse_error,
      "unknown log format '" + std::string(text) + "' (want text or json)");
}

std::string timestamp(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs =
      static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  const int milli = static_cast<int>(ms - int64_t{secs} * 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, milli);
  return buf;
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    const size_t n = utf8_length(s, i);
    if (n == 0) {
      out += "\\ufffd";
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

std::string format_line(const event& e, format f) {
  const std::string_view proc =
      e.proc.empty() ? std::string_view("kvmesh") : std::string_view(e.proc);
  std::string out;
  out.reserve(e.msg.size() + proc.size() + 48);
  switch (f) {
    case format::plain:
      // "kvmesh route: ..." as the commands always wrote; a person reads
      // it, so line breaks stay.
      out += "kvmesh";
      if (!e.proc.empty()) {
        out += ' ';
        out += e.proc;
      }
      out += ": ";
      out += e.msg;
      break;
    case format::text:
      out += timestamp(e.time);
      out += ' ';
      out += to_string(e.lvl);
      out += ' ';
      append_text(out, proc);
      out += ": ";
      append_text(out, e.msg);
      break;
    case format::json:
      out += "{\"ts\":\"";
      out += timestamp(e.time);
      out += "\",\"level\":\"";
      out += to_string(e.lvl);
      out += "\",\"proc\":\"";
      out += json_escape(proc);
      out += "\",\"msg\":\"";
      out += json_escape(e.msg);
      out += "\"}";
      break;
  }
  out += '\n';
  return out;
}

void set_level(level l) {
  detail::threshold.store(static_cast<int>(l), std::memory_order_relaxed);
}

level current_level() {
  return static_cast<level>(detail::threshold.load(std::memory_order_relaxed));
}

void set_format(format f) {
  std::lock_guard<std::mutex> guard(state().mu);
  state().fmt = f;
}

format current_format() {
  std::lock_guard<std::mutex> guard(state().mu);
  return state().fmt;
}

void set_proc(std::string proc) {
  std::lock_guard<std::mutex> guard(state().mu);
  state().proc = std::move(proc);
}

void set_sink(std::function<void(std::string_view)> sink) {
  std::lock_guard<std::mutex> guard(state().mu);
  state().sink = std::move(sink);
}

void write(level l, std::string_view msg) {
  if (!enabled(l)) return;
  event e;
  e.time = std::chrono::system_clock::now();
  e.lvl = l;
  e.msg = std::string(msg);
  settings& s = state();
  std::lock_guard<std::mutex> guard(s.mu);
  e.proc = s.proc;
  const std::string line = format_line(e, s.fmt);
  if (s.sink)
    s.sink(line);
  else
    write_all(STDERR_FILENO, line.data(), line.size());
}

void writef(level l, const char* fmt, ...) {
  if (!enabled(l)) return;
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  va_list again;
  va_copy(again, ap);
  const int n = std::vsnprintf(small, sizeof(small), fmt, ap);
  va_end(ap);
  if (n < 0) {
    va_end(again);
    write(l, fmt);  // a bad format: at least what was meant
    return;
  }
  if (static_cast<size_t>(n) < sizeof(small)) {
    va_end(again);
    write(l, std::string_view(small, static_cast<size_t>(n)));
    return;
  }
  std::string big(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(big.data(), big.size(), fmt, again);
  va_end(again);
  big.resize(static_cast<size_t>(n));
  write(l, big);
}

}  // namespace kvmesh::log

namespace kvmesh {

void log_line(const char* fmt, ...) {
  if (!log::enabled(log::level::info)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n < 0) return;
  log::write(log::level::info,
             std::string_view(buf, std::min<size_t>(n, sizeof(buf) - 1)));
}

}  // namespace kvmesh
