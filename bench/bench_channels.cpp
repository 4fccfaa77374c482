// SPDX-License-Identifier: Apache-2.0
// bench/bench_channels.cpp: the bounded MPSC channel (asyncband::mpsc::bounded) against the
// channels and queues of the C++ ecosystem.
//
// Names are `channel/case/impl`; impl is
//   asyncband   asyncband::mpsc::bounded<T>
//   asio        boost::asio::experimental::concurrent_channel<void(error_code, T)> (Boost 1.81)
//   moodycamel  moodycamel::BlockingConcurrentQueue<T>: UNBOUNDED (no capacity, producers never
//               wait), with a producer token per producer and a consumer token
//   moodycamel_capped  the same queue made bounded by a moodycamel::LightweightSemaphore of free
//               slots (taken before enqueue, given after dequeue): no library ships it, and no
//               target counts it; it measures what bounding costs the fastest unbounded queue
//   tbb         tbb::concurrent_bounded_queue<T> with set_capacity
//   std         a bounded std::deque under a std::mutex, with two std::condition_variables,
//               written the obvious way (cv_bounded_queue below)
// mirroring the bounded-channel tables of the reference change (Rust: tokio, async-channel, flume).
//
// Cases
// - channel/try_pair: try_send + try_recv on a channel of capacity 64 that is always empty, one
//   thread. channel/ready_send_recv: an awaited send and an awaited receive that never suspend;
//   asyncband runs its loop in an inline_coroutine (the case fails if it ever suspended). asio has
//   no completion that runs inline in Boost 1.81 (every channel completion is posted with
//   blocking.never), so its case is async_send + async_receive with plain completion handlers,
//   both run by the io_context::poll() that follows them on the same thread.
// - channel/threads_c{C}_p{P}: P producer threads send kThreadMessages u64 values in total to one
//   consumer (the benchmark thread) through a channel of capacity C. The producers persist across
//   the samples of a run (asyncband_bench::thread_crew): one iteration releases them, receives
//   every message, and is timed manually from the release to the last receive. asyncband uses
//   send_blocking / recv_blocking. asio has no blocking operations: each producer and the
//   consumer try first (try_send / try_receive) and only when that fails start async_send /
//   async_receive with a handler bound to a private io_context of their own thread, which they
//   run until it completes. Of the reasonable usages this one measured fastest overall here:
//   use_future instead (a shared state per blocked operation, completed inline by the other
//   side) was 1.5-2.5x slower at capacity 64, where producers block often, and within the noise
//   elsewhere (faster only with the consumer blocking at capacity 4096, 8 producers). The
//   values sum to a known total; a wrong sum fails the case.
// - channel/coro_w{W}_c{C}_p{P}: coroutines. asyncband: P producer tasks and one consumer task
//   (runtime::task, co_await send / recv) on a runtime::thread_pool of W workers, started by
//   block_on(when_all(...)) from the benchmark thread. asio: P producer and one consumer
//   boost::asio::awaitable coroutines (co_await async_send / async_receive with
//   as_tuple(use_awaitable)) co_spawned on an io_context run by W threads; every asio operation
//   completes through the io_context, even when it could complete at once. Tasks are created
//   before the clock starts; the pool or the io_context threads persist across samples. Each
//   sample carries coro_messages(C) values: 16384, but 4096 at capacity 1 (every message is a
//   hand-off there: fewer, so that a slow hand-off cannot stretch the run).
// - channel/inline_1k_c{C}_p{P}: as threads_c{C}_p{P} with 1 KiB messages (producer id, sequence,
//   1000 bytes of payload). The consumer checks every message: a known producer, that producer's
//   next sequence number, and the payload's first and last bytes; a violation fails the case.
// - channel/reserve_send_recv/asyncband: try_reserve + permit.send + try_recv, one thread;
//   channel/reserve_cancel/asyncband: try_reserve, then drop the permit.
//   channel/permit_send_threads_c4096_p8/asyncband: threads_c4096_p8 with every send made as
//   reserve_blocking() + permit.send(): compare with threads_c4096_p8/asyncband.
// - channel/batch_threads_c{C}_p{P} and channel/batch_coro_w{W}_c{C}_p{P}: the consumer's two
//   ways to receive, side by side in one case: asyncband, a recv loop (recv_blocking; co_await
//   recv), as threads_* and coro_*; asyncband_recv_many, batches of up to kBatchLimit values
//   (recv_many_blocking; co_await recv_many) into a buffer reused across batches.
//
// Every sample's time is its whole batch (ms), not a time per message; items/s is messages per
// second and csw/msg the process's context switches per message. On a machine with few cores
// the thread cases with many producers are oversubscribed, which favours whoever parks least (and
// moodycamel, whose producers never wait for capacity).
//
//   bench_channels --benchmark_filter=channel/threads --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <blockingconcurrentqueue.h>
#include <oneapi/tbb/concurrent_queue.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <asyncband/block_on.hpp>
#include <asyncband/mpsc/bounded.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>

