// A real nats-server on a free loopback port, started for a test and
// stopped after it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace kvmesh::test {

class nats_server {
 public:
  // On `port`, or on a free one when 0 (a restart reuses the old port).
  explicit nats_server(int port = 0) {
    port_ = port ? port : free_port();
    pid_ = fork();
    if (pid_ == 0) {
      // The child: nats-server on loopback only, quiet.
      freopen("/dev/null", "w", stdout);
      freopen("/dev/null", "w", stderr);
      const std::string p = std::to_string(port_);
      execlp("nats-server", "nats-server", "-a", "127.0.0.1", "-p", p.c_str(),
             static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 100 && !accepting(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
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

 private:
  bool accepting() const {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    const bool ok =
        ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    return ok;
  }

  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvmesh::test
