// The series of a mesh process: registered per role, counted by the
// actors' meters, collected from the actors' status at each scrape.
#include "cluster/mesh_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <tuple>

#include "cluster/bridge.hpp"
#include "core/log.hpp"
#include "engines/kv_events.hpp"
#include "engines/kv_mirror.hpp"
#include "messages/codec.hpp"
#include "messages/json.hpp"
#include "messages/member_checks.hpp"
#include "metrics/process_sample.hpp"

namespace kvmesh {

namespace {

using steady = std::chrono::steady_clock;
using metrics::counter;
using metrics::family;
using metrics::gauge;
using metrics::histogram;

const char* const tier_names[3] = {"gpu", "host", "disk"};

// Registers series and remembers the first error, so that a role's list
// reads as a list; its handles are only used when result() is ok.
class builder {
 public:
  explicit builder(metrics::registry& r) : reg_(r) {}

  family<counter>* counters(const std::string& name, const std::string& help,
                            std::vector<std::string> labels = {}) {
    return keep(reg_.add_counter(name, help, std::move(labels)));
  }
  family<gauge>* gauges(const std::string& name, const std::string& help,
                        std::vector<std::string> labels = {}) {
    return keep(reg_.add_gauge(name, help, std::move(labels)));
  }
  family<histogram>* histograms(const std::string& name,
                                const std::string& help,
                                std::vector<double> bounds) {
    return keep(reg_.add_histogram(name, help, std::move(bounds)));
  }
  // The series of `values` in f (nullptr after an error).
  template <class T>
  T* at(family<T>* f, const std::vector<std::string>& values = {}) {
    return f ? keep(f->with(values)) : nullptr;
  }
  status result() const {
    if (err_) return *err_;
    return ok;
  }

 private:
  template <class T>
  T* keep(expected<T*> x) {
    if (x) return *x;
    if (!err_) err_ = x.err();
    return nullptr;
  }
  metrics::registry& reg_;
  std::optional<error> err_;
};

struct worker_series {
  uint32_t id = 0;
  gauge* queued = nullptr;
  gauge* reserved = nullptr;
  gauge* active = nullptr;
  gauge* capacity = nullptr;
  gauge* gpu_capacity = nullptr;  // the GPU tier's, as its status says
  gauge* cached[3] = {};
  gauge* waiting = nullptr;
  gauge* running = nullptr;
  gauge* draining = nullptr;
  gauge* speed = nullptr;
  gauge* last_price = nullptr;
  counter* completed = nullptr;
};

struct router_series {
  counter* decisions = nullptr;
  // By cause, in router_status's order: refused, unanswered, no_bids,
  // saturated, no_live_worker.
  counter* reauctions[5] = {};
  counter* rounds = nullptr;
  counter* bids = nullptr;
  counter* runner_ups = nullptr;
  gauge* held = nullptr;
  gauge* workers[4] = {};  // live, draining, unhealthy, gone
};

struct shard_series {
  gauge* blocks = nullptr;
  gauge* entries = nullptr;
  gauge* bytes = nullptr;
  counter* events = nullptr;
  counter* errors = nullptr;
};

// A counter that mirrors one field of a statistics struct.
template <class Stats>
struct field_counter {
  const char* name;
  const char* help;
  uint64_t Stats::*field;
};

// Per rank, one counter per field of engine_worker_stats.
constexpr field_counter<engine_worker_stats> rank_counters[] = {
    {"kvmesh_worker_requests_bypassed_total",
     "Requests that reached the worker's front without a route request id "
     "(sent around the routers).",
     &engine_worker_stats::bypassed},
    {"kvmesh_worker_requests_abandoned_total",
     "Awarded requests whose client never called the worker's front within "
     "agent.award_ttl_ms.",
     &engine_worker_stats::abandoned},
    {"kvmesh_worker_requests_estimated_total",
     "Requests the front sized from their text's length, for want of token "
     "ids.",
     &engine_worker_stats::approximate},
    {"kvmesh_worker_kv_batches_total",
     "Batches of the engine's KV events applied.",
     &engine_worker_stats::kv_batches},
    {"kvmesh_worker_cache_resets_total",
     "Times the worker forgot the engine's cache: events lost beyond replay, "
     "or the engine started over.",
     &engine_worker_stats::resyncs},
    {"kvmesh_worker_requests_unreported_total",
     "Requests a gateway sent to the engine whose end it did not report: "
     "its lease no longer listed them, or its reporter fell silent.",
     &engine_worker_stats::unreported},
    {"kvmesh_worker_progress_stray_total",
     "Gateways' progress reports of requests that were not awaiting arrival "
     "at the worker (unknown, withdrawn or arrived already).",
     &engine_worker_stats::stray_progress},
};
constexpr size_t rank_counter_count = std::size(rank_counters);

// For the agent, one counter per field of kv_subscriber_counters.
constexpr field_counter<kv_subscriber_counters> feed_counters[] = {
    {"kvmesh_agent_kv_event_messages_total",
     "Messages of the engine's KV event stream applied (live or replayed).",
     &kv_subscriber_counters::messages},
    {"kvmesh_agent_kv_event_gaps_total",
     "Sequence numbers of the KV event stream found missing.",
     &kv_subscriber_counters::gaps},
    {"kvmesh_agent_kv_event_replays_total",
     "Gaps of the KV event stream closed by the engine's replay.",
     &kv_subscriber_counters::replays},
    {"kvmesh_agent_kv_event_resyncs_total",
     "Gaps of the KV event stream no replay closed: the rank's cache "
     "forgotten.",
     &kv_subscriber_counters::resyncs},
    {"kvmesh_agent_kv_event_restarts_total",
     "KV event publishers that started over (an engine restart).",
     &kv_subscriber_counters::restarts},
};
constexpr size_t feed_counter_count = std::size(feed_counters);

// What only an agent beside a real engine counts: per worker, what its
// fronts and the engine's KV events taught it; for the agent, its KV event
// subscriber's feed.
struct engine_series {
  struct rank {
    counter* counters[rank_counter_count] = {};
    counter* mirror_faults[mirror_fault_count] = {};
    gauge* engine_up = nullptr;
  };
  std::vector<rank> ranks;
  counter* feed[feed_counter_count] = {};
  counter* faults[kv_fault_count] = {};
};

// Asks `h` until `deadline` (ask_until); nothing when it did not answer,
// and a line on stderr naming `what`.
template <class T, class Handle, class... Ts>
std::optional<T> ask(caf::scoped_actor& self, const Handle& h,
                     steady::time_point deadline, const std::string& what,
                     Ts... xs) {
  std::string why;
  auto out = ask_until<T>(self, h, deadline, &why, xs...);
  if (!out)
    KVMESH_LOG(
        "metrics scrape misses %s's status (%s): its series keep their "
        "last values",
        what.c_str(), why.c_str());
  return out;
}

}  // namespace

struct process_metrics::impl {
  metrics::registry reg;
  std::string role;
  counter* nats_reconnects = nullptr;
  counter* nats_slow = nullptr;
  counter* nats_errors = nullptr;
  counter* nats_denied = nullptr;
  counter* nats_refused_replies = nullptr;
  counter* nats_refused[feed_kind_count] = {};
  counter* nats_in = nullptr;
  counter* nats_out = nullptr;
  counter* decode[msg_kind_count + 1] = {};  // the last: json
  // Prometheus' process collector's series.
  counter* cpu_seconds = nullptr;
  gauge* resident_bytes = nullptr;
  gauge* virtual_bytes = nullptr;
  gauge* start_time = nullptr;
  gauge* open_fds = nullptr;
  gauge* max_fds = nullptr;
  family<counter>* http_answers = nullptr;
  // Role series, set by for_*.
  std::vector<worker_series> workers;
  router_series router;
  shard_series shard;
  engine_series engine;
  // Set by watch: what a scrape asks. Guarded, as the server may already
  // scrape while the node starts.
  std::mutex mu;
  caf::actor_system* sys = nullptr;
  nats_bus* bus = nullptr;
  std::function<void(caf::scoped_actor&, steady::time_point)> collect;
  readiness ready;
  // Collects, one scrape at a time; the lock also keeps watch() from
  // changing what it asks.
  void collect_all(std::chrono::milliseconds timeout) {
    std::lock_guard<std::mutex> lock(mu);
    collect_common();
    if (collect && sys) {
      caf::scoped_actor self{*sys};
      collect(self, steady::now() + timeout);
    }
  }

