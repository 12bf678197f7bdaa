# The Cap'n Proto schema of every kvmesh message that crosses a process.
@0xfa37c24fe5cf7754;

using Cxx = import "/capnp/c++.capnp";
# Its own namespace: the generated Bid, Decision, ... must not be mistaken for
# the plain C++ structs (kvmesh::bid, kvmesh::decision) the codecs produce.
$Cxx.namespace("kvmesh::wire");

# Evolution is append-only: a field is never renumbered, retyped or removed,
# new fields take the next ordinal, and a message whose meaning grows bumps
# its `version`. Readers accept any version from 1 up (fields they do not
# know are skipped by Cap'n Proto) and refuse 0, which is what a producer
# that never set it sends. Defaults match the C++ structs' defaults, so a
# field a reader knows but an older producer did not send reads as the C++
# default (a bid's cHost and cDisk read as NaN: "not reported").

enum Tier {
  gpu @0;
  host @1;
  disk @2;
}

enum EventKind {
  stored @0;
  removed @1;
}

# Why a route request got no worker. `other` first: a decision from a
# router that predates this field reads as `other`.
enum RouteFailure {
  other @0;
  overloaded @1;
  refused @2;
  noWorkers @3;
  unknownModel @4;
}

# A request to route: its prompt's chained block hashes, its size in tokens
# and, when the client knows it, its expected output (0: unknown).
struct RouteRequest {
  version @0 :UInt16;
  id @1 :UInt64;
  blocks @2 :List(UInt64);
  inputTokens @3 :UInt32;
  outputTokens @4 :UInt32;
  # Tokens per block the client hashed with; 0: not said (older clients).
  # A router refuses a request hashed with another block size than its
  # mesh's: its hashes could never match a cached block.
  blockTokens @5 :UInt32;
  # Set by a router for a durable request the queue hands out again (its
  # answer may never have been recorded): a worker that already took it
  # says so in its bid and takes the award again without running it twice.
  # A client's value is ignored.
  redelivered @6 :Bool;
  # Set by a router for a durable request: its sequence in the queue's
  # stream (0: not durable). A worker checks whether it took this one
  # already on every handout, not only on counted redeliveries: a 3-node
  # JetStream cluster that lost a node handed decided requests out again
  # as first deliveries. A client's value is ignored.
  streamSequence @7 :UInt64;
  # The model or LoRA adapter it is for: only workers that serve it bid.
  # Empty: any worker.
  model @8 :Text;
  # The client's own id for it (any string, as an OpenAI client's
  # X-Request-Id), echoed in the decision; empty: none.
  clientId @9 :Text;
  # Workers not to award it to: a gateway's route again after the winner's
  # engine failed before its first byte. At most 16.
  exclude @10 :List(UInt32);
}

# Why a bidder got its price (see docs/pricing.md).
struct PriceBreakdown {
  worker @0 :UInt32;
  read @1 :Float64;
  creditGpu @2 :Float64;
  creditHost @3 :Float64;
  creditDisk @4 :Float64;
  space @5 :Float64;
  speed @6 :Float64 = 1.0;
  overflow @7 :Float64;
  price @8 :Float64;
  delta @9 :Float64;
  wait @10 :Float64;
}

# The router's answer to a route request: the winner and every bidder's
# price breakdown.
struct Decision {
  version @0 :UInt16;
  request @1 :UInt64;
  worker @2 :UInt32;
  auctions @3 :UInt32;
  prices @4 :List(PriceBreakdown);
  # Set when there is no decision: why (then worker and prices mean nothing).
  error @5 :Text;
  # Where to send the request: the winner's OpenAI-compatible front
  # (http://host:port), empty for a worker without one (a simulated GPU).
  endpoint @6 :Text;
  # With `error`: its class.
  failure @7 :RouteFailure;
  # The request's clientId, echoed.
  clientId @8 :Text;
}

# A router's call for bids. The nested request's own version is written but
# not checked: this message's version governs.
struct CallForBids {
  version @0 :UInt16;
  request @1 :RouteRequest;
  biddersSpeed @2 :Float64 = 1.0;
  # The agent's workers asked to bid (one call per node agent).
  workers @3 :List(UInt32);
  # The auction that calls, unique across routers; 0: unnamed.
  auction @4 :UInt64;
}

