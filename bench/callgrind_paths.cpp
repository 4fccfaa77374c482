// SPDX-License-Identifier: Apache-2.0
// bench/callgrind_paths.cpp: the uncontended paths of the primitives, run for callgrind to count
// their instructions (`./x callgrind`; issue 16 keeps the counts in docs/design.md as the
// noise-free record beside the timings of `./x bench`).
//
// Not a Google Benchmark executable: each path runs a fixed number of operations, so that the
// instruction count per operation is the path's total over that number. For each path, in one
// process run under `valgrind --tool=callgrind --collect-atstart=no`:
//   1. kWarmup operations with collection off (lazy symbol binding, first allocations, caches);
//   2. CALLGRIND_ZERO_STATS, collection on, `iterations` operations, collection off;
//   3. CALLGRIND_DUMP_STATS_AT(name): one dump file per path, its trigger naming the path.
// stdout lists `name<TAB>iterations` for each path, in the order of the dumps, for
// scripts/callgrind_table.py. Outside valgrind the client requests do nothing, and the program
// only checks that every path behaves as expected (a wait that suspends fails it).
//
// Names are `family/case/impl` as in the benchmarks (bench_locks, bench_countdown,
// bench_channels, bench_phaser); impl is `asyncband`, a peer (`std`, `std_barrier`,
// `moodycamel`: BlockingConcurrentQueue, the benchmarks' peer; `moodycamel_nonblocking`: the
// plain ConcurrentQueue under it), or `baseline` (the loop alone). Peers are registered under
// every case they compare with, as in the benchmarks. A count includes the loop's own
// instructions, which the two `loop/*/baseline` paths show (a loop inside a coroutine keeps its
// counter in the frame).
//
// The process starts a second thread and keeps it parked for the whole run: glibc skips the
// atomics of std::mutex (and more) in a process that has never had one, which no program that
// needs a lock is. Collection is per thread and only ever switched on by this one.
//
//   callgrind_paths [ITERATIONS]     (default 1000)
#include <asyncband/asyncband.hpp>

#include <atomic>
#include <barrier>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include <blockingconcurrentqueue.h>
#include <concurrentqueue.h>
#include <valgrind/callgrind.h>

#include "eager_coroutine.hpp"

namespace {

/// Operations run before collection starts.
constexpr std::size_t kWarmup = 100;
/// The bounded channel's capacity (the benchmarks' channel/try_pair).
constexpr std::size_t kCapacity = 64;

/// Ends the program: a path did not take the uncontended route it is meant to measure.
[[noreturn]] void fail(const char* path, const char* what) {
  std::fprintf(stderr, "callgrind_paths: %s: %s\n", path, what);
  std::exit(1);
}

/// Keeps `value` (and what it points to) observable, so the optimiser keeps what computed it.
template <class T>
void keep(const T& value) {
  __asm__ __volatile__("" : : "r"(&value) : "memory");
}

/// A step the optimiser can neither remove nor merge, and which is no instruction: the body of
/// the empty loop.
void opaque_step() {
  __asm__ __volatile__("");
}

// ---------------------------------------------------------------------------------------------
// One path's run: `for (auto _ : run)` runs kWarmup rounds with collection off, then
// `iterations` rounds with collection on, then dumps the counts under the path's name.

class path_run {
 public:
  /// What the loop variable holds: nothing (a loop that never reads it is not "set but unused").
  struct [[maybe_unused]] round {};
  struct sentinel {};

  /// Counts down the rounds of the current stage; moves to the next stage at zero.
  class iterator {
   public:
    iterator(path_run& run, std::size_t left) noexcept : run_(&run), left_(left) {}
    bool operator!=(sentinel /*end*/) {
      if (left_ == 0) left_ = run_->next_stage();
      return left_ != 0;
    }
    iterator& operator++() noexcept {
      --left_;
      return *this;
    }
    round operator*() const noexcept { return {}; }

   private:
    path_run* run_;
    std::size_t left_;  // a copy of the count, so that it can live in a register
  };

  path_run(const char* name, std::size_t iterations) noexcept : name_(name), iterations_(iterations) {}
  path_run(const path_run&) = delete;
  path_run& operator=(const path_run&) = delete;
  ~path_run() {
    if (stage_ != stage::done) fail(name_, "the loop ended early");
  }

  iterator begin() noexcept { return {*this, kWarmup}; }
  static sentinel end() noexcept { return {}; }
  [[nodiscard]] const char* name() const noexcept { return name_; }