  // The series of every process.
  status add_common(const std::string& r) {
    role = r;
    builder b(reg);
    auto* info = b.gauges("kvmesh_build_info",
                          "Always 1: the version and role of this process.",
                          {"version", "role"});
    if (auto* g = b.at(info, {kvmesh_version, role})) g->Set(1);
    nats_reconnects =
        b.at(b.counters("kvmesh_nats_reconnects_total",
                        "Times the NATS connection was re-established after a "
                        "loss."));
    nats_slow =
        b.at(b.counters("kvmesh_nats_slow_consumers_total",
                        "Times a subscription of this process fell behind and "
                        "libnats dropped messages for it."));
    nats_errors = b.at(
        b.counters("kvmesh_nats_errors_total",
                   "Asynchronous errors libnats reported on the connection."));
    nats_denied = b.at(b.counters(
        "kvmesh_nats_permission_denials_total",
        "Publishes and subscriptions nats-server refused this process's "
        "credential (Permissions Violation)."));
    nats_refused_replies = b.at(b.counters(
        "kvmesh_nats_refused_replies_total",
        "Answers not sent because the request's reply subject was not an "
        "inbox (_INBOX.>)."));
    auto* refused = b.counters(
        "kvmesh_nats_refused_total",
        "NATS messages refused because the actor they were for had "
        "limits.max_mailbox_messages (or _bytes) waiting to be handled, by "
        "what they were; those awaiting a reply were answered "
        "\"overloaded\".",
        {"kind"});
    for (size_t i = 0; i < feed_kind_count; ++i)
      nats_refused[i] = b.at(refused, {to_string(static_cast<feed_kind>(i))});
    auto* msgs = b.counters("kvmesh_nats_messages_total",
                            "Messages received (in) and sent (out) on the "
                            "NATS connection.",
                            {"direction"});
    nats_in = b.at(msgs, {"in"});
    nats_out = b.at(msgs, {"out"});
    auto* dec = b.counters(
        "kvmesh_decode_errors_total",
        "Payloads that did not decode, by message kind (json: JSON route "
        "requests).",
        {"kind"});
    for (size_t i = 0; i < msg_kind_count; ++i)
      decode[i] = b.at(dec, {to_string(static_cast<msg_kind>(i))});
    decode[msg_kind_count] = b.at(dec, {"json"});
    cpu_seconds = b.at(b.counters("process_cpu_seconds_total",
                                  "User and system CPU time spent in "
                                  "seconds."));
    resident_bytes = b.at(b.gauges("process_resident_memory_bytes",
                                   "Resident memory size in bytes."));
    virtual_bytes = b.at(b.gauges("process_virtual_memory_bytes",
                                  "Virtual memory size in bytes."));
    start_time = b.at(
        b.gauges("process_start_time_seconds",
                 "Start time of the process since unix epoch in seconds."));
    open_fds =
        b.at(b.gauges("process_open_fds", "Number of open file descriptors."));
    max_fds = b.at(b.gauges("process_max_fds",
                            "Maximum number of open file descriptors."));
    http_answers = b.counters("kvmesh_metrics_requests_total",
                              "Requests to this metrics endpoint, by HTTP "
                              "status of the answer.",
                              {"code"});
    b.at(http_answers, {"200"});
    return b.result();
  }

