// SPDX-License-Identifier: Apache-2.0
// resume_on: coroutines of a task type without asyncband's scheduler hook (the tests'
// hand-written bare_coroutine, as cppcoro's and libcoro's are) continue on a scheduler of their
// choosing after a wait, instead of on the thread that woke them. The schedulers: a plain thread
// pool written here (std::thread workers, one queue, a `schedule()` awaitable, as cppcoro's and
// libcoro's pools have), asyncband's runtime::thread_pool (the scheduler concept) and a
// scheduler_ref; and, for the single-threaded checks, a one-slot scheduler of each kind.
#include <gtest/gtest.h>

#include <asyncband/barrier.hpp>
#include <asyncband/block_on.hpp>
#include <asyncband/broadcast.hpp>
#include <asyncband/condvar.hpp>
#include <asyncband/detail/awaitable_traits.hpp>
#include <asyncband/latch.hpp>
#include <asyncband/manual_reset_event.hpp>
#include <asyncband/mpsc/bounded.hpp>
#include <asyncband/mpsc/unbounded.hpp>
#include <asyncband/mutex.hpp>
#include <asyncband/once.hpp>
#include <asyncband/oneshot.hpp>
#include <asyncband/resume_on.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/semaphore.hpp>
#include <asyncband/stop_token.hpp>
#include <asyncband/watch.hpp>
#include <atomic>
#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <cstdlib>
#include <deque>
#include <exception>
#include <latch>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/probe.hpp"

// ---------------------------------------------------------------------------------------------
// Allocation count of the calling thread, to check that a wait through resume_on allocates
// nothing: a replaced global operator new. Not under TSan, whose runtime defines its own.
#if defined(__SANITIZE_THREAD__)
#define RESUME_ON_COUNTS_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RESUME_ON_COUNTS_ALLOCATIONS 0
#endif
#endif
#ifndef RESUME_ON_COUNTS_ALLOCATIONS
#define RESUME_ON_COUNTS_ALLOCATIONS 1
#endif

namespace {
thread_local std::size_t allocations_here = 0;
}  // namespace

#if RESUME_ON_COUNTS_ALLOCATIONS
// Out of line: g++ 12 sees free() inlined against a new-expression and warns of a mismatch.
[[gnu::noinline]] void* operator new(std::size_t size) {
  ++allocations_here;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* p) noexcept {
  std::free(p);
}
[[gnu::noinline]] void operator delete(void* p, std::size_t /*size*/) noexcept {
  std::free(p);
}
#endif