 private:
  enum class stage { warm_up, measured, done };

  /// The rounds of the next stage (0: the run is over). After the warm-up: zero the counts and
  /// collect for `iterations` rounds. After those: stop collecting and dump. Out of line, so that
  /// the loop's code is the same in both stages; it returns the count rather than writing the
  /// iterator's, whose address would otherwise escape and keep it out of a register.
  [[gnu::noinline]] std::size_t next_stage() noexcept {
    if (stage_ == stage::warm_up) {
      stage_ = stage::measured;
      CALLGRIND_ZERO_STATS;
      CALLGRIND_TOGGLE_COLLECT;
      return iterations_;
    }
    CALLGRIND_TOGGLE_COLLECT;
    CALLGRIND_DUMP_STATS_AT(name_);
    stage_ = stage::done;
    std::printf("%s\t%zu\n", name_, iterations_);
    return 0;
  }

  const char* name_;
  std::size_t iterations_;
  stage stage_ = stage::warm_up;
};

/// The awaited paths' loop runs inside an eager coroutine (bench/eager_coroutine.hpp); a wait
/// that suspends is never resumed, so the coroutine is then not done: checked by finish().
class eager_loop : public asyncband_bench::eager_coroutine {
 public:
  eager_loop(eager_coroutine&& c) noexcept
      : eager_coroutine(std::move(c)) {}  // NOLINT(google-explicit-constructor)

  /// The loop must have run to its end without suspending.
  void finish(const char* path) const {
    if (!done()) fail(path, "an uncontended wait suspended");
  }
};

/// A second thread, parked until destruction (see the file's comment).
class parked_thread {
 public:
  parked_thread() : thread_([this] { release_.wait(false, std::memory_order_acquire); }) {}
  parked_thread(const parked_thread&) = delete;
  parked_thread& operator=(const parked_thread&) = delete;
  ~parked_thread() {
    release_.store(true, std::memory_order_release);
    release_.notify_one();
    thread_.join();
  }

