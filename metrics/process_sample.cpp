// /proc/self/stat, /proc/stat's boot time, /proc/self/fd and the fd limit.
#include "metrics/process_sample.hpp"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kvmesh::metrics {

namespace {

error unreadable(const std::string& what) {
  return make_error(ec::io_error, "process metrics: cannot read " + what);
}

}  // namespace

expected<process_sample> read_process_sample() {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (!std::getline(stat, line)) return unreadable("/proc/self/stat");
  // The command name (field 2) may hold spaces: fields count from its ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return unreadable("/proc/self/stat");
  std::istringstream in(line.substr(close + 2));
  std::vector<std::string> f;  // f[0] is field 3 (state)
  for (std::string w; in >> w;)
    f.push_back(w);
  if (f.size() < 22) return unreadable("/proc/self/stat");
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  process_sample s;
  try {
    s.cpu_seconds = (std::stod(f[11]) + std::stod(f[12])) / tick;  // 14, 15
    const double start_ticks = std::stod(f[19]);                    // 22
    s.virtual_bytes = std::stod(f[20]);                             // 23
    s.resident_bytes = std::stod(f[21]) * page;                     // 24
    std::ifstream boot("/proc/stat");
    double btime = 0;
    for (std::string l; std::getline(boot, l);)
      if (l.rfind("btime ", 0) == 0) btime = std::stod(l.substr(6));
    if (btime == 0) return unreadable("/proc/stat (btime)");
    s.start_time_seconds = btime + start_ticks / tick;
  } catch (const std::exception&) {
    return unreadable("/proc/self/stat");
  }
  DIR* d = opendir("/proc/self/fd");
  if (!d) return unreadable("/proc/self/fd");
  size_t n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  s.open_fds = static_cast<double>(n > 0 ? n - 1 : 0);  // less opendir's own
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0)
    s.max_fds = lim.rlim_cur == RLIM_INFINITY
                    ? -1
                    : static_cast<double>(lim.rlim_cur);
  return s;
}

}  // namespace kvmesh::metrics
