// Tests of engines/metrics: Prometheus text, and vLLM's and SGLang's gauges
// per data-parallel rank.
#include "engines/metrics.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace kvmesh {
namespace {

// As vLLM v1 serves it with two data-parallel engines.
constexpr const char* vllm_scrape =
    R"(# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.10
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.05
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_gpu_blocks="27034",num_cpu_blocks="None"} 1.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 1234.0
)";

constexpr const char* sglang_scrape = R"(# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",dp_rank="0"} 4.0
sglang:num_queue_reqs{model_name="m",dp_rank="0"} 7.0
sglang:token_usage{model_name="m",dp_rank="0"} 0.25
sglang:max_total_num_tokens{model_name="m",dp_rank="0"} 160000.0
)";

TEST(metrics, the_text_format) {
  size_t bad = 0;
  auto s = parse_prometheus(
      "# HELP x y\n"
      "a 1\n"
      "b{l=\"q\\\"uote\",m=\"x\"} 2.5 1700000000000\r\n"
      "  c{} NaN\n"
      "d{l=\"unterminated} 3\n"
      "e{l=\"v\"}\n"
      "5bad 1\n",
      &bad);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].name, "a");
  EXPECT_EQ(s[0].value, 1);
  ASSERT_NE(s[1].label("l"), nullptr);
  EXPECT_EQ(*s[1].label("l"), "q\"uote");
  EXPECT_EQ(s[1].value, 2.5);
  EXPECT_TRUE(std::isnan(s[2].value));
  EXPECT_EQ(bad, 3u);
}

TEST(metrics, vllm_per_engine) {
  auto s = parse_prometheus(vllm_scrape);
  auto r0 = engine_metrics_of(s, 0, 16);
  EXPECT_TRUE(r0.has_metrics);
  EXPECT_EQ(r0.running, 3);
  EXPECT_EQ(r0.waiting, 2);
  EXPECT_DOUBLE_EQ(r0.kv_usage, 0.42);  // the current name wins
  EXPECT_EQ(r0.gpu_blocks, 27034u);
  auto r1 = engine_metrics_of(s, 1, 16);
  EXPECT_EQ(r1.running, 1);
  EXPECT_DOUBLE_EQ(r1.kv_usage, 0.05);
  EXPECT_EQ(r1.gpu_blocks, 0u);  // its cache_config_info is not there
}

TEST(metrics, sglang_and_nothing_known) {
  auto s = parse_prometheus(sglang_scrape);
  auto m = engine_metrics_of(s, 0, 16);
  EXPECT_TRUE(m.has_metrics);
  EXPECT_EQ(m.running, 4);
  EXPECT_EQ(m.waiting, 7);
  EXPECT_DOUBLE_EQ(m.kv_usage, 0.25);
  EXPECT_EQ(m.gpu_blocks, 10000u);
  EXPECT_FALSE(engine_metrics_of(s, 1, 16).has_metrics);
  EXPECT_FALSE(engine_metrics_of(parse_prometheus("x 1\n"), 0, 16).has_metrics);
}

}  // namespace
}  // namespace kvmesh
