// Tests of cluster/router_node: a whole mesh on a three-node NATS cluster
// that loses a node.
#include "cluster/router_node.hpp"

#include <cmath>

#include "mesh_fixture.hpp"
#include "messages/member_checks.hpp"

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

// An agent answering with impossible bids (each bad value in turn) wins
// nothing: every bid is refused and counted, and real traffic is decided by
// the honest workers.
TEST_F(router_node_test, forged_bids_are_refused_and_win_nothing) {
  start_mesh();
  worker_status beat9;
  beat9.worker = 9;
  beat9.capacity = 512;
  beat9.speed = 1;
  beat9.endpoint = "http://evil.example:6666";
  using mf = member_fault;
  const std::vector<std::pair<mf, std::function<void(bid&, uint32_t)>>> bad = {
      {mf::over_request, [](bid& b, uint32_t) { b.gpu = 4000000000u; }},
      {mf::negative, [](bid& b, uint32_t) { b.queued = -1e300; }},
      {mf::not_finite, [](bid& b, uint32_t) { b.queued = std::nan(""); }},
      {mf::speed, [](bid& b, uint32_t) { b.speed = 1e308; }},
      {mf::credit,
       [](bid& b, uint32_t) { b.gpu = 0, b.host = 1, b.c_host = 1e6; }}};
  uint64_t before[5];
  for (size_t k = 0; k < bad.size(); ++k)
    before[k] = member_refusals(member_message::bid, bad[k].first);
  std::atomic<uint64_t> seq{0};
  forged_agent evil(bus(), "evil", {beat9},
                    [&](const call_for_bids& cfb, uint32_t w) {
                      bid b;
                      b.worker = w;
                      b.capacity = 512;
                      b.gpu = static_cast<uint32_t>(cfb.request.blocks.size());
                      bad[seq++ % bad.size()].second(b, w);
                      return b;
                    });
  auto& c = bus();
  ASSERT_TRUE(eventually([&] {
    auto r = admin_request_call(c, subjects{}, "routers", {}, 1000ms);
    return r && r->routers.size() == 2 && r->routers[0].live_workers == 9 &&
           r->routers[1].live_workers == 9;
  }));
  route_client client(bus());
  const uint64_t sent = 300;
  for (uint64_t id = 1; id <= sent; ++id) {
    client.send(request(id, id % 20, 8));
    std::this_thread::sleep_for(2ms);
  }
  ASSERT_TRUE(eventually([&] { return client.decided() == sent; }, 20000ms))
      << client.decided() << " of " << sent;
  EXPECT_EQ(client.by_worker().count(9), 0u);
  EXPECT_EQ(evil.awards(), 0);
  ASSERT_GT(evil.calls(), 10) << "the forged agent was never asked";
  for (size_t k = 0; k < bad.size(); ++k)
    EXPECT_GT(member_refusals(member_message::bid, bad[k].first), before[k])
        << to_string(bad[k].first);
}

// Model pools over the wire: a request naming a model is decided among the
// workers announcing it, one naming none among all, and one naming a model
// nobody serves gets a decision saying so (a gateway's 404), with the
// client's own id echoed either way.
TEST_F(router_node_test, a_request_is_decided_in_its_models_pool) {
  start_shard(0, 1);
  start_agent("node-llama", 0, 4, {{"llama-3.1-8b", ""}});
  start_agent("node-qwen", 4, 4,
              {{"qwen2.5-7b", ""}, {"qwen-sql-lora", "qwen2.5-7b"}});
  start_router("r1");
  auto& c = bus();
  ASSERT_TRUE(eventually([&] {
    auto r = admin_request_call(c, subjects{}, "routers", {}, 1000ms);
    return r && r->routers.size() == 1 && r->routers[0].live_workers == 8;
  }));
  auto w = admin_request_call(c, subjects{}, "workers", {}, 1000ms);
  ASSERT_TRUE(w);
  for (const auto& s : w->workers)
    EXPECT_EQ(s.models.size(), s.worker < 4 ? 1u : 2u) << s.worker;
  auto route = [&](uint64_t id, const std::string& model) {
    auto r = request(id, id % 5, 8);
    r.model = model;
    r.client_id = "client-" + std::to_string(id);
    auto reply = c.request(subjects{}.route(), encode(r), 5000ms);
    EXPECT_TRUE(reply) << reply.err().message;
    auto d = reply ? decode<decision>(*reply) : expected<decision>(reply.err());
    EXPECT_TRUE(d) << d.err().message;
    return d ? *d : decision{};
  };
  for (uint64_t id = 1; id <= 60; ++id) {
    const std::string model = id % 3 == 0   ? "llama-3.1-8b"
                              : id % 3 == 1 ? "qwen-sql-lora"
                                            : "";
    const decision d = route(id, model);
    ASSERT_TRUE(d.error.empty()) << d.error;
    EXPECT_EQ(d.client_id, "client-" + std::to_string(id));
    if (model == "llama-3.1-8b") {
      EXPECT_LT(d.worker, 4u) << id;
    } else if (model == "qwen-sql-lora") {
      EXPECT_GE(d.worker, 4u) << id;
    }
  }
  const decision d = route(99, "mistral-7b");
  EXPECT_EQ(d.failure, route_failure::unknown_model) << d.error;
  EXPECT_NE(d.error.find("unknown model 'mistral-7b'"), std::string::npos)
      << d.error;
  EXPECT_EQ(d.client_id, "client-99");
}

}  // namespace
}  // namespace kvmesh::test
