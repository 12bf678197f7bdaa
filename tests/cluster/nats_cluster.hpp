// Three real nats-servers routed into one cluster on free loopback ports,
// started for a test and stopped after it.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cluster/nats.hpp"

#include "nats_server.hpp"

namespace kvmesh::test {

class nats_cluster {
 public:
  static constexpr int size = 3;

  // Starts the three servers and waits (a bounded time) until each accepts
  // clients and a message published on any node reaches a subscriber on
  // every other node; ready() says whether that happened.
  nats_cluster() {
    // All six ports are chosen while their sockets are still open, so the
    // kernel cannot hand the same port out twice.
    const std::vector<int> ports = free_ports(2 * size);
    for (int i = 0; i < size; ++i) {
      client_[i] = ports[2 * i];
      route_[i] = ports[2 * i + 1];
    }
    for (int i = 0; i < size; ++i)
      pid_[i] = start(i);
    ready_ = wait_accepting() && wait_routed();
  }
  ~nats_cluster() {
    for (int i = 0; i < size; ++i)
      stop(i);
  }
  nats_cluster(const nats_cluster&) = delete;
  nats_cluster& operator=(const nats_cluster&) = delete;

  bool ready() const { return ready_; }
  std::string url(int i) const {
    return "nats://127.0.0.1:" + std::to_string(client_.at(i));
  }
  // All client URLs, comma-separated, as a server list is usually written.
  std::string urls() const {
    std::string out;
    for (int i = 0; i < size; ++i)
      out += (i ? "," : "") + url(i);
    return out;
  }
  bool running(int i) const { return pid_.at(i) > 0 && accepting(client_[i]); }

  // SIGTERM and wait: clients of node i lose their connection at once and
  // fail over to the nodes the cluster advertised to them.
  void stop(int i) {
    if (pid_.at(i) <= 0) return;
    kill(pid_[i], SIGTERM);
    int status = 0;
    waitpid(pid_[i], &status, 0);
    pid_[i] = -1;
  }

 private:
  pid_t start(int i) const {
    std::string routes;
    for (int j = 0; j < size; ++j)
      if (j != i)
        routes += std::string(routes.empty() ? "" : ",") +
                  "nats://127.0.0.1:" + std::to_string(route_[j]);
    // argv is built before fork: the test process runs libnats threads, and
    // between fork and exec the child may only make async-signal-safe calls
    // (no allocation, no stdio).
    const std::vector<std::string> args{
        "nats-server",
        "-a",
        "127.0.0.1",
        "-p",
        std::to_string(client_[i]),
        "--cluster",
        "nats://127.0.0.1:" + std::to_string(route_[i]),
        "--cluster_name",
        "kvmesh-test",
        "--routes",
        routes};
    std::vector<char*> argv;
    for (const auto& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      // Gone with the test process even when that one crashes.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, STDOUT_FILENO);
      dup2(null, STDERR_FILENO);
      execvp(argv[0], argv.data());
      _exit(127);
    }
    return pid;
  }

  bool wait_accepting() const {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (;;) {
      bool all = true;
      for (int i = 0; i < size; ++i)
        all = all && accepting(client_[i]);
      if (all) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Accepting clients is not enough: routes form (and carry subscription
  // interest) a little later. Every node subscribes and every other node
  // publishes to it until all six directions have delivered.
  bool wait_routed() const {
    std::mutex mu;
    std::set<std::pair<int, int>> seen;  // (from, to)
    // Declared after `seen` and `mu`: the buses drain (and their handlers
    // finish) before what the handlers write to goes away.
    std::array<std::unique_ptr<nats_bus>, size> bus;
    for (int i = 0; i < size; ++i) {
      nats_options o;
      o.url = url(i);
      o.name = "kvmesh-cluster-probe";
      o.max_reconnect = 0;
      auto b = nats_bus::connect(o);
      if (!b) return false;
      bus[i] = std::move(*b);
      auto sub =
          bus[i]->subscribe(probe_subject(i), "", [&, i](nats_message m) {
            if (m.payload.size() != 1) return;
            std::lock_guard<std::mutex> g(mu);
            seen.emplace(m.payload[0], i);
          });
      if (!sub || !bus[i]->flush(std::chrono::seconds(2))) return false;
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    bool routed = false;
    while (!routed && std::chrono::steady_clock::now() < deadline) {
      for (int from = 0; from < size; ++from) {
        for (int to = 0; to < size; ++to)
          if (to != from)
            (void)bus[from]->publish(probe_subject(to),
                                     {static_cast<uint8_t>(from)});
        (void)bus[from]->flush(std::chrono::seconds(1));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::lock_guard<std::mutex> g(mu);
      routed = seen.size() == static_cast<size_t>(size * (size - 1));
    }
    return routed;
  }

  static std::string probe_subject(int to) {
    return "kvmesh.test.cluster.ready." + std::to_string(to);
  }

  static std::vector<int> free_ports(int n) {
    std::vector<int> fds;
    std::vector<int> ports;
    for (int i = 0; i < n; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = 0;
      bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
      socklen_t len = sizeof(a);
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
      fds.push_back(fd);
      ports.push_back(ntohs(a.sin_port));
    }
    for (int fd : fds)
      close(fd);
    return ports;
  }

  static bool accepting(int port) { return nats_server::accepting(port); }

  std::array<int, size> client_{};
  std::array<int, size> route_{};
  std::array<pid_t, size> pid_{-1, -1, -1};
  bool ready_ = false;
};

}  // namespace kvmesh::test
