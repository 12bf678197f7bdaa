// Tests of cluster/nats against a real nats-server on a loopback port.
#include "cluster/nats.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "nats_server.hpp"

namespace kvmesh::test {
namespace {

// Collects what handlers receive, across libnats threads.
struct inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<nats_message> got;
  nats_handler handler() {
    return [this](nats_message m) {
      std::lock_guard<std::mutex> g(mu);
      got.push_back(std::move(m));
      cv.notify_all();
    };
  }
  bool wait_for(size_t n) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(5),
                       [&] { return got.size() >= n; });
  }
  bool wait_for_payload(const std::vector<uint8_t>& p) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(5), [&] {
      for (const auto& m : got)
        if (m.payload == p) return true;
      return false;
    });
  }
};

class nats_test : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(server.running()) << "no nats-server"; }
  std::unique_ptr<nats_bus> connect() {
    nats_options o;
    o.url = server.url();
    auto b = nats_bus::connect(o);
    EXPECT_TRUE(b) << (b ? "" : b.err().message);
    return b ? std::move(*b) : nullptr;
  }
  nats_server server;
};

TEST_F(nats_test, publish_reaches_a_subscriber_byte_for_byte) {
  auto a = connect();
  auto b = connect();
  inbox in;
  ASSERT_TRUE(b->subscribe("kvmesh.test", "", in.handler()));
  ASSERT_TRUE(b->flush(std::chrono::seconds(2)));
  const std::vector<uint8_t> payload{0, 1, 2, 255, 7};
  ASSERT_TRUE(a->publish("kvmesh.test", payload));
  ASSERT_TRUE(in.wait_for(1));
  EXPECT_EQ(in.got[0].subject, "kvmesh.test");
  EXPECT_EQ(in.got[0].payload, payload);
}

TEST_F(nats_test, request_gets_the_reply) {
  auto server_side = connect();
  auto client = connect();
  nats_bus* responder = server_side.get();
  ASSERT_TRUE(server_side->subscribe("kvmesh.echo", "", [=](nats_message m) {
    std::vector<uint8_t> out = m.payload;
    out.push_back(42);
    (void)responder->publish(m.reply, out);
  }));
  ASSERT_TRUE(server_side->flush(std::chrono::seconds(2)));
  auto r = client->request("kvmesh.echo", {1, 2}, std::chrono::seconds(2));
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_EQ(*r, (std::vector<uint8_t>{1, 2, 42}));
  // Nobody answers on another subject: a timeout error, not a hang.
  auto none =
      client->request("kvmesh.nobody", {1}, std::chrono::milliseconds(200));
  EXPECT_FALSE(none);
}