namespace {

namespace ab = asyncband;
using ab::wait_status;

// ---------------------------------------------------------------------------------------------
/// A minimal task type with no asyncband_scheduler() hook: eager, frees its frame at the end.
using foreign_task = asyncband_test::bare_coroutine;
static_assert(!ab::scheduler_aware_promise<foreign_task::promise_type>);

/// The same, owned: suspends at its end, and the test destroys it (wherever it is suspended).
struct owned_foreign_task {
  struct promise_type {
    owned_foreign_task get_return_object() noexcept {
      return owned_foreign_task{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
  explicit owned_foreign_task(std::coroutine_handle<promise_type> h) noexcept : handle(h) {}
  owned_foreign_task(owned_foreign_task&& other) noexcept : handle(std::exchange(other.handle, {})) {}
  owned_foreign_task(const owned_foreign_task&) = delete;
  owned_foreign_task& operator=(const owned_foreign_task&) = delete;
  owned_foreign_task& operator=(owned_foreign_task&&) = delete;
  ~owned_foreign_task() {
    if (handle) handle.destroy();
  }
  std::coroutine_handle<promise_type> handle;
};

// ---------------------------------------------------------------------------------------------
/// A plain thread pool as other libraries have them: workers sharing one queue, and
/// `co_await pool.schedule()` to move onto it. No schedule(handle): resume_on reaches it through
/// the awaitable.
class plain_pool {
 public:
  explicit plain_pool(std::size_t threads) {
    for (std::size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  plain_pool(const plain_pool&) = delete;
  plain_pool& operator=(const plain_pool&) = delete;
  ~plain_pool() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  struct schedule_awaiter {
    plain_pool* pool;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) const { pool->post(h); }
    void await_resume() const noexcept {}
  };
  schedule_awaiter schedule() noexcept { return {this}; }

  [[nodiscard]] bool on_worker_thread() const noexcept { return current == this; }

  /// Returns once nothing is queued and no worker runs anything: every coroutine started on the
  /// pool has finished or is suspended.
  void wait_idle() {
    std::unique_lock lock(mutex_);
    idle_cv_.wait(lock, [this] { return ready_.empty() && running_ == 0; });
  }

 private:
  void post(std::coroutine_handle<> h) {
    {
      const std::lock_guard lock(mutex_);
      ready_.push_back(h);
    }
    ready_cv_.notify_one();
  }

  void work() {
    current = this;
    for (;;) {
      std::coroutine_handle<> h;
      {
        std::unique_lock lock(mutex_);
        ready_cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
        if (ready_.empty()) return;
        h = ready_.front();
        ready_.pop_front();
        ++running_;
      }
      h.resume();
      const std::lock_guard lock(mutex_);
      if (--running_ == 0 && ready_.empty()) idle_cv_.notify_all();
    }
  }

  static inline thread_local const plain_pool* current = nullptr;

  std::mutex mutex_;
  std::condition_variable ready_cv_;
  std::condition_variable idle_cv_;
  std::deque<std::coroutine_handle<>> ready_;
  std::size_t running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};
static_assert(ab::awaitable_scheduler<plain_pool> && !ab::scheduler<plain_pool>);

// ---------------------------------------------------------------------------------------------
// Four waiters on a pool, woken from a thread of their own.

constexpr int kWaiters = 4;

/// Where the waiters continued after their wait.
struct landing {
  std::atomic<int> on_pool{0};
  std::atomic<int> elsewhere{0};
  std::atomic<int> cancelled{0};
  std::latch done{kWaiters};

  template <class Pool>
  void record(const Pool& pool, bool was_cancelled = false) {
    (pool.on_worker_thread() ? on_pool : elsewhere).fetch_add(1);
    if (was_cancelled) cancelled.fetch_add(1);
    done.count_down();
  }
};

/// What co_await make_wait() yields.
template <class MakeWait>
using yield_of = ab::detail::await_result_t<std::invoke_result_t<MakeWait&>>;

template <class Outcome>
bool is_cancelled(const Outcome& outcome) {
  if constexpr (requires { outcome.cancelled(); }) {
    return outcome.cancelled();
  } else {
    return false;
  }
}

/// Starts on `pool`, waits on `make_wait()` (through resume_on or not), records where it went on.
template <class Pool, class MakeWait>
foreign_task wait_on_pool(Pool& pool, MakeWait make_wait, bool through_resume_on, landing& out) {
  co_await pool.schedule();
  bool cancelled = false;
  if constexpr (std::is_void_v<yield_of<MakeWait>>) {
    if (through_resume_on) {
      co_await ab::resume_on(pool, make_wait());
    } else {
      co_await make_wait();
    }
  } else if (through_resume_on) {
    const auto outcome = co_await ab::resume_on(pool, make_wait());
    cancelled = is_cancelled(outcome);
  } else {
    const auto outcome = co_await make_wait();
    cancelled = is_cancelled(outcome);
  }  // what the wait yielded (a permit) is given up before the test looks
  out.record(pool, cancelled);
}

/// Four waiters started on a plain 2-thread pool, all suspended in their wait before a thread of
/// the test's own wakes them with `wake()`. Returns where they continued.
template <class MakeWait, class Wake>
void four_waiters_on_plain_pool(MakeWait make_wait, Wake wake, bool through_resume_on, landing& out) {
  plain_pool pool(2);
  for (int i = 0; i < kWaiters; ++i)
    wait_on_pool(
        pool, [&make_wait, i] { return make_wait(i); }, through_resume_on, out);
  pool.wait_idle();  // all four are suspended in their wait (none can complete before wake())
  std::thread waker(wake);
  out.done.wait();
  waker.join();
}

TEST(ResumeOn, WithoutItAForeignTaskContinuesOnTheWakingThread) {
  // The problem resume_on solves: 0 of 4 are back on their pool.
  ab::latch l(1);
  landing out;
  four_waiters_on_plain_pool([&l](int) { return l.wait(); }, [&l] { l.count_down(); }, false, out);
  EXPECT_EQ(out.on_pool.load(), 0);
  EXPECT_EQ(out.elsewhere.load(), kWaiters);
}

TEST(ResumeOn, LatchWaitContinuesOnThePool) {
  ab::latch l(1);
  landing out;
  four_waiters_on_plain_pool([&l](int) { return l.wait(); }, [&l] { l.count_down(); }, true, out);
  EXPECT_EQ(out.on_pool.load(), kWaiters);
  EXPECT_EQ(out.elsewhere.load(), 0);
}

TEST(ResumeOn, EventWaitContinuesOnThePool) {
  ab::manual_reset_event ev;
  landing out;
  four_waiters_on_plain_pool([&ev](int) { return ev.wait(); }, [&ev] { ev.set(); }, true, out);
  EXPECT_EQ(out.on_pool.load(), kWaiters);
}

TEST(ResumeOn, ChannelReceiveContinuesOnThePool) {
  std::vector<std::pair<ab::mpsc::unbounded_sender<int>, ab::mpsc::unbounded_receiver<int>>> channels;
  for (int i = 0; i < kWaiters; ++i) channels.push_back(ab::mpsc::unbounded<int>());
  landing out;
  four_waiters_on_plain_pool(
      [&channels](int i) { return channels[static_cast<std::size_t>(i)].second.recv(); },
      [&channels] {
        for (int i = 0; i < kWaiters; ++i) (void)channels[static_cast<std::size_t>(i)].first.send(i);
      },
      true, out);
  EXPECT_EQ(out.on_pool.load(), kWaiters);
}

TEST(ResumeOn, SemaphoreAcquireContinuesOnThePool) {
  ab::semaphore sem(0);
  landing out;
  four_waiters_on_plain_pool([&sem](int) { return sem.acquire(); }, [&sem] { sem.release(kWaiters); }, true,
                             out);
  EXPECT_EQ(out.on_pool.load(), kWaiters);
  EXPECT_TRUE(sem.try_acquire(kWaiters).has_value()) << "every permit came back";
}

TEST(ResumeOn, ACancelledWaitContinuesOnThePoolToo) {
  ab::manual_reset_event ev;
  asyncband::stop_source stop;
  landing out;
  four_waiters_on_plain_pool([&](int) { return ev.wait(stop.get_token()); }, [&stop] { stop.request_stop(); },
                             true, out);
  EXPECT_EQ(out.on_pool.load(), kWaiters);
  EXPECT_EQ(out.cancelled.load(), kWaiters);
}

// ---------------------------------------------------------------------------------------------
// asyncband's thread_pool: through the scheduler concept, or a scheduler_ref. The waiters start
// on this thread, so each has suspended in its wait when its coroutine call returns.

template <class Sched, class MakeWait>
foreign_task wait_here_then(Sched sched, const ab::runtime::thread_pool& pool, MakeWait make_wait,
                            landing& out) {
  bool cancelled = false;
  if constexpr (std::is_void_v<yield_of<MakeWait>>) {
    co_await ab::resume_on(sched, make_wait());
  } else {
    const auto outcome = co_await ab::resume_on(sched, make_wait());
    cancelled = is_cancelled(outcome);
  }  // what the wait yielded (a permit) is given up before the test looks
  out.record(pool, cancelled);
}

TEST(ResumeOn, RuntimeThreadPoolAsTheScheduler) {
  ab::manual_reset_event ev;
  landing out;
  ab::runtime::thread_pool pool(2);
  for (int i = 0; i < kWaiters; ++i)
    wait_here_then<ab::runtime::thread_pool&>(
        pool, pool, [&ev] { return ev.wait(); }, out);
  std::thread waker([&ev] { ev.set(); });
  out.done.wait();
  waker.join();
  EXPECT_EQ(out.on_pool.load(), kWaiters);
}

TEST(ResumeOn, SchedulerRefAsTheScheduler) {
  ab::semaphore sem(0);
  asyncband::stop_source stop;
  landing out;
  ab::runtime::thread_pool pool(2);
  for (int i = 0; i < kWaiters; ++i) {
    wait_here_then(
        pool.ref(), pool, [&] { return sem.acquire(1, stop.get_token()); }, out);
  }
  std::thread waker([&stop] { stop.request_stop(); });
  out.done.wait();
  waker.join();
  EXPECT_EQ(out.on_pool.load(), kWaiters);
  EXPECT_EQ(out.cancelled.load(), kWaiters);
}

// ---------------------------------------------------------------------------------------------
// Single-threaded checks with one-slot schedulers: the test runs what was posted.

/// The one coroutine posted, which the test runs.
struct one_slot {
  std::coroutine_handle<> slot;
  /// Resumes the posted coroutine, if any.
  bool run() {
    if (!slot) return false;
    std::exchange(slot, {}).resume();
    return true;
  }
};

/// The scheduler concept: keeps the one coroutine posted to it.
struct slot_scheduler : one_slot {
  void schedule(std::coroutine_handle<> h) noexcept {
    EXPECT_FALSE(slot) << "posted twice";
    slot = h;
  }
};

/// A schedule() awaitable only.
struct slot_pool : one_slot {
  struct schedule_awaiter {
    slot_pool* pool;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) const noexcept { pool->slot = h; }
    void await_resume() const noexcept {}
  };
  schedule_awaiter schedule() noexcept { return {this}; }
};
static_assert(ab::scheduler<slot_scheduler> && ab::awaitable_scheduler<slot_pool> &&
              !ab::scheduler<slot_pool>);

/// Counts moves (and copies, which must not happen).
struct counted {
  int value = 0;
  int* moves = nullptr;
  counted(int v, int* m) noexcept : value(v), moves(m) {}
  counted(counted&& o) noexcept : value(o.value), moves(o.moves) { ++*moves; }
  counted(const counted&) = delete;
  counted& operator=(const counted&) = delete;
  counted& operator=(counted&&) = delete;
  ~counted() = default;
};

template <class Sched>
foreign_task receive_counted(Sched& sched, ab::mpsc::unbounded_receiver<counted>& rx, bool through_resume_on,
                             int& got, int& moves_seen) {
  if (through_resume_on) {
    auto r = co_await ab::resume_on(sched, rx.recv());
    got = r->value;
    moves_seen = *r->moves;
  } else {
    auto r = co_await rx.recv();
    got = r->value;
    moves_seen = *r->moves;
  }
}

/// The moves a value made from its send to the receiving coroutine, received directly or
/// through resume_on.
template <class Sched>
int moves_to_receiver(bool through_resume_on) {
  Sched sched;
  auto [tx, rx] = ab::mpsc::unbounded<counted>();
  int moves = 0;
  int got = 0;
  int moves_seen = -1;
  receive_counted(sched, rx, through_resume_on, got, moves_seen);
  EXPECT_TRUE(tx.send(counted(7, &moves)).ok());
  if (through_resume_on) {
    EXPECT_EQ(got, 0) << "continued on the waking thread";
    EXPECT_TRUE(sched.run());
  }
  EXPECT_EQ(got, 7);
  EXPECT_FALSE(sched.run());
  return moves_seen;
}

template <class Sched>
void yields_what_the_wait_yields() {
  const int direct = moves_to_receiver<Sched>(false);
  EXPECT_GT(direct, 0);
  EXPECT_EQ(moves_to_receiver<Sched>(true), direct) << "resume_on added a move";
}

TEST(ResumeOn, YieldsWhatTheWaitYieldsWithNoExtraMove) {
  yields_what_the_wait_yields<slot_scheduler>();
  yields_what_the_wait_yields<slot_pool>();
}

template <class Sched>
foreign_task count_allocations(Sched& sched, ab::manual_reset_event& ev, std::size_t& allocated, bool& done) {
  const std::size_t before = allocations_here;
  co_await ab::resume_on(sched, ev.wait());
  allocated = allocations_here - before;
  done = true;
}

template <class Sched>
void allocates_nothing() {
  Sched sched;
  ab::manual_reset_event ev;
  std::size_t allocated = 99;
  bool done = false;
  count_allocations(sched, ev, allocated, done);
  ev.set();
  EXPECT_FALSE(done) << "ran on the waking thread";
  EXPECT_TRUE(sched.run());
  EXPECT_TRUE(done);
  EXPECT_EQ(allocated, 0U) << "the hop's frame did not fit in the awaiter";
}

TEST(ResumeOn, AllocatesNothing) {
  if (!RESUME_ON_COUNTS_ALLOCATIONS) GTEST_SKIP() << "TSan's runtime owns operator new";
  allocates_nothing<slot_scheduler>();
  allocates_nothing<slot_pool>();
}

template <class Sched>
foreign_task wait_once(Sched& sched, ab::manual_reset_event& ev, bool& done) {
  co_await ab::resume_on(sched, ev.wait());
  done = true;
}

TEST(ResumeOn, AWaitThatCompletesAtOnceDoesNotHop) {
  slot_scheduler sched;
  slot_pool pool;
  ab::manual_reset_event ev(true);
  bool done = false;
  wait_once(sched, ev, done);
  EXPECT_TRUE(done);
  done = false;
  wait_once(pool, ev, done);
  EXPECT_TRUE(done);
  EXPECT_FALSE(sched.run());
  EXPECT_FALSE(pool.run());
}

/// An awaiter that knows nothing of the hook: the test resumes whatever it was given, inline.
struct inline_resumed {
  std::coroutine_handle<>* parked;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const noexcept { *parked = h; }
  int await_resume() const noexcept { return 5; }
};

foreign_task await_inline_resumed(slot_scheduler& sched, std::coroutine_handle<>& parked, int& got) {
  got = co_await ab::resume_on(sched, inline_resumed{&parked});
}

TEST(ResumeOn, AnAwaiterThatIgnoresTheHookStillEndsOnTheScheduler) {
  slot_scheduler sched;
  std::coroutine_handle<> parked;
  int got = 0;
  await_inline_resumed(sched, parked, got);
  ASSERT_TRUE(parked);
  parked.resume();  // the awaiter's "wake-up", on this thread: the hop posts itself instead
  EXPECT_EQ(got, 0);
  EXPECT_TRUE(sched.run());
  EXPECT_EQ(got, 5);
}

ab::runtime::task<int> wait_then_yield(ab::manual_reset_event& ev) {
  co_await ev.wait();
  co_return 9;
}

foreign_task await_task(slot_scheduler& sched, ab::manual_reset_event& ev, int& got) {
  got = co_await ab::resume_on(sched, wait_then_yield(ev));
}

TEST(ResumeOn, AnAsyncbandTaskAwaitedThroughItRunsOnTheSchedulerToo) {
  slot_scheduler sched;
  ab::manual_reset_event ev;
  int got = 0;
  await_task(sched, ev, got);
  ev.set();  // the task inherited the hop's hook: its wake-up is posted
  EXPECT_EQ(got, 0);
  while (sched.run()) {
  }
  EXPECT_EQ(got, 9);
}

// ---------------------------------------------------------------------------------------------
// Every kind of awaiter the library returns: a wait that suspended continues on the scheduler,
// never on the waking thread (one-slot scheduler, this thread wakes).

template <class MakeWait>
foreign_task continue_after(slot_scheduler& sched, MakeWait make_wait, bool& done) {
  if constexpr (std::is_void_v<yield_of<MakeWait>>) {
    co_await ab::resume_on(sched, make_wait());
  } else {
    [[maybe_unused]] const auto outcome = co_await ab::resume_on(sched, make_wait());
  }
  done = true;
}

/// Starts a waiter on make_wait(); wake() completes its wait on this thread.
template <class MakeWait, class Wake>
void continues_on_the_scheduler(MakeWait make_wait, Wake wake) {
  slot_scheduler sched;
  bool done = false;
  continue_after(sched, make_wait, done);
  EXPECT_FALSE(done) << "the wait did not suspend";
  wake();
  EXPECT_FALSE(done) << "continued on the waking thread";
  while (sched.run()) {
  }
  EXPECT_TRUE(done);
}

ab::runtime::task<void> wait_event(ab::manual_reset_event& ev) {
  co_await ev.wait();
}

TEST(ResumeOn, EveryKindOfAwaiterContinuesOnTheScheduler) {
  {
    SCOPED_TRACE("mutex lock");
    ab::mutex<int> m(0);
    std::optional<ab::mutex_guard<int>> held = m.try_lock();
    continues_on_the_scheduler([&m] { return m.lock(); }, [&held] { held.reset(); });
  }
  {
    SCOPED_TRACE("condvar wait");
    ab::mutex<int> m(0);
    ab::condvar cv;
    auto guard = m.try_lock();
    continues_on_the_scheduler([&] { return cv.wait(std::move(*guard)); }, [&cv] { cv.notify_one(); });
  }
  {
    SCOPED_TRACE("bounded channel send");
    auto [tx_, rx_] = ab::mpsc::bounded<int>(1);
    auto& tx = tx_;
    auto& rx = rx_;
    ASSERT_TRUE(tx.try_send(1).ok());
    continues_on_the_scheduler([&tx] { return tx.send(2); }, [&rx] { (void)rx.try_recv(); });
  }
  {
    SCOPED_TRACE("oneshot receive");
    auto [tx_, rx_] = ab::oneshot::channel<int>();
    auto& tx = tx_;
    auto& rx = rx_;
    continues_on_the_scheduler([&rx] { return rx.recv(); }, [&tx] { (void)tx.send(3); });
  }
  {
    SCOPED_TRACE("once: a caller waiting for another's run");
    ab::once o;
    ab::manual_reset_event ev;
    slot_scheduler runner_sched;
    bool ran = false;
    continue_after(
        runner_sched, [&] { return o.call_once([&ev] { return wait_event(ev); }); }, ran);
    continues_on_the_scheduler([&o] { return o.call_once([] {}); },
                               [&] {
                                 ev.set();
                                 while (runner_sched.run()) {
                                 }
                               });
    EXPECT_TRUE(ran);
  }
  {
    SCOPED_TRACE("watch changed");
    auto [tx_, rx_] = ab::watch::channel<int>(0);
    auto& tx = tx_;
    auto& rx = rx_;
    continues_on_the_scheduler([&rx] { return rx.changed(); }, [&tx] { (void)tx.send(1); });
  }
  {
    SCOPED_TRACE("broadcast receive");
    auto [tx_, rx_] = ab::broadcast::overflow<int>(2);
    auto& tx = tx_;
    auto& rx = rx_;
    continues_on_the_scheduler([&rx] { return rx.recv(); }, [&tx] { (void)tx.send(4); });
  }
  {
    SCOPED_TRACE("barrier wait");
    ab::barrier b(2);
    continues_on_the_scheduler([&b] { return b.wait(); }, [&b] { (void)ab::block_on(b.wait()); });
  }
}

owned_foreign_task acquire_and_hold(slot_scheduler& sched, ab::semaphore& sem, bool& done) {
  auto permit = co_await ab::resume_on(sched, sem.acquire());
  done = true;
}

TEST(ResumeOn, DestroyingTheWaitingCoroutineLosesNothing) {
  slot_scheduler sched;
  ab::semaphore sem(0);
  bool done = false;
  {
    const owned_foreign_task t = acquire_and_hold(sched, sem, done);
  }  // destroyed while queued: its node is unlinked
  sem.release(1);
  EXPECT_FALSE(sched.run()) << "nothing was posted for the destroyed waiter";
  EXPECT_FALSE(done);
  EXPECT_TRUE(sem.try_acquire(1).has_value()) << "the permit was not lost";
}

}  // namespace
