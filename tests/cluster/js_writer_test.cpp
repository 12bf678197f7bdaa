// Tests of cluster/js_writer, through the record store and the work queue
// that write with it: each write in flight answered once, errors named,
// none answered after the writer is gone.
#include "cluster/js_writer.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "jetstream_fixture.hpp"

namespace kvmesh::test {
namespace {

// The jetstream fixture under this file's suite name.
class js_writer_test : public jetstream_test {};

TEST_F(js_writer_test, writes_in_flight_are_each_answered_once) {
  auto bus = connect();
  ASSERT_TRUE(bus);
  auto store = bucket(*bus, "ASYNC_TEST");
  ASSERT_TRUE(store);
  auto& r = *store;
  // Many at once, then each readable.
  answers puts;
  constexpr size_t n = 200;
  for (size_t i = 0; i < n; ++i)
    r.put_async("7-" + std::to_string(i), {static_cast<uint8_t>(i)}, false,
                puts.slot());
  ASSERT_TRUE(puts.wait_for(n));
  for (const auto& s : puts.got)
    EXPECT_TRUE(s) << s.err().message;
  for (size_t i = 0; i < n; i += 37) {
    auto v = r.get("7-" + std::to_string(i));
    ASSERT_TRUE(v) << v.err().message;
    EXPECT_EQ(*v, std::vector<uint8_t>{static_cast<uint8_t>(i)});
  }
  // Only new: the first write of a key wins, a second is a conflict, and
  // so is one after an erase (its marker), which create() then takes.
  answers claims;
  r.put_async("8-1", {'a'}, true, claims.slot());
  ASSERT_TRUE(claims.wait_for(1));
  r.put_async("8-1", {'b'}, true, claims.slot());
  ASSERT_TRUE(claims.wait_for(2));
  ASSERT_TRUE(r.erase("8-1"));
  r.put_async("8-1", {'c'}, true, claims.slot());
  ASSERT_TRUE(claims.wait_for(3));
  EXPECT_TRUE(claims.got[0]) << claims.got[0].err().message;
  ASSERT_FALSE(claims.got[1]);
  EXPECT_EQ(claims.got[1].err().code, ec::conflict)
      << claims.got[1].err().message;
  ASSERT_FALSE(claims.got[2]);
  EXPECT_EQ(claims.got[2].err().code, ec::conflict);
  auto taken = r.create("8-1", {'c'});
  ASSERT_TRUE(taken) << taken.err().message;
  EXPECT_TRUE(*taken);
  auto v = r.get("8-1");
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, std::vector<uint8_t>{'c'});
}

TEST_F(js_writer_test, requests_published_without_waiting_are_each_stored) {
  auto bus = connect();
  ASSERT_TRUE(bus);
  auto q = open(*bus);
  ASSERT_TRUE(q);
  answers_with<expected<uint64_t>> got;
  constexpr size_t n = 100;
  for (size_t i = 0; i < n; ++i)
    q->publish_async(options().subject, {static_cast<uint8_t>(i)}, got.slot());
  ASSERT_TRUE(got.wait_for(n));
  std::set<uint64_t> sequences;
  for (const auto& s : got.got) {
    ASSERT_TRUE(s) << s.err().message;
    sequences.insert(*s);
  }
  EXPECT_EQ(sequences.size(), n);  // each stored once, at a place of its own
  auto st = q->state();
  ASSERT_TRUE(st) << st.err().message;
  EXPECT_EQ(st->messages, n);
  // A subject no stream stores is refused, by name.
  q->publish_async("elsewhere.route", {1}, got.slot());
  ASSERT_TRUE(got.wait_for(n + 1));
  ASSERT_FALSE(got.got.back());
  EXPECT_NE(got.got.back().err().message.find("no stream stores"),
            std::string::npos)
      << got.got.back().err().message;
}

TEST_F(js_writer_test,
       a_store_destroyed_with_writes_in_flight_answers_each_at_most_once) {
  auto bus = connect();
  ASSERT_TRUE(bus);
  auto store = bucket(*bus, "ASYNC_CLOSE");
  ASSERT_TRUE(store);
  auto counts = std::make_shared<std::vector<std::atomic<int>>>(300);
  for (size_t i = 0; i < counts->size(); ++i)
    store->put_async("5-" + std::to_string(i), std::vector<uint8_t>(512, 1),
                     false, [counts, i](status) { ++(*counts)[i]; });
  store.reset();  // at once: most are still on their way
  bus.reset();
  size_t answered = 0;
  for (const auto& c : *counts) {
    EXPECT_LE(c.load(), 1);
    answered += c.load();
  }
  // The destructor waits a while: a healthy server answers them all.
  EXPECT_EQ(answered, counts->size());

  // A server that answers nothing: the destructor gives up on them, and
  // none is answered after it returned.
  bus = connect();
  ASSERT_TRUE(bus);
  store = bucket(*bus, "ASYNC_CLOSE");
  ASSERT_TRUE(store);
  server->freeze(true);
  auto late = std::make_shared<std::atomic<int>>(0);
  for (size_t i = 0; i < 50; ++i)
    store->put_async("6-" + std::to_string(i), {2}, false,
                     [late](status) { ++*late; });
  store.reset();
  const int at_close = late->load();
  server->freeze(false);
  bus.reset();
  EXPECT_EQ(late->load(), at_close);
}

TEST_F(js_writer_test,
       a_write_the_server_cannot_take_is_answered_with_an_error) {
  auto bus = connect();
  ASSERT_TRUE(bus);
  auto store = bucket(*bus, "ASYNC_GONE");
  ASSERT_TRUE(store);
  // The bucket's stream deleted under it: the server refuses the write.
  auto deleted = bus->request("$JS.API.STREAM.DELETE.KV_ASYNC_GONE", {},
                              std::chrono::seconds(5));
  ASSERT_TRUE(deleted) << deleted.err().message;
  answers a;
  store->put_async("1-1", {'x'}, false, a.slot());
  ASSERT_TRUE(a.wait_for(1));
  ASSERT_FALSE(a.got[0]);
  EXPECT_EQ(a.got[0].err().code, ec::io_error);
  EXPECT_NE(a.got[0].err().message.find("ASYNC_GONE"), std::string::npos)
      << a.got[0].err().message;
  EXPECT_EQ(store->failures(), 1u);
}

}  // namespace
}  // namespace kvmesh::test
