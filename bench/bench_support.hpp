// SPDX-License-Identifier: Apache-2.0
// bench/bench_support.hpp: helpers shared by the bench/bench_<family>.cpp executables.
//
//   inline_coroutine   an eager, scheduler-less coroutine driving a benchmark loop from inside
//   escape(x)          keeps x (and everything reachable from it) observable to the optimiser
//   context_switches() the process's context switches so far
//   bulk_run           items/s and context switches per message of a bulk case
//   run_with_helpers   a benchmark loop with helper threads running the same number of rounds
//   barrier_rounds<N>, std_barrier_rounds<N>
//                      N threads doing one asyncband::barrier (std::barrier) round per iteration:
//                      the barrier family's cases and the phaser's peers
//   become_multithreaded() starts and joins one thread, so that std baselines take their
//                      multi-threaded paths
//   thread_crew        threads that persist across a benchmark's iterations and run one round
//                      of work each time the benchmark thread releases them
#pragma once

#include <benchmark/benchmark.h>

#include <asyncband/barrier.hpp>

#include <atomic>
#include <barrier>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "eager_coroutine.hpp"

#if __has_include(<sys/resource.h>)
#include <sys/resource.h>
#define ASYNCBAND_BENCH_HAVE_RUSAGE 1
#endif

namespace asyncband_bench {

// ---------------------------------------------------------------------------------------------
// Driver: an eager coroutine with no scheduler (a wake-up would resume it inline). The benchmark
// loop runs inside the coroutine, so an iteration costs only the awaited operation, not a
// resume of the driver.
class inline_coroutine : public eager_coroutine {
 public:
  inline_coroutine(eager_coroutine&& c) noexcept
      : eager_coroutine(std::move(c)) {}  // NOLINT(google-explicit-constructor)

  /// The loop must have run to its end without ever suspending (every wait was ready).
  void check(benchmark::State& state) const {
    if (!done()) state.SkipWithError("coroutine suspended on an uncontended wait");
  }
};

template <class T>
void escape(T& object) {
  T* p = &object;
  benchmark::DoNotOptimize(p);
}

/// Context switches (voluntary + involuntary) of the whole process so far; -1 if unknown.
inline long context_switches() {
#ifdef ASYNCBAND_BENCH_HAVE_RUSAGE
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0) return usage.ru_nvcsw + usage.ru_nivcsw;
#endif
  return -1;
}

/// The bookkeeping of a bulk case (a batch of messages per sample): items/s, and the process's
/// context switches per message (`csw/msg`).
class bulk_run {
 public:
  bulk_run(benchmark::State& state, std::uint64_t messages_per_sample)
      : state_(state), messages_(messages_per_sample), switches_before_(context_switches()) {}

  /// After the samples: sets items/s and csw/msg.
  void finish() {
    const auto messages = static_cast<std::int64_t>(messages_) * state_.iterations();
    state_.SetItemsProcessed(messages);
    const long switches_after = context_switches();
    if (switches_before_ >= 0 && switches_after >= 0 && messages > 0) {
      state_.counters["csw/msg"] =
          static_cast<double>(switches_after - switches_before_) / static_cast<double>(messages);
    }
  }

 private:
  benchmark::State& state_;
  std::uint64_t messages_;
  long switches_before_;
};

/// Runs `body()` exactly state.max_iterations times on each of `helpers` extra threads while the
/// benchmark loop runs `main_body()` on this thread: one iteration = one round for everybody.
/// A `body` invocable with an int is called as `body(i)`, i the helper's index in [0, helpers)
/// (for per-thread state, such as each thread's own phaser participant).
/// Reports the process's context switches per round (`csw/round`): a wait that parks its thread
/// costs at least one.
template <class HelperBody, class MainBody>
void run_with_helpers(benchmark::State& state, int helpers, HelperBody body, MainBody main_body) {
  const auto rounds = state.max_iterations;
  const long switches_before = context_switches();
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(helpers));
  for (int i = 0; i < helpers; ++i) {
    threads.emplace_back([&body, rounds, i] {
      for (benchmark::IterationCount r = 0; r < rounds; ++r) {
        if constexpr (std::is_invocable_v<HelperBody&, int>) {
          body(i);
        } else {
          static_cast<void>(i);
          body();
        }
      }
    });
  }
  for (auto _ : state) main_body();
  for (auto& t : threads) t.join();
  state.SetItemsProcessed(state.iterations());
  const long switches_after = context_switches();
  if (switches_before >= 0 && switches_after >= 0 && state.iterations() > 0) {
    state.counters["csw/round"] =
        static_cast<double>(switches_after - switches_before) / static_cast<double>(state.iterations());
  }
}

