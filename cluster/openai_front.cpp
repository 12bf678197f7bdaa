// The OpenAI-compatible front: cpp-httplib server threads, each request
// forwarded to the engine from a thread that reads the engine, while the
// server thread watches its client; streamed answers pass through chunk by
// chunk, so the first bytes mark the first token.
#include "cluster/openai_front.hpp"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
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
  bool failed = false;  // the engine's answer did not come whole
  std::string error;    // why, when it failed
  std::atomic<bool> cancel{false};
};

// How often a server thread waiting for the engine looks at its client.
constexpr std::chrono::milliseconds client_check{100};

// One end of a TCP socket as cpp-httplib names a request's: the numeric
// host and the port.
bool socket_end(int fd, bool peer, std::string& host, int& port) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  if ((peer ? ::getpeername(fd, sa, &n) : ::getsockname(fd, sa, &n)) != 0)
    return false;
  if (a.ss_family != AF_INET && a.ss_family != AF_INET6) return false;
  char name[NI_MAXHOST];
  if (::getnameinfo(sa, n, name, sizeof name, nullptr, 0, NI_NUMERICHOST) != 0)
    return false;
  host = name;
  port = a.ss_family == AF_INET
             ? ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port)
             : ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port);
  return true;
}

bool is_connection_of(int fd, const httplib::Request& req) {
  std::string host;
  int port = 0;
  if (!socket_end(fd, true, host, port) || port != req.remote_port ||
      host != req.remote_addr)
    return false;
  if (req.local_port < 0) return true;  // the server did not say
  return socket_end(fd, false, host, port) && port == req.local_port &&
         host == req.local_addr;
}

// The socket of the connection `req` came on, or -1. cpp-httplib (0.11)
// hands a handler no socket, and the front must see its client go: a TCP
// connection is the one socket with both its ends, so the process's
// sockets are looked through for it. A pool thread serves one connection
// at a time, so the one it found last is tried first. The connection
// cannot close under the handler: the server closes it after.
int client_socket(const httplib::Request& req) {
  thread_local int last = -1;
  if (last >= 0 && is_connection_of(last, req)) return last;
  last = -1;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return -1;
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    if (is_connection_of(static_cast<int>(fd), req)) {
      last = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(dir);
  return last;
}

// Whether the peer of `fd` closed the connection (or it failed). A client
// gone is what vLLM takes as a request to abort; bytes waiting (a
// pipelined request) are not a hang-up. -1: not known, never gone.
bool client_gone(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  char c;
  return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

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
  std::atomic<uint64_t> client_gone_count{0};  // clients that went first
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

  // The engine's call for a request, made on a thread of its own that
  // hands the answer over through `ch`; `stop` cuts it (closing its
  // connection) and waits for that thread.
  struct engine_call {
    std::shared_ptr<channel> ch;
    std::function<void()> stop;
  };
  engine_call call_engine(const httplib::Request& req);
  // Waits on `ch` (locked in `l`) until `ready`, looking at the client
  // (`peer`, see client_socket) now and then: false once it went away.
  template <class Ready>
  bool wait_for_engine(std::unique_lock<std::mutex>& l, channel& ch, int peer,
                       Ready ready) {
    while (!ch.cv.wait_for(l, client_check, ready))
      if (client_gone(peer)) return false;
    return true;
  }
  // A request whose client went away before its answer was out.
  void went_away(const httplib::Request& req, httplib::Response& res);
  void proxy(const httplib::Request& req, httplib::Response& res, bool chat);
  void pass_get(const httplib::Request& req, httplib::Response& res);
  // Any other call passed to the engine as it is, not followed (the
  // gateway's /tokenize).
  void pass_post(const httplib::Request& req, httplib::Response& res);
  void answer_passed(const httplib::Result& r, httplib::Response& res);
  std::string stats_json();
};

openai_front::impl::engine_call openai_front::impl::call_engine(
    const httplib::Request& req) {
  auto ch = std::make_shared<channel>();
  std::shared_ptr<httplib::Client> cli = client();
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
    if (!ok) {
      ch->failed = true;
      ch->error = httplib::to_string(err);
    }
    ch->finished = true;
    ch->cv.notify_all();
  });
  auto stop = [ch, cli, reader] {
    ch->cancel = true;
    std::unique_lock<std::mutex> l(ch->mu);
    // stop() wakes a read that waits for the engine, but does nothing to a
    // call still connecting: again until the call ends.
    while (!ch->finished) {
      l.unlock();
      cli->stop();
      l.lock();
      ch->cv.wait_for(l, std::chrono::milliseconds(50),
                      [&] { return ch->finished; });
    }
    l.unlock();
    if (reader->joinable()) reader->join();
  };
  return {std::move(ch), std::move(stop)};
}

