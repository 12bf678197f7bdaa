// Tests of cluster/router_front: route requests in Cap'n Proto and JSON,
// one decision each, malformed or oversized ones answered, replies only to
// inboxes.
#include "cluster/router_front.hpp"

#include "mesh_fixture.hpp"

namespace kvmesh::test {
namespace {

// The mesh fixture under this file's suite name.
class router_front_test : public mesh_test {};

TEST_F(router_front_test, every_request_gets_exactly_one_decision) {
  start_mesh();
  route_client client(bus());
  constexpr uint64_t n = 1000;
  for (uint64_t id = 1; id <= n; ++id) {
    client.send(request(id, id % 20, 8));
    if (id % 50 == 0) std::this_thread::sleep_for(5ms);  // a steady load
  }
  ASSERT_TRUE(eventually([&] { return client.decided() == n; }, 30000ms))
      << client.decided() << " of " << n << " decided; first error: "
      << (client.errors().empty() ? "none" : client.errors().front());
  std::this_thread::sleep_for(200ms);  // time for a duplicate to show
  auto d = client.decisions();
  ASSERT_EQ(d.size(), n);
  for (auto& [id, count] : d)
    EXPECT_EQ(count, 1) << "request " << id;
  EXPECT_TRUE(client.errors().empty());
  // Both routers decided (queue group), and the load spread over workers.
  expected<admin_reply> routers = make_error(ec::not_found, "none asked");
  ASSERT_TRUE(eventually([&] {
    routers =
        admin_request_call(*buses_.back(), subjects{}, "routers", {}, 1000ms);
    return routers && routers->routers.size() == 2 &&
           routers->routers[0].decisions + routers->routers[1].decisions == n;
  })) << (routers ? routers->routers.size() : 0)
      << " routers";
  for (const auto& r : routers->routers)
    EXPECT_GT(r.decisions, 0u) << r.name;
  EXPECT_GE(client.by_worker().size(), 4u);
}

TEST_F(router_front_test, malformed_payloads_are_counted_and_answered) {
  start_mesh();
  auto& c = bus();
  const bytes garbage = {1, 2, 3, 4, 5, 6, 7};
  const auto before = decode_errors(msg_kind::route_request);
  auto reply = c.request(subjects{}.route(), garbage, 2000ms);
  ASSERT_TRUE(reply) << reply.err().message;
  auto d = decode<decision>(*reply);
  ASSERT_TRUE(d);
  EXPECT_NE(d->error.find("RouteRequest"), std::string::npos) << d->error;
  EXPECT_EQ(decode_errors(msg_kind::route_request), before + 1);
  // The JSON form answers in JSON, naming the field.
  const std::string bad_json = R"({"id": 1, "tokens": "many"})";
  auto jr = c.request(subjects{}.route_json(),
                      bytes(bad_json.begin(), bad_json.end()), 2000ms);
  ASSERT_TRUE(jr);
  const std::string text(jr->begin(), jr->end());
  EXPECT_NE(text.find("\"error\""), std::string::npos) << text;
  EXPECT_NE(text.find("tokens"), std::string::npos) << text;
  // And a good JSON request is routed.
  const std::string good =
      R"({"id": 5, "tokens": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]})";
  auto ok = c.request(subjects{}.route_json(), bytes(good.begin(), good.end()),
                      2000ms);
  ASSERT_TRUE(ok);
  const std::string ok_text(ok->begin(), ok->end());
  EXPECT_NE(ok_text.find("\"worker\""), std::string::npos) << ok_text;
  // Text without token ids is routed on approximate blocks, and counted.
  const uint64_t text_before = text_route_requests();
  const std::string as_text =
      R"({"id": 6, "text": ")" + std::string(200, 'w') + R"("})";
  auto tr = c.request(subjects{}.route_json(),
                      bytes(as_text.begin(), as_text.end()), 2000ms);
  ASSERT_TRUE(tr);
  const std::string tr_text(tr->begin(), tr->end());
  EXPECT_NE(tr_text.find("\"worker\""), std::string::npos) << tr_text;
  EXPECT_EQ(text_route_requests(), text_before + 1);
  // Calls for bids, awards, index queries and admin requests likewise.
  const auto bids_before = decode_errors(msg_kind::call_for_bids);
  auto b = c.request(subjects{}.agent("node-a", "bid"), garbage, 2000ms);
  ASSERT_TRUE(b);
  auto bl = decode<bid_list>(*b);
  ASSERT_TRUE(bl);
  EXPECT_NE(bl->error.find("CallForBids"), std::string::npos);
  EXPECT_EQ(decode_errors(msg_kind::call_for_bids), bids_before + 1);
  auto a = c.request(subjects{}.agent("node-a", "award"), garbage, 2000ms);
  ASSERT_TRUE(a);
  auto ar = decode<award_reply>(*a);
  ASSERT_TRUE(ar);
  EXPECT_FALSE(ar->accepted);
  EXPECT_NE(ar->reason.find("Award"), std::string::npos);
  auto q = c.request(subjects{}.index_query(0), garbage, 2000ms);
  ASSERT_TRUE(q);
  auto qr = decode<index_reply>(*q);
  ASSERT_TRUE(qr);
  EXPECT_NE(qr->error.find("IndexQuery"), std::string::npos);
  auto ad = c.request(subjects{}.admin("drain"), garbage, 2000ms);
  ASSERT_TRUE(ad);
  auto adr = decode<admin_reply>(*ad);
  ASSERT_TRUE(adr);
  EXPECT_NE(adr->error.find("AdminRequest"), std::string::npos);
  // A batch of garbage, to an agent and to a shard: counted, and each
  // still answers a good call afterwards.
  const auto batches_before = decode_errors(msg_kind::batch);
  ASSERT_TRUE(c.publish(subjects{}.agent("node-a", "batch"), garbage));
  ASSERT_TRUE(c.publish(subjects{}.index_batch(0), garbage));
  ASSERT_TRUE(eventually(
      [&] { return decode_errors(msg_kind::batch) == batches_before + 2; }));
  auto after = c.request(subjects{}.index_query(0),
                         encode(index_query{{1, 2, 3}}), 2000ms);
  ASSERT_TRUE(after);
  ASSERT_TRUE(decode<index_reply>(*after));
  // Heartbeats of garbage change nothing.
  ASSERT_TRUE(c.publish(subjects{}.worker_beat("node-a"), garbage));
  auto w = admin_request_call(c, subjects{}, "workers", {}, 1000ms);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->workers.size(), 8u);
}

// Requests over a size limit (messages/limits.hpp) are answered with an
// error naming the limit, and counted; never dropped in silence. The
// limits are process-wide, and this process hosts the whole mesh.
TEST_F(router_front_test, requests_over_a_limit_are_answered_naming_it) {
  start_mesh();
  auto& c = bus();
  struct restore {
    ~restore() { set_wire_limits(wire_limits{}); }
  } restore_defaults;
  set_wire_limits({4096, 8, 4});
  const auto blocks_before = wire_limit_refusals(wire_limit::request_blocks);
  auto reply = c.request(subjects{}.route(), encode(request(1, 1, 9)), 2000ms);
  ASSERT_TRUE(reply) << reply.err().message;
  auto d = decode<decision>(*reply);
  ASSERT_TRUE(d);
  EXPECT_NE(d->error.find("limits.max_request_blocks = 8"), std::string::npos)
      << d->error;
  const std::string json = R"({"id": 2, "blocks": [1,2,3,4,5,6,7,8,9]})";
  auto jr = c.request(subjects{}.route_json(), bytes(json.begin(), json.end()),
                      2000ms);
  ASSERT_TRUE(jr);
  const std::string text(jr->begin(), jr->end());
  EXPECT_NE(text.find("limits.max_request_blocks"), std::string::npos) << text;
  EXPECT_EQ(wire_limit_refusals(wire_limit::request_blocks), blocks_before + 2);
  // A request within the limit is still routed.
  auto ok = c.request(subjects{}.route(), encode(request(3, 1, 8)), 2000ms);
  ASSERT_TRUE(ok);
  auto od = decode<decision>(*ok);
  ASSERT_TRUE(od);
  EXPECT_TRUE(od->error.empty()) << od->error;
  // Too large a payload, before decoding.
  const auto bytes_before = wire_limit_refusals(wire_limit::payload_bytes);
  auto big = c.request(subjects{}.route(), bytes(8192, 0), 2000ms);
  ASSERT_TRUE(big);
  auto bd = decode<decision>(*big);
  ASSERT_TRUE(bd);
  EXPECT_NE(bd->error.find("limits.max_payload_bytes = 4096"),
            std::string::npos)
      << bd->error;
  EXPECT_EQ(wire_limit_refusals(wire_limit::payload_bytes), bytes_before + 1);
  // A call for bids naming too many workers: the agent answers why.
  const auto workers_before = wire_limit_refusals(wire_limit::call_workers);
  auto b = c.request(
      subjects{}.agent("node-a", "bid"),
      encode(call_for_bids{request(4, 1, 2), 1, {0, 0, 0, 0, 0}}), 2000ms);
  ASSERT_TRUE(b);
  auto bl = decode<bid_list>(*b);
  ASSERT_TRUE(bl);
  EXPECT_TRUE(bl->bids.empty());
  EXPECT_NE(bl->error.find("limits.max_call_workers = 4"), std::string::npos)
      << bl->error;
  EXPECT_EQ(wire_limit_refusals(wire_limit::call_workers), workers_before + 1);
}

// A client chooses its reply subject: a router that answered anywhere would
// publish, with its own NATS permissions, where the client may not (a
// Decision on an agent's drain subject). Answers go only to inboxes.
TEST_F(router_front_test, a_reply_subject_outside_the_inboxes_is_refused) {
  start_mesh();
  auto& watcher = bus();
  std::atomic<int> heard{0};
  const std::string drain = subjects{}.agent("node-a", "drain");
  ASSERT_TRUE(watcher.subscribe(drain, "", [&](nats_message) { ++heard; }));
  ASSERT_TRUE(watcher.flush(2000ms));
  auto& c = bus();
  auto refused = [&] {
    uint64_t n = 0;
    for (auto& b : buses_)
      n += b->refused_replies();
    return n;
  };
  ASSERT_EQ(refused(), 0u);
  ASSERT_TRUE(c.publish(subjects{}.route(), encode(request(77, 7, 4)), drain));
  // The router decides, then refuses to answer there: counted, and the
  // drain subject never hears it (the router either publishes or counts).
  ASSERT_TRUE(eventually([&] { return refused() == 1; }));
  EXPECT_EQ(heard.load(), 0);
  // An inbox still gets its decision.
  auto d = route_once(c, subjects{}, request(78, 7, 4), 2000ms);
  EXPECT_TRUE(d) << d.err().message;
}

// A route request (core or JSON) or an ADMIN verb whose reply subject is
// one of the mesh's own inboxes, where bids and index answers travel, is
// refused unanswered and counted: a client cannot make the mesh publish
// into another process's calls.
TEST_F(router_front_test, a_reply_in_the_mesh_inboxes_is_refused) {
  start_shard(0, 1);
  process_metrics* metrics = nullptr;
  start_router("r1", false, 10, 0, &metrics);
  ASSERT_NE(metrics, nullptr);
  start_agent("node-a", 0, 4);
  auto& c = bus();
  ASSERT_TRUE(eventually([&] {
    auto w = admin_request_call(c, subjects{}, "workers", {}, 1000ms);
    return w && w->workers.size() == 4;
  }));
  std::atomic<int> heard{0};
  const std::string victim = "_INBOX.kvmesh.victim.17";
  ASSERT_TRUE(c.subscribe(victim, "", [&](nats_message) { ++heard; }));
  ASSERT_TRUE(c.flush(2000ms));
  ASSERT_TRUE(c.publish(subjects{}.route(), encode(request(1, 1, 8)), victim));
  const std::string json = R"({"id": 2, "tokens": [1, 2, 3]})";
  ASSERT_TRUE(c.publish(subjects{}.route_json(),
                        bytes(json.begin(), json.end()), victim));
  ASSERT_TRUE(c.publish(subjects{}.admin("workers"), {}, victim));
  // Requests after them are answered: the router went past the three.
  auto d = route_once(c, subjects{}, request(3, 1, 8), 2000ms);
  ASSERT_TRUE(d) << d.err().message;
  ASSERT_TRUE(admin_request_call(c, subjects{}, "workers", {}, 1000ms));
  EXPECT_TRUE(eventually([&] {
    return series_value(metrics->scrape(),
                        "kvmesh_router_mesh_inbox_replies_total") == 2.0;
  }));
  ASSERT_TRUE(c.flush(2000ms));
  EXPECT_EQ(heard.load(), 0);
}

}  // namespace
}  // namespace kvmesh::test
