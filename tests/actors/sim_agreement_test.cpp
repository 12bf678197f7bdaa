// The actor mesh and `kvmesh sim` award the same workers for the same trace,
// seed and configuration: they share the core, and this proves the actors
// add nothing to its rules.
#include <gtest/gtest.h>

#include "actors/router.hpp"
#include "actors/worker.hpp"
#include "core/sim.hpp"
#include "fixture.hpp"

namespace kvmesh::test {
namespace {

class sim_agreement : public actor_fixture {};

TEST_F(sim_agreement, mesh_and_simulator_award_the_same_workers) {
  auto trace = load_trace(KVMESH_TEST_DATA "/conversation_head.jsonl");
  ASSERT_TRUE(trace) << trace.err().message;
  trace->resize(60);
  // One request at a time: each finishes before the next arrives, so the
  // two schedulers see the same worker states at every auction.
  for (size_t i = 0; i < trace->size(); ++i)
    (*trace)[i].arrival_ms = 100000.0 * static_cast<double>(i);
  sim_config cfg;
  cfg.workers = 4;
  cfg.gpu_blocks = 256;  // small enough to evict and offload
  cfg.host_blocks = 256;
  cfg.disk_blocks = 0;
  cfg.auction_ms = 0;
  cfg.seed = 11;
  auto sim = simulate(cfg, *trace, policy_kind::kvmesh);
  ASSERT_TRUE(sim) << sim.err().message;

  std::vector<worker_actor> workers;
  for (uint32_t w = 0; w < cfg.workers; ++w) {
    worker_options opt;
    opt.engine = fleet_engine_config(cfg, w);
    auto probe = engine::make(opt.engine);
    ASSERT_TRUE(probe);
    opt.ledger = fleet_worker_config(cfg, w, *probe);
    auto a = spawn_worker(*sys, opt);
    ASSERT_TRUE(a) << a.err().message;
    workers.push_back(track(*a));
  }
  router_options ropt;
  ropt.workers = workers;
  ropt.price = cfg.price;
  ropt.max_auctions = cfg.max_auctions;
  ropt.block_tokens = cfg.block_tokens;
  ropt.seed = router_seed(cfg.seed, 0);
  // Deadlines far beyond any step: nothing times out in this test.
  ropt.bid_deadline = ropt.award_deadline = std::chrono::hours(1);
  auto r = track(sys->spawn(router, ropt));

  double now_ms = 0;
  for (size_t i = 0; i < trace->size(); ++i) {
    const auto& t = (*trace)[i];
    advance(std::chrono::duration_cast<caf::timespan>(
        std::chrono::duration<double, std::milli>(t.arrival_ms - now_ms)));
    now_ms = t.arrival_ms;
    route_request_msg req;
    req.id = i;
    req.blocks = t.blocks;
    req.input_tokens = t.input_tokens;
    req.output_tokens = t.output_tokens;
    auto d = ask<decision>(r, route_atom::value, req);
    ASSERT_TRUE(d->has_value() && **d) << "request " << i;
    if ((**d)->worker != sim->worker_of[i])
      for (auto& p : (**d)->prices)
        ADD_FAILURE() << p.worker << " read " << p.read << " gpu "
                      << p.credit_gpu << " host " << p.credit_host << " space "
                      << p.space << " price " << p.price;
    ASSERT_EQ((**d)->worker, sim->worker_of[i])
        << "first disagreement at request " << i;
  }
}

}  // namespace
}  // namespace kvmesh::test
