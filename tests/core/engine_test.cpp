// Tests of core/engine: step times, caching, tiers, eviction, preemption.
#include "core/engine.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <map>

namespace kvmesh {
namespace {

// Runs the engine in virtual time until idle; requests arrive at time 0
// unless given. Returns every event.
struct run_result {
  std::vector<engine_event> events;
  std::map<uint64_t, double> first, finish;
  std::vector<double> step_ends;
  size_t count(engine_event::kind_t k) const {
    size_t c = 0;
    for (const auto& e : events)
      c += e.kind == k;
    return c;
  }
  const engine_event& first_token(uint64_t id) const {
    for (const auto& e : events)
      if (e.kind == engine_event::first_token && e.request == id) return e;
    throw std::runtime_error("no first token");
  }
};

run_result drain(engine& g, double now = 0) {
  run_result r;
  while (auto end = g.start_step(now)) {
    now = *end;
    g.finish_step(r.events);
    r.step_ends.push_back(now);
  }
  for (const auto& e : r.events) {
    if (e.kind == engine_event::first_token) r.first[e.request] = e.time_ms;
    if (e.kind == engine_event::finished) r.finish[e.request] = e.time_ms;
  }
  return r;
}

engine_config small(uint64_t gpu = 100, uint64_t host = 0, uint64_t disk = 0) {
  engine_config cfg;
  cfg.block_tokens = 100;
  cfg.cache = {gpu, host, disk};
  return cfg;
}

engine make(const engine_config& cfg) {
  auto g = engine::make(cfg);
  EXPECT_TRUE(g) << g.err().message;
  return std::move(*g);
}

engine_request request(uint64_t id, uint32_t prompt, uint32_t out,
                       uint64_t first_hash) {
  engine_request r;
  r.id = id;
  r.prompt_tokens = prompt;
  r.output_tokens = out;
  for (uint32_t i = 0; i < (prompt + 99) / 100; ++i)
    r.blocks.push_back(first_hash + i);
  return r;
}

// A request that has not produced its first token can be taken back (an
// award the router gave up on): waiting, or in the step in progress (then
// dropped at its end, unreported); one past its first token cannot.
TEST(engine, cancel_takes_back_a_request_before_its_first_token) {
  auto cfg = small();
  cfg.max_num_seqs = 2;
  auto g = make(cfg);
  ASSERT_TRUE(g.submit(request(1, 200, 4, 100), 0));
  ASSERT_TRUE(g.submit(request(2, 200, 4, 200), 0));
  ASSERT_TRUE(g.submit(request(3, 200, 4, 300), 0));
  ASSERT_TRUE(g.start_step(0));
  EXPECT_EQ(g.running(), 2u);
  EXPECT_EQ(g.waiting(), 1u);
  EXPECT_TRUE(g.cancel(3));   // waiting
  EXPECT_TRUE(g.cancel(2));   // in this step
  EXPECT_FALSE(g.cancel(2));  // already
  EXPECT_EQ(g.waiting(), 0u);
  std::vector<engine_event> out;
  g.finish_step(out);
  EXPECT_EQ(g.running(), 1u);  // 2 dropped at the step's end
  EXPECT_FALSE(g.cancel(1));   // past its first token: runs on
  auto r = drain(g, 1000);
  out.insert(out.end(), r.events.begin(), r.events.end());
  size_t started_other = 0, finished1 = 0;
  for (const auto& e : out) {
    started_other += e.kind == engine_event::first_token && e.request != 1;
    finished1 += e.kind == engine_event::finished && e.request == 1;
  }
  EXPECT_EQ(started_other, 0u);
  EXPECT_EQ(finished1, 1u);
  EXPECT_FALSE(g.cancel(1));  // finished
  EXPECT_FALSE(g.busy());
  EXPECT_EQ(g.cache().active(), 0u);  // nothing of 2 or 3 still held
}

TEST(engine, polynomials) {
  EXPECT_NEAR(prefill_ms(1000), 4.209989e-07 * 1e6 + 15.18344 + 16.50142, 1e-9);
  EXPECT_DOUBLE_EQ(prefill_ms(0), 0.0);
  EXPECT_NEAR(decode_ms(0.5), -25.74 * 0.25 + 54.01 * 0.5 + 5.74, 1e-9);
  EXPECT_DOUBLE_EQ(decode_ms(0), 5.74);
  EXPECT_NEAR(decode_ms(1), -25.74 + 54.01 + 5.74, 1e-9);
}

TEST(engine, step_times_follow_the_polynomials) {
  auto g = make(small());
  ASSERT_TRUE(g.submit(request(1, 1000, 3, 0), 0));
  auto r = drain(g);
  ASSERT_EQ(r.step_ends.size(), 3u);
  // Step 1 prefills 1000 tokens and yields the first token from that pass:
  // no decode pass is charged, nothing else is running.
  const double s1 = prefill_ms(1000);
  EXPECT_NEAR(r.first[1], s1, 1e-9);
  // Then two decode steps; the first decoded token needs an 11th block.
  EXPECT_NEAR(r.finish[1], s1 + 2 * decode_ms(0.11), 1e-9);
}

TEST(engine, long_prompts_prefill_in_chunks) {
  engine_config cfg = small(200);
  auto g = make(cfg);
  ASSERT_TRUE(g.submit(request(1, 10000, 1, 0), 0));
  auto r = drain(g);
  ASSERT_EQ(r.step_ends.size(), 2u);
  EXPECT_NEAR(r.step_ends[0], prefill_ms(8192), 1e-9);  // no token yet
  EXPECT_NEAR(r.first[1], prefill_ms(8192) + prefill_ms(1808), 1e-9);
  EXPECT_EQ(r.count(engine_event::progress), 1u);
}

TEST(engine, speed_and_model_factor_scale_step_times) {
  auto base = make(small());
  ASSERT_TRUE(base.submit(request(1, 1000, 4, 0), 0));
  const double t = drain(base).finish[1];
  engine_config cfg = small();
  cfg.speed = 0.5;
  cfg.model_factor = 3;
  auto slow = make(cfg);
  ASSERT_TRUE(slow.submit(request(1, 1000, 4, 0), 0));
  EXPECT_NEAR(drain(slow).finish[1], 6 * t, 1e-6);
}

TEST(engine, a_cached_prefix_is_not_recomputed) {
  auto g = make(small());
  ASSERT_TRUE(g.submit(request(1, 1000, 1, 0), 0));
  auto r1 = drain(g);
  EXPECT_EQ(r1.count(engine_event::stored), 10u);
  EXPECT_EQ(r1.first_token(1).hits[0], 0u);
  // Same 10 blocks: all hit on the GPU, only the last token is computed.
  ASSERT_TRUE(g.submit(request(2, 1000, 1, 0), 100));
  auto r2 = drain(g, 100);
  EXPECT_EQ(r2.first_token(2).hits[0], 10u);
  EXPECT_NEAR(r2.first[2] - 100, prefill_ms(1), 1e-9);
  EXPECT_EQ(r2.count(engine_event::stored), 0u);
}

TEST(engine, kv_events_name_the_root_of_their_chain) {
  auto g = make(small(10, 10));
  ASSERT_TRUE(g.submit(request(1, 1000, 1, 500), 0));
  auto r1 = drain(g);
  ASSERT_TRUE(g.submit(request(2, 1000, 1, 700), 1000));
  auto r2 = drain(g, 1000);
  size_t checked = 0;
  for (const auto* r : {&r1, &r2}) {
    for (const auto& e : r->events) {
      if (e.kind != engine_event::stored && e.kind != engine_event::removed)
        continue;
      // Offloads of request 1's blocks keep its root; request 2's are its.
      EXPECT_EQ(e.root, e.hash < 700 ? 500u : 700u) << e.hash;
      ++checked;
    }
  }
  EXPECT_GE(checked, 40u);  // 10 + 10 stored, 10 GPU removals, 10 to host
}

TEST(engine, eviction_reports_removed_blocks) {
  auto g = make(small(20));
  ASSERT_TRUE(g.submit(request(1, 1000, 1, 0), 0));
  ASSERT_TRUE(g.submit(request(2, 1000, 1, 100), 0));
  drain(g);
  // A third prompt needs 10 of the 20 blocks: the LRU ones (request 1's).
  ASSERT_TRUE(g.submit(request(3, 1000, 1, 200), 1000));
  auto r = drain(g, 1000);
  EXPECT_EQ(r.count(engine_event::removed), 10u);
  for (const auto& e : r.events) {
    if (e.kind == engine_event::removed) {
      EXPECT_LT(e.hash, 10u);
    }
  }
  EXPECT_FALSE(g.cache().find(0, nullptr));
  EXPECT_TRUE(g.cache().find(100, nullptr));
}

// Prefix of request 1 pushed out of the GPU into host memory or disk by
// request 2; then request 3 with request 1's prompt reuses it from there.
double ttft_of_reuse(engine_config cfg, uint32_t* hits_out) {
  auto g = make(cfg);
  EXPECT_TRUE(g.submit(request(1, 1000, 1, 0), 0));
  drain(g);
  EXPECT_TRUE(g.submit(request(2, 1000, 1, 100), 1000));
  drain(g, 1000);
  EXPECT_TRUE(g.submit(request(3, 1000, 1, 0), 2000));
  auto r = drain(g, 2000);
  const auto& ft = r.first_token(3);
  std::copy(ft.hits, ft.hits + tier_count, hits_out);
  return r.first[3] - 2000;
}

TEST(engine, host_hit_is_faster_than_a_miss) {
  uint32_t hits[3];
  const double host = ttft_of_reuse(small(10, 100), hits);
  EXPECT_EQ(hits[1], 10u);
  const double miss = ttft_of_reuse(small(10), hits);
  EXPECT_EQ(hits[0] + hits[1] + hits[2], 0u);
  EXPECT_LT(host, miss);
  engine_config cfg = small(10, 100);
  const double load =
      10 * 1e3 * cfg.kv_bytes_per_token * 100 / cfg.host_bandwidth;
  EXPECT_NEAR(host, prefill_ms(1) + load, 1e-9);
}

TEST(engine, disk_hit_costs_its_bandwidth) {
  engine_config cfg = small(10, 5, 100);
  cfg.disk_bandwidth = 1e9;
  uint32_t hits[3];
  const double t = ttft_of_reuse(cfg, hits);
  // Request 2 pushed request 1's blocks GPU -> host -> disk: the first 5
  // went to disk, the last 5 stayed in host memory.
  EXPECT_EQ(hits[2], 5u);
  EXPECT_EQ(hits[1], 5u);
  const double bytes = cfg.kv_bytes_per_token * 100;
  const double load = 5 * 1e3 * bytes / cfg.disk_bandwidth +
                      5 * 1e3 * bytes / cfg.host_bandwidth;
  EXPECT_NEAR(t, prefill_ms(1) + load, 1e-9);
  EXPECT_DOUBLE_EQ(make(cfg).load_ms(tier::disk), 1e3 * bytes / 1e9);
}

TEST(engine, tier_credit_compares_load_with_recompute) {
  engine_config cfg;
  cfg.block_tokens = 512;
  auto g = make(cfg);
  const double recompute = prefill_ms(8192) - prefill_ms(7680);
  EXPECT_NEAR(g.recompute_ms(), recompute, 1e-9);
  const double bytes = 512 * cfg.kv_bytes_per_token;
  EXPECT_NEAR(g.tier_credit(tier::host),
              1 - 1e3 * bytes / cfg.host_bandwidth / recompute, 1e-9);
  EXPECT_GT(g.tier_credit(tier::host), 0.7);
  EXPECT_LT(g.tier_credit(tier::disk), 0);  // NVMe is slower than an H100
  EXPECT_DOUBLE_EQ(g.tier_credit(tier::gpu), 1.0);
  // A slower GPU recomputes slower, so loading is worth more.
  cfg.speed = 0.25;
  EXPECT_GT(make(cfg).tier_credit(tier::disk), g.tier_credit(tier::disk));
}

TEST(engine, preemption_frees_blocks_and_recomputes) {
  // 12 blocks: two 5-block prompts fit, but decoding past 600 tokens each
  // needs 14. The newer sequence is preempted, then finishes later.
  auto g = make(small(12));
  ASSERT_TRUE(g.submit(request(1, 500, 150, 0), 0));
  ASSERT_TRUE(g.submit(request(2, 500, 150, 100), 0));
  auto r = drain(g);
  EXPECT_GE(g.preemptions(), 1u);
  EXPECT_GE(r.count(engine_event::preempted), 1u);
  for (const auto& e : r.events) {
    if (e.kind == engine_event::preempted) {
      EXPECT_EQ(e.request, 2u);
    }
  }
  ASSERT_EQ(r.finish.size(), 2u);
  EXPECT_LT(r.finish[1], r.finish[2]);
  EXPECT_FALSE(g.busy());
  EXPECT_EQ(g.cache().active(), 0u);
}

TEST(engine, batch_limits_hold) {
  engine_config cfg = small(1000);
  cfg.max_num_seqs = 2;
  auto g = make(cfg);
  for (uint64_t i = 0; i < 3; ++i)
    ASSERT_TRUE(g.submit(request(i, 100, 5, 100 * i), 0));
  ASSERT_TRUE(g.start_step(0));
  EXPECT_EQ(g.running(), 2u);
  EXPECT_EQ(g.waiting(), 1u);
  std::vector<engine_event> ev;
  g.finish_step(ev);
}

// A prompt of `tokens` tokens in distinct 64-token blocks from first_hash.
engine_request distinct(uint64_t id, uint32_t tokens, uint32_t out,
                        uint64_t first_hash) {
  engine_request r;
  r.id = id;
  r.prompt_tokens = tokens;
  r.output_tokens = out;
  for (uint32_t i = 0; i < (tokens + 63) / 64; ++i)
    r.blocks.push_back(first_hash + i);
  return r;
}

// A driver asks step_due before it starts a step: not while more input of
// the same instant is to come, not during a step, not without work.
TEST(engine, a_step_is_due_once_the_instant_has_no_more_input) {
  auto g = make(engine_config{});
  const double never = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(g.step_due(0, never));  // no work
  ASSERT_TRUE(g.submit(distinct(1, 4096, 64, 1000), 0));
  EXPECT_FALSE(g.step_due(0, 0));  // another arrival at this instant
  EXPECT_TRUE(g.step_due(0, 1));
  EXPECT_TRUE(g.step_due(0, never));
  ASSERT_TRUE(g.start_step(0));
  EXPECT_FALSE(g.step_due(0, never));  // in a step
  std::vector<engine_event> ev;
  g.finish_step(ev);
  EXPECT_TRUE(g.step_due(1000, never));  // decoding
}

// Two 4096-token prompts submitted at the same instant, then one step: one
// 8192-token prefill, both first tokens at its end (the prefill's own pass
// samples them); then one decode pass per token, both decoding.
TEST(engine, prompts_that_arrive_together_share_a_step) {
  auto g = make(engine_config{});  // 64-token blocks, 8192-token budget
  ASSERT_TRUE(g.submit(distinct(1, 4096, 64, 1000), 0));
  ASSERT_TRUE(g.submit(distinct(2, 4096, 64, 2000), 0));
  auto r = drain(g);
  const double step1 = prefill_ms(8192);
  EXPECT_NEAR(prefill_ms(8192),
              4.209989e-07 * 8192 * 8192 + 1.518344e-02 * 8192 + 16.50142,
              1e-9);
  EXPECT_NEAR(prefill_ms(8192), 169.1, 0.05);
  EXPECT_NEAR(r.first.at(1), step1, 0.1);
  EXPECT_NEAR(r.first.at(2), step1, 0.1);
  // 63 more tokens each, in 63 decode steps of 130 active blocks.
  const double itl = decode_ms(130.0 / 16384);
  EXPECT_NEAR((r.finish.at(1) - r.first.at(1)) / 63, itl, 0.01);
  EXPECT_NEAR((r.finish.at(2) - r.first.at(2)) / 63, itl, 0.01);
  EXPECT_EQ(g.steps(), 64u);
}

// A request's latencies come with its events: the finished event says when
// it arrived, when its first token came and how many it generated, which is
// all a worker needs for TTFT, inter-token and end-to-end figures.
TEST(engine, a_finished_request_says_its_arrival_first_token_and_length) {
  auto g = make(engine_config{});
  ASSERT_TRUE(g.submit(distinct(1, 4096, 64, 1000), 25));
  auto r = drain(g, 25);
  EXPECT_DOUBLE_EQ(r.first_token(1).arrival_ms, 25);
  const engine_event* done = nullptr;
  for (const auto& e : r.events)
    if (e.kind == engine_event::finished && e.request == 1) done = &e;
  ASSERT_NE(done, nullptr);
  EXPECT_DOUBLE_EQ(done->arrival_ms, 25);
  EXPECT_DOUBLE_EQ(done->first_ms, r.first.at(1));
  EXPECT_EQ(done->generated, 64u);
  EXPECT_NEAR(done->first_ms - done->arrival_ms, prefill_ms(4096), 0.1);
}

// 28 distinct 2048-token prompts together: four to a step of 8192 tokens.
TEST(engine, a_burst_of_prompts_fills_whole_steps) {
  auto g = make(engine_config{});
  for (uint64_t i = 0; i < 28; ++i)
    ASSERT_TRUE(g.submit(distinct(i, 2048, 1, 1000 * (i + 1)), 0));
  auto r = drain(g);
  EXPECT_EQ(g.steps(), 7u);
  std::map<double, int> at;
  for (const auto& [id, t] : r.first)
    ++at[t];
  ASSERT_EQ(at.size(), 7u);
  for (const auto& [t, n] : at)
    EXPECT_EQ(n, 4);
}

TEST(engine, bad_input_is_an_error) {
  engine_config cfg = small();
  cfg.block_tokens = 0;
  EXPECT_EQ(engine::make(cfg).err().code, ec::invalid_argument);
  cfg = small(0);
  EXPECT_EQ(engine::make(cfg).err().code, ec::invalid_argument);
  auto g = make(small(10));
  EXPECT_EQ(g.submit(request(1, 0, 1, 0), 0).err().code, ec::empty_input);
  EXPECT_EQ(g.submit(request(2, 5000, 1, 0), 0).err().code,
            ec::capacity_exceeded);
  auto too_many = request(3, 100, 1, 0);
  too_many.blocks.push_back(99);
  EXPECT_EQ(g.submit(too_many, 0).err().code, ec::invalid_argument);
  auto huge = request(4, 100, UINT32_MAX, 0);
  EXPECT_EQ(g.submit(huge, 0).err().code, ec::capacity_exceeded);
  EXPECT_FALSE(g.busy());
  EXPECT_EQ(g.refused(), 4u);
}

// What the engine tells a bid: the decode pass each step carries, and the
// wait for space, from the mean output of what it finished.
TEST(engine, step_overhead_and_wait_for_space_follow_the_step_times) {
  engine g = make(small(20));
  EXPECT_EQ(g.step_overhead(), 0.0);  // nothing decodes
  EXPECT_EQ(g.space_wait_ms(100), 0.0);
  ASSERT_TRUE(g.submit(request(1, 100, 3, 1000), 0));
  ASSERT_TRUE(g.submit(request(2, 1200, 100, 2000), 0));
  std::vector<engine_event> ev;
  double now = 0;
  bool first_done = false;
  while (!first_done) {
    auto end = g.start_step(now);
    ASSERT_TRUE(end);
    now = *end;
    g.finish_step(ev);
    for (const auto& e : ev)
      first_done |= e.kind == engine_event::finished && e.request == 1;
  }
  EXPECT_DOUBLE_EQ(g.mean_output_tokens(), 3.0);
  const double kv = static_cast<double>(g.cache().active()) /
                    static_cast<double>(g.cache().capacity(tier::gpu));
  EXPECT_GT(kv, 0.5);
  EXPECT_DOUBLE_EQ(g.step_overhead(), decode_ms(kv) / prefill_ms(8192));
  const uint64_t free = g.cache().gpu_available();
  EXPECT_EQ(g.space_wait_ms(free), 0.0);  // fits now
  // One block short: the one running sequence must end, after the mean
  // output of 3 tokens, at the current decode step.
  EXPECT_DOUBLE_EQ(g.space_wait_ms(free + 1), 3 * decode_ms(kv));
}

}  // namespace
}  // namespace kvmesh
