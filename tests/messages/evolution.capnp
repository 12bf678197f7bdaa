# Other versions of a kvmesh message, as another producer's schema would
# write them, to test that decoding survives schema evolution.
@0xe8e59f37ee4b3be2;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kvmesh::evolution");

# A later producer's Bid: every field of messages/kvmesh.capnp, one more.
struct BidNext {
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
  cHost @11 :Float64 = nan;
  cDisk @12 :Float64 = nan;
  accepted @13 :UInt64 = 18446744073709551615;
  holds @14 :Bool;
  contested @15 :Bool;
  wait @16 :Float64 = nan;
  stepOverhead @17 :Float64;
  region @18 :Text;
  warmBlocks @19 :UInt64;
}

# An earlier producer's Bid, from before workers measured their credits.
struct BidPast {
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
}

# A Decision from before it named the winner's front (endpoint @6).
struct DecisionPast {
  version @0 :UInt16;
  request @1 :UInt64;
  worker @2 :UInt32;
  auctions @3 :UInt32;
  prices @4 :AnyPointer;  # a list of PriceBreakdown; left unset here
  error @5 :Text;
}

# A WorkerStatus from before engine health and fronts (@16, @17).
struct WorkerStatusPast {
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
  agent @14 :Text;
  gone @15 :Bool;
}

# An Award from before it carried the awardee's price (@4), with a
# RouteRequest of the same layout as messages/kvmesh.capnp's.
struct AwardPast {
  version @0 :UInt16;
  request @1 :RouteRequestPast;
  expectedQueued @2 :Float64 = -1.0;
  worker @3 :UInt32;
}

struct RouteRequestPast {
  version @0 :UInt16;
  id @1 :UInt64;
  blocks @2 :List(UInt64);
  inputTokens @3 :UInt32;
  outputTokens @4 :UInt32;
}
