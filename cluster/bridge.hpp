// The seam between NATS and actors: a process's reply inbox, calls awaiting
// replies inside an actor, and the atoms of the bridge's own messages.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/actors.hpp"  // sweep_atom
#include "cluster/nats.hpp"
#include "core/error.hpp"
#include "messages/batch.hpp"
#include "messages/types.hpp"

namespace kvmesh {

using bytes = std::vector<uint8_t>;

// A NATS message handed to an actor: (nats_atom, subject, reply, payload).
using nats_atom = caf::atom_constant<caf::atom("nats")>;
// A reply to one of this process's calls: (reply_atom, seq, payload).
using reply_atom = caf::atom_constant<caf::atom("reply")>;
// Sends what an actor batched while its mailbox drained.
using flush_atom = caf::atom_constant<caf::atom("flush")>;
// Publishes a heartbeat (an actor sends it to itself).
using beat_atom = caf::atom_constant<caf::atom("beat")>;
// A durable route request: (durable_atom, reply, payload, delivery).
using durable_atom = caf::atom_constant<caf::atom("durable")>;
// A durable request's answer, kept (or not: the error) and now to be sent
// and acked: (recorded_atom, reply, payload, delivery, id, error).
using recorded_atom = caf::atom_constant<caf::atom("recorded")>;
// A router front's sweep of the durable requests it is deciding (each one
// told "in progress" to the server before its ack_wait runs out).
using progress_atom = caf::atom_constant<caf::atom("progress")>;

// What an actor publishes while its mailbox drains, sent when it has
// drained: alone when it is the only message for its receiver, else in one
// Batch (messages/kvmesh.capnp) on the parent subject plus ".batch". Under
// load this turns one NATS message per auction and receiver into one per
// receiver and drain, and the receiver's threads wake once for all.
class batcher {
 public:
  // Queues a message. True when it is the first since the last flush: the
  // caller then schedules flush() for the end of its drain. `own`: the
  // subject is its receiver's alone though its parent is shared (an index
  // shard's KV events, P.kv.<shard>): batches go on the subject itself plus
  // ".batch", and always as a Batch, so that a receiver that hears the
  // subject and its batches on two subscriptions gets one sender's messages
  // in order.
  bool add(const std::string& subject, const std::string& reply, bytes payload,
           bool own = false);
  // Publishes what is queued; returns how many NATS messages that took.
  size_t flush(nats_bus& bus);
  bool empty() const { return queued_ == 0; }

  // A batch stays well below NATS' default 1 MB payload limit.
  static constexpr size_t max_batch_bytes = 256 * 1024;

 private:
  struct receiver {
    std::string parent;  // the items' subject up to its last token
    std::vector<batch_item> items;
    size_t bytes = 0;
    bool own = false;  // parent is the items' subject (add's `own`)
  };
  void send(nats_bus& bus, receiver& r);
  std::vector<receiver> receivers_;  // few per actor: a linear search
  size_t queued_ = 0;
  size_t sent_ = 0;
};

// True for a subject a batcher sends batches on.
bool is_batch(const std::string& subject);

// The messages of `m`: its items when it is a batch (those whose subject
// shares the batch's parent or is that parent; a batch cannot send
// elsewhere), else itself.
// A malformed batch is counted (decode_errors(msg_kind::batch)) and yields
// nothing.
std::vector<nats_message> unbatch(nats_message m);
// The same, each handed to `f` in turn: a message that is no batch (a
// route request, say) goes on as it is, without a list of one to hold it.
template <class F>
void each_unbatched(nats_message m, F&& f) {
  if (!is_batch(m.subject)) {
    f(std::move(m));
    return;
  }
  // Items stay below the batch's parent and do not nest (messages/batch).
  for (auto& i : unbatch_items(m.subject, m.payload.data(), m.payload.size()))
    f(nats_message{std::move(i.subject), std::move(i.reply),
                   std::move(i.payload)});
}

// An error as a peer on the wire should read it: kvmesh's own errors are
// their message; others are CAF's rendering.
std::string describe(const caf::error& e);

// A kvmesh error (a decode's, a bus call's) as the CAF error an actor
// delivers: describe's inverse.
inline caf::error to_caf(const error& e) {
  return caf::make_error(e.code, e.message);
}

// What a subscription feeds, for the refusals' counter
// (kvmesh_nats_refused_total{kind}).
enum class feed_kind : uint8_t {
  route,      // route requests, binary and JSON (router fronts)
  agent,      // calls for bids, awards, releases, drains (node agents)
  kv,         // KV events (index shards)
  query,      // holder queries (index shards)
  heartbeat,  // workers', routers' and shards' heartbeats
  admin,      // ADMIN verbs and a router's weights
  events,     // request events (a client's remote router)
};
inline constexpr size_t feed_kind_count = 7;
const char* to_string(feed_kind k);

// Messages of `k` refused by a full mailbox_gate since the process started.
uint64_t nats_refusals(feed_kind k);

// Bounds what NATS callbacks hand to one actor and it has not yet handled:
// CAF mailboxes are unbounded, and libnats' pending limits only bound its
// own queue, which the callback empties at once. The callback enters the
// gate before it sends; the actor leaves it when it has handled the
// message (a gate_pass at the top of its nats_atom handler, or later
// when the work goes on elsewhere and must be bounded too).
//
// A count rather than a ticket inside each message (a shared_ptr whose
// destructor leaves): no allocation per message, no change to the actors'
// typed interfaces, and the actor can hold the place past its handler (an
// index shard's writes). The cost: every path of a gated actor's handler
// must leave exactly once, and only gated callbacks may send it nats_atom.
class mailbox_gate {
 public:
  mailbox_gate(uint64_t max_messages, uint64_t max_bytes)
      : max_messages_(static_cast<int64_t>(max_messages)),
        max_bytes_(static_cast<int64_t>(max_bytes)) {}

