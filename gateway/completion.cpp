// A completion request from body to proxied answer (completion.hpp).
#include "gateway/completion.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <optional>
#include <variant>

#include "core/block_hash.hpp"
#include "core/log.hpp"
#include "web/proxy.hpp"
#include "web/respond.hpp"

namespace kvmesh::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using steady = std::chrono::steady_clock;
using web::answer;
using web::await_callback;
using web::callback_start;
using web::error_answer;
using web::proxy_options;
using web::proxy_outcome;
using web::proxy_request;
using web::proxy_result;
using web::respond;

namespace {

double seconds_since(steady::time_point t) {
  return std::chrono::duration<double>(steady::now() - t).count();
}

// The requests in flight, while this lives.
class in_flight {
 public:
  explicit in_flight(metrics::gauge& g) : g_(g) { g_.Increment(); }
  ~in_flight() { g_.Decrement(); }
  in_flight(const in_flight&) = delete;
  in_flight& operator=(const in_flight&) = delete;

 private:
  metrics::gauge& g_;
};

const pool_model* find_pool(const std::vector<pool_model>& pools,
                            const std::string& name) {
  for (const auto& p : pools)
    if (p.name == name) return &p;
  return nullptr;
}

// A route error as the client hears it.
answer route_error(const error& e) {
  switch (e.code) {
    case ec::not_found:
      return error_answer(404, e.message, "model", "model_not_found");
    case ec::capacity_exceeded: {
      answer a = error_answer(429, e.message);
      a.headers.emplace_back("Retry-After", "1");
      return a;
    }
    case ec::timeout:
      return error_answer(504, e.message);
    default: {
      answer a = error_answer(503, e.message);
      a.headers.emplace_back("Retry-After", "1");
      return a;
    }
  }
}

// The calls a request waits for, made here in plain functions: GCC 12
// miscompiles capturing lambdas made inside a coroutine's co_await
// expressions (see callback_gate.hpp).
callback_start<expected<tokenize_result>> tokenize_call(
    std::shared_ptr<prompt_tokenizer> tok, tokenize_ask ask) {
  // Called once: the ask (a prompt of megabytes, perhaps) moves on.
  return [tok = std::move(tok), ask = std::move(ask)](
             std::function<void(expected<tokenize_result>)> done) mutable {
    tok->tokenize(std::move(ask), std::move(done));
  };
}

callback_start<expected<route_answer>> route_call(gateway_mesh* mesh,
                                                  route_ask ask) {
  return [mesh, ask = std::move(ask)](
             std::function<void(expected<route_answer>)> done) {
    mesh->route(ask, std::move(done));
  };
}

// Observes the time to the first byte once per request.
std::function<void()> first_byte_clock(gateway_metrics* m,
                                       steady::time_point arrived) {
  auto seen = std::make_shared<bool>(false);
  return [m, arrived, seen] {
    if (!*seen) m->first_byte(seconds_since(arrived));
    *seen = true;
  };
}

// How the gateway's log lines name a request once the mesh routed it: the
// client's id (X-Request-Id) and the mesh's.
std::string routed_name(const std::string& client_id, const route_answer& won) {
  return "request " + client_id + " (mesh request " +
         std::to_string(won.request) + ", worker " +
         std::to_string(won.worker) + ")";
}

// The relay's call of the worker `won` names: the mesh's and the client's
// ids to the worker; back to the client, its id and which GPU and which of
// the mesh's requests served it (what a client or an operator needs to
// follow it in the decision logs and `kvmesh admin`). `direct`: to its
// engine itself, with what the front would add (the rank of a
// data-parallel engine, a JSON body) and of the client's headers only those
// the engine reads.
web::upstream_call worker_call(const route_answer& won,
                               const std::string& client_id, bool direct) {
  web::upstream_call c;
  c.endpoint = direct ? won.engine : won.endpoint;
  c.name = "worker " + std::to_string(won.worker);
  const std::string request = std::to_string(won.request);
  c.request_headers = {{web::mesh_id_header, request},
                       {web::client_id_header, client_id}};
  if (direct) {
    c.pass = {"authorization", "accept"};
    c.request_headers.emplace_back("Content-Type", "application/json");
    if (won.engine_rank >= 0)
      c.request_headers.emplace_back(web::dp_rank_header,
                                     std::to_string(won.engine_rank));
  }
  c.answer_headers = {{web::client_id_header, client_id},
                      {web::worker_header, std::to_string(won.worker)},
                      {web::mesh_id_header, request}};
  return c;
}

// One tokenizer's answer, timed by its path (engine, local); a handoff is
// counted by its reason instead.
asio::awaitable<expected<tokenize_result>> tokenize_with(
    gateway_context& ctx, std::shared_ptr<prompt_tokenizer> tok,
    tokenize_ask ask, const char* path) {
  const auto t0 = steady::now();
  const auto call = tokenize_call(std::move(tok), std::move(ask));
  expected<tokenize_result> r =
      co_await await_callback<expected<tokenize_result>>(*ctx.gate, call);
  if (r && !r->handoff.empty())
    ctx.metrics->handoff(r->handoff);
  else
    ctx.metrics->tokenized(path, seconds_since(t0));
  co_return r;
}

// Server-Timing's value: the tokenizer's time (when one was asked) and the
// routing decisions' so far, in milliseconds.
std::string server_timing(std::optional<double> tokenize_s, double route_s) {
  char out[96];
  if (tokenize_s)
    std::snprintf(out, sizeof out, "tokenize;dur=%.3f, route;dur=%.3f",
                  *tokenize_s * 1e3, route_s * 1e3);
  else
    std::snprintf(out, sizeof out, "route;dur=%.3f", route_s * 1e3);
  return out;
}

asio::awaitable<served> send_error(beast::tcp_stream& client, const answer& a,
                                   const std::string& client_id, bool keep,
                                   std::chrono::milliseconds timeout) {
  const bool sent = co_await respond(client, a, client_id, keep, timeout);
  co_return served{static_cast<int>(a.status), sent && keep};
}

}  // namespace

