// The lmetric policy: LMetric (arXiv 2603.15202), "new prefill tokens x
// batch size", lowest wins, as Dynamo's KV router implements it with
// router_selection_policy = lmetric (ai-dynamo/dynamo PR #11028, open as of
// August 2026; SGLang's gateway and llm-d have it only in open PRs too):
//
//   cost = adjusted prefill blocks x (decode blocks + 1)
//
// with Dynamo's terms (core/policies/dynamo.cpp): adjusted prefill =
// max(0, (the worker's active prefill tokens + input) / B - (device + 0.75
// host + 0.25 disk) blocks), decode = active blocks + the request's new
// complete blocks. Ties at random.
//
// Of the three implementations this one is followed because it counts in
// blocks, as kvmesh does, from state a router really has (KV events and its
// own tracking); and its prefill term includes the prefill already queued at
// the worker, which the paper's "new prefill tokens if routed there" leaves
// open but which is what delays the request's first token. SGLang's variant
// counts characters of an approximate tree and in-flight requests; llm-d's
// counts uncached tokens and in-flight requests, neither the backlog.
#include "core/policies/common.hpp"

namespace kvmesh::policies {

std::unique_ptr<router_policy> make_lmetric(const policy_config& c) {
  return make_dynamo_router(c, true);
}

}  // namespace kvmesh::policies
