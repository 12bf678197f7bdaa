// The OpenAI-compatible front: cpp-httplib server threads, each request
// forwarded to the engine; streamed answers pass through chunk by chunk
// from a thread that reads the engine, so the first bytes mark the first
// token.
#include "cluster/openai_front.hpp"

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/log.hpp"
#include "engines/kv_mirror.hpp"
#include "engines/openai.hpp"

namespace kvmesh {

status check_engine_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0)
    return make_error(ec::invalid_argument,
                      "'" + url + "' is not http://HOST[:PORT]");
  const std::string rest = url.substr(scheme.size());
  if (rest.empty() || rest.find_first_of("/?# ") != std::string::npos)
    return make_error(ec::invalid_argument,
                      "'" + url + "' is not http://HOST[:PORT] (no path)");
  return ok;
}

namespace {

// One request's life as the WORKER must hear it: arrival (sent before),
// first token once, end once, whatever way the request goes.
class tracked {
 public:
  tracked(engine_worker_actor w, uint64_t id) : w_(std::move(w)), id_(id) {}
  ~tracked() { end(); }
  void first() {
    if (!first_.exchange(true)) caf::anon_send(w_, first_atom::value, id_);
  }
  void end() {
    if (!ended_.exchange(true)) caf::anon_send(w_, done_atom::value, id_);
  }

