// Tests of cluster/directory: membership from heartbeats, and the
// distributed ADMIN's listings, weights and drains.
#include "cluster/directory.hpp"

#include <unistd.h>

#include <fstream>

#include "mesh_fixture.hpp"
#include "messages/member_checks.hpp"

namespace kvmesh::test {
namespace {

// The mesh fixture under this file's suite name.
class directory_test : public mesh_test {};

TEST_F(directory_test, admin_lists_workers_shards_and_prefix_holders) {
  start_mesh();
  auto& c = bus();
  auto w = admin_request_call(c, subjects{}, "workers", {}, 1000ms);
  ASSERT_TRUE(w) << w.err().message;
  ASSERT_EQ(w->workers.size(), 8u);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(w->workers[i].worker, i);
    EXPECT_FALSE(w->workers[i].gone);
    EXPECT_EQ(w->workers[i].capacity, 512u);
    EXPECT_EQ(w->workers[i].agent, i < 4 ? "node-a" : "node-b");
  }
  ASSERT_TRUE(eventually([&] {
    auto s = admin_request_call(c, subjects{}, "shards", {}, 1000ms);
    return s && s->shards.size() == 2 && s->shards[0].shards == 2;
  }));
  // A routed request's blocks reach the index through KV events.
  auto r = request(77, 3, 8);
  auto d = route_once(c, subjects{}, r, 2000ms);
  ASSERT_TRUE(d) << d.err().message;
  admin_request q;
  q.chain = r.blocks;
  ASSERT_TRUE(eventually([&] {
    auto h = admin_request_call(c, subjects{}, "prefix", q, 1000ms);
    return h && !h->holders.empty() && h->holders.front().worker == d->worker &&
           h->holders.front().gpu == 8;
  }));
}

TEST_F(directory_test, weights_set_reach_every_router_and_drain_steers) {
  start_mesh();
  auto& c = bus();
  ASSERT_TRUE(eventually([&] {
    auto r = admin_request_call(c, subjects{}, "routers", {}, 1000ms);
    return r && r->routers.size() == 2;
  }));
  admin_request set;
  set.weights.beta = 0.5;
  auto n = admin_request_call(c, subjects{}, "weights.set", set, 4000ms);
  ASSERT_TRUE(n) << n.err().message;
  EXPECT_EQ(n->count, 2u);
  for (auto& r : routers_) {
    caf::scoped_actor self{*sys_};
    price_config got;
    self->request(r->router(), 1s, get_atom::value, weights_atom::value)
        .receive([&](const price_config& p) { got = p; },
                 [&](caf::error& e) { FAIL() << caf::to_string(e); });
    EXPECT_EQ(got.beta, 0.5);
  }
  // Bad weights are refused with the weight named.
  set.weights.c_host = 7;
  auto bad = admin_request_call(c, subjects{}, "weights.set", set, 4000ms);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().message.find("c_host"), std::string::npos);
  // Drain all but worker 5: every decision goes there.
  for (uint32_t w = 0; w < 8; ++w) {
    if (w == 5) continue;
    admin_request dr;
    dr.worker = w;
    auto ok = admin_request_call(c, subjects{}, "drain", dr, 2000ms);
    ASSERT_TRUE(ok) << ok.err().message;
  }
  ASSERT_TRUE(eventually([&] {
    auto w = admin_request_call(c, subjects{}, "workers", {}, 1000ms);
    if (!w) return false;
    size_t draining = 0;
    for (auto& s : w->workers)
      draining += s.draining;
    return draining == 7;
  }));
  for (uint64_t id = 500; id < 520; ++id) {
    auto d = route_once(c, subjects{}, request(id, id, 4), 2000ms);
    ASSERT_TRUE(d) << d.err().message;
    EXPECT_EQ(d->worker, 5u);
  }
  admin_request unknown;
  unknown.worker = 99;
  EXPECT_FALSE(admin_request_call(c, subjects{}, "drain", unknown, 2000ms));
}

