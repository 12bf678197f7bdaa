// A simulated GPU served as vLLM serves one (see sim_engine_server.hpp):
// per rank one engine model, stepped by its own thread at the model's
// timing; HTTP threads submit requests and wait for their tokens; the step
// thread publishes what the cache stored and evicted as vLLM's KV events.
#include "cluster/sim_engine_server.hpp"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>
#include <zmq.hpp>

#include <nlohmann/json.hpp>

#include "cluster/kv_subscriber.hpp"
#include "core/block_hash.hpp"
#include "core/log.hpp"
#include "engines/msgpack_writer.hpp"
#include "engines/sim_vocab.hpp"

namespace kvmesh {

namespace {

// uvicorn's default listen queue (vLLM's HTTP server).
constexpr int listen_backlog = 2048;

using clock_type = std::chrono::steady_clock;
using json = nlohmann::json;
// Answers keep their members in vLLM's order.
using out_json = nlohmann::ordered_json;

// How long an HTTP thread waits for its request's progress before looking
// again (cpp-httplib notices a stream's client gone between two waits).
// Tokens and the stop notify at once; a short poll would cost 10,000 held
// streams ten times as many wake-ups a second.
constexpr std::chrono::milliseconds progress_poll{1000};

// One completion on its way: what the HTTP thread waits for.
struct live_request {
  uint64_t id = 0;
  std::vector<uint64_t> blocks;  // its prompt's full blocks (chain hashes)
  uint32_t prompt_tokens = 0;
  uint32_t max_tokens = 0;
  uint32_t generated = 0;
  bool done = false;
};

// A block of some prompt: what a BlockStored event says of it. Kept while a
// tier holds it or a live request names it.
struct block_entry {
  uint64_t parent = 0;
  bool has_parent = false;
  std::vector<uint32_t> tokens;
  uint8_t tiers = 0;  // bit per tier holding it
  uint32_t users = 0;
};

const char* medium_of(tier t) {
  switch (t) {
    case tier::gpu:
      return "GPU";
    case tier::host:
      return "CPU";
    case tier::disk:
      return "DISK";
  }
  return "GPU";
}

// vLLM's error body: {"error": {"message", "type", "param", "code"}}.
void send_error(httplib::Response& res, int status, const std::string& msg,
                const char* param = nullptr) {
  const char* type = status == 404   ? "NotFoundError"
                     : status == 400 ? "BadRequestError"
                                     : "InternalServerError";
  out_json e = {{"message", msg},
                {"type", type},
                {"param", param ? out_json(param) : out_json(nullptr)},
                {"code", status}};
  res.status = status;
  res.set_content(out_json{{"error", e}}.dump(), "application/json");
}

struct rank_engine {
  uint32_t rank = 0;
  std::mutex mu;
  std::condition_variable wake;      // the step thread: new work, stop
  std::condition_variable progress;  // the HTTP threads: tokens, ends
  std::optional<engine> eng;
  std::unordered_map<uint64_t, std::shared_ptr<live_request>> live;
  std::unordered_map<uint64_t, block_entry> blocks;
  std::unique_ptr<zmq::socket_t> pub;
  uint64_t seq = 0;
  uint64_t next_id = 1;
  double step_end = -1;
  std::vector<engine_event> events;  // finish_step's, reused
  std::thread loop;
};

}  // namespace

struct sim_engine_server::impl {
  sim_engine_server_options opt;
  clock_type::time_point origin = clock_type::now();
  zmq::context_t ctx{1};
  std::vector<std::unique_ptr<rank_engine>> ranks;
  httplib::Server server;
  std::thread http;
  int port = -1;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> requests{0}, refused{0}, finished{0}, abandoned{0},
      tokenized{0}, kv_batches{0};

  double now_ms() const {
    return std::chrono::duration<double, std::milli>(clock_type::now() - origin)
               .count() *
           opt.time_scale;
  }
  clock_type::time_point wall(double engine_ms) const {
    return origin + std::chrono::duration_cast<clock_type::duration>(
                        std::chrono::duration<double, std::milli>(
                            engine_ms / opt.time_scale));
  }
  uint32_t max_model_len() const {
    if (opt.max_model_len) return opt.max_model_len;
    return static_cast<uint32_t>(std::min<uint64_t>(
        uint64_t{opt.engine.cache.gpu_blocks} * opt.engine.block_tokens,
        UINT32_MAX));
  }

