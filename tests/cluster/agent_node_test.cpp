// Tests of cluster/agent_node: an agent's bids, awards and withdraws over
// NATS, and its workers' announcements to the shards.
#include "cluster/agent_node.hpp"

#include "mesh_fixture.hpp"

namespace kvmesh::test {
namespace {

// The mesh fixture under this file's suite name.
class agent_node_test : public mesh_test {};

// A worker that died with a call for bids in flight never answers it: the
// agent answers the call with the bids it has at its next heartbeat but
// one, and goes on answering later calls.
TEST_F(agent_node_test,
       an_agent_whose_worker_died_answers_with_the_bids_it_has) {
  start_agent("node-a", 0, 4);
  {
    caf::scoped_actor killer{*sys_};
    const auto& ws = agents_["node-a"]->workers();
    killer->send_exit(ws[1], caf::exit_reason::kill);
    killer->wait_for(ws[1]);
  }
  auto& c = bus();
  const std::string subject = subjects{}.agent("node-a", "bid");
  const auto t0 = std::chrono::steady_clock::now();
  auto reply = c.request(
      subject, encode(call_for_bids{request(1, 1, 8), 4.0, {0, 1, 2, 3}}),
      5000ms);
  ASSERT_TRUE(reply) << reply.err().message;
  const auto waited = std::chrono::steady_clock::now() - t0;
  auto l = decode<bid_list>(*reply);
  ASSERT_TRUE(l) << l.err().message;
  std::vector<uint32_t> bidders;
  for (const bid& b : l->bids)
    bidders.push_back(b.worker);
  std::sort(bidders.begin(), bidders.end());
  EXPECT_EQ(bidders, (std::vector<uint32_t>{0, 2, 3}));
  EXPECT_GE(waited, beat);  // held until a sweep found it a beat old
  // Swept by the next heartbeat but one; the bound leaves a loaded host
  // room, far below the call's own timeout.
  EXPECT_LT(waited, 10 * beat);
  // The living workers alone: answered at once.
  reply = c.request(
      subject, encode(call_for_bids{request(2, 2, 8), 4.0, {0, 2}}), 5000ms);
  ASSERT_TRUE(reply) << reply.err().message;
  l = decode<bid_list>(*reply);
  ASSERT_TRUE(l) << l.err().message;
  EXPECT_EQ(l->bids.size(), 2u);
}

// A Withdraw travels to the agent's worker and back: a worker that never
// had the award withdraws it, and the award, arriving later, is refused.
TEST_F(agent_node_test,
       a_withdraw_over_nats_refuses_the_award_that_comes_later) {
  start_agent("node-a", 0, 1);
  auto& c = bus();
  const subjects subj;
  auto w = c.request(subj.agent("node-a", "withdraw"),
                     encode(withdraw_msg{77, 0}), 2000ms);
  ASSERT_TRUE(w) << w.err().message;
  auto wr = decode<withdraw_reply>(*w);
  ASSERT_TRUE(wr) << wr.err().message;
  EXPECT_TRUE(wr->withdrawn);
  award_msg a;
  a.request.id = 77;
  a.request.blocks = {1, 2, 3};
  a.request.input_tokens = 48;
  a.worker = 0;
  auto r = c.request(subj.agent("node-a", "award"), encode(a), 2000ms);
  ASSERT_TRUE(r) << r.err().message;
  auto ar = decode<award_reply>(*r);
  ASSERT_TRUE(ar) << ar.err().message;
  EXPECT_FALSE(ar->accepted);
  EXPECT_EQ(ar->reason, "withdrawn");
  // Another request is taken as before.
  a.request.id = 78;
  r = c.request(subj.agent("node-a", "award"), encode(a), 2000ms);
  ASSERT_TRUE(r);
  EXPECT_TRUE(decode<award_reply>(*r)->accepted);
}

// A shard's heartbeat that comes late is a busy shard, not a new one: the
// workers announce their caches again only to a restarted shard (a new
// incarnation). Announcing a million events to a shard that was only slow
// made it slower, and the mesh collapsed under a long soak.
TEST_F(agent_node_test, only_a_restarted_shard_hears_the_caches_again) {
  start_agent("node-a", 0, 2);
  auto& c = bus();
  std::atomic<int> resyncs{0};
  // Agents send KV events batched, on kv_batch(0, agent).
  auto sub =
      c.subscribe(subjects{}.kv_batch(0, "node-a"), "", [&](nats_message m) {
        for (auto& one : unbatch(std::move(m)))
          if (auto b = decode<kv_batch>(one.payload); b && b->resync) ++resyncs;
      });
  ASSERT_TRUE(sub);
  auto beat_of = [&](uint64_t incarnation, uint64_t events) {
    shard_status s;
    s.shard = 0;
    s.shards = 1;
    s.events = events;
    s.incarnation = incarnation;
    return c.publish(subjects{}.shard_beat(), encode(s));
  };
  // Learning the shard, both workers announce themselves to it.
  ASSERT_TRUE(eventually([&] {
    (void)beat_of(11, 100);
    return resyncs.load() >= 2;
  }));
  std::this_thread::sleep_for(4 * beat);
  const int learnt = resyncs.load();
  // Silent for longer than the missed beats, then the same incarnation
  // with more events: late, not new.
  std::this_thread::sleep_for(5 * beat);
  ASSERT_TRUE(beat_of(11, 200));
  std::this_thread::sleep_for(4 * beat);
  EXPECT_EQ(resyncs.load(), learnt);
  // A new incarnation: both workers announce again.
  ASSERT_TRUE(beat_of(12, 5));
  EXPECT_TRUE(eventually([&] { return resyncs.load() >= learnt + 2; }));
}

// Shard heartbeats forged at 20 Hz, each from a "new incarnation", while a
// steady load runs: the agents announce their caches at most once per
// announce_beats heartbeats (counted as deferred otherwise), and routing
// goes on.
TEST_F(agent_node_test,
       forged_shard_heartbeats_announce_caches_at_a_bounded_rate) {
  start_mesh();
  std::this_thread::sleep_for(2 * beat);
  const auto before = agents_["node-a"]->announced();
  std::atomic<bool> stop{false};
  auto& forger = bus();
  const auto flood_for = 4000ms;
  std::thread flood([&] {
    const auto end = std::chrono::steady_clock::now() + flood_for;
    for (uint64_t k = 1; std::chrono::steady_clock::now() < end && !stop; ++k) {
      for (uint32_t shard = 0; shard < 2; ++shard) {
        shard_status s;
        s.shard = shard;
        s.shards = 2;
        s.incarnation = 1000000 + k;
        (void)forger.publish(subjects{}.shard_beat(), encode(s));
      }
      std::this_thread::sleep_for(50ms);
    }
  });
  route_client client(bus());
  const uint64_t sent = 200;
  for (uint64_t id = 1; id <= sent; ++id) {
    client.send(request(id, id % 20, 8));
    std::this_thread::sleep_for(20ms);
  }
  flood.join();
  ASSERT_TRUE(
      eventually([&] { return client.decided() >= sent * 99 / 100; }, 20000ms))
      << client.decided() << " of " << sent;
  const auto after = agents_["node-a"]->announced();
  // 80 forged incarnations per shard; one announcement per turn at most.
  const auto turn = beat * mesh_options{}.announce_beats;
  const uint64_t turns = flood_for / turn + 2;
  EXPECT_GE(after.made, before.made + 1);
  EXPECT_LE(after.made, before.made + turns);
  EXPECT_GT(after.deferred, before.deferred);
}

}  // namespace
}  // namespace kvmesh::test
