// The gateway's mesh over NATS: heartbeats kept per worker, decisions
// matched to their routes by the reply subject's number.
#include "gateway/nats_mesh.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "core/log.hpp"
#include "gateway/nats_loop.hpp"
#include "messages/codec.hpp"
#include "messages/member_checks.hpp"

namespace kvmesh::gateway {

namespace {

using steady = std::chrono::steady_clock;

// How long a progress report may wait for others (or a route request) to
// share its write: one write per report would wake nats-server and the
// agent once per report. The worker learns of a request's arrival, first
// token or end at most this much later, a fraction of a prefill's time.
constexpr std::chrono::milliseconds progress_hold{5};

// A decision's failure as the error the gateway maps to its HTTP status
// (gateway/mesh.hpp).
error failure_error(const decision& d) {
  switch (d.failure) {
    case route_failure::unknown_model:
      return make_error(ec::not_found, d.error);
    case route_failure::overloaded:
      return make_error(ec::capacity_exceeded, d.error);
    case route_failure::no_workers:
    case route_failure::refused:
    case route_failure::other:
      break;
  }
  return make_error(ec::conflict, d.error);
}

// A router's decision as the route's answer; `bad` counts the ones that do
// not decode.
expected<route_answer> answer_of(const uint8_t* data, size_t size,
                                 std::atomic<uint64_t>& bad) {
  auto d = decode<decision>(data, size);
  if (!d) {
    bad.fetch_add(1);
    return make_error(
        ec::parse_error,
        "the router's decision does not decode: " + d.err().message);
  }
  if (!d->error.empty()) return failure_error(*d);
  route_answer a;
  a.worker = d->worker;
  a.request = d->request;
  a.endpoint = std::move(d->endpoint);
  return a;
}

// The id ending a decision's subject after `inbox`, or false.
bool id_after(std::string_view subject, const std::string& inbox,
              uint64_t& id) {
  if (subject.size() <= inbox.size()) return false;
  id = 0;
  for (size_t i = inbox.size(); i < subject.size(); ++i) {
    const char c = subject[i];
    if (c < '0' || c > '9') return false;
    id = id * 10 + static_cast<uint64_t>(c - '0');
  }
  return true;
}

error late_error(std::chrono::milliseconds timeout) {
  return make_error(ec::timeout, "no decision from a router in " +
                                     std::to_string(timeout.count()) + " ms");
}

}  // namespace

using asio_io = boost::asio::io_context;

struct nats_mesh::impl {
  nats_bus* bus = nullptr;
  nats_mesh_options opt;
  std::string inbox;  // _INBOX.gateway.<name>.
  uint64_t beats_sub = 0;
  uint64_t inbox_sub = 0;

  struct seen {
    std::string agent;
    std::string endpoint;
    std::string engine;
    int32_t engine_rank = -1;
    std::vector<served_model> models;
    bool out = false;  // draining or unhealthy: takes no awards
    steady::time_point at;
  };
  struct waiting {
    steady::time_point deadline;
    std::function<void(expected<route_answer>)> done;
  };
  mutable std::mutex mu;
  std::unordered_map<uint32_t, seen> workers;
  std::map<uint64_t, waiting> pending;
  std::atomic<uint64_t> next_id{0};
  uint64_t bad_beats = 0;
  std::atomic<uint64_t> bad_decisions{0};
  std::atomic<uint32_t> threads_bound{0};
  // models()'s last answer, when it was made, and whether a heartbeat
  // changed a pool since (guarded by mu).
  pool_list pools;
  steady::time_point pools_at;
  bool pools_changed = true;
  struct channel;
  bool stopping = false;
  std::condition_variable cv;
  std::thread sweeper;

  void on_beat(const nats_message& m) {
    auto s = decode<worker_status>(m.payload);
    const std::string agent = agent_of(m.subject, opt.subj.worker_beat_root());
    std::lock_guard<std::mutex> g(mu);
    // The routers count and log what they refuse; here it is only left out.
    if (!s || s->agent != agent ||
        check_worker_beat(*s) != member_fault::none) {
      ++bad_beats;
      return;
    }
    auto it = workers.find(s->worker);
    if (it == workers.end()) {
      if (workers.size() >= opt.max_workers) return;
      it = workers.emplace(s->worker, seen{}).first;
    } else if (it->second.agent != s->agent &&
               steady::now() - it->second.at < opt.stale) {
      return;  // a live worker's id is its agent's (as the directory rules)
    }
    auto& w = it->second;
    const bool out = s->draining || s->unhealthy || s->gone;
    if (w.endpoint != s->endpoint || w.out != out || w.agent != s->agent ||
        w.models != s->models || steady::now() - w.at > opt.stale)
      pools_changed = true;
    w.agent = std::move(s->agent);
    w.endpoint = std::move(s->endpoint);
    w.engine = std::move(s->engine);
    w.engine_rank = s->engine_rank;
    w.models = std::move(s->models);
    w.out = out;
    w.at = steady::now();
  }

