// Child processes and signals on POSIX (Linux): fork/exec, reaping, ports.
#include "harness/process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace kvmesh::harness {

sigset_t block_signals(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals)
    sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

int wait_for_stop() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  // A burst (a shard that paused, a re-announce) frees what it allocated
  // all over glibc's per-thread arenas, which keep it resident: an index
  // shard's RSS went from 126 to 275 MB in 12 minutes with 150 MB of it
  // free inside the arenas. Trimming now and then hands those pages back.
  const timespec period{5, 0};
  for (;;) {
    const int sig = sigtimedwait(&set, nullptr, &period);
    if (sig == SIGINT || sig == SIGTERM) return sig;
    if (sig < 0 && errno == EAGAIN) malloc_trim(0);
  }
}

std::string describe_exit(int wait_status) {
  if (WIFEXITED(wait_status))
    return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) +
           ")";
  }
  return "ended (wait status " + std::to_string(wait_status) + ")";
}

expected<pid_t> spawn_child(const std::vector<std::string>& argv,
                            const child_options& opt) {
  if (argv.empty()) return make_error(ec::invalid_argument, "empty command");
  // Everything the child needs is built before fork: between fork and exec
  // only async-signal-safe calls are allowed.
  std::vector<char*> args;
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Ours, with opt.env's names replaced.
  std::vector<char*> envp;
  if (!opt.env.empty()) {
    auto name_of = [](const char* e) {
      const char* eq = std::strchr(e, '=');
      return std::string(e, eq ? static_cast<size_t>(eq - e) : std::strlen(e));
    };
    for (char** e = environ; *e; ++e) {
      const std::string name = name_of(*e);
      if (std::none_of(
              opt.env.begin(), opt.env.end(),
              [&](const std::string& o) { return name_of(o.c_str()) == name; }))
        envp.push_back(*e);
    }
    for (const auto& o : opt.env)
      envp.push_back(const_cast<char*>(o.c_str()));
    envp.push_back(nullptr);
  }
  const std::string failed = "kvmesh: cannot start " + argv[0] + ": ";
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0)
    return make_error(ec::io_error,
                      "fork for " + argv[0] + ": " + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    if (opt.parent_death_signal != 0) {
      prctl(PR_SET_PDEATHSIG, opt.parent_death_signal);
      // The parent died before prctl took effect: nobody would stop us.
      if (getppid() != parent) _exit(1);
    }
    // Exec failures are reported on the parent's stderr, even when the
    // child's output goes to a file.
    int err_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    if (err_fd < 0) err_fd = STDERR_FILENO;
    if (!opt.output.empty()) {
      const int fd =
          open(opt.output.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd < 0) {
        const char* why = std::strerror(errno);
        (void)!write(err_fd, failed.data(), failed.size());
        (void)!write(err_fd, opt.output.data(), opt.output.size());
        (void)!write(err_fd, ": ", 2);
        (void)!write(err_fd, why, std::strlen(why));
        (void)!write(err_fd, "\n", 1);
        _exit(127);
      }
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      if (fd > STDERR_FILENO) close(fd);
    }
    // Ignored and blocked signals survive exec: undo what we set up.
    for (int s : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGHUP, SIGQUIT})
      signal(s, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (envp.empty())
      execvp(args[0], args.data());
    else
      execvpe(args[0], args.data(), envp.data());
    const char* why = std::strerror(errno);
    (void)!write(err_fd, failed.data(), failed.size());
    (void)!write(err_fd, why, std::strlen(why));
    (void)!write(err_fd, "\n", 1);
    _exit(127);
  }
  // Also here: the parent may signal the group before the child ran.
  setpgid(pid, pid);
  return pid;
}

void stop_children(std::vector<pid_t>& pids, std::chrono::milliseconds grace,
                   std::vector<int>& statuses, int sig) {
  statuses.resize(pids.size(), 0);
  for (pid_t p : pids)
    if (p > 0) kill(p, sig);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (true) {
    bool left = false;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] <= 0) continue;
      int st = 0;
      const pid_t r = waitpid(pids[i], &st, WNOHANG);
      if (r == pids[i] || (r < 0 && errno == ECHILD)) {
        statuses[i] = r == pids[i] ? st : 0;
        pids[i] = -1;
      } else {
        left = true;
      }
    }
    if (!left || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if (pids[i] <= 0) continue;
    kill(pids[i], SIGKILL);
    int st = 0;
    while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR) {
    }
    statuses[i] = -1;
    pids[i] = -1;
  }
}

expected<std::string> self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec)
    return make_error(
        ec::io_error,
        "cannot find this program (/proc/self/exe): " + ec.message());
  return p.string();
}

namespace {

// A socket bound to 127.0.0.1:`port` (0: the kernel's choice), or -1.
int bind_loopback(int port, int& bound) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  bound = ntohs(a.sin_port);
  return fd;
}

}  // namespace

expected<int> free_loopback_port(uint32_t run) {
  run = std::max(run, 1u);
  for (int attempt = 0; attempt < 100; ++attempt) {
    int first = 0;
    const int fd = bind_loopback(0, first);
    if (fd < 0)
      return make_error(ec::io_error, std::string("no free loopback port: ") +
                                          std::strerror(errno));
    std::vector<int> fds{fd};
    bool free = first + run - 1 <= 65535;
    for (uint32_t i = 1; free && i < run; ++i) {
      int got = 0;
      const int next = bind_loopback(first + static_cast<int>(i), got);
      free = next >= 0;
      if (free) fds.push_back(next);
    }
    for (int f : fds)
      close(f);
    if (free) return first;
  }
  return make_error(ec::io_error, "no " + std::to_string(run) +
                                      " consecutive free loopback ports");
}

bool loopback_accepting(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok =
      ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

expected<std::string> make_temp_dir(const std::string& tag) {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string t = (base / (tag + "-XXXXXX")).string();
  if (!mkdtemp(t.data()))
    return make_error(ec::io_error, "cannot make a temporary directory " + t +
                                        ": " + std::strerror(errno));
  return t;
}

std::string file_tail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last)
    out += l + "\n";
  return out;
}

double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return -1;
  // The command name (field 2) may hold spaces: count fields after it.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream rest(stat.substr(paren + 1));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  const long ticks = sysconf(_SC_CLK_TCK);
  return ticks > 0
             ? static_cast<double>(utime + stime) / static_cast<double>(ticks)
             : -1;
}

temp_dir_guard::~temp_dir_guard() {
  std::error_code ec;
  if (!path.empty()) std::filesystem::remove_all(path, ec);
}

}  // namespace kvmesh::harness
