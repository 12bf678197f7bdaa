// Raw NATS baselines for `kvmesh bench`: request/reply and scatter-gather
// latencies over nats_bus alone, the floor under kvmesh's own messaging.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "cluster/nats.hpp"
#include "core/error.hpp"

namespace kvmesh {

// Latencies in microseconds over `samples` measured rounds (warm-up rounds
// excluded); percentiles are nearest-rank.
//
// With an `interval` above zero, round i starts no earlier than i intervals
// after the first (at once when late): the threads on both ends then sleep
// between rounds as they do in a mesh routing at that rate, and each round
// pays for waking them. Zero runs the rounds back to back, the threads hot.
struct baseline_result {
  uint64_t samples = 0;
  double p50_us = 0;
  double p99_us = 0;
  double mean_us = 0;
};

// One responder (its own connection) echoes a reply of `payload_bytes` to a
// request of `payload_bytes`; one requester (its own connection) measures
// sequential round trips. A round trip that is not answered within 1 s, a
// failed connect or zero samples is an error value.
expected<baseline_result> request_reply_latency(
    const nats_options& o, size_t payload_bytes, size_t samples,
    std::chrono::microseconds interval = {});

// `fanout` responders, each on its own connection as separate workers would
// be, subscribe to one subject and each answer a request of `request_bytes`
// with `reply_bytes`. The requester publishes one request with a reply
// inbox of its own and measures until all `fanout` replies have arrived.
// A sample not complete within 1 s, more replies than responders (another
// run sharing the subjects), a failed connect, zero fanout or zero samples
// is an error value.
expected<baseline_result> scatter_gather_latency(
    const nats_options& o, size_t fanout, size_t request_bytes,
    size_t reply_bytes, size_t samples,
    std::chrono::microseconds interval = {});

// Scatter-gather rounds started whenever the caller chooses, several in
// flight at once: run at a trace's arrival instants while the mesh routes
// that trace, they meet the same bursts and the same busy host as the
// auctions, where rounds before or after the run meet neither. Responders
// and requester as in scatter_gather_latency.
class scatter_gather_rounds {
 public:
  // Connects the `fanout` responders and the requester; a failed connect
  // or subscription, or zero fanout, is an error value.
  static expected<std::unique_ptr<scatter_gather_rounds>> open(
      const nats_options& o, size_t fanout, size_t request_bytes,
      size_t reply_bytes);
  ~scatter_gather_rounds();

  // Publishes a round now and returns: its replies are counted as they
  // come. A failed publish is remembered for finish().
  void start();
  // Waits up to `grace` for the rounds in flight, then their latencies. A
  // round missing replies, a reply beyond the fan-out, a failed publish or
  // no rounds at all is an error value.
  expected<baseline_result> finish(std::chrono::milliseconds grace);

 private:
  struct impl;
  explicit scatter_gather_rounds(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvmesh
