// The real-engine node agent: fronts bound first (so each worker knows its
// endpoint), workers served on NATS, then the KV event subscriber and the
// poller of the engine's health and metrics.
#include "cluster/engine_agent.hpp"

#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "actors/engine_worker.hpp"
#include "actors/router.hpp"
#include "cluster/kv_subscriber.hpp"
#include "cluster/openai_front.hpp"
#include "core/log.hpp"
#include "engines/metrics.hpp"
#include "engines/openai.hpp"

namespace kvmesh {

struct engine_agent::impl {
  engine_agent_options opt;
  std::unique_ptr<agent_node> node;
  std::vector<engine_worker_actor> workers;
  std::vector<std::string> endpoints;
  std::vector<std::unique_ptr<openai_front>> fronts;
  std::unique_ptr<kv_subscriber> subscriber;
  std::thread poller;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;

  void poll_loop();
  std::string subscriber_json() const;
  void stop() {
    {
      std::lock_guard<std::mutex> g(mu);
      stopping = true;
    }
    cv.notify_all();
    if (poller.joinable()) poller.join();
    subscriber.reset();
    fronts.clear();
    node.reset();
  }
};

namespace {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0')
    return "localhost";
  return buf;
}

bool loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" ||
         host.rfind("127.", 0) == 0;
}

// The host of http://HOST[:PORT] (brackets kept for IPv6).
std::string host_of_url(const std::string& url) {
  std::string rest = url.substr(std::string("http://").size());
  if (!rest.empty() && rest[0] == '[')
    return rest.substr(0, rest.find(']') + 1);
  return rest.substr(0, rest.find(':'));
}

}  // namespace

expected<std::string> advertised_engine_url(const std::string& engine_url,
                                            const std::string& flag,
                                            const std::string& front_host) {
  if (flag == "off" || engine_url.empty()) return std::string();
  if (!flag.empty()) {
    if (auto st = check_engine_url(flag); !st) return st.err();
    return flag;
  }
  if (loopback_host(host_of_url(engine_url)) && !loopback_host(front_host))
    return std::string();
  return engine_url;
}

void engine_agent::impl::poll_loop() {
  uint32_t failures = 0;
  std::vector<served_model> models;
  bool warned_models = false;
  while (true) {
    httplib::Client cli(opt.engine_url);
    cli.set_connection_timeout(std::chrono::seconds(2));
    cli.set_read_timeout(std::chrono::seconds(2));
    auto health = cli.Get("/health");
    const bool ok = health && health->status == 200;
    failures = ok ? 0 : failures + 1;
    std::vector<prom_sample> samples;
    if (ok)
      if (auto r = cli.Get("/metrics"); r && r->status == 200)
        samples = parse_prometheus(r->body);
    // The models it serves, asked each poll: LoRA adapters load and unload
    // at run time. A failed ask keeps the last list (no flapping pools).
    if (ok)
      if (auto r = cli.Get("/v1/models"); r && r->status == 200) {
        if (auto m = parse_models_list(r->body)) {
          models = std::move(*m);
        } else if (!warned_models) {
          warned_models = true;
          KVMESH_WARN("engine %s: %s (logged once)", opt.engine_url.c_str(),
                      m.err().message.c_str());
        }
      }
    for (uint32_t rank = 0; rank < workers.size(); ++rank) {
      engine_metrics m = engine_metrics_of(samples, static_cast<int>(rank),
                                           opt.state.block_tokens);
      // One failed look is a hiccup; unhealthy_after in a row is an
      // engine that stopped answering.
      m.answering = failures < opt.unhealthy_after;
      m.models = models;
      caf::anon_send(workers[rank], put_atom::value, m);
    }
    std::unique_lock<std::mutex> lock(mu);
    if (cv.wait_for(lock, opt.poll, [&] { return stopping; })) return;
  }
}

std::string engine_agent::impl::subscriber_json() const {
  if (!subscriber) return "{}";
  const auto c = subscriber->counters();
  nlohmann::ordered_json faults;
  for (size_t i = 0; i < kv_fault_count; ++i)
    faults[to_string(static_cast<kv_fault>(i))] = c.faults.n[i];
  return nlohmann::ordered_json{{"kv_events",
                                 {{"messages", c.messages},
                                  {"gaps", c.gaps},
                                  {"replays", c.replays},
                                  {"resyncs", c.resyncs},
                                  {"restarts", c.restarts},
                                  {"faults", faults}}}}
      .dump();
}

