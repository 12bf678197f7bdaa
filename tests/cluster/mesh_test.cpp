// Tests of cluster/mesh: node agents, router processes and index shards on
// a real nats-server, each with its own connection as separate processes
// would have, driven by clients that speak only the wire.
#include "cluster/mesh.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "cluster/bridge.hpp"
#include "cluster/mesh_metrics.hpp"
#include "cluster/remote.hpp"
#include "core/block_hash.hpp"
#include "core/sim.hpp"
#include "messages/codec.hpp"
#include "messages/json.hpp"
#include "messages/limits.hpp"
#include "nats_cluster.hpp"
#include "nats_server.hpp"

namespace kvmesh::test {
namespace {

using namespace std::chrono_literals;
using bytes = std::vector<uint8_t>;

// Short, for quick tests; long enough that a loaded 2-core machine does not
// make live workers look dead.
constexpr auto beat = std::chrono::milliseconds(200);

mesh_options mesh() {
  mesh_options m;
  m.heartbeat = beat;
  m.call_timeout = 1500ms;
  return m;
}

std::unique_ptr<nats_bus> connect(const std::string& url) {
  nats_options o;
  o.url = url;
  o.randomize = false;  // the first server of a list is the one to use
  auto bus = nats_bus::connect(o);
  EXPECT_TRUE(bus) << bus.err().message;
  return bus ? std::move(*bus) : nullptr;
}

// Waits until `pred` holds or `limit` passes.
template <class F>
bool eventually(F pred, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

// A request of `blocks` blocks whose chain starts with `family` (requests of
// one family share their prefix).
route_request_msg request(uint64_t id, uint64_t family, uint32_t blocks) {
  route_request_msg r;
  r.id = id;
  uint64_t h = family * 0x9E3779B97F4A7C15ull + 1;
  for (uint32_t i = 0; i < blocks; ++i) {
    h = h * 6364136223846793005ull + (i < blocks / 2 ? 0 : id);
    r.blocks.push_back(h);
  }
  r.input_tokens = blocks * 16;
  r.output_tokens = 4;
  return r;
}

// A mesh of separate "processes" in one test: every role has its own NATS
// connection; they share only the actor system.
class mesh_test : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<test::nats_server>();
    url_ = server_->url();
    // The system keeps a reference to its configuration.
    cfg_ = std::make_unique<caf::actor_system_config>();
    register_types(*cfg_);
    tune_for_latency(*cfg_);
    sys_ = std::make_unique<caf::actor_system>(*cfg_);
  }
  void TearDown() override {
    routers_.clear();
    agents_.clear();
    shards_.clear();
    buses_.clear();
    sys_.reset();
    metrics_.clear();  // after the actors that count into them
    cluster_.reset();
    server_.reset();
    dir_.reset();
  }

  nats_bus& bus() {
    buses_.push_back(connect(url_));
    return *buses_.back();
  }

  // Runs the test on a server with JetStream (durable intake).
  void use_jetstream() {
    server_.reset();
    dir_ = std::make_unique<test::temp_dir>();
    server_ = std::make_unique<test::nats_server>(0, dir_->path());
    url_ = server_->url();
  }

  void start_agent(const std::string& name, uint32_t first, uint32_t n) {
    sim_config cfg;
    cfg.workers = 8;
    cfg.gpu_blocks = 512;
    cfg.block_tokens = 16;
    agent_options o;
    o.mesh = mesh();
    o.name = name;
    for (uint32_t w = first; w < first + n; ++w) {
      worker_options wo;
      wo.engine = fleet_engine_config(cfg, w);
      auto probe = engine::make(wo.engine);
      ASSERT_TRUE(probe);
      wo.ledger = fleet_worker_config(cfg, w, *probe);
      wo.time_scale = 20;  // requests end soon
      o.workers.push_back(wo);
    }
    auto a = agent_node::start(*sys_, bus(), o);
    ASSERT_TRUE(a) << a.err().message;
    agents_[name] = std::move(*a);
  }

