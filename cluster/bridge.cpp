// The seam between NATS and actors: subscriptions that hand messages to
// actors, the reply inbox, and calls awaiting replies.
#include "cluster/bridge.hpp"

#include <random>

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

expected<uint64_t> forward(nats_bus& bus, const std::string& subject,
                           const std::string& queue, caf::actor to) {
  return bus.subscribe(subject, queue, [to](nats_message m) {
    caf::anon_send(to, nats_atom::value, std::move(m.subject),
                   std::move(m.reply), std::move(m.payload));
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
  box->prefix_ = std::string("_INBOX.kvmesh.") + hex + ".";
  inbox* raw = box.get();
  auto sub = bus.subscribe(box->prefix_ + "*", "", [raw](nats_message m) {
    raw->deliver(std::move(m));
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
