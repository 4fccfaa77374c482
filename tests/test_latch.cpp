// Tests for asyncband::latch: count / try_wait / count_down / arrive(n), errors, waits from tasks /
// threads / block_on, cancellation, deterministic races at the waiter core's test points,
// destruction of a suspended waiter, and a bounded multi-threaded stress test.
#include "asyncband/latch.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <thread>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"

namespace {

using asyncband::block_on;
using asyncband::latch;
using asyncband::wait_status;
using asyncband::detail::test_point;
using asyncband::runtime::task;
using asyncband::runtime::test_scheduler;
using namespace std::chrono_literals;

// What a waiting coroutine reports: whether it started, how many times it ran past its wait
// (must never exceed one), how the wait ended, and the count it saw when it resumed.
struct probe {
  int started = 0;
  int resumed = 0;
  std::optional<wait_status> status;
  std::ptrdiff_t count_seen = -1;
};

task<> plain_waiter(latch& l, probe& p) {
  ++p.started;
  co_await l.wait();
  ++p.resumed;
  p.status = wait_status::ok;
  p.count_seen = l.count();
}

task<> stoppable_waiter(latch& l, std::stop_token token, probe& p) {
  ++p.started;
  const auto r = co_await l.wait(std::move(token));
  ++p.resumed;
  p.status = r.status();
  p.count_seen = l.count();
}

// Starts `t` on the test scheduler while the test keeps ownership of its frame (spawn()
// detaches), so that the test can destroy the coroutine while it is suspended in a wait.
void start_owned(test_scheduler& s, task<>& t) {
  t.handle().promise().set_scheduler(s.ref());
  s.schedule(t.handle());
}

// ---------------------------------------------------------------------------------------------
// Basic contract

TEST(Latch, CountDownAndArriveDecrementTheCount) {
  latch l(5);
  EXPECT_EQ(l.count(), 5);
  EXPECT_FALSE(l.try_wait());
  l.count_down();
  EXPECT_EQ(l.count(), 4);
  l.arrive(3);
  EXPECT_EQ(l.count(), 1);
  EXPECT_FALSE(l.try_wait());
  l.arrive(1);
  EXPECT_EQ(l.count(), 0);
  EXPECT_TRUE(l.try_wait());
}

TEST(Latch, ZeroCountIsReadyAtOnce) {
  latch l(0);
  EXPECT_EQ(l.count(), 0);
  EXPECT_TRUE(l.try_wait());
  l.wait_blocking();
  EXPECT_TRUE(l.wait_timeout(0ms).ok());

  test_scheduler s;
  probe p;
  s.spawn(plain_waiter(l, p));
  EXPECT_EQ(s.run(), 1U);  // never suspended
  EXPECT_EQ(p.resumed, 1);
}

TEST(Latch, ArriveZeroIsANoOp) {
  latch l(2);
  l.arrive(0);
  EXPECT_EQ(l.count(), 2);
  latch done(0);
  done.arrive(0);
  EXPECT_EQ(done.count(), 0);
}

TEST(Latch, WaitersSuspendUntilTheCountReachesZero) {
  test_scheduler s;
  latch l(3);
  std::array<probe, 3> probes;
  std::stop_source src;
  s.spawn(plain_waiter(l, probes[0]));
  s.spawn(stoppable_waiter(l, src.get_token(), probes[1]));
  s.spawn(plain_waiter(l, probes[2]));
  s.run();

  l.count_down();
  l.count_down();
  EXPECT_EQ(s.ready_count(), 0U);
  for (const auto& p : probes) EXPECT_EQ(p.resumed, 0);

  l.count_down();
  EXPECT_EQ(s.ready_count(), probes.size());  // all posted, none run inline
  s.run();
  for (const auto& p : probes) {
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::ok);
    EXPECT_EQ(p.count_seen, 0);
  }

  probe late;  // the latch stays open
  s.spawn(plain_waiter(l, late));
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(late.resumed, 1);
}