  // The winner's agent and engine, from its heartbeats.
  void add_engine(expected<route_answer>& a) {
    if (!a) return;
    std::lock_guard<std::mutex> g(mu);
    auto it = workers.find(a->worker);
    if (it == workers.end()) return;
    a->agent = it->second.agent;
    a->engine = it->second.engine;
    a->engine_rank = it->second.engine_rank;
  }

  void on_decision(const nats_message& m) {
    uint64_t id = 0;
    if (!id_after(m.subject, inbox, id)) return;
    std::function<void(expected<route_answer>)> done;
    {
      std::lock_guard<std::mutex> g(mu);
      auto it = pending.find(id);
      if (it == pending.end()) return;  // timed out already
      done = std::move(it->second.done);
      pending.erase(it);
    }
    auto a = answer_of(m.payload.data(), m.payload.size(), bad_decisions);
    add_engine(a);
    done(std::move(a));
  }

  // Answers the routes whose decision did not come in time.
  void sweep_loop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      cv.wait_for(lock, std::chrono::milliseconds(20));
      const auto now = steady::now();
      std::vector<std::function<void(expected<route_answer>)>> late;
      for (auto it = pending.begin(); it != pending.end();) {
        if (it->second.deadline > now) {
          ++it;
          continue;
        }
        late.push_back(std::move(it->second.done));
        it = pending.erase(it);
      }
      if (late.empty()) continue;
      lock.unlock();
      for (auto& f : late)
        f(late_error(opt.timeout));
      lock.lock();
    }
  }
};

// One server thread's routes: a connection of its own on the thread's
// io_context, its pending routes and their deadline; used on that thread
// only, so nothing here is locked.
struct nats_mesh::impl::channel {
  channel(impl& o, asio_io& io) : owner(&o), timer(io), lease_timer(io) {
    std::random_device rd;
    while (reporter == 0)
      reporter = (uint64_t{rd()} << 32) ^ rd();
  }
  ~channel() {
    timer.cancel();
    lease_timer.cancel();
    auto left = std::move(pending);
    pending.clear();
    for (auto& [id, w] : left)
      w.done(make_error(ec::timeout, "the gateway is stopping"));
    nats.reset();
  }
  impl* owner;
  std::unique_ptr<nats_loop> nats;
  std::string inbox;  // _INBOX.gateway.<name>.<thread>.
  std::map<uint64_t, waiting> pending;
  boost::asio::steady_timer timer;
  bool timer_armed = false;
  // The requests this thread sent to engines itself, per agent, and the
  // reporter its reports carry (request_progress).
  uint64_t reporter = 0;
  struct agent_flight {
    std::string subject;  // the agent's progress subject
    std::unordered_set<uint64_t> requests;
  };
  std::unordered_map<std::string, agent_flight> agents;
  boost::asio::steady_timer lease_timer;
  bool lease_armed = false;
  uint64_t unsent = 0;  // reports NATS would not take (leases mend them)
  std::weak_ptr<channel> self;

  void send(const std::string& subject, const request_progress& p) {
    auto st = nats->publish(subject, encode(p), "", progress_hold);
    if (st) return;
    // The agent puts it right from the next lease that goes, or ends the
    // reporter's requests once none came for progress_lease_timeout.
    if (unsent++ % 1000 == 0)
      KVMESH_WARN(
          "gateway: a progress report to %s was not sent (%s); %llu so far "
          "on this thread",
          subject.c_str(), st.err().message.c_str(),
          static_cast<unsigned long long>(unsent));
  }

  void report(const std::string& agent, uint64_t request, uint32_t worker,
              progress_event e) {
    auto it = agents.find(agent);
    if (it == agents.end()) {
      it = agents.emplace(agent, agent_flight{}).first;
      it->second.subject = owner->opt.subj.agent(agent, "progress");
    }
    if (e == progress_event::arrived) it->second.requests.insert(request);
    if (e == progress_event::ended) it->second.requests.erase(request);
    request_progress p;
    p.event = e;
    p.request = request;
    p.worker = worker;
    p.reporter = reporter;
    send(it->second.subject, p);
    arm_lease();
  }

  // Every period, each agent that had requests of this thread hears all
  // of them (the last lease of one an empty list): what a lost report
  // left wrong is put right there.
  void arm_lease() {
    if (lease_armed || agents.empty()) return;
    lease_armed = true;
    lease_timer.expires_after(progress_lease_period);
    lease_timer.async_wait([this](const boost::system::error_code& ec) {
      lease_armed = false;
      if (ec) return;
      request_progress p;
      p.event = progress_event::lease;
      p.reporter = reporter;
      for (auto it = agents.begin(); it != agents.end();) {
        p.in_flight.assign(it->second.requests.begin(),
                           it->second.requests.end());
        send(it->second.subject, p);
        if (it->second.requests.empty())
          it = agents.erase(it);
        else
          ++it;
      }
      arm_lease();
    });
  }

