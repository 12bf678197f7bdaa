// A NATS connection run by one Asio io_context (libnats' external event
// loop): its socket is read and written on that context's thread and the
// messages of its subscriptions are handed to their handlers there, with
// no libnats reader or delivery thread between the socket and the handler.
// Written by hand because libnats ships adapters for libuv and libevent
// only; it saves the gateway two thread wake-ups per routed request.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/nats.hpp"
#include "core/error.hpp"

namespace boost::asio {
class io_context;
}

namespace kvmesh::gateway {

class nats_loop {
 public:
  // A message on a subscribed subject; the bytes live for the call only.
  using handler = std::function<void(std::string_view subject,
                                     const uint8_t* data, size_t size)>;

  // Connects (blocking the caller up to opt.connect_timeout_ms) and hands
  // the connection to `io`. TLS is refused (ec::invalid_argument): its
  // records may hold bytes the socket no longer shows, which an
  // edge-triggered loop would not see; such a connection keeps libnats'
  // own threads.
  static expected<std::unique_ptr<nats_loop>> connect(
      const nats_options& opt, boost::asio::io_context& io);
  // Closes. Call on io's thread or once nothing runs io any more, and
  // before io is destroyed.
  ~nats_loop();
  nats_loop(const nats_loop&) = delete;
  nats_loop& operator=(const nats_loop&) = delete;

  // Subscribes; `h` is called on io's thread (it must not subscribe).
  // Call on io's thread, or before io runs.
  status subscribe(const std::string& subject, handler h);
  // Queues a message; it is written on io's thread once the current
  // handler returns, or up to `may_wait` later, so that messages published
  // meanwhile share its write (and the receivers' wake-ups). A publish
  // that may not wait sends whatever is held with it. Call on io's thread.
  status publish(const std::string& subject,
                 const std::vector<uint8_t>& payload, const std::string& reply,
                 std::chrono::milliseconds may_wait = {});
  bool connected() const;

  struct state;

 private:
  nats_loop() = default;
  std::shared_ptr<state> st_;
  void* holder_ = nullptr;  // what libnats' callbacks are given
};

}  // namespace kvmesh::gateway
