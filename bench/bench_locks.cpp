// SPDX-License-Identifier: Apache-2.0
// bench/bench_locks.cpp: mutex, semaphore and rwlock against their std (and oneTBB) baselines.
//
// Names are `family/case/impl`; impl is `asyncband` (ours), `std` (std::mutex,
// std::counting_semaphore, std::shared_mutex), `tbb` (tbb::mutex, tbb::rw_mutex: oneTBB's
// spin-then-block locks) or `tbb_spin` (tbb::spin_mutex). The coroutine cases are compared with
// the plain-thread baselines: the standard library has no awaitable lock.
//
// Uncontended cases: one thread, the lock is always free, so nothing ever waits. The `co_await`
// forms run their loop inside an inline_coroutine, which fails the case if it ever suspended.
// The process is made multi-threaded before any case runs (become_multithreaded): glibc's
// pthread mutex skips its atomics in a process that never had a second thread, which no
// program that needs a lock is.
//
// Contended cases (mutex/contended_K): K workers each add 1 to a shared counter kIncrements
// times, each increment under the lock. asyncband: K runtime::task coroutines on a
// runtime::thread_pool of kPoolThreads threads; std/tbb: K std::threads. One iteration is one
// whole run (K * kIncrements locked increments, the same work for every impl), timed manually
// from the start of the workers to the end of the last one (thread creation, pool startup and
// the final check are not timed). A run whose counter is not K * kIncrements fails the case.
// Counters: items/s is locked increments per second; csw/lock the process's context switches
// per increment. Expect more run-to-run variance here than in the uncontended cases: how long
// the workers actually overlap decides how many acquisitions queue. `asyncband` is the default
// mutex (bounded barging: an unlock frees the lock and posts the oldest waiter's retry to its
// scheduler), `asyncband_fifo` the one built with asyncband::strict_fifo (FIFO hand-off: the
// fair lock whose worst wait issue 16 compares against).
//
// `cppcoro_model` there is a model of the coroutine peers' async mutex (inline_handoff_mutex
// below), run as asyncband's: K coroutines on the same pool. `barging_model` is a model of the
// bounded barging that issue 16 asks for, measured before the library had it (barging_model_mutex: waiters
// resume on their own scheduler, as asyncband's do; a waiter is passed by bargers at most 100 times per
// retry), on the same pool: what that design can reach. mutex/worst_wait_K runs the coroutine
// locks again with each lock timed (two clock reads per lock, in all alike, so its times are
// longer): its counters are percentiles of every `co_await lock()`'s wait over the whole case,
// within 12.5% (wait_p50_us, wait_p99_us, wait_p999_us), and the longest (worst_wait_us). The
// longest is a single preemption on this kind of machine; the 99.9th percentile is the stable
// measure of how long a waiter is passed.
//
// rwlock/write_contended_threads_K and semaphore/contended_threads_K are mutex/contended_threads_K
// with the lock taken as an rwlock's write (write_blocking(); std::shared_mutex, tbb::rw_mutex)
// or as a semaphore's one permit (acquire_blocking(1); std::binary_semaphore): both asyncband
// locks were strict FIFO when these were added, so they measured the hand-off to parked threads
// that the mutex's barging replaced (issue 16, section 1); the rwlock barges too now.
// rwlock/write_contended_K is mutex/contended_K with the coroutines taking the lock as an
// rwlock's writers (`co_await rw.write()`); beside it the barging asyncband::mutex
// (`asyncband_mutex`), the mutex model of the coroutine peers (`cppcoro_model`; cppcoro has no
// rwlock) on the same workload, and the rwlock built with strict_fifo (`asyncband_fifo`).
// rwlock/read_mostly_K mixes reads and writes on it (one lock in 8 a write), with bounded
// barging and with strict FIFO: what the barging costs or saves readers.
// semaphore/contended_K is mutex/contended_K with the lock taken as one permit of a semaphore
// (`co_await s.acquire()`), bounded barging and strict FIFO, beside the coroutine peers' model.
// rwlock/worst_wait_K and rwlock/read_mostly_worst_wait_K are those two with every lock timed,
// as mutex/worst_wait_K times the mutex's (the same counters): the tail that the writers'
// bounded barging trades for throughput, against the rwlock's own strict FIFO mode.
//
//   bench_locks --benchmark_filter='mutex|semaphore|rwlock' --benchmark_min_time=0.05
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <shared_mutex>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include <oneapi/tbb/mutex.h>
#include <oneapi/tbb/rw_mutex.h>
#include <oneapi/tbb/spin_mutex.h>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>

#include "bench_support.hpp"

