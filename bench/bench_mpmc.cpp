// SPDX-License-Identifier: Apache-2.0
// bench/bench_mpmc.cpp: the bounded MPMC channel (asyncband::mpmc::bounded) against the
// multi-consumer queues of the C++ ecosystem.
//
// Names are `mpmc/case/impl`; impl is
//   asyncband   asyncband::mpmc::bounded<u64>
//   asio        boost::asio::experimental::concurrent_channel<void(error_code, u64)> (Boost 1.81)
//   moodycamel  moodycamel::BlockingConcurrentQueue<u64>: UNBOUNDED (producers never wait), a
//               token per producer and per consumer
//   moodycamel_capped  the same queue made bounded by a moodycamel::LightweightSemaphore of free
//               slots (taken before enqueue, given after dequeue): no library ships it, and no
//               target counts it; it measures what bounding costs the fastest unbounded queue
//   tbb         tbb::concurrent_bounded_queue<u64> with set_capacity
//   std         a bounded std::deque under a std::mutex with two condition variables
// (the peers' adapters are bench/queue_peers.hpp, shared with bench_channels).
//
// Cases
// - mpmc/threads_c{C}_p{P}x{P}: P producer threads send kMessages u64 values in total to P
//   consumer threads (each receives kMessages / P) through a queue of capacity C. The threads
//   persist across samples (asyncband_bench::thread_crew); one iteration releases them and is
//   timed manually from the release to the last thread's end. asyncband uses send_blocking /
//   recv_blocking, each consumer on its own copy of the receiver. The values sum to a known total;
//   a wrong sum fails the case.
// - mpmc/coro_w2_c{C}_p{P}x{P}: coroutines. asyncband: P producer and P consumer tasks
//   (runtime::task, co_await send / recv) on a runtime::thread_pool of 2 workers. asio: P producer
//   and P consumer awaitables (as_tuple(use_awaitable)) co_spawned on an io_context run by 2
//   threads.
//
//   bench_mpmc --benchmark_filter=mpmc/threads --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <latch>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <asyncband/block_on.hpp>
#include <asyncband/mpmc/bounded.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>

#include "bench_support.hpp"
#include "queue_peers.hpp"

namespace {

using asyncband::runtime::task;
using asyncband::runtime::thread_pool;
using asyncband_bench::bulk_run;
using asyncband_bench::thread_crew;
using asyncband_bench::peers::asio_channel;
using asyncband_bench::peers::asio_threads;
using asyncband_bench::peers::impossible;
using asyncband_bench::peers::moodycamel_capped_threads;
using asyncband_bench::peers::moodycamel_threads;
using asyncband_bench::peers::std_threads;
using asyncband_bench::peers::tbb_threads;
using u64 = std::uint64_t;
using clock_type = std::chrono::steady_clock;
using seconds = std::chrono::duration<double>;
using error_code = boost::system::error_code;

/// Messages per sample.
constexpr u64 kMessages = 16384;

/// The sum of 0 .. n-1, which every sample's values add up to.
constexpr u64 sum_below(u64 n) {
  return n * (n - 1) / 2;
}

/// asyncband's plain-thread adapter: a sender copy per producer, a receiver copy per consumer.
class asyncband_threads {
 public:
  explicit asyncband_threads(std::size_t capacity) : channel_(asyncband::mpmc::bounded<u64>(capacity)) {}

  class producer {
   public:
    explicit producer(asyncband::mpmc::sender<u64> tx) : tx_(std::move(tx)) {}
    void send(u64&& value) {
      if (!tx_.send_blocking(value)) impossible("asyncband: send_blocking failed");
    }

   private:
    asyncband::mpmc::sender<u64> tx_;
  };
  producer make_producer() { return producer(channel_.first); }

  class consumer {
   public:
    explicit consumer(asyncband::mpmc::receiver<u64> rx) : rx_(std::move(rx)) {}
    u64 recv() {
      auto r = rx_.recv_blocking();
      if (!r) impossible("asyncband: recv_blocking failed");
      return *r;
    }

