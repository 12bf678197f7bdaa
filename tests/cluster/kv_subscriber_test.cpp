// Tests of cluster/kv_subscriber: a real ZMQ publisher on loopback, a real
// engine WORKER, and what reaches it: batches in order, garbage counted,
// a gap without replay forgetting the cache, a publisher starting over.
#include "cluster/kv_subscriber.hpp"

#include <gtest/gtest.h>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <chrono>
#include <numeric>
#include <thread>

#include "../engines/msgpack_writer.hpp"
#include "nats_server.hpp"

namespace kvmesh::test {
namespace {

using namespace std::chrono_literals;

template <class F>
bool eventually(F pred, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

// A batch in vLLM's map layout storing `blocks` blocks of 4 tokens from
// token `first`, engine hashes from `hash`.
std::string stored(uint32_t first, uint32_t blocks, uint64_t hash) {
  mp_writer w;
  w.map(3).str("ts").f64(1.0).str("events").array(1);
  w.map(8).str("type").str("BlockStored").str("block_hashes").array(blocks);
  for (uint32_t i = 0; i < blocks; ++i)
    w.uint(hash + i);
  std::vector<uint32_t> t(blocks * 4);
  std::iota(t.begin(), t.end(), first);
  w.str("parent_block_hash").nil().str("token_ids").uints(t);
  w.str("block_size").uint(4).str("lora_id").nil().str("medium").str("GPU");
  w.str("lora_name").nil();
  w.str("data_parallel_rank").uint(0);
  return w.text();
}

std::string empty_batch() {
  mp_writer w;
  w.array(3).f64(1.0).array(0).uint(0);
  return w.text();
}

TEST(kv_subscriber, endpoints_of_ranks) {
  EXPECT_EQ(*endpoint_of_rank("tcp://10.0.0.1:5557", 0), "tcp://10.0.0.1:5557");
  EXPECT_EQ(*endpoint_of_rank("tcp://10.0.0.1:5557", 3), "tcp://10.0.0.1:5560");
  EXPECT_EQ(*endpoint_of_rank("tcp://[::1]:5557", 1), "tcp://[::1]:5558");
  EXPECT_FALSE(endpoint_of_rank("tcp://host", 0));
  EXPECT_FALSE(endpoint_of_rank("host:5557", 0));
  EXPECT_FALSE(endpoint_of_rank("tcp://host:65535", 1));
  EXPECT_FALSE(endpoint_of_rank("tcp://host:55x", 0));
}

class kv_subscriber_test : public ::testing::Test {
 protected:
  void SetUp() override {
    register_types(cfg_);
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    engine_worker_options wo;
    wo.state.block_tokens = 4;
    wo.state.gpu_blocks = 100;
    auto w = spawn_engine_worker(*sys_, wo);
    ASSERT_TRUE(w) << w.err().message;
    worker_ = *w;
    port_ = nats_server::free_port();
    pub_.set(zmq::sockopt::linger, 0);
    pub_.bind("tcp://127.0.0.1:" + std::to_string(port_));
    kv_subscriber_options o;
    o.endpoints = {"tcp://127.0.0.1:" + std::to_string(port_)};
    o.topic = "kv";
    o.workers = {worker_};
    auto s = kv_subscriber::start(o);
    ASSERT_TRUE(s) << s.err().message;
    sub_ = std::move(*s);
    // A subscription takes a moment to reach the publisher: probe until
    // one message gets through.
    ASSERT_TRUE(eventually([&] {
      send(seq_++, empty_batch());
      std::this_thread::sleep_for(20ms);
      return sub_->counters().messages > 0;
    }));
    // Probes sent after the first one that arrived are in flight: let them
    // land before the test counts.
    std::this_thread::sleep_for(100ms);
  }
  void TearDown() override {
    sub_.reset();
    caf::anon_send_exit(worker_, caf::exit_reason::user_shutdown);
    sys_.reset();
  }

  void send(uint64_t seq, const std::string& payload,
            const std::string& topic = "kv") {
    std::vector<zmq::const_buffer> frames{
        zmq::buffer(topic), zmq::buffer(seq_frame(seq)), zmq::buffer(payload)};
    zmq::send_multipart(pub_, frames);
  }
  worker_status status() {
    caf::scoped_actor self{*sys_};
    worker_status out;
    self->request(worker_, 2s, status_atom::value)
        .receive([&](const worker_status& s) { out = s; }, [&](caf::error&) {});
    return out;
  }

  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  engine_worker_actor worker_;
  zmq::context_t ctx_{1};
  zmq::socket_t pub_{ctx_, zmq::socket_type::pub};
  int port_ = 0;
  uint64_t seq_ = 0;
  std::unique_ptr<kv_subscriber> sub_;
};

TEST_F(kv_subscriber_test, batches_garbage_gaps_and_restarts) {
  send(seq_++, stored(1, 2, 100));
  ASSERT_TRUE(eventually([&] { return status().gpu_blocks == 2; }));
  // Another topic is not ours; garbage is counted and skipped.
  send(seq_, stored(50, 1, 900), "other");
  send(seq_, "\xc1");
  pub_.send(zmq::buffer(std::string("kv")), zmq::send_flags::none);
  send(seq_++, stored(9, 1, 200));
  ASSERT_TRUE(eventually([&] { return status().gpu_blocks == 3; }));
  auto c = sub_->counters();
  EXPECT_EQ(c.faults[kv_fault::msgpack], 1u);
  EXPECT_EQ(c.faults[kv_fault::frames], 1u);
  EXPECT_EQ(c.gaps, 0u);
  // A lost message and no replay endpoint: the cache is forgotten, then
  // followed from the next message on.
  seq_ += 1;
  send(seq_++, stored(20, 1, 300));
  ASSERT_TRUE(eventually([&] {
    auto c = sub_->counters();
    return c.gaps == 1 && c.resyncs == 1;
  }));
  ASSERT_TRUE(eventually([&] { return status().gpu_blocks == 1; }));
  // The engine restarted: numbering from 0 again.
  send(0, stored(30, 2, 400));
  ASSERT_TRUE(eventually([&] { return sub_->counters().restarts == 1; }));
  ASSERT_TRUE(eventually([&] { return status().gpu_blocks == 2; }));
}

TEST(kv_subscriber_start, bad_options_are_errors) {
  caf::actor_system_config cfg;
  register_types(cfg);
  caf::actor_system sys{cfg};
  kv_subscriber_options o;
  EXPECT_FALSE(kv_subscriber::start(o));  // no endpoint
  o.endpoints = {"tcp://127.0.0.1:1"};
  EXPECT_FALSE(kv_subscriber::start(o));  // no worker for it
  engine_worker_options wo;
  auto w = spawn_engine_worker(sys, wo);
  ASSERT_TRUE(w);
  o.workers = {*w};
  o.endpoints = {"nonsense"};
  EXPECT_FALSE(kv_subscriber::start(o));
  caf::anon_send_exit(*w, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace kvmesh::test
