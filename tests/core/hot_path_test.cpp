// Checks that the router's hot path (bid, price) never allocates: a global
// operator new that counts calls replaces the default in this test binary.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "core/block_index.hpp"
#include "core/pricing.hpp"
#include "core/worker.hpp"

namespace {
std::atomic<size_t> allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc{};
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace kvmesh {
namespace {

TEST(hot_path, the_counter_sees_allocations) {
  const size_t before = allocations.load();
  auto* p = new std::vector<int>(8);
  EXPECT_GE(allocations.load() - before, 2u);  // the vector and its buffer
  delete p;
}

TEST(hot_path, bid_and_price_do_not_allocate) {
  auto cache = tiered_cache::make({64, 64, 64});
  ASSERT_TRUE(cache);
  std::vector<uint64_t> chain;
  for (uint64_t h = 1; h <= 128; ++h) {
    ASSERT_TRUE(cache->store(h, tier::gpu));
    chain.push_back(h);
  }
  auto ledger = worker_ledger::make(worker_config{});
  ASSERT_TRUE(ledger);
  ASSERT_TRUE(ledger->reserve(1, 4, 100));
  std::vector<bid> bids(16);
  std::vector<price_breakdown> out(16);
  uint64_t seed = 1;
  const size_t before = allocations.load();
  for (auto& b : bids)
    b = make_bid(*cache, *ledger, chain.data(), 128);
  const size_t w = price_bids(price_config{}, 128, 4, bids.data(), bids.size(),
                              out.data(), seed);
  const size_t after = allocations.load();
  EXPECT_EQ(after - before, 0u);
  EXPECT_LT(w, bids.size());
  EXPECT_EQ(bids[0].gpu + bids[0].host + bids[0].disk, 128u);
}

// The index's "who holds this prefix", asked on every routed request,
// including chains through blocks with three or more holders.
TEST(hot_path, block_index_match_does_not_allocate) {
  block_index idx;
  std::vector<uint64_t> chain;
  for (uint64_t h = 1; h <= 64; ++h) {
    chain.push_back(h * 0x9E3779B97F4A7C15ull);
    for (uint32_t w = 0; w < (h % 4) + 1; ++w)
      idx.apply(w, cache_event{cache_event::stored, tier::host, chain.back()});
  }
  tier_match out[8];
  const size_t before = allocations.load();
  idx.match(chain.data(), chain.size(), 8, out);
  const size_t after = allocations.load();
  EXPECT_EQ(after - before, 0u);
  EXPECT_EQ(out[0].host, 64u);
  EXPECT_EQ(out[1].host, 3u);  // the 4th block has worker 0 alone
}

}  // namespace
}  // namespace kvmesh
