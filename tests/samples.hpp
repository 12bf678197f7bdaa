// The sample messages that unit tests and the fuzz seeds
// (tests/fuzz/make_corpus.cpp) both build: a decision, a worker's and a
// router's status, and engine-shaped KV event batches.
#pragma once

#include <cstdint>
#include <string>

#include "messages/types.hpp"
#include "tests/engines/msgpack_writer.hpp"

namespace kvmesh::test {

// Request 9 won by worker 2 in one auction, with the winner's price.
inline decision sample_decision() {
  decision d;
  d.request = 9;
  d.worker = 2;
  d.auctions = 1;
  price_breakdown p;
  p.worker = 2;
  p.read = 10.5;
  p.credit_gpu = 3;
  p.price = 12.25;
  p.delta = -1;
  d.prices = {p};
  d.endpoint = "http://gpu-2.example:8001";
  return d;
}

// A worker with work in every state, blocks in every tier (the disk's of
// unknown capacity) and a last award's price.
inline worker_status sample_worker(uint32_t id, uint64_t awards) {
  worker_status w;
  w.worker = id;
  w.queued = 12.5;
  w.active = 256;
  w.capacity = 1024;
  w.gpu_blocks = 512;
  w.host_blocks = 2000;
  w.host_capacity = 8000;
  w.disk_blocks = 7;  // no disk capacity: a tier of unknown size
  w.waiting = 1;
  w.running = 2;
  w.completed = 3;
  w.awards = awards;
  w.last_price = 41.5;
  w.agent = "agent-0";
  return w;
}

// A router that has decided `decisions` requests, hearing two workers.
inline router_status sample_router(const std::string& name,
                                   uint64_t decisions) {
  router_status r;
  r.name = name;
  r.decisions = decisions;
  r.auction_p99_us = 850;
  r.rounds = 40;
  r.bids = 130;
  r.live_workers = 2;
  r.workers = 2;
  return r;
}

// The first vLLM layout (v0.9), [ts, events] of arrays: no rank, no
// medium, integer hashes; a store, a removal and a clear.
inline mp_writer vllm_array_batch() {
  mp_writer w;
  w.array(2).f64(10.0).array(3);
  w.array(6)
      .str("BlockStored")
      .uints({11, 12})
      .uint(10)
      .uints({1, 2, 3, 4})
      .uint(2)
      .nil();
  w.array(2).str("BlockRemoved").uints({11});
  w.array(1).str("AllBlocksCleared");
  return w;
}

// SGLang: [ts, events, attn_dp_rank]; BlockStored with a trailing metadata
// map where vLLM has lora_name; Python hash() ints are often negative.
inline mp_writer sglang_batch() {
  mp_writer w;
  w.array(3).f64(3.0).array(1);
  w.array(8)
      .str("BlockStored")
      .array(1)
      .sint(-5123456789012345678ll)
      .sint(-7)
      .uints({1, 2})
      .uint(2)
      .nil()
      .str("CPU_PINNED");
  w.map(1).str("cache_salt").str("s");
  w.uint(2);
  return w;
}

}  // namespace kvmesh::test