TEST_F(nats_test, a_queue_group_delivers_each_message_once) {
  auto pub = connect();
  auto r1 = connect();
  auto r2 = connect();
  inbox in;
  ASSERT_TRUE(r1->subscribe("kvmesh.route", "routers", in.handler()));
  ASSERT_TRUE(r2->subscribe("kvmesh.route", "routers", in.handler()));
  ASSERT_TRUE(r1->flush(std::chrono::seconds(2)));
  ASSERT_TRUE(r2->flush(std::chrono::seconds(2)));
  for (uint8_t i = 0; i < 50; ++i)
    ASSERT_TRUE(pub->publish("kvmesh.route", {i}));
  ASSERT_TRUE(pub->flush(std::chrono::seconds(2)));
  ASSERT_TRUE(in.wait_for(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::lock_guard<std::mutex> g(in.mu);
  EXPECT_EQ(in.got.size(), 50u);  // no duplicates
  std::set<uint8_t> seen;
  for (const auto& m : in.got)
    seen.insert(m.payload.at(0));
  EXPECT_EQ(seen.size(), 50u);
}

TEST_F(nats_test, unsubscribe_stops_delivery) {
  auto a = connect();
  inbox in;
  auto id = a->subscribe("kvmesh.x", "", in.handler());
  ASSERT_TRUE(id);
  ASSERT_TRUE(a->unsubscribe(*id));
  EXPECT_FALSE(a->unsubscribe(*id));
  ASSERT_TRUE(a->publish("kvmesh.x", {1}));
  ASSERT_TRUE(a->flush(std::chrono::seconds(2)));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::lock_guard<std::mutex> g(in.mu);
  EXPECT_TRUE(in.got.empty());
}

TEST(nats_reconnect, a_restarted_server_is_rejoined_and_delivery_resumes) {
  auto first = std::make_unique<nats_server>();
  ASSERT_TRUE(first->running());
  const int port = first->port();
  nats_options o;
  o.url = first->url();
  o.reconnect_wait_ms = 50;
  auto sub = nats_bus::connect(o);
  auto pub = nats_bus::connect(o);
  ASSERT_TRUE(sub && pub);
  inbox in;
  ASSERT_TRUE((*sub)->subscribe("kvmesh.hb", "", in.handler()));
  ASSERT_TRUE((*sub)->flush(std::chrono::seconds(2)));
  first.reset();  // the server goes away
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // While disconnected a publish is buffered (up to reconnect_buffer_bytes),
  // not an error. Core NATS keeps nothing for absent subscribers, so what
  // this message meets after the restart is not asserted.
  EXPECT_TRUE((*pub)->publish("kvmesh.hb", {8}));
  nats_server second(port);
  ASSERT_TRUE(second.running());
  for (int i = 0;
       i < 100 && ((*pub)->reconnects() == 0 || (*sub)->reconnects() == 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GE((*pub)->reconnects(), 1u);
  EXPECT_GE((*sub)->reconnects(), 1u);
  // The subscription came back with the connection.
  ASSERT_TRUE((*sub)->flush(std::chrono::seconds(2)));
  ASSERT_TRUE((*pub)->publish("kvmesh.hb", {9}));
  EXPECT_TRUE(in.wait_for_payload({9}));
}

TEST(nats_connect, no_server_is_an_error_naming_the_url) {
  nats_options o;
  o.url = "nats://127.0.0.1:" + std::to_string(nats_server::free_port());
  o.connect_timeout_ms = 500;
  auto b = nats_bus::connect(o);
  ASSERT_FALSE(b);
  EXPECT_NE(b.err().message.find(o.url), std::string::npos) << b.err().message;
  o.url = "not a url at all";
  EXPECT_FALSE(nats_bus::connect(o));
}

// -- credentials, permissions, secrets ----------------------------------------

TEST(nats_security, redact_url_hides_passwords_and_tokens) {
  EXPECT_EQ(redact_url("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
  EXPECT_EQ(redact_url("nats://u:secret@h:4222"), "nats://u:***@h:4222");
  EXPECT_EQ(redact_url("tls://tok@h"), "tls://***@h");
  EXPECT_EQ(redact_url("nats://a:x@h1,nats://h2,b:y@h3"),
            "nats://a:***@h1,nats://h2,b:***@h3");
}

TEST(nats_security, check_security_names_what_is_wrong) {
  nats_options o;
  EXPECT_TRUE(check_security(o));
  o.user = "u";
  o.password = "p";
  EXPECT_TRUE(check_security(o));
  const auto says = [](const nats_options& x, const std::string& what) {
    auto st = check_security(x);
    if (st) return std::string("accepted");
    return st.err().message.find(what) != std::string::npos ? std::string()
                                                            : st.err().message;
  };
  o.token = "t";
  EXPECT_EQ(says(o, "one way of authenticating"), "");
  o = {};
  o.password = "p";
  EXPECT_EQ(says(o, "nats.password is set without nats.user"), "");
  o = {};
  o.nkey = "UABC";
  EXPECT_EQ(says(o, "nats.nkey is set without nats.nkey_seed"), "");
  o = {};
  o.tls_key_file = "/etc/hostname";
  EXPECT_EQ(says(o, "nats.tls_key is set without nats.tls_cert"), "");
  o = {};
  o.tls_ca_file = "/nonexistent/ca.pem";
  EXPECT_EQ(says(o, "nats.tls_ca: cannot read /nonexistent/ca.pem"), "");
}

// A server whose user `u` may publish only under ok. and hear inboxes.
class nats_permissions : public ::testing::Test {
 protected:
  static std::string write_config(const std::string& dir) {
    const std::string path = dir + "/server.conf";
    std::ofstream(path) << R"(authorization {
  users = [ { user: u, password: good,
              permissions: { publish: { allow: ["ok.>", "_INBOX.>"] },
                             subscribe: { allow: ["ok.>", "_INBOX.>"] } } } ]
})";
    return path;
  }
  void SetUp() override { ASSERT_TRUE(server.running()) << "no nats-server"; }
  expected<std::unique_ptr<nats_bus>> connect(const std::string& password) {
    nats_options o;
    o.url = server.url();
    o.user = "u";
    o.password = password;
    return nats_bus::connect(o);
  }
  temp_dir dir;
  nats_server server{nats_server::config_file{write_config(dir.path())}};
};

TEST_F(nats_permissions, a_wrong_password_is_refused_clearly) {
  auto b = connect("bad");
  ASSERT_FALSE(b);
  EXPECT_NE(b.err().message.find("authentication failed"), std::string::npos)
      << b.err().message;
  EXPECT_EQ(b.err().message.find("bad"), std::string::npos)
      << "the password is shown: " << b.err().message;
}

TEST_F(nats_permissions, a_refused_request_fails_with_the_reason) {
  auto b = connect("good");
  ASSERT_TRUE(b) << b.err().message;
  // A timeout long enough that only the refusal can end the call with
  // "permission denied" (a timeout would say "Timeout").
  auto r = (*b)->request("kvmesh.admin.drain", {1}, std::chrono::seconds(60));
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message.find("permission denied"), std::string::npos)
      << r.err().message;
  EXPECT_NE(r.err().message.find("kvmesh.admin.drain"), std::string::npos)
      << r.err().message;
  EXPECT_GE((*b)->permission_denials(), 1u);
}

TEST_F(nats_permissions, an_allowed_request_still_gets_its_reply) {
  auto b = connect("good");
  ASSERT_TRUE(b) << b.err().message;
  nats_bus* bus = b->get();
  ASSERT_TRUE((*b)->subscribe("ok.echo", "", [bus](nats_message m) {
    (void)bus->publish_reply(m.reply, m.payload);
  }));
  ASSERT_TRUE((*b)->flush(std::chrono::seconds(2)));
  auto r = (*b)->request("ok.echo", {7, 8}, std::chrono::seconds(5));
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_EQ(*r, (std::vector<uint8_t>{7, 8}));
  EXPECT_EQ((*b)->permission_denials(), 0u);
}

TEST_F(nats_permissions, a_refused_publish_is_counted) {
  auto b = connect("good");
  ASSERT_TRUE(b) << b.err().message;
  ASSERT_TRUE((*b)->publish("kvmesh.admin.drain", {1}));  // refused later
  ASSERT_TRUE((*b)->flush(std::chrono::seconds(2)));
  for (int i = 0; i < 100 && (*b)->permission_denials() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ((*b)->permission_denials(), 1u);
}

TEST_F(nats_test, replies_go_only_to_inboxes) {
  auto b = connect();
  ASSERT_TRUE(b);
  inbox in;
  ASSERT_TRUE(b->subscribe("kvmesh.agent.a.drain", "", in.handler()));
  ASSERT_TRUE(b->subscribe("_INBOX.x.1", "", in.handler()));
  ASSERT_TRUE(b->flush(std::chrono::seconds(2)));
  EXPECT_FALSE(b->publish_reply("kvmesh.agent.a.drain", {1}));
  EXPECT_EQ(b->refused_replies(), 1u);
  ASSERT_TRUE(b->publish_reply("_INBOX.x.1", {2}));
  ASSERT_TRUE(in.wait_for(1));
  std::lock_guard<std::mutex> g(in.mu);
  ASSERT_EQ(in.got.size(), 1u);  // the refused one never went out
  EXPECT_EQ(in.got[0].subject, "_INBOX.x.1");
}

}  // namespace
}  // namespace kvmesh::test