# A worker's bid, computed from its exact state.
struct Bid {
  version @0 :UInt16;
  worker @1 :UInt32;
  gpu @2 :UInt32;
  host @3 :UInt32;
  disk @4 :UInt32;
  queued @5 :Float64;
  reserved @6 :Float64;
  active @7 :UInt64;
  activeOverlap @8 :UInt32;
  capacity @9 :UInt64;
  speed @10 :Float64 = 1.0;
  # NaN when the worker does not measure them: the router's own apply.
  cHost @11 :Float64 = nan;
  cDisk @12 :Float64 = nan;
  # Requests the worker had accepted when it bid; the default (2^64 - 1):
  # it does not count.
  accepted @13 :UInt64 = 18446744073709551615;
  # Asked for a redelivered request: this worker took it already. The
  # router awards it to this worker, whatever the prices.
  holds @14 :Bool;
  # Another auction of the same request (one that may be taken) holds an
  # open bid here: awarding it now could run it twice.
  contested @15 :Bool;
  # The request's wait for GPU space here, in recompute times of a reference
  # block (NaN: the worker does not model its engine), and the decode pass
  # each step carries over a full step's prefill time (core/pricing.hpp).
  wait @16 :Float64 = nan;
  stepOverhead @17 :Float64;
}

# An award: the request and the queue the router priced the winner with (its
# own unconfirmed awards included; -1: unknown).
struct Award {
  version @0 :UInt16;
  request @1 :RouteRequest;
  expectedQueued @2 :Float64 = -1.0;
  # The awardee among its agent's workers.
  worker @3 :UInt32;
  # The awardee's price in cache blocks in the auction that chose it, as the
  # router priced it (docs/pricing.md); NaN: not said (an older router).
  price @4 :Float64 = nan;
}

# A worker's answer to an award.
struct AwardReply {
  version @0 :UInt16;
  accepted @1 :Bool;
  reason @2 :Text;
  # An accepting worker's front (see Decision.endpoint).
  endpoint @3 :Text;
  # Accepted: the worker's count of accepted requests, this one included
  # (Bid.accepted's clock); the default: it does not count.
  count @4 :UInt64 = 18446744073709551615;
}

# A block appeared in or left a tier. `root` is the first block of its chain:
# it chooses the index shard.
struct KvEvent {
  kind @0 :EventKind;
  tier @1 :Tier;
  hash @2 :UInt64;
  root @3 :UInt64;
}

# One worker's batch of KV events, for an index shard.
struct KvBatch {
  version @0 :UInt16;
  worker @1 :UInt32;
  events @2 :List(KvEvent);
  # True: the shard forgets what it holds of this worker before applying
  # these events (a worker re-announcing its cache to a shard that came
  # back or that it had never reached). False: events on top of the rest.
  resync @3 :Bool;
}

# A worker's heartbeat: its queue, tiers and load.
struct WorkerStatus {
  version @0 :UInt16;
  worker @1 :UInt32;
  queued @2 :Float64;
  reserved @3 :Float64;
  waiting @4 :UInt64;
  running @5 :UInt64;
  gpuBlocks @6 :UInt64;
  hostBlocks @7 :UInt64;
  diskBlocks @8 :UInt64;
  active @9 :UInt64;
  completed @10 :UInt64;
  draining @11 :Bool;
  capacity @12 :UInt64;
  speed @13 :Float64 = 1.0;
  # The node agent that hosts the worker: its subjects carry this name.
  agent @14 :Text;
  # Set by an observer (an ADMIN) that stopped hearing the worker.
  gone @15 :Bool;
  # Its engine stopped answering: it refuses awards and routers leave it
  # out until the engine answers again.
  unhealthy @16 :Bool;
  # Its OpenAI-compatible front, empty when it has none.
  endpoint @17 :Text;
  # Awards it accepted since it started (a restart counts from 0 again).
  awards @18 :UInt64;
  # The price in cache blocks of the last award it accepted, as the router
  # priced it; NaN: none yet, or its routers do not say (Award.price).
  lastPrice @19 :Float64 = nan;
  # Host and disk tier capacity in blocks; 0: no such tier, or unknown (a
  # real engine's offloading tiers).
  hostCapacity @20 :UInt64;
  diskCapacity @21 :UInt64;
  # The models it serves (RouteRequest.model): its engine's and its loaded
  # LoRA adapters. Empty: it serves requests that name none.
  models @22 :List(ServedModel);
  # Its engine's OpenAI API (http://host:port) for a gateway to call itself,
  # reporting each request's progress to the agent (RequestProgress); empty:
  # only through the front.
  engine @23 :Text;
  # Sent to that engine as X-data-parallel-rank; -1: none.
  engineRank @24 :Int32 = -1;
}

