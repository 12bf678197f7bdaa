// Tests of core/sim: fidelity of routing and cache accounting against plain
// counts over the trace, determinism, and bad configurations.
#include "core/sim.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_set>

namespace kvmesh {
namespace {

std::vector<trace_request> head_trace() {
  auto t = load_trace(KVMESH_TEST_DATA "/conversation_head.jsonl");
  EXPECT_TRUE(t) << t.err().message;
  return t ? *t : std::vector<trace_request>{};
}

// The same requests, each arriving long after the previous one finished,
// so that every block an earlier request computed is cached when a later
// one arrives.
std::vector<trace_request> spread(std::vector<trace_request> t) {
  for (size_t i = 0; i < t.size(); ++i)
    t[i].arrival_ms = 1e6 * static_cast<double>(i);
  return t;
}

// Caches that never evict: one tier, big enough for every block.
sim_config never_evict(uint32_t workers) {
  sim_config cfg;
  cfg.workers = workers;
  cfg.gpu_blocks = 1 << 20;
  cfg.host_blocks = 0;
  cfg.disk_blocks = 0;
  return cfg;
}

// Independent of the simulator: request i goes to worker owner(i); it hits
// the longest prefix of its blocks that earlier requests sent to the same
// worker.
template <class Owner>
double plain_hit_ratio(const std::vector<trace_request>& t, uint32_t workers,
                       Owner owner) {
  std::vector<std::unordered_set<uint64_t>> seen(workers);
  uint64_t hits = 0, blocks = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    auto& s = seen[owner(i)];
    size_t h = 0;
    while (h < t[i].blocks.size() && s.count(t[i].blocks[h]))
      ++h;
    hits += h;
    blocks += t[i].blocks.size();
    s.insert(t[i].blocks.begin(), t[i].blocks.end());
  }
  return static_cast<double>(hits) / static_cast<double>(blocks);
}

// `n` distinct prompts of `tokens` tokens in 64-token blocks, all arriving
// at `at` ms.
std::vector<trace_request> burst(size_t n, uint32_t tokens, uint32_t out,
                                 double at = 0) {
  std::vector<trace_request> t(n);
  for (size_t i = 0; i < n; ++i) {
    t[i].arrival_ms = at;
    t[i].input_tokens = tokens;
    t[i].output_tokens = out;
    for (uint32_t b = 0; b < tokens / 64; ++b)
      t[i].blocks.push_back(1000 * (i + 1) + b);
  }
  return t;
}

// One idle GPU of the engine's defaults: 64-token blocks, 16384 of them,
// an 8192-token budget, speed and model factor 1.
sim_config one_default_gpu() {
  sim_config cfg;
  cfg.workers = 1;
  cfg.block_tokens = 64;
  cfg.gpu_blocks = 16384;
  cfg.host_blocks = 0;
  cfg.disk_blocks = 0;
  return cfg;
}

// Two 4096-token prompts that arrive together share one 8192-token step
// (vLLM's engine core takes its whole input queue before a step): both
// first tokens come from that prefill pass, 169.1 ms; then one decode pass
// per token with both decoding, 130 of 16384 blocks active (6.17 ms; 5.74 ms
// on an empty GPU).
const double joint_step_ms = prefill_ms(8192);
const double joint_itl_ms = decode_ms(130.0 / 16384);

TEST(sim, prompts_that_arrive_together_share_a_step) {
  EXPECT_NEAR(joint_step_ms, 169.1, 0.05);
  EXPECT_NEAR(joint_itl_ms, 6.17, 0.01);
  const auto t = burst(2, 4096, 64);
  // kvmesh's awards come one auction (1 ms) after the arrivals, together.
  for (policy_kind k : {policy_kind::round_robin, policy_kind::kvmesh}) {
    auto r = simulate(one_default_gpu(), t, k);
    ASSERT_TRUE(r) << r.err().message;
    const double award = k == policy_kind::kvmesh ? 1.0 : 0.0;
    EXPECT_NEAR(r->ttft_cdf_ms.front(), award + joint_step_ms, 0.1)
        << to_string(k);
    EXPECT_NEAR(r->ttft_cdf_ms.back(), award + joint_step_ms, 0.1)
        << to_string(k);
    EXPECT_NEAR(r->itl_ms.mean, joint_itl_ms, 0.01) << to_string(k);
  }
}

// 28 distinct 2048-token prompts at once: 7 steps of 8192 tokens, four
// first tokens at the end of each, not 28 steps of one prompt.
TEST(sim, a_burst_of_prompts_fills_whole_steps) {
  auto r =
      simulate(one_default_gpu(), burst(28, 2048, 1), policy_kind::round_robin);
  ASSERT_TRUE(r) << r.err().message;
  std::map<double, int> at;
  for (double q : r->ttft_cdf_ms)
    at[q] = 0;
  EXPECT_EQ(at.size(), 7u);
  EXPECT_EQ(r->completed, 28u);
}

// `kvmesh engine`'s replay follows the same rule.
TEST(sim, replay_engine_lets_prompts_that_arrive_together_share_a_step) {
  auto g = engine::make(engine_config{});
  ASSERT_TRUE(g);
  const auto run = replay_engine(*g, burst(2, 4096, 64));
  ASSERT_EQ(run.outcomes.size(), 2u);
  for (const auto& o : run.outcomes) {
    EXPECT_NEAR(o.ttft_ms, joint_step_ms, 0.1);
    EXPECT_NEAR((o.e2e_ms - o.ttft_ms) / 63, joint_itl_ms, 0.01);
  }
  EXPECT_EQ(g->steps(), 64u);
  EXPECT_TRUE(run.refused.empty());
  EXPECT_EQ(run.stored, 128u);
}

TEST(sim, replay_engine_fills_whole_steps_with_a_burst) {
  auto g = engine::make(engine_config{});
  ASSERT_TRUE(g);
  const auto run = replay_engine(*g, burst(28, 2048, 1));
  EXPECT_EQ(g->steps(), 7u);
  std::map<double, int> at;
  for (const auto& o : run.outcomes)
    ++at[o.ttft_ms];
  ASSERT_EQ(at.size(), 7u);
  for (const auto& [t, n] : at)
    EXPECT_EQ(n, 4);
}

// A request that arrives as a step ends joins the next step with the ones
// that were waiting, instead of a step starting without it.
TEST(sim, replay_engine_takes_an_arrival_at_a_step_end_into_the_next_step) {
  auto g = engine::make(engine_config{});
  ASSERT_TRUE(g);
  auto t = burst(1, 4096, 2);
  const double first_end = prefill_ms(4096);
  auto late = burst(2, 2048, 1, first_end);
  for (auto& r : late)
    for (auto& b : r.blocks)
      b += 500000;  // distinct from the first prompt's
  t.insert(t.end(), late.begin(), late.end());
  const auto run = replay_engine(*g, t);
  // Step 2: the first prompt's second token and both late prompts.
  EXPECT_EQ(g->steps(), 2u);
  EXPECT_NEAR(run.outcomes[1].ttft_ms, run.outcomes[2].ttft_ms, 1e-9);
}

TEST(sim, round_robin_hit_ratio_equals_a_plain_count) {
  const auto t = spread(head_trace());
  sim_config cfg = never_evict(4);
  cfg.seed = 4;  // round robin starts at seed % workers: worker 0
  auto r = simulate(cfg, t, policy_kind::round_robin);
  ASSERT_TRUE(r) << r.err().message;
  const double want = plain_hit_ratio(t, 4, [](size_t i) { return i % 4; });
  EXPECT_GT(want, 0.05);
  EXPECT_DOUBLE_EQ(r->hit_ratio.total, want);
  EXPECT_DOUBLE_EQ(r->hit_ratio.gpu, want);
  EXPECT_EQ(r->completed, t.size());
  EXPECT_EQ(r->assigned, (std::vector<uint64_t>{150, 150, 150, 150}));
}

TEST(sim, prefix_hit_ratio_equals_a_plain_count) {
  const auto t = spread(head_trace());
  auto r = simulate(never_evict(4), t, policy_kind::prefix);
  ASSERT_TRUE(r) << r.err().message;
  // Every conversation request starts with block 0: all go to one worker,
  // which therefore sees the ideal (fleet-wide) reuse.
  const double want = plain_hit_ratio(t, 1, [](size_t) { return 0; });
  EXPECT_DOUBLE_EQ(r->hit_ratio.total, want);
  const auto orc = oracle(never_evict(4), t);
  EXPECT_DOUBLE_EQ(orc.hit_ratio, want);
}

TEST(sim, prefix_sends_the_whole_conversation_trace_to_one_worker) {
  const auto t = head_trace();  // real arrival times
  auto r = simulate(never_evict(8), t, policy_kind::prefix);
  ASSERT_TRUE(r) << r.err().message;
  size_t busy = 0;
  for (uint64_t a : r->assigned)
    busy += a > 0;
  EXPECT_EQ(busy, 1u);
  EXPECT_EQ(r->completed, t.size());
}

// A request too large for any GPU is refused by the engine it is sent to;
// it must not leave read work behind in the worker's ledger or the
// router's state, or that worker looks busy for the rest of the run.
TEST(sim, a_refused_request_leaves_no_load_behind) {
  sim_config cfg = one_default_gpu();
  cfg.workers = 2;
  cfg.gpu_blocks = 64;
  std::vector<trace_request> t = burst(1, 100 * 64, 1);  // 100 blocks > 64
  // Then pairs of distinct 8-block prompts, each pair long after the last.
  for (size_t i = 0; i < 10; ++i)
    for (auto& r : burst(2, 512, 32, 1e6 * static_cast<double>(i + 1))) {
      for (auto& b : r.blocks)
        b += 1000000 * (i + 1);
      t.push_back(r);
    }
  for (policy_kind k : {policy_kind::kvmesh, policy_kind::dynamo,
                        policy_kind::lmetric, policy_kind::least_loaded}) {
    auto r = simulate(cfg, t, k);
    ASSERT_TRUE(r) << r.err().message;
    EXPECT_EQ(r->refused, 1u) << to_string(k);
    EXPECT_EQ(r->completed, 20u) << to_string(k);
    // Each pair is split: one prompt per worker.
    std::vector<uint64_t> small(2, 0);
    for (size_t i = 1; i < t.size(); ++i)
      ++small[r->worker_of[i]];
    EXPECT_EQ(small[0], 10u) << to_string(k);
    EXPECT_EQ(small[1], 10u) << to_string(k);
  }
}

TEST(sim, every_policy_completes_every_request) {
  const auto t = head_trace();
  sim_config cfg;
  cfg.workers = 4;
  cfg.gpu_blocks = 512;
  cfg.host_blocks = 1024;
  cfg.disk_blocks = 2048;
  cfg.routers = 2;
  cfg.state_delay_ms = 50;
  for (policy_kind k : all_policies()) {
    auto r = simulate(cfg, t, k);
    ASSERT_TRUE(r) << to_string(k) << ": " << r.err().message;
    EXPECT_EQ(r->completed, t.size()) << to_string(k);
    uint64_t sum = 0;
    for (uint64_t a : r->assigned)
      sum += a;
    EXPECT_EQ(sum, t.size()) << to_string(k);
    EXPECT_GT(r->ttft_ms.mean, 0) << to_string(k);
    EXPECT_GE(r->imbalance, 1.0) << to_string(k);
  }
}

TEST(sim, no_policy_beats_the_oracle) {
  const auto t = head_trace();
  sim_config cfg;
  cfg.workers = 4;
  const auto orc = oracle(cfg, t);
  for (policy_kind k : all_policies()) {
    auto r = simulate(cfg, t, k);
    ASSERT_TRUE(r);
    EXPECT_GE(r->ttft_ms.mean, orc.ttft_ms.mean) << to_string(k);
    EXPECT_LE(r->hit_ratio.total, orc.hit_ratio + 1e-12) << to_string(k);
  }
}

TEST(sim, same_seed_same_result_other_seed_other_result) {
  const auto t = head_trace();
  sim_config cfg;
  cfg.workers = 4;
  cfg.seed = 7;
  auto a = simulate(cfg, t, policy_kind::random);
  auto b = simulate(cfg, t, policy_kind::random);
  cfg.seed = 8;
  auto c = simulate(cfg, t, policy_kind::random);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->assigned, b->assigned);
  EXPECT_EQ(a->ttft_ms.mean, b->ttft_ms.mean);
  EXPECT_NE(a->assigned, c->assigned);
}

