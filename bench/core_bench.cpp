// Microbenchmarks of the router's hot path: computing a bid and pricing bids.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/pricing.hpp"
#include "core/worker.hpp"

namespace kvmesh {
namespace {

// A worker holding 100,000 blocks (60k GPU, 30k host, 10k disk) bids for
// 256-block chains that it holds entirely, across all three tiers: the walk
// never stops early, the worst case. `chains` = 1 repeats one chain (its
// lookups stay in L1/L2); 512 cycles through chains covering the whole map,
// so most lookups miss the CPU caches as on a busy router.
void bid_256_blocks_100k_held(benchmark::State& state) {
  auto cache = tiered_cache::make({60000, 30000, 10000});
  std::mt19937_64 rng(1);
  std::vector<uint64_t> held(100000);
  for (auto& h : held)
    h = rng();
  for (uint64_t h : held)
    cache->store(h, tier::gpu);  // the first 40k sink to host and disk
  const size_t chains = static_cast<size_t>(state.range(0));
  std::vector<std::vector<uint64_t>> chain(chains);
  for (size_t c = 0; c < chains; ++c)
    for (size_t i = 0; i < 256; ++i)
      chain[c].push_back(held[rng() % held.size()]);
  worker_config cfg;
  auto ledger = worker_ledger::make(cfg);
  for (uint64_t r = 0; r < 32; ++r)
    (void)ledger->reserve(r, 10, 1e9);
  const tier_match m = cache->match(chain[0]);
  state.counters["gpu"] = m.gpu;
  state.counters["host"] = m.host;
  state.counters["disk"] = m.disk;
  size_t next = 0;
  for (auto _ : state) {
    bid b = make_bid(*cache, *ledger, chain[next].data(), 256);
    benchmark::DoNotOptimize(b);
    if (++next == chains) next = 0;
  }
}
BENCHMARK(bid_256_blocks_100k_held)->Arg(1)->Arg(512);

void price_64_bids(benchmark::State& state) {
  std::mt19937_64 rng(2);
  std::vector<bid> bids(64);
  for (size_t i = 0; i < bids.size(); ++i) {
    bid& b = bids[i];
    b.worker = static_cast<uint32_t>(i);
    b.gpu = rng() % 200;
    b.host = rng() % 40;
    b.disk = rng() % 10;
    b.queued = static_cast<double>(rng() % 5000);
    b.reserved = static_cast<double>(rng() % 100);
    b.active = rng() % 60000;
    b.active_overlap = rng() % 50;
    b.capacity = 60000;
    b.speed = (rng() % 2) ? 1.0 : 0.5;
  }
  std::vector<price_breakdown> out(bids.size());
  price_config cfg;
  uint64_t seed = 3;
  for (auto _ : state) {
    size_t w =
        price_bids(cfg, 256, 8, bids.data(), bids.size(), out.data(), seed);
    benchmark::DoNotOptimize(w);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(price_64_bids);

}  // namespace
}  // namespace kvmesh

BENCHMARK_MAIN();