  // Takes a place for a message of `size` payload bytes; false (nothing
  // taken) when that would pass either bound. Any thread.
  bool enter(size_t size);
  // Gives back a place taken by enter(size). Any thread.
  void leave(size_t size, uint64_t count = 1);

  uint64_t messages() const {
    const auto n = messages_.load(std::memory_order_relaxed);
    return n > 0 ? static_cast<uint64_t>(n) : 0;
  }
  uint64_t bytes() const {
    const auto n = bytes_.load(std::memory_order_relaxed);
    return n > 0 ? static_cast<uint64_t>(n) : 0;
  }
  // The most messages in at once since the gate was made.
  uint64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  uint64_t max_messages() const { return static_cast<uint64_t>(max_messages_); }
  uint64_t max_bytes() const { return static_cast<uint64_t>(max_bytes_); }

 private:
  const int64_t max_messages_;
  const int64_t max_bytes_;
  // Signed: a stray leave() (a bug) lets a few more in rather than
  // wrapping around and refusing everything for good.
  std::atomic<int64_t> messages_{0};
  std::atomic<int64_t> bytes_{0};
  std::atomic<uint64_t> peak_{0};
};

// Leaves `gate` (when set) for one message of `size` bytes at the end of
// the scope: the usual case, a handler that finishes the message itself.
class gate_pass {
 public:
  gate_pass(mailbox_gate* gate, size_t size) : gate_(gate), size_(size) {}
  ~gate_pass() {
    if (gate_) gate_->leave(size_);
  }
  // The handler passed the place on (it leaves later itself).
  void keep() { gate_ = nullptr; }
  gate_pass(const gate_pass&) = delete;
  gate_pass& operator=(const gate_pass&) = delete;

 private:
  mailbox_gate* gate_;
  size_t size_;
};

// How forward() admits messages: unbounded without a gate.
struct admission {
  // The answer to a refused message that has a reply subject, in the type
  // its callers decode, carrying `why`; none (the caller times out) when
  // unset or when it returns nothing.
  using answer_fn = std::function<std::optional<bytes>(
      const std::string& subject, const std::string& why)>;

  admission() = default;
  admission(std::shared_ptr<mailbox_gate> gate, feed_kind kind,
            answer_fn overloaded = nullptr,
            std::shared_ptr<std::atomic<uint64_t>> refused = nullptr)
      : gate(std::move(gate)),
        kind(kind),
        overloaded(std::move(overloaded)),
        refused(std::move(refused)) {}

  std::shared_ptr<mailbox_gate> gate;
  feed_kind kind = feed_kind::route;
  answer_fn overloaded;
  // Also counts this subscription's refusals when set (an index shard's
  // KV events, which its heartbeat reports).
  std::shared_ptr<std::atomic<uint64_t>> refused;
};

// Subscribes `subject` (in queue group `queue` when set) and hands every
// message to `to` as (nats_atom, subject, reply, payload). The callback
// copies and returns: it never blocks a libnats thread. With a gate, a
// message (each item of a batch) that finds it full is refused: counted,
// answered "overloaded: ..." when it has a reply subject, never queued.
expected<uint64_t> forward(nats_bus& bus, const std::string& subject,
                           const std::string& queue, caf::actor to,
                           admission adm = {});

// What forward() does with one message: sends it to `to`, or refuses it
// (false) as above. For subscriptions that filter before (listen_single).
bool admit(nats_bus& bus, const admission& adm, const caf::actor& to,
           nats_message m);

// One wildcard subscription per process for the replies to its calls; each
// call registers the actor that awaits it.
class inbox {
 public:
  // Every inbox's subjects start so (then the owner's name when it has
  // one, a token per process, then seq).
  static constexpr const char* subject_prefix = "_INBOX.kvmesh.";
  // A client's inbox (a route client's stand-in router, `kvmesh bench`):
  // outside the mesh's own, where routers refuse to answer a client.
  static constexpr const char* client_prefix = "_INBOX.kvclient.";