TEST(sim, bad_configurations_are_errors) {
  const auto t = head_trace();
  sim_config cfg;
  cfg.workers = 0;
  auto r = simulate(cfg, t, policy_kind::kvmesh);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message.find("--workers"), std::string::npos);
  cfg = sim_config{};
  cfg.worker_speeds = {1, 0.5};
  r = simulate(cfg, t, policy_kind::kvmesh);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message.find("--worker-speeds has 2 entries for 8"),
            std::string::npos);
  cfg = sim_config{};
  r = simulate(cfg, {}, policy_kind::kvmesh);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code, ec::empty_input);
  cfg.speedup = 0;
  EXPECT_FALSE(validate(cfg));
}

// Samples of queued work are bounded, evenly spaced, one value per worker,
// and watching does not change the run.
TEST(sim, queued_samples_are_bounded_and_change_nothing) {
  const auto t = head_trace();
  sim_config cfg;
  cfg.workers = 4;
  auto plain = simulate(cfg, t, policy_kind::kvmesh);
  cfg.queued_sample_ms = 1;  // far more samples than the cap
  cfg.queued_max_samples = 32;
  auto sampled = simulate(cfg, t, policy_kind::kvmesh);
  ASSERT_TRUE(plain && sampled);
  EXPECT_TRUE(plain->queued_over_time.empty());
  EXPECT_EQ(plain->assigned, sampled->assigned);
  EXPECT_EQ(plain->ttft_ms.mean, sampled->ttft_ms.mean);
  const auto& q = sampled->queued_over_time;
  ASSERT_GE(q.size(), 16u);
  ASSERT_LE(q.size(), 32u);
  EXPECT_DOUBLE_EQ(q.front().time_ms, t.front().arrival_ms);
  double busiest = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    ASSERT_EQ(q[i].queued.size(), 4u);
    for (double v : q[i].queued)
      busiest = std::max(busiest, v);
    if (i > 1 && i + 1 < q.size()) {  // the last one is the run's end
      EXPECT_DOUBLE_EQ(q[i].time_ms - q[i - 1].time_ms,
                       q[1].time_ms - q[0].time_ms);
    }
  }
  EXPECT_GT(busiest, 0);
  for (double v : q.back().queued)
    EXPECT_EQ(v, 0);  // every request done
}

