// The JetStream writer that does not wait: publishes in flight, each
// answered once with its stream sequence or the error.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/nats.hpp"
#include "core/error.hpp"

struct __jsCtx;

namespace kvmesh {

// JetStream publishes sent without waiting for the server's ack: many in
// flight, where js_Publish costs a round trip each. Each publish's
// `answer` runs once, with the stream sequence the server stored it at or
// the error (ec::conflict: `only_new` and the subject had a message), on a
// libnats thread (it must not block), or on the caller's when it could not
// be sent. Callable from any thread. Destroying the writer waits up to a
// second for the answers still due and drops the rest: their `answer`
// never runs.
class js_writer {
 public:
  using answer = std::function<void(expected<uint64_t>)>;
  // `what` names the writer in its errors ("stream S", "bucket B").
  static expected<std::unique_ptr<js_writer>> open(nats_bus& bus,
                                                   std::string what);
  ~js_writer();
  js_writer(const js_writer&) = delete;
  js_writer& operator=(const js_writer&) = delete;

  // `stream`, unless empty: refused unless that stream stores it.
  void publish(const std::string& subject, const std::vector<uint8_t>& payload,
               bool only_new, const std::string& stream, answer done);

  struct pending;  // its publishes in flight (js_writer.cpp)

 private:
  js_writer() = default;
  __jsCtx* js_ = nullptr;  // its pub-ack handler is the context's
  pending* p_ = nullptr;   // that handler's closure
};

}  // namespace kvmesh
