// Raw NATS baselines for `kvmesh bench`: request/reply and scatter-gather
// latencies over nats_bus alone, the floor under kvmesh's own messaging.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

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

}  // namespace kvmesh