TEST(sim, queued_sampler_halves_when_full) {
  queued_sampler s(10, 4);
  for (int i = 0; i < 5; ++i)
    s.add({double(i)});
  // 0, 10, 20, 30 filled it; the fifth (at 40) kept 0 and 20 and joined them.
  ASSERT_EQ(s.samples().size(), 3u);
  EXPECT_EQ(s.samples()[1].time_ms, 20);
  EXPECT_EQ(s.samples()[2].time_ms, 40);
  EXPECT_EQ(s.samples()[2].queued, std::vector<double>{4});
  EXPECT_EQ(s.next_ms(), 60);
  s.skip_to(59);  // not yet due: nothing given up
  EXPECT_EQ(s.next_ms(), 60);
  s.skip_to(100);  // 60, 80 and 100 passed unknown
  EXPECT_EQ(s.next_ms(), 120);
  EXPECT_EQ(s.samples().size(), 3u);
  queued_sampler odd(10, 3);
  for (int i = 0; i < 1000; ++i)
    odd.add({double(i)});
  EXPECT_LE(odd.samples().size(), 3u);
  EXPECT_EQ(odd.samples().front().time_ms, 0);
}

// imbalance_of, as `kvmesh bench` measures its runs: never below 1, the
// simulator's own figure on the simulator's samples, nothing from too few.
TEST(sim, imbalance_of_samples) {
  EXPECT_TRUE(std::isnan(imbalance_of({})));
  EXPECT_TRUE(std::isnan(imbalance_of({{0, {5, 1}}})));
  EXPECT_EQ(imbalance_of({{0, {0, 0}}, {10, {0, 0}}}), 1);  // nothing queued
  EXPECT_EQ(imbalance_of({{0, {3, 3}}, {10, {1, 1}}}), 1);
  // 10 ms of all work on one of two workers (max/mean 2), then 30 ms even;
  // the idle interval between is left out; the last sample ends the run.
  EXPECT_DOUBLE_EQ(
      imbalance_of({{0, {4, 0}}, {10, {0, 0}}, {20, {2, 2}}, {50, {9, 0}}}),
      (10 * 2.0 + 30 * 1.0) / 40);
  sim_config cfg;
  cfg.workers = 4;
  cfg.queued_sample_ms = 50;
  cfg.queued_max_samples = 100000;
  auto r = simulate(cfg, head_trace(), policy_kind::round_robin);
  ASSERT_TRUE(r);
  EXPECT_GE(imbalance_of(r->queued_over_time), 1);
  EXPECT_NEAR(imbalance_of(r->queued_over_time), r->imbalance,
              0.25 * r->imbalance);
}

