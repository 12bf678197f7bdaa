// The mesh tests' fixture: node agents, router processes and index shards
// on a real nats-server, each with its own connection as separate
// processes would have, and a client that counts the decisions it gets.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/bridge.hpp"
#include "cluster/mesh.hpp"
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

using namespace std::chrono_literals;
using bytes = std::vector<uint8_t>;

// Short, for quick tests; long enough that a loaded 2-core machine does not
// make live workers look dead.
constexpr auto beat = std::chrono::milliseconds(200);

inline mesh_options mesh() {
  mesh_options m;
  m.heartbeat = beat;
  m.call_timeout = 1500ms;
  return m;
}

inline std::unique_ptr<nats_bus> connect(const std::string& url) {
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
inline route_request_msg request(uint64_t id, uint64_t family,
                                 uint32_t blocks) {
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

  void start_agent(const std::string& name, uint32_t first, uint32_t n,
                   const std::vector<served_model>& models = {}) {
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
      wo.models = models;
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
    o.mesh.forget_beats = forget_beats_;
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

  uint32_t forget_beats_ = mesh_options{}.forget_beats;  // routers'
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
inline double series_value(const std::string& text, const std::string& series) {
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
    // The answers' tally outlives the client: libnats may run the handler
    // once more after the unsubscribe.
    auto t = t_;
    auto sub = bus_.subscribe("_INBOX.mesh_test.>", "", [t](nats_message m) {
      auto d = decode<decision>(m.payload);
      std::lock_guard<std::mutex> g(t->mu);
      if (!d) {
        ++t->undecodable;
        return;
      }
      if (!d->error.empty()) {
        t->errors.push_back(d->error);
        return;
      }
      ++t->decisions[d->request];
      ++t->by_worker[d->worker];
    });
    EXPECT_TRUE(sub);
    if (sub) sub_ = *sub;
  }
  ~route_client() {
    if (sub_) (void)bus_.unsubscribe(sub_);
  }
  route_client(const route_client&) = delete;
  route_client& operator=(const route_client&) = delete;
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
    std::lock_guard<std::mutex> g(t_->mu);
    return t_->decisions.size();
  }
  std::map<uint64_t, int> decisions() {
    std::lock_guard<std::mutex> g(t_->mu);
    return t_->decisions;
  }
  std::map<uint32_t, int> by_worker() {
    std::lock_guard<std::mutex> g(t_->mu);
    return t_->by_worker;
  }
  std::vector<std::string> errors() {
    std::lock_guard<std::mutex> g(t_->mu);
    return t_->errors;
  }

 private:
  struct tally {
    std::mutex mu;
    std::map<uint64_t, int> decisions;
    std::map<uint32_t, int> by_worker;
    std::vector<std::string> errors;
    int undecodable = 0;
  };
  nats_bus& bus_;
  std::shared_ptr<tally> t_ = std::make_shared<tally>();
  uint64_t sub_ = 0;
};

// A node agent as an attacker (or a broken member) runs one: it beats for
// its workers with whatever status `beats` says and answers every call for
// bids with `forge` (one bid per worker asked), every award by accepting it
// with its own endpoint; it withdraws when asked.
class forged_agent {
 public:
  using forge_fn = std::function<bid(const call_for_bids&, uint32_t worker)>;
  forged_agent(nats_bus& bus, std::string name,
               std::vector<worker_status> beats, forge_fn forge)
      : bus_(bus),
        name_(std::move(name)),
        beat_(std::move(beats)),
        forge_(std::move(forge)) {
    auto sub = bus_.subscribe(
        subjects{}.agent(name_, "*"), "", [this](nats_message m) {
          each_unbatched(std::move(m),
                         [this](nats_message one) { answer(one); });
        });
    EXPECT_TRUE(sub);
    EXPECT_TRUE(bus_.flush(2000ms));
    beating_ = std::thread([this] {
      while (!stop_) {
        for (auto s : beat_) {
          s.agent = name_;
          (void)bus_.publish(subjects{}.worker_beat(name_), encode(s));
        }
        std::this_thread::sleep_for(beat);
      }
    });
  }
  ~forged_agent() {
    stop_ = true;
    beating_.join();
  }
  int awards() const { return awards_; }
  int calls() const { return calls_; }

 private:
  void answer(const nats_message& m) {
    if (m.reply.empty()) return;
    const auto verb = m.subject.substr(m.subject.rfind('.') + 1);
    if (verb == "bid") {
      auto cfb = decode<call_for_bids>(m.payload);
      if (!cfb) return;
      ++calls_;
      bid_list out;
      for (uint32_t w : cfb->workers)
        out.bids.push_back(forge_(*cfb, w));
      (void)bus_.publish(m.reply, encode(out));
    } else if (verb == "award") {
      ++awards_;
      (void)bus_.publish(
          m.reply, encode(award_reply{true, {}, "http://evil.example:6666"}));
    } else if (verb == "withdraw") {
      withdraw_reply r;
      r.withdrawn = true;
      (void)bus_.publish(m.reply, encode(r));
    }
  }

  nats_bus& bus_;
  std::string name_;
  std::vector<worker_status> beat_;
  forge_fn forge_;
  std::atomic<bool> stop_{false};
  std::atomic<int> awards_{0};
  std::atomic<int> calls_{0};
  std::thread beating_;
};

}  // namespace kvmesh::test
