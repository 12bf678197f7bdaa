// The project's log lines: one line each on stderr, "kvmesh[pid] subject
// verb object", safe from any thread.
#pragma once

#include <cstdarg>

namespace kvmesh {

// printf-style; a newline is added. Lines from several threads do not mix.
void log_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace kvmesh

#define KVMESH_LOG(...) ::kvmesh::log_line(__VA_ARGS__)