// The TTFT distribution runs from the fastest to the slowest request and
// agrees with the percentiles.
TEST(sim, ttft_cdf_agrees_with_the_summary) {
  sim_config cfg;
  cfg.workers = 4;
  auto r = simulate(cfg, head_trace(), policy_kind::round_robin);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->ttft_cdf_ms.size(), ttft_cdf_points);
  EXPECT_TRUE(std::is_sorted(r->ttft_cdf_ms.begin(), r->ttft_cdf_ms.end()));
  EXPECT_DOUBLE_EQ(r->ttft_cdf_ms[(ttft_cdf_points - 1) / 2], r->ttft_ms.p50);
  EXPECT_LE(r->ttft_ms.p99, r->ttft_cdf_ms.back());
}

// A worker that already holds a request's whole prefix on the GPU, with an
// equal queue, wins the auction: reuse is priced.
TEST(sim, kvmesh_follows_the_cache_when_loads_are_equal) {
  std::vector<trace_request> t;
  for (int i = 0; i < 4; ++i) {
    trace_request r;
    r.arrival_ms = 1e6 * i;
    r.input_tokens = 4096;
    r.output_tokens = 8;
    r.blocks = {1, 2, 3, 4, 5, 6, 7, 8};
    t.push_back(r);
  }
  auto r = simulate(never_evict(4), t, policy_kind::kvmesh);
  ASSERT_TRUE(r);
  size_t busy = 0;
  for (uint64_t a : r->assigned)
    busy += a > 0;
  EXPECT_EQ(busy, 1u);
  EXPECT_DOUBLE_EQ(r->hit_ratio.gpu, 24.0 / 32.0);
}

}  // namespace
}  // namespace kvmesh
