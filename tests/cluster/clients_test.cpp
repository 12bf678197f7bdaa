// Tests of cluster/clients: the remote router's burst, and a durable
// client that reads the answer it missed from the record.
#include "cluster/clients.hpp"

#include "mesh_fixture.hpp"

namespace kvmesh::test {
namespace {

// The mesh fixture under this file's suite name.
class clients_test : public mesh_test {};

// The replay client's stand-in for the routers (kvmesh bench) sends a burst
// from one actor: every request must reach a router, none in a batch that
// no router listens for.
TEST_F(clients_test, a_remote_router_s_burst_gets_every_decision) {
  start_mesh();
  auto front = spawn_remote_router(*sys_, bus(), mesh(), listener_actor{});
  ASSERT_TRUE(front) << front.err().message;
  constexpr uint64_t n = 200;
  auto decided = std::make_shared<std::atomic<size_t>>(0);
  auto failed = std::make_shared<std::atomic<size_t>>(0);
  router_actor r = *front;
  sys_->spawn([=](caf::event_based_actor* self) {
    for (uint64_t id = 1; id <= n; ++id)
      self->request(r, caf::infinite, route_atom::value,
                    request(id, id % 20, 8))
          .then([=](const decision&) { ++*decided; },
                [=](caf::error&) { ++*failed; });
  });
  EXPECT_TRUE(eventually([&] { return *decided + *failed == n; }, 20000ms));
  EXPECT_EQ(decided->load(), n) << *failed << " failed";
  // Gone before the fixture closes the connection its inbox holds.
  caf::scoped_actor waiter{*sys_};
  waiter->send_exit(*front, caf::exit_reason::user_shutdown);
  waiter->wait_for(*front);
}

TEST_F(clients_test,
       a_durable_client_reads_the_answer_it_missed_from_the_record) {
  // As across a lone nats-server's restart: a router decided while the
  // client was still reconnecting, so its answer (core NATS, to the
  // client's inbox) reached no one. The record it kept first is the
  // answer; here the router keeps it and sends nothing.
  use_jetstream();
  auto& router_bus = bus();
  auto q = work_queue::open(router_bus, durable_queue(subjects{}));
  ASSERT_TRUE(q) << q.err().message;
  auto opened = record_store::open(router_bus, durable_records(subjects{}));
  ASSERT_TRUE(opened) << opened.err().message;
  std::shared_ptr<record_store> records = std::move(*opened);
  std::atomic<int> taken{0};
  ASSERT_TRUE((*q)->start([&](nats_message m, std::shared_ptr<delivery> d) {
    auto r = decode<route_request_msg>(m.payload);
    if (r) {
      decision out;
      out.request = r->id;
      out.worker = 7;
      EXPECT_TRUE(
          records->put(record_key(d->stream_sequence(), r->id), encode(out)));
      ++taken;
    }
    (void)d->ack();
  }));
  auto d = route_durable_once(bus(), subjects{}, request(42, 1, 8), 1500ms);
  ASSERT_TRUE(d) << d.err().message;
  EXPECT_EQ(d->request, 42u);
  EXPECT_EQ(d->worker, 7u);
  EXPECT_EQ(taken.load(), 1);
  (*q)->stop();
}

}  // namespace
}  // namespace kvmesh::test
