// SPDX-License-Identifier: Apache-2.0
// bench/bench_broadcast.cpp: fan-out. One sender, N receivers, every receiver gets every message:
// asyncband::broadcast (overflow and bounded) against the fan-out users write by hand today.
//
// Names are `broadcast/<how>_<mode>_n<N>/impl`:
//   how   coro     coroutines on 2 threads: asyncband runs one sender task and N receiver tasks
//                  (runtime::task) on a runtime::thread_pool of 2 workers; asio runs one sender
//                  and N receiver awaitables co_spawned on an io_context run by 2 threads.
//                  In coro_overflow the overflow sender never suspends, and the thread_pool puts a
//                  coroutine woken from a worker in that worker's "next" slot, which is not stolen:
//                  the receiver woken last waits there until the sender's task ends (at 1
//                  receiver, sending and receiving do not overlap at all). Nothing is lost at
//                  kOverflowCapacity; with a small capacity that receiver would lag.
//         threads  plain threads: the benchmark thread sends, N receiver threads receive with the
//                  blocking forms. The receiver threads persist across the samples
//                  (asyncband_bench::thread_crew); a sample is timed from their release to the
//                  end of the last receive.
//   mode  overflow asyncband::broadcast::overflow; the sender never waits. Capacity
//                  kOverflowCapacity (>= kMessages) for every impl, so that no receiver can fall
//                  behind by a capacity and every impl delivers every message to every receiver
//                  (a comparison where the slow receivers skip messages would reward skipping).
//                  The counter `missed` (messages a receiver did not get, per receiver and sample)
//                  says it stayed so; a receiver that lags still ends the sample correctly.
//         bounded  asyncband::broadcast::bounded (lossless); the sender waits while the slowest
//                  receiver is kBoundedCapacity (1024) messages behind. The baselines wait while
//                  one receiver's queue holds kBoundedCapacity messages: the same bound.
//   impl  asyncband       ours.
//         mutex_cv_deque  one std::deque per receiver under its own std::mutex, with a
//                         std::condition_variable "not empty" (and "not full", bounded): the
//                         sender locks each receiver's queue in turn, pushes (bounded: waits while
//                         it is full; overflow: drops the queue's oldest message when full, which
//                         kOverflowCapacity never lets happen), unlocks, notifies; a receiver pops
//                         one message at a time. Threads only: a receiver blocks its thread, so
//                         N receivers cannot run as coroutines on 2 threads.
//         asio_channel    one boost::asio::experimental::concurrent_channel<void(error_code, u64)>
//                         of capacity C per receiver (Boost 1.81), fed in a loop by the sender.
//                         Everybody tries first (try_send / try_receive complete at once when they
//                         can) and starts an asynchronous operation only when that fails: the
//                         fastest of the reasonable usages (an awaited async_send always goes
//                         through the io_context, even when it could complete at once; see
//                         bench_channels.cpp, where try-first measured fastest). In the thread
//                         cases an operation that must wait completes on a private io_context of
//                         the thread that waits, which runs it until the completion: the sender's
//                         and each receiver's own (a blocking receive, as close to the others'
//                         blocking forms as Asio gets; one shared io_context run by every thread
//                         would make completions hop threads). Overflow: on a full channel
//                         (never, at kOverflowCapacity) the sender takes the oldest message out.
//
// Every sample carries kMessages u64 values 0, 1, ... to each of N receivers; each receiver checks
// it gets them in order (a lag reported by asyncband, or a gap a baseline dropped, is counted as
// `missed`). The channels persist across the samples (each sample drains them). A sample's time
// is the whole batch (ms); items/s counts messages sent, `csw/msg` the process's context switches
// per message sent. The per-message cost at N receivers is time / kMessages; "grows no faster
// than N" compares it across N.
//
//   bench_broadcast --benchmark_filter='broadcast/threads_bounded' --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <atomic>
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
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <asyncband/block_on.hpp>
#include <asyncband/broadcast.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>

#include "bench_support.hpp"

