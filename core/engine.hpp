// The engine model: a simulated GPU serving an LLM with continuous batching,
// chunked prefill, prefix caching over tiered KV blocks and preemption, timed
// by fitted polynomials. Driven by a clock it is given (virtual or wall).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "core/error.hpp"
#include "core/tiered_cache.hpp"

namespace kvmesh {

struct engine_config {
  uint32_t block_tokens = 64;
  uint32_t max_num_batched_tokens = 8192;
  uint32_t max_num_seqs = 256;
  cache_config cache{16384, 0, 0};
  double speed = 1.0;         // this GPU's speed; times divide by it
  double model_factor = 1.0;  // a larger model is slower per token
  // Host and disk hits are loaded, not recomputed: a block of block_tokens
  // tokens at kv_bytes_per_token bytes each, over the tier's bandwidth.
  double kv_bytes_per_token = 131072;  // 8B-class model, fp16 KV
  double host_bandwidth = 25e9;        // bytes per second (PCIe 4 x16)
  double disk_bandwidth = 3e9;         // bytes per second (NVMe)
};

struct engine_request {
  uint64_t id = 0;
  uint32_t prompt_tokens = 0;
  uint32_t output_tokens = 1;
  // Chained hashes of the prompt's blocks, first block first. At most
  // ceil(prompt_tokens / block_tokens); blocks past the list are computed
  // but never cached (an unhashed partial tail).
  std::vector<uint64_t> blocks;
};

struct engine_event {
  enum kind_t : uint8_t {
    stored,       // block `hash` entered tier `where`
    removed,      // block `hash` left tier `where`
    progress,     // request's prefill has `remaining` tokens left
    first_token,  // request's prefill is done; hits say what it reused
    finished,     // request's last token
    preempted,    // request lost its blocks and waits to be recomputed
  };
  kind_t kind;
  tier where = tier::gpu;
  uint64_t hash = 0;
  uint64_t root = 0;  // stored, removed: the first block of hash's chain
  uint64_t request = 0;
  double time_ms = 0;
  uint32_t remaining = 0;
  uint32_t hits[tier_count] = {0, 0, 0};  // first_token: reused blocks
  // first_token, finished: when the request arrived; finished: when its
  // first token came and how many it generated (for its latencies).
  double arrival_ms = 0;
  double first_ms = 0;
  uint32_t generated = 0;
};

// Step-time model (milliseconds) before speed, model factor and loads.
double prefill_ms(double new_tokens);
double decode_ms(double kv_fraction);
// The decode pass at an occupancy over the prefill of a full step of
// `batched_tokens`: how much slower prefill runs beside decoding sequences.
double decode_overhead(double kv_fraction, uint32_t batched_tokens);

class engine {
 public:
  static expected<engine> make(const engine_config& cfg);

  // Queues a request that arrived at now_ms. Errors name the bad field and
  // count in refused().
  status submit(engine_request req, double now_ms);

  // Plans and starts one step at now_ms; returns when it ends, or nothing
  // when there is no work. Call finish_step() at that time before the next
  // start_step().
  std::optional<double> start_step(double now_ms);
  // Whether a driver should start the next step at now_ms: the engine is
  // idle, has work, and no more input can come at this instant (the next
  // comes at next_input_ms; infinity when none is known to follow). vLLM's
  // engine core takes every request already in its input queue before it
  // schedules a step, so requests that arrive together share one; a driver
  // that started a step at the first of them would serialize them.
  bool step_due(double now_ms, double next_input_ms) const {
    return !in_step() && busy() && next_input_ms > now_ms;
  }
  // Takes back a request that has not produced its first token (waiting,
  // or running its prefill; one in the step in progress is dropped when the
  // step ends, unreported): true if so. One past its first token runs on.
  bool cancel(uint64_t request);
  // Completes the running step: computed blocks become cached, tokens are
  // generated; appends what happened to `out`.
  void finish_step(std::vector<engine_event>& out);

