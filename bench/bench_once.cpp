// SPDX-License-Identifier: Apache-2.0
// bench/bench_once.cpp: once_cell, singleflight::group and once_map against their std baselines.
//
// Names are `family/case/impl`; impl is `asyncband` (ours) or the baseline it is compared with:
//   function_static      a function-local static with a dynamic initialiser (the compiler's guard)
//   std_call_once        std::call_once on an std::once_flag that was already called, then a read
//   mutex_shared_future  std::mutex + std::unordered_map<int, std::shared_future<V>>: the leader
//                        inserts its promise's future, computes, sets the value, erases the key;
//                        followers copy the shared_future and get() (future_flights below)
//   mutex_unordered_map  std::mutex + std::unordered_map<int, int>, computed under the lock on a
//                        miss (locked_cache below)
//
// Cases
// - once_cell/get_initialized: get() on a cell that holds its value, then one read of it; the
//   baselines also do one check and one read per iteration (the static's guard byte, the
//   once_flag). Each read is added to a sum passed to benchmark::DoNotOptimize every iteration:
//   its "memory" clobber, with the value's address escaped beforehand, makes every iteration
//   load the flag and the value again (nothing is hoisted out of the loop), and the addition
//   makes the value's load a real one (GCC 12 compiled `int v = value; DoNotOptimize(v)` of the
//   static's value with no load of the value at all).
// - singleflight/8_callers_one_key: one iteration is a round of kCallers concurrent calls for
//   the same key, which one of them computes (compute_payload: a 64-byte value after a fixed
//   amount of work) while the others get its result; nothing is cached afterwards. So that
//   every round really coalesces (8 callers on 2 cores do not overlap by themselves), the
//   leader's initialiser first waits at an arrival gate that the round's last caller opens (a
//   caller arrives right before its call, so every other caller has joined the flight, or is
//   about to, when the leader computes), then computes. Each impl's leader waits the way its
//   callers wait, as it would for a backend: a plain-thread leader blocks (blocking_gate), a
//   coroutine leader awaits (awaitable_gate: an asyncband::manual_reset_event). `runs/round`
//   reports the computations per round (1 when every round coalesced) and `csw/round` the
//   process's context switches per round.
//     asyncband: the callers are runtime::task coroutines on a runtime::thread_pool of
//     kPoolThreads workers (the machine's 2 cores). The benchmark loop itself runs on the pool
//     (rounds_on_pool): each round creates kCallers caller tasks and awaits when_all of them,
//     which posts them to the pool, as a server's acceptor would start a request's coroutine.
//     Followers suspend; no thread blocks inside a round. (The loop's timer reads real time
//     and the process's CPU time, which are the same from whichever worker runs it.)
//     mutex_shared_future: kCallers persistent threads (asyncband_bench::thread_crew), released
//     each round by the benchmark thread, which then waits for them all (a thread-per-request
//     server: a request wakes its thread); followers block in shared_future::get(). This
//     baseline cannot run on the 2-worker pool: its followers block their thread, and two
//     followers blocking both workers before the leader starts deadlock the pool. So, as
//     elsewhere in these benches, the coroutine case is compared with the plain-thread
//     baseline (what a program without an awaitable singleflight would write).
// - singleflight/8_callers_one_key_blocking: the same rounds with asyncband's work_blocking on
//   the same crew threads as the baseline (same threads, same callers, same driver, same
//   blocking gate).
//   The singleflight cases report real time per round, and as CPU time the CPU time of the
//   whole process per round (MeasureProcessCPUTime): on a shared machine, real time also counts
//   the time a runnable thread waits for a core that another process holds.
// - once_map/compute_hit: compute() of a key already computed (a hit): the value, copied.
//   asyncband awaits it in an inline_coroutine (the case fails if it ever suspended);
//   compute_hit_blocking uses compute_blocking. Both against the same locked map.
//
//   bench_once --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <future>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <asyncband/block_on.hpp>
#include <asyncband/manual_reset_event.hpp>
#include <asyncband/once_cell.hpp>
#include <asyncband/once_map.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>
#include <asyncband/singleflight.hpp>

