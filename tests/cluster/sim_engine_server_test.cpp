// The simulated engine server over real HTTP (cpp-httplib's client) and a
// real ZMQ subscriber decoding its KV events with the agent's decoder.
#include "cluster/sim_engine_server.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "core/block_hash.hpp"
#include "engines/kv_events.hpp"
#include "engines/sim_vocab.hpp"
#include "nats_server.hpp"

namespace kvmesh {
namespace {

using json = nlohmann::json;

sim_engine_server_options small(uint32_t ranks = 1) {
  sim_engine_server_options o;
  o.ranks = ranks;
  o.model = "sim-8b";
  o.engine.block_tokens = 4;
  o.engine.cache = {256, 0, 0};
  o.time_scale = 20;  // steps of a few ms: the tests wait little
  return o;
}

struct served {
  std::unique_ptr<sim_engine_server> server;
  std::unique_ptr<httplib::Client> http;
  explicit served(const sim_engine_server_options& o)
      : served(start_or_fail(o)) {}
  explicit served(std::unique_ptr<sim_engine_server> s)
      : server(std::move(s)) {
    http = std::make_unique<httplib::Client>("127.0.0.1", server->port());
    http->set_read_timeout(std::chrono::seconds(20));
  }
  static std::unique_ptr<sim_engine_server> start_or_fail(
      const sim_engine_server_options& o) {
    auto s = sim_engine_server::start(o);
    if (!s) throw std::runtime_error(s.err().message);
    return std::move(*s);
  }
  httplib::Result post(const std::string& path, const json& body,
                       const httplib::Headers& h = {}) {
    return http->Post(path.c_str(), h, body.dump(), "application/json");
  }
};

// The SSE events' JSON payloads of a stream body, [DONE] left out.
std::vector<json> events_of(const std::string& body, bool& done) {
  std::vector<json> out;
  done = false;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string data = body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]")
      done = true;
    else
      out.push_back(json::parse(data));
  }
  return out;
}

TEST(sim_engine_server, serves_models_health_and_metrics_as_vllm_does) {
  served s(small(2));
  auto models = s.http->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "sim-8b");
  auto health = s.http->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = s.http->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("vllm:num_requests_waiting{engine=\"1\""),
            std::string::npos);
  EXPECT_NE(metrics->body.find("num_gpu_blocks=\"256\""), std::string::npos);
}

TEST(sim_engine_server, keeps_a_connection_for_any_number_of_requests) {
  // As uvicorn does: a gateway's pooled connection is not closed after a
  // few requests (cpp-httplib's default closes it after 5).
  namespace asio = boost::asio;
  namespace http = boost::beast::http;
  served s(small());
  asio::io_context io;
  asio::ip::tcp::socket sock(io);
  sock.connect({asio::ip::address_v4::loopback(),
                static_cast<uint16_t>(s.server->port())});
  http::request<http::empty_body> ask{http::verb::get, "/health", 11};
  ask.set(http::field::host, "engine");
  boost::beast::flat_buffer buf;
  for (int i = 0; i < 20; ++i) {
    http::write(sock, ask);
    http::response<http::string_body> answer;
    http::read(sock, buf, answer);
    ASSERT_EQ(answer.result_int(), 200) << "request " << i;
    EXPECT_NE(answer[http::field::connection], "close")
        << "request " << i << ": " << answer.base();
  }
}