   private:
    asyncband::mpmc::receiver<u64> rx_;
  };
  consumer make_consumer() { return consumer(channel_.second); }

 private:
  std::pair<asyncband::mpmc::sender<u64>, asyncband::mpmc::receiver<u64>> channel_;
};

/// mpmc/threads_*: `pairs` producer and `pairs` consumer threads, persistent across samples.
template <class Channel>
void threads_case(benchmark::State& state, std::size_t capacity, int pairs) {
  Channel channel(capacity);
  const auto n = static_cast<std::size_t>(pairs);
  std::vector<typename Channel::producer> txs;
  std::vector<typename Channel::consumer> rxs;
  txs.reserve(n);
  rxs.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    txs.push_back(channel.make_producer());
    rxs.push_back(channel.make_consumer());
  }
  const u64 share = kMessages / static_cast<u64>(pairs);
  std::vector<u64> sums(n, 0);
  thread_crew crew(2 * pairs, [&](int index) {
    const auto i = static_cast<std::size_t>(index) % n;
    if (static_cast<std::size_t>(index) < n) {
      for (u64 s = 0; s < share; ++s) txs[i].send(i * share + s);
    } else {
      u64 sum = 0;
      for (u64 s = 0; s < share; ++s) sum += rxs[i].recv();
      sums[i] = sum;
    }
  });
  bulk_run run(state, kMessages);
  for (auto _ : state) {
    const auto start = clock_type::now();
    crew.release();
    crew.wait_round();
    state.SetIterationTime(seconds(clock_type::now() - start).count());
    u64 total = 0;
    for (const u64 s : sums) total += s;
    if (total != sum_below(kMessages)) {
      state.SkipWithError("the values received do not sum to the values sent");
      break;
    }
  }
  run.finish();
}

// ---------------------------------------------------------------------------------------------
// mpmc/coro_w2_*: coroutine producers and consumers on 2 threads.

task<void> asyncband_producer(thread_pool& pool, asyncband::mpmc::sender<u64> tx, u64 first, u64 count) {
  co_await pool.schedule();
  for (u64 i = 0; i < count; ++i) {
    auto sent = co_await tx.send(first + i);
    if (!sent) impossible("asyncband: send failed");
  }
}

task<void> asyncband_consumer(thread_pool& pool, asyncband::mpmc::receiver<u64> rx, u64 count,
                              std::atomic<u64>& sum) {
  co_await pool.schedule();
  u64 mine = 0;
  for (u64 i = 0; i < count; ++i) {
    auto got = co_await rx.recv();
    if (!got) impossible("asyncband: recv failed");
    mine += *got;
  }
  sum.fetch_add(mine, std::memory_order_relaxed);
}

void coro_asyncband(benchmark::State& state, std::size_t capacity, int pairs) {
  thread_pool pool(2);
  auto channel = asyncband::mpmc::bounded<u64>(capacity);
  const u64 share = kMessages / static_cast<u64>(pairs);
  bulk_run run(state, kMessages);
  for (auto _ : state) {
    std::atomic<u64> sum{0};
    std::vector<task<void>> tasks;
    tasks.reserve(2 * static_cast<std::size_t>(pairs));
    for (int p = 0; p < pairs; ++p) {
      tasks.push_back(asyncband_consumer(pool, channel.second, share, sum));
      tasks.push_back(asyncband_producer(pool, channel.first, static_cast<u64>(p) * share, share));
    }
    const auto start = clock_type::now();
    asyncband::block_on(asyncband::runtime::when_all(std::move(tasks)));
    state.SetIterationTime(seconds(clock_type::now() - start).count());
    if (sum.load() != sum_below(kMessages)) {
      state.SkipWithError("the values received do not sum to the values sent");
      break;
    }
  }
  run.finish();
}

boost::asio::awaitable<void> asio_producer(asio_channel<u64>& channel, u64 first, u64 count) {
  for (u64 i = 0; i < count; ++i) {
    auto [e] = co_await channel.async_send(error_code{}, first + i,
                                           boost::asio::as_tuple(boost::asio::use_awaitable));
    if (e) impossible("asio: async_send failed");
  }
}

