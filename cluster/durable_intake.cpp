// Durable intake in a router process: each durable request's claim taken
// before its auction (one router at a time), its answer kept before it is
// sent and acked, handed back to the queue while no worker can take it,
// and told in progress while its decision outlasts the ack wait.
#include "cluster/durable_intake.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <random>

#include "cluster/node_base.hpp"
#include "cluster/router_front.hpp"
#include "core/log.hpp"
#include "messages/codec.hpp"

namespace kvmesh {

work_queue_options durable_queue(const subjects& subj) {
  work_queue_options o;
  o.stream = upper_token(subj.prefix) + "_ROUTE";
  // The client's reply subject follows the prefix: JetStream keeps the
  // subject, not a reply.
  o.subject = subj.route_durable() + ".>";
  return o;
}

// The record of a durable request's answer: its stream sequence (the same
// across redeliveries) and its id (so that a stream deleted and made again,
// which restarts sequences, cannot match an old record).
std::string record_key(uint64_t sequence, uint64_t request) {
  return std::to_string(sequence) + "-" + std::to_string(request);
}

record_options durable_records(const subjects& subj) {
  record_options o;
  o.bucket = durable_queue(subj).stream + "_DECISIONS";
  return o;
}

record_options durable_claims(const subjects& subj,
                              std::chrono::milliseconds lease) {
  record_options o;
  o.bucket = durable_queue(subj).stream + "_CLAIMS";
  o.ttl = lease;
  return o;
}

namespace detail {
namespace {

// A durable request's answer, once kept (or not): sent, then acked.
void send_durable(front_pointer self, const std::string& reply,
                  const bytes& payload, delivery& d) {
  auto& st = self->state;
  answer(*st.bus, reply, payload);
  if (st.durable.exit_before_ack) {
    // KVMESH_TEST_FAULT=exit_before_ack: the answer is out, the ack never
    // leaves, as when a router is killed between the two.
    (void)st.bus->flush(std::chrono::seconds(2));
    std::_Exit(137);
  }
  (void)d.ack();
}

// A durable request's answer: kept first, so that a redelivery (this
// router dying before its ack reaches the server) is answered with it
// rather than auctioned again; then sent, then acked. The write is not
// waited for here: its answer comes back as recorded_atom, and the front
// decides others meanwhile (a round trip each held one router to 3,000
// durable requests a second). A record that cannot be kept does not hold
// the answer back: the award is made, and only a death before the ack
// would cost a second decision.
void answer_durable(front_pointer self, const std::string& reply, bytes payload,
                    const std::shared_ptr<delivery>& d, uint64_t id) {
  auto& st = self->state;
  if (!st.durable.records || d->stream_sequence() == 0) {
    send_durable(self, reply, payload, *d);
    return;
  }
  const auto key = record_key(d->stream_sequence(), id);
  st.durable.records->put_async(
      key, payload, false,
      [front = caf::actor_cast<caf::actor>(self), reply, payload, d,
       id](status kept) mutable {
        caf::anon_send(front, recorded_atom::value, std::move(reply),
                       std::move(payload), std::move(d), id,
                       kept ? std::string() : kept.err().message);
      });
}

// This router's own claim: one it failed to let go of is taken again, but
// not while the request's first delivery is being decided here.
claim_outcome settle_own(front_state& st, const delivery& d) {
  const bool open =
      std::any_of(st.working.begin(), st.working.end(), [&](const auto& x) {
        return x.d->stream_sequence() == d.stream_sequence() && !x.d->settled();
      });
  return open ? claim_outcome::held : claim_outcome::taken;
}

// Lets go of the claim on a request handed back, so that the next
// delivery, to any router, may take it at once.
void unclaim(front_state& st, const delivery& d, uint64_t id) {
  if (!st.durable.claims || d.stream_sequence() == 0) return;
  if (auto s = st.durable.claims->erase(record_key(d.stream_sequence(), id));
      !s && st.claim_failures++ == 0)
    KVMESH_WARN(
        "durable request %llu: claim not let go: %s (it lapses after the "
        "lease; logged once)",
        static_cast<unsigned long long>(id), s.err().message.c_str());
}

// Sends a durable request back to its queue undecided, for another
// delivery a heartbeat later.
void hand_back(front_pointer self, delivery& d, uint64_t id,
               const std::string& client, handback cause,
               const std::string& why) {
  auto& st = self->state;
  if (const auto& m = st.meters) m->handed_back(cause);
  const auto beat =
      std::chrono::duration_cast<std::chrono::milliseconds>(st.mesh.heartbeat);
  if (st.durable_retries++ == 0)
    KVMESH_WARN(
        "durable %s not decided (%s): handed back to the queue for %lld ms, "
        "up to %u deliveries (logged once)",
        request_name(id, client).c_str(), why.c_str(),
        static_cast<long long>(beat.count()), st.durable.deliveries);
  (void)d.nak(beat);
}

}  // namespace

claim_outcome take_claim(record_store& claims,
                         const std::vector<uint8_t>& claimant,
                         const delivery& d, uint64_t id, std::string& error) {
  std::vector<uint8_t> holder;
  auto took =
      claims.create(record_key(d.stream_sequence(), id), claimant, &holder);
  if (!took) {
    error = took.err().message;
    return claim_outcome::unknown;
  }
  if (*took) return claim_outcome::taken;
  return holder == claimant ? claim_outcome::own : claim_outcome::held;
}

void front_durable(front_pointer self, const std::string& reply,
                   const bytes& payload, std::shared_ptr<delivery> d,
                   uint8_t claimed, const std::string& claim_error) {
  auto& st = self->state;
  const auto since = took(self, intake::durable);
  // Acked unanswered: redelivered, it would be refused again.
  if (refused_reply(self, reply, "a durable route request")) {
    (void)d->ack();
    return;
  }
  // Acked once the answer is out: a router that dies before leaves
  // the request to another one. Malformed requests are answered and
  // acked too, or they would come back forever.
  auto r = decode_route(st, payload);
  if (!r) {
    failed(self, route_failure::other);
    decision out;
    out.error = r.err().message;
    answer(*st.bus, reply, encode(out));
    (void)d->ack();
    return;
  }
  const uint64_t id = r->id;
  // Another router holds it: that one answers. The claims bucket not
  // answering: back to the queue while deliveries are left, then
  // auctioned unclaimed (better a decision than none).
  auto c = static_cast<claim_outcome>(claimed);
  std::string why = claim_error;
  if (c == claim_outcome::refused)
    c = take_claim(*st.durable.claims, st.durable.claimant, *d, id, why);
  if (c == claim_outcome::own) c = settle_own(st, *d);
  if (c == claim_outcome::unknown && st.claim_failures++ == 0)
    KVMESH_WARN("durable %s: claim not taken: %s (logged once)",
                request_name(*r).c_str(), why.c_str());
  if (c == claim_outcome::held) {
    hand_back(self, *d, id, r->client_id, handback::contested,
              "another router holds its claim");
    return;
  } else if (c == claim_outcome::unknown && d->delivery_count() != 0 &&
             d->delivery_count() < st.durable.deliveries) {
    hand_back(self, *d, id, r->client_id, handback::unclaimed,
              "its claim could not be taken");
    return;
  }
  // Its decision may take longer than the ack_wait (an awardee that
  // went silent is waited out for up to 3 heartbeats): the sweep
  // tells the server it is in progress until it is answered, and
  // renews its claim.
  const auto now = steady::now();
  st.working.push_back({now, now, now, d, id});
  if (!st.sweeping) {
    st.sweeping = true;
    self->delayed_send(self, d->ack_wait() / 4, progress_atom::value);
  }
  r->redelivered = d->delivery_count() > 1;
  r->stream_sequence = d->stream_sequence();
  std::string client = r->client_id;
  self->request(st.router, caf::infinite, route_atom::value, std::move(*r))
      .then(
          [self, reply, d, since, id](const decision& out) {
            if (*self->state.stopping) return;
            decided(self, out, since);
            answer_durable(self, reply, encode(out), d, id);
          },
          [self, reply, id, d, client](caf::error& e) {
            if (*self->state.stopping) return;
            // Only the router's own verdicts (no worker, overloaded)
            // are answers; a router that went away mid-auction hands
            // the request back for another one.
            if (e.category() != caf::atom("kvmesh")) {
              unclaim(self->state, *d, id);
              (void)d->nak();
              return;
            }
            // No worker to take it, for now, or another router's
            // auction of it is open (ec::conflict): back to the
            // queue for a heartbeat while deliveries are left. Not
            // when an award went unanswered (ec::timeout): a worker
            // may run it, and deciding it again could run it twice.
            auto& st = self->state;
            const auto code = static_cast<ec>(e.code());
            if ((code == ec::not_found || code == ec::capacity_exceeded ||
                 code == ec::conflict) &&
                d->delivery_count() != 0 &&
                d->delivery_count() < st.durable.deliveries) {
              unclaim(st, *d, id);
              hand_back(self, *d, id, client,
                        code == ec::conflict            ? handback::contested
                        : code == ec::capacity_exceeded ? handback::overloaded
                                                        : handback::no_workers,
                        describe(e));
              return;
            }
            answer_durable(self, reply, encode(failed(self, e, id, client)), d,
                           id);
          });
}

void front_recorded(front_pointer self, const std::string& reply,
                    const bytes& payload, std::shared_ptr<delivery>& d,
                    uint64_t id, const std::string& not_kept) {
  // A stopping router leaves it unacked, for another one.
  if (*self->state.stopping) return;
  if (!not_kept.empty()) {
    // Rare: the client's id is read back from the answer only here.
    auto answered = decode<decision>(payload);
    KVMESH_WARN("durable %s answered without a record: %s",
                request_name(id, answered ? answered->client_id : "").c_str(),
                not_kept.c_str());
  }
  send_durable(self, reply, payload, *d);
}

void front_progress(front_pointer self) {
  auto& st = self->state;
  auto& w = st.working;
  const auto now = steady::now();
  // Settled, or past every deadline of the router (a decision that
  // never comes): no longer held back from the other routers.
  w.erase(std::remove_if(w.begin(), w.end(),
                         [now](const auto& x) {
                           return x.d->settled() ||
                                  now - x.arrived > route_timeout;
                         }),
          w.end());
  // A stopping router leaves what it holds to the others.
  if (w.empty() || *st.stopping) {
    w.clear();
    st.sweeping = false;
    return;
  }
  for (auto& x : w) {
    // A claim outliving half its lease is renewed: a decision this
    // slow is rare, and another router must not take it meanwhile.
    if (st.durable.claims && now - x.claimed > st.durable.lease / 2) {
      x.claimed = now;
      if (auto s = st.durable.claims->put(
              record_key(x.d->stream_sequence(), x.id), st.durable.claimant);
          !s && st.claim_failures++ == 0)
        KVMESH_WARN(
            "durable request %llu: claim not renewed: %s "
            "(logged once)",
            static_cast<unsigned long long>(x.id), s.err().message.c_str());
    }
    if (now - x.told < x.d->ack_wait() / 2) continue;
    x.told = now;
    if (auto s = x.d->in_progress(); !s && st.progress_failures++ == 0)
      KVMESH_WARN(
          "durable request not told in progress: %s (logged "
          "once; it may be handed to another router)",
          s.err().message.c_str());
  }
  self->delayed_send(self, w.front().d->ack_wait() / 4, progress_atom::value);
}

expected<durable_intake> open_durable_intake(nats_bus& bus,
                                             const router_node_options& opt) {
  durable_intake durable;
  record_options ro_rec = durable_records(opt.mesh.subj);
  ro_rec.replicas = opt.durable_replicas;
  auto rec = record_store::open(bus, ro_rec);
  if (!rec) return rec.err();
  durable.records = std::move(*rec);
  // A claim lasts as long as a delivery without an ack: a dead router's
  // claims have lapsed by the time the queue hands its requests out
  // again.
  durable.lease = opt.durable_ack_wait;
  record_options ro_claims = durable_claims(opt.mesh.subj, durable.lease);
  ro_claims.replicas = opt.durable_replicas;
  auto claims = record_store::open(bus, ro_claims);
  if (!claims) return claims.err();
  durable.claims = std::move(*claims);
  const std::string claimant =
      opt.name + "/" + std::to_string(std::random_device{}());
  durable.claimant.assign(claimant.begin(), claimant.end());
  durable.deliveries = opt.durable_deliveries;
  const char* fault = std::getenv("KVMESH_TEST_FAULT");
  durable.exit_before_ack = fault && std::string(fault) == "exit_before_ack";
  if (durable.exit_before_ack)
    KVMESH_WARN(
        "KVMESH_TEST_FAULT=exit_before_ack: exits after its first "
        "durable answer, before acking it (a test's fault)");
  return durable;
}

expected<std::unique_ptr<work_queue>> start_durable_queue(
    nats_bus& bus, const router_node_options& opt, caf::actor front,
    std::shared_ptr<record_store> records, std::shared_ptr<record_store> claims,
    std::vector<uint8_t> claimant) {
  const auto& s = opt.mesh.subj;
  auto qo = durable_queue(s);
  qo.ack_wait_ms = opt.durable_ack_wait.count();
  qo.replicas = opt.durable_replicas;
  auto q = work_queue::open(bus, qo);
  if (!q) return q.err();
  const size_t skip = s.route_durable().size() + 1;
  nats_bus* b = &bus;
  auto started = (*q)->start([front, skip, records, b, claims, claimant](
                                 nats_message m, std::shared_ptr<delivery> d) {
    std::string reply =
        m.subject.size() > skip ? m.subject.substr(skip) : std::string();
    // Neither claimed nor answered from a record: the front refuses it.
    if (mesh_inbox(reply)) {
      caf::anon_send(front, durable_atom::value, std::move(reply),
                     std::move(m.payload), std::move(d),
                     static_cast<uint8_t>(claim_outcome::taken), std::string());
      return;
    }
    // Decoded once here for its id; a malformed one the front answers,
    // claimed or not.
    auto r = decode<route_request_msg>(m.payload);
    // Handed out before: a router may have decided it and died before
    // its ack. Its kept answer goes out again (the client takes the
    // first; the worker is not awarded twice). Without one (never
    // decided, or the store not answering), it is auctioned: better a
    // second decision than none.
    if (r && d->delivery_count() > 1)
      if (auto kept = records->get(record_key(d->stream_sequence(), r->id))) {
        if (!reply.empty()) (void)b->publish_reply(reply, *kept);
        (void)d->ack();
        return;
      }
    auto pass = [front](std::string reply, bytes payload,
                        std::shared_ptr<delivery> d, claim_outcome c,
                        std::string error) {
      caf::anon_send(front, durable_atom::value, std::move(reply),
                     std::move(payload), std::move(d), static_cast<uint8_t>(c),
                     std::move(error));
    };
    if (!r || !claims || d->stream_sequence() == 0) {
      pass(std::move(reply), std::move(m.payload), std::move(d),
           claim_outcome::taken, {});
      return;
    }
    const auto key = record_key(d->stream_sequence(), r->id);
    claims->put_async(
        key, claimant, true,
        [pass, reply = std::move(reply), payload = std::move(m.payload),
         d = std::move(d)](status s) mutable {
          auto c = claim_outcome::taken;
          std::string error;
          if (!s && s.err().code == ec::conflict) {
            c = claim_outcome::refused;
          } else if (!s) {
            c = claim_outcome::unknown;
            error = s.err().message;
          }
          pass(std::move(reply), std::move(payload), std::move(d), c,
               std::move(error));
        });
  });
  if (!started) return started.err();
  return q;
}

}  // namespace detail
}  // namespace kvmesh
