// worker_owners: the first agent heard holds a worker id while it is heard.
#include "core/owners.hpp"

#include <gtest/gtest.h>

namespace kvmesh::test {
namespace {

using namespace std::chrono_literals;
using v = worker_owners::verdict;

TEST(owners, the_first_agent_holds_a_worker_while_it_is_heard) {
  worker_owners o(3s, 10);
  const worker_owners::clock::time_point t0{};
  EXPECT_EQ(o.claim(5, "a", t0), v::held);
  EXPECT_EQ(o.claim(5, "b", t0 + 1s), v::owned);
  EXPECT_EQ(o.claim(5, "a", t0 + 2s), v::held);
  // Still heard 3 s before: b is refused at 5 s, takes it over after.
  EXPECT_EQ(o.claim(5, "b", t0 + 5s), v::owned);
  EXPECT_EQ(o.claim(5, "b", t0 + 5s + 1ms), v::held);
  EXPECT_EQ(o.claim(5, "a", t0 + 6s), v::owned);
}

TEST(owners, ids_are_capped_and_silent_holders_forgotten) {
  worker_owners o(3s, 2);
  const worker_owners::clock::time_point t0{};
  EXPECT_EQ(o.claim(1, "a", t0), v::held);
  EXPECT_EQ(o.claim(2, "a", t0 + 2s), v::held);
  EXPECT_EQ(o.claim(3, "a", t0 + 2s), v::full);
  EXPECT_EQ(o.claim(1, "a", t0 + 2s), v::held);  // known ids still pass
  o.forget(t0 + 1s);
  EXPECT_EQ(o.size(), 2u);
  o.forget(t0 + 2s + 1ms);
  EXPECT_EQ(o.size(), 0u);
  EXPECT_EQ(o.claim(3, "b", t0 + 3s), v::held);
}

}  // namespace
}  // namespace kvmesh::test