  // Members' messages refused (messages/member_checks.hpp), by message and
  // reason; only the pairs that can happen in this process.
  std::vector<std::tuple<member_message, member_fault, counter*>> refusals;
  counter* announced[2] = {};  // a node agent's: made, deferred
  using refusal_pairs =
      std::vector<std::pair<member_message, std::vector<member_fault>>>;
  void add_refusals(builder& b, const refusal_pairs& pairs) {
    auto* family = b.counters(
        "kvmesh_member_refusals_total",
        "Members' messages refused before they were priced or kept, by "
        "message and reason (docs/reliability.md, \"Members' claims\").",
        {"message", "reason"});
    for (const auto& [msg, faults] : pairs)
      for (member_fault f : faults)
        refusals.emplace_back(msg, f,
                              b.at(family, {to_string(msg), to_string(f)}));
  }

  void collect_common() {
    // Unreadable /proc (not Linux): the series keep their last values.
    if (auto ps = metrics::read_process_sample()) {
      metrics::mirror(*cpu_seconds, ps->cpu_seconds);
      resident_bytes->Set(ps->resident_bytes);
      virtual_bytes->Set(ps->virtual_bytes);
      start_time->Set(ps->start_time_seconds);
      open_fds->Set(ps->open_fds);
      max_fds->Set(ps->max_fds);
    }
    for (const auto& [msg, f, c] : refusals)
      metrics::mirror(*c, static_cast<double>(member_refusals(msg, f)));
    if (bus) {
      metrics::mirror(*nats_reconnects, static_cast<double>(bus->reconnects()));
      metrics::mirror(*nats_slow, static_cast<double>(bus->slow_consumers()));
      metrics::mirror(*nats_errors, static_cast<double>(bus->errors()));
      metrics::mirror(*nats_denied,
                      static_cast<double>(bus->permission_denials()));
      metrics::mirror(*nats_refused_replies,
                      static_cast<double>(bus->refused_replies()));
      const auto t = bus->stats();
      metrics::mirror(*nats_in, static_cast<double>(t.in_msgs));
      metrics::mirror(*nats_out, static_cast<double>(t.out_msgs));
    }
    for (size_t i = 0; i < feed_kind_count; ++i)
      metrics::mirror(
          *nats_refused[i],
          static_cast<double>(nats_refusals(static_cast<feed_kind>(i))));
    for (size_t i = 0; i < msg_kind_count; ++i)
      metrics::mirror(*decode[i], static_cast<double>(
                                      decode_errors(static_cast<msg_kind>(i))));
    metrics::mirror(*decode[msg_kind_count],
                    static_cast<double>(json_decode_errors()));
  }
};

process_metrics::process_metrics(std::unique_ptr<impl> p)
    : impl_(std::move(p)) {}
process_metrics::~process_metrics() = default;

metrics::registry& process_metrics::registry() {
  return impl_->reg;
}

// -- node agent ---------------------------------------------------------------

namespace {

// The worker families of an agent, and each worker's series and meters.
struct worker_families {
  family<gauge>* queued;
  family<gauge>* reserved;
  family<gauge>* active;
  family<gauge>* capacity;
  family<gauge>* cached;
  family<gauge>* tier_capacity;
  family<gauge>* requests;
  family<counter>* completed;
  family<counter>* awards;
  family<counter>* prompt;
  family<counter>* hits;
  family<gauge>* draining;
  family<gauge>* speed;
  family<gauge>* last_price;
  counter* kv[2];  // stored, removed: the agent's
  // The agent's request latencies, over all its workers: per worker they
  // would be a histogram's dozen series for each of thousands of workers.
  histogram* ttft = nullptr;
  histogram* itl = nullptr;
  histogram* e2e = nullptr;

