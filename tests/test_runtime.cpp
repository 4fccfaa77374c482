// SPDX-License-Identifier: Apache-2.0
// The optional runtime: task, when_all, thread_pool and the deterministic test scheduler.
#include <gtest/gtest.h>

#include <asyncband/block_on.hpp>
#include <asyncband/manual_reset_event.hpp>
#include <asyncband/phaser.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>
#include <asyncband/stop_token.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace {

using asyncband::block_on;
using asyncband::wait_status;
using asyncband::runtime::task;
using asyncband::runtime::test_scheduler;
using asyncband::runtime::thread_pool;
using asyncband::runtime::when_all;

task<int> add(int a, int b) {
  co_return a + b;
}

task<std::string> nested() {
  const int x = co_await add(1, 2);
  const int y = co_await add(x, 4);
  co_return std::to_string(y);
}

TEST(Task, IsLazyAndComposes) {
  bool started = false;
  auto t = [](bool& flag) -> task<void> {
    flag = true;
    co_return;
  }(started);
  EXPECT_FALSE(started);
  block_on(std::move(t));
  EXPECT_TRUE(started);
  EXPECT_EQ(block_on(nested()), "7");
}

TEST(Task, PropagatesExceptions) {
  auto failing = []() -> task<int> {
    throw std::logic_error("no");
    co_return 0;
  };
  EXPECT_THROW(block_on(failing()), std::logic_error);
}

TEST(WhenAll, CollectsResultsInOrder) {
  auto [a, b, c] = block_on(when_all(add(1, 1), add(2, 2), []() -> task<void> { co_return; }()));
  EXPECT_EQ(a, 2);
  EXPECT_EQ(b, 4);
  (void)c;
  std::vector<task<int>> tasks;
  for (int i = 0; i < 10; ++i) tasks.push_back(add(i, i));
  const auto results = block_on(when_all(std::move(tasks)));
  ASSERT_EQ(results.size(), 10U);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(results[static_cast<std::size_t>(i)], 2 * i);
}

TEST(WhenAll, RethrowsAfterAllFinished) {
  std::atomic<int> finished{0};
  std::vector<task<void>> tasks;
  for (int i = 0; i < 4; ++i) {
    tasks.push_back([](int i, std::atomic<int>& finished) -> task<void> {
      ++finished;
      if (i == 1) throw std::runtime_error("child failed");
      co_return;
    }(i, finished));
  }
  EXPECT_THROW(block_on(when_all(std::move(tasks))), std::runtime_error);
  EXPECT_EQ(finished.load(), 4);
}

TEST(ThreadPool, RunsTasksOnItsWorkers) {
  thread_pool pool(2);
  std::vector<task<std::thread::id>> tasks;
  for (int i = 0; i < 16; ++i) {
    tasks.push_back([](thread_pool& pool) -> task<std::thread::id> {
      co_await pool.schedule();
      EXPECT_TRUE(pool.on_worker_thread());
      co_return std::this_thread::get_id();
    }(pool));
  }
  const auto ids = block_on(when_all(std::move(tasks)));
  const std::set<std::thread::id> distinct(ids.begin(), ids.end());
  EXPECT_LE(distinct.size(), 2U);
  EXPECT_EQ(distinct.count(std::this_thread::get_id()), 0U);
}

// schedule() from a worker goes through the shared FIFO, not that worker's next slot: a worker
// that then blocks (here in block_on) does not hold the scheduled coroutine where no other
// worker can take it.
TEST(ThreadPool, ScheduleFromAWorkerThatThenBlocksRunsOnAnotherWorker) {
  thread_pool pool(2);
  const auto outer = [](thread_pool& pool) -> task<bool> {
    co_await pool.schedule();
    const auto inner = [](thread_pool& pool) -> task<bool> {
      co_await pool.schedule();
      co_return pool.on_worker_thread();
    };
    co_return block_on(inner(pool));  // blocks this worker until the other one runs inner
  };
  EXPECT_TRUE(block_on(outer(pool)));
}