  // With `metrics`, the router counts into a registry of its own, which
  // the test reads with metrics->scrape().
  void start_router(const std::string& name, bool durable = false,
                    uint32_t durable_deliveries = 10,
                    size_t admin_page_bytes = 0,
                    process_metrics** metrics = nullptr) {
    router_node_options o;
    o.admin_page_bytes = admin_page_bytes;
    o.durable = durable;
    o.durable_deliveries = durable_deliveries;
    o.durable_ack_wait = 3000ms;
    o.mesh = mesh();
    o.name = name;
    o.router.block_tokens = 16;
    // Generous: a loaded 2-core machine can stall a process that long.
    o.router.bid_deadline = 1000ms;
    o.router.award_deadline = 1000ms;
    o.router.fanout = 4;  // above it, the index picks the bidders
    if (metrics) {
      auto m = process_metrics::for_router(o);
      ASSERT_TRUE(m) << m.err().message;
      *metrics = m->get();
      metrics_.push_back(std::move(*m));
    }
    auto r = router_node::start(*sys_, bus(), o);
    ASSERT_TRUE(r) << r.err().message;
    routers_.push_back(std::move(*r));
  }

  void start_shard(uint32_t i, uint32_t n) {
    shard_node_options o;
    o.mesh = mesh();
    o.shard.shard = i;
    o.shards = n;
    auto s = shard_node::start(*sys_, bus(), o);
    ASSERT_TRUE(s) << s.err().message;
    shards_.push_back(std::move(*s));
  }

  // 8 workers on 2 agents, 2 routers, 2 shards; returns once every router
  // sees all 8 workers.
  void start_mesh(bool durable = false) {
    start_shard(0, 2);
    start_shard(1, 2);
    start_agent("node-a", 0, 4);
    start_agent("node-b", 4, 4);
    start_router("r1", durable);
    start_router("r2", durable);
    auto& client = bus();
    ASSERT_TRUE(eventually([&] {
      auto w = admin_request_call(client, subjects{}, "workers", {}, 1000ms);
      auto r = admin_request_call(client, subjects{}, "routers", {}, 1000ms);
      return w && w->workers.size() == 8 && r && r->routers.size() == 2 &&
             r->routers[0].live_workers == 8 && r->routers[1].live_workers == 8;
    }));
  }

  std::unique_ptr<test::temp_dir> dir_;
  std::unique_ptr<test::nats_server> server_;
  std::unique_ptr<test::nats_cluster> cluster_;
  std::string url_;
  std::unique_ptr<caf::actor_system_config> cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::vector<std::unique_ptr<nats_bus>> buses_;
  std::map<std::string, std::unique_ptr<agent_node>> agents_;
  std::vector<std::unique_ptr<router_node>> routers_;
  std::vector<std::unique_ptr<shard_node>> shards_;
  std::vector<std::unique_ptr<process_metrics>> metrics_;
};

// The value of one series in a scrape's text; -1 when it is not there.
double series_value(const std::string& text, const std::string& series) {
  const std::string line = "\n" + series + " ";
  const size_t at = text.find(line);
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + line.size(), nullptr);
}

// Publishes route requests without waiting and counts the decisions that
// come back per request id, as a load generator would.
class route_client {
 public:
  explicit route_client(nats_bus& bus) : bus_(bus) {
    auto sub = bus_.subscribe("_INBOX.mesh_test.>", "", [this](nats_message m) {
      auto d = decode<decision>(m.payload);
      std::lock_guard<std::mutex> g(mu_);
      if (!d) {
        ++undecodable_;
        return;
      }
      if (!d->error.empty()) {
        errors_.push_back(d->error);
        return;
      }
      ++decisions_[d->request];
      ++by_worker_[d->worker];
    });
    EXPECT_TRUE(sub);
  }
  void send(const route_request_msg& r) {
    EXPECT_TRUE(bus_.publish(subjects{}.route(), encode(r),
                             "_INBOX.mesh_test." + std::to_string(r.id)));
  }
  // Through the JetStream work queue: the reply subject rides in the
  // subject, as route_durable_once does it.
  // The request's sequence in the stream (0: not stored).
  uint64_t send_durable(work_queue& q, const route_request_msg& r) {
    auto st = q.publish(subjects{}.route_durable() + "._INBOX.mesh_test." +
                            std::to_string(r.id),
                        encode(r));
    EXPECT_TRUE(st) << (st ? "" : st.err().message);
    return st ? *st : 0;
  }
  size_t decided() {
    std::lock_guard<std::mutex> g(mu_);
    return decisions_.size();
  }
  std::map<uint64_t, int> decisions() {
    std::lock_guard<std::mutex> g(mu_);
    return decisions_;
  }
  std::map<uint32_t, int> by_worker() {
    std::lock_guard<std::mutex> g(mu_);
    return by_worker_;
  }
  std::vector<std::string> errors() {
    std::lock_guard<std::mutex> g(mu_);
    return errors_;
  }