#include "bench_support.hpp"
#include "queue_peers.hpp"

namespace {

using asyncband::runtime::task;
using asyncband::runtime::thread_pool;
using asyncband_bench::bulk_run;
using asyncband_bench::escape;
using asyncband_bench::inline_coroutine;
using asyncband_bench::thread_crew;
using u64 = std::uint64_t;
using clock_type = std::chrono::steady_clock;
using seconds = std::chrono::duration<double>;
using error_code = boost::system::error_code;
using asyncband_bench::peers::asio_channel;
using asyncband_bench::peers::asio_threads;
using asyncband_bench::peers::cv_bounded_queue;
using asyncband_bench::peers::impossible;
using asyncband_bench::peers::moodycamel_capped_threads;
using asyncband_bench::peers::moodycamel_threads;
using asyncband_bench::peers::std_threads;
using asyncband_bench::peers::tbb_threads;

/// Messages per sample of the plain-thread cases.
constexpr u64 kThreadMessages = 16384;

/// Messages per sample of the coroutine cases.
constexpr u64 coro_messages(std::size_t capacity) {
  return capacity == 1 ? 4096 : 16384;
}

/// Capacity of the single-thread cases (never reached: the channel holds at most one value).
constexpr std::size_t kReadyCapacity = 64;

// ---------------------------------------------------------------------------------------------
// Messages and their checks.

/// A 1 KiB message, carried by value.
struct inline_message {
  std::uint32_t producer = 0;
  u64 sequence = 0;
  std::array<unsigned char, 1000> payload{};
};

constexpr unsigned char payload_byte(std::uint32_t producer, u64 sequence) {
  return static_cast<unsigned char>(producer * 131U + sequence);
}

/// Producer `producer` of `per_producer` messages makes its message number `sequence`.
template <class T>
T make_message(std::uint32_t producer, u64 sequence, u64 per_producer);

template <>
u64 make_message<u64>(std::uint32_t producer, u64 sequence, u64 per_producer) {
  return producer * per_producer + sequence;
}

template <>
inline_message make_message<inline_message>(std::uint32_t producer, u64 sequence, u64 /*per_producer*/) {
  inline_message m;
  m.producer = producer;
  m.sequence = sequence;
  m.payload.fill(payload_byte(producer, sequence));
  return m;
}

/// The consumer's check of one sample.
template <class T>
class message_check;

/// u64: the values are 0 .. total-1, so their sum is known.
template <>
class message_check<u64> {
 public:
  explicit message_check(int /*producers*/) {}
  void add(u64 v) noexcept {
    sum_ += v;
    ++count_;
  }
  /// After a sample of `total` messages; resets for the next one.
  bool end_sample(u64 total) noexcept {
    const bool ok = count_ == total && sum_ == total * (total - 1) / 2;
    sum_ = 0;
    count_ = 0;
    return ok;
  }
  static constexpr const char* failure = "the values received do not sum to the values sent";