#include "bench_support.hpp"

namespace {

using asyncband::runtime::task;
using asyncband::runtime::thread_pool;
using asyncband_bench::context_switches;
using asyncband_bench::escape;
using asyncband_bench::inline_coroutine;
using asyncband_bench::thread_crew;

constexpr int kValue = 42;

/// An initialiser the compiler cannot see through: the static's initialisation stays dynamic,
/// so it keeps its guard (a constant would be constant-initialised, with no guard at all).
[[gnu::noinline]] int make_value() {
  int v = kValue;
  benchmark::DoNotOptimize(v);
  return v;
}

// ---------------------------------------------------------------------------------------------
// once_cell/get_initialized

void once_cell_get_initialized_asyncband(benchmark::State& state) {
  asyncband::once_cell<int> cell;
  if (cell.set(make_value()).has_value()) state.SkipWithError("set() refused on an empty cell");
  escape(cell);
  int sum = 0;
  for (auto _ : state) {
    const int* p = cell.get();
    sum += p != nullptr ? *p : 0;
    benchmark::DoNotOptimize(sum);
  }
}

int& function_static_value() {
  static int value = make_value();
  return value;
}

void once_cell_get_initialized_function_static(benchmark::State& state) {
  escape(function_static_value());
  int sum = 0;
  for (auto _ : state) {
    sum += function_static_value();
    benchmark::DoNotOptimize(sum);
  }
}

void once_cell_get_initialized_std_call_once(benchmark::State& state) {
  std::once_flag flag;
  int value = 0;
  const auto init = [&value] { value = make_value(); };
  std::call_once(flag, init);
  escape(value);
  int sum = 0;
  for (auto _ : state) {
    std::call_once(flag, init);
    sum += value;
    benchmark::DoNotOptimize(sum);
  }
}

// ---------------------------------------------------------------------------------------------
// singleflight/8_callers_one_key

constexpr int kCallers = 8;
constexpr int kKey = 7;
constexpr int kWorkSteps = 256;
constexpr int kPoolThreads = 2;

/// The flight's result: 64 bytes.
struct payload {
  std::array<std::uint64_t, 8> words;
  friend bool operator==(const payload&, const payload&) = default;
};
static_assert(sizeof(payload) == 64);

/// The computation: kWorkSteps rounds of splitmix64, a fixed amount of work.
payload compute_payload(int key) {
  payload p{};
  auto x = static_cast<std::uint64_t>(key);
  for (int i = 0; i < kWorkSteps; ++i) {
    x += 0x9e3779b97f4a7c15U;
    std::uint64_t z = x;
    z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9U;
    z = (z ^ (z >> 27U)) * 0x94d049bb133111ebU;
    p.words[static_cast<std::size_t>(i) % p.words.size()] ^= z ^ (z >> 31U);
  }
  return p;
}

/// The arrival gate of plain-thread rounds: the leader blocks until the last caller arrives.
class blocking_gate {
 public:
  void reset() noexcept { arrived_.store(0, std::memory_order_relaxed); }
  void arrive() noexcept {
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == kCallers) arrived_.notify_all();
  }
  void wait() noexcept {
    for (int a = arrived_.load(std::memory_order_acquire); a != kCallers;
         a = arrived_.load(std::memory_order_acquire)) {
      arrived_.wait(a, std::memory_order_acquire);
    }
  }

 private:
  std::atomic<int> arrived_{0};
};

/// The arrival gate of coroutine rounds: the leader awaits the last caller's arrival, as it
/// would await a backend, without blocking its thread.
class awaitable_gate {
 public:
  void reset() noexcept {
    arrived_.store(0, std::memory_order_relaxed);
    all_arrived_.reset();
  }
  void arrive() noexcept {
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == kCallers) all_arrived_.set();
  }
  auto wait() { return all_arrived_.wait(); }

 private:
  std::atomic<int> arrived_{0};
  asyncband::manual_reset_event all_arrived_;
};