route_ask make_route_ask(const openai_body& body, const pool_model& pool,
                         const std::vector<uint32_t>& tokens,
                         uint32_t block_tokens, const std::string& client_id) {
  route_ask ask;
  ask.model = pool.lora ? pool.parent : pool.name;
  if (pool.lora) ask.lora = pool.name;
  ask.client_id = client_id;
  ask.block_tokens = block_tokens;
  ask.output_tokens = body.output_tokens;
  ask.input_tokens = static_cast<uint32_t>(
      std::min<size_t>(tokens.size(), std::numeric_limits<uint32_t>::max()));
  // A prompt shorter than one block has no blocks; it is routed still.
  if (!tokens.empty()) {
    auto hashes = hash_blocks(tokens, block_tokens, ask.lora);
    if (hashes)
      for (const auto& h : *hashes)
        ask.blocks.push_back(h.seq);
  }
  return ask;
}

asio::awaitable<served> serve_completion(
    gateway_context& ctx, beast::tcp_stream& client,
    beast::flat_buffer& client_buffer,
    const http::request<http::string_body>& req, openai_api api,
    const std::string& client_id) {
  const auto arrived = steady::now();
  in_flight flight(ctx.metrics->in_flight());
  const bool keep = req.keep_alive();
  const auto wt = ctx.opt.upstream_idle_timeout;

  body_result parsed = parse_openai_body(req.body(), api);
  if (auto* bad = std::get_if<body_error>(&parsed)) {
    ctx.metrics->bad_request(bad->reason);
    const answer a = error_answer(static_cast<unsigned>(bad->status),
                                  bad->message, bad->param);
    co_return co_await send_error(client, a, client_id, keep, wt);
  }
  const openai_body& body = std::get<openai_body>(parsed);

  const pool_list pool_snapshot = ctx.mesh->models();
  const std::vector<pool_model>& pools = *pool_snapshot;
  const pool_model* pool = find_pool(pools, body.model);
  if (!pool) {
    ctx.metrics->bad_request("unknown_model");
    const answer a =
        error_answer(404, "The model '" + body.model + "' does not exist",
                     "model", "model_not_found");
    co_return co_await send_error(client, a, client_id, keep, wt);
  }
  std::optional<in_flight> model_flight;
  if (metrics::gauge* g = ctx.metrics->model_in_flight(body.model))
    model_flight.emplace(*g);

  // The prompt's token ids: given, or from the model's tokenizer.
  std::vector<uint32_t> tokens;
  bool estimated = false;
  const char* source = "given";  // given, local, engine (or estimated)
  std::optional<double> tokenize_s;
  if (body.prompt_tokens) {
    tokens = *body.prompt_tokens;
  } else {
    tokenize_ask ta;
    ta.model = body.model;
    // Not read again: the ask takes it.
    ta.request = std::move(std::get<openai_body>(parsed).tokenize_request);
    ta.endpoints = pool->endpoints;
    // An adapter without endpoints of its own is served by its parent's.
    if (ta.endpoints.empty() && pool->lora)
      if (const pool_model* parent = find_pool(pools, pool->parent))
        ta.endpoints = parent->endpoints;
    const auto tokenize_t0 = steady::now();
    // The model's in-process tokenizer first, if it has one; the engine's
    // for the rest, and for what the in-process one hands over.
    std::shared_ptr<prompt_tokenizer> local;
    if (ctx.opt.tokenizer_for) local = ctx.opt.tokenizer_for(*pool);
    std::optional<expected<tokenize_result>> got;
    source = "local";
    if (local) {
      got = co_await tokenize_with(ctx, std::move(local), ta, source);
      if (*got && !(*got)->handoff.empty()) {
        KVMESH_DEBUG("gateway: request %s: tokenized by the engine (%s)",
                     client_id.c_str(), (*got)->handoff.c_str());
        got.reset();
      }
    }
    if (!got) {
      source = "engine";
      got = co_await tokenize_with(ctx, ctx.engine_tokenizer, std::move(ta),
                                   source);
    }
    expected<tokenize_result>& r = *got;
    tokenize_s = seconds_since(tokenize_t0);
    if (r) {
      tokens = std::move(r->tokens);
    } else if (r.err().code == ec::invalid_argument) {
      ctx.metrics->bad_request("tokenize_refused");
      const answer a = error_answer(400, r.err().message);
      co_return co_await send_error(client, a, client_id, keep, wt);
    } else {
      // Routed on its size alone: no blocks, so no cache affinity.
      KVMESH_WARN(
          "gateway: request %s: no tokens (%s); routing on an "
          "estimate of its size",
          client_id.c_str(), r.err().message.c_str());
      estimated = true;
    }
  }

  route_ask ask =
      make_route_ask(body, *pool, tokens, ctx.opt.block_tokens, client_id);
  if (estimated) {
    ask.input_tokens = static_cast<uint32_t>(std::min<size_t>(
        (body.prompt_bytes + text_bytes_per_token - 1) / text_bytes_per_token,
        std::numeric_limits<uint32_t>::max()));
    source = "estimated";
  }
  ctx.metrics->prompt(source, ask.input_tokens);
  KVMESH_DEBUG("gateway: request %s: %u prompt tokens (%s)", client_id.c_str(),
               ask.input_tokens, source);

  proxy_options popt;
  popt.connect_timeout = ctx.opt.connect_timeout;
  popt.pool = ctx.pool.get();
  popt.idle_timeout = ctx.opt.upstream_idle_timeout;
  const std::function<void()> first_byte =
      first_byte_clock(ctx.metrics, arrived);
  std::string last_failure;
  double route_s = 0;  // every attempt's
  for (uint32_t attempt = 0;; ++attempt) {
    const auto t0 = steady::now();
    const auto call = route_call(ctx.mesh, ask);
    expected<route_answer> routed =
        co_await await_callback<expected<route_answer>>(*ctx.gate, call);
    const double took = seconds_since(t0);
    route_s += took;
    ctx.metrics->routed(took);
    if (!routed) {
      // Once a worker failed, a refusal of the rest is that failure's.
      answer a = route_error(routed.err());
      if (!last_failure.empty() && a.status != 404)
        a = error_answer(502, last_failure + "; then: " + routed.err().message);
      co_return co_await send_error(client, a, client_id, keep, wt);
    }
    const route_answer& won = *routed;
    const std::string name = routed_name(client_id, won);
    popt.server_timing = server_timing(tokenize_s, route_s);
    // To the engine itself when the worker names it and this thread can
    // tell the worker what its front would have seen; else to the front.
    std::unique_ptr<engine_visit> visit = ctx.mesh->visit(won);
    popt.first_body_byte = nullptr;
    if (visit)
      popt.first_body_byte = std::bind(&engine_visit::first, visit.get());
    const web::upstream_call to = worker_call(won, client_id, visit != nullptr);
    proxy_result r = co_await proxy_request(client, client_buffer, req, to,
                                            popt, first_byte);
    visit.reset();  // its end, before a route again
    if (r.outcome == proxy_outcome::done)
      co_return served{r.status, r.keep_alive};
    if (r.outcome == proxy_outcome::client_gone) {
      // As vLLM logs each request it aborts.
      KVMESH_INFO(
          "gateway: %s: the client went away (%s): its worker's "
          "connection is closed",
          name.c_str(), r.why.c_str());
      co_return served{r.status == 0 ? 499 : r.status, false};
    }
    if (r.outcome == proxy_outcome::after_first) {
      KVMESH_WARN("gateway: %s: %s", name.c_str(), r.why.c_str());
      if (r.status != 0) co_return served{r.status, false};
      // Its header never came: ours can still go.
      const answer a = error_answer(502, r.why);
      co_return co_await send_error(client, a, client_id, keep, wt);
    }
    last_failure = r.why;
    if (attempt >= ctx.opt.max_reroutes) {
      KVMESH_WARN("gateway: %s: %s; no re-route left", name.c_str(),
                  r.why.c_str());
      const answer a = error_answer(502, r.why);
      co_return co_await send_error(client, a, client_id, keep, wt);
    }
    KVMESH_INFO("gateway: %s: %s; routing it again without that worker",
                name.c_str(), r.why.c_str());
    ctx.metrics->reroute();
    ask.exclude_workers.push_back(won.worker);
  }
}

}  // namespace kvmesh::gateway