namespace {

namespace broadcast = asyncband::broadcast;
using asyncband::runtime::task;
using asyncband::runtime::thread_pool;
using asyncband_bench::context_switches;
using asyncband_bench::thread_crew;
using u64 = std::uint64_t;
using clock_type = std::chrono::steady_clock;
using seconds = std::chrono::duration<double>;
using error_code = boost::system::error_code;
using asio_channel = boost::asio::experimental::concurrent_channel<void(error_code, u64)>;

/// Messages per sample (each goes to every receiver).
constexpr u64 kMessages = 100'000;
/// Capacity of the bounded cases, for every impl.
constexpr std::size_t kBoundedCapacity = 1024;
/// Capacity of the overflow cases, for every impl: no receiver can lag within a sample.
constexpr std::size_t kOverflowCapacity = 131'072;
static_assert(kOverflowCapacity >= kMessages);
/// Workers of the coroutine cases.
constexpr int kWorkers = 2;

constexpr std::size_t capacity_of(broadcast::mode m) {
  return m == broadcast::mode::bounded ? kBoundedCapacity : kOverflowCapacity;
}

/// A state the benchmark cannot recover from (a send refused by a channel nobody closed, a message
/// out of order): a thread has no way to fail the case without leaving the others waiting forever.
[[noreturn]] void impossible(const char* what) {
  std::fprintf(stderr, "bench_broadcast: %s\n", what);
  std::abort();
}

// ---------------------------------------------------------------------------------------------
// What one receiver got in one sample.

class tally {
 public:
  /// Whether the sample's last message has been received (or lagged past).
  [[nodiscard]] bool done() const noexcept { return next_ == kMessages; }
  /// A message. `gaps`: a baseline that drops messages shows it only by a gap in the values.
  void got(u64 v, bool gaps) noexcept {
    if (v != next_ && (!gaps || v < next_)) impossible("a message out of order, or received twice");
    missed_ += v - next_;
    next_ = v + 1;
  }
  /// asyncband: the receiver lagged by n messages; the next one received is next_ + n.
  void lagged(u64 n) noexcept {
    missed_ += n;
    next_ += n;
  }
  /// Ends the sample: the messages missed in it.
  u64 reset() noexcept {
    if (next_ != kMessages) impossible("a receiver ended its sample early");
    next_ = 0;
    return std::exchange(missed_, 0);
  }

 private:
  u64 next_ = 0;
  u64 missed_ = 0;
};

/// The bookkeeping of a case: items/s, context switches and misses.
class run_stats {
 public:
  run_stats(benchmark::State& state, int receivers)
      : state_(state), receivers_(receivers), switches_before_(context_switches()) {}

  /// After a sample: collects every receiver's misses.
  void end_sample(std::vector<tally>& tallies) {
    for (tally& t : tallies) missed_ += t.reset();
  }

  void finish() {
    const auto messages = static_cast<std::int64_t>(kMessages) * state_.iterations();
    state_.SetItemsProcessed(messages);
    const long switches_after = context_switches();
    if (switches_before_ >= 0 && switches_after >= 0 && messages > 0) {
      state_.counters["csw/msg"] =
          static_cast<double>(switches_after - switches_before_) / static_cast<double>(messages);
    }
    if (state_.iterations() > 0) {
      state_.counters["missed"] =
          static_cast<double>(missed_) / static_cast<double>(state_.iterations() * receivers_);
    }
  }

 private:
  benchmark::State& state_;
  int receivers_;
  long switches_before_;
  u64 missed_ = 0;
};

// ---------------------------------------------------------------------------------------------
// asyncband

/// One channel of mode M with `receivers` receivers; the sender is kept apart so that the
/// channel never closes while a case runs.
template <broadcast::mode M>
struct asyncband_fanout {
  explicit asyncband_fanout(int receivers) : asyncband_fanout(make(), receivers) {}

  broadcast::sender<u64, M> tx;
  std::vector<broadcast::receiver<u64, M>> rxs;

