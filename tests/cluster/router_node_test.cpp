// Tests of cluster/router_node: a whole mesh on a three-node NATS cluster
// that loses a node.
#include "cluster/router_node.hpp"

#include "mesh_fixture.hpp"

namespace kvmesh::test {
namespace {

// The mesh fixture under this file's suite name.
class router_node_test : public mesh_test {};

TEST_F(router_node_test, a_three_node_nats_cluster_routes_and_survives_a_node) {
  server_.reset();
  cluster_ = std::make_unique<test::nats_cluster>();
  ASSERT_TRUE(cluster_->ready());
  // Every role on its own node, as processes on three hosts would be; the
  // list lets each fail over.
  auto on = [&](int i) { url_ = cluster_->url(i) + "," + cluster_->urls(); };
  on(0);
  start_shard(0, 2);
  start_shard(1, 2);
  on(1);
  start_agent("node-a", 0, 4);
  on(2);
  start_agent("node-b", 4, 4);
  on(1);
  start_router("r1");
  on(2);
  start_router("r2");
  on(0);
  auto& admin = bus();
  ASSERT_TRUE(eventually([&] {
    auto w = admin_request_call(admin, subjects{}, "workers", {}, 1000ms);
    return w && w->workers.size() == 8;
  }));
  route_client client(bus());
  uint64_t id = 1;
  for (; id <= 300; ++id)
    client.send(request(id, id % 20, 8));
  ASSERT_TRUE(eventually([&] { return client.decided() == 300; }, 10000ms))
      << client.decided();
  // Node 2 goes: node-b and r2 reconnect elsewhere and carry on.
  cluster_->stop(2);
  ASSERT_TRUE(eventually(
      [&] {
        auto r = route_once(admin, subjects{}, request(10000, 1, 8), 500ms);
        return static_cast<bool>(r);
      },
      10000ms));
  for (; id <= 600; ++id)
    client.send(request(id, id % 20, 8));
  ASSERT_TRUE(eventually([&] { return client.decided() == 600; }, 15000ms))
      << client.decided();
  // Every router lists all 8, none gone, once the moved agent's beats
  // reach it (whichever router answers: asked until both have). A router
  // whose first beats from node-b were lost in the move may lag a beat.
  size_t listed = 0, live = 0;
  EXPECT_TRUE(eventually(
      [&] {
        for (int i = 0; i < 4; ++i) {
          auto w = admin_request_call(admin, subjects{}, "workers", {}, 1000ms);
          if (!w) return false;
          listed = w->workers.size();
          live = std::count_if(w->workers.begin(), w->workers.end(),
                               [](const worker_status& s) { return !s.gone; });
          if (listed != 8 || live != 8) return false;
        }
        return true;
      },
      10000ms))
      << listed << " workers listed, " << live << " not gone";
}

}  // namespace
}  // namespace kvmesh::test
