// A real nats-server on a free loopback port, started for a test and
// stopped after it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace kvmesh::test {

class nats_server {
 public:
  // On `port`, or on a free one when 0 (a restart reuses the old port).
  explicit nats_server(int port = 0) { launch(port, {}); }
  // With JetStream, storing in `jetstream_dir` (see temp_dir); a restart on
  // the same port and directory finds the streams again.
  nats_server(int port, std::string jetstream_dir) {
    launch(port, std::move(jetstream_dir));
  }
  // With the configuration in file `config` (authorization, TLS...); the
  // port and loopback address given here override the file's.
  struct config_file {
    std::string path;
  };
  explicit nats_server(config_file config) {
    config_ = std::move(config.path);
    launch(0, {});
  }
  ~nats_server() { stop(); }

  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  bool running() const { return pid_ > 0 && accepting(); }
  // Freezes (SIGSTOP) or thaws (SIGCONT) the server: connections stay
  // open and nothing is answered meanwhile.
  void freeze(bool on) {
    if (pid_ > 0) kill(pid_, on ? SIGSTOP : SIGCONT);
  }
  std::string url() const {
    return "nats://127.0.0.1:" + std::to_string(port_);
  }
  int port() const { return port_; }

  // A loopback port nobody listens on right now.
  static int free_port() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    close(fd);
    return ntohs(a.sin_port);
  }

  // Whether something listens on loopback `port`.
  static bool accepting(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool ok =
        ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    return ok;
  }

 private:
  void launch(int port, std::string jetstream_dir) {
    port_ = port ? port : free_port();
    pid_ = fork();
    if (pid_ == 0) {
      // The child: nats-server on loopback only, quiet, and gone with the
      // test process even when that one crashes.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      freopen("/dev/null", "w", stdout);
      freopen("/dev/null", "w", stderr);
      const std::string p = std::to_string(port_);
      if (!config_.empty())
        execlp("nats-server", "nats-server", "-c", config_.c_str(), "-a",
               "127.0.0.1", "-p", p.c_str(), static_cast<char*>(nullptr));
      if (jetstream_dir.empty())
        execlp("nats-server", "nats-server", "-a", "127.0.0.1", "-p", p.c_str(),
               static_cast<char*>(nullptr));
      else
        execlp("nats-server", "nats-server", "-a", "127.0.0.1", "-p", p.c_str(),
               "-js", "-sd", jetstream_dir.c_str(),
               static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 100 && !accepting(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  bool accepting() const { return accepting(port_); }

  int port_ = 0;
  pid_t pid_ = -1;
  std::string config_;
};

// A fresh directory under the system temp dir (mkdtemp), removed with
// everything in it when this goes; path() is empty if it could not be made.
class temp_dir {
 public:
  temp_dir() {
    std::error_code ec;
    std::filesystem::path base = std::filesystem::temp_directory_path(ec);
    if (ec) base = "/tmp";
    std::string t = (base / "kvmesh-test-XXXXXX").string();
    if (mkdtemp(t.data())) path_ = t;
  }
  ~temp_dir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kvmesh::test