 private:
  std::atomic<bool> release_{false};
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------
// The loop alone.

void empty_loop(std::size_t iterations) {
  path_run run("loop/empty/baseline", iterations);
  for (auto _ : run) opaque_step();
}

eager_loop empty_loop_in_coroutine(path_run& run) {
  for (auto _ : run) co_await std::suspend_never{};
}

// ---------------------------------------------------------------------------------------------
// mutex, semaphore, rwlock

void mutex_try_lock(std::size_t iterations) {
  asyncband::mutex<> m;
  path_run run("mutex/try_lock/asyncband", iterations);
  for (auto _ : run) {
    if (!m.try_lock()) fail(run.name(), "try_lock failed on a free mutex");
  }
}

void std_mutex_try_lock(std::size_t iterations) {
  std::mutex m;
  path_run run("mutex/try_lock/std", iterations);
  for (auto _ : run) {
    if (!m.try_lock()) fail(run.name(), "try_lock failed on a free mutex");
    m.unlock();
  }
}

eager_loop mutex_lock_unlock(path_run& run, asyncband::mutex<>& m) {
  for (auto _ : run) {
    auto guard = co_await m.lock();
  }
}

void mutex_lock_unlock_blocking(std::size_t iterations) {
  asyncband::mutex<> m;
  path_run run("mutex/lock_unlock_blocking/asyncband", iterations);
  for (auto _ : run) {
    auto guard = m.lock_blocking();
  }
}

/// std::mutex lock + unlock, the peer of both the awaited and the blocking form.
void std_mutex_lock_unlock(const char* name, std::size_t iterations) {
  std::mutex m;
  path_run run(name, iterations);
  for (auto _ : run) {
    m.lock();
    m.unlock();
  }
  keep(m);
}

void semaphore_try_acquire(std::size_t iterations) {
  asyncband::semaphore s(1);
  path_run run("semaphore/try_acquire/asyncband", iterations);
  for (auto _ : run) {
    if (!s.try_acquire()) fail(run.name(), "try_acquire failed with a permit free");
  }
}

eager_loop semaphore_acquire(path_run& run, asyncband::semaphore& s) {
  for (auto _ : run) {
    auto permit = co_await s.acquire();
  }
}

eager_loop rwlock_read(path_run& run, asyncband::rwlock<std::uint64_t>& l) {
  for (auto _ : run) {
    auto guard = co_await l.read();
    keep(*guard);
  }
}

eager_loop rwlock_write(path_run& run, asyncband::rwlock<std::uint64_t>& l) {
  for (auto _ : run) {
    auto guard = co_await l.write();
    ++*guard;
  }
}

// ---------------------------------------------------------------------------------------------
// events, latch, barrier, phaser

eager_loop event_set_await_reset(path_run& run, asyncband::manual_reset_event& ev) {
  for (auto _ : run) {
    ev.set();
    co_await ev.wait();
    ev.reset();
  }
}

eager_loop event_notify_await(path_run& run, asyncband::auto_reset_event& ev) {
  for (auto _ : run) {
    ev.notify_one();
    co_await ev.wait();
  }
}

/// A latch of 1 per round (it is single-use): construct, count_down, wait (ready).
void latch_count_down_wait(std::size_t iterations) {
  path_run run("latch/count_down_wait/asyncband", iterations);
  for (auto _ : run) {
    asyncband::latch latch(1);
    latch.count_down();
    latch.wait_blocking();
    keep(latch);
  }
}

eager_loop latch_count_down_await(path_run& run) {
  for (auto _ : run) {
    asyncband::latch latch(1);
    latch.count_down();
    co_await latch.wait();
    keep(latch);
  }
}

/// One participant: every wait completes its generation.
void barrier_single(std::size_t iterations) {
  asyncband::barrier barrier(1);
  path_run run("barrier/single/asyncband", iterations);
  for (auto _ : run) {
    auto r = barrier.wait_blocking();
    keep(r);
  }
}

eager_loop barrier_single_await(path_run& run, asyncband::barrier& barrier) {
  for (auto _ : run) {
    auto r = co_await barrier.wait();
    keep(r);
  }
}

/// std::barrier<>(1).arrive_and_wait(): the peer of both barrier forms.
void std_barrier_single(const char* name, std::size_t iterations) {
  std::barrier<> barrier(1);
  path_run run(name, iterations);
  for (auto _ : run) barrier.arrive_and_wait();
  keep(barrier);
}

/// One participant: every arrive() completes a phase.
void phaser_arrive(std::size_t iterations) {
  auto ph = asyncband::phaser::create();
  asyncband::phaser_participant me = ph->enroll().value();
  path_run run("phaser/arrive/asyncband", iterations);
  for (auto _ : run) {
    auto r = me.arrive();
    keep(r);
  }
  if (ph->phase() != asyncband::phase_id(kWarmup + iterations))
    fail(run.name(), "an arrive() did not advance");
}

/// Two participants, one arriving again and again in the same phase (counted once).
void phaser_arrive_no_advance(std::size_t iterations) {
  auto ph = asyncband::phaser::create();
  asyncband::phaser_batch both = ph->enroll(2).value();
  asyncband::phaser_participant me = *both.take();
  asyncband::phaser_participant other = *both.take();
  path_run run("phaser/arrive_no_advance/asyncband", iterations);
  for (auto _ : run) {
    auto r = me.arrive();
    keep(r);
  }
  if (ph->phase() != asyncband::phase_id(0)) fail(run.name(), "a repeated arrive() advanced");
  keep(other);
}

void std_barrier_arrive(std::size_t iterations) {
  std::barrier<> barrier(1);
  path_run run("phaser/arrive/std_barrier", iterations);
  for (auto _ : run) (void)barrier.arrive();
  keep(barrier);
}

// ---------------------------------------------------------------------------------------------
// channels

/// One send (`send(tx, value)`) and one try_recv per round, on a channel that never fills.
template <class Sender, class Receiver, class Send>
void send_recv_rounds(path_run& run, Sender& tx, Receiver& rx, Send send) {
  int i = 0;
  for (auto _ : run) {
    auto sent = send(tx, i++);
    auto got = rx.try_recv();
    if (!sent || !got) fail(run.name(), "a send or try_recv failed on a channel that never fills");
    keep(*got);
  }
}

void bounded_try_pair(std::size_t iterations) {
  auto [tx, rx] = asyncband::mpsc::bounded<int>(kCapacity);
  path_run run("channel/try_pair/asyncband", iterations);
  send_recv_rounds(run, tx, rx, [](auto& sender, int v) { return sender.try_send(v); });
}

void unbounded_pair(std::size_t iterations) {
  auto [tx, rx] = asyncband::mpsc::unbounded<int>();
  path_run run("channel/unbounded_pair/asyncband", iterations);
  send_recv_rounds(run, tx, rx, [](auto& sender, int v) { return sender.send(v); });
}

/// try_enqueue + try_dequeue with a producer and a consumer token, on moodycamel's
/// ConcurrentQueue or BlockingConcurrentQueue (the same with a semaphore counting the items).
template <class Queue>
void moodycamel_pair(const char* name, std::size_t iterations) {
  Queue queue(kCapacity);
  moodycamel::ProducerToken producer(queue);
  moodycamel::ConsumerToken consumer(queue);
  path_run run(name, iterations);
  int i = 0;
  for (auto _ : run) {
    int v = 0;
    if (!queue.try_enqueue(producer, i++) || !queue.try_dequeue(consumer, v))
      fail(run.name(), "try_enqueue or try_dequeue failed");
    keep(v);
  }
}

/// A channel per round (it is single-use): create (one allocation), send, receive (ready).
eager_loop oneshot_send_recv(path_run& run) {
  int i = 0;
  for (auto _ : run) {
    auto [tx, rx] = asyncband::oneshot::channel<int>();
    if (!tx.send(i++)) fail(run.name(), "send failed with the receiver there");
    auto got = co_await rx.recv();
    if (!got) fail(run.name(), "recv found no value");
    keep(*got);
  }
}

// ---------------------------------------------------------------------------------------------

/// Runs an awaited path: `loop(run, args...)` is an eager_loop coroutine.
template <class Loop, class... Args>
void awaited(const char* name, std::size_t iterations, Loop loop, Args&... args) {
  path_run run(name, iterations);
  loop(run, args...).finish(name);
}

void locks(std::size_t n) {
  asyncband::mutex<> m;
  asyncband::semaphore s(1);
  asyncband::rwlock<std::uint64_t> l(0);
  mutex_try_lock(n);
  std_mutex_try_lock(n);
  awaited("mutex/lock_unlock/asyncband", n, mutex_lock_unlock, m);
  std_mutex_lock_unlock("mutex/lock_unlock/std", n);
  mutex_lock_unlock_blocking(n);
  std_mutex_lock_unlock("mutex/lock_unlock_blocking/std", n);
  semaphore_try_acquire(n);
  awaited("semaphore/acquire_release/asyncband", n, semaphore_acquire, s);
  awaited("rwlock/read/asyncband", n, rwlock_read, l);
  awaited("rwlock/write/asyncband", n, rwlock_write, l);
}

void countdown(std::size_t n) {
  asyncband::manual_reset_event manual;
  asyncband::auto_reset_event automatic;
  asyncband::barrier barrier(1);
  awaited("event/set_await_reset/asyncband", n, event_set_await_reset, manual);
  awaited("event/notify_await/asyncband", n, event_notify_await, automatic);
  latch_count_down_wait(n);
  awaited("latch/count_down_await/asyncband", n, latch_count_down_await);
  barrier_single(n);
  std_barrier_single("barrier/single/std_barrier", n);
  awaited("barrier/single_await/asyncband", n, barrier_single_await, barrier);
  std_barrier_single("barrier/single_await/std_barrier", n);
  phaser_arrive(n);
  std_barrier_arrive(n);
  phaser_arrive_no_advance(n);
}

void channels(std::size_t n) {
  bounded_try_pair(n);
  moodycamel_pair<moodycamel::BlockingConcurrentQueue<int>>("channel/try_pair/moodycamel", n);
  moodycamel_pair<moodycamel::ConcurrentQueue<int>>("channel/try_pair/moodycamel_nonblocking", n);
  unbounded_pair(n);
  moodycamel_pair<moodycamel::ConcurrentQueue<int>>("channel/unbounded_pair/moodycamel_nonblocking", n);
  awaited("oneshot/send_recv/asyncband", n, oneshot_send_recv);
}

/// The iteration count from the command line (default 1000).
std::size_t iterations_from(int argc, char** argv) {
  if (argc < 2) return 1000;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(argv[1], &end, 10);
  if (argc > 2 || *end != '\0' || n == 0) {
    std::fprintf(stderr, "usage: callgrind_paths [ITERATIONS]  (a positive count, default 1000)\n");
    std::exit(2);
  }
  return static_cast<std::size_t>(n);
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = iterations_from(argc, argv);
  const parked_thread second;
  empty_loop(n);
  awaited("loop/empty_in_coroutine/baseline", n, empty_loop_in_coroutine);
  locks(n);
  countdown(n);
  channels(n);
  return 0;
}
