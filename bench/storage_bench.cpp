// Benchmarks of an INDEX SHARD: ingest, prefix query, memory and reopen.
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/block_index.hpp"
#include "storage/block_store.hpp"

namespace kvmesh {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

constexpr uint32_t workers = 16;
constexpr size_t chain_blocks = 64;
constexpr size_t shard_blocks = 10'000'000;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// A shard's contents: chains of 64 random block hashes, each chain held by
// one worker or by two (half and half), deeper blocks in slower tiers as an
// engine offloads them. One batch is one worker's report of one chain.
struct shard_data {
  std::vector<std::vector<uint64_t>> chains;
  std::vector<std::vector<uint32_t>> holders;  // per chain
  size_t entries = 0;
};

shard_data make_shard(size_t blocks, int holders_per_chain, uint64_t seed) {
  shard_data d;
  std::mt19937_64 rng(seed);
  d.chains.resize(blocks / chain_blocks);
  d.holders.resize(d.chains.size());
  for (size_t c = 0; c < d.chains.size(); ++c) {
    d.chains[c].resize(chain_blocks);
    for (auto& h : d.chains[c])
      h = rng();
    const int n = holders_per_chain ? holders_per_chain : 1 + int(rng() % 2);
    const uint32_t a = static_cast<uint32_t>(rng() % workers);
    d.holders[c].push_back(a);
    if (n == 2)
      d.holders[c].push_back((a + 1 + rng() % (workers - 1)) % workers);
    d.entries += chain_blocks * d.holders[c].size();
  }
  return d;
}

tier tier_at(size_t i) {
  return i < 32 ? tier::gpu : i < 48 ? tier::host : tier::disk;
}

void fill(block_index& idx, const shard_data& d) {
  for (size_t c = 0; c < d.chains.size(); ++c)
    for (uint32_t w : d.holders[c])
      for (size_t i = 0; i < chain_blocks; ++i)
        idx.apply(w,
                  cache_event{cache_event::stored, tier_at(i), d.chains[c][i]});
}

// Events between two persist() calls: the shard persists once a second,
// which in the live mesh's throughput runs is a few hundred thousand.
constexpr size_t persist_every_events = size_t{1} << 18;

// Writes `d` through a store, `batch` events per apply(), persisting as the
// shard does and waiting for the writer at the end; returns events/s.
double ingest(block_store& st, const shard_data& d, size_t batch) {
  std::vector<cache_event> ev;
  ev.reserve(batch);
  size_t events = 0;
  const auto t0 = clock_type::now();
  for (size_t c = 0; c < d.chains.size(); ++c) {
    for (uint32_t w : d.holders[c]) {
      // Events of one batch come from one worker, as on the wire.
      for (size_t i = 0; i < chain_blocks; ++i) {
        ev.push_back(
            cache_event{cache_event::stored, tier_at(i), d.chains[c][i]});
        if (ev.size() == batch || i + 1 == chain_blocks) {
          if (!st.apply(w, ev)) std::abort();
          if (events / persist_every_events !=
                  (events + ev.size()) / persist_every_events &&
              !st.persist())
            std::abort();
          events += ev.size();
          ev.clear();
        }
      }
    }
  }
  if (!st.persist() || !st.settle()) std::abort();
  return static_cast<double>(events) / seconds_since(t0);
}

std::string bench_dir(const char* name) {
  return (fs::temp_directory_path() /
          ("kvmesh_storage_bench_" + std::to_string(getpid()) + "_" + name))
      .string();
}

// CPU seconds of the whole process (RocksDB's flush and compaction threads
// included): the work an ingest costs, whatever else shares the machine.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

size_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Ingest of 3 million block events (2 million blocks, 1-2 holders) into a
// fresh shard, persisted as the shard does (once per
// persist_every_events), until the writer has written it all; `batch`
// events per apply(), up to one chain (64) since a batch is one worker's
// report.
void shard_ingest(benchmark::State& state) {
  const size_t batch = static_cast<size_t>(state.range(0));
  const shard_data d = make_shard(2'000'000, 0, 1);
  for (auto _ : state) {
    const std::string dir = bench_dir("ingest");
    fs::remove_all(dir);
    block_index idx;
    block_store_options o;
    o.dir = dir;
    o.create = true;
    auto st = block_store::open(o, idx);
    if (!st) {
      state.SkipWithError(st.err().message.c_str());
      return;
    }
    const auto t0 = clock_type::now();
    const double cpu0 = cpu_seconds();
    const double rate = ingest(**st, d, batch);
    state.SetIterationTime(seconds_since(t0));
    state.counters["cpu_us_per_event"] =
        (cpu_seconds() - cpu0) * 1e6 / static_cast<double>(d.entries);
    state.counters["events_per_s"] = rate;
    state.counters["events"] = static_cast<double>(d.entries);
    state.counters["disk_MiB"] = (*st)->disk_bytes() / 1048576.0;
    st->reset();  // close before removing
    fs::remove_all(dir);
  }
}
BENCHMARK(shard_ingest)
    ->Arg(8)
    ->Arg(64)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Memory of the index per (block, holder) at 10 million blocks: the
// structures' own count and the RSS growth. Arg: holders per block (0: one
// or two, half and half).
void index_memory_10m_blocks(benchmark::State& state) {
  const shard_data d =
      make_shard(shard_blocks, static_cast<int>(state.range(0)), 2);
  for (auto _ : state) {
    const size_t rss0 = rss_bytes();
    block_index idx;
    fill(idx, d);
    const size_t rss1 = rss_bytes();
    const double e = static_cast<double>(idx.entries());
    state.counters["blocks"] = static_cast<double>(idx.blocks());
    state.counters["entries"] = e;
    state.counters["bytes_per_entry"] = idx.memory_bytes() / e;
    state.counters["rss_bytes_per_entry"] = (rss1 - rss0) / e;
    state.counters["bytes_per_block"] =
        idx.memory_bytes() / double(idx.blocks());
  }
}
BENCHMARK(index_memory_10m_blocks)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// "Who holds how much of this 64-block chain" at 10 million stored blocks,
// 16 workers, chains drawn at random over the whole shard so most lookups
// miss the CPU caches. Each query is timed on its own for the percentiles.
// Arg: 0 = the whole chain is held, 1 = only its first half (the walk ends
// at a miss, the other common shape).
void prefix_query_64_blocks_10m(benchmark::State& state) {
  static const shard_data d = make_shard(shard_blocks, 0, 3);
  static const block_index idx = [] {
    block_index i;
    fill(i, d);
    return i;
  }();
  std::mt19937_64 rng(4);
  const size_t queries = 1 << 16;
  std::vector<std::vector<uint64_t>> chains(queries);
  for (auto& c : chains) {
    c = d.chains[rng() % d.chains.size()];
    if (state.range(0) == 1)
      for (size_t i = chain_blocks / 2; i < chain_blocks; ++i)
        c[i] = rng();
  }
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(state.max_iterations));
  tier_match out[workers];
  size_t next = 0;
  uint64_t matched = 0;
  for (auto _ : state) {
    const auto t0 = clock_type::now();
    idx.match(chains[next].data(), chain_blocks, workers, out);
    const auto t1 = clock_type::now();
    benchmark::DoNotOptimize(out);
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
    for (const tier_match& m : out)
      matched += m.total();
    if (++next == queries) next = 0;
  }
  std::sort(ns.begin(), ns.end());
  auto pct = [&](double p) {
    return ns[std::min(ns.size() - 1, static_cast<size_t>(p * ns.size()))];
  };
  state.counters["p50_us"] = pct(0.50) / 1000;
  state.counters["p99_us"] = pct(0.99) / 1000;
  state.counters["p999_us"] = pct(0.999) / 1000;
  state.counters["max_us"] = ns.back() / 1000;
  state.counters["blocks"] = static_cast<double>(idx.blocks());
  // Summed over workers: 64 per holder of a fully held chain.
  state.counters["matched_per_query"] =
      static_cast<double>(matched) / static_cast<double>(ns.size());
}
BENCHMARK(prefix_query_64_blocks_10m)
    ->Arg(0)
    ->Arg(1)
    ->Iterations(500'000)
    ->Unit(benchmark::kMicrosecond);

// Writes a 10-million-block shard through a store into `dir`; with `die`,
// exits without closing it (a killed shard: what RocksDB had not flushed
// yet is replayed at the next open). Returns the ingest rate in events/s,
// or 0 on failure.
double write_shard(const std::string& dir, bool die) {
  block_store_options o;
  o.dir = dir;
  o.create = true;
  const shard_data d = make_shard(shard_blocks, 0, 5);
  block_index idx;
  auto st = block_store::open(o, idx);
  if (!st) return 0;
  const double rate = ingest(**st, d, chain_blocks);
  if (die) _exit(0);
  return rate;
}

// Reopen of a 10-million-block shard (about 15 million entries): open the
// DB and load every entry into a fresh index. Arg 0: the writer closed the
// shard cleanly (its rate at this size is reported too). Arg 1: the writer
// was a child process that exited without closing it; the child is this binary
// run again (see main), not a fork, because a fork copies no RocksDB background
// threads.
void shard_reopen_10m_blocks(benchmark::State& state) {
  const bool killed = state.range(0) == 1;
  const std::string dir = bench_dir(killed ? "reopen_killed" : "reopen");
  fs::remove_all(dir);
  if (killed) {
    const std::string cmd = "'" + fs::read_symlink("/proc/self/exe").string() +
                            "' --write-shard-and-die '" + dir + "'";
    if (std::system(cmd.c_str()) != 0) {
      state.SkipWithError("the writer child failed");
      return;
    }
  } else {
    const double rate = write_shard(dir, false);
    if (rate == 0) {
      state.SkipWithError("cannot write the shard");
      return;
    }
    state.counters["build_events_per_s"] = rate;
  }
  block_store_options o;
  o.dir = dir;
  for (auto _ : state) {
    block_index idx;
    const auto t0 = clock_type::now();
    auto st = block_store::open(o, idx);
    const double s = seconds_since(t0);
    if (!st) {
      state.SkipWithError(st.err().message.c_str());
      break;
    }
    state.SetIterationTime(s);
    state.counters["reopen_s"] = s;
    state.counters["blocks"] = static_cast<double>(idx.blocks());
    state.counters["entries"] = static_cast<double>(idx.entries());
    state.counters["disk_MiB"] = (*st)->disk_bytes() / 1048576.0;
  }
  fs::remove_all(dir);
}
// One iteration each: a second open would find the shard closed cleanly.
BENCHMARK(shard_reopen_10m_blocks)
    ->Arg(0)
    ->Arg(1)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvmesh

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--write-shard-and-die")
    return kvmesh::write_shard(argv[2], true) > 0 ? 0 : 1;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
