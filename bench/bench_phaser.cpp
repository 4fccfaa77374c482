// SPDX-License-Identifier: Apache-2.0
// bench/bench_phaser.cpp: the phaser against std::barrier, with asyncband::barrier as a reference.
//
// Names are `family/case/impl`; impl is `asyncband` (the phaser), `asyncband_barrier`
// (asyncband::barrier: fixed participants, no registration; shown for reference) or
// `std_barrier` (std::barrier<>). The coroutine cases have no std peer: the standard library
// has no awaitable barrier.
//
// phaser/round_threads_N: N plain threads (this one and N-1 helpers, created before the timed
// loop and running exactly state.max_iterations rounds: run_with_helpers) each arrive and wait
// once per round; real time per round. The phaser's threads call participant.wait_blocking()
// (no stop token: they sleep on one futex word, released together by the final arrival).
//
// phaser/round_coroutines_N: N runtime::task coroutines on a runtime::thread_pool of
// kPoolThreads threads, each doing `co_await participant.wait()` once per round. The benchmark
// loop itself runs in one of the N coroutines (so nothing outside the pool takes part in a
// round); N-1 others run exactly state.max_iterations rounds. Real time per round; the CPU time
// is the whole process's (the loop moves between pool threads).
//
// phaser/arrive: arrive() alone, uncontended: one participant, so every arrive() completes a
// phase (std: std::barrier<>(1).arrive(), token discarded). phaser/arrive_no_advance: two
// participants, one arriving again and again in the same phase (a repeated arrival counts once:
// the locked check alone).
//
//   bench_phaser --benchmark_min_time=0.05
#include <benchmark/benchmark.h>

#include <barrier>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>

#include "bench_support.hpp"

