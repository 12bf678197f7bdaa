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
  region @13 :Text;
  warmBlocks @14 :UInt64;
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