 private:
  engine_worker_actor w_;
  uint64_t id_;
  std::atomic<bool> first_{false};
  std::atomic<bool> ended_{false};
};

// What the thread reading the engine hands to the server thread writing to
// the client.
struct channel {
  std::mutex mu;
  std::condition_variable cv;
  bool headers = false;
  int status = 0;
  std::string content_type;
  std::deque<std::string> chunks;
  bool finished = false;
  std::string error;  // set when the engine could not be reached
  std::atomic<bool> cancel{false};
};

std::string error_body(const std::string& why) {
  return nlohmann::json{
      {"error", {{"message", why}, {"type", "kvmesh_front"}, {"code", 502}}}}
      .dump();
}

// The engine did not answer a byte: 502, said in a header too, so that a
// gateway routes the request again elsewhere.
void engine_unreachable(httplib::Response& res, const std::string& why) {
  res.status = 502;
  res.set_header(engine_unreachable_header, "1");
  res.set_content(error_body(why), "application/json");
}

bool parse_id(const std::string& text, uint64_t& out) {
  if (text.empty() || text.size() > 20 ||
      text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  try {
    out = std::stoull(text);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

}  // namespace

struct openai_front::impl {
  caf::actor_system* sys = nullptr;
  openai_front_options opt;
  httplib::Server server;
  std::thread thread;
  int port = 0;
  std::atomic<uint64_t> next_local{1};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> unreachable{0};
  std::atomic<uint64_t> unparsed{0};
  // Set when the front stops: requests in flight are cut rather than
  // awaited (an engine that hangs would hold the shutdown for the whole
  // upstream timeout).
  std::atomic<bool> stopping{false};
  std::mutex clients_mu;
  std::set<httplib::Client*> clients;  // talking to the engine right now

  // A client of the engine, registered while it lives so that stop_all()
  // can cut its request.
  std::shared_ptr<httplib::Client> client() {
    auto* c = new httplib::Client(opt.engine_url);
    c->set_connection_timeout(std::chrono::seconds(5));
    c->set_read_timeout(opt.upstream_timeout);
    c->set_write_timeout(std::chrono::seconds(30));
    std::lock_guard<std::mutex> g(clients_mu);
    clients.insert(c);
    return std::shared_ptr<httplib::Client>(c, [this](httplib::Client* x) {
      {
        std::lock_guard<std::mutex> g(clients_mu);
        clients.erase(x);
      }
      delete x;
    });
  }
  void stop_all() {
    stopping = true;
    std::lock_guard<std::mutex> g(clients_mu);
    for (auto* c : clients)
      c->stop();
  }

  httplib::Headers upstream_headers(const httplib::Request& req) const {
    httplib::Headers h;
    for (const char* key : {"Authorization", "Accept", "X-Request-Id"})
      if (req.has_header(key)) h.emplace(key, req.get_header_value(key));
    if (opt.dp_rank >= 0)
      h.emplace("X-data-parallel-rank", std::to_string(opt.dp_rank));
    return h;
  }

  void proxy(const httplib::Request& req, httplib::Response& res, bool chat);
  void stream(const httplib::Request& req, httplib::Response& res,
              std::shared_ptr<tracked> t);
  void pass_get(const httplib::Request& req, httplib::Response& res);
  // Any other call passed to the engine as it is, not followed (the
  // gateway's /tokenize).
  void pass_post(const httplib::Request& req, httplib::Response& res);
  void answer_passed(const httplib::Result& r, httplib::Response& res);
  std::string stats_json();
};

void openai_front::impl::proxy(const httplib::Request& req,
                               httplib::Response& res, bool chat) {
  ++requests;
  auto parsed = parse_openai_request(req.body, chat, opt.block_tokens);
  std::shared_ptr<tracked> t;
  if (parsed) {
    uint64_t id = 0;
    if (!parse_id(req.get_header_value(request_id_header), id))
      id = (uint64_t{1} << 63) | next_local++;  // outside the routers' ids
    parsed->prompt.id = id;
    caf::anon_send(opt.worker, arrive_atom::value, parsed->prompt);
    t = std::make_shared<tracked>(opt.worker, id);
    res.set_header(request_id_header, std::to_string(id));
  } else {
    // The engine will say what is wrong with it; nothing to follow.
    ++unparsed;
  }
  if (parsed && parsed->stream) {
    stream(req, res, std::move(t));
    return;
  }
  auto cli = client();
  auto r =
      cli->Post(req.path, upstream_headers(req), req.body, "application/json");
  if (!r) {
    ++unreachable;
    engine_unreachable(res, "engine at " + opt.engine_url + " unreachable: " +
                                httplib::to_string(r.error()));
    return;
  }
  // Without streaming the first token is seen with the last.
  if (t) t->first();
  res.status = r->status;
  const std::string type = r->get_header_value("Content-Type");
  res.set_content(r->body, type.empty() ? "application/json" : type);
}

void openai_front::impl::stream(const httplib::Request& req,
                                httplib::Response& res,
                                std::shared_ptr<tracked> t) {
  auto ch = std::make_shared<channel>();
  std::shared_ptr<httplib::Client> cli = client();
  impl* self = this;
  httplib::Request up;
  up.method = "POST";
  up.path = req.path;
  up.headers = upstream_headers(req);
  up.headers.emplace("Content-Type", "application/json");
  up.body = req.body;
  up.response_handler = [ch](const httplib::Response& r) {
    std::lock_guard<std::mutex> g(ch->mu);
    ch->headers = true;
    ch->status = r.status;
    ch->content_type = r.get_header_value("Content-Type");
    ch->cv.notify_all();
    return !ch->cancel;
  };
  up.content_receiver = [ch](const char* data, size_t n, uint64_t, uint64_t) {
    std::lock_guard<std::mutex> g(ch->mu);
    ch->chunks.emplace_back(data, n);
    ch->cv.notify_all();
    return !ch->cancel;
  };
  auto reader = std::make_shared<std::thread>([ch, cli, up]() mutable {
    httplib::Response r;
    httplib::Error err = httplib::Error::Success;
    const bool ok = cli->send(up, r, err);
    std::lock_guard<std::mutex> g(ch->mu);
    if (!ok && !ch->headers) ch->error = httplib::to_string(err);
    ch->finished = true;
    ch->cv.notify_all();
  });
  auto stop_reader = [ch, cli, reader] {
    ch->cancel = true;
    cli->stop();  // wakes a read that waits for the engine
    if (reader->joinable()) reader->join();
  };
  std::unique_lock<std::mutex> lock(ch->mu);
  ch->cv.wait(lock, [&] { return ch->headers || ch->finished; });
  if (!ch->headers) {
    const std::string why = ch->error;
    lock.unlock();
    stop_reader();
    ++unreachable;
    engine_unreachable(res,
                       "engine at " + opt.engine_url + " unreachable: " + why);
    return;
  }
  if (ch->status != 200) {
    // An error answer (a bad request, say) is passed on whole, with its
    // status: nothing streams.
    ch->cv.wait(lock, [&] { return ch->finished; });
    std::string body;
    for (auto& c : ch->chunks)
      body += c;
    const int status = ch->status;
    const std::string type = ch->content_type;
    lock.unlock();
    stop_reader();
    res.status = status;
    res.set_content(body, type.empty() ? "application/json" : type);
    return;
  }
  const std::string type =
      ch->content_type.empty() ? "text/event-stream" : ch->content_type;
  lock.unlock();
  res.status = 200;
  res.set_chunked_content_provider(
      type,
      [ch, t, self](size_t, httplib::DataSink& sink) {
        std::unique_lock<std::mutex> l(ch->mu);
        // Woken by the reader; a stopping front is looked at now and then.
        while (!ch->cv.wait_for(l, std::chrono::milliseconds(100), [&] {
          return !ch->chunks.empty() || ch->finished;
        }))
          if (self->stopping) return false;
        while (!ch->chunks.empty()) {
          std::string c = std::move(ch->chunks.front());
          ch->chunks.pop_front();
          l.unlock();
          // The engine sends nothing until its first token is out.
          if (t) t->first();
          if (!sink.write(c.data(), c.size())) {
            ch->cancel = true;  // the client went away
            return false;
          }
          l.lock();
        }
        if (ch->finished) sink.done();
        return true;
      },
      [stop_reader, t](bool) {
        stop_reader();
        if (t) t->end();
      });
}

void openai_front::impl::pass_post(const httplib::Request& req,
                                   httplib::Response& res) {
  auto cli = client();
  cli->set_read_timeout(std::chrono::seconds(30));
  auto r =
      cli->Post(req.path, upstream_headers(req), req.body, "application/json");
  answer_passed(r, res);
}

void openai_front::impl::pass_get(const httplib::Request& req,
                                  httplib::Response& res) {
  auto cli = client();
  cli->set_read_timeout(std::chrono::seconds(10));
  answer_passed(cli->Get(req.path, upstream_headers(req)), res);
}

void openai_front::impl::answer_passed(const httplib::Result& r,
                                       httplib::Response& res) {
  if (!r) {
    engine_unreachable(res, "engine at " + opt.engine_url + " unreachable: " +
                                httplib::to_string(r.error()));
    return;
  }
  res.status = r->status;
  const std::string type = r->get_header_value("Content-Type");
  res.set_content(r->body, type.empty() ? "text/plain" : type);
}

std::string openai_front::impl::stats_json() {
  nlohmann::ordered_json out;
  caf::scoped_actor self{*sys};
  self->request(opt.worker, std::chrono::seconds(2), get_atom::value,
                stats_atom::value)
      .receive(
          [&](const engine_worker_stats& s) {
            const worker_status& w = s.status;
            nlohmann::ordered_json faults;
            for (size_t i = 0; i < mirror_fault_count; ++i)
              faults[to_string(static_cast<mirror_fault>(i))] =
                  s.mirror_faults[i];
            out["worker"] = {{"id", w.worker},
                             {"state", w.unhealthy  ? "unhealthy"
                                       : w.draining ? "draining"
                                                    : "live"},
                             {"gpu_blocks", w.gpu_blocks},
                             {"host_blocks", w.host_blocks},
                             {"disk_blocks", w.disk_blocks},
                             {"queued_blocks", w.queued},
                             {"active_blocks", w.active},
                             {"capacity_blocks", w.capacity},
                             {"waiting", w.waiting},
                             {"running", w.running},
                             {"completed", w.completed},
                             {"kv_batches", s.kv_batches},
                             {"resyncs", s.resyncs},
                             {"abandoned", s.abandoned},
                             {"bypassed", s.bypassed},
                             {"approximate", s.approximate},
                             {"mirror_faults", faults}};
            out["engine"] = {{"answering", s.metrics.answering},
                             {"has_metrics", s.metrics.has_metrics},
                             {"waiting", s.metrics.waiting},
                             {"running", s.metrics.running},
                             {"kv_usage", s.metrics.kv_usage},
                             {"gpu_blocks", s.metrics.gpu_blocks}};
          },
          [&](caf::error&) { out["worker"] = nullptr; });
  out["front"] = {{"requests", requests.load()},
                  {"unreachable", unreachable.load()},
                  {"unparsed", unparsed.load()}};
  if (opt.extra_stats) {
    auto extra =
        nlohmann::ordered_json::parse(opt.extra_stats(), nullptr, false);
    if (extra.is_object())
      for (auto& [k, v] : extra.items())
        out[k] = v;
  }
  return out.dump();
}

openai_front::openai_front(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

openai_front::~openai_front() {
  impl_->stop_all();
  if (impl_->thread.joinable()) {
    // stop() does nothing before the listening thread has started to
    // listen, and the join would then wait forever.
    for (int i = 0; i < 5000 && !impl_->server.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    impl_->server.stop();
    impl_->thread.join();
  }
}

int openai_front::port() const {
  return impl_->port;
}

void openai_front::serve(engine_worker_actor worker) {
  if (impl_->thread.joinable()) return;
  impl_->opt.worker = std::move(worker);
  impl* raw = impl_.get();
  impl_->thread = std::thread([raw] { raw->server.listen_after_bind(); });
}

expected<std::unique_ptr<openai_front>> openai_front::start(
    caf::actor_system& sys, const openai_front_options& opt) {
  auto f = bind(sys, opt);
  if (!f) return f.err();
  (*f)->serve(opt.worker);
  return f;
}

expected<std::unique_ptr<openai_front>> openai_front::bind(
    caf::actor_system& sys, const openai_front_options& opt) {
  if (auto st = check_engine_url(opt.engine_url); !st) return st.err();
  if (opt.block_tokens == 0)
    return make_error(ec::invalid_argument, "block size must be > 0");
  auto p = std::make_unique<impl>();
  p->sys = &sys;
  p->opt = opt;
  impl* raw = p.get();
  const size_t threads = std::max<size_t>(opt.threads, 2);
  p->server.new_task_queue = [threads] {
    return new httplib::ThreadPool(threads);
  };
  p->server.Post("/v1/completions",
                 [raw](const httplib::Request& q, httplib::Response& r) {
                   raw->proxy(q, r, false);
                 });
  p->server.Post("/v1/chat/completions",
                 [raw](const httplib::Request& q, httplib::Response& r) {
                   raw->proxy(q, r, true);
                 });
  for (const char* path : {"/v1/models", "/health"})
    p->server.Get(path, [raw](const httplib::Request& q, httplib::Response& r) {
      raw->pass_get(q, r);
    });
  // vLLM's and SGLang's tokenizer endpoints: the gateway asks them for a
  // prompt's exact token ids through the worker's front.
  for (const char* path : {"/tokenize", "/detokenize"})
    p->server.Post(path, [raw](const httplib::Request& q,
                               httplib::Response& r) { raw->pass_post(q, r); });
  p->server.Get("/kvmesh/stats",
                [raw](const httplib::Request&, httplib::Response& r) {
                  r.set_content(raw->stats_json(), "application/json");
                });
  p->port = opt.port == 0
                ? p->server.bind_to_any_port(opt.host)
                : (p->server.bind_to_port(opt.host, opt.port) ? opt.port : -1);
  if (p->port < 0)
    return make_error(ec::io_error, "front: cannot listen on " + opt.host +
                                        ":" + std::to_string(opt.port));
  return std::unique_ptr<openai_front>(new openai_front(std::move(p)));
}

}  // namespace kvmesh