/// What every impl shares in a round: the arrival gate the leader waits at before computing
/// (so that every caller joins the one flight), the count of computations, and the check of
/// what the callers got.
template <class Gate>
class round_state {
 public:
  /// Before a round starts (its start orders this before the callers' arrivals).
  void begin() noexcept { gate_.reset(); }
  /// A caller, right before its call.
  void arrive() noexcept { gate_.arrive(); }
  Gate& gate() noexcept { return gate_; }

  /// The leader, once the gate opened: the computation.
  payload compute() {
    runs_.fetch_add(1, std::memory_order_relaxed);
    return compute_payload(kKey);
  }

  /// A caller, with what its call yielded.
  void check(const payload& got) noexcept {
    if (!(got == expected_)) wrong_.store(true, std::memory_order_relaxed);
  }

  /// After the rounds: fails the case on a wrong result; counters runs/round and csw/round.
  void finish(benchmark::State& state) const {
    if (wrong_.load(std::memory_order_relaxed)) state.SkipWithError("a caller got a wrong result");
    const auto rounds = static_cast<double>(state.iterations());
    if (rounds == 0) return;
    state.counters["runs/round"] = static_cast<double>(runs_.load(std::memory_order_relaxed)) / rounds;
    const long switches = context_switches();
    if (switches_before_ >= 0 && switches >= 0) {
      state.counters["csw/round"] = static_cast<double>(switches - switches_before_) / rounds;
    }
  }

 private:
  Gate gate_;
  const payload expected_ = compute_payload(kKey);
  const long switches_before_ = context_switches();
  std::atomic<std::int64_t> runs_{0};
  std::atomic<bool> wrong_{false};
};

using thread_round = round_state<blocking_gate>;
using coroutine_round = round_state<awaitable_gate>;

/// The baseline: one shared_future per key in flight.
template <class K, class V>
class future_flights {
 public:
  template <class F>
  V work(const K& key, F f) {
    std::unique_lock lock(mutex_);
    if (const auto it = flights_.find(key); it != flights_.end()) {
      const std::shared_future<V> flight = it->second;
      lock.unlock();
      return flight.get();
    }
    std::promise<V> promise;
    flights_.emplace(key, promise.get_future().share());
    lock.unlock();
    try {
      V value = f();
      promise.set_value(value);
      erase(key);
      return value;
    } catch (...) {
      promise.set_exception(std::current_exception());
      erase(key);
      throw;
    }
  }

 private:
  void erase(const K& key) {
    const std::lock_guard lock(mutex_);
    flights_.erase(key);
  }

  std::mutex mutex_;
  std::unordered_map<K, std::shared_future<V>> flights_;
};

using flight_group = asyncband::singleflight::group<int, payload>;

/// The plain-thread leader's initialiser: blocks at the gate, then computes.
auto blocking_initializer(thread_round& r) {
  return [&r] {
    r.gate().wait();
    return r.compute();
  };
}

/// Rounds of kCallers calls on kCallers persistent threads; `call(r)` makes one call.
template <class Call>
void rounds_on_threads(benchmark::State& state, Call call) {
  thread_round r;
  thread_crew crew(kCallers, [&r, &call](int /*index*/) {
    r.arrive();
    r.check(call(r));
  });
  for (auto _ : state) {
    r.begin();
    crew.release();
    crew.wait_round();
  }
  r.finish(state);
}

void singleflight_8_callers_mutex_shared_future(benchmark::State& state) {
  future_flights<int, payload> flights;
  rounds_on_threads(state,
                    [&flights](thread_round& r) { return flights.work(kKey, blocking_initializer(r)); });
}

void singleflight_8_callers_blocking_asyncband(benchmark::State& state) {
  flight_group group;
  rounds_on_threads(state,
                    [&group](thread_round& r) { return group.work_blocking(kKey, blocking_initializer(r)); });
}

/// One caller of a coroutine round; the leader's initialiser awaits the gate, then computes.
task<void> call_in_coroutine(flight_group& group, coroutine_round& r) {
  r.arrive();
  const payload got = co_await group.work(kKey, [&r]() -> task<payload> {
    co_await r.gate().wait();
    co_return r.compute();
  });
  r.check(got);
}