namespace {

using asyncband::phaser_participant;
using asyncband::runtime::task;
using asyncband::runtime::thread_pool;
using asyncband_bench::barrier_rounds;
using asyncband_bench::context_switches;
using asyncband_bench::escape;
using asyncband_bench::run_with_helpers;
using asyncband_bench::std_barrier_rounds;

constexpr int kPoolThreads = 2;

/// N participants of a new phaser, all registered in its first phase.
std::vector<phaser_participant> enroll_all(asyncband::phaser& ph, int n) {
  asyncband::phaser_batch batch = ph.enroll(static_cast<std::size_t>(n)).value();
  std::vector<phaser_participant> all;
  all.reserve(static_cast<std::size_t>(n));
  while (auto p = batch.take()) all.push_back(std::move(*p));
  return all;
}

// ---------------------------------------------------------------------------------------------
// phaser/round_threads_N

template <int N>
void round_threads_asyncband(benchmark::State& state) {
  auto ph = asyncband::phaser::create();
  std::vector<phaser_participant> all = enroll_all(*ph, N);
  run_with_helpers(
      state, N - 1, [&](int i) { (void)all[static_cast<std::size_t>(i) + 1].wait_blocking(); },
      [&] {
        auto r = all[0].wait_blocking();
        benchmark::DoNotOptimize(r);
      });
}

// ---------------------------------------------------------------------------------------------
// phaser/round_coroutines_N: the coroutine counterpart of run_with_helpers.

template <class Wait>
task<void> helper_rounds(thread_pool& pool, benchmark::IterationCount rounds, Wait wait) {
  co_await pool.schedule();
  for (benchmark::IterationCount r = 0; r < rounds; ++r) (void)co_await wait();
}

template <class Wait>
task<void> benchmark_rounds(thread_pool& pool, benchmark::State& state, Wait wait) {
  co_await pool.schedule();
  for (auto _ : state) {
    auto r = co_await wait();
    benchmark::DoNotOptimize(r);
  }
}

/// `wait(i)` returns the awaitable of coroutine i's wait for one round; coroutine 0 runs the
/// benchmark loop.
template <class Wait>
void run_coroutines(benchmark::State& state, int n, Wait wait) {
  thread_pool pool(kPoolThreads);
  const long switches_before = context_switches();
  std::vector<task<void>> coroutines;
  coroutines.reserve(static_cast<std::size_t>(n));
  coroutines.push_back(benchmark_rounds(pool, state, [&wait] { return wait(0); }));
  for (int i = 1; i < n; ++i)
    coroutines.push_back(helper_rounds(pool, state.max_iterations, [&wait, i] { return wait(i); }));
  asyncband::block_on(asyncband::runtime::when_all(std::move(coroutines)));
  state.SetItemsProcessed(state.iterations());
  const long switches_after = context_switches();
  if (switches_before >= 0 && switches_after >= 0 && state.iterations() > 0) {
    state.counters["csw/round"] =
        static_cast<double>(switches_after - switches_before) / static_cast<double>(state.iterations());
  }
}

template <int N>
void round_coroutines_asyncband(benchmark::State& state) {
  auto ph = asyncband::phaser::create();
  std::vector<phaser_participant> all = enroll_all(*ph, N);
  run_coroutines(state, N, [&all](int i) { return all[static_cast<std::size_t>(i)].wait(); });
}

template <int N>
void round_coroutines_asyncband_barrier(benchmark::State& state) {
  asyncband::barrier barrier(N);
  run_coroutines(state, N, [&barrier](int /*i*/) { return barrier.wait(); });
}

// ---------------------------------------------------------------------------------------------
// phaser/arrive, phaser/arrive_no_advance

void arrive_asyncband(benchmark::State& state) {
  auto ph = asyncband::phaser::create();
  phaser_participant me = ph->enroll().value();
  for (auto _ : state) {
    auto r = me.arrive();
    benchmark::DoNotOptimize(r);
  }
  if (ph->phase() != asyncband::phase_id(static_cast<std::uint64_t>(state.iterations())))
    state.SkipWithError("an arrive() did not complete its phase");
}

void arrive_std_barrier(benchmark::State& state) {
  std::barrier<> barrier(1);
  for (auto _ : state) (void)barrier.arrive();
  escape(barrier);
}

void arrive_no_advance_asyncband(benchmark::State& state) {
  auto ph = asyncband::phaser::create();
  std::vector<phaser_participant> all = enroll_all(*ph, 2);
  for (auto _ : state) {
    auto r = all[0].arrive();
    benchmark::DoNotOptimize(r);
  }
  if (ph->phase() != asyncband::phase_id(0)) state.SkipWithError("a repeated arrive() completed the phase");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Registration, grouped by family/case.

BENCHMARK(round_threads_asyncband<2>)->Name("phaser/round_threads_2/asyncband")->UseRealTime();
BENCHMARK(barrier_rounds<2>)->Name("phaser/round_threads_2/asyncband_barrier")->UseRealTime();
BENCHMARK(std_barrier_rounds<2>)->Name("phaser/round_threads_2/std_barrier")->UseRealTime();
BENCHMARK(round_threads_asyncband<4>)->Name("phaser/round_threads_4/asyncband")->UseRealTime();
BENCHMARK(barrier_rounds<4>)->Name("phaser/round_threads_4/asyncband_barrier")->UseRealTime();
BENCHMARK(std_barrier_rounds<4>)->Name("phaser/round_threads_4/std_barrier")->UseRealTime();
BENCHMARK(round_threads_asyncband<8>)->Name("phaser/round_threads_8/asyncband")->UseRealTime();
BENCHMARK(barrier_rounds<8>)->Name("phaser/round_threads_8/asyncband_barrier")->UseRealTime();
BENCHMARK(std_barrier_rounds<8>)->Name("phaser/round_threads_8/std_barrier")->UseRealTime();
BENCHMARK(round_threads_asyncband<16>)->Name("phaser/round_threads_16/asyncband")->UseRealTime();
BENCHMARK(barrier_rounds<16>)->Name("phaser/round_threads_16/asyncband_barrier")->UseRealTime();
BENCHMARK(std_barrier_rounds<16>)->Name("phaser/round_threads_16/std_barrier")->UseRealTime();

BENCHMARK(round_coroutines_asyncband<2>)
    ->Name("phaser/round_coroutines_2/asyncband")
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(round_coroutines_asyncband_barrier<2>)
    ->Name("phaser/round_coroutines_2/asyncband_barrier")
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(round_coroutines_asyncband<4>)
    ->Name("phaser/round_coroutines_4/asyncband")
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(round_coroutines_asyncband_barrier<4>)
    ->Name("phaser/round_coroutines_4/asyncband_barrier")
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(round_coroutines_asyncband<8>)
    ->Name("phaser/round_coroutines_8/asyncband")
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(round_coroutines_asyncband_barrier<8>)
    ->Name("phaser/round_coroutines_8/asyncband_barrier")
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(round_coroutines_asyncband<16>)
    ->Name("phaser/round_coroutines_16/asyncband")
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(round_coroutines_asyncband_barrier<16>)
    ->Name("phaser/round_coroutines_16/asyncband_barrier")
    ->UseRealTime()
    ->MeasureProcessCPUTime();

BENCHMARK(arrive_asyncband)->Name("phaser/arrive/asyncband");
BENCHMARK(arrive_std_barrier)->Name("phaser/arrive/std_barrier");
BENCHMARK(arrive_no_advance_asyncband)->Name("phaser/arrive_no_advance/asyncband");

int main(int argc, char** argv) {
  return asyncband_bench::run_benchmarks(argc, argv);
}