TEST(ThreadPool, WaitersWokenTogetherResumeOnThePool) {
  thread_pool pool(2);
  asyncband::manual_reset_event ev;
  std::atomic<int> on_pool{0};
  std::vector<task<void>> waiters;
  for (int i = 0; i < 8; ++i) {
    waiters.push_back(
        [](thread_pool& pool, asyncband::manual_reset_event& ev, std::atomic<int>& n) -> task<void> {
          co_await pool.schedule();
          co_await ev.wait();
          if (pool.on_worker_thread()) ++n;
        }(pool, ev, on_pool));
  }
  std::thread setter([&] { ev.set(); });
  block_on(when_all(std::move(waiters)));
  setter.join();
  EXPECT_EQ(on_pool.load(), 8);
}

// The k-th worker start failing (std::thread's constructor throwing) must not terminate (the
// workers already started would be destroyed joinable): they are stopped and joined, and the
// error reaches the caller.
TEST(ThreadPool, AFailedWorkerStartJoinsTheStartedWorkersAndRethrows) {
  auto& countdown = asyncband::runtime::detail::fail_worker_start_countdown;
  for (std::size_t k = 1; k <= 4; ++k) {
    countdown = k;
    EXPECT_THROW(thread_pool pool(4), std::system_error) << "start " << k << " failing";
    EXPECT_EQ(countdown, 0U);
  }
  thread_pool pool(2);  // the seam is spent: a pool starts again
  EXPECT_EQ(pool.thread_count(), 2U);
}

/// Runs `body`, and reports a hang and aborts if it has not returned long after it should have:
/// the tests below pin deadlocks, which would otherwise show only as ctest's timeout. The bound
/// is not a timing assertion; the body needs milliseconds.
template <class Body>
void with_watchdog(const char* what, Body body) {
  std::mutex m;
  std::condition_variable cv;
  bool finished = false;
  std::thread dog([&] {
    std::unique_lock lock(m);
    if (!cv.wait_for(lock, std::chrono::seconds(60), [&] { return finished; })) {
      std::fprintf(stderr, "watchdog: hang in %s\n", what);
      std::abort();
    }
  });
  body();
  {
    const std::lock_guard lock(m);
    finished = true;
  }
  cv.notify_one();
  dog.join();
}

