// Durable intake: the names of its JetStream stream and buckets, and inside
// a router process the claims, records, hand-backs and progress of the
// durable requests its front decides.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cluster/bridge.hpp"
#include "cluster/jetstream.hpp"
#include "cluster/nats.hpp"
#include "cluster/router_node.hpp"
#include "cluster/subjects.hpp"
#include "core/error.hpp"

// A durable request's delivery travels with it to the front, which acks it
// once the decision is out; it never leaves the process.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<kvmesh::delivery>)

namespace kvmesh {

// The JetStream work queue of durable route requests under `subj`.
work_queue_options durable_queue(const subjects& subj);

// The bucket where routers keep each durable request's answer before
// sending it (`<stream>_DECISIONS`); `create` false for clients.
record_options durable_records(const subjects& subj);

// The bucket where a router claims a durable request before auctioning
// it (`<stream>_CLAIMS`), each claim lasting `lease` unless renewed.
record_options durable_claims(const subjects& subj,
                              std::chrono::milliseconds lease);

// The key of the answer kept for request `request`, stored in the durable
// queue at `sequence` (the publish's value).
std::string record_key(uint64_t sequence, uint64_t request);

// A durable request whose reply subject is one of the mesh's own inboxes
// (bridge.hpp's mesh_inbox) is refused: the client chooses it, and a router
// that answered there would publish, with its own rights, into another
// process's calls.

// -- inside a router process (router_front, router_node) ----------------------

namespace detail {

struct front_state;  // cluster/router_front.hpp
using front_pointer = caf::stateful_actor<front_state>*;

// What durable intake needs beyond the queue (null stores: not durable).
struct durable_intake {
  // Where each durable request's answer is kept before it goes out.
  std::shared_ptr<record_store> records;
  // Where a router claims a request before auctioning it, for `lease` (the
  // bucket's TTL), under the name `claimant` (the router's, and a number
  // its process drew: a restarted router is another claimant).
  std::shared_ptr<record_store> claims;
  std::vector<uint8_t> claimant;
  std::chrono::milliseconds lease{5000};
  uint32_t deliveries = 10;  // router_node_options::durable_deliveries
  // The test-only fault of dying between answering and acking.
  bool exit_before_ack = false;
};

// Whether a durable request may be auctioned here: one router at a time
// holds its claim (a create in the claims bucket, so that of two routers
// exactly one takes it) until the lease runs out (the bucket's TTL: a
// router that died holding one lets go by itself) or it hands the request
// back. Without it, a request the queue hands to two routers at once (as
// while a cluster settles after its stream's leader moved) is caught only
// by a router that hears every bid (the workers' contested flag).
// Asked for on the queue's fetch thread without waiting (put_async, only
// new); the server's answer brings the request to the front. `refused`:
// the key had a message, a holder's or the marker a handback leaves, which
// the front tells apart with create() (a round trip, but only for a
// request handed out again); `own` is the front's to settle too.
enum class claim_outcome : uint8_t { taken, held, own, unknown, refused };

// The full create, for a quick claim refused (the fetch thread asked only
// for requests with a sequence, with a claims bucket).
claim_outcome take_claim(record_store& claims,
                         const std::vector<uint8_t>& claimant,
                         const delivery& d, uint64_t id, std::string& error);

// The front's handlers of durable requests. A request the fetch thread
// handed over with its claim's outcome (start_durable_queue): auctioned,
// handed back or left to the router holding it.
void front_durable(front_pointer self, const std::string& reply,
                   const bytes& payload, std::shared_ptr<delivery> d,
                   uint8_t claimed, const std::string& claim_error);
// Its answer, kept in the records (or not: `not_kept` says why): sent, then
// acked.
void front_recorded(front_pointer self, const std::string& reply,
                    const bytes& payload, std::shared_ptr<delivery>& d,
                    uint64_t id, const std::string& not_kept);
// The sweep of the requests being decided: told in progress, claims renewed.
void front_progress(front_pointer self);

// The records and claims buckets of a durable router (opt.durable), and
// its name as a claimant.
expected<durable_intake> open_durable_intake(nats_bus& bus,
                                             const router_node_options& opt);

// Binds to the durable queue and starts its fetch thread, which answers a
// redelivered request from its record or takes its claim and hands it to
// `front` (durable_atom).
expected<std::unique_ptr<work_queue>> start_durable_queue(
    nats_bus& bus, const router_node_options& opt, caf::actor front,
    std::shared_ptr<record_store> records, std::shared_ptr<record_store> claims,
    std::vector<uint8_t> claimant);

}  // namespace detail
}  // namespace kvmesh
