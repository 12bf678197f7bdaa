// Log lines on stderr, written whole so that threads do not interleave.
#include "core/log.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace kvmesh {

void log_line(const char* fmt, ...) {
  char buf[1024];
  int n = std::snprintf(buf, sizeof(buf), "kvmesh[%d] ",
                        static_cast<int>(getpid()));
  if (n < 0) return;
  va_list ap;
  va_start(ap, fmt);
  const int m = std::vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
  va_end(ap);
  if (m < 0) return;
  size_t len = std::min<size_t>(n + m, sizeof(buf) - 2);
  buf[len++] = '\n';
  // One write(2) per line: stderr is unbuffered, fprintf could split it.
  (void)!write(STDERR_FILENO, buf, len);
}

}  // namespace kvmesh