namespace {

using asyncband_bench::context_switches;
using asyncband_bench::escape;
using asyncband_bench::inline_coroutine;

// ---------------------------------------------------------------------------------------------
// mutex/lock_unlock: uncontended lock + unlock, empty critical section.

inline_coroutine lock_unlock_loop(benchmark::State& state, asyncband::mutex<>& m) {
  for (auto _ : state) {
    auto guard = co_await m.lock();
  }
}

void mutex_lock_unlock_asyncband(benchmark::State& state) {
  asyncband::mutex<> m;
  lock_unlock_loop(state, m).check(state);
  escape(m);
}

void mutex_lock_unlock_blocking_asyncband(benchmark::State& state) {
  asyncband::mutex<> m;
  for (auto _ : state) {
    auto guard = m.lock_blocking();
  }
  escape(m);
}

/// std::mutex and tbb::mutex alike (also the baseline of the blocking form).
template <class Mutex>
void mutex_lock_unlock_peer(benchmark::State& state) {
  Mutex m;
  for (auto _ : state) {
    m.lock();
    m.unlock();
  }
  escape(m);
}

/// The peers' loop inside the same kind of coroutine as asyncband's (mutex/lock_unlock_in_coroutine):
/// the frame holds the loop's state, which costs every iteration a store that a plain loop keeps
/// in a register. lock_unlock compares against the peers' plain loop.
template <class Mutex>
inline_coroutine peer_lock_unlock_loop(benchmark::State& state, Mutex& m) {
  for (auto _ : state) {
    const std::lock_guard guard(m);
  }
  co_return;
}

template <class Mutex>
void mutex_lock_unlock_in_coroutine_peer(benchmark::State& state) {
  Mutex m;
  peer_lock_unlock_loop(state, m).check(state);
  escape(m);
}

// mutex/try_lock: uncontended try_lock (succeeds) + unlock.

void mutex_try_lock_asyncband(benchmark::State& state) {
  asyncband::mutex<> m;
  for (auto _ : state) {
    auto guard = m.try_lock();
    if (!guard) {
      state.SkipWithError("try_lock failed on a free mutex");
      break;
    }
  }
  escape(m);
}

template <class Mutex>
void mutex_try_lock_peer(benchmark::State& state) {
  Mutex m;
  for (auto _ : state) {
    if (!m.try_lock()) {
      state.SkipWithError("try_lock failed on a free mutex");
      break;
    }
    m.unlock();
  }
  escape(m);
}

// ---------------------------------------------------------------------------------------------
// semaphore/acquire_release: one permit of a semaphore holding one (a binary semaphore),
// returned at once. semaphore/acquire_release_spare: the same with kSparePermits permits, so the
// count never drops to 0. libstdc++'s counting_semaphore (GCC 12) makes a futex wake system call
// on every release that raises the count from 0, waiter or not: the first case measures that,
// the second its atomic fast path.

constexpr std::ptrdiff_t kSparePermits = 16;

inline_coroutine acquire_release_loop(benchmark::State& state, asyncband::semaphore& s) {
  for (auto _ : state) {
    auto permit = co_await s.acquire();
  }
}

template <std::ptrdiff_t Permits>
void semaphore_acquire_release_asyncband(benchmark::State& state) {
  asyncband::semaphore s(Permits);
  acquire_release_loop(state, s).check(state);
  escape(s);
}

void semaphore_acquire_release_blocking_asyncband(benchmark::State& state) {
  asyncband::semaphore s(1);
  for (auto _ : state) {
    auto permit = s.acquire_blocking();
  }
  escape(s);
}

template <std::ptrdiff_t Permits>
void semaphore_acquire_release_std(benchmark::State& state) {
  std::counting_semaphore<> s(Permits);
  for (auto _ : state) {
    s.acquire();
    s.release();
  }
  escape(s);
}

// ---------------------------------------------------------------------------------------------
// rwlock/read: uncontended read lock, read the value, unlock. rwlock/write: write lock,
// increment the value, unlock.

inline_coroutine read_loop(benchmark::State& state, asyncband::rwlock<std::uint64_t>& l) {
  for (auto _ : state) {
    auto guard = co_await l.read();
    benchmark::DoNotOptimize(*guard);
  }
}

void rwlock_read_asyncband(benchmark::State& state) {
  asyncband::rwlock<std::uint64_t> l(0);
  read_loop(state, l).check(state);
  escape(l);
}

inline_coroutine write_loop(benchmark::State& state, asyncband::rwlock<std::uint64_t>& l) {
  for (auto _ : state) {
    auto guard = co_await l.write();
    ++*guard;
  }
}

void rwlock_write_asyncband(benchmark::State& state) {
  asyncband::rwlock<std::uint64_t> l(0);
  write_loop(state, l).check(state);
  escape(l);
}

/// std::shared_mutex and tbb::rw_mutex alike.
template <class SharedMutex>
void rwlock_read_peer(benchmark::State& state) {
  SharedMutex l;
  std::uint64_t value = 0;
  for (auto _ : state) {
    l.lock_shared();
    benchmark::DoNotOptimize(value);
    l.unlock_shared();
  }
  escape(l);
}

template <class SharedMutex>
void rwlock_write_peer(benchmark::State& state) {
  SharedMutex l;
  std::uint64_t value = 0;
  for (auto _ : state) {
    l.lock();
    ++value;
    benchmark::DoNotOptimize(value);
    l.unlock();
  }
  escape(l);
}

// ---------------------------------------------------------------------------------------------
// mutex/contended_K: K workers, kIncrements locked increments each, one whole run per iteration.

constexpr int kIncrements = 100000;
constexpr int kPoolThreads = 2;

using asyncband::runtime::task;
using asyncband::runtime::thread_pool;
using seconds = std::chrono::duration<double>;

/// Common bookkeeping of a contended case: the counter check and the per-lock rates.
class contended_run {
 public:
  contended_run(benchmark::State& state, int workers)
      : state_(state),
        expected_(std::uint64_t{static_cast<unsigned>(workers)} * kIncrements),
        switches_before_(context_switches()) {}

  /// After each run: the counter must hold every increment.
  bool check(std::uint64_t counter) {
    if (counter == expected_) return true;
    state_.SkipWithError("final counter is not K * kIncrements");
    return false;
  }

  void finish() {
    const auto locks = static_cast<std::int64_t>(expected_) * state_.iterations();
    state_.SetItemsProcessed(locks);
    const long switches_after = context_switches();
    if (switches_before_ >= 0 && switches_after >= 0 && locks > 0) {
      state_.counters["csw/lock"] =
          static_cast<double>(switches_after - switches_before_) / static_cast<double>(locks);
    }
  }

 private:
  benchmark::State& state_;
  std::uint64_t expected_;
  long switches_before_;
};

/// A model of the coroutine peers' async mutex (cppcoro's `async_mutex` and libcoro's `mutex`
/// work this way; written here from that description, since neither is packaged in Debian).
/// One atomic word is "unlocked", "locked, nobody waits", or the newest of a stack of awaiters
/// that arrived while it was locked; the holder keeps the older ones privately, oldest first.
/// unlock() hands the lock to the oldest waiter and resumes it inline on the unlocking thread,
/// whatever its task type: no scheduler hook, no cancellation, no blocking twin.
class inline_handoff_mutex {
  static constexpr std::uintptr_t unlocked = 1;
  static constexpr std::uintptr_t locked_nobody_waits = 0;

