// Tests of cluster/durable_intake: durable requests through the JetStream
// work queue, their claims, records and hand-backs.
#include "cluster/durable_intake.hpp"

#include "mesh_fixture.hpp"

namespace kvmesh::test {
namespace {

// The stream and buckets are named after the prefix (upper case, other
// characters '_'); a record's key is the request's sequence and id.
TEST(durable_intake, names_follow_the_prefix) {
  subjects s;
  s.prefix = "my-mesh.x";
  const auto q = durable_queue(s);
  EXPECT_EQ(q.stream, "MY_MESH_X_ROUTE");
  EXPECT_EQ(q.subject, "my-mesh.x.route.durable.>");
  EXPECT_EQ(durable_records(s).bucket, "MY_MESH_X_ROUTE_DECISIONS");
  const auto c = durable_claims(s, 1234ms);
  EXPECT_EQ(c.bucket, "MY_MESH_X_ROUTE_CLAIMS");
  EXPECT_EQ(c.ttl, 1234ms);
  EXPECT_EQ(record_key(7, 42), "7-42");
}

// The mesh fixture under this file's suite name.
class durable_intake_test : public mesh_test {};

TEST_F(durable_intake_test, durable_requests_survive_a_router_killed_mid_load) {
  use_jetstream();
  start_mesh(true);
  auto& pub = bus();
  auto qo = durable_queue(subjects{});
  qo.consume = false;  // a client: the routers own the consumer
  auto q = work_queue::open(pub, qo);
  ASSERT_TRUE(q) << q.err().message;
  route_client client(bus());
  constexpr uint64_t n = 600;
  for (uint64_t id = 1; id <= n; ++id) {
    client.send_durable(**q, request(id, id % 20, 8));
    // Mid-load, one router dies with requests in flight: they were not
    // acked, so the server hands them to the other router.
    if (id == n / 2) routers_.front().reset();
  }
  ASSERT_TRUE(eventually([&] { return client.decided() == n; }, 20000ms))
      << client.decided() << " of " << n << " decided; errors "
      << client.errors().size()
      << ", first: " << (client.errors().empty() ? "" : client.errors().front())
      << "; queue: " << ((*q)->state() ? (*q)->state()->messages : 999999)
      << " stored, " << ((*q)->state() ? (*q)->state()->ack_pending : -1)
      << " unacked";
  auto d = client.decisions();
  size_t duplicates = 0;
  for (auto& [id, count] : d)
    duplicates += static_cast<size_t>(count - 1);
  // A router that died after answering but before acking makes the one
  // duplicate at-least-once delivery allows; it must stay rare.
  EXPECT_LE(duplicates, 8u);
  auto state = (*q)->state();
  std::printf("durable: %zu decided, %zu duplicates, %lld redelivered\n",
              d.size(), duplicates,
              static_cast<long long>(state ? state->redelivered : -1));
}

TEST_F(durable_intake_test,
       a_durable_request_no_worker_could_take_waits_for_one) {
  // No worker yet (as while NATS restarts and every heartbeat is lost):
  // the router hands the request back to the queue rather than answering
  // "no workers", and decides it once a worker is there.
  use_jetstream();
  start_shard(0, 1);
  process_metrics* metrics = nullptr;
  // 20 s of heartbeats: a slow machine.
  start_router("r1", true, 100, 0, &metrics);
  ASSERT_NE(metrics, nullptr);
  auto& pub = bus();
  auto qo = durable_queue(subjects{});
  qo.consume = false;
  auto q = work_queue::open(pub, qo);
  ASSERT_TRUE(q) << q.err().message;
  route_client client(bus());
  client.send_durable(**q, request(1, 1, 8));
  // Long enough for the router to join the queue and try it more than once.
  ASSERT_TRUE(eventually(
      [&] {
        auto st = (*q)->state();
        return st && st->redelivered > 0;
      },
      5000ms));
  EXPECT_EQ(client.decided(), 0u);
  EXPECT_TRUE(client.errors().empty())
      << "answered: " << client.errors().front();
  // Counted as handed back for want of a worker, and for nothing else.
  const std::string text = metrics->scrape();
  EXPECT_GE(
      series_value(text, "kvmesh_router_handbacks_total{cause=\"no_workers\"}"),
      1.0)
      << text;
  EXPECT_EQ(
      series_value(text, "kvmesh_router_handbacks_total{cause=\"contested\"}"),
      0.0);
  start_agent("node-a", 0, 4);
  ASSERT_TRUE(eventually([&] { return client.decided() == 1; }, 10000ms))
      << (client.errors().empty() ? "" : client.errors().front());
  EXPECT_TRUE(client.errors().empty());
}

TEST_F(durable_intake_test,
       a_durable_request_another_router_claims_is_left_to_it) {
  // The queue handed the request to another router as well (as while a
  // cluster settles after its stream's leader moved), which claimed it
  // first: this router leaves it alone, whatever its bids say, until that
  // claim is let go.
  use_jetstream();
  auto& pub = bus();
  auto qo = durable_queue(subjects{});
  qo.consume = false;
  auto q = work_queue::open(pub, qo);
  ASSERT_TRUE(q) << q.err().message;
  auto opened = record_store::open(
      pub, durable_claims(subjects{}, std::chrono::milliseconds(5000)));
  ASSERT_TRUE(opened) << opened.err().message;
  auto& claims = **opened;
  route_client client(bus());
  const uint64_t sequence = client.send_durable(**q, request(1, 1, 8));
  ASSERT_NE(sequence, 0u);
  const std::string key = record_key(sequence, 1);
  auto taken = claims.create(key, {'o', 't', 'h', 'e', 'r'});
  ASSERT_TRUE(taken) << taken.err().message;
  ASSERT_TRUE(*taken);
  start_shard(0, 1);
  process_metrics* metrics = nullptr;
  start_router("r1", true, 100, 0, &metrics);
  ASSERT_NE(metrics, nullptr);
  start_agent("node-a", 0, 4);
  // Handed back, more than once, and never decided meanwhile.
  ASSERT_TRUE(eventually(
      [&] {
        return series_value(
                   metrics->scrape(),
                   "kvmesh_router_handbacks_total{cause=\"contested\"}") >= 2.0;
      },
      10000ms))
      << metrics->scrape();
  EXPECT_EQ(client.decided(), 0u);
  EXPECT_TRUE(client.errors().empty())
      << "answered: " << client.errors().front();
  // The other router let go without an answer (it handed it back).
  ASSERT_TRUE(claims.erase(key));
  ASSERT_TRUE(eventually([&] { return client.decided() == 1; }, 10000ms))
      << (client.errors().empty() ? "" : client.errors().front());
  EXPECT_TRUE(client.errors().empty());
  // The router took the claim for its auction.
  std::vector<uint8_t> holder;
  auto after = claims.create(key, {'x'}, &holder);
  ASSERT_TRUE(after) << after.err().message;
  EXPECT_FALSE(*after);
  EXPECT_EQ(std::string(holder.begin(), holder.end()).rfind("r1/", 0), 0u);
}

// Every durable answer is kept before it goes out: its record holds the
// decision the client got, with the client's own id for the request.
TEST_F(durable_intake_test, a_durable_answer_is_kept_in_its_record) {
  use_jetstream();
  start_shard(0, 1);
  start_router("r1", true);
  start_agent("node-a", 0, 4);
  auto& pub = bus();
  auto qo = durable_queue(subjects{});
  qo.consume = false;
  auto q = work_queue::open(pub, qo);
  ASSERT_TRUE(q) << q.err().message;
  route_client client(bus());
  route_request_msg r = request(9, 1, 8);
  r.client_id = "chat 7/abc-\xC3\xA9-123";  // any string, UTF-8 too
  const uint64_t sequence = client.send_durable(**q, r);
  ASSERT_NE(sequence, 0u);
  ASSERT_TRUE(eventually([&] { return client.decided() == 1; }, 10000ms))
      << (client.errors().empty() ? "" : client.errors().front());
  auto ro = durable_records(subjects{});
  ro.create = false;
  auto records = record_store::open(pub, ro);
  ASSERT_TRUE(records) << records.err().message;
  auto kept = (*records)->get(record_key(sequence, 9));
  ASSERT_TRUE(kept) << kept.err().message;
  auto d = decode<decision>(*kept);
  ASSERT_TRUE(d) << d.err().message;
  EXPECT_EQ(d->request, 9u);
  EXPECT_EQ(d->client_id, "chat 7/abc-\xC3\xA9-123");
  EXPECT_EQ(client.by_worker().count(d->worker), 1u);
}

// A request handed out again after a router decided it and kept its answer
// (then died before its ack) is answered with that record, not auctioned a
// second time: here no worker exists to auction it.
TEST_F(durable_intake_test,
       a_redelivered_durable_request_is_answered_from_its_record) {
  use_jetstream();
  auto& first = bus();
  // The router that decided it: keeps the answer, never acks.
  auto q = work_queue::open(first, durable_queue(subjects{}));
  ASSERT_TRUE(q) << q.err().message;
  auto opened = record_store::open(first, durable_records(subjects{}));
  ASSERT_TRUE(opened) << opened.err().message;
  std::shared_ptr<record_store> records = std::move(*opened);
  std::mutex mu;
  std::shared_ptr<delivery> held;
  ASSERT_TRUE((*q)->start([&](nats_message m, std::shared_ptr<delivery> d) {
    auto r = decode<route_request_msg>(m.payload);
    if (!r) return;
    decision out;
    out.request = r->id;
    out.worker = 7;
    EXPECT_TRUE(
        records->put(record_key(d->stream_sequence(), r->id), encode(out)));
    std::lock_guard<std::mutex> g(mu);
    held = std::move(d);
  }));
  route_client client(bus());
  ASSERT_NE(client.send_durable(**q, request(5, 1, 8)), 0u);
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> g(mu);
    return held != nullptr;
  }));
  (*q)->stop();
  // Handed out again (a nak: as its router's death, only sooner).
  ASSERT_TRUE(held->nak());
  process_metrics* metrics = nullptr;
  start_router("r1", true, 10, 0, &metrics);
  ASSERT_NE(metrics, nullptr);
  ASSERT_TRUE(eventually([&] { return client.decided() == 1; }, 10000ms))
      << (client.errors().empty() ? "" : client.errors().front());
  EXPECT_EQ(client.by_worker(), (std::map<uint32_t, int>{{7, 1}}));
  EXPECT_TRUE(client.errors().empty());
  EXPECT_EQ(series_value(metrics->scrape(),
                         "kvmesh_router_handbacks_total{cause=\"no_workers\"}"),
            0.0);
}