  void on_decision(std::string_view subject, const uint8_t* data, size_t size) {
    uint64_t id = 0;
    if (!id_after(subject, inbox, id)) return;
    auto it = pending.find(id);
    if (it == pending.end()) return;  // timed out already
    auto done = std::move(it->second.done);
    pending.erase(it);
    auto a = answer_of(data, size, owner->bad_decisions);
    owner->add_engine(a);
    done(std::move(a));
  }

  // Ids grow and every route has the same timeout: the first pending
  // route is the first due.
  void arm() {
    if (timer_armed || pending.empty()) return;
    timer_armed = true;
    timer.expires_at(pending.begin()->second.deadline);
    timer.async_wait([this](const boost::system::error_code& ec) {
      timer_armed = false;
      if (ec) return;
      const auto now = steady::now();
      while (!pending.empty() && pending.begin()->second.deadline <= now) {
        auto done = std::move(pending.begin()->second.done);
        pending.erase(pending.begin());
        done(late_error(owner->opt.timeout));
      }
      arm();
    });
  }

  void route(const route_request_msg& r,
             std::function<void(expected<route_answer>)> done) {
    auto it = pending
                  .emplace(r.id, waiting{steady::now() + owner->opt.timeout,
                                         std::move(done)})
                  .first;
    auto st = nats->publish(owner->opt.subj.route(), encode(r),
                            inbox + std::to_string(r.id));
    if (!st) {
      auto failed = std::move(it->second.done);
      pending.erase(it);
      failed(make_error(ec::io_error,
                        "cannot send the route request: " + st.err().message));
      return;
    }
    arm();
  }
};

namespace {
// The channel of the server thread this runs on, if bound.
thread_local nats_mesh::impl::channel* current_channel = nullptr;

// A request at its engine, told to its worker's agent on its thread's
// reporter; once the channel is gone (the gateway stopping) nothing is
// told, and the agent ends the reporter's requests when its lease expires.
class channel_visit final : public engine_visit {
 public:
  channel_visit(std::weak_ptr<nats_mesh::impl::channel> c,
                const route_answer& won)
      : c_(std::move(c)),
        agent_(won.agent),
        request_(won.request),
        worker_(won.worker) {
    tell(progress_event::arrived);
  }
  ~channel_visit() override { tell(progress_event::ended); }
  void first() override {
    if (first_) return;
    first_ = true;
    tell(progress_event::first);
  }

 private:
  void tell(progress_event e) {
    if (auto c = c_.lock()) c->report(agent_, request_, worker_, e);
  }
  std::weak_ptr<nats_mesh::impl::channel> c_;
  std::string agent_;
  uint64_t request_;
  uint32_t worker_;
  bool first_ = false;
};
}  // namespace

std::unique_ptr<engine_visit> nats_mesh::visit(const route_answer& won) {
  impl::channel* c = current_channel;
  if (won.engine.empty() || won.agent.empty() || !c ||
      c->owner != impl_.get() || !c->nats->connected())
    return nullptr;
  return std::make_unique<channel_visit>(c->self, won);
}

std::shared_ptr<void> nats_mesh::bind_thread(boost::asio::io_context& io) {
  if (!impl_->opt.thread_connection) return nullptr;
  const uint32_t k = impl_->threads_bound.fetch_add(1);
  nats_options o = *impl_->opt.thread_connection;
  o.name += "-" + std::to_string(k);
  auto c = std::make_shared<impl::channel>(*impl_, io);
  auto nats = nats_loop::connect(o, io);
  if (!nats) {
    KVMESH_WARN(
        "gateway thread %u routes over the shared NATS connection: its own "
        "cannot be opened: %s",
        k, nats.err().message.c_str());
    return nullptr;
  }
  c->nats = std::move(*nats);
  c->self = c;
  c->inbox = impl_->inbox + std::to_string(k) + ".";
  impl::channel* raw = c.get();
  auto sub = c->nats->subscribe(
      c->inbox + "*",
      [raw](std::string_view subject, const uint8_t* data, size_t size) {
        raw->on_decision(subject, data, size);
      });
  if (!sub) {
    KVMESH_WARN("gateway thread %u routes over the shared NATS connection: %s",
                k, sub.err().message.c_str());
    return nullptr;
  }
  current_channel = raw;
  return c;
}