  // The mesh's inbox of a process; `owner` (a node agent's name) puts its
  // subjects under subject_prefix + owner, which per-agent NATS permissions
  // let that agent alone read.
  static expected<std::shared_ptr<inbox>> open(nats_bus& bus,
                                               const std::string& owner = {});
  // A client's inbox, under client_prefix.
  static expected<std::shared_ptr<inbox>> open_client(nats_bus& bus);
  ~inbox();
  inbox(const inbox&) = delete;
  inbox& operator=(const inbox&) = delete;

  // The reply subject of a new call whose reply goes to `to` as
  // (reply_atom, seq, payload).
  std::string expect(const caf::actor& to, uint64_t& seq);
  // The call ended without a reply (deadline): a late one is dropped.
  void forget(uint64_t seq);
  nats_bus& bus() { return *bus_; }

 private:
  inbox() = default;
  static expected<std::shared_ptr<inbox>> open_under(nats_bus& bus,
                                                     std::string root);
  void deliver(nats_message m);

  nats_bus* bus_ = nullptr;
  std::string prefix_;
  uint64_t sub_ = 0;
  std::mutex mu_;
  std::unordered_map<uint64_t, caf::actor> waiting_;
  uint64_t next_ = 1;
};

// Whether `reply` is one of the mesh's own inboxes (inbox::subject_prefix),
// where bids and index answers travel.
inline bool mesh_inbox(const std::string& reply) {
  return reply.rfind(inbox::subject_prefix, 0) == 0;
}

// A client's request (a route request, an ADMIN verb) whose reply subject
// is one of the mesh's own inboxes: the client chose it, and answering
// there would publish, with this process's rights, into another process's
// calls. True when refused: counted in `refused`, logged at powers of two.
bool refuse_mesh_reply(const std::string& reply, const char* what,
                       uint64_t& refused);

// Answers a call from inside actor `self`: replies to a kvmesh inbox go
// batched with the actor's others (it handles (flush_atom) by
// out.flush(bus)); replies to anyone else (a NATS CLI) go alone.
template <class Self>
void answer_batched(Self* self, nats_bus& bus, batcher& out,
                    const std::string& reply, bytes payload) {
  if (reply.empty()) return;
  if (!mesh_inbox(reply)) {
    (void)bus.publish_reply(reply, payload);  // only to inboxes
    return;
  }
  if (out.add(reply, {}, std::move(payload)))
    self->send(self, flush_atom::value);
}

// Calls an actor has on the wire: each ends with its reply or, at its
// deadline, with an error. The actor handles (reply_atom, seq, payload) by
// complete() and (sweep_atom) by sweep().
class pending_calls {
 public:
  using done_fn = std::function<void(expected<bytes>)>;

  // Actor states are default-constructed: attach the inbox before calls.
  // `batched`: the receivers also listen on their subjects' parent +
  // ".batch" (agents, index shards); only then may calls go batched.
  void attach(std::shared_ptr<inbox> box, bool batched = false) {
    box_ = std::move(box);
    batched_ = batched;
  }

  // Publishes `payload` on `subject` with a reply inbox; `done` runs inside
  // the actor `self` when the reply comes or the timeout passes.
  // When batched, the call goes out with the actor's others (see batcher):
  // the actor handles (flush_atom) by flush().
  template <class Self>
  void call(Self* self, const std::string& subject, bytes payload,
            caf::timespan timeout, done_fn done) {
    uint64_t seq = 0;
    const std::string reply =
        box_->expect(caf::actor_cast<caf::actor>(self), seq);
    if (auto st = publish(self, subject, std::move(payload), reply); !st) {
      box_->forget(seq);
      done(st.err());
      return;
    }
    const bool first = calls_.empty();
    calls_.emplace(seq, call_t{std::chrono::steady_clock::now() + timeout,
                               std::move(done), subject});
    if (first && !sweeping_) {
      sweeping_ = true;
      self->delayed_send(self, sweep_period, sweep_atom::value);
    }
  }

  // A message without reply, batched with the calls when they are (`own`:
  // as batcher::add).
  template <class Self>
  status publish(Self* self, const std::string& subject, bytes payload,
                 const std::string& reply = {}, bool own = false) {
    if (!batched_) return box_->bus().publish(subject, payload, reply);
    if (out_.add(subject, reply, std::move(payload), own))
      self->send(self, flush_atom::value);
    return ok;
  }
  void flush() { out_.flush(box_->bus()); }

  void complete(uint64_t seq, bytes payload);
  // Fails calls past their deadline; reschedules itself while calls are
  // open.
  template <class Self>
  void sweep(Self* self) {
    expire();
    sweeping_ = !calls_.empty();
    if (sweeping_) self->delayed_send(self, sweep_period, sweep_atom::value);
  }
  size_t open() const { return calls_.size(); }
  inbox& box() { return *box_; }

  static constexpr auto sweep_period = std::chrono::milliseconds(50);

 private:
  struct call_t {
    std::chrono::steady_clock::time_point deadline;
    done_fn done;
    std::string subject;
  };
  void expire();

  std::shared_ptr<inbox> box_;
  bool batched_ = false;
  batcher out_;
  std::unordered_map<uint64_t, call_t> calls_;
  bool sweeping_ = false;
};

}  // namespace kvmesh