  explicit worker_families(builder& b) {
    const std::vector<std::string> w = {"worker"};
    const std::vector<std::string> wt = {"worker", "tier"};
    queued = b.gauges("kvmesh_worker_queued_blocks",
                      "Read work the worker accepted and has not yet "
                      "prefilled, in blocks.",
                      w);
    reserved = b.gauges("kvmesh_worker_reserved_blocks",
                        "Blocks soft-reserved by auctions still open.", w);
    active = b.gauges("kvmesh_worker_active_blocks",
                      "GPU blocks held by running sequences (occupancy).", w);
    capacity = b.gauges("kvmesh_worker_capacity_blocks",
                        "GPU KV blocks of the worker.", w);
    cached = b.gauges("kvmesh_worker_cached_blocks",
                      "Blocks cached in each tier.", wt);
    tier_capacity = b.gauges(
        "kvmesh_worker_tier_capacity_blocks",
        "Capacity of each tier in blocks (0: no such tier, or unknown).", wt);
    requests = b.gauges("kvmesh_worker_requests",
                        "Requests waiting for prefill and running.",
                        {"worker", "state"});
    completed = b.counters("kvmesh_worker_completed_total",
                           "Requests the worker finished.", w);
    awards = b.counters("kvmesh_worker_awards_total",
                        "Awards the worker received, by its answer.",
                        {"worker", "result"});
    prompt = b.counters("kvmesh_worker_prompt_blocks_total",
                        "Full prompt blocks of the requests accepted.", w);
    hits = b.counters(
        "kvmesh_worker_hit_blocks_total",
        "Of the accepted prompt blocks, those of the prefix the worker held "
        "at the award, by the tier it held them in.",
        wt);
    draining = b.gauges("kvmesh_worker_draining",
                        "1 while the worker is drained, else 0.", w);
    speed = b.gauges("kvmesh_worker_speed",
                     "Prefill speed relative to the reference GPU.", w);
    last_price = b.gauges(
        "kvmesh_worker_last_price_blocks",
        "The router's price, in cache blocks, of the last award the worker "
        "accepted (NaN: none yet).",
        w);
    auto* events = b.counters("kvmesh_agent_kv_events_total",
                              "KV events the agent's workers sent to the "
                              "index shards.",
                              {"kind"});
    kv[0] = b.at(events, {"stored"});
    kv[1] = b.at(events, {"removed"});
    // Engine time: a simulated GPU's own clock (faster than the wall's
    // under --time-scale), a real engine's as its front sees it.
    const std::vector<double> seconds = {0.005, 0.01, 0.025, 0.05, 0.1,
                                         0.25,  0.5,  1,     2.5,  5,
                                         10,    25,   60,    120,  300};
    ttft = b.at(b.histograms(
        "kvmesh_worker_time_to_first_token_seconds",
        "From a request's arrival at its worker to its first token, over the "
        "agent's workers.",
        seconds));
    itl = b.at(b.histograms(
        "kvmesh_worker_inter_token_latency_seconds",
        "Each finished request's mean time between output tokens after the "
        "first, over the agent's workers.",
        {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075,
         0.1, 0.25, 0.5, 1}));
    e2e = b.at(b.histograms(
        "kvmesh_worker_request_duration_seconds",
        "From a request's arrival at its worker to its last token, over the "
        "agent's workers.",
        seconds));
  }

