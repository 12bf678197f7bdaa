// The engines' Prometheus metrics: the text format, and the gauges of vLLM
// and SGLang that say how loaded an engine is.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engines/engine_state.hpp"

namespace kvmesh {

// One sample line: name{label="value",...} value.
struct prom_sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
  const std::string* label(std::string_view key) const;
};

// The samples of a scrape. Comments and lines that do not parse are left
// out; `bad` (when set) counts the latter.
std::vector<prom_sample> parse_prometheus(std::string_view text,
                                          size_t* bad = nullptr);

// The load of data-parallel rank `rank` from a scrape of vLLM or SGLang:
// waiting requests (vllm:num_requests_waiting, sglang:num_queue_reqs),
// running ones (vllm:num_requests_running, sglang:num_running_reqs), KV
// usage (vllm:kv_cache_usage_perc, its older name vllm:gpu_cache_usage_perc,
// sglang:token_usage) and the GPU block count (the num_gpu_blocks label of
// vllm:cache_config_info, or sglang:max_total_num_tokens / block_tokens).
// Samples labelled with another rank (vLLM's "engine", SGLang's "dp_rank")
// are left out; has_metrics is false when no known gauge was found.
engine_metrics engine_metrics_of(const std::vector<prom_sample>& samples,
                                 int rank, uint32_t block_tokens);

}  // namespace kvmesh