expected<std::unique_ptr<nats_mesh>> nats_mesh::start(
    nats_bus& bus, const nats_mesh_options& o) {
  if (auto st = check_name("gateway name", o.name); !st) return st.err();
  auto p = std::make_shared<impl>();
  p->bus = &bus;
  p->opt = o;
  p->inbox = "_INBOX.gateway." + o.name + ".";
  std::random_device rd;
  // Route ids are the mesh's request ids: a random start keeps two
  // gateways' apart; 63 bits for clients with signed integers.
  p->next_id.store(((uint64_t{rd()} << 32) ^ rd()) & 0x3fffffffffffffffull);
  std::weak_ptr<impl> weak = p;
  auto beats = bus.subscribe(o.subj.worker_beats(), "", [weak](nats_message m) {
    if (auto q = weak.lock()) q->on_beat(m);
  });
  if (!beats) return beats.err();
  p->beats_sub = *beats;
  auto inbox = bus.subscribe(p->inbox + "*", "", [weak](nats_message m) {
    if (auto q = weak.lock()) q->on_decision(m);
  });
  if (!inbox) {
    (void)bus.unsubscribe(p->beats_sub);
    return inbox.err();
  }
  p->inbox_sub = *inbox;
  p->sweeper = std::thread([q = p.get()] { q->sweep_loop(); });
  return std::unique_ptr<nats_mesh>(new nats_mesh(std::move(p)));
}

nats_mesh::nats_mesh(std::shared_ptr<impl> p) : impl_(std::move(p)) {}

nats_mesh::~nats_mesh() {
  (void)impl_->bus->unsubscribe(impl_->inbox_sub);
  (void)impl_->bus->unsubscribe(impl_->beats_sub);
  std::map<uint64_t, impl::waiting> left;
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    impl_->stopping = true;
    left.swap(impl_->pending);
  }
  impl_->cv.notify_all();
  impl_->sweeper.join();
  for (auto& [id, w] : left)
    w.done(make_error(ec::timeout, "the gateway is stopping"));
}

pool_list nats_mesh::models() const {
  const auto now = steady::now();
  std::lock_guard<std::mutex> g(impl_->mu);
  if (impl_->pools && !impl_->pools_changed &&
      now - impl_->pools_at < std::chrono::milliseconds(250))
    return impl_->pools;
  std::map<std::string, pool_model> by_name;
  for (const auto& [id, w] : impl_->workers) {
    if (w.out || now - w.at > impl_->opt.stale) continue;
    for (const auto& m : w.models) {
      auto& p = by_name[m.name];
      p.name = m.name;
      p.parent = m.parent;
      p.lora = !m.parent.empty();
      if (!w.endpoint.empty() &&
          std::find(p.endpoints.begin(), p.endpoints.end(), w.endpoint) ==
              p.endpoints.end())
        p.endpoints.push_back(w.endpoint);
    }
  }
  auto out = std::make_shared<std::vector<pool_model>>();
  out->reserve(by_name.size());
  for (auto& [name, p] : by_name)
    out->push_back(std::move(p));
  impl_->pools = std::move(out);
  impl_->pools_at = now;
  impl_->pools_changed = false;
  return impl_->pools;
}

void nats_mesh::route(route_ask ask,
                      std::function<void(expected<route_answer>)> done) {
  route_request_msg r;
  r.blocks = std::move(ask.blocks);
  r.input_tokens = ask.input_tokens;
  r.output_tokens = ask.output_tokens;
  r.block_tokens = ask.block_tokens;
  // The pool is the adapter's for a LoRA request: workers announce each
  // loaded adapter under its own name.
  r.model = ask.lora.empty() ? std::move(ask.model) : std::move(ask.lora);
  r.client_id = std::move(ask.client_id);
  r.exclude = std::move(ask.exclude_workers);
  r.id = impl_->next_id.fetch_add(1);
  if (impl::channel* c = current_channel;
      c && c->owner == impl_.get() && c->nats->connected()) {
    c->route(r, std::move(done));
    return;
  }
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    impl_->pending.emplace(
        r.id, impl::waiting{steady::now() + impl_->opt.timeout, done});
  }
  auto st = impl_->bus->publish(impl_->opt.subj.route(), encode(r),
                                impl_->inbox + std::to_string(r.id));
  if (st) return;
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    if (impl_->pending.erase(r.id) == 0) return;  // answered meanwhile
  }
  done(make_error(ec::io_error,
                  "cannot send the route request: " + st.err().message));
}

bool nats_mesh::ready() const {
  if (!impl_->bus->connected()) return false;
  const auto now = steady::now();
  std::lock_guard<std::mutex> g(impl_->mu);
  for (const auto& [id, w] : impl_->workers)
    if (!w.out && now - w.at <= impl_->opt.stale) return true;
  return false;
}

}  // namespace kvmesh::gateway
