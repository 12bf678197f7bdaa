// The seam between NATS and actors: subscriptions that hand messages to
// actors, the reply inbox, and calls awaiting replies.
#include "cluster/bridge.hpp"

#include <algorithm>
#include <random>
#include <string_view>

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

}  // namespace

bool batcher::add(const std::string& subject, const std::string& reply,
                  const bytes& payload) {
  const std::string_view parent = parent_of(subject);
  auto it = std::find_if(receivers_.begin(), receivers_.end(),
                         [&](const receiver& r) { return r.parent == parent; });
  if (it == receivers_.end()) {
    receivers_.push_back(receiver{std::string(parent), {}, 0});
    it = receivers_.end() - 1;
  }
  it->items.push_back(batch_item{subject, reply, payload});
  it->bytes += subject.size() + reply.size() + payload.size() + 32;
  ++queued_;
  return queued_ == 1;
}

void batcher::send(nats_bus& bus, receiver& r) {
  if (r.items.empty()) return;
  ++sent_;
  if (r.items.size() == 1 || r.parent.empty()) {
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
  for (auto& r : receivers_) {
    // A big batch goes in parts, each below the payload limit.
    while (r.bytes > max_batch_bytes && r.items.size() > 1) {
      receiver part{r.parent, {}, 0};
      while (!r.items.empty() && part.bytes < max_batch_bytes) {
        part.bytes += r.items.back().payload.size() + 64;
        part.items.push_back(std::move(r.items.back()));
        r.items.pop_back();
      }
      r.bytes = r.bytes > part.bytes ? r.bytes - part.bytes : 0;
      send(bus, part);
    }
    send(bus, r);
  }
  queued_ = 0;
  return sent_;
}

bool is_batch(const std::string& subject) {
  return is_batch_subject(subject);
}

std::vector<nats_message> unbatch(nats_message m) {
  std::vector<nats_message> out;
  if (!is_batch(m.subject)) {
    out.push_back(std::move(m));
    return out;
  }
  // Items stay below the batch's parent and do not nest (messages/batch).
  auto items = unbatch_items(m.subject, m.payload.data(), m.payload.size());
  out.reserve(items.size());
  for (auto& i : items)
    out.push_back(nats_message{std::move(i.subject), std::move(i.reply),
                               std::move(i.payload)});
  return out;
}

expected<uint64_t> forward(nats_bus& bus, const std::string& subject,
                           const std::string& queue, caf::actor to) {
  return bus.subscribe(subject, queue, [to](nats_message m) {
    for (auto& one : unbatch(std::move(m)))
      caf::anon_send(to, nats_atom::value, std::move(one.subject),
                     std::move(one.reply), std::move(one.payload));
  });
}

expected<std::shared_ptr<inbox>> inbox::open(nats_bus& bus) {
  std::shared_ptr<inbox> box(new inbox());
  box->bus_ = &bus;
  // Unique per process and run: replies of an earlier run never match.
  std::random_device rd;
  const uint64_t token = (uint64_t{rd()} << 32) ^ rd();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(token));
  box->prefix_ = std::string(subject_prefix) + hex + ".";
  inbox* raw = box.get();
  auto sub = bus.subscribe(box->prefix_ + "*", "", [raw](nats_message m) {
    for (auto& one : unbatch(std::move(m)))
      raw->deliver(std::move(one));
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

}  // namespace kvmesh
