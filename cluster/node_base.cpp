// What every role's node holds and the helpers the roles share.
#include "cluster/node_base.hpp"

#include <algorithm>

#include "messages/limits.hpp"

namespace kvmesh::detail {

std::string verb_of(const std::string& subject) {
  auto p = subject.rfind('.');
  return p == std::string::npos ? subject : subject.substr(p + 1);
}

void answer(nats_bus& bus, const std::string& reply, const bytes& payload) {
  if (!reply.empty()) (void)bus.publish_reply(reply, payload);
}

std::shared_ptr<mailbox_gate> new_gate() {
  const auto l = current_wire_limits();
  return std::make_shared<mailbox_gate>(l.max_mailbox_messages,
                                        l.max_mailbox_bytes);
}

std::shared_ptr<mailbox_gate> new_heartbeat_gate() {
  const auto l = current_wire_limits();
  const uint64_t n = std::min(
      l.max_mailbox_messages, (l.max_workers + l.max_routers) / 4 + 1024);
  return std::make_shared<mailbox_gate>(n,
                                        std::min(l.max_mailbox_bytes, n * 384));
}

caf::timespan stale_after(const mesh_options& m) {
  return std::chrono::duration_cast<caf::timespan>(
      m.heartbeat * (std::max<uint32_t>(m.missed_beats, 1) - 0.5));
}

caf::timespan forget_after(const mesh_options& m) {
  return m.heartbeat * std::max<uint32_t>(m.forget_beats, m.missed_beats + 1);
}

status node_base::listen(const std::string& subject, const std::string& queue,
                         caf::actor to, admission adm) {
  auto id = forward(*bus, subject, queue, std::move(to), std::move(adm));
  if (!id) return id.err();
  subs.push_back(*id);
  return ok;
}

status node_base::listen_single(const std::string& subject,
                                const std::string& queue, caf::actor to,
                                admission adm) {
  nats_bus* b = bus;
  auto id = bus->subscribe(subject, queue,
                           [b, to, adm = std::move(adm)](nats_message m) {
                             if (is_batch(m.subject)) return;
                             (void)admit(*b, adm, to, std::move(m));
                           });
  if (!id) return id.err();
  subs.push_back(*id);
  return ok;
}

void node_base::stop() {
  for (uint64_t id : subs)
    (void)bus->unsubscribe(id);
  subs.clear();
  for (auto& a : actors)
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  actors.clear();
  box.reset();
}

}  // namespace kvmesh::detail