  // Worker `id`'s series, its host and disk tiers' capacity set (the GPU's
  // comes with each status), and the meters it counts with.
  std::shared_ptr<worker_meters> add(builder& b, uint32_t id,
                                     uint64_t host_blocks, uint64_t disk_blocks,
                                     std::vector<worker_series>& out) {
    const std::string i = std::to_string(id);
    worker_series s;
    s.id = id;
    s.queued = b.at(queued, {i});
    s.reserved = b.at(reserved, {i});
    s.active = b.at(active, {i});
    s.capacity = b.at(capacity, {i});
    s.gpu_capacity = b.at(tier_capacity, {i, tier_names[0]});
    if (auto* g = b.at(tier_capacity, {i, tier_names[1]}))
      g->Set(static_cast<double>(host_blocks));
    if (auto* g = b.at(tier_capacity, {i, tier_names[2]}))
      g->Set(static_cast<double>(disk_blocks));
    auto m = std::make_shared<worker_meters>();
    for (size_t t = 0; t < 3; ++t) {
      s.cached[t] = b.at(cached, {i, tier_names[t]});
      m->hit_blocks[t] = b.at(hits, {i, tier_names[t]});
    }
    s.waiting = b.at(requests, {i, "waiting"});
    s.running = b.at(requests, {i, "running"});
    s.completed = b.at(completed, {i});
    s.draining = b.at(draining, {i});
    s.speed = b.at(speed, {i});
    s.last_price = b.at(last_price, {i});
    if (s.last_price) s.last_price->Set(std::nan(""));
    const char* results[5] = {"accepted", "draining", "queue_grew",
                              "engine_refused", "withdrawn"};
    for (size_t r = 0; r < 5; ++r)
      m->awards[r] = b.at(awards, {i, results[r]});
    m->prompt_blocks = b.at(prompt, {i});
    m->kv_events[0] = kv[0];
    m->kv_events[1] = kv[1];
    m->ttft = ttft;
    m->itl = itl;
    m->e2e = e2e;
    out.push_back(s);
    return m;
  }
};

// What a scrape asks each of an agent's workers, in the order of `series`.
std::function<void(caf::scoped_actor&, steady::time_point)> collect_workers(
    const std::vector<worker_series>* series,
    std::vector<worker_actor> handles) {
  return
      [series, handles](caf::scoped_actor& self, steady::time_point deadline) {
        for (size_t i = 0; i < handles.size() && i < series->size(); ++i) {
          const worker_series& w = (*series)[i];
          auto s = ask<worker_status>(self, handles[i], deadline,
                                      "worker " + std::to_string(w.id),
                                      status_atom::value);
          if (!s) continue;
          w.queued->Set(s->queued);
          w.reserved->Set(s->reserved);
          w.active->Set(static_cast<double>(s->active));
          w.capacity->Set(static_cast<double>(s->capacity));
          w.gpu_capacity->Set(static_cast<double>(s->capacity));
          w.cached[0]->Set(static_cast<double>(s->gpu_blocks));
          w.cached[1]->Set(static_cast<double>(s->host_blocks));
          w.cached[2]->Set(static_cast<double>(s->disk_blocks));
          w.waiting->Set(static_cast<double>(s->waiting));
          w.running->Set(static_cast<double>(s->running));
          metrics::mirror(*w.completed, static_cast<double>(s->completed));
          w.draining->Set(s->draining ? 1 : 0);
          w.speed->Set(s->speed);
          w.last_price->Set(s->last_price);
        }
      };
}

}  // namespace

// The real-engine agent's own series, for `workers` (one per rank).
void add_engine_series(builder& b, const std::vector<worker_series>& workers,
                       engine_series& out) {
  const std::vector<std::string> w = {"worker"};
  family<counter>* families[rank_counter_count];
  for (size_t k = 0; k < rank_counter_count; ++k)
    families[k] = b.counters(rank_counters[k].name, rank_counters[k].help, w);
  auto* mirror = b.counters(
      "kvmesh_worker_kv_mirror_faults_total",
      "The engine's KV events the worker could not apply as they came, by "
      "why.",
      {"worker", "fault"});
  auto* up =
      b.gauges("kvmesh_worker_engine_up",
               "1 while the engine answers its health checks, else 0.", w);
  for (const worker_series& ws : workers) {
    const std::string i = std::to_string(ws.id);
    engine_series::rank r;
    for (size_t k = 0; k < rank_counter_count; ++k)
      r.counters[k] = b.at(families[k], {i});
    for (size_t f = 0; f < mirror_fault_count; ++f)
      r.mirror_faults[f] =
          b.at(mirror, {i, to_string(static_cast<mirror_fault>(f))});
    r.engine_up = b.at(up, {i});
    out.ranks.push_back(r);
  }
  for (size_t k = 0; k < feed_counter_count; ++k)
    out.feed[k] =
        b.at(b.counters(feed_counters[k].name, feed_counters[k].help));
  auto* faults = b.counters(
      "kvmesh_agent_kv_event_faults_total",
      "Frames and events of the KV event stream skipped as malformed, by "
      "why.",
      {"fault"});
  for (size_t f = 0; f < kv_fault_count; ++f)
    out.faults[f] = b.at(faults, {to_string(static_cast<kv_fault>(f))});
}

expected<std::unique_ptr<process_metrics>> process_metrics::for_agent(
    agent_options& opt) {
  auto p = std::make_unique<impl>();
  if (auto st = p->add_common("agent"); !st) return st.err();
  builder b(p->reg);
  worker_families f(b);
  for (auto& wo : opt.workers)
    wo.meters = f.add(b, wo.ledger.id, wo.engine.cache.host_blocks,
                      wo.engine.cache.disk_blocks, p->workers);
  auto* announced = b.counters(
      "kvmesh_agent_cache_announcements_total",
      "Announcements of the workers' caches to the index shards (a shard "
      "new, back, or that refused events): made, or deferred because one "
      "was made less than mesh.announce_beats heartbeats before.",
      {"outcome"});
  p->announced[0] = b.at(announced, {"made"});
  p->announced[1] = b.at(announced, {"deferred"});
  if (auto st = b.result(); !st) {
    for (auto& wo : opt.workers)
      wo.meters.reset();
    return st.err();
  }
  return std::unique_ptr<process_metrics>(new process_metrics(std::move(p)));
}

expected<std::unique_ptr<process_metrics>> process_metrics::for_agent(
    engine_agent_options& opt) {
  auto p = std::make_unique<impl>();
  if (auto st = p->add_common("agent"); !st) return st.err();
  builder b(p->reg);
  worker_families f(b);
  // The engine's host and disk tiers (offloading) have no capacity the
  // agent knows: 0.
  std::vector<std::shared_ptr<const worker_meters>> meters;
  for (uint32_t r = 0; r < opt.dp_size; ++r)
    meters.push_back(f.add(b, opt.first_id + r, 0, 0, p->workers));
  add_engine_series(b, p->workers, p->engine);
  if (auto st = b.result(); !st) return st.err();
  opt.meters = std::move(meters);
  return std::unique_ptr<process_metrics>(new process_metrics(std::move(p)));
}

void process_metrics::watch(caf::actor_system& sys, nats_bus& bus,
                            const agent_node& node) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->sys = &sys;
  impl_->bus = &bus;
  impl_->ready = readiness_of(bus, node);
  // The node's workers are in the order of the options' (agent_node).
  impl* p = impl_.get();
  impl_->collect = [p, &node,
                    workers = collect_workers(&impl_->workers, node.workers())](
                       caf::scoped_actor& self, steady::time_point deadline) {
    workers(self, deadline);
    const auto a = node.announced();
    if (p->announced[0])
      metrics::mirror(*p->announced[0], static_cast<double>(a.made));
    if (p->announced[1])
      metrics::mirror(*p->announced[1], static_cast<double>(a.deferred));
  };
}