 public:
  class awaiter {
   public:
    explicit awaiter(inline_handoff_mutex& m) noexcept : mutex_(m) {}
    bool await_ready() noexcept { return mutex_.try_lock(); }
    bool await_suspend(std::coroutine_handle<> h) noexcept {
      handle_ = h;
      std::uintptr_t old = mutex_.state_.load(std::memory_order_relaxed);
      for (;;) {
        if (old == unlocked) {
          if (mutex_.state_.compare_exchange_weak(old, locked_nobody_waits, std::memory_order_acquire,
                                                  std::memory_order_relaxed))
            return false;
          continue;
        }
        next_ = old == locked_nobody_waits ? nullptr : reinterpret_cast<awaiter*>(old);
        if (mutex_.state_.compare_exchange_weak(old, reinterpret_cast<std::uintptr_t>(this),
                                                std::memory_order_release, std::memory_order_relaxed))
          return true;
      }
    }
    void await_resume() const noexcept {}

   private:
    friend class inline_handoff_mutex;
    inline_handoff_mutex& mutex_;
    std::coroutine_handle<> handle_;
    awaiter* next_ = nullptr;
  };

  awaiter lock() noexcept { return awaiter(*this); }

  bool try_lock() noexcept {
    std::uintptr_t expected = unlocked;
    return state_.compare_exchange_strong(expected, locked_nobody_waits, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  void unlock() noexcept {
    if (oldest_ == nullptr) {
      std::uintptr_t expected = locked_nobody_waits;
      if (state_.compare_exchange_strong(expected, unlocked, std::memory_order_release,
                                         std::memory_order_relaxed))
        return;
      // Waiters arrived: take their stack (newest first) and keep it oldest first.
      auto* w = reinterpret_cast<awaiter*>(state_.exchange(locked_nobody_waits, std::memory_order_acquire));
      while (w != nullptr) oldest_ = std::exchange(w, std::exchange(w->next_, oldest_));
    }
    awaiter* next_holder = std::exchange(oldest_, oldest_->next_);
    next_holder->handle_.resume();  // the lock passes with it
  }

 private:
  std::atomic<std::uintptr_t> state_{unlocked};
  awaiter* oldest_ = nullptr;  // only the holder touches it
};

/// A model of the bounded barging that issue 16 asks for (Go's sync.Mutex, parking_lot), with
/// asyncband's rule that a waiter resumes on its own scheduler, never inline on the unlocker: it
/// measures what that design can reach before the semaphore gets it. One word holds `locked`,
/// `queued` (the FIFO is not empty) and `retrying` (a retry is in flight); a spin lock guards
/// the FIFO.
/// - Anybody whose lock finds `locked` clear takes it, queued waiters or not (barging).
/// - An unlock is one fetch_sub. If it finds waiters queued and no retry in flight, it posts
///   the head to its scheduler to try again (a "retry"); a retry that loses queues at the front.
/// - Every MaxPasses unlocks, the holder (which counts them in a field of its own, guarded by
///   the lock) hands the lock to the retry in flight, if any, instead of freeing it: the
///   barger's next lock then fails, and the barger queues and suspends, which lets the waiter
///   run (a pool posts a wake-up from a worker to that worker's next slot, which runs when the
///   worker's current coroutine suspends). A waiter is so passed at most MaxPasses times per
///   retry. (The library would look at its word before taking the list lock there: the model
///   takes it every MaxPasses unlocks, contended or not.)
/// The waiting loop (wait(), then retry() while it yields false) is the caller's here: in the
/// library it would be a small coroutine of its own in the waiter's node.
template <std::uint32_t MaxPasses>
class barging_model_mutex {
  static constexpr std::uint32_t locked = 1;
  static constexpr std::uint32_t queued = 2;
  static constexpr std::uint32_t retrying = 4;

 public:
  /// One acquisition's wait, in the waiting coroutine's frame.
  struct waiter {
    std::coroutine_handle<> handle;
    waiter* next = nullptr;
    std::atomic<bool> owns{false};  // set under the list lock; read by the waiter on resuming
  };

  class awaiter {
   public:
    awaiter(barging_model_mutex& m, waiter& w, bool retry) noexcept : mutex_(m), waiter_(w), retry_(retry) {}
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> h) noexcept {
      waiter_.handle = h;
      return mutex_.queue_unless_taken(waiter_, retry_);
    }
    [[nodiscard]] bool await_resume() const noexcept { return waiter_.owns.load(std::memory_order_acquire); }

   private:
    barging_model_mutex& mutex_;
    waiter& waiter_;
    bool retry_;
  };

  explicit barging_model_mutex(thread_pool& pool) noexcept : pool_(pool) {}

  bool try_lock() noexcept {
    std::uint32_t s = word_.load(std::memory_order_relaxed);  // contended, seldom 0: read it
    while ((s & locked) == 0) {
      if (word_.compare_exchange_weak(s, s | locked, std::memory_order_acquire, std::memory_order_relaxed))
        return true;
    }
    return false;
  }
  /// The first wait of an acquisition whose try_lock failed; yields whether it owns the lock.
  awaiter wait(waiter& w) noexcept { return {*this, w, false}; }
  /// After a wait that yielded false: the retry runs on the waiter's scheduler.
  awaiter retry(waiter& w) noexcept { return {*this, w, true}; }

  void unlock() noexcept {
    // Every MaxPasses unlocks the holder looks for a retry in flight, and hands it the lock if
    // there is one (it stays locked). passes_ is the holder's: the lock guards it.
    if (++passes_ >= MaxPasses) {
      passes_ = 0;
      if (grant_to_retry()) return;
    }
    const std::uint32_t old = word_.fetch_sub(locked, std::memory_order_release);
    if ((old & queued) != 0 && (old & retrying) == 0) post_retry();
  }

 private:
  /// Still holding the lock: hands it to the retry in flight, if any.
  bool grant_to_retry() noexcept {
    const std::lock_guard guard(list_lock_);
    if (in_flight_ == nullptr) return false;
    // Release: the waiter reads it on resuming, without the list lock (it was posted before).
    std::exchange(in_flight_, nullptr)->owns.store(true, std::memory_order_release);
    word_.fetch_and(~retrying, std::memory_order_relaxed);
    return true;
  }

  /// After an unlock that found waiters queued and no retry in flight: posts the head's retry.
  void post_retry() noexcept {
    std::coroutine_handle<> post;
    {
      const std::lock_guard guard(list_lock_);
      if (in_flight_ != nullptr) return;  // another unlock posted one meanwhile
      waiter* head = pop_front();
      if (head == nullptr) return;
      in_flight_ = head;
      word_.fetch_or(retrying, std::memory_order_relaxed);
      if (head_ == nullptr) word_.fetch_and(~queued, std::memory_order_relaxed);
      post = head->handle;
    }
    pool_.schedule(post);
  }

  /// Under the list lock: a retry ends its flight; a waiter given the lock meanwhile keeps it;
  /// else a last try with `queued` set (an unlock after it takes the slow path), else queue.
  bool queue_unless_taken(waiter& w, bool retry) noexcept {
    const std::lock_guard guard(list_lock_);
    if (retry && in_flight_ == &w) {
      in_flight_ = nullptr;
      word_.fetch_and(~retrying, std::memory_order_relaxed);
    }
    if (w.owns.load(std::memory_order_relaxed)) return false;
    std::uint32_t s = word_.fetch_or(queued, std::memory_order_relaxed) | queued;
    while ((s & locked) == 0) {
      if (word_.compare_exchange_weak(s, s | locked, std::memory_order_acquire, std::memory_order_relaxed)) {
        w.owns.store(true, std::memory_order_relaxed);
        if (head_ == nullptr) word_.fetch_and(~queued, std::memory_order_relaxed);
        return false;
      }
    }
    if (retry) {
      w.next = head_;
      head_ = &w;
      if (tail_ == nullptr) tail_ = &w;
    } else {
      w.next = nullptr;
      (tail_ != nullptr ? tail_->next : head_) = &w;
      tail_ = &w;
    }
    return true;
  }

  waiter* pop_front() noexcept {
    waiter* w = head_;
    if (w != nullptr) {
      head_ = w->next;
      if (head_ == nullptr) tail_ = nullptr;
    }
    return w;
  }

  std::atomic<std::uint32_t> word_{0};
  asyncband::detail::spin_lock list_lock_;
  waiter* head_ = nullptr;
  waiter* tail_ = nullptr;
  waiter* in_flight_ = nullptr;
  std::uint32_t passes_ = 0;  // the holder's
  thread_pool& pool_;
};

/// The longest single lock wait of a contended coroutine run, shared by its workers.
/// The lock waits of one worker coroutine, in log-linear buckets of nanoseconds: 8 per power of
/// two, so a bucket is at most 1/8 of its values wide and a percentile read from it is within
/// 12.5%. Each worker writes only its own (no shared cache line is added to the one measured);
/// the run merges them once the workers are done.
class alignas(64) wait_histogram {
 public:
  using clock = std::chrono::steady_clock;
  void record(clock::duration waited) noexcept {
    const auto ns = static_cast<std::uint64_t>(
        std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count()));
    ++counts_[bucket_of(ns)];
    ++total_;
    max_ns_ = std::max(max_ns_, ns);
  }
  void merge(const wait_histogram& other) noexcept {
    for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
    total_ += other.total_;
    max_ns_ = std::max(max_ns_, other.max_ns_);
  }
  /// The wait that a fraction `q` of all waits did not exceed, in microseconds: the upper end of
  /// the bucket that holds it.
  [[nodiscard]] double percentile_us(double q) const noexcept {
    const auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(total_)));
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank && seen != 0) return static_cast<double>(upper_end(i)) / 1000.0;
    }
    return 0.0;
  }
  [[nodiscard]] double max_us() const noexcept { return static_cast<double>(max_ns_) / 1000.0; }

 private:
  static constexpr unsigned sub_bits = 3;  // 8 buckets per power of two
  // Values below 16 have a bucket each; above, a bucket is (exponent, the next 3 bits).
  static std::size_t bucket_of(std::uint64_t ns) noexcept {
    if (ns < 16) return ns;
    const unsigned exponent = static_cast<unsigned>(std::bit_width(ns)) - 1;  // >= 4
    const std::uint64_t top = ns >> (exponent - sub_bits);                    // 8 .. 15
    return ((exponent - sub_bits + 1) << sub_bits) + (top - 8);
  }
  static std::uint64_t upper_end(std::size_t bucket) noexcept {
    if (bucket < 16) return bucket;
    const std::size_t exponent = (bucket >> sub_bits) + sub_bits - 1;
    const std::uint64_t top = 8 + (bucket & 7U);
    return ((top + 1) << (exponent - sub_bits)) - 1;
  }
  std::array<std::uint64_t, 64 << sub_bits> counts_{};
  std::uint64_t total_ = 0;
  std::uint64_t max_ns_ = 0;
};

