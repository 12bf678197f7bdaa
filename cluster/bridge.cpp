// The seam between NATS and actors: subscriptions that hand messages to
// actors, the reply inbox, and calls awaiting replies.
#include "cluster/bridge.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <random>
#include <string_view>

#include "core/log.hpp"
#include "messages/batch.hpp"
#include "messages/codec.hpp"

namespace kvmesh {

std::string describe(const caf::error& e) {
  if (e.category() == caf::atom("kvmesh")) {
    const auto& ctx = e.context();
    if (ctx.size() == 1 && ctx.match_element<std::string>(0))
      return ctx.get_as<std::string>(0);
  }
  if (e.category() == caf::atom("system") &&
      e.code() == static_cast<uint8_t>(caf::sec::request_timeout))
    return "no answer in time";
  return caf::to_string(e);
}

namespace {

constexpr std::string_view batch_token = batch_suffix;

std::string_view parent_of(std::string_view subject) {
  return subject_parent(subject);
}

// What an item adds to its batch, framing included (an estimate that keeps
// batches below the payload limit).
size_t item_bytes(const std::string& subject, const std::string& reply,
                  const bytes& payload) {
  return subject.size() + reply.size() + payload.size() + 32;
}

}  // namespace

bool batcher::add(const std::string& subject, const std::string& reply,
                  bytes payload, bool own) {
  const std::string_view parent = own ? subject : parent_of(subject);
  auto it = std::find_if(
      receivers_.begin(), receivers_.end(),
      [&](const receiver& r) { return r.parent == parent && r.own == own; });
  if (it == receivers_.end()) {
    receivers_.push_back(receiver{std::string(parent), {}, 0, own});
    it = receivers_.end() - 1;
  }
  it->bytes += item_bytes(subject, reply, payload);
  it->items.push_back(batch_item{subject, reply, std::move(payload)});
  ++queued_;
  return queued_ == 1;
}

void batcher::send(nats_bus& bus, receiver& r) {
  if (r.items.empty()) return;
  ++sent_;
  if (!r.own && (r.items.size() == 1 || r.parent.empty())) {
    for (auto& i : r.items)
      (void)bus.publish(i.subject, i.payload, i.reply);
  } else {
    batch_msg b;
    b.items = std::move(r.items);
    (void)bus.publish(r.parent + std::string(batch_token), encode(b));
  }
  r.items.clear();
  r.bytes = 0;
}

size_t batcher::flush(nats_bus& bus) {
  sent_ = 0;
  // A receiver with nothing since the last flush goes: an actor that calls
  // many (a router's agent links) keeps only those it calls now.
  receivers_.erase(std::remove_if(receivers_.begin(), receivers_.end(),
                                  [](const receiver& r) {
                                    return r.items.empty();
                                  }),
                   receivers_.end());
  for (auto& r : receivers_) {
    if (r.bytes <= max_batch_bytes || r.items.size() < 2) {
      send(bus, r);
      continue;
    }
    // A big batch goes in parts, each below the payload limit, in order.
    receiver part{r.parent, {}, 0, r.own};
    for (auto& i : r.items) {
      const size_t b = item_bytes(i.subject, i.reply, i.payload);
      if (!part.items.empty() && part.bytes + b > max_batch_bytes)
        send(bus, part);
      part.items.push_back(std::move(i));
      part.bytes += b;
    }
    send(bus, part);
    r.items.clear();
    r.bytes = 0;
  }
  queued_ = 0;
  return sent_;
}

bool is_batch(const std::string& subject) {
  return is_batch_subject(subject);
}

std::vector<nats_message> unbatch(nats_message m) {
  std::vector<nats_message> out;
  each_unbatched(std::move(m),
                 [&](nats_message one) { out.push_back(std::move(one)); });
  return out;
}

namespace {

std::array<std::atomic<uint64_t>, feed_kind_count> refusals;

// Counted always, logged at powers of two of the kind's count: a flood
// would otherwise log a line per refused message.
void count_refusal(const admission& adm, const std::string& subject) {
  const uint64_t n = refusals[static_cast<size_t>(adm.kind)].fetch_add(
                         1, std::memory_order_relaxed) +
                     1;
  if ((n & (n - 1)) != 0) return;
  const auto& g = *adm.gate;
  if (adm.kind == feed_kind::kv)
    KVMESH_WARN(
        "KV events on %s refused: the index shard has %llu messages (%llu "
        "bytes) not yet handled (limits.max_mailbox_messages = %llu, "
        "limits.max_mailbox_bytes = %llu); its index misses them until the "
        "workers announce their caches again (%llu refused so far)",
        subject.c_str(), static_cast<unsigned long long>(g.messages()),
        static_cast<unsigned long long>(g.bytes()),
        static_cast<unsigned long long>(g.max_messages()),
        static_cast<unsigned long long>(g.max_bytes()),
        static_cast<unsigned long long>(n));
  else
    KVMESH_WARN(
        "%s message on %s refused: overloaded, %llu messages (%llu bytes) "
        "not yet handled (limits.max_mailbox_messages = %llu, "
        "limits.max_mailbox_bytes = %llu; %llu refused so far)",
        to_string(adm.kind), subject.c_str(),
        static_cast<unsigned long long>(g.messages()),
        static_cast<unsigned long long>(g.bytes()),
        static_cast<unsigned long long>(g.max_messages()),
        static_cast<unsigned long long>(g.max_bytes()),
        static_cast<unsigned long long>(n));
}

}  // namespace

const char* to_string(feed_kind k) {
  switch (k) {
    case feed_kind::route:
      return "route";
    case feed_kind::agent:
      return "agent";
    case feed_kind::kv:
      return "kv";
    case feed_kind::query:
      return "query";
    case feed_kind::heartbeat:
      return "heartbeat";
    case feed_kind::admin:
      return "admin";
    case feed_kind::events:
      return "events";
  }
  return "unknown";
}

uint64_t nats_refusals(feed_kind k) {
  const auto i = static_cast<size_t>(k);
  return i < feed_kind_count ? refusals[i].load(std::memory_order_relaxed) : 0;
}

bool mailbox_gate::enter(size_t size) {
  const auto b = static_cast<int64_t>(size);
  const int64_t n = messages_.fetch_add(1, std::memory_order_relaxed) + 1;
  const int64_t total = bytes_.fetch_add(b, std::memory_order_relaxed) + b;
  // One message always fits an empty gate, however big (the payload limit
  // bounds it): a byte bound below max_payload_bytes must not refuse all.
  if (n > max_messages_ || (total > max_bytes_ && n > 1)) {
    messages_.fetch_sub(1, std::memory_order_relaxed);
    bytes_.fetch_sub(b, std::memory_order_relaxed);
    return false;
  }
  uint64_t peak = peak_.load(std::memory_order_relaxed);
  while (static_cast<uint64_t>(n) > peak &&
         !peak_.compare_exchange_weak(peak, static_cast<uint64_t>(n),
                                      std::memory_order_relaxed)) {
  }
  return true;
}

void mailbox_gate::leave(size_t size, uint64_t count) {
  messages_.fetch_sub(static_cast<int64_t>(count), std::memory_order_relaxed);
  bytes_.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
}

bool admit(nats_bus& bus, const admission& adm, const caf::actor& to,
           nats_message m) {
  if (adm.gate && !adm.gate->enter(m.payload.size())) {
    count_refusal(adm, m.subject);
    if (adm.refused) adm.refused->fetch_add(1, std::memory_order_relaxed);
    if (!m.reply.empty() && adm.overloaded) {
      const auto& g = *adm.gate;
      const std::string why =
          std::string("overloaded: ") + to_string(adm.kind) + " refused, " +
          std::to_string(g.messages()) + " messages (" +
          std::to_string(g.bytes()) +
          " bytes) wait here already (limits.max_mailbox_messages = " +
          std::to_string(g.max_messages()) +
          ", limits.max_mailbox_bytes = " + std::to_string(g.max_bytes()) +
          "); try again later";
      if (auto answer = adm.overloaded(m.subject, why))
        (void)bus.publish_reply(m.reply, *answer);
    }
    return false;
  }
  caf::anon_send(to, nats_atom::value, std::move(m.subject), std::move(m.reply),
                 std::move(m.payload));
  return true;
}

expected<uint64_t> forward(nats_bus& bus, const std::string& subject,
                           const std::string& queue, caf::actor to,
                           admission adm) {
  nats_bus* b = &bus;
  // Heartbeats, which liveness lets go missing, wait in libnats' own
  // queue (before the gate) for at most a quarter of what the gate holds:
  // the gate takes them as fast as they come, and a flood of them costs
  // the gate's bounds and a quarter more, not 64 MiB more.
  // Other feeds keep libnats' queue: their refusals are answered and
  // counted at the gate, and a drop there would be silent.
  std::pair<uint64_t, uint64_t> pending;
  if (adm.gate && adm.kind == feed_kind::heartbeat)
    pending = {adm.gate->max_messages() / 4, adm.gate->max_bytes() / 4};
  return bus.subscribe(
      subject, queue,
      [b, to, adm = std::move(adm)](nats_message m) {
        each_unbatched(std::move(m), [&](nats_message one) {
          (void)admit(*b, adm, to, std::move(one));
        });
      },
      pending);
}

expected<std::shared_ptr<inbox>> inbox::open(nats_bus& bus,
                                             const std::string& owner) {
  return open_under(bus, owner.empty() ? std::string(subject_prefix)
                                       : subject_prefix + owner + ".");
}

expected<std::shared_ptr<inbox>> inbox::open_client(nats_bus& bus) {
  return open_under(bus, client_prefix);
}

expected<std::shared_ptr<inbox>> inbox::open_under(nats_bus& bus,
                                                   std::string root) {
  std::shared_ptr<inbox> box(new inbox());
  box->bus_ = &bus;
  // Unique per process and run: replies of an earlier run never match.
  std::random_device rd;
  const uint64_t token = (uint64_t{rd()} << 32) ^ rd();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(token));
  box->prefix_ = std::move(root) + hex + ".";
  inbox* raw = box.get();
  auto sub = bus.subscribe(box->prefix_ + "*", "", [raw](nats_message m) {
    each_unbatched(std::move(m),
                   [raw](nats_message one) { raw->deliver(std::move(one)); });
  });
  if (!sub) return sub.err();
  box->sub_ = *sub;
  return box;
}