namespace {

// A scrape's reading of the real-engine series (add_engine_series).
void collect_engine(caf::scoped_actor& self, steady::time_point deadline,
                    const engine_agent& node,
                    const std::vector<worker_series>& workers,
                    const engine_series& e) {
  const auto& ranks = node.workers();
  for (size_t i = 0; i < ranks.size() && i < e.ranks.size(); ++i) {
    auto s = ask<engine_worker_stats>(
        self, ranks[i], deadline,
        "worker " + std::to_string(i < workers.size() ? workers[i].id : 0),
        get_atom::value, stats_atom::value);
    if (!s) continue;
    const engine_series::rank& r = e.ranks[i];
    for (size_t k = 0; k < rank_counter_count; ++k)
      metrics::mirror(*r.counters[k],
                      static_cast<double>((*s).*rank_counters[k].field));
    for (size_t f = 0; f < mirror_fault_count; ++f)
      metrics::mirror(*r.mirror_faults[f],
                      static_cast<double>(s->mirror_faults[f]));
    r.engine_up->Set(s->metrics.answering ? 1 : 0);
  }
  const kv_subscriber_counters c = node.kv_counters();
  for (size_t k = 0; k < feed_counter_count; ++k)
    metrics::mirror(*e.feed[k], static_cast<double>(c.*feed_counters[k].field));
  for (size_t f = 0; f < kv_fault_count; ++f)
    metrics::mirror(*e.faults[f], static_cast<double>(c.faults.n[f]));
}

}  // namespace

void process_metrics::watch(caf::actor_system& sys, nats_bus& bus,
                            const engine_agent& node) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->sys = &sys;
  impl_->bus = &bus;
  impl_->ready = readiness_of(bus, node);
  std::vector<worker_actor> handles;
  for (const auto& w : node.workers())  // by rank
    handles.push_back(caf::actor_cast<worker_actor>(w));
  impl* p = impl_.get();
  impl_->collect = [p, &node,
                    workers = collect_workers(&impl_->workers, handles)](
                       caf::scoped_actor& self, steady::time_point deadline) {
    workers(self, deadline);
    collect_engine(self, deadline, node, p->workers, p->engine);
  };
}

expected<std::unique_ptr<process_metrics>> process_metrics::for_role(
    const std::string& role) {
  auto p = std::make_unique<impl>();
  if (auto st = p->add_common(role); !st) return st.err();
  return std::unique_ptr<process_metrics>(new process_metrics(std::move(p)));
}

void process_metrics::watch(caf::actor_system& sys, nats_bus& bus,
                            readiness ready) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->sys = &sys;
  impl_->bus = &bus;
  impl_->ready = std::move(ready);
  impl_->collect = [](caf::scoped_actor&, steady::time_point) {};
}

// -- router -------------------------------------------------------------------