 private:
  nats_bus& bus_;
  std::mutex mu_;
  std::map<uint64_t, int> decisions_;
  std::map<uint32_t, int> by_worker_;
  std::vector<std::string> errors_;
  int undecodable_ = 0;
};

TEST_F(mesh_test, every_request_gets_exactly_one_decision) {
  start_mesh();
  route_client client(bus());
  constexpr uint64_t n = 1000;
  for (uint64_t id = 1; id <= n; ++id) {
    client.send(request(id, id % 20, 8));
    if (id % 50 == 0) std::this_thread::sleep_for(5ms);  // a steady load
  }
  ASSERT_TRUE(eventually([&] { return client.decided() == n; }, 30000ms))
      << client.decided() << " of " << n << " decided; first error: "
      << (client.errors().empty() ? "none" : client.errors().front());
  std::this_thread::sleep_for(200ms);  // time for a duplicate to show
  auto d = client.decisions();
  ASSERT_EQ(d.size(), n);
  for (auto& [id, count] : d)
    EXPECT_EQ(count, 1) << "request " << id;
  EXPECT_TRUE(client.errors().empty());
  // Both routers decided (queue group), and the load spread over workers.
  expected<admin_reply> routers = make_error(ec::not_found, "none asked");
  ASSERT_TRUE(eventually([&] {
    routers =
        admin_request_call(*buses_.back(), subjects{}, "routers", {}, 1000ms);
    return routers && routers->routers.size() == 2 &&
           routers->routers[0].decisions + routers->routers[1].decisions == n;
  })) << (routers ? routers->routers.size() : 0)
      << " routers";
  for (const auto& r : routers->routers)
    EXPECT_GT(r.decisions, 0u) << r.name;
  EXPECT_GE(client.by_worker().size(), 4u);
}

// The replay client's stand-in for the routers (kvmesh bench) sends a burst
// from one actor: every request must reach a router, none in a batch that
// no router listens for.
TEST_F(mesh_test, a_remote_router_s_burst_gets_every_decision) {
  start_mesh();
  auto front = spawn_remote_router(*sys_, bus(), mesh(), listener_actor{});
  ASSERT_TRUE(front) << front.err().message;
  constexpr uint64_t n = 200;
  auto decided = std::make_shared<std::atomic<size_t>>(0);
  auto failed = std::make_shared<std::atomic<size_t>>(0);
  router_actor r = *front;
  sys_->spawn([=](caf::event_based_actor* self) {
    for (uint64_t id = 1; id <= n; ++id)
      self->request(r, caf::infinite, route_atom::value,
                    request(id, id % 20, 8))
          .then([=](const decision&) { ++*decided; },
                [=](caf::error&) { ++*failed; });
  });
  EXPECT_TRUE(eventually([&] { return *decided + *failed == n; }, 20000ms));
  EXPECT_EQ(decided->load(), n) << *failed << " failed";
  // Gone before the fixture closes the connection its inbox holds.
  caf::scoped_actor waiter{*sys_};
  waiter->send_exit(*front, caf::exit_reason::user_shutdown);
  waiter->wait_for(*front);
}