/// One wait_histogram per worker of a run, kept across the benchmark's iterations.
class wait_record {
 public:
  explicit wait_record(int workers) : per_worker_(static_cast<std::size_t>(workers)) {}
  wait_histogram& worker(int i) noexcept { return per_worker_[static_cast<std::size_t>(i)]; }
  /// The counters of every wait recorded: median, 99th and 99.9th percentiles, and the longest.
  void report(benchmark::State& state) const {
    wait_histogram all;
    for (const auto& h : per_worker_) all.merge(h);
    state.counters["wait_p50_us"] = all.percentile_us(0.5);
    state.counters["wait_p99_us"] = all.percentile_us(0.99);
    state.counters["wait_p999_us"] = all.percentile_us(0.999);
    state.counters["worst_wait_us"] = all.max_us();
  }

 private:
  std::vector<wait_histogram> per_worker_;
};

template <bool Timed>
task<void> increment_on(thread_pool& pool, asyncband::mutex<std::uint64_t>& m, wait_histogram& waits) {
  co_await pool.schedule();
  for (int i = 0; i < kIncrements; ++i) {
    if constexpr (Timed) {
      const auto asked = wait_histogram::clock::now();
      auto guard = co_await m.lock();
      waits.record(wait_histogram::clock::now() - asked);
      ++*guard;
    } else {
      auto guard = co_await m.lock();
      ++*guard;
    }
  }
}