expected<std::unique_ptr<process_metrics>> process_metrics::for_router(
    router_node_options& opt) {
  auto p = std::make_unique<impl>();
  if (auto st = p->add_common("router"); !st) return st.err();
  builder b(p->reg);
  auto m = std::make_shared<router_meters>();
  auto* requests = b.counters("kvmesh_router_requests_total",
                              "Route requests this router took, by the "
                              "subject they came on.",
                              {"intake"});
  const char* intakes[intake_count] = {"core", "json", "durable"};
  for (size_t i = 0; i < intake_count; ++i)
    m->requests[i] = b.at(requests, {intakes[i]});
  p->router.decisions =
      b.at(b.counters("kvmesh_router_decisions_total",
                      "Requests this router gave a worker (answered with a "
                      "decision)."));
  auto* failures =
      b.counters("kvmesh_router_failures_total",
                 "Requests answered without a worker, by why.", {"reason"});
  for (size_t i = 0; i < route_failure_count; ++i)
    m->failures[i] = b.at(failures, {to_string(static_cast<route_failure>(i))});
  auto* handbacks =
      b.counters("kvmesh_router_handbacks_total",
                 "Durable route requests handed back to their queue "
                 "undecided, for another delivery a heartbeat later, by why.",
                 {"cause"});
  for (size_t i = 0; i < handback_count; ++i)
    m->handbacks[i] = b.at(handbacks, {to_string(static_cast<handback>(i))});
  m->mesh_inbox_replies = b.at(b.counters(
      "kvmesh_router_mesh_inbox_replies_total",
      "Route requests (core, JSON and durable; durable ones acked) "
      "refused and never answered because their reply subject was one of "
      "the mesh's own inboxes (_INBOX.kvmesh.): a client trying to make the "
      "router publish where only the mesh may."));
  m->auction_seconds = b.at(b.histograms(
      "kvmesh_router_auction_seconds",
      "From a route request's arrival at the router process's front to its "
      "decision, re-auctions and waits in the overload queue included; "
      "decided requests only.",
      {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
       0.25, 0.5, 1, 2.5}));
  m->bids_per_auction =
      b.at(b.histograms("kvmesh_router_bids_per_auction",
                        "Bids priced in the auction that decided each request.",
                        {1, 2, 4, 8, 16, 32, 64, 128, 256}));
  auto* reauctions = b.counters(
      "kvmesh_router_reauctions_total",
      "Auctions run again for a request, by cause: the awardee refused, the "
      "last awardee left did not answer, no bid came, every price was past "
      "the overload ceiling, no live worker.",
      {"cause"});
  const char* causes[5] = {"refused", "unanswered", "no_bids", "saturated",
                           "no_live_worker"};
  for (size_t i = 0; i < 5; ++i)
    p->router.reauctions[i] = b.at(reauctions, {causes[i]});
  p->router.rounds =
      b.at(b.counters("kvmesh_router_rounds_total",
                      "Calls for bids this router sent (auction rounds, first "
                      "ones and re-auctions)."));
  p->router.bids =
      b.at(b.counters("kvmesh_router_bids_total",
                      "Bids this router's calls for bids got within the bid "
                      "deadline."));
  p->router.runner_ups = b.at(b.counters(
      "kvmesh_router_runner_up_awards_total",
      "Awards to a runner-up of a round: the awardee before it did not "
      "answer in time, or refused with no rounds left."));
  m->winner_price =
      b.at(b.histograms("kvmesh_router_winner_price_blocks",
                        "The winning bid's price in cache blocks.",
                        {1, 4, 16, 64, 256, 1024, 4096, 16384, 65536}));
  auto* terms = b.counters("kvmesh_router_winner_term_blocks_total",
                           "The terms of the winners' prices in blocks, "
                           "summed over decisions.",
                           {"term"});
  const char* term_names[7] = {"read",        "credit_gpu", "credit_host",
                               "credit_disk", "space",      "overflow",
                               "wait"};
  for (size_t i = 0; i < 7; ++i)
    m->winner_terms[i] = b.at(terms, {term_names[i]});
  p->router.held = b.at(b.gauges(
      "kvmesh_router_held_requests",
      "Requests waiting: held while every worker is past the price ceiling, "
      "or for a free auction slot (--max-inflight)."));
  auto* workers = b.gauges("kvmesh_router_workers",
                           "Workers this router knows from heartbeats, by "
                           "state.",
                           {"state"});
  const char* states[4] = {"live", "draining", "unhealthy", "gone"};
  for (size_t i = 0; i < 4; ++i)
    p->router.workers[i] = b.at(workers, {states[i]});
  using mf = member_fault;
  p->add_refusals(
      b, {{member_message::bid,
           {mf::not_finite, mf::negative, mf::over_request, mf::speed,
            mf::blocks, mf::credit}},
          {member_message::worker_beat,
           {mf::bad_id, mf::bad_name, mf::not_finite, mf::negative, mf::speed,
            mf::blocks, mf::owned, mf::too_many, mf::too_many_of_agent,
            mf::wrong_subject, mf::bad_model, mf::bad_engine}},
          {member_message::router_beat, {mf::bad_name, mf::too_many}}});
  if (auto st = b.result(); !st) return st.err();
  opt.meters = std::move(m);
  return std::unique_ptr<process_metrics>(new process_metrics(std::move(p)));
}

void process_metrics::watch(caf::actor_system& sys, nats_bus& bus,
                            const router_node& node) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->sys = &sys;
  impl_->bus = &bus;
  impl_->ready = readiness_of(bus, node);
  impl* p = impl_.get();
  impl_->collect = [p, router = node.router(), admin = node.admin()](
                       caf::scoped_actor& self, steady::time_point deadline) {
    if (auto s = ask<router_status>(self, router, deadline, "the ROUTER",
                                    status_atom::value)) {
      metrics::mirror(*p->router.decisions, static_cast<double>(s->decisions));
      const uint64_t by_cause[5] = {
          s->reauctions_refused, s->reauctions_unanswered,
          s->reauctions_no_bids, s->reauctions_saturated,
          s->reauctions_no_live_worker};
      for (size_t i = 0; i < 5; ++i)
        metrics::mirror(*p->router.reauctions[i],
                        static_cast<double>(by_cause[i]));
      metrics::mirror(*p->router.rounds, static_cast<double>(s->rounds));
      metrics::mirror(*p->router.bids, static_cast<double>(s->bids));
      metrics::mirror(*p->router.runner_ups,
                      static_cast<double>(s->runner_up_awards));
      p->router.held->Set(static_cast<double>(s->held));
    }
    if (auto ws = ask<std::vector<worker_status>>(
            self, admin, deadline, "the ADMIN (workers)", get_atom::value,
            workers_atom::value)) {
      // As `kvmesh admin workers` names them.
      double n[4] = {0, 0, 0, 0};
      for (const auto& w : *ws)
        n[w.gone ? 3 : w.draining ? 1 : w.unhealthy ? 2 : 0] += 1;
      for (size_t i = 0; i < 4; ++i)
        p->router.workers[i]->Set(n[i]);
    }
  };
}