// A worker that died with a call for bids in flight never answers it: the
// agent answers the call with the bids it has at its next heartbeat but
// one, and goes on answering later calls.
TEST_F(mesh_test, an_agent_whose_worker_died_answers_with_the_bids_it_has) {
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

// A router's stand-in for a remote worker answers a call for bids made with
// a gather (the form an agent uses with its own workers) through the
// worker's agent: its bid, in its slot.
TEST_F(mesh_test, a_remote_worker_answers_a_gathered_call_through_its_agent) {
  start_agent("node-a", 0, 4);
  auto box = inbox::open(bus());
  ASSERT_TRUE(box) << box.err().message;
  auto link = spawn_agent_link(*sys_, *box, mesh(), "node-a");
  auto w = spawn_remote_worker(*sys_, 2, link, std::chrono::seconds(10));
  auto got = std::make_shared<std::atomic<int>>(0);
  auto worker = std::make_shared<std::atomic<uint32_t>>(99);
  auto helper = sys_->spawn([=](caf::event_based_actor* self) -> caf::behavior {
    auto g = std::make_shared<bid_gather>(
        1, caf::actor_cast<caf::actor_addr>(self), 41);
    self->send(caf::actor_cast<caf::actor>(w), bid_atom::value,
               call_for_bids{request(1, 1, 8), 4.0, {}}, g);
    return {[=](bid_atom, uint64_t tag) {
      std::vector<bid> bids;
      g->collect(bids);
      if (tag == 41 && bids.size() == 1) *worker = bids[0].worker;
      ++*got;
    }};
  });
  EXPECT_TRUE(eventually([&] { return got->load() > 0; }, 5000ms));
  EXPECT_EQ(got->load(), 1);
  EXPECT_EQ(worker->load(), 2u);
  caf::scoped_actor waiter{*sys_};
  for (const caf::actor& a : {caf::actor_cast<caf::actor>(w),
                              caf::actor_cast<caf::actor>(link), helper}) {
    waiter->send_exit(a, caf::exit_reason::user_shutdown);
    waiter->wait_for(a);
  }
}

// A fleet's listing outgrows one NATS message: the ADMIN answers in pages
// and admin_request_call joins them. A budget of one byte makes each page
// a single worker.
TEST_F(mesh_test, admin_lists_workers_in_pages) {
  start_agent("node-a", 0, 8);
  start_router("r1", false, 10, /*admin_page_bytes=*/1);
  auto& c = bus();
  expected<admin_reply> w = make_error(ec::not_found, "not asked");
  ASSERT_TRUE(eventually([&] {
    w = admin_request_call(c, subjects{}, "workers", {}, 1000ms);
    return w && w->workers.size() == 8;
  })) << (w ? std::to_string(w->workers.size()) + " workers" : w.err().message);
  EXPECT_FALSE(w->more);
  for (uint32_t i = 0; i < 8; ++i)
    EXPECT_EQ(w->workers[i].worker, i);

  // One page at a time, as a NATS client sees them.
  auto page = [&](const std::vector<uint8_t>& payload) {
    auto r = c.request(subjects{}.admin("workers"), payload, 1000ms);
    EXPECT_TRUE(r) << r.err().message;
    auto a = r ? decode<admin_reply>(*r) : expected<admin_reply>(r.err());
    EXPECT_TRUE(a) << a.err().message;
    return a ? *a : admin_reply{};
  };
  admin_request from;
  from.paged = true;
  from.from = 5;
  admin_reply p = page(encode(from));
  ASSERT_EQ(p.workers.size(), 1u);
  EXPECT_EQ(p.workers[0].worker, 5u);
  EXPECT_TRUE(p.more);
  from.from = 7;
  p = page(encode(from));
  ASSERT_EQ(p.workers.size(), 1u);
  EXPECT_EQ(p.workers[0].worker, 7u);
  EXPECT_FALSE(p.more);
  // An asker that does not page (no AdminRequest at all, as a NATS CLI's
  // empty payload; or one without paged) gets every worker or an error,
  // never a cut list it would take for the whole.
  for (const auto& payload :
       {std::vector<uint8_t>{}, encode(admin_request{})}) {
    p = page(payload);
    EXPECT_TRUE(p.workers.empty());
    EXPECT_FALSE(p.more);
    EXPECT_NE(p.error.find("8 workers do not fit in one NATS message"),
              std::string::npos)
        << p.error;
  }
}

TEST_F(mesh_test, admin_lists_workers_shards_and_prefix_holders) {
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

TEST_F(mesh_test, weights_set_reach_every_router_and_drain_steers) {
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

TEST_F(mesh_test, a_killed_agent_gets_no_awards_after_three_heartbeats) {
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

// A Withdraw travels to the agent's worker and back: a worker that never
// had the award withdraws it, and the award, arriving later, is refused.
TEST_F(mesh_test, a_withdraw_over_nats_refuses_the_award_that_comes_later) {
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

TEST_F(mesh_test, malformed_payloads_are_counted_and_answered) {
  start_mesh();
  auto& c = bus();
  const bytes garbage = {1, 2, 3, 4, 5, 6, 7};
  const auto before = decode_errors(msg_kind::route_request);
  auto reply = c.request(subjects{}.route(), garbage, 2000ms);
  ASSERT_TRUE(reply) << reply.err().message;
  auto d = decode<decision>(*reply);
  ASSERT_TRUE(d);
  EXPECT_NE(d->error.find("RouteRequest"), std::string::npos) << d->error;
  EXPECT_EQ(decode_errors(msg_kind::route_request), before + 1);
  // The JSON form answers in JSON, naming the field.
  const std::string bad_json = R"({"id": 1, "tokens": "many"})";
  auto jr = c.request(subjects{}.route_json(),
                      bytes(bad_json.begin(), bad_json.end()), 2000ms);
  ASSERT_TRUE(jr);
  const std::string text(jr->begin(), jr->end());
  EXPECT_NE(text.find("\"error\""), std::string::npos) << text;
  EXPECT_NE(text.find("tokens"), std::string::npos) << text;
  // And a good JSON request is routed.
  const std::string good =
      R"({"id": 5, "tokens": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]})";
  auto ok = c.request(subjects{}.route_json(), bytes(good.begin(), good.end()),
                      2000ms);
  ASSERT_TRUE(ok);
  const std::string ok_text(ok->begin(), ok->end());
  EXPECT_NE(ok_text.find("\"worker\""), std::string::npos) << ok_text;
  // Text without token ids is routed on approximate blocks, and counted.
  const uint64_t text_before = text_route_requests();
  const std::string as_text =
      R"({"id": 6, "text": ")" + std::string(200, 'w') + R"("})";
  auto tr = c.request(subjects{}.route_json(),
                      bytes(as_text.begin(), as_text.end()), 2000ms);
  ASSERT_TRUE(tr);
  const std::string tr_text(tr->begin(), tr->end());
  EXPECT_NE(tr_text.find("\"worker\""), std::string::npos) << tr_text;
  EXPECT_EQ(text_route_requests(), text_before + 1);
  // Calls for bids, awards, index queries and admin requests likewise.
  const auto bids_before = decode_errors(msg_kind::call_for_bids);
  auto b = c.request(subjects{}.agent("node-a", "bid"), garbage, 2000ms);
  ASSERT_TRUE(b);
  auto bl = decode<bid_list>(*b);
  ASSERT_TRUE(bl);
  EXPECT_NE(bl->error.find("CallForBids"), std::string::npos);
  EXPECT_EQ(decode_errors(msg_kind::call_for_bids), bids_before + 1);
  auto a = c.request(subjects{}.agent("node-a", "award"), garbage, 2000ms);
  ASSERT_TRUE(a);
  auto ar = decode<award_reply>(*a);
  ASSERT_TRUE(ar);
  EXPECT_FALSE(ar->accepted);
  EXPECT_NE(ar->reason.find("Award"), std::string::npos);
  auto q = c.request(subjects{}.index_query(0), garbage, 2000ms);
  ASSERT_TRUE(q);
  auto qr = decode<index_reply>(*q);
  ASSERT_TRUE(qr);
  EXPECT_NE(qr->error.find("IndexQuery"), std::string::npos);
  auto ad = c.request(subjects{}.admin("drain"), garbage, 2000ms);
  ASSERT_TRUE(ad);
  auto adr = decode<admin_reply>(*ad);
  ASSERT_TRUE(adr);
  EXPECT_NE(adr->error.find("AdminRequest"), std::string::npos);
  // A batch of garbage, to an agent and to a shard: counted, and each
  // still answers a good call afterwards.
  const auto batches_before = decode_errors(msg_kind::batch);
  ASSERT_TRUE(c.publish(subjects{}.agent("node-a", "batch"), garbage));
  ASSERT_TRUE(c.publish(subjects{}.index_batch(0), garbage));
  ASSERT_TRUE(eventually(
      [&] { return decode_errors(msg_kind::batch) == batches_before + 2; }));
  auto after = c.request(subjects{}.index_query(0),
                         encode(index_query{{1, 2, 3}}), 2000ms);
  ASSERT_TRUE(after);
  ASSERT_TRUE(decode<index_reply>(*after));
  // Heartbeats of garbage change nothing.
  ASSERT_TRUE(c.publish(subjects{}.worker_beat(), garbage));
  auto w = admin_request_call(c, subjects{}, "workers", {}, 1000ms);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->workers.size(), 8u);
}

// Requests over a size limit (messages/limits.hpp) are answered with an
// error naming the limit, and counted; never dropped in silence. The
// limits are process-wide, and this process hosts the whole mesh.
TEST_F(mesh_test, requests_over_a_limit_are_answered_naming_it) {
  start_mesh();
  auto& c = bus();
  struct restore {
    ~restore() { set_wire_limits(wire_limits{}); }
  } restore_defaults;
  set_wire_limits({4096, 8, 4});
  const auto blocks_before = wire_limit_refusals(wire_limit::request_blocks);
  auto reply = c.request(subjects{}.route(), encode(request(1, 1, 9)), 2000ms);
  ASSERT_TRUE(reply) << reply.err().message;
  auto d = decode<decision>(*reply);
  ASSERT_TRUE(d);
  EXPECT_NE(d->error.find("limits.max_request_blocks = 8"), std::string::npos)
      << d->error;
  const std::string json = R"({"id": 2, "blocks": [1,2,3,4,5,6,7,8,9]})";
  auto jr = c.request(subjects{}.route_json(), bytes(json.begin(), json.end()),
                      2000ms);
  ASSERT_TRUE(jr);
  const std::string text(jr->begin(), jr->end());
  EXPECT_NE(text.find("limits.max_request_blocks"), std::string::npos) << text;
  EXPECT_EQ(wire_limit_refusals(wire_limit::request_blocks), blocks_before + 2);
  // A request within the limit is still routed.
  auto ok = c.request(subjects{}.route(), encode(request(3, 1, 8)), 2000ms);
  ASSERT_TRUE(ok);
  auto od = decode<decision>(*ok);
  ASSERT_TRUE(od);
  EXPECT_TRUE(od->error.empty()) << od->error;
  // Too large a payload, before decoding.
  const auto bytes_before = wire_limit_refusals(wire_limit::payload_bytes);
  auto big = c.request(subjects{}.route(), bytes(8192, 0), 2000ms);
  ASSERT_TRUE(big);
  auto bd = decode<decision>(*big);
  ASSERT_TRUE(bd);
  EXPECT_NE(bd->error.find("limits.max_payload_bytes = 4096"),
            std::string::npos)
      << bd->error;
  EXPECT_EQ(wire_limit_refusals(wire_limit::payload_bytes), bytes_before + 1);
  // A call for bids naming too many workers: the agent answers why.
  const auto workers_before = wire_limit_refusals(wire_limit::call_workers);
  auto b = c.request(
      subjects{}.agent("node-a", "bid"),
      encode(call_for_bids{request(4, 1, 2), 1, {0, 0, 0, 0, 0}}), 2000ms);
  ASSERT_TRUE(b);
  auto bl = decode<bid_list>(*b);
  ASSERT_TRUE(bl);
  EXPECT_TRUE(bl->bids.empty());
  EXPECT_NE(bl->error.find("limits.max_call_workers = 4"), std::string::npos)
      << bl->error;
  EXPECT_EQ(wire_limit_refusals(wire_limit::call_workers), workers_before + 1);
}

}  // namespace
}  // namespace kvmesh::test

namespace kvmesh::test {
namespace {

// An index shard past its mailbox bound refuses KV events (counted, and
// reported in its heartbeat): its index misses them. Once it has stopped
// refusing, the agents have their workers announce their caches again, and
// what it missed comes back.
TEST_F(mesh_test, a_shard_that_refused_kv_events_hears_the_caches_again) {
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
  ASSERT_TRUE(c.publish(subjects{}.kv(0), encode(forget)));
  ASSERT_TRUE(eventually([&] { return !holds(); }));

  const uint64_t before = nats_refusals(feed_kind::kv);
  for (uint64_t i = 0; i < 3000; ++i) {
    kv_batch noise;
    noise.worker = 1000;
    noise.events.push_back(
        cache_event{cache_event::stored, tier::gpu, i + 1, i + 1});
    ASSERT_TRUE(c.publish(subjects{}.kv(0), encode(noise)));
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

// A shard's heartbeat that comes late is a busy shard, not a new one: the
// workers announce their caches again only to a restarted shard (a new
// incarnation). Announcing a million events to a shard that was only slow
// made it slower, and the mesh collapsed (the soak, session 5).
TEST_F(mesh_test, only_a_restarted_shard_hears_the_caches_again) {
  start_agent("node-a", 0, 2);
  auto& c = bus();
  std::atomic<int> resyncs{0};
  // Agents send KV events batched, on kv_batch(0).
  auto sub = c.subscribe(subjects{}.kv_batch(0), "", [&](nats_message m) {
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

// A client chooses its reply subject: a router that answered anywhere would
// publish, with its own NATS permissions, where the client may not (a
// Decision on an agent's drain subject). Answers go only to inboxes.
TEST_F(mesh_test, a_reply_subject_outside_the_inboxes_is_refused) {
  start_mesh();
  auto& watcher = bus();
  std::atomic<int> heard{0};
  const std::string drain = subjects{}.agent("node-a", "drain");
  ASSERT_TRUE(watcher.subscribe(drain, "", [&](nats_message) { ++heard; }));
  ASSERT_TRUE(watcher.flush(2000ms));
  auto& c = bus();
  auto refused = [&] {
    uint64_t n = 0;
    for (auto& b : buses_)
      n += b->refused_replies();
    return n;
  };
  ASSERT_EQ(refused(), 0u);
  ASSERT_TRUE(c.publish(subjects{}.route(), encode(request(77, 7, 4)), drain));
  // The router decides, then refuses to answer there: counted, and the
  // drain subject never hears it (the router either publishes or counts).
  ASSERT_TRUE(eventually([&] { return refused() == 1; }));
  EXPECT_EQ(heard.load(), 0);
  // An inbox still gets its decision.
  auto d = route_once(c, subjects{}, request(78, 7, 4), 2000ms);
  EXPECT_TRUE(d) << d.err().message;
}

TEST_F(mesh_test, durable_requests_survive_a_router_killed_mid_load) {
  use_jetstream();
  start_mesh(true);
  auto& pub = bus();
  auto qo = durable_queue(subjects{});
  qo.consume = false;  // a client: the routers own the consumer
  auto q = work_queue::open(pub, qo);
  ASSERT_TRUE(q) << q.err().message;
  route_client client(bus());
  constexpr uint64_t n = 600;
  for (uint64_t id = 1; id <= n; ++id) {
    client.send_durable(**q, request(id, id % 20, 8));
    // Mid-load, one router dies with requests in flight: they were not
    // acked, so the server hands them to the other router.
    if (id == n / 2) routers_.front().reset();
  }
  ASSERT_TRUE(eventually([&] { return client.decided() == n; }, 20000ms))
      << client.decided() << " of " << n << " decided; errors "
      << client.errors().size()
      << ", first: " << (client.errors().empty() ? "" : client.errors().front())
      << "; queue: " << ((*q)->state() ? (*q)->state()->messages : 999999)
      << " stored, " << ((*q)->state() ? (*q)->state()->ack_pending : -1)
      << " unacked";
  auto d = client.decisions();
  size_t duplicates = 0;
  for (auto& [id, count] : d)
    duplicates += static_cast<size_t>(count - 1);
  // A router that died after answering but before acking makes the one
  // duplicate at-least-once delivery allows; it must stay rare.
  EXPECT_LE(duplicates, 8u);
  auto state = (*q)->state();
  std::printf("durable: %zu decided, %zu duplicates, %lld redelivered\n",
              d.size(), duplicates,
              static_cast<long long>(state ? state->redelivered : -1));
}

TEST_F(mesh_test, a_durable_request_no_worker_could_take_waits_for_one) {
  // No worker yet (as while NATS restarts and every heartbeat is lost):
  // the router hands the request back to the queue rather than answering
  // "no workers", and decides it once a worker is there.
  use_jetstream();
  start_shard(0, 1);
  process_metrics* metrics = nullptr;
  // 20 s of heartbeats: a slow machine.
  start_router("r1", true, 100, 0, &metrics);
  ASSERT_NE(metrics, nullptr);
  auto& pub = bus();
  auto qo = durable_queue(subjects{});
  qo.consume = false;
  auto q = work_queue::open(pub, qo);
  ASSERT_TRUE(q) << q.err().message;
  route_client client(bus());
  client.send_durable(**q, request(1, 1, 8));
  // Long enough for the router to join the queue and try it more than once.
  ASSERT_TRUE(eventually(
      [&] {
        auto st = (*q)->state();
        return st && st->redelivered > 0;
      },
      5000ms));
  EXPECT_EQ(client.decided(), 0u);
  EXPECT_TRUE(client.errors().empty())
      << "answered: " << client.errors().front();
  // Counted as handed back for want of a worker, and for nothing else.
  const std::string text = metrics->scrape();
  EXPECT_GE(
      series_value(text, "kvmesh_router_handbacks_total{cause=\"no_workers\"}"),
      1.0)
      << text;
  EXPECT_EQ(
      series_value(text, "kvmesh_router_handbacks_total{cause=\"contested\"}"),
      0.0);
  start_agent("node-a", 0, 4);
  ASSERT_TRUE(eventually([&] { return client.decided() == 1; }, 10000ms))
      << (client.errors().empty() ? "" : client.errors().front());
  EXPECT_TRUE(client.errors().empty());
}

TEST_F(mesh_test, a_durable_request_another_router_claims_is_left_to_it) {
  // The queue handed the request to another router as well (as while a
  // cluster settles after its stream's leader moved), which claimed it
  // first: this router leaves it alone, whatever its bids say, until that
  // claim is let go.
  use_jetstream();
  auto& pub = bus();
  auto qo = durable_queue(subjects{});
  qo.consume = false;
  auto q = work_queue::open(pub, qo);
  ASSERT_TRUE(q) << q.err().message;
  auto opened = record_store::open(
      pub, durable_claims(subjects{}, std::chrono::milliseconds(5000)));
  ASSERT_TRUE(opened) << opened.err().message;
  auto& claims = **opened;
  route_client client(bus());
  const uint64_t sequence = client.send_durable(**q, request(1, 1, 8));
  ASSERT_NE(sequence, 0u);
  const std::string key = record_key(sequence, 1);
  auto taken = claims.create(key, {'o', 't', 'h', 'e', 'r'});
  ASSERT_TRUE(taken) << taken.err().message;
  ASSERT_TRUE(*taken);
  start_shard(0, 1);
  process_metrics* metrics = nullptr;
  start_router("r1", true, 100, 0, &metrics);
  ASSERT_NE(metrics, nullptr);
  start_agent("node-a", 0, 4);
  // Handed back, more than once, and never decided meanwhile.
  ASSERT_TRUE(eventually(
      [&] {
        return series_value(
                   metrics->scrape(),
                   "kvmesh_router_handbacks_total{cause=\"contested\"}") >= 2.0;
      },
      10000ms))
      << metrics->scrape();
  EXPECT_EQ(client.decided(), 0u);
  EXPECT_TRUE(client.errors().empty())
      << "answered: " << client.errors().front();
  // The other router let go without an answer (it handed it back).
  ASSERT_TRUE(claims.erase(key));
  ASSERT_TRUE(eventually([&] { return client.decided() == 1; }, 10000ms))
      << (client.errors().empty() ? "" : client.errors().front());
  EXPECT_TRUE(client.errors().empty());
  // The router took the claim for its auction.
  std::vector<uint8_t> holder;
  auto after = claims.create(key, {'x'}, &holder);
  ASSERT_TRUE(after) << after.err().message;
  EXPECT_FALSE(*after);
  EXPECT_EQ(std::string(holder.begin(), holder.end()).rfind("r1/", 0), 0u);
}

TEST_F(mesh_test, a_durable_client_reads_the_answer_it_missed_from_the_record) {
  // As across a lone nats-server's restart (issue 8): a router decided
  // while the client was still reconnecting, so its answer (core NATS, to
  // the client's inbox) reached no one. The record it kept first is the
  // answer; here the router keeps it and sends nothing.
  use_jetstream();
  auto& router_bus = bus();
  auto q = work_queue::open(router_bus, durable_queue(subjects{}));
  ASSERT_TRUE(q) << q.err().message;
  auto opened = record_store::open(router_bus, durable_records(subjects{}));
  ASSERT_TRUE(opened) << opened.err().message;
  std::shared_ptr<record_store> records = std::move(*opened);
  std::atomic<int> taken{0};
  ASSERT_TRUE((*q)->start([&](nats_message m, std::shared_ptr<delivery> d) {
    auto r = decode<route_request_msg>(m.payload);
    if (r) {
      decision out;
      out.request = r->id;
      out.worker = 7;
      EXPECT_TRUE(
          records->put(record_key(d->stream_sequence(), r->id), encode(out)));
      ++taken;
    }
    (void)d->ack();
  }));
  auto d = route_durable_once(bus(), subjects{}, request(42, 1, 8), 1500ms);
  ASSERT_TRUE(d) << d.err().message;
  EXPECT_EQ(d->request, 42u);
  EXPECT_EQ(d->worker, 7u);
  EXPECT_EQ(taken.load(), 1);
  (*q)->stop();
}

TEST_F(mesh_test, a_three_node_nats_cluster_routes_and_survives_a_node) {
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