# A model a worker serves: a base model (no parent) or a LoRA adapter on
# its parent, whose requests hash their blocks with the adapter's name as
# the salt.
struct ServedModel {
  name @0 :Text;
  parent @1 :Text;
}

# What a router reports about itself.
struct RouterStatus {
  version @0 :UInt16;
  decisions @1 :UInt64;
  reauctions @2 :UInt64;
  held @3 :UInt64;
  overloaded @4 :UInt64;
  liveWorkers @5 :UInt64;
  workers @6 :UInt64;
  name @7 :Text;
  auctionP50Us @8 :Float64;
  auctionP99Us @9 :Float64;
  natsIn @10 :UInt64;
  natsOut @11 :UInt64;
  # Route requests this router process took as text (no token ids): their
  # blocks are approximate.
  textRequests @12 :UInt64;
  # Route requests refused for a block size other than the router's.
  blockMismatches @13 :UInt64;
  # Re-auctions (reauctions is their sum) by cause: the awardee refused;
  # the last awardee left did not answer in time; no bidder answered the
  # call; every price was past the overload ceiling (held, auctioned again
  # on the next tick); no live worker to ask (held likewise).
  reauctionsRefused @14 :UInt64;
  reauctionsUnanswered @15 :UInt64;
  reauctionsNoBids @16 :UInt64;
  reauctionsSaturated @17 :UInt64;
  reauctionsNoLiveWorker @18 :UInt64;
  # Calls for bids sent (rounds, first ones included) and the bids they
  # got: bids / rounds is the mean bids per auction round.
  rounds @19 :UInt64;
  bids @20 :UInt64;
  # Awards sent to a runner-up of the same round: the awardee before it did
  # not answer in time, or refused when no rounds were left.
  runnerUpAwards @21 :UInt64;
}

# What an index shard reports about itself.
struct ShardStatus {
  version @0 :UInt16;
  shard @1 :UInt32;
  blocks @2 :UInt64;
  entries @3 :UInt64;
  diskBytes @4 :UInt64;
  events @5 :UInt64;
  errors @6 :UInt64;
  # How many shards the index has: routers and agents learn it here.
  shards @7 :UInt32 = 1;
  # KV messages refused (the shard overloaded) since it started: agents
  # have their workers announce their caches again once it stops growing.
  refusedEvents @8 :UInt64;
  # Random, fixed for the life of the shard's process (0: not told): a new
  # one means a restart, whose index misses what came meanwhile. A late
  # heartbeat alone means a busy shard, not a restarted one.
  incarnation @9 :UInt64;
}

# "Who holds how much of this prefix": a chain of block hashes.
struct IndexQuery {
  version @0 :UInt16;
  chain @1 :List(UInt64);
}

# One holder's match of a prefix, per tier.
struct HolderMatch {
  worker @0 :UInt32;
  gpu @1 :UInt32;
  host @2 :UInt32;
  disk @3 :UInt32;
}

# Each holder's match of a queried prefix, deepest first.
struct IndexReply {
  version @0 :UInt16;
  holders @1 :List(HolderMatch);
  error @2 :Text;
}

