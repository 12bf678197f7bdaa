// Cap'n Proto codecs: C++ structs to flat arrays and checked decoding back.
#include "messages/codec.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/array.h>
#include <kj/exception.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <exception>
#include <string>

#include "messages/kvmesh.capnp.h"
#include "messages/limits.hpp"

namespace kvmesh {

namespace {

// Zero at start (static storage); relaxed increments: they only count.
std::array<std::atomic<uint64_t>, msg_kind_count> decode_error_counts;

// A message's meaning never shrinks: bump its version here (and append its
// fields in kvmesh.capnp) when it grows. Nothing has grown yet.
constexpr uint16_t current_version = 1;

// A Decision's prices or a KvBatch's events nest a few pointers deep; the
// slack is for future nesting, the cap for stack safety against crafted
// input (Cap'n Proto's default is 64).
constexpr int nesting_limit = 8;

// Every word of a well-formed message is read once; a few times the payload
// leaves room for Cap'n Proto's own accounting and refuses the
// amplification of overlapping pointers.
constexpr uint64_t traversal_words_per_word = 4;
constexpr uint64_t traversal_slack_words = 64;

error parse_failure(std::string what) {
  return make_error(ec::parse_error, std::move(what));
}

// -- the schema struct of each C++ type --------------------------------------

template <class T>
struct schema;

#define KVMESH_SCHEMA(k, type, wire_type) \
  template <>                             \
  struct schema<type> {                   \
    using wire_t = wire::wire_type;       \
  };
KVMESH_MESSAGES(KVMESH_SCHEMA)
#undef KVMESH_SCHEMA

// -- writers: every field, in schema order -----------------------------------

capnp::Text::Reader text(const std::string& s) {
  return capnp::Text::Reader(s.data(), s.size());
}

// A name from the wire (a model, a client's request id): at most
// max_name_bytes, else an error naming the field.
status read_name(std::string& out, capnp::Text::Reader t, const char* field) {
  if (t.size() > max_name_bytes)
    return make_error(ec::invalid_argument,
                      std::string(field) + ": " + std::to_string(t.size()) +
                          " bytes exceeds " + std::to_string(max_name_bytes));
  out.assign(t.begin(), t.size());
  return ok;
}

wire::RouteFailure to_wire(route_failure f) {
  switch (f) {
    case route_failure::overloaded:
      return wire::RouteFailure::OVERLOADED;
    case route_failure::refused:
      return wire::RouteFailure::REFUSED;
    case route_failure::no_workers:
      return wire::RouteFailure::NO_WORKERS;
    case route_failure::unknown_model:
      return wire::RouteFailure::UNKNOWN_MODEL;
    case route_failure::other:
      break;
  }
  return wire::RouteFailure::OTHER;
}

route_failure from_wire(wire::RouteFailure f) {
  switch (f) {
    case wire::RouteFailure::OVERLOADED:
      return route_failure::overloaded;
    case wire::RouteFailure::REFUSED:
      return route_failure::refused;
    case wire::RouteFailure::NO_WORKERS:
      return route_failure::no_workers;
    case wire::RouteFailure::UNKNOWN_MODEL:
      return route_failure::unknown_model;
    default:  // OTHER, or one a newer router added
      return route_failure::other;
  }
}

template <class List, class Vector>
void write_list(List list, const Vector& v) {
  for (size_t i = 0; i < v.size(); ++i)
    list.set(static_cast<unsigned>(i), v[i]);
}

template <class Vector, class List>
void read_list(Vector& v, List list) {
  v.reserve(list.size());
  for (auto x : list)
    v.push_back(x);
}

// The workers a CallForBids or a Release names, no more than
// --max-call-workers: each one named is asked for a bid (or to release),
// so the count is the agent's work.
status read_workers(std::vector<uint32_t>& out,
                    capnp::List<uint32_t>::Reader workers) {
  if (auto s =
          check_wire_limit(wire_limit::call_workers, workers.size(), "workers");
      !s)
    return s;
  read_list(out, workers);
  return ok;
}

void write(const route_request_msg& x, wire::RouteRequest::Builder b) {
  // Nested requests carry a version too, so the struct reads the same
  // whether it travels alone or inside a CallForBids or an Award.
  b.setVersion(current_version);
  b.setId(x.id);
  auto blocks = b.initBlocks(static_cast<unsigned>(x.blocks.size()));
  for (size_t i = 0; i < x.blocks.size(); ++i)
    blocks.set(static_cast<unsigned>(i), x.blocks[i]);
  b.setInputTokens(x.input_tokens);
  b.setOutputTokens(x.output_tokens);
  b.setBlockTokens(x.block_tokens);
  b.setRedelivered(x.redelivered);
  b.setStreamSequence(x.stream_sequence);
  b.setModel(text(x.model));
  b.setClientId(text(x.client_id));
  write_list(b.initExclude(static_cast<unsigned>(x.exclude.size())), x.exclude);
}

void write(const call_for_bids& x, wire::CallForBids::Builder b) {
  write(x.request, b.initRequest());
  b.setBiddersSpeed(x.bidders_speed);
  write_list(b.initWorkers(static_cast<unsigned>(x.workers.size())), x.workers);
  b.setAuction(x.auction);
}

void write(const bid& x, wire::Bid::Builder b) {
  b.setVersion(current_version);
  b.setWorker(x.worker);
  b.setGpu(x.gpu);
  b.setHost(x.host);
  b.setDisk(x.disk);
  b.setQueued(x.queued);
  b.setReserved(x.reserved);
  b.setActive(x.active);
  b.setActiveOverlap(x.active_overlap);
  b.setCapacity(x.capacity);
  b.setSpeed(x.speed);
  b.setCHost(x.c_host);
  b.setCDisk(x.c_disk);
  b.setAccepted(x.accepted);
  b.setHolds(x.holds);
  b.setContested(x.contested);
  b.setWait(x.wait);
  b.setStepOverhead(x.step_overhead);
}

void write(const award_msg& x, wire::Award::Builder b) {
  write(x.request, b.initRequest());
  b.setExpectedQueued(x.expected_queued);
  b.setWorker(x.worker);
  b.setPrice(x.price);
}

void write(const award_reply& x, wire::AwardReply::Builder b) {
  b.setAccepted(x.accepted);
  b.setReason(text(x.reason));
  b.setEndpoint(text(x.endpoint));
  b.setCount(x.count);
}

void write(const withdraw_msg& x, wire::Withdraw::Builder b) {
  b.setRequest(x.request);
  b.setWorker(x.worker);
}

void write(const withdraw_reply& x, wire::WithdrawReply::Builder b) {
  b.setWithdrawn(x.withdrawn);
  b.setEndpoint(text(x.endpoint));
  b.setCount(x.count);
}

void write(const request_progress& x, wire::RequestProgress::Builder b) {
  b.setEvent(static_cast<wire::ProgressEvent>(x.event));
  b.setRequest(x.request);
  b.setWorker(x.worker);
  b.setReporter(x.reporter);
  write_list(b.initInFlight(static_cast<unsigned>(x.in_flight.size())),
             x.in_flight);
}

void write(const decision& x, wire::Decision::Builder b) {
  b.setRequest(x.request);
  b.setWorker(x.worker);
  b.setAuctions(x.auctions);
  auto prices = b.initPrices(static_cast<unsigned>(x.prices.size()));
  for (size_t i = 0; i < x.prices.size(); ++i) {
    const auto& p = x.prices[i];
    auto o = prices[static_cast<unsigned>(i)];
    o.setWorker(p.worker);
    o.setRead(p.read);
    o.setCreditGpu(p.credit_gpu);
    o.setCreditHost(p.credit_host);
    o.setCreditDisk(p.credit_disk);
    o.setSpace(p.space);
    o.setSpeed(p.speed);
    o.setOverflow(p.overflow);
    o.setPrice(p.price);
    o.setDelta(p.delta);
    o.setWait(p.wait);
  }
  b.setError(text(x.error));
  b.setEndpoint(text(x.endpoint));
  b.setFailure(to_wire(x.failure));
  b.setClientId(text(x.client_id));
}

void write(const kv_batch& x, wire::KvBatch::Builder b) {
  b.setWorker(x.worker);
  b.setResync(x.resync);
  auto events = b.initEvents(static_cast<unsigned>(x.events.size()));
  for (size_t i = 0; i < x.events.size(); ++i) {
    const auto& e = x.events[i];
    auto o = events[static_cast<unsigned>(i)];
    // The C++ and schema enums share their numbering (0, 1, ...), which the
    // reader checks against the schema's range.
    o.setKind(static_cast<wire::EventKind>(e.kind));
    o.setTier(static_cast<wire::Tier>(e.where));
    o.setHash(e.hash);
    o.setRoot(e.root);
  }
}

void write(const worker_status& x, wire::WorkerStatus::Builder b) {
  b.setVersion(current_version);
  b.setWorker(x.worker);
  b.setQueued(x.queued);
  b.setReserved(x.reserved);
  b.setWaiting(x.waiting);
  b.setRunning(x.running);
  b.setGpuBlocks(x.gpu_blocks);
  b.setHostBlocks(x.host_blocks);
  b.setDiskBlocks(x.disk_blocks);
  b.setActive(x.active);
  b.setCompleted(x.completed);
  b.setDraining(x.draining);
  b.setCapacity(x.capacity);
  b.setSpeed(x.speed);
  b.setAgent(text(x.agent));
  b.setGone(x.gone);
  b.setUnhealthy(x.unhealthy);
  b.setEndpoint(text(x.endpoint));
  b.setAwards(x.awards);
  b.setLastPrice(x.last_price);
  b.setHostCapacity(x.host_capacity);
  b.setDiskCapacity(x.disk_capacity);
  auto models = b.initModels(static_cast<unsigned>(x.models.size()));
  for (size_t i = 0; i < x.models.size(); ++i) {
    models[static_cast<unsigned>(i)].setName(text(x.models[i].name));
    models[static_cast<unsigned>(i)].setParent(text(x.models[i].parent));
  }
  b.setEngine(text(x.engine));
  b.setEngineRank(x.engine_rank);
}

void write(const router_status& x, wire::RouterStatus::Builder b) {
  b.setVersion(current_version);
  b.setDecisions(x.decisions);
  b.setReauctions(x.reauctions);
  b.setHeld(x.held);
  b.setOverloaded(x.overloaded);
  b.setLiveWorkers(x.live_workers);
  b.setWorkers(x.workers);
  b.setName(text(x.name));
  b.setAuctionP50Us(x.auction_p50_us);
  b.setAuctionP99Us(x.auction_p99_us);
  b.setNatsIn(x.nats_in);
  b.setNatsOut(x.nats_out);
  b.setTextRequests(x.text_requests);
  b.setBlockMismatches(x.block_mismatches);
  b.setReauctionsRefused(x.reauctions_refused);
  b.setReauctionsUnanswered(x.reauctions_unanswered);
  b.setReauctionsNoBids(x.reauctions_no_bids);
  b.setReauctionsSaturated(x.reauctions_saturated);
  b.setReauctionsNoLiveWorker(x.reauctions_no_live_worker);
  b.setRounds(x.rounds);
  b.setBids(x.bids);
  b.setRunnerUpAwards(x.runner_up_awards);
}

void write(const shard_status& x, wire::ShardStatus::Builder b) {
  b.setVersion(current_version);
  b.setShard(x.shard);
  b.setBlocks(x.blocks);
  b.setEntries(x.entries);
  b.setDiskBytes(x.disk_bytes);
  b.setEvents(x.events);
  b.setErrors(x.errors);
  b.setShards(x.shards);
  b.setRefusedEvents(x.refused_events);
  b.setIncarnation(x.incarnation);
}

void write(const index_query& x, wire::IndexQuery::Builder b) {
  write_list(b.initChain(static_cast<unsigned>(x.chain.size())), x.chain);
}

void write(const std::vector<holder_match>& x,
           capnp::List<wire::HolderMatch>::Builder holders) {
  for (size_t i = 0; i < x.size(); ++i) {
    const auto& h = x[i];
    auto o = holders[static_cast<unsigned>(i)];
    o.setWorker(h.worker);
    o.setGpu(h.gpu);
    o.setHost(h.host);
    o.setDisk(h.disk);
  }
}

void write(const index_reply& x, wire::IndexReply::Builder b) {
  write(x.holders, b.initHolders(static_cast<unsigned>(x.holders.size())));
  b.setError(text(x.error));
}

void write(const price_config& x, wire::PriceWeights::Builder b) {
  b.setVersion(current_version);
  b.setCHost(x.c_host);
  b.setCDisk(x.c_disk);
  b.setBeta(x.beta);
  b.setK(x.k);
  b.setOverflow(x.overflow);
  b.setOverloadCeiling(x.overload_ceiling);
}

void write(const bid_list& x, wire::Bids::Builder b) {
  auto bids = b.initBids(static_cast<unsigned>(x.bids.size()));
  for (size_t i = 0; i < x.bids.size(); ++i)
    write(x.bids[i], bids[static_cast<unsigned>(i)]);
  b.setError(text(x.error));
}

void write(const batch_msg& x, wire::Batch::Builder b) {
  auto items = b.initItems(static_cast<unsigned>(x.items.size()));
  for (size_t i = 0; i < x.items.size(); ++i) {
    const auto& it = x.items[i];
    auto o = items[static_cast<unsigned>(i)];
    o.setSubject(text(it.subject));
    o.setReply(text(it.reply));
    o.setPayload(capnp::Data::Reader(it.payload.data(), it.payload.size()));
  }
}

void write(const release_msg& x, wire::Release::Builder b) {
  b.setRequest(x.request);
  write_list(b.initWorkers(static_cast<unsigned>(x.workers.size())), x.workers);
}

void write(const request_events& x, wire::RequestEvents::Builder b) {
  auto events = b.initEvents(static_cast<unsigned>(x.events.size()));
  for (size_t i = 0; i < x.events.size(); ++i) {
    const auto& e = x.events[i];
    auto o = events[static_cast<unsigned>(i)];
    o.setRequest(e.request);
    o.setWorker(e.worker);
    o.setDone(e.done);
    o.setGpu(e.gpu);
    o.setHost(e.host);
    o.setDisk(e.disk);
  }
}

void write(const admin_request& x, wire::AdminRequest::Builder b) {
  b.setWorker(x.worker);
  b.setOn(x.on);
  write_list(b.initChain(static_cast<unsigned>(x.chain.size())), x.chain);
  write(x.weights, b.initWeights());
  b.setPaged(x.paged);
  b.setFrom(x.from);
}

void write(const admin_reply& x, wire::AdminReply::Builder b) {
  b.setError(text(x.error));
  auto workers = b.initWorkers(static_cast<unsigned>(x.workers.size()));
  for (size_t i = 0; i < x.workers.size(); ++i)
    write(x.workers[i], workers[static_cast<unsigned>(i)]);
  auto routers = b.initRouters(static_cast<unsigned>(x.routers.size()));
  for (size_t i = 0; i < x.routers.size(); ++i)
    write(x.routers[i], routers[static_cast<unsigned>(i)]);
  auto shards = b.initShards(static_cast<unsigned>(x.shards.size()));
  for (size_t i = 0; i < x.shards.size(); ++i)
    write(x.shards[i], shards[static_cast<unsigned>(i)]);
  write(x.holders, b.initHolders(static_cast<unsigned>(x.holders.size())));
  write(x.weights, b.initWeights());
  b.setCount(x.count);
  b.setMore(x.more);
}

// -- readers: every field; what the schema cannot check, they do -------------
// Each pointer field is read once: Cap'n Proto counts every read against the
// traversal limit.

expected<route_request_msg> read(wire::RouteRequest::Reader r) {
  route_request_msg x;
  x.id = r.getId();
  auto blocks = r.getBlocks();
  // Within the payload limit a list of blocks can still hold 2^17 of them;
  // every block costs each bidder and the index a lookup.
  if (auto s =
          check_wire_limit(wire_limit::request_blocks, blocks.size(), "blocks");
      !s)
    return s.err();
  x.blocks.reserve(blocks.size());
  for (auto h : blocks)
    x.blocks.push_back(h);
  x.input_tokens = r.getInputTokens();
  x.output_tokens = r.getOutputTokens();
  x.block_tokens = r.getBlockTokens();
  x.redelivered = r.getRedelivered();
  x.stream_sequence = r.getStreamSequence();
  if (auto s = read_name(x.model, r.getModel(), "model"); !s) return s.err();
  if (auto s = read_name(x.client_id, r.getClientId(), "clientId"); !s)
    return s.err();
  auto exclude = r.getExclude();
  if (exclude.size() > max_excluded_workers)
    return make_error(ec::invalid_argument,
                      "exclude: " + std::to_string(exclude.size()) +
                          " workers, more than " +
                          std::to_string(max_excluded_workers));
  read_list(x.exclude, exclude);
  return x;
}

expected<call_for_bids> read(wire::CallForBids::Reader r) {
  // A default request would be auctioned as request 0 with no blocks.
  if (!r.hasRequest()) return parse_failure("no request");
  call_for_bids x;
  auto request = read(r.getRequest());
  if (!request) return request.err();
  x.request = std::move(*request);
  x.bidders_speed = r.getBiddersSpeed();
  if (auto s = read_workers(x.workers, r.getWorkers()); !s) return s.err();
  x.auction = r.getAuction();
  return x;
}

bid read(wire::Bid::Reader r) {
  bid x;
  x.worker = r.getWorker();
  x.gpu = r.getGpu();
  x.host = r.getHost();
  x.disk = r.getDisk();
  x.queued = r.getQueued();
  x.reserved = r.getReserved();
  x.active = r.getActive();
  x.active_overlap = r.getActiveOverlap();
  x.capacity = r.getCapacity();
  x.speed = r.getSpeed();
  x.c_host = r.getCHost();
  x.c_disk = r.getCDisk();
  x.accepted = r.getAccepted();
  x.holds = r.getHolds();
  x.contested = r.getContested();
  x.wait = r.getWait();
  x.step_overhead = r.getStepOverhead();
  return x;
}

expected<award_msg> read(wire::Award::Reader r) {
  if (!r.hasRequest()) return parse_failure("no request");
  award_msg x;
  auto request = read(r.getRequest());
  if (!request) return request.err();
  x.request = std::move(*request);
  x.expected_queued = r.getExpectedQueued();
  x.worker = r.getWorker();
  x.price = r.getPrice();
  return x;
}

award_reply read(wire::AwardReply::Reader r) {
  award_reply x;
  x.accepted = r.getAccepted();
  auto reason = r.getReason();
  x.reason.assign(reason.begin(), reason.size());
  auto endpoint = r.getEndpoint();
  x.endpoint.assign(endpoint.begin(), endpoint.size());
  x.count = r.getCount();
  return x;
}

withdraw_msg read(wire::Withdraw::Reader r) {
  return withdraw_msg{r.getRequest(), r.getWorker()};
}

withdraw_reply read(wire::WithdrawReply::Reader r) {
  withdraw_reply x;
  x.withdrawn = r.getWithdrawn();
  auto endpoint = r.getEndpoint();
  x.endpoint.assign(endpoint.begin(), endpoint.size());
  x.count = r.getCount();
  return x;
}

expected<request_progress> read(wire::RequestProgress::Reader r) {
  request_progress x;
  const auto e = static_cast<uint16_t>(r.getEvent());
  if (e > static_cast<uint16_t>(progress_event::lease))
    return make_error(ec::parse_error,
                      "unknown progress event " + std::to_string(e));
  x.event = static_cast<progress_event>(e);
  x.request = r.getRequest();
  x.worker = r.getWorker();
  x.reporter = r.getReporter();
  auto in_flight = r.getInFlight();
  x.in_flight.reserve(in_flight.size());
  for (uint64_t id : in_flight)
    x.in_flight.push_back(id);
  return x;
}

decision read(wire::Decision::Reader r) {
  decision x;
  x.request = r.getRequest();
  x.worker = r.getWorker();
  x.auctions = r.getAuctions();
  auto prices = r.getPrices();
  x.prices.reserve(prices.size());
  for (auto p : prices) {
    price_breakdown o;
    o.worker = p.getWorker();
    o.read = p.getRead();
    o.credit_gpu = p.getCreditGpu();
    o.credit_host = p.getCreditHost();
    o.credit_disk = p.getCreditDisk();
    o.space = p.getSpace();
    o.speed = p.getSpeed();
    o.overflow = p.getOverflow();
    o.price = p.getPrice();
    o.delta = p.getDelta();
    o.wait = p.getWait();
    x.prices.push_back(o);
  }
  auto error = r.getError();
  x.error.assign(error.begin(), error.size());
  auto endpoint = r.getEndpoint();
  x.endpoint.assign(endpoint.begin(), endpoint.size());
  x.failure = from_wire(r.getFailure());
  auto client = r.getClientId();
  x.client_id.assign(client.begin(), std::min(client.size(), max_name_bytes));
  return x;
}

expected<kv_batch> read(wire::KvBatch::Reader r) {
  kv_batch x;
  x.worker = r.getWorker();
  x.resync = r.getResync();
  auto events = r.getEvents();
  x.events.reserve(events.size());
  for (unsigned i = 0; i < events.size(); ++i) {
    auto e = events[i];
    // Cap'n Proto hands out unknown enumerants as they are, and a C++ enum
    // out of its range would index past the tier arrays.
    auto kind = static_cast<uint16_t>(e.getKind());
    auto where = static_cast<uint16_t>(e.getTier());
    if (kind > static_cast<uint16_t>(wire::EventKind::REMOVED))
      return parse_failure("event " + std::to_string(i) + ": kind " +
                           std::to_string(kind) + " out of range");
    if (where > static_cast<uint16_t>(wire::Tier::DISK))
      return parse_failure("event " + std::to_string(i) + ": tier " +
                           std::to_string(where) + " out of range");
    cache_event o;
    o.kind = kind == static_cast<uint16_t>(wire::EventKind::STORED)
                 ? cache_event::stored
                 : cache_event::removed;
    o.where = static_cast<tier>(where);
    o.hash = e.getHash();
    o.root = e.getRoot();
    x.events.push_back(o);
  }
  return x;
}

worker_status read(wire::WorkerStatus::Reader r) {
  worker_status x;
  x.worker = r.getWorker();
  x.queued = r.getQueued();
  x.reserved = r.getReserved();
  x.waiting = r.getWaiting();
  x.running = r.getRunning();
  x.gpu_blocks = r.getGpuBlocks();
  x.host_blocks = r.getHostBlocks();
  x.disk_blocks = r.getDiskBlocks();
  x.active = r.getActive();
  x.completed = r.getCompleted();
  x.draining = r.getDraining();
  x.capacity = r.getCapacity();
  x.speed = r.getSpeed();
  auto agent = r.getAgent();
  x.agent.assign(agent.begin(), agent.size());
  x.gone = r.getGone();
  x.unhealthy = r.getUnhealthy();
  auto endpoint = r.getEndpoint();
  x.endpoint.assign(endpoint.begin(), endpoint.size());
  x.awards = r.getAwards();
  x.last_price = r.getLastPrice();
  x.host_capacity = r.getHostCapacity();
  x.disk_capacity = r.getDiskCapacity();
  // Counts and lengths are member_checks' to judge (a refusal counted per
  // reason); the list is cut here so that a hostile one costs nothing.
  auto models = r.getModels();
  const size_t n = std::min<size_t>(models.size(), max_models_per_worker + 1);
  x.models.reserve(n);
  auto cut = [](capnp::Text::Reader t) {
    return std::string(t.begin(), std::min(t.size(), max_name_bytes + 1));
  };
  for (size_t i = 0; i < n; ++i) {
    auto m = models[static_cast<unsigned>(i)];
    x.models.push_back({cut(m.getName()), cut(m.getParent())});
  }
  auto engine = r.getEngine();
  x.engine.assign(engine.begin(), engine.size());
  x.engine_rank = r.getEngineRank();
  return x;
}

router_status read(wire::RouterStatus::Reader r) {
  router_status x;
  x.decisions = r.getDecisions();
  x.reauctions = r.getReauctions();
  x.held = r.getHeld();
  x.overloaded = r.getOverloaded();
  x.live_workers = r.getLiveWorkers();
  x.workers = r.getWorkers();
  auto name = r.getName();
  x.name.assign(name.begin(), name.size());
  x.auction_p50_us = r.getAuctionP50Us();
  x.auction_p99_us = r.getAuctionP99Us();
  x.nats_in = r.getNatsIn();
  x.nats_out = r.getNatsOut();
  x.text_requests = r.getTextRequests();
  x.block_mismatches = r.getBlockMismatches();
  x.reauctions_refused = r.getReauctionsRefused();
  x.reauctions_unanswered = r.getReauctionsUnanswered();
  x.reauctions_no_bids = r.getReauctionsNoBids();
  x.reauctions_saturated = r.getReauctionsSaturated();
  x.reauctions_no_live_worker = r.getReauctionsNoLiveWorker();
  x.rounds = r.getRounds();
  x.bids = r.getBids();
  x.runner_up_awards = r.getRunnerUpAwards();
  return x;
}

shard_status read(wire::ShardStatus::Reader r) {
  shard_status x;
  x.shard = r.getShard();
  x.blocks = r.getBlocks();
  x.entries = r.getEntries();
  x.disk_bytes = r.getDiskBytes();
  x.events = r.getEvents();
  x.errors = r.getErrors();
  x.shards = r.getShards();
  x.refused_events = r.getRefusedEvents();
  x.incarnation = r.getIncarnation();
  return x;
}

index_query read(wire::IndexQuery::Reader r) {
  index_query x;
  read_list(x.chain, r.getChain());
  return x;
}

void read(std::vector<holder_match>& x,
          capnp::List<wire::HolderMatch>::Reader holders) {
  x.reserve(holders.size());
  for (auto h : holders) {
    holder_match o;
    o.worker = h.getWorker();
    o.gpu = h.getGpu();
    o.host = h.getHost();
    o.disk = h.getDisk();
    x.push_back(o);
  }
}

index_reply read(wire::IndexReply::Reader r) {
  index_reply x;
  read(x.holders, r.getHolders());
  auto error = r.getError();
  x.error.assign(error.begin(), error.size());
  return x;
}

price_config read(wire::PriceWeights::Reader r) {
  price_config x;
  x.c_host = r.getCHost();
  x.c_disk = r.getCDisk();
  x.beta = r.getBeta();
  x.k = r.getK();
  x.overflow = r.getOverflow();
  x.overload_ceiling = r.getOverloadCeiling();
  return x;
}

bid_list read(wire::Bids::Reader r) {
  bid_list x;
  auto bids = r.getBids();
  x.bids.reserve(bids.size());
  for (auto b : bids)
    x.bids.push_back(read(b));
  auto error = r.getError();
  x.error.assign(error.begin(), error.size());
  return x;
}

batch_msg read(wire::Batch::Reader r) {
  batch_msg x;
  auto items = r.getItems();
  x.items.reserve(items.size());
  for (auto i : items) {
    batch_item it;
    auto subject = i.getSubject();
    it.subject.assign(subject.begin(), subject.size());
    auto reply = i.getReply();
    it.reply.assign(reply.begin(), reply.size());
    auto payload = i.getPayload();
    it.payload.assign(payload.begin(), payload.end());
    x.items.push_back(std::move(it));
  }
  return x;
}

expected<release_msg> read(wire::Release::Reader r) {
  release_msg x;
  x.request = r.getRequest();
  if (auto s = read_workers(x.workers, r.getWorkers()); !s) return s.err();
  return x;
}

request_events read(wire::RequestEvents::Reader r) {
  request_events x;
  auto events = r.getEvents();
  x.events.reserve(events.size());
  for (auto e : events)
    x.events.push_back(request_event{e.getRequest(), e.getWorker(), e.getDone(),
                                     e.getGpu(), e.getHost(), e.getDisk()});
  return x;
}

admin_request read(wire::AdminRequest::Reader r) {
  admin_request x;
  x.worker = r.getWorker();
  x.on = r.getOn();
  read_list(x.chain, r.getChain());
  x.weights = read(r.getWeights());
  x.paged = r.getPaged();
  x.from = r.getFrom();
  return x;
}

admin_reply read(wire::AdminReply::Reader r) {
  admin_reply x;
  auto error = r.getError();
  x.error.assign(error.begin(), error.size());
  for (auto w : r.getWorkers())
    x.workers.push_back(read(w));
  for (auto w : r.getRouters())
    x.routers.push_back(read(w));
  for (auto w : r.getShards())
    x.shards.push_back(read(w));
  read(x.holders, r.getHolders());
  x.weights = read(r.getWeights());
  x.count = r.getCount();
  x.more = r.getMore();
  return x;
}

// -- the generic halves ------------------------------------------------------

// Each thread builds its messages in one first segment of its own: Cap'n
// Proto's default builder callocs 8 KB per message, and the flat copy it
// makes is a second allocation before the payload's own. (The builder's
// destructor zeroes the words it used, as the next builder needs.)
template <class T>
std::vector<uint8_t> build_message(const T& x, capnp::MessageBuilder& message) {
  auto root = message.initRoot<typename schema<T>::wire_t>();
  root.setVersion(current_version);
  write(x, root);
  std::vector<uint8_t> out(capnp::computeSerializedSizeInWords(message) *
                           sizeof(capnp::word));
  kj::ArrayOutputStream stream(kj::arrayPtr(out.data(), out.size()));
  capnp::writeMessage(stream, message);
  return out;
}

// The first segment of every message a thread encodes, whatever its kind:
// one buffer per thread, not one per kind (21 kinds x 8 KB of static TLS
// would leave no room in small thread stacks, such as civetweb's 100 KB).
thread_local std::array<capnp::word, 1024> first{};
thread_local bool busy = false;

template <class T>
std::vector<uint8_t> encode_message(const T& x) {
  if (busy) {  // not reentrant; never expected, but stay correct
    capnp::MallocMessageBuilder message;
    return build_message(x, message);
  }
  busy = true;
  struct done {
    ~done() { busy = false; }
  } guard;
  capnp::MallocMessageBuilder message(kj::arrayPtr(first.data(), first.size()));
  return build_message(x, message);
}

}  // namespace

const char* to_string(msg_kind kind) {
  switch (kind) {
#define KVMESH_NAME(k, type, schema) \
  case msg_kind::k:                  \
    return #schema;
    KVMESH_MESSAGES(KVMESH_NAME)
#undef KVMESH_NAME
  }
  return "unknown";
}

void fill_worker_page(std::vector<worker_status>& all, uint32_t from,
                      size_t budget, admin_reply& out) {
  std::sort(all.begin(), all.end(),
            [](const worker_status& a, const worker_status& b) {
              return a.worker < b.worker;
            });
  // What an element of the list takes: its struct inline, and each text
  // as its bytes plus the terminating NUL, padded to whole words, plus the
  // two words of a far pointer's landing pad, should the text go to a
  // segment other than the list's (it does once the list fills one).
  constexpr size_t word = sizeof(capnp::word);
  constexpr size_t fixed =
      word * (wire::WorkerStatus::_capnpPrivate::dataWordSize +
              wire::WorkerStatus::_capnpPrivate::pointerCount);
  auto text_bytes = [](const std::string& s) {
    return (s.size() + 1 + word - 1) / word * word + 2 * word;
  };
  auto it = std::lower_bound(
      all.begin(), all.end(), from,
      [](const worker_status& w, uint32_t id) { return w.worker < id; });
  out.more = false;
  size_t used = 0;
  for (; it != all.end(); ++it) {
    size_t bytes = fixed + text_bytes(it->agent) + text_bytes(it->endpoint) +
                   text_bytes(it->engine);
    // Its models: a list of structs (a tag word, then each one's pointers
    // inline), each one's texts beside it (the list's own segment, so no
    // landing pads but the list's).
    if (!it->models.empty())
      bytes += word * 3 + it->models.size() * word *
                              (wire::ServedModel::_capnpPrivate::dataWordSize +
                               wire::ServedModel::_capnpPrivate::pointerCount);
    for (const auto& m : it->models)
      bytes += text_bytes(m.name) + text_bytes(m.parent) - 4 * word;
    if (!out.workers.empty() && used + bytes > budget) {
      out.more = true;
      break;
    }
    used += bytes;
    out.workers.push_back(std::move(*it));
  }
}

uint64_t decode_errors(msg_kind kind) {
  auto i = static_cast<size_t>(kind);
  return i < msg_kind_count
             ? decode_error_counts[i].load(std::memory_order_relaxed)
             : 0;
}

template <class T>
expected<T> decode(const uint8_t* data, size_t size) {
  constexpr msg_kind kind = msg_kind_of<T>;
  auto fail = [](const std::string& what) -> error {
    decode_error_counts[static_cast<size_t>(kind)].fetch_add(
        1, std::memory_order_relaxed);
    return parse_failure(std::string(to_string(kind)) + ": " + what);
  };
  constexpr size_t word_bytes = sizeof(capnp::word);
  if (size == 0) return fail("empty payload");
  if (data == nullptr) return fail("no payload data");
  // Checked before the copy: the copy is the cost a large payload imposes.
  if (auto s =
          check_wire_limit(wire_limit::payload_bytes, size, "payload bytes");
      !s)
    return fail(s.err().message);
  if (size % word_bytes != 0)
    return fail("payload of " + std::to_string(size) +
                " bytes is not a whole number of 8-byte words");
  try {
    // NATS hands out payloads at any address; Cap'n Proto reads words in
    // place and refuses unaligned ones, so an unaligned payload is copied
    // into word-aligned memory (the thread's, reused, unless a decode is
    // already using it or the payload is large: the thread would keep it).
    constexpr size_t scratch_bytes_max = 64 << 10;
    thread_local std::vector<uint64_t> scratch;  // words: 8-byte aligned
    thread_local bool scratch_busy = false;
    kj::Array<capnp::word> own;
    kj::ArrayPtr<const capnp::word> words;
    bool took_scratch = false;
    if (reinterpret_cast<uintptr_t>(data) % alignof(capnp::word) == 0) {
      words = kj::arrayPtr(reinterpret_cast<const capnp::word*>(data),
                           size / word_bytes);
    } else if (!scratch_busy && size <= scratch_bytes_max) {
      scratch.resize(size / word_bytes);
      std::memcpy(scratch.data(), data, size);
      words = kj::arrayPtr(reinterpret_cast<const capnp::word*>(scratch.data()),
                           scratch.size());
      took_scratch = scratch_busy = true;
    } else {
      own = kj::heapArray<capnp::word>(size / word_bytes);
      std::memcpy(own.begin(), data, size);
      words = own.asPtr();
    }
    struct release_scratch {
      bool took;
      ~release_scratch() {
        if (took) scratch_busy = false;
      }
    } release{took_scratch};
    capnp::ReaderOptions options;
    options.traversalLimitInWords =
        words.size() * traversal_words_per_word + traversal_slack_words;
    options.nestingLimit = nesting_limit;
    capnp::FlatArrayMessageReader reader(words, options);
    // One payload is one message: anything after it is corruption, or a
    // producer that frames differently.
    if (reader.getEnd() != words.end())
      return fail(std::to_string(words.end() - reader.getEnd()) +
                  " words after the end of the message");
    auto root = reader.getRoot<typename schema<T>::wire_t>();
    // 0 is what a producer that never set the version sends; anything newer
    // is accepted, as its added fields are skipped.
    if (root.getVersion() == 0) return fail("version 0 (unset)");
    expected<T> out = read(root);
    if (!out) return fail(out.err().message);
    return out;
  } catch (const kj::Exception& e) {
    return fail(std::string("malformed message: ") + e.getDescription().cStr());
  } catch (const std::exception& e) {
    return fail(std::string("cannot decode: ") + e.what());
  }
}

// The codecs of every message kind, instantiated here, so that the
// Cap'n Proto headers stay out of every includer of codec.hpp.

#define KVMESH_CODEC(k, type, schema)          \
  std::vector<uint8_t> encode(const type& x) { \
    return encode_message(x);                  \
  }                                            \
  template expected<type> decode<type>(const uint8_t* data, size_t size);

KVMESH_MESSAGES(KVMESH_CODEC)
#undef KVMESH_CODEC

}  // namespace kvmesh