 private:
  u64 sum_ = 0;
  u64 count_ = 0;
};

/// inline_message: every message comes from a known producer, in that producer's order.
template <>
class message_check<inline_message> {
 public:
  explicit message_check(int producers) : next_(static_cast<std::size_t>(producers), 0) {}
  void add(const inline_message& m) noexcept {
    if (m.producer >= next_.size() || m.sequence != next_[m.producer] ||
        m.payload.front() != payload_byte(m.producer, m.sequence) ||
        m.payload.back() != payload_byte(m.producer, m.sequence)) {
      bad_ = true;
      return;
    }
    ++next_[m.producer];
  }
  bool end_sample(u64 total) noexcept {
    bool ok = !bad_;
    for (u64& n : next_) {
      ok = ok && n == total / next_.size();
      n = 0;
    }
    bad_ = false;
    return ok;
  }
  static constexpr const char* failure = "a message out of its producer's order, or corrupted";

 private:
  std::vector<u64> next_;
  bool bad_ = false;
};

/// The most values one batch receive takes (recv_many's limit) in the batch_* cases.
constexpr std::size_t kBatchLimit = 64;

template <class T, bool ThroughPermits = false, bool Batches = false>
class asyncband_threads {
 public:
  explicit asyncband_threads(std::size_t capacity) : channel_(asyncband::mpsc::bounded<T>(capacity)) {}

  class producer {
   public:
    explicit producer(asyncband::mpsc::sender<T> tx) : tx_(std::move(tx)) {}
    void send(T&& value) {
      if constexpr (ThroughPermits) {
        auto permit = tx_.reserve_blocking();
        if (!permit || !permit->send(std::move(value)))
          impossible("asyncband: reserve or permit send failed");
      } else {
        if (!tx_.send_blocking(std::move(value))) impossible("asyncband: send_blocking failed");
      }
    }

   private:
    asyncband::mpsc::sender<T> tx_;
  };
  producer make_producer() { return producer(channel_.first); }

  /// One value at a time: recv_blocking; or (Batches) the next value of the last batch, and a
  /// recv_many_blocking of up to kBatchLimit when it is used up.
  class consumer {
   public:
    explicit consumer(asyncband::mpsc::receiver<T>& rx) : rx_(&rx) {
      if constexpr (Batches) batch_.reserve(kBatchLimit);
    }
    T recv() {
      if constexpr (Batches) {
        if (next_ == batch_.size()) {
          batch_.clear();
          next_ = 0;
          if (!rx_->recv_many_blocking(batch_, kBatchLimit))
            impossible("asyncband: recv_many_blocking failed");
        }
        return std::move(batch_[next_++]);
      } else {
        auto r = rx_->recv_blocking();
        if (!r) impossible("asyncband: recv_blocking failed");
        return std::move(*r);
      }
    }

   private:
    asyncband::mpsc::receiver<T>* rx_;
    std::vector<T> batch_;
    std::size_t next_ = 0;
  };
  consumer make_consumer() { return consumer(channel_.second); }

