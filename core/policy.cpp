// The policies' factory and names; each policy is in core/policies/.
#include "core/policy.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "core/engine.hpp"
#include "core/policies/common.hpp"

namespace kvmesh {

namespace {

constexpr std::pair<policy_kind, const char*> names[] = {
    {policy_kind::random, "random"},
    {policy_kind::round_robin, "round_robin"},
    {policy_kind::least_loaded, "least_loaded"},
    {policy_kind::prefix, "prefix"},
    {policy_kind::dynamo, "dynamo"},
    {policy_kind::sglang, "sglang"},
    {policy_kind::llmd, "llmd"},
    {policy_kind::preble, "preble"},
    {policy_kind::mooncake, "mooncake"},
    {policy_kind::kvmesh, "kvmesh"},
    {policy_kind::lmetric, "lmetric"},
    {policy_kind::sglang_events, "sglang_events"},
};

}  // namespace

const char* to_string(policy_kind k) {
  for (const auto& [kind, name] : names)
    if (kind == k) return name;
  return "unknown";
}

expected<policy_kind> parse_policy(std::string_view name) {
  for (const auto& [kind, n] : names)
    if (name == n) return kind;
  std::string known;
  for (const auto& [kind, n] : names)
    known += std::string(known.empty() ? "" : ", ") + n;
  return make_error(
      ec::invalid_argument,
      "unknown policy '" + std::string(name) + "' (known: " + known + ")");
}

const std::vector<policy_kind>& all_policies() {
  static const std::vector<policy_kind> all = [] {
    std::vector<policy_kind> v;
    for (const auto& [kind, name] : names)
      v.push_back(kind);
    return v;
  }();
  return all;
}

double estimated_prefill_ms(double tokens, uint32_t max_batched) {
  if (tokens <= 0) return 0;
  const double full = std::floor(tokens / max_batched);
  const double rest = tokens - full * max_batched;
  return full * prefill_ms(max_batched) + prefill_ms(rest);
}

expected<std::unique_ptr<router_policy>> make_policy(policy_kind kind,
                                                     const policy_config& cfg) {
  if (cfg.workers == 0)
    return make_error(ec::invalid_argument, "a policy needs >= 1 worker");
  if (cfg.block_tokens == 0)
    return make_error(ec::invalid_argument, "block size must be >= 1 token");
  std::unique_ptr<router_policy> p;
  switch (kind) {
    case policy_kind::random:
      p = policies::make_random(cfg);
      break;
    case policy_kind::round_robin:
      p = policies::make_round_robin(cfg);
      break;
    case policy_kind::least_loaded:
      p = policies::make_least_loaded(cfg);
      break;
    case policy_kind::prefix:
      p = policies::make_prefix(cfg);
      break;
    case policy_kind::dynamo:
      p = policies::make_dynamo(cfg);
      break;
    case policy_kind::sglang:
      p = policies::make_sglang(cfg);
      break;
    case policy_kind::llmd:
      p = policies::make_llmd(cfg);
      break;
    case policy_kind::preble:
      p = policies::make_preble(cfg);
      break;
    case policy_kind::mooncake:
      p = policies::make_mooncake(cfg);
      break;
    case policy_kind::kvmesh:
      p = policies::make_kvmesh(cfg);
      break;
    case policy_kind::lmetric:
      p = policies::make_lmetric(cfg);
      break;
    case policy_kind::sglang_events:
      p = policies::make_sglang_events(cfg);
      break;
  }
  return p;
}

}  // namespace kvmesh