inbox::~inbox() {
  if (sub_ != 0) (void)bus_->unsubscribe(sub_);
}

std::string inbox::expect(const caf::actor& to, uint64_t& seq) {
  std::lock_guard<std::mutex> guard(mu_);
  seq = next_++;
  waiting_.emplace(seq, to);
  return prefix_ + std::to_string(seq);
}

void inbox::forget(uint64_t seq) {
  std::lock_guard<std::mutex> guard(mu_);
  waiting_.erase(seq);
}

void inbox::deliver(nats_message m) {
  if (m.subject.size() <= prefix_.size()) return;
  uint64_t seq = 0;
  for (size_t i = prefix_.size(); i < m.subject.size(); ++i) {
    const char c = m.subject[i];
    if (c < '0' || c > '9') return;  // not ours: ignore
    seq = seq * 10 + static_cast<uint64_t>(c - '0');
  }
  caf::actor to;
  {
    std::lock_guard<std::mutex> guard(mu_);
    auto it = waiting_.find(seq);
    if (it == waiting_.end()) return;  // late, after its deadline
    to = std::move(it->second);
    waiting_.erase(it);
  }
  caf::anon_send(to, reply_atom::value, seq, std::move(m.payload));
}

void pending_calls::complete(uint64_t seq, bytes payload) {
  auto it = calls_.find(seq);
  if (it == calls_.end()) return;
  auto done = std::move(it->second.done);
  calls_.erase(it);
  done(std::move(payload));
}

void pending_calls::expire() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::pair<uint64_t, call_t>> late;
  for (auto it = calls_.begin(); it != calls_.end();) {
    if (it->second.deadline <= now) {
      late.emplace_back(it->first, std::move(it->second));
      it = calls_.erase(it);
    } else {
      ++it;
    }
  }
  // Callbacks run after the table is consistent: they may start new calls.
  for (auto& [seq, c] : late) {
    box_->forget(seq);
    c.done(make_error(ec::timeout, "no reply on " + c.subject));
  }
}

bool refuse_mesh_reply(const std::string& reply, const char* what,
                       uint64_t& refused) {
  if (!mesh_inbox(reply)) return false;
  const uint64_t n = ++refused;
  if ((n & (n - 1)) == 0)
    KVMESH_WARN(
        "%s refused: its reply subject %s is one of the mesh's own inboxes "
        "(%s), where a client may not have the mesh publish (%llu so far; "
        "not answered)",
        what, reply.substr(0, 128).c_str(), inbox::subject_prefix,
        static_cast<unsigned long long>(n));
  return true;
}

}  // namespace kvmesh