// A client chooses a durable request's reply subject (the subject's tail):
// one in the mesh's own inboxes, where bids and index answers travel, would
// have the router publish into another process's calls. Refused: counted,
// acked (the queue keeps nothing of it), and nothing published there.
TEST_F(durable_intake_test, a_reply_in_the_mesh_inboxes_is_refused_and_acked) {
  EXPECT_TRUE(mesh_inbox("_INBOX.kvmesh.00ff.17"));
  EXPECT_FALSE(mesh_inbox("_INBOX.route.17"));
  EXPECT_FALSE(mesh_inbox("_INBOX.kvmesh-bench.1.2"));
  use_jetstream();
  start_shard(0, 1);
  process_metrics* metrics = nullptr;
  start_router("r1", true, 10, 0, &metrics);
  ASSERT_NE(metrics, nullptr);
  start_agent("node-a", 0, 4);
  auto& pub = bus();
  std::atomic<int> heard{0};
  // (Not every inbox: the mesh's own calls travel there.)
  auto watch = pub.subscribe("_INBOX.kvmesh.victim.17", "",
                             [&](nats_message) { heard.fetch_add(1); });
  ASSERT_TRUE(watch) << watch.err().message;
  auto qo = durable_queue(subjects{});
  qo.consume = false;
  auto q = work_queue::open(pub, qo);
  ASSERT_TRUE(q) << q.err().message;
  ASSERT_TRUE(
      (*q)->publish(subjects{}.route_durable() + "._INBOX.kvmesh.victim.17",
                    encode(request(1, 1, 8))));
  // One after it, answered where it asked: the router went past the first.
  route_client client(pub);
  ASSERT_NE(client.send_durable(**q, request(2, 1, 8)), 0u);
  ASSERT_TRUE(eventually([&] { return client.decided() == 1; }, 10000ms))
      << (client.errors().empty() ? "" : client.errors().front());
  EXPECT_EQ(client.decisions(), (std::map<uint64_t, int>{{2, 1}}));
  ASSERT_TRUE(eventually(
      [&] {
        auto st = (*q)->state();
        return st && st->messages == 0 && st->ack_pending == 0;
      },
      5000ms))
      << "the refused request is still queued";
  const std::string text = metrics->scrape();
  EXPECT_EQ(series_value(text, "kvmesh_router_mesh_inbox_replies_total"), 1.0)
      << text;
  EXPECT_EQ(
      series_value(text, "kvmesh_router_requests_total{intake=\"durable\"}"),
      2.0);
  ASSERT_TRUE(pub.flush(2000ms));
  EXPECT_EQ(heard.load(), 0);
}