 private:
  using channel = std::pair<broadcast::sender<u64, M>, broadcast::receiver<u64, M>>;
  static channel make() {
    if constexpr (M == broadcast::mode::bounded) {
      return broadcast::bounded<u64>(kBoundedCapacity);
    } else {
      return broadcast::overflow<u64>(kOverflowCapacity);
    }
  }
  asyncband_fanout(channel c, int receivers) : tx(std::move(c.first)) {
    rxs.push_back(std::move(c.second));
    for (int i = 1; i < receivers; ++i) rxs.push_back(tx.subscribe());
  }
};

void receive_one(broadcast::recv_result<u64>& r, tally& t) {
  if (r.ok()) {
    t.got(*r, false);
  } else if (r.lagged()) {
    t.lagged(r.missed());
  } else {
    impossible("asyncband: recv failed");
  }
}

template <broadcast::mode M>
task<void> asyncband_sender(thread_pool& pool, broadcast::sender<u64, M>& tx) {
  co_await pool.schedule();
  for (u64 i = 0; i < kMessages; ++i) {
    if constexpr (M == broadcast::mode::bounded) {
      auto sent = co_await tx.send(i);
      if (!sent) impossible("asyncband: send failed");
    } else {
      if (!tx.send(i)) impossible("asyncband: send failed");
    }
  }
}

template <broadcast::mode M>
task<void> asyncband_receiver(thread_pool& pool, broadcast::receiver<u64, M>& rx, tally& t) {
  co_await pool.schedule();
  while (!t.done()) {
    auto r = co_await rx.recv();
    receive_one(r, t);
  }
}

template <broadcast::mode M>
void coro_asyncband(benchmark::State& state, int receivers) {
  thread_pool pool(kWorkers);
  asyncband_fanout<M> fanout(receivers);
  std::vector<tally> tallies(static_cast<std::size_t>(receivers));
  run_stats stats(state, receivers);
  for (auto _ : state) {
    std::vector<task<void>> tasks;
    tasks.reserve(static_cast<std::size_t>(receivers) + 1);
    for (std::size_t i = 0; i < tallies.size(); ++i)
      tasks.push_back(asyncband_receiver<M>(pool, fanout.rxs[i], tallies[i]));
    tasks.push_back(asyncband_sender<M>(pool, fanout.tx));
    const auto start = clock_type::now();
    asyncband::block_on(asyncband::runtime::when_all(std::move(tasks)));
    state.SetIterationTime(seconds(clock_type::now() - start).count());
    stats.end_sample(tallies);
  }
  stats.finish();
}

template <broadcast::mode M>
void threads_asyncband(benchmark::State& state, int receivers) {
  asyncband_fanout<M> fanout(receivers);
  std::vector<tally> tallies(static_cast<std::size_t>(receivers));
  thread_crew crew(receivers, [&fanout, &tallies](int i) {
    auto& rx = fanout.rxs[static_cast<std::size_t>(i)];
    tally& t = tallies[static_cast<std::size_t>(i)];
    while (!t.done()) {
      auto r = rx.recv_blocking();
      receive_one(r, t);
    }
  });
  broadcast::sender<u64, M>& tx = fanout.tx;
  run_stats stats(state, receivers);
  for (auto _ : state) {
    const auto start = clock_type::now();
    crew.release();
    for (u64 i = 0; i < kMessages; ++i) {
      if constexpr (M == broadcast::mode::bounded) {
        if (!tx.send_blocking(i)) impossible("asyncband: send_blocking failed");
      } else {
        if (!tx.send(i)) impossible("asyncband: send failed");
      }
    }
    crew.wait_round();
    state.SetIterationTime(seconds(clock_type::now() - start).count());
    stats.end_sample(tallies);
  }
  stats.finish();
}

// ---------------------------------------------------------------------------------------------
// mutex_cv_deque: a deque per receiver, the fan-out written by hand.

class mutex_cv_fanout {
 public:
  mutex_cv_fanout(int receivers, std::size_t capacity, bool bounded)
      : capacity_(capacity), bounded_(bounded) {
    for (int i = 0; i < receivers; ++i) inboxes_.push_back(std::make_unique<inbox>());
  }

  void send(u64 v) {
    for (const auto& box : inboxes_) {
      {
        std::unique_lock lock(box->mutex);
        if (bounded_) {
          box->not_full.wait(lock, [&] { return box->items.size() < capacity_; });
        } else if (box->items.size() == capacity_) {
          box->items.pop_front();  // overflow: the oldest message goes
        }
        box->items.push_back(v);
      }
      box->not_empty.notify_one();
    }
  }

  u64 recv(int receiver) {
    inbox& box = *inboxes_[static_cast<std::size_t>(receiver)];
    u64 v = 0;
    {
      std::unique_lock lock(box.mutex);
      box.not_empty.wait(lock, [&] { return !box.items.empty(); });
      v = box.items.front();
      box.items.pop_front();
    }
    if (bounded_) box.not_full.notify_one();
    return v;
  }

 private:
  struct alignas(64) inbox {
    std::mutex mutex;
    std::condition_variable not_empty;
    std::condition_variable not_full;
    std::deque<u64> items;
  };

