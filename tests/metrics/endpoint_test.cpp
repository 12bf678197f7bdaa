// Tests of metrics/endpoint on loopback through cpp-httplib's client: the
// series, the probes as readiness comes and goes, refusals, and errors at
// start.
#include "metrics/endpoint.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "metrics/registry.hpp"

namespace kvmesh::metrics {
namespace {

struct served {
  registry reg;
  std::mutex mu;
  std::vector<std::string> why{"starting"};
  std::atomic<int> answers{0};
  std::unique_ptr<endpoint> e;

  void start() {
    (*(*reg.add_gauge("kvmesh_up", "Always 1."))->with({}))->Set(1);
    auto r = endpoint::start(
        {"127.0.0.1", 0}, reg.shared(),
        [this] {
          std::lock_guard<std::mutex> lock(mu);
          return why;
        },
        [this](int) { ++answers; });
    ASSERT_TRUE(r) << r.err().message;
    e = std::move(*r);
    ASSERT_GT(e->port(), 0);
  }
};

TEST(endpoint, serves_the_series_and_both_probes) {
  served s;
  s.start();
  httplib::Client c("127.0.0.1", s.e->port());
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("\nkvmesh_up 1\n"), std::string::npos) << m->body;
  auto h = c.Get("/healthz");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(h->body, "ok\n");
  // Not ready while something is missing, each reason on a line.
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.why = {"not connected to NATS", "no live worker known yet"};
  }
  auto r = c.Get("/readyz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body,
            "not ready: not connected to NATS\n"
            "not ready: no live worker known yet\n");
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.why.clear();
  }
  r = c.Get("/readyz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ready\n");
  auto head = c.Head("/readyz");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
}

TEST(endpoint, other_paths_and_methods_are_refused_and_every_answer_counted) {
  served s;
  s.start();
  httplib::Client c("127.0.0.1", s.e->port());
  auto nf = c.Get("/nothing");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  auto post = c.Post("/healthz", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET, HEAD");
  auto ok = c.Get("/healthz");
  ASSERT_TRUE(ok);
  // Counted once each answer is out, which the client may read first.
  for (int i = 0; i < 200 && s.answers < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s.answers, 3);
}

TEST(endpoint, a_port_in_use_and_a_bad_address_are_errors_naming_them) {
  served s;
  s.start();
  registry other;
  auto taken = endpoint::start({"127.0.0.1", s.e->port()}, other.shared(),
                               [] { return std::vector<std::string>{}; });
  ASSERT_FALSE(taken);
  EXPECT_NE(taken.err().message.find("127.0.0.1:" +
                                     std::to_string(s.e->port())),
            std::string::npos)
      << taken.err().message;
  auto bad = endpoint::start({"no such host!", 0}, other.shared(),
                             [] { return std::vector<std::string>{}; });
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.err().code, ec::invalid_argument);
  EXPECT_NE(bad.err().message.find("no such host!"), std::string::npos);
}

}  // namespace
}  // namespace kvmesh::metrics
