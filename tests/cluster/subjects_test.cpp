// Tests of cluster/subjects: the names a subject token may hold, and every
// subject under one prefix.
#include "cluster/subjects.hpp"

#include <gtest/gtest.h>

#include <string>

namespace kvmesh::test {
namespace {

TEST(subjects, a_name_is_one_subject_token) {
  EXPECT_TRUE(check_name("agent", "node-a_1"));
  EXPECT_TRUE(check_name("agent", std::string(64, 'a')));
  EXPECT_FALSE(check_name("agent", ""));
  EXPECT_FALSE(check_name("agent", std::string(65, 'a')));
  for (const char* bad : {"a.b", "a*", "a>", "a b", "\xc3\xa9"}) {
    auto st = check_name("agent", bad);
    ASSERT_FALSE(st) << bad;
    EXPECT_EQ(st.err().code, ec::invalid_argument);
    EXPECT_NE(st.err().message.find("NATS subject token"), std::string::npos)
        << st.err().message;
  }
}

TEST(subjects, every_subject_is_under_the_prefix) {
  subjects s;
  s.prefix = "p";
  EXPECT_EQ(s.route(), "p.route");
  EXPECT_EQ(s.route_json(), "p.route.json");
  EXPECT_EQ(s.route_durable(), "p.route.durable");
  EXPECT_EQ(s.worker_beat("a"), "p.heartbeat.worker.a");
  EXPECT_EQ(s.worker_beats(), "p.heartbeat.worker.*");
  EXPECT_EQ(s.router_beat(), "p.heartbeat.router");
  EXPECT_EQ(s.shard_beat(), "p.heartbeat.shard");
  EXPECT_EQ(s.agent("a", "bid"), "p.agent.a.bid");
  EXPECT_EQ(s.router("r", "weights.get"), "p.router.r.weights.get");
  EXPECT_EQ(s.kv(3, "a"), "p.kv.3.a");
  EXPECT_EQ(s.kv_batch(3, "a"), "p.kv.3.a.batch");
  EXPECT_EQ(s.kv_all(3), "p.kv.3.*");
  EXPECT_EQ(s.kv_batches(3), "p.kv.3.*.batch");
  EXPECT_EQ(s.index_query(2), "p.index.2.query");
  EXPECT_EQ(s.index_batch(2), "p.index.2.batch");
  EXPECT_EQ(s.events(), "p.events");
  EXPECT_EQ(s.admin("workers"), "p.admin.workers");
}

TEST(subjects, a_message_names_its_agent_by_its_subject) {
  subjects s;
  s.prefix = "p";
  EXPECT_EQ(agent_of(s.worker_beat("node-a"), "p.heartbeat.worker"), "node-a");
  EXPECT_EQ(agent_of(s.kv(3, "node-a"), "p.kv.3"), "node-a");
  EXPECT_EQ(agent_of(s.kv_batch(3, "node-a"), "p.kv.3"), "node-a");
  EXPECT_EQ(agent_of("p.kv.3", "p.kv.3"), "");
  EXPECT_EQ(agent_of("p.kv.31.a", "p.kv.3"), "");
  EXPECT_EQ(agent_of("p.heartbeat.router", "p.heartbeat.worker"), "");
}

TEST(subjects, batch_is_no_agent_name) {
  EXPECT_TRUE(check_agent_name("node-a"));
  auto st = check_agent_name("batch");
  ASSERT_FALSE(st);
  EXPECT_NE(st.err().message.find("reserved"), std::string::npos);
  EXPECT_FALSE(check_agent_name("a.b"));
}

}  // namespace
}  // namespace kvmesh::test