/// N threads (this one and N-1 helpers), one asyncband::barrier round per iteration.
template <int N>
void barrier_rounds(benchmark::State& state) {
  asyncband::barrier barrier(N);
  run_with_helpers(
      state, N - 1, [&] { (void)barrier.wait_blocking(); },
      [&] {
        auto r = barrier.wait_blocking();
        benchmark::DoNotOptimize(r);
      });
}

/// The same with std::barrier.
template <int N>
void std_barrier_rounds(benchmark::State& state) {
  std::barrier<> barrier(N);
  run_with_helpers(
      state, N - 1, [&] { barrier.arrive_and_wait(); }, [&] { barrier.arrive_and_wait(); });
}

/// Threads that persist across a benchmark's iterations (created once, outside the timed rounds),
/// each running `body(index)` once per round. The benchmark thread releases a round, does its own
/// part (and times it, with UseManualTime), then waits for the crew to finish before the next
/// round, so that rounds never overlap. Parking uses std::atomic wait/notify (futexes) on 32-bit
/// words: nothing of the libraries under test.
class thread_crew {
 public:
  thread_crew(int threads, std::function<void(int index)> body) : body_(std::move(body)) {
    threads_.reserve(static_cast<std::size_t>(threads));
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this, i] { work(i); });
  }
  thread_crew(const thread_crew&) = delete;
  thread_crew& operator=(const thread_crew&) = delete;
  ~thread_crew() {
    stopping_.store(true, std::memory_order_relaxed);
    round_.fetch_add(1, std::memory_order_release);
    round_.notify_all();
    for (auto& t : threads_) t.join();
  }

  /// Starts one round on every thread.
  void release() {
    finished_.store(0, std::memory_order_relaxed);
    round_.fetch_add(1, std::memory_order_release);
    round_.notify_all();
  }

  /// Blocks until every thread has finished the round released last.
  void wait_round() {
    const auto all = static_cast<std::uint32_t>(threads_.size());
    for (std::uint32_t done = finished_.load(std::memory_order_acquire); done != all;
         done = finished_.load(std::memory_order_acquire)) {
      finished_.wait(done, std::memory_order_acquire);
    }
  }

 private:
  void work(int index) {
    std::uint32_t seen = 0;
    for (;;) {
      for (std::uint32_t r = round_.load(std::memory_order_acquire); r == seen;
           r = round_.load(std::memory_order_acquire)) {
        round_.wait(r, std::memory_order_acquire);
      }
      seen = round_.load(std::memory_order_acquire);
      if (stopping_.load(std::memory_order_relaxed)) return;
      body_(index);
      if (finished_.fetch_add(1, std::memory_order_acq_rel) + 1 == threads_.size()) finished_.notify_all();
    }
  }

  std::function<void(int)> body_;
  std::vector<std::thread> threads_;
  std::atomic<std::uint32_t> round_{0};
  std::atomic<std::uint32_t> finished_{0};
  std::atomic<bool> stopping_{false};
};

/// Starts and joins one thread. glibc (2.35 and later) gives pthread mutexes, hence std::mutex, a
/// non-atomic fast path while the process has never had a second thread; a program that needs a
/// lock has threads, so std baselines are measured after this (the process stays multi-threaded
/// for good). Without it, uncontended std::mutex lock + unlock measures about 3x faster than in
/// any real program, and depends on whether an earlier case happened to start a thread.
inline void become_multithreaded() {
  std::thread([] {}).join();
}

/// BENCHMARK_MAIN, in a process that is multi-threaded from the start (become_multithreaded), so
/// that every std baseline is measured on the path a real program takes.
inline int run_benchmarks(int argc, char** argv) {
  become_multithreaded();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace asyncband_bench