/// An rwlock's writers: each increment under `co_await rw.write()`, its wait recorded when
/// `Timed`.
template <bool Timed>
task<void> increment_on(thread_pool& pool, asyncband::rwlock<std::uint64_t>& rw, wait_histogram& waits) {
  co_await pool.schedule();
  for (int i = 0; i < kIncrements; ++i) {
    [[maybe_unused]] const auto asked =
        Timed ? wait_histogram::clock::now() : wait_histogram::clock::time_point{};
    auto guard = co_await rw.write();
    if constexpr (Timed) waits.record(wait_histogram::clock::now() - asked);
    ++*guard;
  }
}

/// An rwlock's readers and writers mixed: every kWriteEvery-th of the kIncrements locks is a
/// write that adds kWriteEvery, the others reads (so the counter ends at K * kIncrements).
constexpr int kWriteEvery = 8;
static_assert(kIncrements % kWriteEvery == 0);

template <bool Timed>
task<void> read_mostly_on(thread_pool& pool, asyncband::rwlock<std::uint64_t>& rw, wait_histogram& waits) {
  co_await pool.schedule();
  std::uint64_t seen = 0;
  for (int i = 0; i < kIncrements; ++i) {
    [[maybe_unused]] const auto asked =
        Timed ? wait_histogram::clock::now() : wait_histogram::clock::time_point{};
    if (i % kWriteEvery == 0) {
      auto guard = co_await rw.write();
      if constexpr (Timed) waits.record(wait_histogram::clock::now() - asked);
      *guard += kWriteEvery;
    } else {
      auto guard = co_await rw.read();
      if constexpr (Timed) waits.record(wait_histogram::clock::now() - asked);
      seen += *guard;
    }
  }
  benchmark::DoNotOptimize(seen);
}

template <bool Timed>
task<void> increment_on(thread_pool& pool, inline_handoff_mutex& m, std::uint64_t& counter,
                        wait_histogram& waits) {
  co_await pool.schedule();
  for (int i = 0; i < kIncrements; ++i) {
    if constexpr (Timed) {
      const auto asked = wait_histogram::clock::now();
      co_await m.lock();
      waits.record(wait_histogram::clock::now() - asked);
    } else {
      co_await m.lock();
    }
    ++counter;
    m.unlock();
  }
}

template <bool Timed, std::uint32_t MaxPasses>
task<void> increment_on(thread_pool& pool, barging_model_mutex<MaxPasses>& m, std::uint64_t& counter,
                        wait_histogram& waits) {
  co_await pool.schedule();
  for (int i = 0; i < kIncrements; ++i) {
    wait_histogram::clock::time_point asked{};
    if constexpr (Timed) asked = wait_histogram::clock::now();
    if (!m.try_lock()) {
      typename barging_model_mutex<MaxPasses>::waiter w;
      bool owns = co_await m.wait(w);
      while (!owns) owns = co_await m.retry(w);
    }
    if constexpr (Timed) waits.record(wait_histogram::clock::now() - asked);
    ++counter;
    m.unlock();
  }
}

/// K coroutines on the pool, one whole run per iteration: `one_run(pool, waits)` starts the K
/// workers of a run and returns them with a function that reads the final counter; every lock
/// is timed when `Timed`.
template <int K, bool Timed, class OneRun>
void mutex_contended_coroutines(benchmark::State& state, OneRun one_run) {
  thread_pool pool(kPoolThreads);
  contended_run run(state, K);
  wait_record waits(K);
  for (auto _ : state) {
    auto [workers, final_count] = one_run(pool, waits);
    const auto start = std::chrono::steady_clock::now();
    asyncband::block_on(asyncband::runtime::when_all(std::move(workers)));
    state.SetIterationTime(seconds(std::chrono::steady_clock::now() - start).count());
    if (!run.check(final_count())) break;
  }
  run.finish();
  if constexpr (Timed) waits.report(state);
}

/// ... under the asyncband::mutex (`Fifo`: built with asyncband::strict_fifo).
template <int K, bool Timed = false, bool Fifo = false>
void mutex_contended_asyncband(benchmark::State& state) {
  mutex_contended_coroutines<K, Timed>(state, [](thread_pool& pool, wait_record& waits) {
    auto m = Fifo ? std::make_unique<asyncband::mutex<std::uint64_t>>(asyncband::strict_fifo, 0)
                  : std::make_unique<asyncband::mutex<std::uint64_t>>(0);
    std::vector<task<void>> workers;
    for (int i = 0; i < K; ++i) workers.push_back(increment_on<Timed>(pool, *m, waits.worker(i)));
    return std::pair(std::move(workers), [m = std::move(m)] {
      const auto guard = m->try_lock();
      return guard ? **guard : 0;
    });
  });
}

/// ... as writers of an asyncband::rwlock (`Fifo`: built with asyncband::strict_fifo), or
/// (`Mixed`) as its readers and writers, one lock in kWriteEvery a write; every lock timed when
/// `Timed`.
template <int K, bool Fifo = false, bool Mixed = false, bool Timed = false>
void rwlock_write_contended_asyncband(benchmark::State& state) {
  mutex_contended_coroutines<K, Timed>(state, [](thread_pool& pool, wait_record& waits) {
    auto rw = Fifo ? std::make_unique<asyncband::rwlock<std::uint64_t>>(asyncband::strict_fifo, 0)
                   : std::make_unique<asyncband::rwlock<std::uint64_t>>(0);
    std::vector<task<void>> workers;
    for (int i = 0; i < K; ++i)
      workers.push_back(Mixed ? read_mostly_on<Timed>(pool, *rw, waits.worker(i))
                              : increment_on<Timed>(pool, *rw, waits.worker(i)));
    return std::pair(std::move(workers), [rw = std::move(rw)] {
      const auto guard = rw->try_read();
      return guard ? **guard : 0;
    });
  });
}

/// One permit of a semaphore as the lock: each increment under `co_await s.acquire()`.
task<void> increment_on(thread_pool& pool, asyncband::semaphore& s, std::uint64_t& counter) {
  co_await pool.schedule();
  for (int i = 0; i < kIncrements; ++i) {
    const auto permit = co_await s.acquire();
    ++counter;
  }
}