  std::size_t capacity_;
  bool bounded_;
  std::vector<std::unique_ptr<inbox>> inboxes_;
};

template <broadcast::mode M>
void threads_mutex_cv_deque(benchmark::State& state, int receivers) {
  mutex_cv_fanout fanout(receivers, capacity_of(M), M == broadcast::mode::bounded);
  std::vector<tally> tallies(static_cast<std::size_t>(receivers));
  thread_crew crew(receivers, [&fanout, &tallies](int i) {
    tally& t = tallies[static_cast<std::size_t>(i)];
    while (!t.done()) t.got(fanout.recv(i), true);
  });
  run_stats stats(state, receivers);
  for (auto _ : state) {
    const auto start = clock_type::now();
    crew.release();
    for (u64 i = 0; i < kMessages; ++i) fanout.send(i);
    crew.wait_round();
    state.SetIterationTime(seconds(clock_type::now() - start).count());
    stats.end_sample(tallies);
  }
  stats.finish();
}

// ---------------------------------------------------------------------------------------------
// asio_channel: a concurrent_channel per receiver.

/// The channels, on an executor that is never run: every operation that waits brings its own.
class asio_fanout {
 public:
  asio_fanout(int receivers, std::size_t capacity) {
    for (int i = 0; i < receivers; ++i)
      channels_.push_back(std::make_unique<asio_channel>(home_.get_executor(), capacity));
  }
  /// For the coroutine cases: channels on `context`.
  asio_fanout(boost::asio::io_context& context, int receivers, std::size_t capacity) {
    for (int i = 0; i < receivers; ++i)
      channels_.push_back(std::make_unique<asio_channel>(context.get_executor(), capacity));
  }

  asio_channel& operator[](std::size_t i) { return *channels_[i]; }
  [[nodiscard]] std::size_t size() const noexcept { return channels_.size(); }

 private:
  boost::asio::io_context home_{1};
  std::vector<std::unique_ptr<asio_channel>> channels_;
};

/// Overflow, on a full channel: the oldest message goes (the sender takes it out), as in the
/// other impls, so the receiver sees a gap (`missed`) and still gets the last message.
void drop_oldest_and_send(asio_channel& channel, u64 v) {
  while (!channel.try_send(error_code{}, v))
    channel.try_receive([](error_code /*unused*/, u64 /*unused*/) {});
}

/// Threads: a sender that waits on its own io_context when a channel is full.
class asio_thread_sender {
 public:
  asio_thread_sender(asio_fanout& channels, bool bounded) : channels_(&channels), bounded_(bounded) {}

  void send(u64 v) {
    for (std::size_t i = 0; i < channels_->size(); ++i) {
      asio_channel& channel = (*channels_)[i];
      if (channel.try_send(error_code{}, v)) continue;
      if (!bounded_) {
        drop_oldest_and_send(channel, v);
        continue;
      }
      bool done = false;
      error_code error;
      channel.async_send(error_code{}, v, boost::asio::bind_executor(context_, [&done, &error](error_code e) {
                           error = e;
                           done = true;
                         }));
      context_.restart();
      while (!done) context_.run_one();
      if (error) impossible("asio: async_send failed");
    }
  }

 private:
  asio_fanout* channels_;
  bool bounded_;
  boost::asio::io_context context_{1};
};

/// Threads: a receiver that waits on its own io_context when its channel is empty.
class asio_thread_receiver {
 public:
  explicit asio_thread_receiver(asio_channel& channel) : channel_(&channel) {}

  u64 recv() {
    u64 out = 0;
    bool done = false;
    error_code error;
    auto take = [&out, &done, &error](error_code e, u64 v) {
      error = e;
      out = v;
      done = true;
    };
    if (!channel_->try_receive(take)) {
      channel_->async_receive(boost::asio::bind_executor(context_, take));
      context_.restart();
      while (!done) context_.run_one();
    }
    if (error) impossible("asio: receive failed");
    return out;
  }

