// What this host charges for waking a thread: every message between the
// mesh's threads and processes pays it (docs/benchmarks.md, "The machine").
#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <condition_variable>
#include <mutex>
#include <thread>

namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

void pin_to_cpu0(pthread_t t) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  (void)pthread_setaffinity_np(t, sizeof one, &one);
}

// Two threads pass a token back and forth through a mutex and a condition
// variable; each pass wakes the other thread. Arg 0: where the kernel puts
// them (on two cores, each its own); 1: both on CPU 0.
void thread_handoff(benchmark::State& state) {
  const bool one_cpu = state.range(0) == 1;
  std::mutex mu;
  std::condition_variable cv;
  int turn = 0;  // 1: the partner's, 0: ours; -1: stop
  std::thread partner([&] {
    if (one_cpu) pin_to_cpu0(pthread_self());
    std::unique_lock<std::mutex> g(mu);
    for (;;) {
      cv.wait(g, [&] { return turn != 0; });
      if (turn < 0) return;
      turn = 0;
      cv.notify_all();
    }
  });
  if (one_cpu) pin_to_cpu0(pthread_self());
  const double cpu0 = cpu_seconds();
  int64_t passes = 0;
  for (auto _ : state) {
    std::unique_lock<std::mutex> g(mu);
    turn = 1;
    cv.notify_all();
    cv.wait(g, [&] { return turn == 0; });
    passes += 2;
  }
  const double cpu = cpu_seconds() - cpu0;
  {
    std::lock_guard<std::mutex> g(mu);
    turn = -1;
  }
  cv.notify_all();
  partner.join();
  if (one_cpu) {
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int i = 0; i < CPU_SETSIZE; ++i)
      CPU_SET(i, &all);
    (void)pthread_setaffinity_np(pthread_self(), sizeof all, &all);
  }
  state.counters["cpu_us_per_handoff"] =
      passes > 0 ? cpu * 1e6 / static_cast<double>(passes) : 0;
  state.SetItemsProcessed(passes);
}
BENCHMARK(thread_handoff)->Arg(0)->Arg(1)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