  void step_loop(rank_engine& r);
  void after_step(rank_engine& r);
  void publish(rank_engine& r);
  void release(rank_engine& r, const live_request& lr);
  rank_engine* pick(const httplib::Request& req, std::string& why);
  void completion(const httplib::Request& req, httplib::Response& res,
                  bool chat);
  void tokenize(const httplib::Request& req, httplib::Response& res);
  std::string metrics_text();
  void stop();
};

void sim_engine_server::impl::step_loop(rank_engine& r) {
  std::unique_lock<std::mutex> l(r.mu);
  while (!stopping) {
    engine& eng = *r.eng;
    if (eng.in_step()) {
      if (now_ms() < r.step_end) {
        r.wake.wait_until(l, wall(r.step_end));
        continue;
      }
      r.events.clear();
      eng.finish_step(r.events);
      after_step(r);
      r.progress.notify_all();
      continue;
    }
    // vLLM's engine core takes every request already queued before it
    // plans a step: those that arrived while the last one ran join this one.
    if (eng.busy()) {
      if (auto end = eng.start_step(now_ms())) {
        r.step_end = *end;
        continue;
      }
      // Work that cannot be scheduled yet (waiting for space): look again.
      r.wake.wait_for(l, std::chrono::milliseconds(5));
      continue;
    }
    r.wake.wait(l);
  }
}

void sim_engine_server::impl::after_step(rank_engine& r) {
  r.eng->each_running([&](uint64_t id, uint32_t generated) {
    if (auto it = r.live.find(id); it != r.live.end())
      it->second->generated = generated;
  });
  // The cache's events first: a request that ends in this step must not
  // release its blocks' entries before their BlockStored is published.
  for (const engine_event& e : r.events)
    if (e.kind == engine_event::stored || e.kind == engine_event::removed)
      if (auto it = r.blocks.find(e.hash); it != r.blocks.end()) {
        const uint8_t bit =
            static_cast<uint8_t>(1u << static_cast<unsigned>(e.where));
        if (e.kind == engine_event::stored)
          it->second.tiers |= bit;
        else
          it->second.tiers &= static_cast<uint8_t>(~bit);
      }
  publish(r);
  for (const engine_event& e : r.events)
    if (e.kind == engine_event::finished)
      if (auto it = r.live.find(e.request); it != r.live.end()) {
        it->second->generated = e.generated;
        it->second->done = true;
        release(r, *it->second);
        r.live.erase(it);
        ++finished;
      }
  // Blocks no tier holds and no request names are forgotten.
  for (const engine_event& e : r.events)
    if (e.kind == engine_event::removed)
      if (auto it = r.blocks.find(e.hash); it != r.blocks.end() &&
                                           it->second.tiers == 0 &&
                                           it->second.users == 0)
        r.blocks.erase(it);
}

// The step's cache events as one KV event batch in vLLM's array layout:
// [ts, [events...], rank]; consecutive blocks of one chain stored in one
// tier go in one BlockStored, as vLLM stores a prompt's new blocks.
void sim_engine_server::impl::publish(rank_engine& r) {
  if (!r.pub) return;
  struct group {
    bool stored;
    tier where;
    std::vector<uint64_t> hashes;
  };
  std::vector<group> groups;
  for (const engine_event& e : r.events) {
    if (e.kind != engine_event::stored && e.kind != engine_event::removed)
      continue;
    const bool stored = e.kind == engine_event::stored;
    auto it = r.blocks.find(e.hash);
    if (stored && it == r.blocks.end()) continue;  // not a prompt block
    if (!groups.empty() && groups.back().stored == stored &&
        groups.back().where == e.where &&
        (!stored || (it->second.has_parent &&
                     it->second.parent == groups.back().hashes.back()))) {
      groups.back().hashes.push_back(e.hash);
      continue;
    }
    groups.push_back({stored, e.where, {e.hash}});
  }
  if (groups.empty()) return;
  mp_writer w;
  w.array(3).f64(std::chrono::duration<double>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count());
  w.array(groups.size());
  for (const group& g : groups) {
    if (!g.stored) {
      w.array(3).str("BlockRemoved").array(g.hashes.size());
      for (uint64_t h : g.hashes)
        w.uint(h);
      w.str(medium_of(g.where));
      continue;
    }
    const block_entry& first = r.blocks.at(g.hashes.front());
    w.array(7).str("BlockStored").array(g.hashes.size());
    for (uint64_t h : g.hashes)
      w.uint(h);
    if (first.has_parent)
      w.uint(first.parent);
    else
      w.nil();
    w.array(g.hashes.size() * opt.engine.block_tokens);
    for (uint64_t h : g.hashes)
      for (uint32_t t : r.blocks.at(h).tokens)
        w.uint(t);
    w.uint(opt.engine.block_tokens).nil().str(medium_of(g.where));
  }
  w.uint(r.rank);
  const std::string seq = seq_frame(r.seq++);
  r.pub->send(zmq::buffer(opt.kv_topic), zmq::send_flags::sndmore);
  r.pub->send(zmq::buffer(seq), zmq::send_flags::sndmore);
  r.pub->send(zmq::buffer(w.bytes()), zmq::send_flags::none);
  ++kv_batches;
}

void sim_engine_server::impl::release(rank_engine& r, const live_request& lr) {
  for (uint64_t h : lr.blocks)
    if (auto it = r.blocks.find(h); it != r.blocks.end()) {
      if (it->second.users > 0) --it->second.users;
      if (it->second.users == 0 && it->second.tiers == 0) r.blocks.erase(it);
    }
}

rank_engine* sim_engine_server::impl::pick(const httplib::Request& req,
                                           std::string& why) {
  if (req.has_header("X-data-parallel-rank")) {
    const std::string v = req.get_header_value("X-data-parallel-rank");
    char* stop = nullptr;
    const long n = std::strtol(v.c_str(), &stop, 10);
    if (v.empty() || *stop != '\0' || n < 0 ||
        n >= static_cast<long>(ranks.size())) {
      why = "X-data-parallel-rank '" + v + "' is not a rank 0 to " +
            std::to_string(ranks.size() - 1);
      return nullptr;
    }
    return ranks[static_cast<size_t>(n)].get();
  }
  rank_engine* best = nullptr;
  size_t load = SIZE_MAX;
  for (auto& r : ranks) {
    std::lock_guard<std::mutex> g(r->mu);
    const size_t n = r->eng->waiting() + r->eng->running();
    if (n < load) load = n, best = r.get();
  }
  return best;
}

void sim_engine_server::impl::completion(const httplib::Request& req,
                                         httplib::Response& res, bool chat) {
  const json body = json::parse(req.body, nullptr, false);
  auto refuse = [&](int status, const std::string& msg,
                    const char* param = nullptr) {
    ++refused;
    send_error(res, status, msg, param);
  };
  if (!body.is_object()) return refuse(400, "the body is not a JSON object");
  if (auto m = body.find("model"); m != body.end() && *m != opt.model)
    return refuse(404,
                  "The model `" +
                      (m->is_string() ? m->get<std::string>() : m->dump()) +
                      "` does not exist.",
                  "model");
  if (chat != body.contains("messages"))
    return refuse(400, chat ? "messages is required" : "prompt is required",
                  chat ? "messages" : "prompt");
  auto tokens = sim_prompt_tokens(body);
  if (!tokens) return refuse(400, tokens.err().message);
  uint64_t max_tokens = opt.default_max_tokens;
  for (const char* key : {"max_completion_tokens", "max_tokens"})
    if (auto m = body.find(key); m != body.end() && !m->is_null()) {
      if (!m->is_number_unsigned() || m->get<uint64_t>() == 0)
        return refuse(400, std::string(key) + " must be a positive integer",
                      key);
      max_tokens = m->get<uint64_t>();
      break;
    }
  const uint64_t len = max_model_len();
  if (tokens->size() + max_tokens > len)
    return refuse(
        400, "This model's maximum context length is " + std::to_string(len) +
                 " tokens. However, you requested " +
                 std::to_string(tokens->size() + max_tokens) + " tokens (" +
                 std::to_string(tokens->size()) + " in the messages, " +
                 std::to_string(max_tokens) + " in the completion).");
  bool stream = false, usage = false;
  if (auto v = body.find("stream"); v != body.end() && !v->is_null()) {
    if (!v->is_boolean())
      return refuse(400, "stream must be a boolean", "stream");
    stream = v->get<bool>();
  }
  if (auto so = body.find("stream_options");
      so != body.end() && !so->is_null()) {
    if (!so->is_object())
      return refuse(400, "stream_options must be an object", "stream_options");
    if (auto u = so->find("include_usage"); u != so->end() && !u->is_null()) {
      if (!u->is_boolean())
        return refuse(400, "stream_options.include_usage must be a boolean",
                      "stream_options");
      usage = u->get<bool>();
    }
  }
  if (auto n = body.find("n"); n != body.end() && !n->is_null() && *n != 1)
    return refuse(400, "n: the simulated engine answers one choice only", "n");
  std::string why;
  rank_engine* r = pick(req, why);
  if (!r) return refuse(400, why);
  const uint32_t bt = opt.engine.block_tokens;
  auto chain = hash_blocks(*tokens, bt);
  if (!chain) return refuse(400, chain.err().message);

  auto lr = std::make_shared<live_request>();
  lr->prompt_tokens = static_cast<uint32_t>(tokens->size());
  lr->max_tokens = static_cast<uint32_t>(max_tokens);
  {
    std::lock_guard<std::mutex> g(r->mu);
    lr->id = r->next_id++;
    engine_request er;
    er.id = lr->id;
    er.prompt_tokens = lr->prompt_tokens;
    er.output_tokens = lr->max_tokens;
    for (size_t i = 0; i < chain->size(); ++i) {
      const uint64_t h = (*chain)[i].seq;
      er.blocks.push_back(h);
      block_entry& b = r->blocks[h];
      if (b.tokens.empty()) {
        b.has_parent = i > 0;
        b.parent = i > 0 ? (*chain)[i - 1].seq : 0;
        b.tokens.assign(tokens->begin() + static_cast<long>(i * bt),
                        tokens->begin() + static_cast<long>((i + 1) * bt));
      }
      ++b.users;
    }
    lr->blocks = er.blocks;
    if (auto st = r->eng->submit(std::move(er), now_ms()); !st) {
      release(*r, *lr);
      return refuse(400, st.err().message);
    }
    r->live.emplace(lr->id, lr);
  }
  r->wake.notify_one();
  ++requests;

  const std::string rid = req.has_header("X-Request-Id")
                              ? req.get_header_value("X-Request-Id")
                              : std::to_string(lr->id);
  if (req.has_header("X-Request-Id")) res.set_header("X-Request-Id", rid);
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + rid;
  const long created = static_cast<long>(std::time(nullptr));
  const std::string model = opt.model;
  const out_json usage_json = [&] {
    return out_json{{"prompt_tokens", lr->prompt_tokens},
                    {"completion_tokens", lr->max_tokens},
                    {"total_tokens", lr->prompt_tokens + lr->max_tokens}};
  }();

  if (!stream) {
    std::unique_lock<std::mutex> l(r->mu);
    while (!lr->done && !stopping) r->progress.wait_for(l, progress_poll);
    l.unlock();
    if (!lr->done) return send_error(res, 503, "the engine is stopping");
    std::string text;
    for (uint32_t i = 0; i < lr->generated; ++i)
      text += sim_output_piece(i);
    out_json choice = {
        {"index", 0}, {"logprobs", nullptr}, {"finish_reason", "length"}};
    if (chat)
      choice["message"] = {{"role", "assistant"}, {"content", text}};
    else
      choice["text"] = text;
    out_json out = {{"id", id},
                    {"object", chat ? "chat.completion" : "text_completion"},
                    {"created", created},
                    {"model", model},
                    {"choices", out_json::array({choice})},
                    {"usage", usage_json}};
    res.set_content(out.dump(), "application/json");
    return;
  }

  // Server-sent events, one chunk per token as the steps produce them.
  auto sent = std::make_shared<uint32_t>(0);
  res.set_chunked_content_provider(
      "text/event-stream", [this, r, lr, sent, chat, usage, id, created, model,
                            usage_json](size_t, httplib::DataSink& sink) {
        std::unique_lock<std::mutex> l(r->mu);
        if (!r->progress.wait_for(l, progress_poll, [&] {
              return lr->generated > *sent || lr->done || stopping;
            }))
          return true;  // called again
        if (stopping && !lr->done) return false;
        const uint32_t upto = lr->generated;
        const bool done = lr->done;
        l.unlock();
        auto event = [&](const out_json& choice) {
          out_json c = {
              {"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", out_json::array({choice})}};
          const std::string s = "data: " + c.dump() + "\n\n";
          return sink.write(s.data(), s.size());
        };
        for (; *sent < upto; ++*sent) {
          const bool last = done && *sent + 1 == upto;
          out_json choice = {
              {"index", 0},
              {"logprobs", nullptr},
              {"finish_reason", last ? out_json("length") : out_json(nullptr)}};
          if (chat) {
            choice["delta"] =
                *sent == 0 ? out_json{{"role", "assistant"},
                                      {"content", sim_output_piece(0)}}
                           : out_json{{"content", sim_output_piece(*sent)}};
          } else {
            choice["text"] = sim_output_piece(*sent);
          }
          if (!event(choice)) {
            // The client went away: a request past its first token runs
            // on in the engine model (its tokens are not sent).
            ++abandoned;
            return false;
          }
        }
        if (!done) return true;
        std::string tail;
        if (usage)
          tail += "data: " +
                  out_json{{"id", id},
                           {"object",
                            chat ? "chat.completion.chunk" : "text_completion"},
                           {"created", created},
                           {"model", model},
                           {"choices", out_json::array()},
                           {"usage", usage_json}}
                      .dump() +
                  "\n\n";
        tail += "data: [DONE]\n\n";
        if (!sink.write(tail.data(), tail.size())) return false;
        sink.done();
        return true;
      });
}

void sim_engine_server::impl::tokenize(const httplib::Request& req,
                                       httplib::Response& res) {
  const json body = json::parse(req.body, nullptr, false);
  if (body.is_object())
    if (auto m = body.find("model"); m != body.end() && *m != opt.model)
      return send_error(
          res, 404, "The model `" + m->dump() + "` does not exist.", "model");
  auto tokens = sim_prompt_tokens(body);
  if (!tokens) return send_error(res, 400, tokens.err().message);
  ++tokenized;
  res.set_content(out_json{{"count", tokens->size()},
                           {"max_model_len", max_model_len()},
                           {"tokens", *tokens}}
                      .dump(),
                  "application/json");
}

std::string sim_engine_server::impl::metrics_text() {
  // Prometheus' text format keeps a family's samples together.
  std::string running, waiting, usage, config;
  for (auto& r : ranks) {
    std::lock_guard<std::mutex> g(r->mu);
    const engine& e = *r->eng;
    const std::string rank = std::to_string(r->rank);
    const std::string labels =
        "{engine=\"" + rank + "\",model_name=\"" + opt.model + "\"} ";
    const double used = static_cast<double>(e.cache().active()) /
                        static_cast<double>(std::max<uint64_t>(
                            e.cache().capacity(tier::gpu), 1));
    running += "vllm:num_requests_running" + labels +
               std::to_string(e.running()) + "\n";
    waiting += "vllm:num_requests_waiting" + labels +
               std::to_string(e.waiting()) + "\n";
    usage += "vllm:kv_cache_usage_perc" + labels + std::to_string(used) + "\n";
    config += "vllm:cache_config_info{block_size=\"" +
              std::to_string(opt.engine.block_tokens) + "\",engine=\"" + rank +
              "\",num_gpu_blocks=\"" +
              std::to_string(opt.engine.cache.gpu_blocks) + "\"} 1\n";
  }
  return "# TYPE vllm:num_requests_running gauge\n" + running +
         "# TYPE vllm:num_requests_waiting gauge\n" + waiting +
         "# TYPE vllm:kv_cache_usage_perc gauge\n" + usage +
         "# TYPE vllm:cache_config_info gauge\n" + config;
}

void sim_engine_server::impl::stop() {
  stopping = true;
  server.stop();
  if (http.joinable()) http.join();
  for (auto& r : ranks) {
    { std::lock_guard<std::mutex> g(r->mu); }
    r->wake.notify_all();
    r->progress.notify_all();
    if (r->loop.joinable()) r->loop.join();
  }
}

sim_engine_server::sim_engine_server(std::unique_ptr<impl> p)
    : impl_(std::move(p)) {}

sim_engine_server::~sim_engine_server() {
  impl_->stop();
}

int sim_engine_server::port() const {
  return impl_->port;
}

sim_engine_counters sim_engine_server::counters() const {
  sim_engine_counters c;
  c.requests = impl_->requests;
  c.refused = impl_->refused;
  c.finished = impl_->finished;
  c.abandoned = impl_->abandoned;
  c.tokenized = impl_->tokenized;
  c.kv_batches = impl_->kv_batches;
  for (auto& r : impl_->ranks) {
    std::lock_guard<std::mutex> g(r->mu);
    c.steps += r->eng->steps();
  }
  return c;
}

expected<std::unique_ptr<sim_engine_server>> sim_engine_server::start(
    const sim_engine_server_options& opt) {
  if (opt.ranks == 0 || opt.ranks > 1024)
    return make_error(ec::invalid_argument,
                      "data-parallel size must be 1 to 1024");
  if (!(opt.time_scale > 0))
    return make_error(ec::invalid_argument, "time scale must be > 0");
  if (opt.model.empty())
    return make_error(ec::invalid_argument, "the model name is empty");
  if (opt.default_max_tokens == 0)
    return make_error(ec::invalid_argument, "default max_tokens must be > 0");
  auto p = std::make_unique<impl>();
  p->opt = opt;
  for (uint32_t i = 0; i < opt.ranks; ++i) {
    auto eng = engine::make(opt.engine);
    if (!eng) return eng.err();
    auto r = std::make_unique<rank_engine>();
    r->rank = i;
    r->eng.emplace(std::move(*eng));
    if (!opt.kv_events.empty()) {
      auto ep = endpoint_of_rank(opt.kv_events, i);
      if (!ep) return ep.err();
      r->pub = std::make_unique<zmq::socket_t>(p->ctx, zmq::socket_type::pub);
      try {
        r->pub->set(zmq::sockopt::linger, 0);
        r->pub->bind(*ep);
      } catch (const zmq::error_t& e) {
        return make_error(ec::io_error,
                          "KV events: cannot bind " + *ep + ": " + e.what());
      }
    }
    p->ranks.push_back(std::move(r));
  }
  impl* raw = p.get();
  const size_t threads = std::max<size_t>(opt.threads, 2);
  p->server.set_payload_max_length(64 << 20);  // vLLM's is larger; enough
  // uvicorn serves any number of requests on a kept-alive connection;
  // cpp-httplib closes one after 5 by default.
  p->server.set_keep_alive_max_count(std::numeric_limits<size_t>::max());
  p->server.new_task_queue = [threads] {
    return new httplib::ThreadPool(threads);
  };
  p->server.Post("/v1/completions",
                 [raw](const httplib::Request& q, httplib::Response& r) {
                   raw->completion(q, r, false);
                 });
  p->server.Post("/v1/chat/completions",
                 [raw](const httplib::Request& q, httplib::Response& r) {
                   raw->completion(q, r, true);
                 });
  p->server.Post("/tokenize",
                 [raw](const httplib::Request& q, httplib::Response& r) {
                   raw->tokenize(q, r);
                 });
  p->server.Get("/health", [](const httplib::Request&, httplib::Response& r) {
    r.status = 200;
  });
  p->server.Get(
      "/metrics", [raw](const httplib::Request&, httplib::Response& r) {
        r.set_content(raw->metrics_text(), "text/plain; version=0.0.4");
      });
  p->server.Get(
      "/v1/models", [raw](const httplib::Request&, httplib::Response& r) {
        const out_json m = {{"id", raw->opt.model},
                            {"object", "model"},
                            {"created", 0},
                            {"owned_by", "kvmesh"},
                            {"root", raw->opt.model},
                            {"parent", nullptr},
                            {"max_model_len", raw->max_model_len()}};
        r.set_content(
            out_json{{"object", "list"}, {"data", out_json::array({m})}}.dump(),
            "application/json");
      });
  // cpp-httplib listens with a queue of 5 (fixed when Debian built it):
  // connections beyond it wait for SYN retries. The socket is listened on
  // again with uvicorn's 2048, as vLLM's server has.
  socket_t listener = INVALID_SOCKET;
  p->server.set_socket_options([&listener](socket_t s) {
    httplib::default_socket_options(s);
    listener = s;
  });
  p->port = opt.port == 0
                ? p->server.bind_to_any_port(opt.host)
                : (p->server.bind_to_port(opt.host, opt.port) ? opt.port : -1);
  if (p->port < 0)
    return make_error(ec::io_error, "cannot listen on " + opt.host + ":" +
                                        std::to_string(opt.port));
  p->server.set_socket_options(httplib::default_socket_options);
  if (listener != INVALID_SOCKET && ::listen(listener, listen_backlog) != 0)
    KVMESH_WARN("engine: listen queue stays at cpp-httplib's 5: %s",
                std::strerror(errno));
  for (auto& r : p->ranks) {
    rank_engine* re = r.get();
    r->loop = std::thread([raw, re] { raw->step_loop(*re); });
  }
  p->http = std::thread([raw] { raw->server.listen_after_bind(); });
  return std::unique_ptr<sim_engine_server>(
      new sim_engine_server(std::move(p)));
}

}  // namespace kvmesh
