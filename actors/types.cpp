// Registration of kvmesh's error category and message types with CAF.
#include "actors/actors.hpp"

#include <algorithm>
#include <thread>

namespace kvmesh {

void register_types(caf::actor_system_config& cfg) {
  // Renders as "kvmesh: <code> <context>". (CAF 0.17.6's templated
  // add_error_category<T> does not compile: it passes a renderer of the
  // wrong signature.)
  cfg.add_error_category(caf::atom("kvmesh"), [](uint8_t code, caf::atom_value,
                                                 const caf::message& ctx) {
    std::string s = "kvmesh: ";
    s += to_string(static_cast<ec>(code));
    if (!ctx.empty()) s += " " + caf::to_string(ctx);
    return s;
  });
  cfg.add_message_type<route_request_msg>("route_request");
  cfg.add_message_type<call_for_bids>("call_for_bids");
  cfg.add_message_type<award_reply>("award_reply");
  cfg.add_message_type<award_msg>("award");
  cfg.add_message_type<release_msg>("release");
  cfg.add_message_type<withdraw_msg>("withdraw");
  cfg.add_message_type<withdraw_reply>("withdraw_reply");
  cfg.add_message_type<request_progress>("request_progress");
  cfg.add_message_type<bid_list>("bid_list");
  cfg.add_message_type<bid>("bid");
  cfg.add_message_type<price_breakdown>("price_breakdown");
  cfg.add_message_type<std::vector<price_breakdown>>(
      "std::vector<price_breakdown>");
  cfg.add_message_type<decision>("decision");
  cfg.add_message_type<price_config>("price_config");
  cfg.add_message_type<worker_status>("worker_status");
  cfg.add_message_type<router_status>("router_status");
  cfg.add_message_type<holder_match>("holder_match");
  cfg.add_message_type<std::vector<holder_match>>("std::vector<holder_match>");
  cfg.add_message_type<shard_status>("shard_status");
  cfg.add_message_type<std::vector<shard_status>>("std::vector<shard_status>");
  cfg.add_message_type<cache_event>("cache_event");
  cfg.add_message_type<std::vector<cache_event>>("std::vector<cache_event>");
  cfg.add_message_type<std::vector<worker_status>>(
      "std::vector<worker_status>");
  cfg.add_message_type<std::vector<router_status>>(
      "std::vector<router_status>");
}

void tune_for_latency(caf::actor_system_config& cfg, uint32_t threads) {
  cfg.set("scheduler.policy", caf::atom("sharing"));
  // One thread per core: CAF's default of at least 4 makes threads on a
  // small host hand messages to each other through sleeps and wake-ups
  // (2 cores: 1,669 decisions/s with 4 threads, 2,224 with 2).
  // Processes sharing a host split it further: with a mesh of five
  // processes on 2 cores, one thread each cut the CPU per decision by a
  // fifth (docs/benchmarks.md).
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  cfg.set("scheduler.max-threads", static_cast<size_t>(threads));
}

}  // namespace kvmesh