 private:
  std::pair<asyncband::mpsc::sender<T>, asyncband::mpsc::receiver<T>> channel_;
};

// ---------------------------------------------------------------------------------------------
// The plain-thread cases.

/// channel/threads_*, channel/inline_1k_*, channel/permit_send_threads_*: `producers` persistent
/// producer threads, the benchmark thread consumes; one iteration = kThreadMessages messages.
template <class Channel, class T>
void threads_case(benchmark::State& state, std::size_t capacity, int producers) {
  Channel channel(capacity);
  std::vector<typename Channel::producer> txs;
  txs.reserve(static_cast<std::size_t>(producers));
  for (int p = 0; p < producers; ++p) txs.push_back(channel.make_producer());
  auto rx = channel.make_consumer();
  const u64 per_producer = kThreadMessages / static_cast<u64>(producers);
  thread_crew crew(producers, [&txs, per_producer](int p) {
    auto& tx = txs[static_cast<std::size_t>(p)];
    const auto id = static_cast<std::uint32_t>(p);
    for (u64 s = 0; s < per_producer; ++s) tx.send(make_message<T>(id, s, per_producer));
  });
  message_check<T> check(producers);
  bulk_run run(state, kThreadMessages);
  for (auto _ : state) {
    const auto start = clock_type::now();
    crew.release();
    for (u64 i = 0; i < kThreadMessages; ++i) check.add(rx.recv());
    state.SetIterationTime(seconds(clock_type::now() - start).count());
    crew.wait_round();
    if (!check.end_sample(kThreadMessages)) {
      state.SkipWithError(message_check<T>::failure);
      break;
    }
  }
  run.finish();
}

// ---------------------------------------------------------------------------------------------
// channel/try_pair: try_send + try_recv, one thread, on an always empty channel.

void try_pair_asyncband(benchmark::State& state) {
  auto channel = asyncband::mpsc::bounded<u64>(kReadyCapacity);
  u64 i = 0;
  u64 sum = 0;
  for (auto _ : state) {
    auto sent = channel.first.try_send(i++);
    auto got = channel.second.try_recv();
    if (!sent || !got) {
      state.SkipWithError("try_send or try_recv failed on a non-full channel");
      break;
    }
    sum += *got;
  }
  benchmark::DoNotOptimize(sum);
}

void try_pair_asio(benchmark::State& state) {
  boost::asio::io_context context(1);
  asio_channel<u64> channel(context, kReadyCapacity);
  u64 i = 0;
  u64 sum = 0;
  for (auto _ : state) {
    if (!channel.try_send(error_code{}, i++) ||
        !channel.try_receive([&sum](error_code /*unused*/, u64 v) { sum += v; })) {
      state.SkipWithError("try_send or try_receive failed on a non-full channel");
      break;
    }
  }
  benchmark::DoNotOptimize(sum);
}

void try_pair_moodycamel(benchmark::State& state) {
  moodycamel::BlockingConcurrentQueue<u64> queue(kReadyCapacity);
  moodycamel::ProducerToken producer(queue);
  moodycamel::ConsumerToken consumer(queue);
  u64 i = 0;
  u64 sum = 0;
  for (auto _ : state) {
    u64 v = 0;
    if (!queue.try_enqueue(producer, i++) || !queue.try_dequeue(consumer, v)) {
      state.SkipWithError("try_enqueue or try_dequeue failed");
      break;
    }
    sum += v;
  }
  benchmark::DoNotOptimize(sum);
}

void try_pair_tbb(benchmark::State& state) {
  tbb::concurrent_bounded_queue<u64> queue;
  queue.set_capacity(kReadyCapacity);
  u64 i = 0;
  u64 sum = 0;
  for (auto _ : state) {
    u64 v = 0;
    if (!queue.try_push(i++) || !queue.try_pop(v)) {
      state.SkipWithError("try_push or try_pop failed on a non-full queue");
      break;
    }
    sum += v;
  }
  benchmark::DoNotOptimize(sum);
}

void try_pair_std(benchmark::State& state) {
  cv_bounded_queue<u64> queue(kReadyCapacity);
  u64 i = 0;
  u64 sum = 0;
  for (auto _ : state) {
    u64 v = i++;
    if (!queue.try_push(v) || !queue.try_pop(v)) {
      state.SkipWithError("try_push or try_pop failed on a non-full queue");
      break;
    }
    sum += v;
  }
  benchmark::DoNotOptimize(sum);
}

// ---------------------------------------------------------------------------------------------
// channel/ready_send_recv: an awaited send and an awaited receive, neither of which waits.

inline_coroutine ready_send_recv_loop(benchmark::State& state, asyncband::mpsc::sender<u64>& tx,
                                      asyncband::mpsc::receiver<u64>& rx, u64& sum) {
  u64 i = 0;
  for (auto _ : state) {
    auto sent = co_await tx.send(i++);
    auto got = co_await rx.recv();
    if (!sent || !got) {
      state.SkipWithError("send or recv failed on a non-full channel");
      break;
    }
    sum += *got;
  }
}

void ready_send_recv_asyncband(benchmark::State& state) {
  auto channel = asyncband::mpsc::bounded<u64>(kReadyCapacity);
  u64 sum = 0;
  ready_send_recv_loop(state, channel.first, channel.second, sum).check(state);
  benchmark::DoNotOptimize(sum);
}

/// Completion handlers (no coroutine): both completions are posted, and run by the poll().
void ready_send_recv_asio(benchmark::State& state) {
  boost::asio::io_context context(1);
  auto work = boost::asio::make_work_guard(context);  // poll() never finds it stopped
  asio_channel<u64> channel(context, kReadyCapacity);
  u64 i = 0;
  u64 sum = 0;
  u64 completions = 0;
  for (auto _ : state) {
    channel.async_send(error_code{}, i++, [&completions](error_code e) { completions += e ? 0 : 1; });
    channel.async_receive([&completions, &sum](error_code e, u64 v) {
      completions += e ? 0 : 1;
      sum += v;
    });
    context.poll();
  }
  if (completions != 2 * static_cast<u64>(state.iterations()))
    state.SkipWithError("a send or receive did not complete in the poll() that followed it");
  benchmark::DoNotOptimize(sum);
}

// ---------------------------------------------------------------------------------------------
// channel/reserve_send_recv, channel/reserve_cancel: the reservation paths, one thread.

void reserve_send_recv_asyncband(benchmark::State& state) {
  auto channel = asyncband::mpsc::bounded<u64>(kReadyCapacity);
  u64 i = 0;
  u64 sum = 0;
  for (auto _ : state) {
    auto permit = channel.first.try_reserve();
    if (!permit || !permit->send(i++)) {
      state.SkipWithError("try_reserve or permit send failed on a non-full channel");
      break;
    }
    auto got = channel.second.try_recv();
    if (!got) {
      state.SkipWithError("try_recv failed after a permit send");
      break;
    }
    sum += *got;
  }
  benchmark::DoNotOptimize(sum);
}

void reserve_cancel_asyncband(benchmark::State& state) {
  auto channel = asyncband::mpsc::bounded<u64>(kReadyCapacity);
  for (auto _ : state) {
    auto permit = channel.first.try_reserve();
    if (!permit) {
      state.SkipWithError("try_reserve failed on an empty channel");
      break;
    }
    escape(*permit);
  }
}

// ---------------------------------------------------------------------------------------------
// channel/coro_w{W}_c{C}_p{P}: coroutine producers and consumer on W threads.

task<void> asyncband_producer(thread_pool& pool, asyncband::mpsc::sender<u64> tx, u64 first, u64 count) {
  co_await pool.schedule();
  for (u64 i = 0; i < count; ++i) {
    auto sent = co_await tx.send(first + i);
    if (!sent) impossible("asyncband: send failed");
  }
}

task<void> asyncband_consumer(thread_pool& pool, asyncband::mpsc::receiver<u64>& rx, u64 count, u64& sum) {
  co_await pool.schedule();
  for (u64 i = 0; i < count; ++i) {
    auto got = co_await rx.recv();
    if (!got) impossible("asyncband: recv failed");
    sum += *got;
  }
}

/// asyncband_consumer in batches of up to kBatchLimit (co_await recv_many), into one buffer.
task<void> asyncband_batch_consumer(thread_pool& pool, asyncband::mpsc::receiver<u64>& rx, u64 count,
                                    u64& sum) {
  co_await pool.schedule();
  std::vector<u64> batch;
  batch.reserve(kBatchLimit);
  for (u64 received = 0; received < count; received += batch.size()) {
    batch.clear();
    auto got = co_await rx.recv_many(batch, kBatchLimit);
    if (!got) impossible("asyncband: recv_many failed");
    for (const u64 v : batch) sum += v;
  }
}

template <bool Batches = false>
void coro_asyncband(benchmark::State& state, int workers, std::size_t capacity, int producers) {
  thread_pool pool(static_cast<std::size_t>(workers));
  auto channel = asyncband::mpsc::bounded<u64>(capacity);
  const u64 total = coro_messages(capacity);
  const u64 per_producer = total / static_cast<u64>(producers);
  bulk_run run(state, total);
  for (auto _ : state) {
    u64 sum = 0;
    std::vector<task<void>> tasks;
    tasks.reserve(static_cast<std::size_t>(producers) + 1);
    if constexpr (Batches) {
      tasks.push_back(asyncband_batch_consumer(pool, channel.second, total, sum));
    } else {
      tasks.push_back(asyncband_consumer(pool, channel.second, total, sum));
    }
    for (int p = 0; p < producers; ++p)
      tasks.push_back(
          asyncband_producer(pool, channel.first, static_cast<u64>(p) * per_producer, per_producer));
    const auto start = clock_type::now();
    asyncband::block_on(asyncband::runtime::when_all(std::move(tasks)));
    state.SetIterationTime(seconds(clock_type::now() - start).count());
    if (sum != total * (total - 1) / 2) {
      state.SkipWithError(message_check<u64>::failure);
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

boost::asio::awaitable<void> asio_consumer(asio_channel<u64>& channel, u64 count, u64& sum) {
  for (u64 i = 0; i < count; ++i) {
    auto [e, v] = co_await channel.async_receive(boost::asio::as_tuple(boost::asio::use_awaitable));
    if (e) impossible("asio: async_receive failed");
    sum += v;
  }
}

void coro_asio(benchmark::State& state, int workers, std::size_t capacity, int producers) {
  boost::asio::io_context context(workers);
  auto work = boost::asio::make_work_guard(context);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(workers));
  for (int w = 0; w < workers; ++w) threads.emplace_back([&context] { context.run(); });
  asio_channel<u64> channel(context, capacity);
  const u64 total = coro_messages(capacity);
  const u64 per_producer = total / static_cast<u64>(producers);
  bulk_run run(state, total);
  for (auto _ : state) {
    u64 sum = 0;
    std::latch done(producers + 1);
    const auto on_done = [&done](const std::exception_ptr& e) {
      if (e) impossible("asio: a coroutine threw");
      done.count_down();
    };
    std::vector<boost::asio::awaitable<void>> coroutines;
    coroutines.reserve(static_cast<std::size_t>(producers) + 1);
    coroutines.push_back(asio_consumer(channel, total, sum));
    for (int p = 0; p < producers; ++p)
      coroutines.push_back(asio_producer(channel, static_cast<u64>(p) * per_producer, per_producer));
    const auto start = clock_type::now();
    for (auto& c : coroutines) boost::asio::co_spawn(context, std::move(c), on_done);
    done.wait();
    state.SetIterationTime(seconds(clock_type::now() - start).count());
    if (sum != total * (total - 1) / 2) {
      state.SkipWithError(message_check<u64>::failure);
      break;
    }
  }
  run.finish();
  work.reset();
  for (auto& t : threads) t.join();
}

// ---------------------------------------------------------------------------------------------
// Registration. Iterations are fixed for the bulk cases (samples of several milliseconds, on a
// machine with few cores): the whole channel family runs in about one minute under `./x bench`
// on an idle 2-core machine, about two when other work competes for the cores.

constexpr std::size_t kCapacities[] = {64, 4096};
constexpr int kThreadProducers[] = {1, 2, 4, 8};
constexpr int kWorkers[] = {1, 2};
constexpr std::size_t kCoroCapacities[] = {1, 64, 4096};
constexpr int kCoroProducers[] = {1, 4, 8};
constexpr int kInlineProducers[] = {1, 8};

constexpr benchmark::IterationCount kThreadSamples = 30;
constexpr benchmark::IterationCount kCoroSamples = 20;
constexpr benchmark::IterationCount kInlineSamples = 12;

template <template <class> class Channel, class T>
void register_threads(const std::string& name, std::size_t capacity, int producers,
                      benchmark::IterationCount samples) {
  benchmark::RegisterBenchmark(name.c_str(),
                               [capacity, producers](benchmark::State& state) {
                                 threads_case<Channel<T>, T>(state, capacity, producers);
                               })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(samples);
}

template <class T>
using asyncband_plain = asyncband_threads<T, false>;
template <class T>
using asyncband_permits = asyncband_threads<T, true>;
template <class T>
using asyncband_batches = asyncband_threads<T, false, true>;

/// Every impl of one plain-thread case, in the report's column order.
template <class T>
void register_thread_impls(const std::string& case_name, std::size_t capacity, int producers,
                           benchmark::IterationCount samples) {
  const std::string prefix = "channel/" + case_name + "/";
  register_threads<asyncband_plain, T>(prefix + "asyncband", capacity, producers, samples);
  register_threads<asio_threads, T>(prefix + "asio", capacity, producers, samples);
  register_threads<moodycamel_threads, T>(prefix + "moodycamel", capacity, producers, samples);
  register_threads<moodycamel_capped_threads, T>(prefix + "moodycamel_capped", capacity, producers, samples);
  register_threads<tbb_threads, T>(prefix + "tbb", capacity, producers, samples);
  register_threads<std_threads, T>(prefix + "std", capacity, producers, samples);
}

template <bool Batches>
void register_coro(const std::string& name, int workers, std::size_t capacity, int producers) {
  benchmark::RegisterBenchmark(name.c_str(),
                               [workers, capacity, producers](benchmark::State& state) {
                                 coro_asyncband<Batches>(state, workers, capacity, producers);
                               })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(kCoroSamples);
}

/// The batch_* cases: a recv loop against recv_many, for the same producers.
void register_batches() {
  for (const std::size_t capacity : kCapacities) {
    for (const int producers : {1, 4}) {
      const std::string prefix =
          "channel/batch_threads_c" + std::to_string(capacity) + "_p" + std::to_string(producers) + "/";
      register_threads<asyncband_plain, u64>(prefix + "asyncband", capacity, producers, kThreadSamples);
      register_threads<asyncband_batches, u64>(prefix + "asyncband_recv_many", capacity, producers,
                                               kThreadSamples);
    }
  }
  for (const int workers : kWorkers) {
    for (const std::size_t capacity : kCapacities) {
      const std::string prefix =
          "channel/batch_coro_w" + std::to_string(workers) + "_c" + std::to_string(capacity) + "_p4/";
      register_coro<false>(prefix + "asyncband", workers, capacity, 4);
      register_coro<true>(prefix + "asyncband_recv_many", workers, capacity, 4);
    }
  }
}

void register_all() {
  benchmark::RegisterBenchmark("channel/try_pair/asyncband", try_pair_asyncband);
  benchmark::RegisterBenchmark("channel/try_pair/asio", try_pair_asio);
  benchmark::RegisterBenchmark("channel/try_pair/moodycamel", try_pair_moodycamel);
  benchmark::RegisterBenchmark("channel/try_pair/tbb", try_pair_tbb);
  benchmark::RegisterBenchmark("channel/try_pair/std", try_pair_std);
  benchmark::RegisterBenchmark("channel/ready_send_recv/asyncband", ready_send_recv_asyncband);
  benchmark::RegisterBenchmark("channel/ready_send_recv/asio", ready_send_recv_asio);

  for (const std::size_t capacity : kCapacities) {
    for (const int producers : kThreadProducers) {
      register_thread_impls<u64>("threads_c" + std::to_string(capacity) + "_p" + std::to_string(producers),
                                 capacity, producers, kThreadSamples);
    }
  }

  for (const int workers : kWorkers) {
    for (const std::size_t capacity : kCoroCapacities) {
      for (const int producers : kCoroProducers) {
        const std::string prefix = "channel/coro_w" + std::to_string(workers) + "_c" +
                                   std::to_string(capacity) + "_p" + std::to_string(producers) + "/";
        register_coro<false>(prefix + "asyncband", workers, capacity, producers);
        benchmark::RegisterBenchmark((prefix + "asio").c_str(),
                                     [workers, capacity, producers](benchmark::State& state) {
                                       coro_asio(state, workers, capacity, producers);
                                     })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(kCoroSamples);
      }
    }
  }

  for (const std::size_t capacity : kCapacities) {
    for (const int producers : kInlineProducers) {
      register_thread_impls<inline_message>(
          "inline_1k_c" + std::to_string(capacity) + "_p" + std::to_string(producers), capacity, producers,
          kInlineSamples);
    }
  }

  benchmark::RegisterBenchmark("channel/reserve_send_recv/asyncband", reserve_send_recv_asyncband);
  benchmark::RegisterBenchmark("channel/reserve_cancel/asyncband", reserve_cancel_asyncband);
  register_threads<asyncband_permits, u64>("channel/permit_send_threads_c4096_p8/asyncband", 4096, 8,
                                           kThreadSamples);
  register_batches();
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  return asyncband_bench::run_benchmarks(argc, argv);
}