// take_claim, the full create behind a quick claim refused: taken when the
// key is free, own when this claimant holds it, held when another one
// does; the key is the request's sequence and id.
TEST_F(durable_intake_test, take_claim_tells_taken_own_and_held) {
  use_jetstream();
  auto& b = bus();
  auto q = work_queue::open(b, durable_queue(subjects{}));
  ASSERT_TRUE(q) << q.err().message;
  auto opened = record_store::open(b, durable_claims(subjects{}, 5000ms));
  ASSERT_TRUE(opened) << opened.err().message;
  auto& claims = **opened;
  std::mutex mu;
  std::shared_ptr<delivery> got;
  ASSERT_TRUE((*q)->start([&](nats_message, std::shared_ptr<delivery> d) {
    std::lock_guard<std::mutex> g(mu);
    got = std::move(d);
  }));
  ASSERT_TRUE((*q)->publish(subjects{}.route_durable() + "._INBOX.claims",
                            encode(request(1, 1, 8))));
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> g(mu);
    return got != nullptr;
  }));
  (*q)->stop();
  ASSERT_NE(got->stream_sequence(), 0u);
  const std::vector<uint8_t> me{'r', '1'}, other{'r', '2'};
  std::string error;
  using detail::claim_outcome;
  EXPECT_EQ(detail::take_claim(claims, me, *got, 1, error),
            claim_outcome::taken);
  EXPECT_EQ(detail::take_claim(claims, me, *got, 1, error), claim_outcome::own);
  EXPECT_EQ(detail::take_claim(claims, other, *got, 1, error),
            claim_outcome::held);
  // Another id at that sequence (a stream made again) is another request.
  EXPECT_EQ(detail::take_claim(claims, other, *got, 2, error),
            claim_outcome::taken);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_TRUE(got->ack());
}

}  // namespace
}  // namespace kvmesh::test
