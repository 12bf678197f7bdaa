// The gateway's mesh over NATS: model pools from the workers' heartbeats,
// route requests to the routers, each server thread's on a connection of
// its own whose decisions come back on that thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cluster/nats.hpp"
#include "cluster/subjects.hpp"
#include "core/error.hpp"
#include "gateway/mesh.hpp"

namespace kvmesh::gateway {

struct nats_mesh_options {
  subjects subj;
  // Unique per gateway process: its decisions come on
  // _INBOX.gateway.<name>.<n>.
  std::string name = "gateway";
  // How long a decision may take (a router waits out silent bidders and
  // refused awards within it).
  std::chrono::milliseconds timeout{5000};
  // A worker unheard for this long is out of models() (the routers' own
  // rule: 2.5 heartbeats of 1 s).
  std::chrono::milliseconds stale{2500};
  // Workers it keeps at most (limits.max_workers): a flood of forged
  // heartbeats cannot grow it past this.
  size_t max_workers = 16384;
  // The settings of the connection each server thread opens for its own
  // routes (bind_thread: decisions come back on the thread that asked, on
  // _INBOX.gateway.<name>.<thread>.<n>). None, or a connection that
  // cannot be opened (TLS, ...): the thread's routes use the bus.
  std::optional<nats_options> thread_connection;
};

class nats_mesh final : public gateway_mesh {
 public:
  static expected<std::unique_ptr<nats_mesh>> start(nats_bus& bus,
                                                    const nats_mesh_options& o);
  // Unsubscribes; routes still awaited are answered with an error.
  ~nats_mesh() override;
  // Rebuilt when a heartbeat changes a pool, and at least every 250 ms
  // (a worker falls silent without a heartbeat saying so).
  pool_list models() const override;
  void route(route_ask ask,
             std::function<void(expected<route_answer>)> done) override;
  bool ready() const override;
  // On a thread with a connection of its own (bind_thread): its reporter
  // tells the worker's agent (request_progress).
  std::unique_ptr<engine_visit> visit(const route_answer& won) override;
  std::shared_ptr<void> bind_thread(boost::asio::io_context& io) override;

  struct impl;

 private:
  explicit nats_mesh(std::shared_ptr<impl> p);
  std::shared_ptr<impl> impl_;
};

}  // namespace kvmesh::gateway
