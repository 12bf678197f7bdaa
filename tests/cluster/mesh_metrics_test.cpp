// Tests of cluster/mesh_metrics: an index shard, a node agent and a router
// on a real nats-server, each with its metrics; requests routed, then each
// one scraped (in process and over HTTP) and its series checked.
#include "cluster/mesh_metrics.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <thread>

#include "cluster/clients.hpp"
#include "core/sim.hpp"
#include "messages/codec.hpp"
#include "nats_server.hpp"

namespace kvmesh::test {
namespace {

using namespace std::chrono_literals;

// "name{labels}" -> value, from a text-format page.
std::map<std::string, double> samples(const std::string& page) {
  std::map<std::string, double> out;
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

// The sum of every sample of `name` whose labels contain `has`.
double sum_of(const std::map<std::string, double>& s, const std::string& name,
              const std::string& has = "") {
  double total = 0;
  for (const auto& [key, v] : s)
    if ((key == name || key.rfind(name + "{", 0) == 0) &&
        key.find(has) != std::string::npos)
      total += v;
  return total;
}

template <class F>
bool eventually(F pred, std::chrono::milliseconds limit = 10000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return pred();
}

std::string http_get(uint16_t port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return {};
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
  (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0)
    out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

class mesh_metrics_test : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<nats_server>();
    cfg_ = std::make_unique<caf::actor_system_config>();
    register_types(*cfg_);
    tune_for_latency(*cfg_);
    sys_ = std::make_unique<caf::actor_system>(*cfg_);
  }
  void TearDown() override {
    http_.reset();
    router_.reset();
    agent_.reset();
    shard_.reset();
    sys_->await_all_actors_done();
    buses_.clear();
    sys_.reset();
    server_.reset();
  }

  nats_bus& bus() {
    nats_options o;
    o.url = server_->url();
    auto b = nats_bus::connect(o);
    EXPECT_TRUE(b) << b.err().message;
    buses_.push_back(std::move(*b));
    return *buses_.back();
  }

  mesh_options mesh() {
    mesh_options m;
    m.heartbeat = 200ms;
    m.call_timeout = 1500ms;
    return m;
  }

  void start() {
    shard_node_options so;
    so.mesh = mesh();
    so.shard.dir = dir_.path() + "/shard-0";
    auto sm = process_metrics::for_shard(so);
    ASSERT_TRUE(sm) << sm.err().message;
    shard_metrics_ = std::move(*sm);
    auto& sb = bus();
    auto s = shard_node::start(*sys_, sb, so);
    ASSERT_TRUE(s) << s.err().message;
    shard_ = std::move(*s);
    shard_metrics_->watch(*sys_, sb, *shard_);

    sim_config cfg;
    cfg.workers = 2;
    cfg.gpu_blocks = 512;
    cfg.host_blocks = 256;
    cfg.disk_blocks = 0;
    cfg.block_tokens = 16;
    agent_options ao;
    ao.mesh = mesh();
    ao.name = "node-a";
    for (uint32_t w = 0; w < 2; ++w) {
      worker_options wo;
      wo.engine = fleet_engine_config(cfg, w);
      auto probe = engine::make(wo.engine);
      ASSERT_TRUE(probe);
      wo.ledger = fleet_worker_config(cfg, w, *probe);
      wo.time_scale = 20;
      ao.workers.push_back(wo);
    }
    auto am = process_metrics::for_agent(ao);
    ASSERT_TRUE(am) << am.err().message;
    agent_metrics_ = std::move(*am);
    for (const auto& wo : ao.workers)
      ASSERT_TRUE(wo.meters);
    auto& ab = bus();
    auto a = agent_node::start(*sys_, ab, ao);
    ASSERT_TRUE(a) << a.err().message;
    agent_ = std::move(*a);
    agent_metrics_->watch(*sys_, ab, *agent_);

    router_node_options ro;
    ro.mesh = mesh();
    ro.name = "r1";
    ro.router.block_tokens = 16;
    ro.router.bid_deadline = 1000ms;
    ro.router.award_deadline = 1000ms;
    ro.router.fanout = 1;  // 2 workers: the index is asked
    auto rm = process_metrics::for_router(ro);
    ASSERT_TRUE(rm) << rm.err().message;
    router_metrics_ = std::move(*rm);
    ASSERT_TRUE(ro.meters);
    auto& rb = bus();
    auto r = router_node::start(*sys_, rb, ro);
    ASSERT_TRUE(r) << r.err().message;
    router_ = std::move(*r);
    router_metrics_->watch(*sys_, rb, *router_);
  }

  temp_dir dir_;
  std::unique_ptr<nats_server> server_;
  std::unique_ptr<caf::actor_system_config> cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::vector<std::unique_ptr<nats_bus>> buses_;
  std::unique_ptr<process_metrics> shard_metrics_, agent_metrics_,
      router_metrics_;
  std::unique_ptr<shard_node> shard_;
  std::unique_ptr<agent_node> agent_;
  std::unique_ptr<router_node> router_;
  std::unique_ptr<metrics::endpoint> http_;
};

route_request_msg request(uint64_t id, uint32_t blocks) {
  route_request_msg r;
  r.id = id;
  for (uint32_t i = 0; i < blocks; ++i)  // one shared prefix, own tails
    r.blocks.push_back(i < blocks / 2 ? 1000 + i : id * 1000 + i);
  r.input_tokens = blocks * 16;
  r.output_tokens = 4;
  return r;
}

TEST_F(mesh_metrics_test, every_role_serves_its_series_with_sane_values) {
  start();
  auto& client = bus();
  // Routing starts once the router knows both workers and the shard.
  ASSERT_TRUE(eventually([&] {
    auto s = samples(router_metrics_->scrape());
    auto shards = admin_request_call(client, subjects{}, "shards", {}, 500ms);
    return sum_of(s, "kvmesh_router_workers", "state=\"live\"") == 2 &&
           shards && !shards->shards.empty();
  }));
  const uint32_t blocks = 8;
  // The price each worker last won at, from the decisions.
  std::map<uint32_t, double> last_price;
  for (uint64_t id = 1; id <= 5; ++id) {
    auto d = route_once(client, subjects{}, request(id, blocks), 5000ms);
    ASSERT_TRUE(d) << d.err().message;
    for (const price_breakdown& p : d->prices)
      if (p.worker == d->worker) last_price[d->worker] = p.price;
  }
  ASSERT_FALSE(last_price.empty());
  // Answered without a worker: no prompt tokens, and a payload that is not
  // a RouteRequest.
  route_request_msg empty;
  empty.id = 6;
  EXPECT_FALSE(route_once(client, subjects{}, empty, 5000ms));
  const uint64_t before = decode_errors(msg_kind::route_request);
  EXPECT_TRUE(client.request(subjects{}.route(), {1, 2, 3}, 5000ms));
  EXPECT_EQ(decode_errors(msg_kind::route_request), before + 1);

  auto r = samples(router_metrics_->scrape());
  EXPECT_EQ(r["kvmesh_build_info{role=\"router\",version=\"" +
              std::string(kvmesh_version) + "\"}"],
            1);
  EXPECT_EQ(r["kvmesh_router_requests_total{intake=\"core\"}"], 7);
  EXPECT_EQ(r["kvmesh_router_requests_total{intake=\"json\"}"], 0);
  EXPECT_EQ(r["kvmesh_router_decisions_total"], 5);
  EXPECT_EQ(r["kvmesh_router_failures_total{reason=\"other\"}"], 2);
  EXPECT_EQ(r["kvmesh_router_failures_total{reason=\"overloaded\"}"], 0);
  EXPECT_EQ(r["kvmesh_router_auction_seconds_count"], 5);
  EXPECT_EQ(r["kvmesh_router_auction_seconds_bucket{le=\"+Inf\"}"], 5);
  EXPECT_GT(r["kvmesh_router_auction_seconds_sum"], 0);
  EXPECT_LT(r["kvmesh_router_auction_seconds_sum"], 25);
  EXPECT_EQ(r["kvmesh_router_bids_per_auction_count"], 5);
  EXPECT_GE(r["kvmesh_router_bids_per_auction_sum"], 5);
  EXPECT_LE(r["kvmesh_router_bids_per_auction_sum"], 10);
  EXPECT_EQ(r["kvmesh_router_winner_price_blocks_count"], 5);
  EXPECT_GT(r["kvmesh_router_winner_term_blocks_total{term=\"space\"}"], 0);
  for (const char* cause :
       {"refused", "unanswered", "no_bids", "saturated", "no_live_worker"})
    EXPECT_EQ(r.count("kvmesh_router_reauctions_total{cause=\"" +
                      std::string(cause) + "\"}"),
              1u)
        << cause;
  EXPECT_EQ(sum_of(r, "kvmesh_router_reauctions_total"), 0);
  // One round per decided request (the malformed ones never got one), and
  // as many bids as the deciding rounds priced.
  EXPECT_EQ(r["kvmesh_router_rounds_total"], 5);
  EXPECT_EQ(r["kvmesh_router_bids_total"],
            r["kvmesh_router_bids_per_auction_sum"]);
  EXPECT_EQ(r["kvmesh_router_runner_up_awards_total"], 0);
  EXPECT_EQ(r["kvmesh_router_held_requests"], 0);
  EXPECT_EQ(r["kvmesh_router_workers{state=\"live\"}"], 2);
  EXPECT_EQ(r["kvmesh_router_workers{state=\"gone\"}"], 0);
  EXPECT_GT(r["kvmesh_nats_messages_total{direction=\"in\"}"], 0);
  EXPECT_GT(r["kvmesh_nats_messages_total{direction=\"out\"}"], 0);
  EXPECT_EQ(r["kvmesh_nats_reconnects_total"], 0);
  EXPECT_GE(r["kvmesh_decode_errors_total{kind=\"RouteRequest\"}"], 1);
  EXPECT_EQ(r.count("kvmesh_decode_errors_total{kind=\"json\"}"), 1u);

  auto a = samples(agent_metrics_->scrape());
  EXPECT_EQ(a["kvmesh_build_info{role=\"agent\",version=\"" +
              std::string(kvmesh_version) + "\"}"],
            1);
  EXPECT_EQ(sum_of(a, "kvmesh_worker_awards_total", "result=\"accepted\""), 5);
  EXPECT_EQ(sum_of(a, "kvmesh_worker_prompt_blocks_total"), 5 * blocks);
  EXPECT_LE(sum_of(a, "kvmesh_worker_hit_blocks_total"), 5 * blocks);
  for (const char* w : {"0", "1"}) {
    const std::string id = std::string("worker=\"") + w + "\"";
    EXPECT_EQ(a["kvmesh_worker_capacity_blocks{" + id + "}"], 512) << w;
    // Label pairs sorted by name, as prometheus-cpp prints them.
    EXPECT_EQ(a["kvmesh_worker_tier_capacity_blocks{tier=\"host\"," + id + "}"],
              256);
    EXPECT_EQ(
        a.count("kvmesh_worker_tier_capacity_blocks{tier=\"disk\"," + id + "}"),
        1u);
    EXPECT_EQ(a["kvmesh_worker_tier_capacity_blocks{tier=\"disk\"," + id + "}"],
              0);
    EXPECT_EQ(a["kvmesh_worker_speed{" + id + "}"], 1);
    EXPECT_EQ(a["kvmesh_worker_draining{" + id + "}"], 0);
    EXPECT_EQ(a.count("kvmesh_worker_queued_blocks{" + id + "}"), 1u);
    EXPECT_EQ(a.count("kvmesh_worker_requests{state=\"running\"," + id + "}"),
              1u);
    // The price the router awarded it at last; NaN if it won none. The
    // exposition writes 16 significant digits (prometheus-cpp), one short
    // of a double's round trip: equal to within that rounding.
    const double price = a["kvmesh_worker_last_price_blocks{" + id + "}"];
    const auto want = last_price.find(static_cast<uint32_t>(*w - '0'));
    if (want == last_price.end())
      EXPECT_TRUE(std::isnan(price)) << w << ": " << price;
    else
      EXPECT_NEAR(price, want->second, std::abs(want->second) * 1e-15) << w;
  }
  // Requests finish (time scale 20), their blocks reach the index.
  EXPECT_TRUE(eventually([&] {
    auto a = samples(agent_metrics_->scrape());
    auto s = samples(shard_metrics_->scrape());
    return sum_of(a, "kvmesh_worker_completed_total") == 5 &&
           a["kvmesh_agent_kv_events_total{kind=\"stored\"}"] > 0 &&
           s["kvmesh_index_events_total{shard=\"0\"}"] > 0 &&
           s["kvmesh_index_blocks{shard=\"0\"}"] > 0;
  }));
  // Each finished request's latencies, once each; a prefill takes time.
  {
    auto a = samples(agent_metrics_->scrape());
    EXPECT_EQ(a["kvmesh_worker_time_to_first_token_seconds_count"], 5);
    EXPECT_GT(a["kvmesh_worker_time_to_first_token_seconds_sum"], 0);
    EXPECT_EQ(a["kvmesh_worker_request_duration_seconds_count"], 5);
    EXPECT_GE(a["kvmesh_worker_request_duration_seconds_sum"],
              a["kvmesh_worker_time_to_first_token_seconds_sum"]);
    EXPECT_GE(a["kvmesh_worker_inter_token_latency_seconds_count"], 1);
  }

  auto s = samples(shard_metrics_->scrape());
  EXPECT_EQ(s["kvmesh_build_info{role=\"index\",version=\"" +
              std::string(kvmesh_version) + "\"}"],
            1);
  EXPECT_EQ(s["kvmesh_index_shards{shard=\"0\"}"], 1);
  EXPECT_GE(s["kvmesh_index_entries{shard=\"0\"}"],
            s["kvmesh_index_blocks{shard=\"0\"}"]);
  EXPECT_GT(s["kvmesh_index_rocksdb_bytes{shard=\"0\"}"], 0);
  EXPECT_EQ(s["kvmesh_index_errors_total{shard=\"0\"}"], 0);
  EXPECT_GE(s["kvmesh_index_queries_total{shard=\"0\"}"], 1);
  // Prometheus' process collector's series, from /proc/self.
  EXPECT_GT(s["process_resident_memory_bytes"], 1e6);
  EXPECT_GT(s["process_start_time_seconds"], 1.5e9);
  EXPECT_GT(s["process_cpu_seconds_total"], 0);
  EXPECT_GT(s["process_open_fds"], 2);

  // The same page over HTTP, and the answer counted.
  metrics::endpoint_options o;
  o.address = "127.0.0.1";
  auto server = serve_metrics(*shard_metrics_, o);
  ASSERT_TRUE(server) << server.err().message;
  http_ = std::move(*server);
  const std::string page = http_get(http_->port(), "/metrics");
  EXPECT_EQ(page.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << page;
  EXPECT_NE(page.find("\nkvmesh_index_shards{shard=\"0\"} 1\n"),
            std::string::npos);
  EXPECT_EQ(http_get(http_->port(), "/").rfind("HTTP/1.1 404", 0), 0u);
  // Counted once the answer is out, which the client may read first.
  EXPECT_TRUE(eventually([&] {
    s = samples(shard_metrics_->scrape());
    return s["kvmesh_metrics_requests_total{code=\"200\"}"] == 1 &&
           s["kvmesh_metrics_requests_total{code=\"404\"}"] == 1;
  })) << s["kvmesh_metrics_requests_total{code=\"200\"}"]
      << " " << s["kvmesh_metrics_requests_total{code=\"404\"}"];
}

TEST_F(mesh_metrics_test, a_scrape_before_the_node_runs_has_the_static_series) {
  shard_node_options so;
  so.shard.shard = 2;
  so.shards = 4;
  auto pm = process_metrics::for_shard(so);
  ASSERT_TRUE(pm);
  auto s = samples((*pm)->scrape());
  EXPECT_EQ(s["kvmesh_index_shards{shard=\"2\"}"], 4);
  EXPECT_EQ(s["kvmesh_index_blocks{shard=\"2\"}"], 0);
  EXPECT_EQ(s["kvmesh_build_info{role=\"index\",version=\"" +
              std::string(kvmesh_version) + "\"}"],
            1);
}

}  // namespace
}  // namespace kvmesh::test