  // Calls f(request id, tokens generated so far) for each running sequence:
  // a server streams each request's tokens as its steps produce them.
  template <class F>
  void each_running(F&& f) const {
    for (uint32_t slot : running_)
      f(seqs_[slot].req.id, seqs_[slot].generated);
  }
  bool busy() const { return !running_.empty() || !waiting_.empty(); }
  bool in_step() const { return step_end_ >= 0; }
  size_t waiting() const { return waiting_.size(); }
  size_t running() const { return running_.size(); }
  // Prompt tokens not yet prefilled, over waiting and running sequences.
  uint64_t pending_prefill_tokens() const;
  uint64_t preemptions() const { return preemptions_; }
  // Requests that submit() turned away (bad fields or too large).
  uint64_t refused() const { return refused_; }
  uint64_t steps() const { return steps_; }
  const tiered_cache& cache() const { return cache_; }
  tiered_cache& cache() { return cache_; }
  const engine_config& config() const { return cfg_; }
  void set_speed(double speed) { cfg_.speed = speed; }
  // Time to load one block from a tier (0 for GPU).
  double load_ms(tier t) const;
  // Time to recompute one block in a full prefill chunk on this GPU.
  double recompute_ms() const;
  // How long a request needing `blocks` more GPU blocks would wait, behind
  // the waiting queue, for running sequences to finish and free their
  // blocks (ms; 0 when they fit now). Uses only what a serving engine
  // knows: free blocks, what waits, how many run and hold, the mean output
  // of the sequences it finished, the current decode step. Each running
  // sequence is taken to end at the same rate (1 / mean output per step),
  // so the k-th of R to finish does so after L/R + L/(R-1) + ... steps.
  double space_wait_ms(uint64_t blocks) const;
  // A decode pass at the current occupancy over the prefill time of a full
  // step (0 when nothing decodes): how much slower prefill runs here than
  // on an idle GPU.
  double step_overhead() const;
  // The mean output tokens of finished sequences (0 before the first).
  double mean_output_tokens() const {
    return finished_ ? static_cast<double>(finished_tokens_) / finished_ : 0;
  }
  // What reusing a block from tier t saves, as a fraction of recomputing it:
  // 1 - load / recompute. Negative when loading is slower than computing.
  double tier_credit(tier t) const { return 1.0 - load_ms(t) / recompute_ms(); }

 private:
  struct sequence {
    engine_request req;
    double arrival_ms = 0;
    uint32_t generated = 0;  // output tokens produced so far
    bool first_token_sent = false;
    double first_ms = 0;
    bool cancelled = false;    // taken back during a step: dropped at its end
    uint32_t held = 0;         // req.blocks[0, held) are referenced
    uint32_t anon = 0;         // anonymous GPU blocks held
    uint32_t done_tokens = 0;  // tokens of the context in the KV cache
    uint32_t prefill_end = 0;  // context length to prefill at admission
    uint32_t chunk = 0;        // tokens scheduled in the current step
    bool decoding = false;     // scheduled for a decode token this step
    uint32_t hits[tier_count] = {0, 0, 0};
  };

  explicit engine(const engine_config& cfg, tiered_cache cache);
  uint32_t context_tokens(const sequence& s) const {
    return s.req.prompt_tokens + s.generated;
  }
  double kv_fraction() const {
    return static_cast<double>(cache_.active()) /
           static_cast<double>(cache_.capacity(tier::gpu));
  }
  uint32_t blocks_for(uint32_t tokens) const {
    return (tokens + cfg_.block_tokens - 1) / cfg_.block_tokens;
  }
  bool admit(uint32_t slot, double& load_ms);
  void release_blocks(sequence& s);
  void preempt(uint32_t slot);
  void flush_cache_events(double t);
  status check(engine_request& req) const;

  engine_config cfg_;
  tiered_cache cache_;
  std::vector<sequence> seqs_;
  std::vector<uint32_t> free_;
  std::deque<uint32_t> waiting_;
  std::vector<uint32_t> running_;        // in admission order
  std::vector<uint32_t> still_running_;  // finish_step's scratch, kept
  std::vector<cache_event> cache_events_;
  std::vector<engine_event> pending_;  // events of the step in progress
  double step_start_ = -1;
  double step_end_ = -1;
  uint64_t preemptions_ = 0;
  uint64_t refused_ = 0;
  uint64_t steps_ = 0;
  uint64_t finished_ = 0;
  uint64_t finished_tokens_ = 0;
};

}  // namespace kvmesh