/// The benchmark loop on the pool: each round starts kCallers caller tasks (when_all posts
/// them to the pool) and awaits them all.
task<void> rounds_on_pool(benchmark::State& state, thread_pool& pool, flight_group& group,
                          coroutine_round& r) {
  co_await pool.schedule();
  std::vector<task<void>> callers;
  for (auto _ : state) {
    r.begin();
    callers.reserve(kCallers);
    for (int i = 0; i < kCallers; ++i) callers.push_back(call_in_coroutine(group, r));
    co_await asyncband::runtime::when_all(std::move(callers));
    callers.clear();
  }
}

void singleflight_8_callers_asyncband(benchmark::State& state) {
  thread_pool pool(kPoolThreads);
  flight_group group;
  coroutine_round r;
  asyncband::block_on(rounds_on_pool(state, pool, group, r));
  r.finish(state);
}

// ---------------------------------------------------------------------------------------------
// once_map/compute_hit

/// The baseline: a locked map, computed under the lock on a miss.
class locked_cache {
 public:
  template <class F>
  int compute(int key, F f) {
    const std::lock_guard lock(mutex_);
    const auto it = values_.find(key);
    if (it != values_.end()) return it->second;
    return values_.emplace(key, f()).first->second;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<int, int> values_;
};

inline_coroutine compute_hit_loop(benchmark::State& state, asyncband::once_map<int, int>& map) {
  for (auto _ : state) {
    int v = co_await map.compute(kKey, [] { return -1; });
    benchmark::DoNotOptimize(v);
  }
}

void once_map_compute_hit_asyncband(benchmark::State& state) {
  asyncband::once_map<int, int> map;
  if (map.compute_blocking(kKey, make_value) != kValue) state.SkipWithError("first compute failed");
  compute_hit_loop(state, map).check(state);
}

void once_map_compute_hit_blocking_asyncband(benchmark::State& state) {
  asyncband::once_map<int, int> map;
  if (map.compute_blocking(kKey, make_value) != kValue) state.SkipWithError("first compute failed");
  for (auto _ : state) {
    int v = map.compute_blocking(kKey, [] { return -1; });
    benchmark::DoNotOptimize(v);
  }
}

void once_map_compute_hit_mutex_unordered_map(benchmark::State& state) {
  locked_cache map;
  if (map.compute(kKey, make_value) != kValue) state.SkipWithError("first compute failed");
  for (auto _ : state) {
    int v = map.compute(kKey, [] { return -1; });
    benchmark::DoNotOptimize(v);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Registration, grouped by family/case.

BENCHMARK(once_cell_get_initialized_asyncband)->Name("once_cell/get_initialized/asyncband");
BENCHMARK(once_cell_get_initialized_function_static)->Name("once_cell/get_initialized/function_static");
BENCHMARK(once_cell_get_initialized_std_call_once)->Name("once_cell/get_initialized/std_call_once");

BENCHMARK(singleflight_8_callers_asyncband)
    ->Name("singleflight/8_callers_one_key/asyncband")
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(singleflight_8_callers_mutex_shared_future)
    ->Name("singleflight/8_callers_one_key/mutex_shared_future")
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(singleflight_8_callers_blocking_asyncband)
    ->Name("singleflight/8_callers_one_key_blocking/asyncband")
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(singleflight_8_callers_mutex_shared_future)
    ->Name("singleflight/8_callers_one_key_blocking/mutex_shared_future")
    ->UseRealTime()
    ->MeasureProcessCPUTime();

BENCHMARK(once_map_compute_hit_asyncband)->Name("once_map/compute_hit/asyncband");
BENCHMARK(once_map_compute_hit_mutex_unordered_map)->Name("once_map/compute_hit/mutex_unordered_map");
BENCHMARK(once_map_compute_hit_blocking_asyncband)->Name("once_map/compute_hit_blocking/asyncband");
BENCHMARK(once_map_compute_hit_mutex_unordered_map)
    ->Name("once_map/compute_hit_blocking/mutex_unordered_map");

int main(int argc, char** argv) {
  return asyncband_bench::run_benchmarks(argc, argv);
}
