// Tests of cluster/node_base: what a node made is stopped when its start
// fails, and a subject no one batches to drops batches whole.
#include "cluster/node_base.hpp"

#include "mesh_fixture.hpp"

namespace kvmesh::test {
namespace {

// The mesh fixture under this file's suite name.
class node_base_test : public mesh_test {};

// A start that fails half way stops what it made: here the second of two
// external workers cannot be made, and the first one is stopped.
TEST_F(node_base_test, a_failed_start_stops_what_it_made) {
  agent_options o;
  o.mesh = mesh();
  o.name = "node-x";
  o.external = {0, 1};
  std::vector<engine_worker_actor> made;
  o.spawn_external =
      [&](uint32_t id, listener_actor events) -> expected<engine_worker_actor> {
    if (id == 1) return make_error(ec::invalid_argument, "no engine");
    engine_worker_options wo;
    wo.state.ledger.id = id;
    wo.state.gpu_blocks = 512;
    wo.listener = events;
    auto w = spawn_engine_worker(*sys_, wo);
    if (w) made.push_back(*w);
    return w;
  };
  auto a = agent_node::start(*sys_, bus(), o);
  ASSERT_FALSE(a);
  EXPECT_EQ(a.err().message, "no engine");
  ASSERT_EQ(made.size(), 1u);
  caf::scoped_actor waiter{*sys_};
  waiter->monitor(made[0]);
  bool down = false;
  waiter->receive([&](const caf::down_msg&) { down = true; },
                  caf::after(std::chrono::seconds(5)) >> [] {});
  EXPECT_TRUE(down) << "the worker outlived the failed start";
}

// A subject no one batches to (the ADMIN's verbs) drops a batch whole: a
// batch could carry a verb the sender's permissions refuse.
TEST_F(node_base_test, a_single_subject_drops_batches) {
  auto& b = bus();
  detail::node_base node;
  node.bus = &b;
  auto heard = std::make_shared<std::atomic<int>>(0);
  auto to = sys_->spawn([heard](caf::event_based_actor*) -> caf::behavior {
    return {[heard](nats_atom, const std::string&, const std::string&,
                    const bytes&) { ++*heard; }};
  });
  node.actors.push_back(to);
  ASSERT_TRUE(node.listen_single("test.single.>", "", to, admission{}));
  ASSERT_TRUE(b.flush(2000ms));
  auto& c = bus();
  ASSERT_TRUE(c.publish("test.single.batch", {1}));
  ASSERT_TRUE(c.publish("test.single.one", {2}));
  ASSERT_TRUE(eventually([&] { return heard->load() >= 1; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(heard->load(), 1);
  node.stop();
  EXPECT_TRUE(node.subs.empty());
  EXPECT_TRUE(node.actors.empty());
  caf::scoped_actor waiter{*sys_};
  waiter->wait_for(to);
}

}  // namespace
}  // namespace kvmesh::test