# The price weights (price_config); all can change at run time.
struct PriceWeights {
  version @0 :UInt16;
  cHost @1 :Float64 = 0.75;
  cDisk @2 :Float64 = 0.25;
  beta @3 :Float64 = 0.03;
  k @4 :Float64 = 0.1;
  overflow @5 :Float64 = 1.0;
  overloadCeiling @6 :Float64;
}

# A node agent's answer to a call for bids: one bid per worker asked.
struct Bids {
  version @0 :UInt16;
  bids @1 :List(Bid);
  error @2 :Text;
}

# Reservations of a request that went elsewhere, on one agent's workers.
struct Release {
  version @0 :UInt16;
  request @1 :UInt64;
  workers @2 :List(UInt32);
}

# A request's first token (done false) or its end, as the engine's client
# sees them; first tokens carry the blocks reused per tier.
struct RequestEvent {
  request @0 :UInt64;
  worker @1 :UInt32;
  done @2 :Bool;
  gpu @3 :UInt32;
  host @4 :UInt32;
  disk @5 :UInt32;
}

struct RequestEvents {
  version @0 :UInt16;
  events @1 :List(RequestEvent);
}

# An operator's request. The verb is the subject; the fields it needs are
# set: worker and on (drain), chain (prefix), weights (weights set), from
# (workers).
struct AdminRequest {
  version @0 :UInt16;
  worker @1 :UInt32;
  on @2 :Bool;
  chain @3 :List(UInt64);
  weights @4 :PriceWeights;
  # workers: the asker reads pages (AdminReply.more); without, all come in
  # one message, or an error when they do not fit.
  paged @5 :Bool;
  # workers, paged: list those with this id or higher, in id order.
  from @6 :UInt32;
}

# The answer to an admin request: what its verb asks for, or an error.
struct AdminReply {
  version @0 :UInt16;
  error @1 :Text;
  workers @2 :List(WorkerStatus);
  routers @3 :List(RouterStatus);
  shards @4 :List(ShardStatus);
  holders @5 :List(HolderMatch);
  weights @6 :PriceWeights;
  count @7 :UInt32;
  # workers: the list was cut to fit one NATS message; ask again from the
  # last one's id + 1.
  more @8 :Bool;
}

# Several messages for one receiver in one NATS message: under load a
# sender gathers what it publishes while its mailbox drains. Each item is
# what would have travelled alone: its subject, reply subject and payload
# (a message of its own kind). Sent on the parent of the items' subjects
# plus ".batch" (e.g. <prefix>.agent.<name>.batch, <inbox>.batch).
struct Batch {
  version @0 :UInt16;
  items @1 :List(BatchItem);
}

struct BatchItem {
  subject @0 :Text;
  reply @1 :Text;
  payload @2 :Data;
}

# The router asks a worker to withdraw an award that went unanswered past its
# deadline: the request goes elsewhere only once the worker said it does not
# run it (docs/reliability.md, "Late awards").
struct Withdraw {
  version @0 :UInt16;
  request @1 :UInt64;
  # The awardee among its agent's workers.
  worker @2 :UInt32;
}

# A worker's answer to a Withdraw.
struct WithdrawReply {
  version @0 :UInt16;
  # True: it does not run the request and refuses its award from now on.
  # False: its engine started it; it is the decision.
  withdrawn @1 :Bool = true;
  # Not withdrawn: the worker's front and its count of accepted requests,
  # as its AwardReply would have said them.
  endpoint @2 :Text;
  count @3 :UInt64 = 18446744073709551615;
}

# What a gateway tells an agent whose engine it calls itself (WorkerStatus.
# engine): an awarded request reached the engine, got its first token,
# ended; `lease`: the reporter is alive, and these are all its requests at
# the agent's engines (the agent ends the others, and every request of a
# reporter unheard for too long).
enum ProgressEvent {
  arrived @0;
  first @1;
  ended @2;
  lease @3;
}

struct RequestProgress {
  version @0 :UInt16;
  event @1 :ProgressEvent;
  request @2 :UInt64;
  worker @3 :UInt32;
  # The reporting gateway thread's random id (never 0: agents drop one of 0).
  reporter @4 :UInt64;
  # A lease's: the reporter's requests in flight at the agent, in any order.
  inFlight @5 :List(UInt64);
}
