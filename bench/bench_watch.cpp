// SPDX-License-Identifier: Apache-2.0
// bench/bench_watch.cpp: asyncband::watch against a hand-written std baseline.
//
// Names are `watch/case/impl`; impl is `asyncband` (ours) or the baseline:
//   mutex_cv   std::mutex + std::condition_variable + a version counter: the sender stores the
//              value and bumps the version under the mutex and notify_all()s; each receiver
//              waits on the cv for a version it has not seen and reads the value under the
//              mutex (what a program without a watch channel writes by hand).
//
// Cases: one iteration is one round: the sender publishes a new value, and each of the
// kReceivers receivers wakes from its wait for a change (changed()), reads the value
// (borrow_and_update(): a guard, no copy, no lock held) and acknowledges it; the round ends when
// every receiver has acknowledged, so every send is seen by every receiver (no coalescing helps
// either side). The value carries the round's acknowledgement point: an asyncband::latch for
// asyncband, a counter under the baseline's own mutex (with a second cv for the sender).
// - watch/send_8_receivers: asyncband's receivers and sender are runtime::task coroutines on a
//   runtime::thread_pool of kPoolThreads workers (the machine's 2 cores); the benchmark loop
//   runs inside the sender coroutine on the pool. The baseline cannot run on the pool (its
//   receivers block their threads), so it runs its receivers as plain threads, as elsewhere in
//   these benches: the coroutine case is compared with what a program without an awaitable
//   watch writes.
// - watch/send_8_receivers_blocking: asyncband with changed_blocking() on plain threads, the
//   sender (the benchmark thread) waiting with latch::wait_blocking(); against the same
//   baseline.
// Real time per round; CPU time is the whole process's (MeasureProcessCPUTime).
//
//   bench_watch --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <asyncband/block_on.hpp>
#include <asyncband/latch.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/watch.hpp>

#include "bench_support.hpp"

namespace {

using asyncband::runtime::task;
using asyncband::runtime::thread_pool;

constexpr int kReceivers = 8;
constexpr int kPoolThreads = 2;

/// The published value: a sequence number and the round's acknowledgement point.
struct message {
  std::uint64_t seq = 0;
  asyncband::latch* acked = nullptr;
};

// ---------------------------------------------------------------------------------------------
// asyncband

task<void> receive_on_pool(asyncband::watch::receiver<message> rx, asyncband::latch& finished) {
  std::uint64_t sum = 0;
  while ((co_await rx.changed()).ok()) {
    const auto m = rx.borrow_and_update();
    sum += m->seq;
    m->acked->count_down();
  }
  benchmark::DoNotOptimize(sum);
  finished.count_down();
}

task<void> send_on_pool(benchmark::State& state, thread_pool& pool, asyncband::watch::sender<message> tx) {
  co_await pool.schedule();
  std::uint64_t seq = 0;
  for (auto _ : state) {
    asyncband::latch acked(kReceivers);
    (void)tx.send(message{++seq, &acked});
    co_await acked.wait();
  }
}  // the sender goes: the receivers end closed

void send_8_receivers_asyncband(benchmark::State& state) {
  thread_pool pool(kPoolThreads);
  auto [tx, rx] = asyncband::watch::channel<message>();
  asyncband::latch finished(kReceivers);
  for (int i = 0; i < kReceivers; ++i) asyncband::runtime::spawn(pool.ref(), receive_on_pool(rx, finished));
  { const auto drop = std::move(rx); }
  asyncband::block_on(send_on_pool(state, pool, std::move(tx)));
  finished.wait_blocking();
  state.SetItemsProcessed(state.iterations());
}

void send_8_receivers_blocking_asyncband(benchmark::State& state) {
  auto [tx, rx] = asyncband::watch::channel<message>();
  std::vector<std::thread> threads;
  for (int i = 0; i < kReceivers; ++i) {
    threads.emplace_back([rx = rx]() mutable {
      std::uint64_t sum = 0;
      while (rx.changed_blocking().ok()) {
        const auto m = rx.borrow_and_update();
        sum += m->seq;
        m->acked->count_down();
      }
      benchmark::DoNotOptimize(sum);
    });
  }
  { const auto drop = std::move(rx); }
  std::uint64_t seq = 0;
  for (auto _ : state) {
    asyncband::latch acked(kReceivers);
    (void)tx.send(message{++seq, &acked});
    acked.wait_blocking();
  }
  { const auto close = std::move(tx); }
  for (auto& t : threads) t.join();
  state.SetItemsProcessed(state.iterations());
}

// ---------------------------------------------------------------------------------------------
// The baseline: std::mutex + std::condition_variable + a version counter

class cv_watch {
 public:
  void send(std::uint64_t value) {
    {
      const std::lock_guard lock(mutex_);
      value_ = value;
      ++version_;
      acks_ = 0;
    }
    changed_.notify_all();
  }
  void wait_acked() {
    std::unique_lock lock(mutex_);
    acked_.wait(lock, [this] { return acks_ == kReceivers; });
  }
  void close() {
    {
      const std::lock_guard lock(mutex_);
      closed_ = true;
    }
    changed_.notify_all();
  }
  /// Waits for a version newer than `seen`, reads the value and acknowledges it; false once closed.
  bool receive(std::uint64_t& seen, std::uint64_t& value) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return version_ != seen || closed_; });
    if (version_ == seen) return false;
    seen = version_;
    value = value_;
    if (++acks_ == kReceivers) acked_.notify_one();
    return true;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::condition_variable acked_;
  std::uint64_t version_ = 0;
  std::uint64_t value_ = 0;
  int acks_ = 0;
  bool closed_ = false;
};

void send_8_receivers_mutex_cv(benchmark::State& state) {
  cv_watch w;
  std::vector<std::thread> threads;
  for (int i = 0; i < kReceivers; ++i) {
    threads.emplace_back([&w] {
      std::uint64_t seen = 0;
      std::uint64_t value = 0;
      std::uint64_t sum = 0;
      while (w.receive(seen, value)) sum += value;
      benchmark::DoNotOptimize(sum);
    });
  }
  std::uint64_t seq = 0;
  for (auto _ : state) {
    w.send(++seq);
    w.wait_acked();
  }
  w.close();
  for (auto& t : threads) t.join();
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

BENCHMARK(send_8_receivers_asyncband)
    ->Name("watch/send_8_receivers/asyncband")
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(send_8_receivers_mutex_cv)
    ->Name("watch/send_8_receivers/mutex_cv")
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(send_8_receivers_blocking_asyncband)
    ->Name("watch/send_8_receivers_blocking/asyncband")
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(send_8_receivers_mutex_cv)
    ->Name("watch/send_8_receivers_blocking/mutex_cv")
    ->UseRealTime()
    ->MeasureProcessCPUTime();

int main(int argc, char** argv) {
  return asyncband_bench::run_benchmarks(argc, argv);
}
