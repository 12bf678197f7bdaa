// Writes the seed corpus of the fuzz targets: real messages made by the
// codecs and engine-shaped msgpack, one file per seed.
// usage: make_corpus DIR   (DIR/codec/..., DIR/kv_events/..., ...)
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "messages/codec.hpp"
#include "tests/engines/msgpack_writer.hpp"
#include "tests/samples.hpp"

namespace kvmesh {
namespace {

namespace fs = std::filesystem;
fs::path root;

void save(const std::string& target, const std::string& name,
          const std::vector<uint8_t>& bytes) {
  fs::create_directories(root / target);
  std::ofstream out(root / target / name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// A codec seed: the kind's byte, then the payload.
template <class T>
void message(msg_kind kind, const std::string& name, const T& x) {
  std::vector<uint8_t> bytes{static_cast<uint8_t>(kind)};
  const auto payload = encode(x);
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  save("codec", name, bytes);
}

route_request_msg request(uint64_t id, size_t blocks) {
  route_request_msg r;
  r.id = id;
  for (size_t i = 0; i < blocks; ++i)
    r.blocks.push_back(0x9e3779b97f4a7c15ull * (i + 1));
  r.input_tokens = static_cast<uint32_t>(blocks * 16);
  r.output_tokens = 128;
  r.block_tokens = 16;
  return r;
}

bid a_bid(uint32_t worker) {
  bid b;
  b.worker = worker;
  b.gpu = 3;
  b.host = 1;
  b.queued = 2.5;
  b.capacity = 4096;
  b.speed = 1.5;
  b.c_host = NAN;  // "not reported", as the schema defaults
  return b;
}

void codec_seeds() {
  message(msg_kind::route_request, "route_request", request(7, 4));
  message(msg_kind::route_request, "route_request_empty", request(0, 0));
  message(msg_kind::call_for_bids, "call_for_bids",
          call_for_bids{request(8, 3), 2.0, {1, 2, 3}});
  message(msg_kind::bid, "bid", a_bid(2));
  message(msg_kind::award, "award", award_msg{request(9, 2), 3.0, 2});
  message(msg_kind::award_reply, "award_reply",
          award_reply{true, "", "http://gpu-2:8000"});
  message(msg_kind::decision, "decision", test::sample_decision());
  decision refused;
  refused.request = 10;
  refused.error = "overloaded";
  message(msg_kind::decision, "decision_error", refused);
  kv_batch kb;
  kb.worker = 3;
  kb.events = {{cache_event::stored, tier::gpu, 11, 11},
               {cache_event::removed, tier::host, 12, 11}};
  message(msg_kind::kv_batch, "kv_batch", kb);
  message(msg_kind::worker_status, "worker_status",
          test::sample_worker(4, 100));
  const router_status rs = test::sample_router("router-1", 1000);
  message(msg_kind::router_status, "router_status", rs);
  shard_status ss;
  ss.shard = 1;
  ss.blocks = 10;
  ss.shards = 2;
  message(msg_kind::shard_status, "shard_status", ss);
  message(msg_kind::index_query, "index_query", index_query{{1, 2, 3}});
  message(msg_kind::index_reply, "index_reply",
          index_reply{{{1, 3, 0, 0}, {2, 1, 1, 0}}, ""});
  message(msg_kind::price_weights, "price_weights", price_config{});
  message(msg_kind::bids, "bids", bid_list{{a_bid(1), a_bid(2)}, ""});
  message(msg_kind::release, "release", release_msg{9, {1, 2}});
  message(msg_kind::request_events, "request_events",
          request_events{{{9, 2, false, 3, 1, 0}, {9, 2, true, 0, 0, 0}}});
  admin_request ar;
  ar.worker = 2;
  ar.on = true;
  ar.chain = {5, 6};
  ar.paged = true;
  ar.from = 7;
  message(msg_kind::admin_request, "admin_request", ar);
  admin_reply rep;
  rep.workers = {test::sample_worker(1, 100), test::sample_worker(2, 50)};
  rep.routers = {rs};
  rep.shards = {ss};
  rep.holders = {{1, 2, 0, 0}};
  rep.count = 3;
  rep.more = true;
  message(msg_kind::admin_reply, "admin_reply", rep);
  batch_msg b;
  b.items = {{"kvmesh.agent.a1.bid", "_INBOX.x.1", encode(a_bid(1))},
             {"kvmesh.agent.a1.award", "_INBOX.x.2",
              encode(award_msg{request(3, 1), 1, 1})},
             {"kvmesh.elsewhere.bid", "", encode(a_bid(2))}};
  message(msg_kind::batch, "batch", b);
  message(msg_kind::withdraw, "withdraw", withdraw_msg{3, 1});
  message(msg_kind::withdraw_reply, "withdraw_reply",
          withdraw_reply{false, "http://10.0.0.9:8001", 4});
  message(msg_kind::request_progress, "request_progress",
          request_progress{progress_event::first, 9, 2, 77});
}

// vLLM's and SGLang's shapes: the kv_events seed is the block size byte,
// the sequence frame's length (8) and the sequence, then the payload.
void kv_seed(const std::string& name, const test::mp_writer& w) {
  save("msgpack", name, w.bytes());
  std::vector<uint8_t> bytes{1, 8, 0, 0, 0, 0, 0, 0, 0, 42};
  bytes.insert(bytes.end(), w.bytes().begin(), w.bytes().end());
  save("kv_events", name, bytes);
}

void kv_seeds() {
  kv_seed("vllm_arrays", test::vllm_array_batch());

  test::mp_writer map_vllm;  // plain structs, byte-string hashes
  map_vllm.map(3).str("ts").f64(1.5).str("events").array(2);
  map_vllm.map(6)
      .str("type")
      .str("BlockStored")
      .str("block_hashes")
      .array(1)
      .bin(std::string(32, '\x01'))
      .str("parent_block_hash")
      .nil()
      .str("token_ids")
      .uints({1, 2})
      .str("block_size")
      .uint(2)
      .str("medium")
      .str("GPU");
  map_vllm.map(3)
      .str("type")
      .str("BlockRemoved")
      .str("block_hashes")
      .array(1)
      .bin(std::string(32, '\x01'))
      .str("medium")
      .str("CPU");
  map_vllm.str("data_parallel_rank").uint(1);
  kv_seed("vllm_maps", map_vllm);

  kv_seed("sglang", test::sglang_batch());
}

}  // namespace
}  // namespace kvmesh

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus DIR\n");
    return 2;
  }
  kvmesh::root = argv[1];
  kvmesh::codec_seeds();
  kvmesh::kv_seeds();
  return 0;
}