/// A fire-and-forget coroutine that starts at once on the calling thread, resumes on `pool`
/// once a wake-up ends its wait (its promise names the pool as its scheduler), and frees its
/// frame at the end. Starting it inline makes sure it is waiting before anyone can wake it.
struct started_here_resumed_on_pool {
  struct promise_type {
    asyncband::scheduler_ref scheduler;
    template <class... Args>
    explicit promise_type(thread_pool& pool, Args&... /*unused*/) noexcept : scheduler(pool.ref()) {}
    [[nodiscard]] asyncband::scheduler_ref asyncband_scheduler() const noexcept { return scheduler; }
    started_here_resumed_on_pool get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

/// Waits for `wake`, then runs `then` on the pool.
started_here_resumed_on_pool run_when_woken(thread_pool& /*pool*/, asyncband::manual_reset_event& wake,
                                            std::function<void()>& then) {
  co_await wake.wait();
  then();
}

/// On a worker: wakes the coroutine waiting for `wake` (it goes to this worker's next slot),
/// then blocks this worker in `block` until that coroutine has run.
task<void> wake_then_block(thread_pool& pool, asyncband::manual_reset_event& wake,
                           std::function<void()>& block) {
  co_await pool.schedule();
  wake.set();
  block();
}

/// The scenario of the LIFO-slot deadlock on a 2-worker pool: worker A wakes a coroutine (into
/// A's next slot) and then blocks in `block` on something only that coroutine does (`unblock`).
/// The other worker, idle, must run it. Returns whether it ran on a thread other than A's.
bool blocked_worker_leaves_its_slot(const char* what, const std::function<void()>& unblock,
                                    const std::function<void()>& block_until_unblocked) {
  asyncband::manual_reset_event wake;
  std::thread::id woken_on;
  std::thread::id blocked_on;
  std::function<void()> then = [&] {
    woken_on = std::this_thread::get_id();
    unblock();
  };
  std::function<void()> block = [&] {
    blocked_on = std::this_thread::get_id();
    block_until_unblocked();
  };
  thread_pool pool(2);  // declared last: joined before what its coroutines use is destroyed
  run_when_woken(pool, wake, then);
  with_watchdog(what, [&] { block_on(wake_then_block(pool, wake, block)); });
  return woken_on != blocked_on;
}

TEST(ThreadPool, AWorkerBlockingInBlockOnLeavesItsNextSlotToAnIdleWorker) {
  asyncband::manual_reset_event done;
  EXPECT_TRUE(blocked_worker_leaves_its_slot(
      "block_on", [&] { done.set(); }, [&] { block_on(done.wait()); }));
}

TEST(ThreadPool, AWorkerInAWaitBlockingLeavesItsNextSlotToAnIdleWorker) {
  asyncband::manual_reset_event done;
  EXPECT_TRUE(blocked_worker_leaves_its_slot(
      "wait_blocking", [&] { done.set(); }, [&] { done.wait_blocking(); }));
}

// The timeout is far beyond the watchdog's bound: the wait ends by the set, not by the clock.
TEST(ThreadPool, AWorkerInATimedWaitLeavesItsNextSlotToAnIdleWorker) {
  asyncband::manual_reset_event done;
  asyncband::wait_status outcome = asyncband::wait_status::cancelled;
  EXPECT_TRUE(blocked_worker_leaves_its_slot(
      "wait_timeout", [&] { done.set(); },
      [&] { outcome = done.wait_timeout(std::chrono::hours(1)).status(); }));
  EXPECT_EQ(outcome, asyncband::wait_status::ok);
}

// The phaser's observer wait_blocking(observed) sleeps on the phaser's broadcast word, not on a
// parker of its own.
TEST(ThreadPool, AWorkerInAPhaserObserverWaitLeavesItsNextSlotToAnIdleWorker) {
  const auto ph = asyncband::phaser::create();
  auto member = ph->enroll().value();
  const asyncband::phase_id first = ph->phase();
  asyncband::wait_status outcome = asyncband::wait_status::cancelled;
  EXPECT_TRUE(blocked_worker_leaves_its_slot(
      "phaser::wait_blocking", [&] { (void)member.arrive(); },
      [&] { outcome = ph->wait_blocking(first).status(); }));
  EXPECT_EQ(outcome, asyncband::wait_status::ok);
}

TEST(TestScheduler, FifoOrderWithoutSeed) {
  test_scheduler s;
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) {
    s.spawn([](std::vector<int>& order, int i) -> task<void> {
      order.push_back(i);
      co_return;
    }(order, i));
  }
  EXPECT_EQ(s.ready_count(), 5U);
  EXPECT_TRUE(s.step());
  EXPECT_EQ(order, std::vector<int>{0});
  s.run();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_FALSE(s.step());
}

std::vector<int> run_with_seed(std::uint64_t seed) {
  test_scheduler s(seed);
  std::vector<int> order;
  for (int i = 0; i < 8; ++i) {
    s.spawn([](test_scheduler& s, std::vector<int>& order, int i) -> task<void> {
      order.push_back(i);
      co_await s.schedule();  // yield: interleave with the others
      order.push_back(100 + i);
    }(s, order, i));
  }
  s.run();
  return order;
}

TEST(TestScheduler, SeededOrderIsReproducibleAndVaries) {
  EXPECT_EQ(run_with_seed(7), run_with_seed(7));
  std::set<std::vector<int>> distinct;
  for (std::uint64_t seed = 0; seed < 20; ++seed) distinct.insert(run_with_seed(seed));
  EXPECT_GT(distinct.size(), 10U);
}

TEST(TestScheduler, PointActionsRunOnceInRegistrationOrder) {
  test_scheduler s;
  asyncband::manual_reset_event ev;
  std::vector<int> ran;
  s.at(asyncband::detail::test_point::published, [&] { ran.push_back(1); });
  s.at(asyncband::detail::test_point::published, [&] { ran.push_back(2); });
  for (int i = 0; i < 3; ++i) {
    s.spawn([](asyncband::manual_reset_event& ev) -> task<void> { co_await ev.wait(); }(ev));
  }
  s.run();
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  EXPECT_EQ(s.pending_actions(), 0U);
  ev.set();
  s.run();
}

// ---------------------------------------------------------------------------------------------
// spawn: the join_handle, and the on_error form.

using asyncband::runtime::join_handle;
using asyncband::runtime::spawn;

task<int> answer() {
  co_return 42;
}

task<int> fails() {
  throw std::runtime_error("task failed");
  co_return 0;
}

task<int> waits_then_answers(asyncband::manual_reset_event& ev) {
  co_await ev.wait();
  co_return 42;
}

TEST(Spawn, JoinYieldsTheResult) {
  thread_pool pool(2);
  auto h = spawn(pool.ref(), answer());
  EXPECT_EQ(h.join(), 42);
  EXPECT_TRUE(h.done());
}

TEST(Spawn, JoinRethrowsWhatEscapedTheTask) {
  // Before the join_handle, this exception terminated the program.
  thread_pool pool(2);
  auto h = spawn(pool.ref(), fails());
  EXPECT_THROW((void)h.join(), std::runtime_error);
}

task<void> join_into(join_handle<int> h, std::optional<int>& out, std::string& error) {
  try {
    out = co_await std::move(h);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
}

TEST(Spawn, AwaitingTheHandleYieldsTheResultOrTheException) {
  test_scheduler s;
  asyncband::manual_reset_event ev;
  std::optional<int> got;
  std::string error;
  s.spawn(join_into(s.spawn(waits_then_answers(ev)), got, error));
  s.run();
  EXPECT_FALSE(got.has_value()) << "the joiner waits for the task";
  ev.set();
  s.run();
  EXPECT_EQ(got, 42);

  got.reset();
  s.spawn(join_into(s.spawn(fails()), got, error));
  s.run();
  EXPECT_FALSE(got.has_value());
  EXPECT_EQ(error, "task failed");
}

task<void> wait_for(join_handle<int>& h, asyncband::stop_token stop, std::optional<wait_status>& out) {
  const auto r = co_await h.wait(std::move(stop));
  out = r.status();
}

TEST(Spawn, WaitIsCancellableAndLeavesTheResult) {
  test_scheduler s;
  asyncband::manual_reset_event ev;
  auto h = s.spawn(waits_then_answers(ev));
  asyncband::stop_source stop;
  std::optional<wait_status> first;
  s.spawn(wait_for(h, stop.get_token(), first));
  s.run();
  stop.request_stop();
  s.run();
  EXPECT_EQ(first, wait_status::cancelled);
  EXPECT_FALSE(h.done());

  std::optional<wait_status> second;
  s.spawn(wait_for(h, asyncband::stop_token{}, second));
  ev.set();
  s.run();
  EXPECT_EQ(second, wait_status::ok);
  EXPECT_TRUE(h.done());
  EXPECT_EQ(h.join(), 42) << "wait() left the result to take";
}

TEST(Spawn, OnErrorReceivesWhatEscapedTheTask) {
  test_scheduler s;
  std::string error;
  int calls = 0;
  spawn(s.ref(), fails(), [&](std::exception_ptr e) {
    ++calls;
    try {
      std::rethrow_exception(std::move(e));
    } catch (const std::runtime_error& x) {
      error = x.what();
    }
  });
  spawn(s.ref(), answer(), [&](const std::exception_ptr&) { ++calls; });
  s.run();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(error, "task failed");
}

TEST(Spawn, ADetachedTaskRunsToItsEndAndFreesItself) {
  // Under ASan, a frame left behind is a leak.
  test_scheduler s;
  asyncband::manual_reset_event ev;
  s.spawn(waits_then_answers(ev));  // dropped at once
  auto h = s.spawn(answer());
  h.detach();
  EXPECT_FALSE(h.joinable());
  auto finished_first = s.spawn(answer());
  s.run();
  ev.set();
  s.run();
  EXPECT_TRUE(finished_first.done());
}  // finished_first goes after its task: it frees the frame

TEST(SpawnDeathTest, AnExceptionNobodyCanTakeTerminates) {
  EXPECT_DEATH(
      {
        test_scheduler s;
        s.spawn(fails());  // the handle is dropped: nobody can observe the exception
        s.run();
      },
      "");
  EXPECT_DEATH(
      {
        test_scheduler s;
        auto h = s.spawn(fails());
        s.run();
        h.detach();  // finished with an exception nobody took
      },
      "");
}

TEST(Spawn, HandlesDroppedWhileTheirTasksFinishOnAPool) {
  // The root's end and the handle's drop race for the last owner's share (TSan, ASan).
  constexpr int kTasks = 200;
  std::atomic<int> joined{0};
  {
    thread_pool pool(2);
    std::vector<join_handle<int>> kept;
    for (int i = 0; i < kTasks; ++i) {
      spawn(pool.ref(), answer());
      kept.push_back(spawn(pool.ref(), answer()));
    }
    for (auto& h : kept) joined += h.join();
  }  // the pool runs what is queued before it joins its workers
  EXPECT_EQ(joined.load(), 42 * kTasks);
}

}  // namespace