TEST_F(directory_test, a_killed_agent_gets_no_awards_after_three_heartbeats) {
  start_mesh();
  auto& watch = bus();
  // Awards published to node-b after the cut-off: there must be none.
  // They travel alone or in batches with bids and releases.
  std::atomic<int64_t> last_award_ns{0};
  const std::string award = subjects{}.agent("node-b", "award");
  ASSERT_TRUE(
      watch.subscribe(subjects{}.agent("node-b", "*"), "", [&](nats_message m) {
        for (const auto& one : unbatch(std::move(m)))
          if (one.subject == award)
            last_award_ns =
                std::chrono::steady_clock::now().time_since_epoch().count();
      }));
  ASSERT_TRUE(watch.flush(2000ms));  // subscribed before the first award
  route_client client(bus());
  uint64_t id = 1;
  for (; id <= 200; ++id)
    client.send(request(id, id % 20, 8));
  ASSERT_TRUE(eventually([&] { return client.decided() == 200; }, 10000ms));
  std::string went;
  for (auto [w, n] : client.by_worker())
    went += " " + std::to_string(w) + ":" + std::to_string(n);
  if (auto r = admin_request_call(bus(), subjects{}, "routers", {}, 1000ms))
    for (auto& x : r->routers)
      went += " | " + x.name + " live " + std::to_string(x.live_workers) +
              " re " + std::to_string(x.reauctions);
  ASSERT_GT(last_award_ns.load(), 0) << "node-b was taking work:" << went;
  const auto killed = std::chrono::steady_clock::now();
  agents_.erase("node-b");  // its connection stays: only the node died
  // Routing goes on meanwhile.
  const auto until = killed + 6 * beat;
  while (std::chrono::steady_clock::now() < until) {
    client.send(request(id, id % 20, 8));
    ++id;
    std::this_thread::sleep_for(2ms);
  }
  const uint64_t sent = id - 1;
  ASSERT_TRUE(eventually([&] { return client.decided() == sent; }, 10000ms))
      << client.decided() << " of " << sent;
  const auto last = std::chrono::steady_clock::time_point(
      std::chrono::steady_clock::duration(last_award_ns.load()));
  EXPECT_LT(last - killed, 3 * beat)
      << "awards went to the dead agent "
      << std::chrono::duration_cast<std::chrono::milliseconds>(last - killed)
             .count()
      << " ms after its death";
  // Node-b's workers decided before the kill.
  for (auto& [w, n] : client.by_worker()) {
    if (w >= 4) {
      EXPECT_GT(n, 0);
    }
  }
  auto w = admin_request_call(watch, subjects{}, "workers", {}, 1000ms);
  ASSERT_TRUE(w);
  for (auto& s : w->workers)
    EXPECT_EQ(s.gone, s.worker >= 4) << "worker " << s.worker;
}

// Resident set of this process, in bytes (Linux).
size_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// A heartbeat that reuses a live worker's id under another agent, marking
// it draining with another endpoint, is refused and counted: the worker
// stays where it is and keeps taking work.
TEST_F(directory_test, a_heartbeat_reusing_a_live_worker_id_is_refused) {
  start_mesh();
  const auto before =
      member_refusals(member_message::worker_beat, member_fault::owned);
  worker_status forged;
  forged.worker = 2;
  forged.capacity = 512;
  forged.draining = true;
  forged.endpoint = "http://evil.example:6666";
  forged_agent evil(bus(), "evil", {forged},
                    [](const call_for_bids&, uint32_t w) {
                      bid b;
                      b.worker = w;
                      b.capacity = 512;
                      return b;
                    });
  auto& c = bus();
  ASSERT_TRUE(eventually([&] {
    return member_refusals(member_message::worker_beat, member_fault::owned) >=
           before + 4;
  }));
  route_client client(bus());
  for (uint64_t id = 1; id <= 200; ++id)
    client.send(request(id, id % 20, 8));
  ASSERT_TRUE(eventually([&] { return client.decided() == 200; }, 20000ms));
  EXPECT_GT(client.by_worker()[2], 0) << "worker 2 was taken out of service";
  EXPECT_EQ(evil.awards(), 0);
  auto w = admin_request_call(c, subjects{}, "workers", {}, 1000ms);
  ASSERT_TRUE(w);
  for (auto& s : w->workers)
    if (s.worker == 2) {
      EXPECT_EQ(s.agent, "node-a");
      EXPECT_FALSE(s.draining);
      EXPECT_EQ(s.endpoint, "");
    }
}

