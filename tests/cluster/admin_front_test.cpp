// Tests of cluster/admin_front: the ADMIN's verbs on NATS, the workers
// listing in pages.
#include "cluster/admin_front.hpp"

#include "mesh_fixture.hpp"

namespace kvmesh::test {
namespace {

// The mesh fixture under this file's suite name.
class admin_front_test : public mesh_test {};

// A fleet's listing outgrows one NATS message: the ADMIN answers in pages
// and admin_request_call joins them. A budget of one byte makes each page
// a single worker.
TEST_F(admin_front_test, admin_lists_workers_in_pages) {
  start_agent("node-a", 0, 8);
  start_router("r1", false, 10, /*admin_page_bytes=*/1);
  auto& c = bus();
  expected<admin_reply> w = make_error(ec::not_found, "not asked");
  ASSERT_TRUE(eventually([&] {
    w = admin_request_call(c, subjects{}, "workers", {}, 1000ms);
    return w && w->workers.size() == 8;
  })) << (w ? std::to_string(w->workers.size()) + " workers" : w.err().message);
  EXPECT_FALSE(w->more);
  for (uint32_t i = 0; i < 8; ++i)
    EXPECT_EQ(w->workers[i].worker, i);

  // One page at a time, as a NATS client sees them.
  auto page = [&](const std::vector<uint8_t>& payload) {
    auto r = c.request(subjects{}.admin("workers"), payload, 1000ms);
    EXPECT_TRUE(r) << r.err().message;
    auto a = r ? decode<admin_reply>(*r) : expected<admin_reply>(r.err());
    EXPECT_TRUE(a) << a.err().message;
    return a ? *a : admin_reply{};
  };
  admin_request from;
  from.paged = true;
  from.from = 5;
  admin_reply p = page(encode(from));
  ASSERT_EQ(p.workers.size(), 1u);
  EXPECT_EQ(p.workers[0].worker, 5u);
  EXPECT_TRUE(p.more);
  from.from = 7;
  p = page(encode(from));
  ASSERT_EQ(p.workers.size(), 1u);
  EXPECT_EQ(p.workers[0].worker, 7u);
  EXPECT_FALSE(p.more);
  // An asker that does not page (no AdminRequest at all, as a NATS CLI's
  // empty payload; or one without paged) gets every worker or an error,
  // never a cut list it would take for the whole.
  for (const auto& payload :
       {std::vector<uint8_t>{}, encode(admin_request{})}) {
    p = page(payload);
    EXPECT_TRUE(p.workers.empty());
    EXPECT_FALSE(p.more);
    EXPECT_NE(p.error.find("8 workers do not fit in one NATS message"),
              std::string::npos)
        << p.error;
  }
}

}  // namespace
}  // namespace kvmesh::test