TEST(Latch, ArriveReachingZeroWakesEveryWaiter) {
  test_scheduler s;
  latch l(4);
  std::array<probe, 2> probes;
  for (auto& p : probes) s.spawn(plain_waiter(l, p));
  s.run();
  l.arrive(4);
  s.run();
  for (const auto& p : probes) EXPECT_EQ(p.resumed, 1);
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(Latch, NegativeInitialCountThrows) {
  EXPECT_THROW(latch(-1), std::invalid_argument);
  EXPECT_THROW(latch(-100), std::invalid_argument);
}

TEST(Latch, InvalidArrivalsThrowAndLeaveTheCountUnchanged) {
  test_scheduler s;
  latch l(3);
  probe p;
  s.spawn(plain_waiter(l, p));
  s.run();

  EXPECT_THROW(l.arrive(-1), std::invalid_argument);
  EXPECT_EQ(l.count(), 3);
  EXPECT_THROW(l.arrive(4), std::invalid_argument);
  EXPECT_EQ(l.count(), 3);
  l.arrive(2);
  EXPECT_THROW(l.arrive(2), std::invalid_argument);
  EXPECT_EQ(l.count(), 1);
  EXPECT_EQ(s.ready_count(), 0U);  // no failed arrival woke anybody
  EXPECT_EQ(p.resumed, 0);

  l.count_down();
  EXPECT_EQ(l.count(), 0);
  EXPECT_THROW(l.count_down(), std::invalid_argument);  // count_down at zero
  EXPECT_THROW(l.arrive(1), std::invalid_argument);
  EXPECT_EQ(l.count(), 0);
  s.run();
  EXPECT_EQ(p.resumed, 1);
}

// ---------------------------------------------------------------------------------------------
// Cancellation

TEST(Latch, AlreadyStoppedTokenCancelsAtOnce) {
  for (const std::ptrdiff_t count : {0, 2}) {
    test_scheduler s;
    latch l(count);
    std::stop_source src;
    src.request_stop();
    probe p;
    s.spawn(stoppable_waiter(l, src.get_token(), p));
    EXPECT_EQ(s.run(), 1U);
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::cancelled);
    EXPECT_EQ(l.count(), count);
  }
}

TEST(Latch, StopWhileSuspendedCancelsAndResumesOnce) {
  test_scheduler s;
  latch l(1);
  std::stop_source src;
  probe cancelled;
  probe other;
  s.spawn(stoppable_waiter(l, src.get_token(), cancelled));
  s.spawn(plain_waiter(l, other));
  s.run();

  src.request_stop();
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_EQ(cancelled.resumed, 0);
  s.run();
  EXPECT_EQ(cancelled.resumed, 1);
  EXPECT_EQ(cancelled.status, wait_status::cancelled);
  EXPECT_EQ(cancelled.count_seen, 1);

  l.count_down();  // must not touch the cancelled (unlinked) waiter
  s.run();
  EXPECT_EQ(cancelled.resumed, 1);
  EXPECT_EQ(other.resumed, 1);
}

TEST(Latch, StopAfterWakeIsOk) {
  test_scheduler s;
  latch l(1);
  std::stop_source src;
  probe p;
  s.spawn(stoppable_waiter(l, src.get_token(), p));
  s.run();

  l.count_down();
  src.request_stop();  // the final arrival claimed the waiter first
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
}

// ---------------------------------------------------------------------------------------------
// Deterministic races at the waiter core's interleaving points

TEST(Latch, CountDownAtPublishedOrBeforeArmCompletesWithoutSuspending) {
  for (const test_point point : {test_point::published, test_point::before_arm}) {
    for (const bool stoppable : {false, true}) {
      test_scheduler s;
      latch l(1);
      std::stop_source src;
      probe p;
      s.at(point, [&] { l.count_down(); });
      if (stoppable) {
        s.spawn(stoppable_waiter(l, src.get_token(), p));
      } else {
        s.spawn(plain_waiter(l, p));
      }
      EXPECT_EQ(s.run(), 1U);
      EXPECT_EQ(s.pending_actions(), 0U);
      EXPECT_EQ(p.resumed, 1);
      EXPECT_EQ(p.status, wait_status::ok);
      src.request_stop();
      EXPECT_EQ(s.run(), 0U);
    }
  }
}

