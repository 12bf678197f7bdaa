// Tests of actors/admin: status of workers and routers, weights, drain.
#include "actors/admin.hpp"

#include "actors/index_shard.hpp"
#include "actors/router.hpp"
#include "actors/worker.hpp"
#include "fixture.hpp"

namespace kvmesh::test {
namespace {

class admin_test : public actor_fixture {
 protected:
  admin_test() {
    shard = track(*spawn_index_shard(*sys, index_shard_options{}));
    for (uint32_t i = 0; i < 2; ++i) {
      worker_options opt;
      opt.shards = {shard};
      opt.engine.block_tokens = 512;
      opt.engine.cache = {1024, 0, 0};
      opt.ledger.id = i;
      workers.push_back(track(*spawn_worker(*sys, opt)));
    }
    router_options ro;
    ro.workers = workers;
    r = track(sys->spawn(router, ro));
    admin_options ao;
    ao.workers = workers;
    ao.routers = {r};
    ao.shards = {shard};
    a = track(sys->spawn(admin, ao));
  }

  uint32_t route(uint64_t id, uint32_t output_tokens = 4) {
    route_request_msg req;
    req.id = id;
    req.blocks = {id * 100, id * 100 + 1, id * 100 + 2};
    req.input_tokens = 1536;
    req.output_tokens = output_tokens;
    auto d = ask<decision>(r, route_atom::value, req);
    EXPECT_TRUE(d->has_value() && **d);
    return d->has_value() && **d ? (**d)->worker : UINT32_MAX;
  }

  index_shard_actor shard;
  std::vector<worker_actor> workers;
  router_actor r;
  admin_actor a;
};

TEST_F(admin_test, lists_workers_and_routers) {
  route(1);
  auto ws =
      ask<std::vector<worker_status>>(a, get_atom::value, workers_atom::value);
  ASSERT_TRUE(ws->has_value() && **ws);
  ASSERT_EQ((**ws)->size(), 2u);
  EXPECT_EQ((**ws)->at(0).worker, 0u);
  EXPECT_EQ((**ws)->at(1).worker, 1u);
  EXPECT_EQ((**ws)->at(0).running + (**ws)->at(1).running, 1u);
  auto rs =
      ask<std::vector<router_status>>(a, get_atom::value, routers_atom::value);
  ASSERT_TRUE(rs->has_value() && **rs);
  ASSERT_EQ((**rs)->size(), 1u);
  EXPECT_EQ((**rs)->at(0).decisions, 1u);
  EXPECT_EQ((**rs)->at(0).workers, 2u);
}

TEST_F(admin_test, sets_weights_on_every_router) {
  price_config p;
  p.beta = 0.5;
  auto n = ask<uint32_t>(a, put_atom::value, weights_atom::value, p);
  ASSERT_TRUE(n->has_value() && **n);
  EXPECT_EQ(***n, 1u);
  auto w = ask<price_config>(a, get_atom::value, weights_atom::value);
  ASSERT_TRUE(w->has_value() && **w);
  EXPECT_DOUBLE_EQ((**w)->beta, 0.5);
}

TEST_F(admin_test, a_drained_worker_gets_nothing_until_undrained) {
  auto on = ask<bool>(a, put_atom::value, drain_atom::value, uint32_t{1}, true);
  ASSERT_TRUE(on->has_value() && **on);
  // Long outputs keep worker 0 busy for seconds of actor time.
  for (uint64_t id = 1; id <= 4; ++id)
    EXPECT_EQ(route(id, 2000), 0u) << "request " << id;
  auto ws =
      ask<std::vector<worker_status>>(a, get_atom::value, workers_atom::value);
  EXPECT_TRUE((**ws)->at(1).draining);
  ask<bool>(a, put_atom::value, drain_atom::value, uint32_t{1}, false);
  advance(std::chrono::milliseconds(1500));  // a heartbeat tells the router
  // Worker 0 still decodes four requests: the next goes to worker 1.
  EXPECT_EQ(route(5), 1u);
}

TEST_F(admin_test, shows_shards_and_a_prefixs_holders) {
  const uint32_t w = route(1);
  advance(std::chrono::seconds(1));  // the request runs; KV events flow
  auto ss =
      ask<std::vector<shard_status>>(a, get_atom::value, shards_atom::value);
  ASSERT_TRUE(ss->has_value() && **ss);
  ASSERT_EQ((**ss)->size(), 1u);
  EXPECT_EQ((**ss)->at(0).blocks, 3u);
  std::vector<uint64_t> prefix{100, 101};
  auto h = ask<std::vector<holder_match>>(a, query_atom::value, prefix);
  ASSERT_TRUE(h->has_value() && **h);
  ASSERT_EQ((**h)->size(), 1u);
  EXPECT_EQ((**h)->at(0).worker, w);
  EXPECT_EQ((**h)->at(0).gpu, 2u);
  auto none = ask<std::vector<holder_match>>(a, query_atom::value,
                                             std::vector<uint64_t>{});
  ASSERT_TRUE(none->has_value());
  EXPECT_FALSE(**none);
}

TEST_F(admin_test, draining_an_unknown_worker_is_an_error) {
  auto res =
      ask<bool>(a, put_atom::value, drain_atom::value, uint32_t{9}, true);
  ASSERT_TRUE(res->has_value());
  ASSERT_FALSE(**res);
  EXPECT_NE(sys->render((**res).error()).find("no worker 9"),
            std::string::npos);
}

}  // namespace
}  // namespace kvmesh::test
