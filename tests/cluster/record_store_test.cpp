// Tests of cluster/record_store against a real nats-server with JetStream:
// records shared by routers and kept across a restart, claims with one
// holder.
#include "cluster/record_store.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "jetstream_fixture.hpp"

namespace kvmesh::test {
namespace {

// The jetstream fixture under this file's suite name.
class record_store_test : public jetstream_test {};

// Durable intake's record of answers: what one router keeps, another
// reads (a redelivery answered without a second auction), across a server
// restart; a key never written is not_found, not an I/O error.
TEST_F(record_store_test, records_are_shared_by_routers_and_survive_a_restart) {
  auto bus1 = connect();
  auto bus2 = connect();
  ASSERT_TRUE(bus1 && bus2);
  auto r1 = record_store::open(*bus1, record_options{});
  auto r2 = record_store::open(*bus2, record_options{});  // binds to r1's
  ASSERT_TRUE(r1) << r1.err().message;
  ASSERT_TRUE(r2) << r2.err().message;
  auto missing = (*r2)->get("7-42");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.err().code, ec::not_found);
  ASSERT_TRUE((*r1)->put("7-42", {1, 2, 3}));
  auto got = (*r2)->get("7-42");
  ASSERT_TRUE(got) << got.err().message;
  EXPECT_EQ(*got, (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ((*r1)->puts(), 1u);
  EXPECT_EQ((*r2)->hits(), 1u);
  r1->reset();
  r2->reset();
  bus1.reset();
  bus2.reset();
  restart();
  auto bus3 = connect();
  ASSERT_TRUE(bus3);
  auto r3 = record_store::open(*bus3, record_options{});
  ASSERT_TRUE(r3) << r3.err().message;
  auto again = (*r3)->get("7-42");
  ASSERT_TRUE(again) << again.err().message;
  EXPECT_EQ(*again, (std::vector<uint8_t>{1, 2, 3}));
}

// A router's claim on a durable request: of two creates of one key, one
// wins and the other learns who holds it; the holder lets go by erasing
// it, or the claim lapses after the bucket's TTL (a dead router's).
TEST_F(record_store_test, a_claim_has_one_holder_until_let_go_or_lapsed) {
  auto bus1 = connect();
  auto bus2 = connect();
  ASSERT_TRUE(bus1 && bus2);
  record_options o;
  o.bucket = "CLAIMS_TEST";
  o.ttl = std::chrono::milliseconds(1500);
  auto a = record_store::open(*bus1, o);
  auto b = record_store::open(*bus2, o);
  ASSERT_TRUE(a) << a.err().message;
  ASSERT_TRUE(b) << b.err().message;
  const std::vector<uint8_t> ra{'a'}, rb{'b'};
  auto first = (*a)->create("9-1", ra);
  ASSERT_TRUE(first) << first.err().message;
  EXPECT_TRUE(*first);
  std::vector<uint8_t> holder;
  auto second = (*b)->create("9-1", rb, &holder);
  ASSERT_TRUE(second) << second.err().message;
  EXPECT_FALSE(*second);
  EXPECT_EQ(holder, ra);
  // Let go: the other takes it.
  ASSERT_TRUE((*a)->erase("9-1"));
  auto third = (*b)->create("9-1", rb);
  ASSERT_TRUE(third) << third.err().message;
  EXPECT_TRUE(*third);
  // Held by b, never let go: it lapses after the TTL, and a takes it.
  auto held = (*a)->create("9-1", ra, &holder);
  ASSERT_TRUE(held);
  EXPECT_FALSE(*held);
  EXPECT_EQ(holder, rb);
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool taken = false;
  while (!taken && std::chrono::steady_clock::now() < until) {
    auto again = (*a)->create("9-1", ra);
    ASSERT_TRUE(again) << again.err().message;
    taken = *again;
    if (!taken) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(taken);
}

}  // namespace
}  // namespace kvmesh::test