TEST(Latch, NonFinalCountDownAtPublishedLeavesTheWaiterSuspended) {
  test_scheduler s;
  latch l(2);
  probe p;
  s.at(test_point::published, [&] { l.count_down(); });
  s.spawn(plain_waiter(l, p));
  s.run();
  EXPECT_EQ(l.count(), 1);
  EXPECT_EQ(p.resumed, 0);
  l.count_down();
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(p.resumed, 1);
}

TEST(Latch, StopAtPublishedOrBeforeArmCancelsWithoutSuspending) {
  for (const test_point point : {test_point::published, test_point::before_arm}) {
    test_scheduler s;
    latch l(1);
    std::stop_source src;
    probe p;
    s.at(point, [&] { src.request_stop(); });
    s.spawn(stoppable_waiter(l, src.get_token(), p));
    EXPECT_EQ(s.run(), 1U);
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::cancelled);
    l.count_down();  // nothing queued any more
    EXPECT_EQ(s.run(), 0U);
  }
}

TEST(Latch, StopAtClaimedForWakeIsOk) {
  test_scheduler s;
  latch l(1);
  std::stop_source src;
  probe p;
  s.spawn(stoppable_waiter(l, src.get_token(), p));
  s.run();

  s.at(test_point::claimed_for_wake, [&] { src.request_stop(); });
  l.count_down();
  EXPECT_EQ(s.pending_actions(), 0U);
  s.run();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
}

TEST(Latch, CountDownAtClaimedForCancelDoesNotWakeTheCancelledWaiterTwice) {
  test_scheduler s;
  latch l(1);
  std::stop_source src;
  probe cancelled;
  probe other;
  s.spawn(stoppable_waiter(l, src.get_token(), cancelled));
  s.spawn(plain_waiter(l, other));
  s.run();

  s.at(test_point::claimed_for_cancel, [&] { l.count_down(); });
  src.request_stop();
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_EQ(s.ready_count(), 2U);  // one resumption each
  s.run();
  EXPECT_EQ(cancelled.resumed, 1);
  EXPECT_EQ(cancelled.status, wait_status::cancelled);
  EXPECT_EQ(other.resumed, 1);
  EXPECT_EQ(other.status, wait_status::ok);
}

// ---------------------------------------------------------------------------------------------
// Destroying a suspended waiter

TEST(Latch, DestroyingASuspendedWaiterUnlinksIt) {
  test_scheduler s;
  latch l(1);
  std::stop_source src;
  probe doomed_plain;
  probe doomed_stoppable;
  probe survivor;
  auto t1 = plain_waiter(l, doomed_plain);
  auto t2 = stoppable_waiter(l, src.get_token(), doomed_stoppable);
  start_owned(s, t1);
  s.spawn(plain_waiter(l, survivor));
  start_owned(s, t2);
  s.run();
  ASSERT_EQ(doomed_plain.started, 1);
  ASSERT_EQ(doomed_stoppable.started, 1);

  t1 = {};
  t2 = {};
  src.request_stop();
  EXPECT_EQ(s.ready_count(), 0U);
  l.count_down();  // would touch freed memory if a node were still linked
  s.run();
  EXPECT_EQ(doomed_plain.resumed, 0);
  EXPECT_EQ(doomed_stoppable.resumed, 0);
  EXPECT_EQ(survivor.resumed, 1);
}

// ---------------------------------------------------------------------------------------------
// Plain threads and block_on

TEST(Latch, WaitBlockingReturnsOnceEveryThreadArrived) {
  constexpr int arrivals = 3;
  latch l(arrivals);
  std::array<int, arrivals> written{};  // each arriver's write happens-before the wait's return
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < written.size(); ++i) {
    threads.emplace_back([&, i] {
      written[i] = 1;
      l.count_down();
    });
  }
  l.wait_blocking();
  EXPECT_EQ(l.count(), 0);
  for (const int w : written) EXPECT_EQ(w, 1);
  for (auto& t : threads) t.join();
}

