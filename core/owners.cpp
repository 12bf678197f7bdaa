// Which agent holds each worker id (owners.hpp).
#include "core/owners.hpp"

namespace kvmesh {

worker_owners::verdict worker_owners::claim(uint32_t worker,
                                            const std::string& agent,
                                            clock::time_point now) {
  auto it = held_.find(worker);
  if (it == held_.end()) {
    if (held_.size() >= cap_) return verdict::full;
    held_.emplace(worker, holder{agent, now});
    return verdict::held;
  }
  auto& h = it->second;
  if (h.agent != agent) {
    if (now - h.seen <= fresh_) return verdict::owned;
    h.agent = agent;  // its holder fell silent: a node back under a new name
  }
  h.seen = now;
  return verdict::held;
}

void worker_owners::forget(clock::time_point before) {
  for (auto it = held_.begin(); it != held_.end();)
    it = it->second.seen < before ? held_.erase(it) : std::next(it);
}

}  // namespace kvmesh
