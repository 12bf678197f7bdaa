// Every message kind on the wire, listed once: its kind, its C++ type and
// its struct in messages/kvmesh.capnp.
#pragma once

#include "core/pricing.hpp"
#include "messages/types.hpp"

// X(kind, type, Schema) for every top-level struct of messages/kvmesh.capnp.
// The order is msg_kind's, which numbers the decode error counters and is
// the first byte of the codec fuzz corpus: append, never reorder. From this
// list come msg_kind, msg_kind_count and the kinds' names, msg_kind_of<T>,
// encode()'s overloads and decode()'s instantiations (messages/codec.*), and
// the codec fuzz target's dispatch. What stays written out per message: its
// struct (types.hpp), its schema (kvmesh.capnp), its write and read
// (codec.cpp), its test sample and, if actors pass it too, its CAF inspect
// and registration (actors/).
//
// Adding a message: its struct, its schema struct, a line here, its write
// and read in codec.cpp, its sample in tests/messages/codec_samples.hpp
// (a test fails without one) and its seed in tests/fuzz/make_corpus.cpp.
#define KVMESH_MESSAGES(X)                          \
  X(route_request, route_request_msg, RouteRequest) \
  X(call_for_bids, call_for_bids, CallForBids)      \
  X(bid, bid, Bid)                                  \
  X(award, award_msg, Award)                        \
  X(award_reply, award_reply, AwardReply)           \
  X(decision, decision, Decision)                   \
  X(kv_batch, kv_batch, KvBatch)                    \
  X(worker_status, worker_status, WorkerStatus)     \
  X(router_status, router_status, RouterStatus)     \
  X(shard_status, shard_status, ShardStatus)        \
  X(index_query, index_query, IndexQuery)           \
  X(index_reply, index_reply, IndexReply)           \
  X(price_weights, price_config, PriceWeights)      \
  X(bids, bid_list, Bids)                           \
  X(release, release_msg, Release)                  \
  X(request_events, request_events, RequestEvents)  \
  X(admin_request, admin_request, AdminRequest)     \
  X(admin_reply, admin_reply, AdminReply)           \
  X(batch, batch_msg, Batch)                        \
  X(withdraw, withdraw_msg, Withdraw)               \
  X(withdraw_reply, withdraw_reply, WithdrawReply)  \
  X(request_progress, request_progress, RequestProgress)