TEST(Latch, WaitTimeoutTimesOutWhileTheCountIsNotZero) {
  latch l(1);
  EXPECT_TRUE(l.wait_timeout(1ms).timed_out());
  EXPECT_TRUE(l.wait_timeout(0ms).timed_out());
  EXPECT_EQ(l.count(), 1);
  l.count_down();  // the timed-out nodes are gone: must not be touched
  EXPECT_TRUE(l.wait_timeout(0ms).ok());
}

TEST(Latch, WaitTimeoutCompletesWhenAnotherThreadArrives) {
  latch l(1);
  std::optional<wait_status> status;
  std::thread waiter([&] { status = l.wait_timeout(1h).status(); });
  l.count_down();
  waiter.join();
  EXPECT_EQ(status, wait_status::ok);
}

TEST(Latch, WaitBlockingWithStopToken) {
  latch open(0);
  std::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(open.wait_blocking(stopped.get_token()).cancelled());  // even though open

  latch l(1);
  std::stop_source src;
  std::optional<wait_status> status;
  std::thread waiter([&] { status = l.wait_blocking(src.get_token()).status(); });
  src.request_stop();
  waiter.join();
  EXPECT_EQ(status, wait_status::cancelled);
  EXPECT_EQ(l.count(), 1);

  std::stop_source unused;
  std::thread woken([&] { status = l.wait_blocking(unused.get_token()).status(); });
  l.count_down();
  woken.join();
  EXPECT_EQ(status, wait_status::ok);
}

TEST(Latch, BlockOnWaits) {
  latch l(2);
  std::stop_source src;
  src.request_stop();
  EXPECT_TRUE(block_on(l.wait(src.get_token())).cancelled());

  std::optional<wait_status> status;
  probe p;
  std::thread waiter([&] {
    block_on(l.wait());
    status = block_on(l.wait(std::stop_token{})).status();
    block_on(plain_waiter(l, p));  // a task without a scheduler, resumed inline
  });
  l.count_down();
  l.count_down();
  waiter.join();
  EXPECT_EQ(status, wait_status::ok);
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.count_seen, 0);
}

TEST(Latch, BlockOnWaitIsCancelledByAStopFromAnotherThread) {
  latch l(1);
  std::stop_source src;
  std::optional<wait_status> status;
  std::thread waiter([&] { status = block_on(l.wait(src.get_token())).status(); });
  src.request_stop();  // resumes the block_on driver inline on this thread if it had suspended
  waiter.join();
  EXPECT_EQ(status, wait_status::cancelled);
}

// ---------------------------------------------------------------------------------------------
// Stress: per round, pool tasks and plain threads wait (some cancellably, with a stop requested
// mid-round) while pool tasks and threads arrive. Invariant: no wait completes ok before the
// count reaches zero; every arrival's write happens-before every ok completion; every waiter
// finishes.

class completion {
 public:
  explicit completion(int n) : remaining_(n) {}
  void done() {
    const std::lock_guard lock(mutex_);
    if (--remaining_ == 0) cv_.notify_all();
  }
  // Aborts rather than letting a hang (a lost wake-up) run into destroyed state.
  void wait_or_abort(std::chrono::steady_clock::duration limit) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, limit, [this] { return remaining_ == 0; })) {
      std::fprintf(stderr, "latch stress: %d participant(s) never finished\n", remaining_);
      std::abort();
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int remaining_;
};

constexpr int stress_arrivers = 4;           // arriver i arrives with i + 1
constexpr std::ptrdiff_t stress_count = 10;  // 1 + 2 + 3 + 4