engine_agent::engine_agent(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

engine_agent::~engine_agent() {
  impl_->stop();
}

std::string engine_agent::endpoint(uint32_t rank) const {
  return rank < impl_->endpoints.size() ? impl_->endpoints[rank] : "";
}

const std::vector<engine_worker_actor>& engine_agent::workers() const {
  return impl_->workers;
}

kv_subscriber_counters engine_agent::kv_counters() const {
  return impl_->subscriber ? impl_->subscriber->counters()
                           : kv_subscriber_counters{};
}

expected<std::unique_ptr<engine_agent>> engine_agent::start(
    caf::actor_system& sys, nats_bus& bus, const engine_agent_options& opt) {
  if (opt.engine != "vllm" && opt.engine != "sglang")
    return make_error(ec::invalid_argument,
                      "engine '" + opt.engine + "' (want vllm or sglang)");
  if (opt.dp_size == 0 || opt.dp_size > 1024)
    return make_error(ec::invalid_argument,
                      "data-parallel size must be 1 to 1024");
  if (uint64_t{opt.first_id} + opt.dp_size > max_worker_id)
    return make_error(ec::invalid_argument,
                      "worker ids " + std::to_string(opt.first_id) + ".." +
                          std::to_string(opt.first_id + opt.dp_size - 1) +
                          " exceed " + std::to_string(max_worker_id - 1));
  if (auto s = engine_state::make(opt.state); !s) return s.err();
  if (!opt.engine_url.empty())
    if (auto st = check_engine_url(opt.engine_url); !st) return st.err();
  if (opt.unhealthy_after == 0)
    return make_error(ec::invalid_argument, "unhealthy_after must be >= 1");
  kv_subscriber_options so;
  so.topic = opt.kv_topic;
  so.replay_timeout = opt.replay_timeout;
  for (uint32_t r = 0; r < opt.dp_size; ++r) {
    auto ep = endpoint_of_rank(opt.kv_events, r);
    if (!ep) return ep.err();
    so.endpoints.push_back(*ep);
    if (!opt.kv_replay.empty()) {
      auto rp = endpoint_of_rank(opt.kv_replay, r);
      if (!rp) return rp.err();
      so.replay.push_back(*rp);
    }
  }
  auto p = std::make_unique<impl>();
  p->opt = opt;
  std::string advertise = opt.advertise_host;
  if (advertise.empty())
    advertise = (opt.front_host.empty() || opt.front_host == "0.0.0.0" ||
                 opt.front_host == "::")
                    ? host_name()
                    : opt.front_host;
  auto engine =
      advertised_engine_url(opt.engine_url, opt.engine_advertise, advertise);
  if (!engine) return engine.err();
  if (engine->empty() && !opt.engine_url.empty() &&
      opt.engine_advertise != "off")
    KVMESH_INFO(
        "agent %s: gateways reach the engine through the fronts: its URL %s "
        "is this host's loopback, the fronts are named by %s "
        "(--engine-advertise names the engine as gateways reach it)",
        opt.name.c_str(), opt.engine_url.c_str(), advertise.c_str());
  p->opt.state.engine = *engine;
  // The fronts first: a worker names its front's port in its awards.
  for (uint32_t r = 0; r < opt.dp_size; ++r) {
    if (opt.engine_url.empty()) {
      p->endpoints.emplace_back();
      continue;
    }
    openai_front_options fo;
    fo.host = opt.front_host;
    fo.port = opt.front_port == 0 ? 0 : opt.front_port + static_cast<int>(r);
    fo.engine_url = opt.engine_url;
    fo.dp_rank = opt.dp_size > 1 ? static_cast<int>(r) : -1;
    fo.block_tokens = opt.state.block_tokens;
    fo.threads = opt.front_threads;
    impl* raw = p.get();
    fo.extra_stats = [raw] { return raw->subscriber_json(); };
    auto f = openai_front::bind(sys, fo);
    if (!f) return f.err();
    const bool v6 = advertise.find(':') != std::string::npos;
    p->endpoints.push_back("http://" +
                           (v6 ? "[" + advertise + "]" : advertise) + ":" +
                           std::to_string((*f)->port()));
    p->fronts.push_back(std::move(*f));
  }
  agent_options ao;
  ao.mesh = opt.mesh;
  ao.name = opt.name;
  for (uint32_t r = 0; r < opt.dp_size; ++r)
    ao.external.push_back(opt.first_id + r);
  impl* raw = p.get();
  ao.spawn_external =
      [&sys, raw](uint32_t id,
                  listener_actor events) -> expected<engine_worker_actor> {
    const uint32_t rank = id - raw->opt.first_id;
    engine_worker_options wo;
    wo.state = raw->opt.state;
    wo.state.ledger.id = id;
    wo.state.endpoint = raw->endpoints[rank];
    wo.state.engine_rank = raw->opt.dp_size > 1 && !wo.state.engine.empty()
                               ? static_cast<int32_t>(rank)
                               : -1;
    wo.listener = std::move(events);
    if (rank < raw->opt.meters.size()) wo.meters = raw->opt.meters[rank];
    auto w = spawn_engine_worker(sys, wo);
    if (!w) return w.err();
    raw->workers.push_back(*w);
    return *w;
  };
  auto node = agent_node::start(sys, bus, ao);
  if (!node) return node.err();
  p->node = std::move(*node);
  for (size_t r = 0; r < p->fronts.size(); ++r)
    p->fronts[r]->serve(p->workers[r]);
  so.workers = p->workers;
  auto sub = kv_subscriber::start(so);
  if (!sub) {
    p->stop();
    return sub.err();
  }
  p->subscriber = std::move(*sub);
  if (!opt.engine_url.empty())
    p->poller = std::thread([raw] { raw->poll_loop(); });
  return std::unique_ptr<engine_agent>(new engine_agent(std::move(p)));
}

}  // namespace kvmesh
