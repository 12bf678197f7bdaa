// A process's HTTP endpoint: GET /metrics (prometheus-cpp's pull exposer,
// on Debian's civetweb) and the probes GET /healthz and GET /readyz.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/collectable.h>

#include "core/error.hpp"

namespace prometheus {
class Exposer;
}

namespace kvmesh::metrics {

struct endpoint_options {
  // A numeric address or a host name to bind: 0.0.0.0 (every IPv4
  // interface), 127.0.0.1, ::, ...
  std::string address = "0.0.0.0";
  uint16_t port = 0;  // 0: any free port (port() says which)
};

// What is keeping the process from serving: empty when it is ready.
using readiness_fn = std::function<std::vector<std::string>()>;
// Told the status code of every answer (for a counter).
using answered_fn = std::function<void(int status)>;

// /metrics: what `metrics` collects, in the text format 0.0.4.
// /healthz: 200 while the process runs and answers (liveness).
// /readyz: 200 when `ready` names nothing, else 503 with what it names,
// one per line (readiness); GET and HEAD only (405). Any other path 404.
// Served by a few threads: a slow scrape does not hold a probe.
class endpoint {
 public:
  // Binds and listens before returning, so that a port in use or a bad
  // address is an error here, naming the address.
  static expected<std::unique_ptr<endpoint>> start(
      const endpoint_options& opt,
      std::shared_ptr<prometheus::Collectable> metrics, readiness_fn ready,
      answered_fn answered = {});

  // Stops serving: requests in progress end first.
  ~endpoint();
  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;

  uint16_t port() const { return port_; }

  struct probes;  // what the probes answer with, shared with civetweb's

 private:
  endpoint() = default;
  std::shared_ptr<prometheus::Collectable> metrics_;
  std::shared_ptr<probes> probes_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  uint16_t port_ = 0;
};

}  // namespace kvmesh::metrics
