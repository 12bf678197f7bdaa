// The process_* series every Prometheus client exports, read from Linux's
// /proc/self (the names and units of Prometheus' process collector).
#pragma once

#include "core/error.hpp"

namespace kvmesh::metrics {

struct process_sample {
  double cpu_seconds = 0;         // user + system
  double resident_bytes = 0;      // RSS
  double virtual_bytes = 0;       // address space
  double start_time_seconds = 0;  // since the Unix epoch
  double open_fds = 0;
  double max_fds = 0;  // the soft RLIMIT_NOFILE
};

// This process now; an io_error naming the file that could not be read.
expected<process_sample> read_process_sample();

}  // namespace kvmesh::metrics