/// ... under one permit of an asyncband::semaphore (`Fifo`: built with asyncband::strict_fifo).
template <int K, bool Fifo = false>
void semaphore_contended_asyncband(benchmark::State& state) {
  mutex_contended_coroutines<K, false>(state, [](thread_pool& pool, wait_record& /*unused*/) {
    struct shared {
      shared() : s(Fifo ? asyncband::semaphore(asyncband::strict_fifo, 1) : asyncband::semaphore(1)) {}
      asyncband::semaphore s;
      std::uint64_t counter = 0;
    };
    auto sh = std::make_unique<shared>();
    std::vector<task<void>> workers;
    for (int i = 0; i < K; ++i) workers.push_back(increment_on(pool, sh->s, sh->counter));
    return std::pair(std::move(workers), [sh = std::move(sh)] { return sh->counter; });
  });
}

/// ... under inline_handoff_mutex.
template <int K, bool Timed = false>
void mutex_contended_model(benchmark::State& state) {
  mutex_contended_coroutines<K, Timed>(state, [](thread_pool& pool, wait_record& waits) {
    struct shared {
      inline_handoff_mutex m;
      std::uint64_t counter = 0;
    };
    auto s = std::make_unique<shared>();
    std::vector<task<void>> workers;
    for (int i = 0; i < K; ++i)
      workers.push_back(increment_on<Timed>(pool, s->m, s->counter, waits.worker(i)));
    return std::pair(std::move(workers), [s = std::move(s)] { return s->counter; });
  });
}

/// ... under barging_model_mutex, a waiter passed at most MaxPasses times.
template <int K, std::uint32_t MaxPasses, bool Timed = false>
void mutex_contended_barging_model(benchmark::State& state) {
  mutex_contended_coroutines<K, Timed>(state, [](thread_pool& pool, wait_record& waits) {
    struct shared {
      explicit shared(thread_pool& p) : m(p) {}
      barging_model_mutex<MaxPasses> m;
      std::uint64_t counter = 0;
    };
    auto s = std::make_unique<shared>(pool);
    std::vector<task<void>> workers;
    for (int i = 0; i < K; ++i)
      workers.push_back(increment_on<Timed, MaxPasses>(pool, s->m, s->counter, waits.worker(i)));
    return std::pair(std::move(workers), [s = std::move(s)] { return s->counter; });
  });
}

/// asyncband::mutex<> as a BasicLockable for plain threads: lock() is lock_blocking(), whose
/// guard is kept in the lockable (only the holder touches it) until unlock().
class blocking_asyncband_mutex {
 public:
  void lock() { held_.emplace(m_.lock_blocking()); }
  void unlock() noexcept { held_.reset(); }

 private:
  asyncband::mutex<> m_;
  std::optional<asyncband::mutex_guard<std::monostate>> held_;
};

/// An asyncband::rwlock's write_blocking() as a Lockable, for the writers' thread case.
class blocking_asyncband_writer {
 public:
  void lock() { held_.emplace(rw_.write_blocking()); }
  void unlock() noexcept { held_.reset(); }

 private:
  asyncband::rwlock<std::monostate> rw_;
  std::optional<asyncband::rwlock_write_guard<std::monostate>> held_;
};

/// An asyncband::semaphore of one permit (strict FIFO) as a Lockable, against
/// std::binary_semaphore used the same way.
class blocking_asyncband_semaphore {
 public:
  void lock() { held_.emplace(s_.acquire_blocking(1)); }
  void unlock() noexcept { held_.reset(); }

 private:
  asyncband::semaphore s_{1};
  std::optional<asyncband::semaphore_permit> held_;
};

/// std::binary_semaphore as a Lockable.
class std_binary_semaphore_lock {
 public:
  void lock() { s_.acquire(); }
  void unlock() noexcept { s_.release(); }

 private:
  std::binary_semaphore s_{1};
};