// -- index shard --------------------------------------------------------------

expected<std::unique_ptr<process_metrics>> process_metrics::for_shard(
    shard_node_options& opt) {
  auto p = std::make_unique<impl>();
  if (auto st = p->add_common("index"); !st) return st.err();
  builder b(p->reg);
  const std::vector<std::string> s = {std::to_string(opt.shard.shard)};
  const std::vector<std::string> l = {"shard"};
  p->shard.blocks = b.at(b.gauges("kvmesh_index_blocks",
                                  "Distinct block hashes the shard knows.", l),
                         s);
  p->shard.entries =
      b.at(b.gauges("kvmesh_index_entries", "(block, holder) pairs.", l), s);
  p->shard.bytes = b.at(
      b.gauges("kvmesh_index_rocksdb_bytes",
               "Bytes of the files in the shard's --db directory (SST files, "
               "WAL, MANIFEST, logs).",
               l),
      s);
  p->shard.events =
      b.at(b.counters("kvmesh_index_events_total", "KV events applied.", l), s);
  p->shard.errors = b.at(b.counters("kvmesh_index_errors_total",
                                    "KV batches refused or not persisted.", l),
                         s);
  auto m = std::make_shared<shard_meters>();
  m->queries = b.at(
      b.counters("kvmesh_index_queries_total", "Prefix queries answered.", l),
      s);
  using mf = member_fault;
  p->add_refusals(b, {{member_message::kv_batch, {mf::owned, mf::too_many}},
                      {member_message::worker_beat,
                       {mf::owned, mf::too_many, mf::wrong_subject}}});
  if (auto* g = b.at(b.gauges("kvmesh_index_shards",
                              "The shard count N the shard was started with "
                              "(--shard I/N).",
                              l),
                     s))
    g->Set(opt.shards);
  if (auto st = b.result(); !st) return st.err();
  opt.meters = std::move(m);
  return std::unique_ptr<process_metrics>(new process_metrics(std::move(p)));
}

void process_metrics::watch(caf::actor_system& sys, nats_bus& bus,
                            const shard_node& node) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->sys = &sys;
  impl_->bus = &bus;
  impl_->ready = readiness_of(bus, node);
  impl* p = impl_.get();
  impl_->collect = [p, shard = node.shard()](caf::scoped_actor& self,
                                             steady::time_point deadline) {
    auto s = ask<shard_status>(self, shard, deadline, "the INDEX SHARD",
                               status_atom::value);
    if (!s) return;
    p->shard.blocks->Set(static_cast<double>(s->blocks));
    p->shard.entries->Set(static_cast<double>(s->entries));
    p->shard.bytes->Set(static_cast<double>(s->disk_bytes));
    metrics::mirror(*p->shard.events, static_cast<double>(s->events));
    metrics::mirror(*p->shard.errors, static_cast<double>(s->errors));
  };
}

// -- scrapes ------------------------------------------------------------------

std::string process_metrics::scrape() {
  impl_->collect_all(collect_timeout);
  return impl_->reg.render();
}

namespace {

// The registry's series, collected at each scrape of the endpoint.
class scrape_source final : public prometheus::Collectable {
 public:
  explicit scrape_source(process_metrics& pm) : pm_(pm) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    pm_.collect();
    return pm_.registry().shared()->Collect();
  }

 private:
  process_metrics& pm_;
};

}  // namespace

void process_metrics::collect() {
  impl_->collect_all(collect_timeout);
}

std::shared_ptr<prometheus::Collectable> process_metrics::collectable() {
  return std::make_shared<scrape_source>(*this);
}

std::vector<std::string> process_metrics::not_ready() {
  readiness ready;
  caf::actor_system* sys = nullptr;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    ready = impl_->ready;
    sys = impl_->sys;
  }
  if (!ready || !sys) return {"starting"};
  caf::scoped_actor self{*sys};
  return ready(self, std::chrono::steady_clock::now() + collect_timeout);
}

void process_metrics::answered(int status) {
  if (auto c = impl_->http_answers->with({std::to_string(status)}))
    (*c)->Increment();
}

expected<std::unique_ptr<metrics::endpoint>> serve_metrics(
    process_metrics& pm, const metrics::endpoint_options& opt) {
  return metrics::endpoint::start(
      opt, pm.collectable(), [&pm] { return pm.not_ready(); },
      [&pm](int status) { pm.answered(status); });
}

}  // namespace kvmesh