 private:
  asio_channel* channel_;
  boost::asio::io_context context_{1};
};

template <broadcast::mode M>
void threads_asio_channel(benchmark::State& state, int receivers) {
  asio_fanout channels(receivers, capacity_of(M));
  asio_thread_sender tx(channels, M == broadcast::mode::bounded);
  std::vector<std::unique_ptr<asio_thread_receiver>> rxs;
  for (std::size_t i = 0; i < channels.size(); ++i)
    rxs.push_back(std::make_unique<asio_thread_receiver>(channels[i]));
  std::vector<tally> tallies(static_cast<std::size_t>(receivers));
  thread_crew crew(receivers, [&rxs, &tallies](int i) {
    asio_thread_receiver& rx = *rxs[static_cast<std::size_t>(i)];
    tally& t = tallies[static_cast<std::size_t>(i)];
    while (!t.done()) t.got(rx.recv(), true);
  });
  run_stats stats(state, receivers);
  for (auto _ : state) {
    const auto start = clock_type::now();
    crew.release();
    for (u64 i = 0; i < kMessages; ++i) tx.send(i);
    crew.wait_round();
    state.SetIterationTime(seconds(clock_type::now() - start).count());
    stats.end_sample(tallies);
  }
  stats.finish();
}

boost::asio::awaitable<void> asio_sender(asio_fanout& channels, bool bounded) {
  for (u64 i = 0; i < kMessages; ++i) {
    for (std::size_t c = 0; c < channels.size(); ++c) {
      if (channels[c].try_send(error_code{}, i)) continue;
      if (!bounded) {
        drop_oldest_and_send(channels[c], i);
        continue;
      }
      auto [e] =
          co_await channels[c].async_send(error_code{}, i, boost::asio::as_tuple(boost::asio::use_awaitable));
      if (e) impossible("asio: async_send failed");
    }
  }
}

boost::asio::awaitable<void> asio_receiver(asio_channel& channel, tally& t) {
  while (!t.done()) {
    if (channel.try_receive([&t](error_code e, u64 v) {
          if (e) impossible("asio: try_receive failed");
          t.got(v, true);
        })) {
      continue;
    }
    auto [e, v] = co_await channel.async_receive(boost::asio::as_tuple(boost::asio::use_awaitable));
    if (e) impossible("asio: async_receive failed");
    t.got(v, true);
  }
}

template <broadcast::mode M>
void coro_asio_channel(benchmark::State& state, int receivers) {
  boost::asio::io_context context(kWorkers);
  auto work = boost::asio::make_work_guard(context);
  std::vector<std::thread> threads;
  threads.reserve(kWorkers);
  for (int w = 0; w < kWorkers; ++w) threads.emplace_back([&context] { context.run(); });
  asio_fanout channels(context, receivers, capacity_of(M));
  std::vector<tally> tallies(static_cast<std::size_t>(receivers));
  run_stats stats(state, receivers);
  for (auto _ : state) {
    std::latch done(receivers + 1);
    const auto on_done = [&done](const std::exception_ptr& e) {
      if (e) impossible("asio: a coroutine threw");
      done.count_down();
    };
    std::vector<boost::asio::awaitable<void>> coroutines;
    coroutines.reserve(static_cast<std::size_t>(receivers) + 1);
    for (std::size_t i = 0; i < tallies.size(); ++i)
      coroutines.push_back(asio_receiver(channels[i], tallies[i]));
    coroutines.push_back(asio_sender(channels, M == broadcast::mode::bounded));
    const auto start = clock_type::now();
    for (auto& c : coroutines) boost::asio::co_spawn(context, std::move(c), on_done);
    done.wait();
    state.SetIterationTime(seconds(clock_type::now() - start).count());
    stats.end_sample(tallies);
  }
  stats.finish();
  work.reset();
  for (auto& t : threads) t.join();
}

// ---------------------------------------------------------------------------------------------
// Registration. Fixed iterations: every sample is a whole batch of kMessages.

constexpr int kReceivers[] = {1, 2, 4, 8};
constexpr benchmark::IterationCount kSamples = 8;

using case_function = void (*)(benchmark::State&, int);

void register_case(const std::string& name, case_function run, int receivers) {
  benchmark::RegisterBenchmark(name.c_str(),
                               [run, receivers](benchmark::State& state) { run(state, receivers); })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(kSamples);
}

template <broadcast::mode M>
void register_mode(const char* mode_name) {
  for (const int n : kReceivers) {
    const std::string suffix = std::string("_") + mode_name + "_n" + std::to_string(n) + "/";
    const std::string coro = "broadcast/coro" + suffix;
    register_case(coro + "asyncband", coro_asyncband<M>, n);
    register_case(coro + "asio_channel", coro_asio_channel<M>, n);
    const std::string threads = "broadcast/threads" + suffix;
    register_case(threads + "asyncband", threads_asyncband<M>, n);
    register_case(threads + "mutex_cv_deque", threads_mutex_cv_deque<M>, n);
    register_case(threads + "asio_channel", threads_asio_channel<M>, n);
  }
}

void register_all() {
  register_mode<broadcast::mode::overflow>("overflow");
  register_mode<broadcast::mode::bounded>("bounded");
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  return asyncband_bench::run_benchmarks(argc, argv);
}
