// Tests of cluster/nats_auth: the users and permissions it writes.
#include "cluster/nats_auth.hpp"

#include <gtest/gtest.h>

namespace kvmesh {
namespace {

std::string block(const std::string& text, const std::string& name) {
  const auto at = text.find("  " + name + " = {");
  if (at == std::string::npos) return "";
  return text.substr(at, text.find("\n  }\n", at) - at);
}

TEST(nats_auth, an_agent_s_own_user_speaks_only_for_that_agent) {
  nats_auth_options o;
  o.agents = {"node-a", "gpu_7"};
  auto text = nats_auth_conf(o);
  ASSERT_TRUE(text) << text.err().message;
  const std::string a = block(*text, "AGENT_NODE_A");
  ASSERT_FALSE(a.empty());
  EXPECT_NE(a.find("\"kvmesh.heartbeat.worker.node-a\""), std::string::npos);
  EXPECT_NE(a.find("\"kvmesh.kv.*.node-a.batch\""), std::string::npos);
  EXPECT_NE(a.find("\"_INBOX.kvmesh.node-a.>\""), std::string::npos);
  EXPECT_EQ(a.find("heartbeat.worker.*"), std::string::npos);
  EXPECT_EQ(a.find("kvmesh.kv.>"), std::string::npos);
  EXPECT_FALSE(block(*text, "AGENT_GPU_7").empty());
  // Named agents only: no shared user that may speak for any of them.
  EXPECT_TRUE(block(*text, "AGENT").empty());
  EXPECT_EQ(text->find("user: agent,"), std::string::npos);
  EXPECT_NE(
      text->find("{user: node-a, password: $KVMESH_AGENT_NODE_A_PASSWORD, "
                 "permissions: $AGENT_NODE_A}"),
      std::string::npos);
  o.shared_agent = true;
  text = nats_auth_conf(o);
  ASSERT_TRUE(text);
  EXPECT_FALSE(block(*text, "AGENT").empty());
  EXPECT_NE(text->find("user: agent,"), std::string::npos);
}

TEST(nats_auth, another_prefix_names_its_subjects_stream_and_buckets) {
  nats_auth_options o;
  o.subj.prefix = "prod-llm";
  auto text = nats_auth_conf(o);
  ASSERT_TRUE(text) << text.err().message;
  EXPECT_EQ(text->find("kvmesh."), std::string::npos);
  EXPECT_EQ(text->find(".KVMESH_ROUTE"), std::string::npos);  // the stream
  EXPECT_NE(text->find("\"prod-llm.route.durable.>\""), std::string::npos);
  EXPECT_NE(text->find("$JS.API.STREAM.INFO.KV_PROD_LLM_ROUTE_DECISIONS"),
            std::string::npos);
  EXPECT_NE(text->find("$JS.ACK.PROD_LLM_ROUTE.routers.>"), std::string::npos);
  EXPECT_NE(text->find("deny = [\"_INBOX.prod-llm.>\"]"), std::string::npos);
}

TEST(nats_auth, bad_or_clashing_names_are_refused_by_name) {
  nats_auth_options o;
  o.agents = {"node.a"};
  auto text = nats_auth_conf(o);
  ASSERT_FALSE(text);
  EXPECT_NE(text.err().message.find("node.a"), std::string::npos);
  o.agents = {"batch"};
  EXPECT_FALSE(nats_auth_conf(o));
  o.agents = {"node-a", "node_a"};
  text = nats_auth_conf(o);
  ASSERT_FALSE(text);
  EXPECT_NE(text.err().message.find("KVMESH_AGENT_NODE_A_PASSWORD"),
            std::string::npos);
  o.agents = {};
  o.subj.prefix = "a b";
  EXPECT_FALSE(nats_auth_conf(o));
}

}  // namespace
}  // namespace kvmesh