boost::asio::awaitable<void> asio_consumer(asio_channel<u64>& channel, u64 count, std::atomic<u64>& sum) {
  u64 mine = 0;
  for (u64 i = 0; i < count; ++i) {
    auto [e, v] = co_await channel.async_receive(boost::asio::as_tuple(boost::asio::use_awaitable));
    if (e) impossible("asio: async_receive failed");
    mine += v;
  }
  sum.fetch_add(mine, std::memory_order_relaxed);
}

void coro_asio(benchmark::State& state, std::size_t capacity, int pairs) {
  boost::asio::io_context context(2);
  auto work = boost::asio::make_work_guard(context);
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) threads.emplace_back([&context] { context.run(); });
  asio_channel<u64> channel(context, capacity);
  const u64 share = kMessages / static_cast<u64>(pairs);
  bulk_run run(state, kMessages);
  for (auto _ : state) {
    std::atomic<u64> sum{0};
    std::latch done(2 * pairs);
    const auto on_done = [&done](const std::exception_ptr& e) {
      if (e) impossible("asio: a coroutine threw");
      done.count_down();
    };
    const auto start = clock_type::now();
    for (int p = 0; p < pairs; ++p) {
      boost::asio::co_spawn(context, asio_consumer(channel, share, sum), on_done);
      boost::asio::co_spawn(context, asio_producer(channel, static_cast<u64>(p) * share, share), on_done);
    }
    done.wait();
    state.SetIterationTime(seconds(clock_type::now() - start).count());
    if (sum.load() != sum_below(kMessages)) {
      state.SkipWithError("the values received do not sum to the values sent");
      break;
    }
  }
  run.finish();
  work.reset();
  for (auto& t : threads) t.join();
}

// ---------------------------------------------------------------------------------------------
// Registration: fixed sample counts (each sample is several milliseconds).

constexpr std::size_t kCapacities[] = {64, 4096};
constexpr int kPairs[] = {1, 2, 4, 8};
constexpr benchmark::IterationCount kThreadSamples = 20;
constexpr benchmark::IterationCount kCoroSamples = 20;

template <class Channel>
void register_threads(const std::string& name, std::size_t capacity, int pairs) {
  benchmark::RegisterBenchmark(
      name.c_str(),
      [capacity, pairs](benchmark::State& state) { threads_case<Channel>(state, capacity, pairs); })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(kThreadSamples);
}

template <class F>
void register_coro(const std::string& name, F f) {
  benchmark::RegisterBenchmark(name.c_str(), std::move(f))
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(kCoroSamples);
}

void register_all() {
  for (const std::size_t capacity : kCapacities) {
    for (const int pairs : kPairs) {
      const std::string prefix = "mpmc/threads_c" + std::to_string(capacity) + "_p" + std::to_string(pairs) +
                                 "x" + std::to_string(pairs) + "/";
      register_threads<asyncband_threads>(prefix + "asyncband", capacity, pairs);
      register_threads<asio_threads<u64>>(prefix + "asio", capacity, pairs);
      register_threads<moodycamel_threads<u64>>(prefix + "moodycamel", capacity, pairs);
      register_threads<moodycamel_capped_threads<u64>>(prefix + "moodycamel_capped", capacity, pairs);
      register_threads<tbb_threads<u64>>(prefix + "tbb", capacity, pairs);
      register_threads<std_threads<u64>>(prefix + "std", capacity, pairs);
    }
  }
  for (const std::size_t capacity : kCapacities) {
    for (const int pairs : kPairs) {
      const std::string prefix = "mpmc/coro_w2_c" + std::to_string(capacity) + "_p" + std::to_string(pairs) +
                                 "x" + std::to_string(pairs) + "/";
      register_coro(prefix + "asyncband",
                    [capacity, pairs](benchmark::State& state) { coro_asyncband(state, capacity, pairs); });
      register_coro(prefix + "asio",
                    [capacity, pairs](benchmark::State& state) { coro_asio(state, capacity, pairs); });
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  return asyncband_bench::run_benchmarks(argc, argv);
}