/// K std::threads, each incrementing under `Mutex` (std::mutex, tbb::mutex, tbb::spin_mutex).
/// The threads are created before the timer starts and released together by a latch.
template <int K, class Mutex>
void mutex_contended_threads(benchmark::State& state) {
  contended_run run(state, K);
  for (auto _ : state) {
    Mutex m;
    std::uint64_t counter = 0;
    std::latch go(1);
    std::vector<std::thread> threads;
    threads.reserve(K);
    for (int i = 0; i < K; ++i) {
      threads.emplace_back([&] {
        go.wait();
        for (int n = 0; n < kIncrements; ++n) {
          const std::lock_guard lock(m);
          ++counter;
        }
      });
    }
    const auto start = std::chrono::steady_clock::now();
    go.count_down();
    for (auto& t : threads) t.join();
    state.SetIterationTime(seconds(std::chrono::steady_clock::now() - start).count());
    if (!run.check(counter)) break;
  }
  run.finish();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Registration, grouped by family/case.

BENCHMARK(mutex_lock_unlock_asyncband)->Name("mutex/lock_unlock/asyncband");
BENCHMARK(mutex_lock_unlock_peer<std::mutex>)->Name("mutex/lock_unlock/std");
BENCHMARK(mutex_lock_unlock_peer<tbb::mutex>)->Name("mutex/lock_unlock/tbb");
BENCHMARK(mutex_lock_unlock_asyncband)->Name("mutex/lock_unlock_in_coroutine/asyncband");
BENCHMARK(mutex_lock_unlock_in_coroutine_peer<std::mutex>)->Name("mutex/lock_unlock_in_coroutine/std");
BENCHMARK(mutex_lock_unlock_in_coroutine_peer<tbb::mutex>)->Name("mutex/lock_unlock_in_coroutine/tbb");
BENCHMARK(mutex_lock_unlock_blocking_asyncband)->Name("mutex/lock_unlock_blocking/asyncband");
BENCHMARK(mutex_lock_unlock_peer<std::mutex>)->Name("mutex/lock_unlock_blocking/std");
BENCHMARK(mutex_lock_unlock_peer<tbb::mutex>)->Name("mutex/lock_unlock_blocking/tbb");
BENCHMARK(mutex_try_lock_asyncband)->Name("mutex/try_lock/asyncband");
BENCHMARK(mutex_try_lock_peer<std::mutex>)->Name("mutex/try_lock/std");
BENCHMARK(mutex_try_lock_peer<tbb::mutex>)->Name("mutex/try_lock/tbb");

BENCHMARK(mutex_contended_asyncband<2>)->Name("mutex/contended_2/asyncband")->UseManualTime();
BENCHMARK(mutex_contended_asyncband<2, false, true>)
    ->Name("mutex/contended_2/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<2, std::mutex>)->Name("mutex/contended_2/std")->UseManualTime();
BENCHMARK(mutex_contended_threads<2, blocking_asyncband_mutex>)
    ->Name("mutex/contended_threads_2/asyncband")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<2, std::mutex>)->Name("mutex/contended_threads_2/std")->UseManualTime();
BENCHMARK(mutex_contended_threads<2, tbb::mutex>)->Name("mutex/contended_2/tbb")->UseManualTime();
BENCHMARK(mutex_contended_threads<2, tbb::spin_mutex>)->Name("mutex/contended_2/tbb_spin")->UseManualTime();
BENCHMARK(mutex_contended_model<2>)->Name("mutex/contended_2/cppcoro_model")->UseManualTime();
BENCHMARK(mutex_contended_barging_model<2, 100>)->Name("mutex/contended_2/barging_model")->UseManualTime();
BENCHMARK(mutex_contended_asyncband<4>)->Name("mutex/contended_4/asyncband")->UseManualTime();
BENCHMARK(mutex_contended_asyncband<4, false, true>)
    ->Name("mutex/contended_4/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<4, std::mutex>)->Name("mutex/contended_4/std")->UseManualTime();
BENCHMARK(mutex_contended_threads<4, blocking_asyncband_mutex>)
    ->Name("mutex/contended_threads_4/asyncband")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<4, std::mutex>)->Name("mutex/contended_threads_4/std")->UseManualTime();
BENCHMARK(mutex_contended_threads<4, tbb::mutex>)->Name("mutex/contended_4/tbb")->UseManualTime();
BENCHMARK(mutex_contended_threads<4, tbb::spin_mutex>)->Name("mutex/contended_4/tbb_spin")->UseManualTime();
BENCHMARK(mutex_contended_model<4>)->Name("mutex/contended_4/cppcoro_model")->UseManualTime();
BENCHMARK(mutex_contended_barging_model<4, 100>)->Name("mutex/contended_4/barging_model")->UseManualTime();
BENCHMARK(mutex_contended_asyncband<8>)->Name("mutex/contended_8/asyncband")->UseManualTime();
BENCHMARK(mutex_contended_asyncband<8, false, true>)
    ->Name("mutex/contended_8/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<8, std::mutex>)->Name("mutex/contended_8/std")->UseManualTime();
BENCHMARK(mutex_contended_threads<8, blocking_asyncband_mutex>)
    ->Name("mutex/contended_threads_8/asyncband")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<8, std::mutex>)->Name("mutex/contended_threads_8/std")->UseManualTime();
BENCHMARK(mutex_contended_threads<8, tbb::mutex>)->Name("mutex/contended_8/tbb")->UseManualTime();
BENCHMARK(mutex_contended_threads<8, tbb::spin_mutex>)->Name("mutex/contended_8/tbb_spin")->UseManualTime();
BENCHMARK(mutex_contended_model<8>)->Name("mutex/contended_8/cppcoro_model")->UseManualTime();
BENCHMARK(mutex_contended_barging_model<8, 100>)->Name("mutex/contended_8/barging_model")->UseManualTime();

BENCHMARK(mutex_contended_asyncband<2, true>)->Name("mutex/worst_wait_2/asyncband")->UseManualTime();
BENCHMARK(mutex_contended_asyncband<2, true, true>)
    ->Name("mutex/worst_wait_2/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_model<2, true>)->Name("mutex/worst_wait_2/cppcoro_model")->UseManualTime();
BENCHMARK(mutex_contended_barging_model<2, 100, true>)
    ->Name("mutex/worst_wait_2/barging_model")
    ->UseManualTime();
BENCHMARK(mutex_contended_asyncband<4, true>)->Name("mutex/worst_wait_4/asyncband")->UseManualTime();
BENCHMARK(mutex_contended_asyncband<4, true, true>)
    ->Name("mutex/worst_wait_4/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_model<4, true>)->Name("mutex/worst_wait_4/cppcoro_model")->UseManualTime();
BENCHMARK(mutex_contended_barging_model<4, 100, true>)
    ->Name("mutex/worst_wait_4/barging_model")
    ->UseManualTime();
BENCHMARK(mutex_contended_asyncband<8, true>)->Name("mutex/worst_wait_8/asyncband")->UseManualTime();
BENCHMARK(mutex_contended_asyncband<8, true, true>)
    ->Name("mutex/worst_wait_8/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_model<8, true>)->Name("mutex/worst_wait_8/cppcoro_model")->UseManualTime();
BENCHMARK(mutex_contended_barging_model<8, 100, true>)
    ->Name("mutex/worst_wait_8/barging_model")
    ->UseManualTime();

BENCHMARK(mutex_contended_threads<2, blocking_asyncband_writer>)
    ->Name("rwlock/write_contended_threads_2/asyncband")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<2, std::shared_mutex>)
    ->Name("rwlock/write_contended_threads_2/std")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<2, tbb::rw_mutex>)
    ->Name("rwlock/write_contended_threads_2/tbb")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<2, blocking_asyncband_semaphore>)
    ->Name("semaphore/contended_threads_2/asyncband")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<2, std_binary_semaphore_lock>)
    ->Name("semaphore/contended_threads_2/std")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<4, blocking_asyncband_writer>)
    ->Name("rwlock/write_contended_threads_4/asyncband")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<4, std::shared_mutex>)
    ->Name("rwlock/write_contended_threads_4/std")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<4, tbb::rw_mutex>)
    ->Name("rwlock/write_contended_threads_4/tbb")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<4, blocking_asyncband_semaphore>)
    ->Name("semaphore/contended_threads_4/asyncband")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<4, std_binary_semaphore_lock>)
    ->Name("semaphore/contended_threads_4/std")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<8, blocking_asyncband_writer>)
    ->Name("rwlock/write_contended_threads_8/asyncband")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<8, std::shared_mutex>)
    ->Name("rwlock/write_contended_threads_8/std")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<8, tbb::rw_mutex>)
    ->Name("rwlock/write_contended_threads_8/tbb")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<8, blocking_asyncband_semaphore>)
    ->Name("semaphore/contended_threads_8/asyncband")
    ->UseManualTime();