// Publishes 30,000 heartbeats of new worker ids (ids 100 and up, agent
// names flood-<k % agents>; and every 15th a new router name) while 400
// requests are routed, the first 40 before the flood begins (a mesh at
// work is attacked); the requests must be decided by real workers. Each
// test checks the rest.
void flood_during_load(nats_bus& flood_bus, nats_bus& client_bus,
                       uint32_t agents) {
  route_client client(client_bus);
  const uint64_t sent = 400, before = 40;
  for (uint64_t id = 1; id <= before; ++id) {
    client.send(request(id, id % 20, 8));
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(eventually([&] { return client.decided() == before; }, 30000ms));
  std::thread flood([&] {
    for (uint32_t k = 0; k < 30000; ++k) {
      worker_status s;
      s.worker = 100 + k;
      s.agent = "flood-" + std::to_string(k % agents);
      s.capacity = 512;
      (void)flood_bus.publish(subjects{}.worker_beat(s.agent), encode(s));
      if (k % 15 == 0) {
        router_status r;
        r.name = "fake-" + std::to_string(k);
        (void)flood_bus.publish(subjects{}.router_beat(), encode(r));
      }
    }
  });
  for (uint64_t id = before + 1; id <= sent; ++id) {
    client.send(request(id, id % 20, 8));
    std::this_thread::sleep_for(5ms);
  }
  flood.join();
  ASSERT_TRUE(
      eventually([&] { return client.decided() >= sent * 99 / 100; }, 30000ms))
      << client.decided() << " of " << sent;
  for (auto& [w, n] : client.by_worker())
    EXPECT_LT(w, 8u) << n << " requests went to forged worker " << w;
}

uint64_t too_many_workers() {
  return member_refusals(member_message::worker_beat, member_fault::too_many) +
         member_refusals(member_message::worker_beat,
                         member_fault::too_many_of_agent);
}

// The flood under tight bounds: past them heartbeats are refused and
// counted, the directory keeps at most limits.max_workers, memory stays
// bounded, and the silent members are forgotten.
TEST_F(directory_test, a_heartbeat_flood_is_bounded_counted_and_forgotten) {
  wire_limits l;
  l.max_workers = 64;
  l.max_workers_per_agent = 16;
  l.max_routers = 8;
  set_wire_limits(l);
  forget_beats_ = 10;
  start_mesh();
  auto& c = bus();
  const size_t idle = rss_bytes();
  const auto refused_before = too_many_workers();
  const auto routers_before =
      member_refusals(member_message::router_beat, member_fault::too_many);
  flood_during_load(bus(), bus(), 7500);
  EXPECT_GT(too_many_workers(), refused_before + 29000);
  EXPECT_GT(
      member_refusals(member_message::router_beat, member_fault::too_many),
      routers_before);
  auto w = admin_request_call(c, subjects{}, "workers", {}, 1000ms);
  ASSERT_TRUE(w);
  EXPECT_LE(w->workers.size(), 64u);
  EXPECT_LT(rss_bytes(), 2 * idle) << "idle " << idle;
  // Silent for forget_beats, the forged members are gone; the real ones
  // stay.
  ASSERT_TRUE(eventually(
      [&] {
        auto w = admin_request_call(c, subjects{}, "workers", {}, 1000ms);
        auto r = admin_request_call(c, subjects{}, "routers", {}, 1000ms);
        return w && w->workers.size() == 8 && r && r->routers.size() == 2;
      },
      15000ms));
  set_wire_limits(wire_limits{});
}

// The flood at the default bounds of workers, under 4,096 agent names (a
// credential that may speak for any agent): 16,384 forged workers are
// admitted, claim to be idle and never bid, and still take no award and
// no request's place: the routers prefer bidders that answered before.
TEST_F(directory_test, forged_workers_that_never_bid_take_no_auctions) {
  start_mesh();
  flood_during_load(bus(), bus(), 4096);
  auto w = admin_request_call(bus(), subjects{}, "workers", {}, 1000ms);
  ASSERT_TRUE(w);
  EXPECT_GT(w->workers.size(), 1000u);  // the flood reached membership
}

// A router that hears 12,288 forged idle workers (ids below the real
// agent's, which equal loads take turns in first) has seen no agent answer
// a call: it probes each agent as it hears of it, so the real
// agent, which answers, takes the places of its calls from the first
// request on, before the forged ones at the front of the turn order. The
// requests' prefixes are new, so the index names no holder to lead it to
// the real workers.
TEST_F(directory_test, a_router_that_hears_a_flood_first_finds_the_real_agent) {
  start_shard(0, 2);
  start_shard(1, 2);
  // Under the cap on workers in all (limits.max_workers), which would
  // refuse the real ones.
  const uint32_t forged = 12288;
  // The forged agents listen for calls and never answer, so that each
  // call to one waits out the bid deadline (an unheard subject would fail
  // it at once: NATS reports no responders).
  auto& flood_bus = bus();
  std::vector<uint64_t> silent;
  for (uint32_t a = 0; a < 3072; ++a) {
    auto sub = flood_bus.subscribe(
        subjects{}.agent("flood-" + std::to_string(a), "bid"), "",
        [](nats_message) {});
    ASSERT_TRUE(sub);
    silent.push_back(*sub);
  }
  std::atomic<bool> stop{false};
  std::thread flood([&] {
    while (!stop) {
      for (uint32_t k = 0; k < forged && !stop; ++k) {
        worker_status s;
        s.worker = k;
        s.agent = "flood-" + std::to_string(k % 3072);
        s.capacity = 512;
        (void)flood_bus.publish(subjects{}.worker_beat(s.agent), encode(s));
      }
      std::this_thread::sleep_for(beat / 2);
    }
  });
  struct stopper {
    std::atomic<bool>& stop;
    std::thread& t;
    ~stopper() {
      stop = true;
      t.join();
    }
  } stops{stop, flood};
  start_router("late");
  caf::scoped_actor self{*sys_};
  auto live = [&] {
    uint64_t n = 0;
    self->request(routers_.back()->router(), 1s, status_atom::value)
        .receive([&](const router_status& s) { n = s.live_workers; },
                 [](caf::error&) {});
    return n;
  };
  ASSERT_TRUE(eventually([&] { return live() >= forged; }, 30000ms));
  // Above the forged ids, which equal loads take turns in first.
  start_agent("node-a", 20000, 4);
  ASSERT_TRUE(eventually([&] { return live() >= forged + 4; }, 30000ms));
  route_client client(bus());
  const uint64_t sent = 100;
  for (uint64_t id = 1; id <= sent; ++id) {
    client.send(request(id, 1000 + id, 8));
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(
      eventually([&] { return client.decided() >= sent * 99 / 100; }, 30000ms))
      << client.decided() << " of " << sent;
  for (auto& [w, n] : client.by_worker())
    EXPECT_GE(w, 20000u) << n << " requests went to forged worker " << w;
  // The real agent had its places from the first call: no call went to
  // forged agents alone, to be run again for want of bids.
  router_status rs;
  self->request(routers_.back()->router(), 1s, status_atom::value)
      .receive([&](const router_status& s) { rs = s; },
               [](caf::error& e) { ADD_FAILURE() << to_string(e); });
  EXPECT_LE(rs.reauctions_no_bids, sent / 100)
      << rs.reauctions << " auctions run again";
  for (uint64_t sub : silent) (void)flood_bus.unsubscribe(sub);
}

}  // namespace
}  // namespace kvmesh::test