struct stress_round {
  latch l{stress_count};
  std::array<int, stress_arrivers> arrived{};  // written (non-atomically) before arriving
  std::stop_source stop;
  std::atomic<int> ok{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> bad{0};
  completion finished;

  explicit stress_round(int participants) : finished(participants) {}

  void arrive(int i) {
    arrived[static_cast<std::size_t>(i)] = 1;
    l.arrive(i + 1);
  }

  void record(wait_status st) {
    if (st == wait_status::ok) {
      ok.fetch_add(1);
      if (l.count() != 0) bad.fetch_add(1);
      for (const int a : arrived) {
        if (a != 1) bad.fetch_add(1);
      }
    } else if (st == wait_status::cancelled) {
      cancelled.fetch_add(1);
    } else {
      bad.fetch_add(1);
    }
  }
};

task<> stress_waiter(stress_round& r, bool stoppable) {
  if (stoppable) {
    r.record((co_await r.l.wait(r.stop.get_token())).status());
  } else {
    co_await r.l.wait();
    r.record(wait_status::ok);
  }
  r.finished.done();
}

task<> stress_arriver(stress_round& r, int i) {
  r.arrive(i);
  r.finished.done();
  co_return;
}

TEST(Latch, StressNoWaiterCompletesBeforeZero) {
  constexpr int max_rounds = 300;
  constexpr int pool_waiters = 4;
  constexpr int thread_waiters = 2;
  constexpr int participants = pool_waiters + thread_waiters + stress_arrivers;
  const auto deadline = std::chrono::steady_clock::now() + 1s;

  asyncband::runtime::thread_pool pool(2);
  int rounds = 0;
  int total_ok = 0;
  int total_cancelled = 0;
  for (; rounds < max_rounds && std::chrono::steady_clock::now() < deadline; ++rounds) {
    auto r = std::make_unique<stress_round>(participants);
    const bool cancel_this_round = rounds % 3 == 0;

    for (int i = 0; i < pool_waiters; ++i)
      asyncband::runtime::spawn(pool.ref(), stress_waiter(*r, i % 2 == 1));
    // Arrivers 0 and 1 are pool tasks, 2 and 3 plain threads; the waiting threads use the
    // blocking twins and block_on.
    asyncband::runtime::spawn(pool.ref(), stress_arriver(*r, 0));
    std::vector<std::thread> threads;
    threads.emplace_back([&r] {
      r->record(r->l.wait_blocking(r->stop.get_token()).status());
      r->finished.done();
    });
    asyncband::runtime::spawn(pool.ref(), stress_arriver(*r, 1));
    threads.emplace_back([&r] {
      r->record(block_on(r->l.wait(r->stop.get_token())).status());
      r->finished.done();
    });
    threads.emplace_back([&r] {
      r->arrive(2);
      r->finished.done();
    });
    threads.emplace_back([&r, cancel_this_round] {
      if (cancel_this_round) r->stop.request_stop();
      r->arrive(3);
      r->finished.done();
    });

    r->finished.wait_or_abort(30s);
    for (auto& t : threads) t.join();

    EXPECT_EQ(r->l.count(), 0);
    EXPECT_EQ(r->bad.load(), 0) << "round " << rounds;
    EXPECT_GE(r->ok.load(), pool_waiters / 2);  // the plain pool waiters cannot be cancelled
    EXPECT_EQ(r->ok.load() + r->cancelled.load(), pool_waiters + thread_waiters);
    if (!cancel_this_round) {
      EXPECT_EQ(r->cancelled.load(), 0);
    }
    total_ok += r->ok.load();
    total_cancelled += r->cancelled.load();
    if (HasFailure()) break;
  }
  EXPECT_GT(rounds, 0);
  EXPECT_GT(total_ok, 0);
  RecordProperty("rounds", rounds);
  RecordProperty("cancelled", total_cancelled);
}

}  // namespace

#include "support/last_one_out.hpp"

namespace {

TEST(LatchLifetime, TheWaiterMayDestroyTheLatchWhileTheFinalArrivalReturns) {
  // A timed-out wait first leaves the waiters flag set, so the final arrival takes the lock.
  asyncband_test::waiter_destroys_while_the_waker_returns(
      [] {
        auto l = std::make_unique<asyncband::latch>(1);
        EXPECT_TRUE(l->wait_timeout(std::chrono::nanoseconds(0)).timed_out());
        return l;
      },
      [](asyncband::latch& l) { l.count_down(); }, [](asyncband::latch& l) { l.wait_blocking(); });
}

}  // namespace