TEST(sim_engine_server, tokenizes_chat_with_its_template_and_text_by_bytes) {
  served s(small());
  auto r = s.post("/tokenize",
                  {{"model", "sim-8b"},
                   {"messages", {{{"role", "user"}, {"content", "hé"}}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::vector<uint32_t> want;
  for (unsigned char c : std::string("<|user|>hé\n<|assistant|>"))
    want.push_back(sim_byte_base + c);
  EXPECT_EQ(json::parse(r->body)["tokens"].get<std::vector<uint32_t>>(), want);
  auto bad = s.post("/tokenize", {{"messages", {{{"content", "x"}}}}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("messages[0].role"), std::string::npos) << bad->body;
}

TEST(sim_engine_server, answers_a_completion_with_its_tokens_and_usage) {
  served s(small());
  auto r =
      s.post("/v1/completions",
             {{"model", "sim-8b"}, {"prompt", "abcdefgh"}, {"max_tokens", 5}},
             {{"X-Request-Id", "req-7"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json out = json::parse(r->body);
  std::string want;
  for (uint32_t i = 0; i < 5; ++i)
    want += sim_output_piece(i);
  EXPECT_EQ(out["choices"][0]["text"], want);
  EXPECT_EQ(out["usage"]["prompt_tokens"], 8);
  EXPECT_EQ(out["usage"]["completion_tokens"], 5);
  EXPECT_EQ(out["id"], "cmpl-req-7");
  EXPECT_EQ(r->get_header_value("X-Request-Id"), "req-7");
  EXPECT_EQ(s.server->counters().finished, 1u);
}

TEST(sim_engine_server, streams_chat_one_chunk_per_token_then_usage) {
  served s(small());
  auto r = s.post("/v1/chat/completions",
                  {{"model", "sim-8b"},
                   {"messages", {{{"role", "user"}, {"content", "tell me"}}}},
                   {"max_tokens", 6},
                   {"stream", true},
                   {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  bool done = false;
  const auto ev = events_of(r->body, done);
  EXPECT_TRUE(done);
  ASSERT_EQ(ev.size(), 7u);  // six tokens and the usage
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (size_t i = 0; i < 6; ++i)
    text += ev[i]["choices"][0]["delta"]["content"].get<std::string>();
  std::string want;
  for (uint32_t i = 0; i < 6; ++i)
    want += sim_output_piece(i);
  EXPECT_EQ(text, want);
  EXPECT_TRUE(ev[4]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(ev[5]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(ev[6]["choices"].empty());
  EXPECT_EQ(ev[6]["usage"]["completion_tokens"], 6);
}

TEST(sim_engine_server, refuses_bad_requests_with_vllm_errors) {
  served s(small());
  auto unknown =
      s.post("/v1/completions", {{"model", "other"}, {"prompt", "abcd"}});
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(json::parse(unknown->body)["error"]["param"], "model");
  auto not_json = s.http->Post("/v1/completions", "{", "application/json");
  ASSERT_TRUE(not_json);
  EXPECT_EQ(not_json->status, 400);
  auto zero =
      s.post("/v1/completions", {{"prompt", "abcd"}, {"max_tokens", 0}});
  ASSERT_TRUE(zero);
  EXPECT_EQ(zero->status, 400);
  EXPECT_NE(zero->body.find("max_tokens"), std::string::npos);
  auto too_long =
      s.post("/v1/completions", {{"prompt", std::string(1100, 'x')}});
  ASSERT_TRUE(too_long);  // 256 blocks of 4 tokens: 1,024 at most
  EXPECT_EQ(too_long->status, 400);
  EXPECT_NE(too_long->body.find("maximum context length is 1024"),
            std::string::npos);
  auto rank = s.post("/v1/completions", {{"prompt", "abcd"}},
                     {{"X-data-parallel-rank", "3"}});
  ASSERT_TRUE(rank);
  EXPECT_EQ(rank->status, 400);
  auto stream =
      s.post("/v1/completions", {{"prompt", "abcd"}, {"stream", "yes"}});
  ASSERT_TRUE(stream);
  EXPECT_EQ(stream->status, 400);
  EXPECT_EQ(json::parse(stream->body)["error"]["param"], "stream");
  auto n = s.post("/v1/completions", {{"prompt", "abcd"}, {"n", 2}});
  ASSERT_TRUE(n);
  EXPECT_EQ(n->status, 400);
  EXPECT_EQ(s.server->counters().refused, 7u);
  EXPECT_EQ(s.server->counters().requests, 0u);
}

TEST(sim_engine_server, publishes_kv_events_for_the_tokens_it_received) {
  auto o = small(2);
  // Rank r publishes on port + r: a port another test takes between the
  // pick and the bind is picked again.
  int port = 0;
  std::unique_ptr<sim_engine_server> started;
  for (int tries = 0; !started && tries < 20; ++tries) {
    port = test::nats_server::free_port();
    o.kv_events = "tcp://127.0.0.1:" + std::to_string(port);
    auto st = sim_engine_server::start(o);
    if (st) started = std::move(*st);
  }
  ASSERT_TRUE(started) << "no two free ports in 20 tries";
  served s(std::move(started));
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.set(zmq::sockopt::rcvtimeo, 200);
  sub.connect("tcp://127.0.0.1:" + std::to_string(port + 1));  // rank 1
  // A slow joiner: a new prompt each time until the subscription is in
  // place (a repeated one would hit the cache and store nothing).
  std::vector<std::vector<uint32_t>> sent;
  std::vector<engine_kv_event> stored;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (char c = 'a'; stored.empty() && c <= 'z' &&
                     std::chrono::steady_clock::now() < deadline;
       ++c) {
    const std::string prompt = std::string(1, c) + "123456789ab";  // 3 blocks
    auto r = s.post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 1}},
                    {{"X-data-parallel-rank", "1"}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    sent.emplace_back();
    for (unsigned char b : prompt)
      sent.back().push_back(sim_byte_base + b);
    std::vector<zmq::message_t> frames;
    while (zmq::recv_multipart(sub, std::back_inserter(frames))) {
      kv_fault_counts faults;
      std::vector<std::string_view> views;
      for (auto& f : frames)
        views.emplace_back(static_cast<const char*>(f.data()), f.size());
      auto m = decode_kv_message(views, faults);
      ASSERT_TRUE(m) << m.err().message;
      EXPECT_EQ(m->batch.rank, 1);
      for (auto& e : m->batch.events)
        if (e.kind == engine_kv_event::stored) stored.push_back(e);
      frames.clear();
    }
  }
  ASSERT_FALSE(stored.empty());
  const engine_kv_event& e = stored.front();
  ASSERT_NE(std::find(sent.begin(), sent.end(), e.tokens), sent.end());
  EXPECT_EQ(e.block_size, 4u);
  EXPECT_FALSE(e.has_parent);
  EXPECT_EQ(e.medium, "GPU");
  auto chain = hash_blocks(e.tokens, 4);
  ASSERT_TRUE(chain);
  ASSERT_EQ(e.hashes.size(), 3u);  // one event for the prompt's blocks
  EXPECT_EQ(e.hashes[2], (*chain)[2].seq);
}

}  // namespace
}  // namespace kvmesh
