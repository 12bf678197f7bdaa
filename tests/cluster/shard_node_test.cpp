// Tests of cluster/shard_node: an index shard that refused KV events hears
// the caches again.
#include "cluster/shard_node.hpp"

#include "mesh_fixture.hpp"
#include "messages/member_checks.hpp"

namespace kvmesh::test {
namespace {

// The mesh fixture under this file's suite name.
class shard_node_test : public mesh_test {};

// An index shard past its mailbox bound refuses KV events (counted, and
// reported in its heartbeat): its index misses them. Once it has stopped
// refusing, the agents have their workers announce their caches again, and
// what it missed comes back.
TEST_F(shard_node_test, a_shard_that_refused_kv_events_hears_the_caches_again) {
  {
    struct restore {
      ~restore() { set_wire_limits(wire_limits{}); }
    } restore_defaults;
    wire_limits tight;
    // Above the 4 workers' announcements, far below a flood; read once,
    // when the shard starts.
    tight.max_mailbox_messages = 16;
    set_wire_limits(tight);
    start_shard(0, 1);
  }
  start_agent("node-a", 0, 4);
  start_router("r1");
  auto& c = bus();
  ASSERT_TRUE(eventually([&] {
    auto w = admin_request_call(c, subjects{}, "workers", {}, 1000ms);
    auto s = admin_request_call(c, subjects{}, "shards", {}, 1000ms);
    return w && w->workers.size() == 4 && s && s->shards.size() == 1;
  }));
  auto r = request(77, 3, 8);
  auto d = route_once(c, subjects{}, r, 2000ms);
  ASSERT_TRUE(d) << d.err().message;
  admin_request q;
  q.chain = r.blocks;
  auto holds = [&] {
    auto h = admin_request_call(c, subjects{}, "prefix", q, 1000ms);
    if (!h) return false;
    for (const auto& m : h->holders)
      if (m.worker == d->worker) return true;
    return false;
  };
  ASSERT_TRUE(eventually(holds));
  // The shard loses the worker's blocks, as if their events had been
  // refused (a resync without events drops them).
  kv_batch forget;
  forget.worker = d->worker;
  forget.resync = true;
  ASSERT_TRUE(c.publish(subjects{}.kv(0, "node-a"), encode(forget)));
  ASSERT_TRUE(eventually([&] { return !holds(); }));

  const uint64_t before = nats_refusals(feed_kind::kv);
  for (uint64_t i = 0; i < 3000; ++i) {
    kv_batch noise;
    noise.worker = 1000;
    noise.events.push_back(
        cache_event{cache_event::stored, tier::gpu, i + 1, i + 1});
    ASSERT_TRUE(c.publish(subjects{}.kv(0, "noise"), encode(noise)));
  }
  ASSERT_TRUE(c.flush(2000ms));
  // Flushed is at the server: the shard's connection may still be reading.
  EXPECT_TRUE(
      eventually([&] { return nats_refusals(feed_kind::kv) > before; }));
  ASSERT_TRUE(eventually([&] {
    auto s = admin_request_call(c, subjects{}, "shards", {}, 1000ms);
    return s && s->shards.size() == 1 && s->shards[0].refused_events > 0;
  }));
  // No restart, no silence: only the refusals make the worker announce.
  EXPECT_TRUE(eventually(holds));
}

// Resyncs and KV events for a worker, sent on another agent's subjects
// (as that agent's credential may), and a heartbeat claiming the worker
// there: the shards refuse and count them, the worker's entries stay, and
// a steady load is decided by the real workers.
TEST_F(shard_node_test, another_agents_resync_wipes_nothing) {
  start_mesh();
  auto& c = bus();
  auto r = request(77, 3, 8);
  auto d = route_once(c, subjects{}, r, 2000ms);
  ASSERT_TRUE(d) << d.err().message;
  admin_request q;
  q.chain = r.blocks;
  auto holds = [&] {
    auto h = admin_request_call(c, subjects{}, "prefix", q, 1000ms);
    if (!h) return false;
    for (const auto& m : h->holders)
      if (m.worker == d->worker) return true;
    return false;
  };
  ASSERT_TRUE(eventually(holds));
  const std::string holder = d->worker < 4 ? "node-a" : "node-b";
  const auto owned = [] {
    return member_refusals(member_message::kv_batch, member_fault::owned);
  };
  const auto wrong = [] {
    return member_refusals(member_message::worker_beat,
                           member_fault::wrong_subject);
  };
  const auto owned_before = owned();
  const auto wrong_before = wrong();
  for (int k = 0; k < 8; ++k)
    for (uint32_t shard = 0; shard < 2; ++shard) {
      kv_batch wipe;
      wipe.worker = d->worker;
      wipe.resync = true;
      ASSERT_TRUE(c.publish(subjects{}.kv(shard, "evil"), encode(wipe)));
      kv_batch lie;
      lie.worker = d->worker;
      lie.events.push_back(
          cache_event{cache_event::removed, tier::gpu, r.blocks[0], 0});
      ASSERT_TRUE(c.publish(subjects{}.kv_batch(shard, "evil"),
                            encode(batch_msg{{{subjects{}.kv(shard, "evil"), "",
                                               encode(lie)}}})));
    }
  worker_status claim;
  claim.worker = d->worker;
  claim.capacity = 512;
  claim.agent = holder;  // on evil's subject: names another agent
  ASSERT_TRUE(c.publish(subjects{}.worker_beat("evil"), encode(claim)));
  ASSERT_TRUE(c.flush(2000ms));
  EXPECT_TRUE(eventually([&] { return owned() >= owned_before + 32; }));
  // The shards and the routers' directories each refuse it.
  EXPECT_TRUE(eventually([&] { return wrong() >= wrong_before + 4; }));
  route_client client(bus());
  const uint64_t sent = 100;
  for (uint64_t id = 1; id <= sent; ++id) {
    client.send(request(id, id % 20, 8));
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(
      eventually([&] { return client.decided() >= sent * 99 / 100; }, 20000ms))
      << client.decided() << " of " << sent;
  for (auto& [w, n] : client.by_worker())
    EXPECT_LT(w, 8u);
  EXPECT_TRUE(holds()) << "another agent's resync wiped worker " << d->worker;
}

}  // namespace
}  // namespace kvmesh::test
