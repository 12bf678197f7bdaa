// What the mesh's NATS fronts count for the Prometheus series: handles into
// the process's registry, and how a route request's failure is classed.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "messages/types.hpp"
#include "metrics/registry.hpp"

namespace kvmesh {

// The class of a ROUTER's error: by its code, and for not_found by the
// words of actors/router.cpp's messages (tests/cluster/meters_test.cpp
// checks them against the ROUTER's real answers).
route_failure classify_route_error(ec code, const std::string& message);

// Why a durable route request went back to its queue undecided, for
// another delivery a heartbeat later: no worker could take it yet, the
// router was overloaded, another router's auction of it was open (its
// claim held by another router, or its bidders said contested: the queue
// handed it out twice), or the claims bucket could not say who holds it.
enum class handback : uint8_t { no_workers, overloaded, contested, unclaimed };
inline constexpr size_t handback_count = 4;

const char* to_string(handback h);

// Where a route request came in (kvmesh_router_requests_total's intake).
enum class intake : uint8_t { core, json, durable };
inline constexpr size_t intake_count = 3;

// A router process's front: requests as they arrive, decisions and
// failures as they are answered. The front counts these rather than the
// ROUTER (actors/router.cpp), so that metrics add nothing to the auction;
// the rest comes from the ROUTER's status at a scrape.
struct router_meters {
  metrics::counter* requests[intake_count] = {};
  metrics::counter* failures[route_failure_count] = {};
  metrics::counter* handbacks[handback_count] = {};
  // Durable requests refused because their reply subject is one of the
  // mesh's own inboxes (bridge.hpp's mesh_inbox).
  metrics::counter* mesh_inbox_replies = nullptr;
  metrics::histogram* auction_seconds = nullptr;
  metrics::histogram* bids_per_auction = nullptr;
  metrics::histogram* winner_price = nullptr;
  // read, credit_gpu, credit_host, credit_disk, space, overflow, wait
  metrics::counter* winner_terms[7] = {};

  void took(intake i) const { requests[static_cast<size_t>(i)]->Increment(); }
  // A decision `seconds` after its request arrived at the front.
  void decided(const decision& d, double seconds) const;
  void failed(route_failure f) const {
    failures[static_cast<size_t>(f)]->Increment();
  }
  void handed_back(handback h) const {
    handbacks[static_cast<size_t>(h)]->Increment();
  }
  void refused_mesh_inbox() const { mesh_inbox_replies->Increment(); }
};

// An index shard process's front: prefix queries it answered.
struct shard_meters {
  metrics::counter* queries = nullptr;
};

}  // namespace kvmesh
