// What the mesh's NATS fronts count: decisions into histograms and terms,
// failures into their classes.
#include "cluster/meters.hpp"

namespace kvmesh {

const char* to_string(handback h) {
  switch (h) {
    case handback::no_workers:
      return "no_workers";
    case handback::overloaded:
      return "overloaded";
    case handback::contested:
      return "contested";
    case handback::unclaimed:
      return "unclaimed";
  }
  return "no_workers";
}

route_failure classify_route_error(ec code, const std::string& message) {
  if (code == ec::capacity_exceeded) return route_failure::overloaded;
  // timeout: as not_found, but an award went unanswered on the way.
  if (code != ec::not_found && code != ec::timeout) return route_failure::other;
  auto has = [&](const char* words) {
    return message.find(words) != std::string::npos;
  };
  if (has("no worker took request")) return route_failure::refused;
  if (has("unknown model")) return route_failure::unknown_model;
  if (has("no live worker") || has("router has no workers") ||
      has("no worker answered"))
    return route_failure::no_workers;
  return route_failure::other;
}

void router_meters::decided(const decision& d, double seconds) const {
  metrics::observe(*auction_seconds, seconds);
  // The decision carries the priced bids of the auction that decided it.
  metrics::observe(*bids_per_auction, static_cast<double>(d.prices.size()));
  for (const price_breakdown& p : d.prices) {
    if (p.worker != d.worker) continue;
    metrics::observe(*winner_price, p.price);
    const double terms[7] = {p.read,        p.credit_gpu, p.credit_host,
                             p.credit_disk, p.space,      p.overflow,
                             p.wait};
    for (size_t i = 0; i < 7; ++i)
      winner_terms[i]->Increment(terms[i]);
    break;
  }
}

}  // namespace kvmesh