void openai_front::impl::went_away(const httplib::Request& req,
                                   httplib::Response& res) {
  ++client_gone_count;
  KVMESH_DEBUG(
      "front on port %d: request %s (X-Request-Id %s): the client went "
      "away; the engine's request is cut",
      port, req.get_header_value(request_id_header).c_str(),
      req.get_header_value("X-Request-Id").c_str());
  res.status = 499;  // nginx's "client closed request": nobody reads it
}

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
  // Its client is watched until the answer is out: one that goes (a
  // gateway whose client hung up) cuts the engine's call, whose closed
  // connection makes vLLM abort the request, and ends it for the WORKER.
  // One gone already (it hung up while the gateway routed) is not passed
  // on at all.
  const int peer = client_socket(req);
  if (client_gone(peer)) {
    went_away(req, res);
    return;
  }
  const bool streamed = parsed && parsed->stream;
  engine_call call = call_engine(req);
  channel& ch = *call.ch;
  std::unique_lock<std::mutex> lock(ch.mu);
  // A stream passes through once its header came, any other answer once
  // it came whole.
  const bool stayed = wait_for_engine(
      lock, ch, peer, [&] { return ch.finished || (streamed && ch.headers); });
  if (!stayed) {
    lock.unlock();
    call.stop();
    went_away(req, res);
    return;
  }
  if (!ch.headers || (!streamed && ch.failed)) {
    const std::string why = ch.error;
    lock.unlock();
    call.stop();
    ++unreachable;
    engine_unreachable(res,
                       "engine at " + opt.engine_url + " unreachable: " + why);
    return;
  }
  if (!streamed || ch.status != 200) {
    // An error answer (a bad request, say) is passed on whole, with its
    // status: nothing streams.
    if (!wait_for_engine(lock, ch, peer, [&] { return ch.finished; })) {
      lock.unlock();
      call.stop();
      went_away(req, res);
      return;
    }
    std::string body;
    for (auto& c : ch.chunks)
      body += c;
    const int status = ch.status;
    const std::string type = ch.content_type;
    lock.unlock();
    call.stop();
    // Without streaming the first token is seen with the last.
    if (t && !streamed) t->first();
    res.status = status;
    res.set_content(body, type.empty() ? "application/json" : type);
    return;
  }
  const std::string type =
      ch.content_type.empty() ? "text/event-stream" : ch.content_type;
  lock.unlock();
  res.status = 200;
  impl* self = this;
  auto chp = call.ch;
  res.set_chunked_content_provider(
      type,
      [chp, t, self, peer](size_t, httplib::DataSink& sink) {
        channel& ch = *chp;
        std::unique_lock<std::mutex> l(ch.mu);
        // Woken by the reader; a stopping front and the client are looked
        // at now and then.
        while (!ch.cv.wait_for(l, client_check, [&] {
          return !ch.chunks.empty() || ch.finished;
        })) {
          if (self->stopping) return false;
          if (client_gone(peer)) {
            ch.cancel = true;
            ++self->client_gone_count;
            return false;
          }
        }
        while (!ch.chunks.empty()) {
          std::string c = std::move(ch.chunks.front());
          ch.chunks.pop_front();
          l.unlock();
          // The engine sends nothing until its first token is out.
          if (t) t->first();
          if (!sink.write(c.data(), c.size())) {
            ch.cancel = true;  // the client went away
            ++self->client_gone_count;
            return false;
          }
          l.lock();
        }
        if (ch.finished) sink.done();
        return true;
      },
      [stop = call.stop, t](bool) {
        stop();
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
                  {"unparsed", unparsed.load()},
                  {"client_gone", client_gone_count.load()}};
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
