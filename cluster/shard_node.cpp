// The index shard's endpoint: KV events passed on (their gate places given
// back once written, confirm_kv), queries answered, and its heartbeat.
#include "cluster/shard_node.hpp"

#include <atomic>
#include <optional>
#include <random>

#include "cluster/bridge.hpp"
#include "cluster/node_base.hpp"
#include "core/owners.hpp"
#include "messages/codec.hpp"
#include "messages/limits.hpp"
#include "messages/member_checks.hpp"

namespace kvmesh {
namespace detail {
namespace {

// The "overloaded" answer of a shard's queries.
std::optional<bytes> query_overloaded(const std::string&,
                                      const std::string& why) {
  return encode(index_reply{{}, why});
}

struct shard_host_state {
  static inline const char* name = "shard_endpoint";
  nats_bus* bus = nullptr;
  mesh_options mesh;
  // mesh.subj.kv_root(index) and worker_beat_root(), built once: every
  // message names its agent in the token after them.
  std::string kv_root, beat_root;
  // Who may change which worker's entries: the agent heard for it (its
  // heartbeats and KV events), while it is heard. A resync or event from
  // another agent is refused; an agent's subjects are its credential's.
  worker_owners owners{std::chrono::seconds(3), 0};
  index_shard_actor shard;
  uint32_t index = 0;
  uint32_t shards = 1;
  batcher out;  // replies, sent when the mailbox has drained
  std::shared_ptr<const shard_meters> meters;  // null: not counted
  // What NATS handed it. A KV message keeps its place until the shard has
  // applied it, a query until the shard answered: the shard's own mailbox
  // is where a flood would wait.
  std::shared_ptr<mailbox_gate> gate;
  // Workers' heartbeats have their own: a flood of them cannot crowd KV
  // events and queries out.
  std::shared_ptr<mailbox_gate> beat_gate;
  uint64_t incarnation = 0;  // random, nonzero: tells restarts (heartbeat)
  // KV messages the gate refused, for the heartbeat (null: not counted).
  std::shared_ptr<std::atomic<uint64_t>> kv_refused;
  // KV messages sent on to the shard and not yet known written, and their
  // bytes; an empty query confirms them all (the shard handles this
  // endpoint's messages in order), one in flight at a time.
  uint64_t kv_unconfirmed = 0;
  uint64_t kv_unconfirmed_bytes = 0;
  bool kv_confirming = false;
};

using shard_host_pointer = caf::stateful_actor<shard_host_state>*;

// Gives back the gate's places of the KV messages sent to the shard so far
// once it has handled them: one request per round rather than a reply per
// batch (kv_atom has none, and a shard's interface need not know about
// NATS). The request is a query of no blocks, which costs a loop over the
// workers; not a status request, which lists the RocksDB directory (the
// chaos run's timings suffered from one per round).
void confirm_kv(shard_host_pointer self) {
  auto& st = self->state;
  if (st.kv_confirming || st.kv_unconfirmed == 0) return;
  st.kv_confirming = true;
  const uint64_t n = st.kv_unconfirmed;
  const uint64_t b = st.kv_unconfirmed_bytes;
  st.kv_unconfirmed = 0;
  st.kv_unconfirmed_bytes = 0;
  auto done = [self, n, b] {
    auto& st = self->state;
    if (st.gate) st.gate->leave(b, n);
    st.kv_confirming = false;
    confirm_kv(self);
  };
  self->request(st.shard, caf::infinite, query_atom::value,
                std::vector<uint64_t>{})
      .then([done](const std::vector<holder_match>&) { done(); },
            [done](caf::error&) { done(); });
}

// Whether `agent` may speak for `worker` (worker_owners); a refusal is
// counted and logged as `what`'s.
bool held_by(shard_host_state& st, uint32_t worker, const std::string& agent,
             member_message what) {
  switch (st.owners.claim(worker, agent, steady::now())) {
    case worker_owners::verdict::held:
      return true;
    case worker_owners::verdict::owned:
      refuse_member(what, member_fault::owned, agent, worker);
      return false;
    case worker_owners::verdict::full:
      refuse_member(what, member_fault::too_many, agent, worker);
      return false;
  }
  return false;
}

// A worker's heartbeat, on `agent`'s subject: it keeps the agent the
// holder of the worker's entries.
void shard_worker_beat(shard_host_state& st, const worker_status& s,
                       const std::string& agent) {
  if (s.agent != agent) {
    refuse_member(member_message::worker_beat, member_fault::wrong_subject,
                  agent, s.worker);
    return;
  }
  (void)held_by(st, s.worker, agent, member_message::worker_beat);
}

caf::behavior shard_endpoint(
    shard_host_pointer self, nats_bus* bus, mesh_options mesh,
    index_shard_actor shard, uint32_t index, uint32_t shards,
    std::shared_ptr<const shard_meters> meters,
    std::shared_ptr<mailbox_gate> gate, std::shared_ptr<mailbox_gate> beat_gate,
    std::shared_ptr<std::atomic<uint64_t>> kv_refused) {
  auto& st = self->state;
  st.gate = std::move(gate);
  st.beat_gate = std::move(beat_gate);
  st.kv_refused = std::move(kv_refused);
  st.meters = std::move(meters);
  st.bus = bus;
  st.mesh = std::move(mesh);
  st.shard = std::move(shard);
  st.index = index;
  st.kv_root = st.mesh.subj.kv_root(index);
  st.beat_root = st.mesh.subj.worker_beat_root();
  st.owners =
      worker_owners(stale_after(st.mesh), current_wire_limits().max_workers);
  st.shards = shards;
  std::random_device rd;
  while (st.incarnation == 0)
    st.incarnation = uint64_t{rd()} << 32 | rd();
  self->send(self, beat_atom::value);
  return {
      [=](nats_atom, const std::string& subject, const std::string& reply,
          const bytes& payload) {
        auto& st = self->state;
        if (auto agent = agent_of(subject, st.beat_root); !agent.empty()) {
          gate_pass beat(st.beat_gate.get(), payload.size());
          if (auto s = decode<worker_status>(payload))
            shard_worker_beat(st, *s, agent);
          return;
        }
        gate_pass pass(st.gate.get(), payload.size());
        if (auto agent = agent_of(subject, st.kv_root); !agent.empty()) {
          // A malformed batch is counted by the codec and dropped: nobody
          // awaits an answer to KV events.
          auto b = decode<kv_batch>(payload);
          if (b && !held_by(st, b->worker, agent, member_message::kv_batch))
            return;
          if (b) {
            if (b->resync) self->send(st.shard, drop_atom::value, b->worker);
            if (!b->events.empty())
              self->send(st.shard, kv_atom::value, b->worker,
                         std::move(b->events));
            if (st.gate && (b->resync || !b->events.empty())) {
              pass.keep();
              ++st.kv_unconfirmed;
              st.kv_unconfirmed_bytes += payload.size();
              confirm_kv(self);
            }
          }
          return;
        }
        auto q = decode<index_query>(payload);
        if (!q) {
          answer(*st.bus, reply, encode(index_reply{{}, q.err().message}));
          return;
        }
        pass.keep();
        const size_t size = payload.size();
        auto leave = [self, size] {
          if (self->state.gate) self->state.gate->leave(size);
        };
        // The local shard always answers (a dead one fails at once).
        self->request(st.shard, caf::infinite, query_atom::value,
                      std::move(q->chain))
            .then(
                [self, reply, leave](std::vector<holder_match>& h) {
                  leave();
                  if (self->state.meters) self->state.meters->queries->Increment();
                  answer_batched(self, *self->state.bus, self->state.out, reply,
                                 encode(index_reply{std::move(h), {}}));
                },
                [self, reply, leave](caf::error& e) {
                  leave();
                  answer_batched(self, *self->state.bus, self->state.out, reply,
                                 encode(index_reply{{}, describe(e)}));
                });
      },
      [=](flush_atom) { self->state.out.flush(*self->state.bus); },
      [=](beat_atom) {
        auto& st = self->state;
        st.owners.forget(steady::now() - forget_after(st.mesh));
        self->request(st.shard, st.mesh.heartbeat, status_atom::value)
            .then(
                [self](shard_status s) {
                  s.shards = self->state.shards;
                  s.incarnation = self->state.incarnation;
                  if (self->state.kv_refused)
                    s.refused_events = self->state.kv_refused->load();
                  (void)self->state.bus->publish(
                      self->state.mesh.subj.shard_beat(), encode(s));
                },
                [](caf::error&) {});
        self->delayed_send(self, st.mesh.heartbeat, beat_atom::value);
      },
  };
}

}  // namespace
}  // namespace detail

using namespace detail;

struct shard_node::impl : node_base {
  index_shard_actor shard;
};

shard_node::shard_node(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
shard_node::~shard_node() {
  impl_->stop();
}
index_shard_actor shard_node::shard() const {
  return impl_->shard;
}

expected<std::unique_ptr<shard_node>> shard_node::start(
    caf::actor_system& sys, nats_bus& bus, const shard_node_options& opt) {
  if (opt.shards == 0 || opt.shard.shard >= opt.shards)
    return make_error(ec::invalid_argument,
                      "shard " + std::to_string(opt.shard.shard) + "/" +
                          std::to_string(opt.shards) + ": need I < N");
  auto p = std::make_unique<impl>();
  p->bus = &bus;
  auto shard = spawn_index_shard(sys, opt.shard);
  if (!shard) return shard.err();
  p->shard = *shard;
  p->actors.push_back(caf::actor_cast<caf::actor>(*shard));
  auto gate = new_gate();
  auto kv_refused = std::make_shared<std::atomic<uint64_t>>(0);
  auto beat_gate = new_heartbeat_gate();
  auto ep = sys.spawn(shard_endpoint, &bus, opt.mesh, *shard, opt.shard.shard,
                      opt.shards, opt.meters, gate, beat_gate, kv_refused);
  p->actors.push_back(ep);
  const auto& s = opt.mesh.subj;
  // Queries also come batched, on the query subject's parent + ".batch";
  // KV events on kv_batch (an agent's workers' batches of one drain).
  // A refused KV message is lost to the index (KvBatch has no reply): it
  // is counted, logged and reported in the shard's heartbeat, on which
  // the agents have their workers announce their caches again.
  // Workers' heartbeats name the agent that holds each worker's entries.
  for (const auto& [subject, kind] :
       {std::make_pair(s.kv_all(opt.shard.shard), feed_kind::kv),
        std::make_pair(s.kv_batches(opt.shard.shard), feed_kind::kv),
        std::make_pair(s.index_query(opt.shard.shard), feed_kind::query),
        std::make_pair(s.index_batch(opt.shard.shard), feed_kind::query)})
    if (auto st = p->listen(
            subject, "", ep,
            {gate, kind, kind == feed_kind::query ? query_overloaded : nullptr,
             kind == feed_kind::kv ? kv_refused : nullptr});
        !st) {
      p->stop();
      return st.err();
    }
  if (auto st = p->listen(s.worker_beats(), "", ep,
                          {beat_gate, feed_kind::heartbeat, nullptr});
      !st) {
    p->stop();
    return st.err();
  }
  return std::unique_ptr<shard_node>(new shard_node(std::move(p)));
}

}  // namespace kvmesh