BENCHMARK(mutex_contended_threads<8, std_binary_semaphore_lock>)
    ->Name("semaphore/contended_threads_8/std")
    ->UseManualTime();
BENCHMARK(semaphore_contended_asyncband<2>)->Name("semaphore/contended_2/asyncband")->UseManualTime();
BENCHMARK(semaphore_contended_asyncband<2, true>)
    ->Name("semaphore/contended_2/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_model<2>)->Name("semaphore/contended_2/cppcoro_model")->UseManualTime();
BENCHMARK(semaphore_contended_asyncband<4>)->Name("semaphore/contended_4/asyncband")->UseManualTime();
BENCHMARK(semaphore_contended_asyncband<4, true>)
    ->Name("semaphore/contended_4/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_model<4>)->Name("semaphore/contended_4/cppcoro_model")->UseManualTime();
BENCHMARK(semaphore_contended_asyncband<8>)->Name("semaphore/contended_8/asyncband")->UseManualTime();
BENCHMARK(semaphore_contended_asyncband<8, true>)
    ->Name("semaphore/contended_8/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_model<8>)->Name("semaphore/contended_8/cppcoro_model")->UseManualTime();

BENCHMARK(rwlock_write_contended_asyncband<2>)->Name("rwlock/write_contended_2/asyncband")->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<2, true>)
    ->Name("rwlock/write_contended_2/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_asyncband<2>)->Name("rwlock/write_contended_2/asyncband_mutex")->UseManualTime();
BENCHMARK(mutex_contended_model<2>)->Name("rwlock/write_contended_2/cppcoro_model")->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<4>)->Name("rwlock/write_contended_4/asyncband")->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<4, true>)
    ->Name("rwlock/write_contended_4/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_asyncband<4>)->Name("rwlock/write_contended_4/asyncband_mutex")->UseManualTime();
BENCHMARK(mutex_contended_model<4>)->Name("rwlock/write_contended_4/cppcoro_model")->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<8>)->Name("rwlock/write_contended_8/asyncband")->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<8, true>)
    ->Name("rwlock/write_contended_8/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_asyncband<8>)->Name("rwlock/write_contended_8/asyncband_mutex")->UseManualTime();
BENCHMARK(mutex_contended_model<8>)->Name("rwlock/write_contended_8/cppcoro_model")->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<4, false, true>)
    ->Name("rwlock/read_mostly_4/asyncband")
    ->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<4, true, true>)
    ->Name("rwlock/read_mostly_4/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<8, false, true>)
    ->Name("rwlock/read_mostly_8/asyncband")
    ->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<8, true, true>)
    ->Name("rwlock/read_mostly_8/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<2, false, false, true>)
    ->Name("rwlock/worst_wait_2/asyncband")
    ->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<2, true, false, true>)
    ->Name("rwlock/worst_wait_2/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_model<2, true>)->Name("rwlock/worst_wait_2/cppcoro_model")->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<4, false, false, true>)
    ->Name("rwlock/worst_wait_4/asyncband")
    ->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<4, true, false, true>)
    ->Name("rwlock/worst_wait_4/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_model<4, true>)->Name("rwlock/worst_wait_4/cppcoro_model")->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<8, false, false, true>)
    ->Name("rwlock/worst_wait_8/asyncband")
    ->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<8, true, false, true>)
    ->Name("rwlock/worst_wait_8/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(mutex_contended_model<8, true>)->Name("rwlock/worst_wait_8/cppcoro_model")->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<4, false, true, true>)
    ->Name("rwlock/read_mostly_worst_wait_4/asyncband")
    ->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<4, true, true, true>)
    ->Name("rwlock/read_mostly_worst_wait_4/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<8, false, true, true>)
    ->Name("rwlock/read_mostly_worst_wait_8/asyncband")
    ->UseManualTime();
BENCHMARK(rwlock_write_contended_asyncband<8, true, true, true>)
    ->Name("rwlock/read_mostly_worst_wait_8/asyncband_fifo")
    ->UseManualTime();
BENCHMARK(semaphore_acquire_release_asyncband<1>)->Name("semaphore/acquire_release/asyncband");
BENCHMARK(semaphore_acquire_release_std<1>)->Name("semaphore/acquire_release/std");
BENCHMARK(semaphore_acquire_release_blocking_asyncband)->Name("semaphore/acquire_release_blocking/asyncband");
BENCHMARK(semaphore_acquire_release_std<1>)->Name("semaphore/acquire_release_blocking/std");
BENCHMARK(semaphore_acquire_release_asyncband<kSparePermits>)
    ->Name("semaphore/acquire_release_spare/asyncband");
BENCHMARK(semaphore_acquire_release_std<kSparePermits>)->Name("semaphore/acquire_release_spare/std");

BENCHMARK(rwlock_read_asyncband)->Name("rwlock/read/asyncband");
BENCHMARK(rwlock_read_peer<std::shared_mutex>)->Name("rwlock/read/std");
BENCHMARK(rwlock_read_peer<tbb::rw_mutex>)->Name("rwlock/read/tbb");
BENCHMARK(rwlock_write_asyncband)->Name("rwlock/write/asyncband");
BENCHMARK(rwlock_write_peer<std::shared_mutex>)->Name("rwlock/write/std");
BENCHMARK(rwlock_write_peer<tbb::rw_mutex>)->Name("rwlock/write/tbb");

int main(int argc, char** argv) {
  return asyncband_bench::run_benchmarks(argc, argv);
}
