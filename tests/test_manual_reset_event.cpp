// Tests for asyncband::manual_reset_event: contract, waits from tasks / threads / block_on,
// cancellation, deterministic races at the waiter core's test points, destruction of a
// suspended waiter, and a bounded multi-threaded stress test.
#include "asyncband/manual_reset_event.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"

namespace {

using asyncband::block_on;
using asyncband::manual_reset_event;
using asyncband::wait_status;
using asyncband::detail::test_point;
using asyncband::runtime::task;
using asyncband::runtime::test_scheduler;
using namespace std::chrono_literals;

// What a waiting coroutine reports: whether it started, how many times it ran past its wait
// (must never exceed one), and how the wait ended.
struct probe {
  int started = 0;
  int resumed = 0;
  std::optional<wait_status> status;
};

task<> plain_waiter(manual_reset_event& ev, probe& p) {
  ++p.started;
  co_await ev.wait();
  ++p.resumed;
  p.status = wait_status::ok;
}

task<> stoppable_waiter(manual_reset_event& ev, std::stop_token token, probe& p) {
  ++p.started;
  const auto r = co_await ev.wait(std::move(token));
  ++p.resumed;
  p.status = r.status();
}

// Starts `t` on the test scheduler while the test keeps ownership of its frame (spawn()
// detaches), so that the test can destroy the coroutine while it is suspended in a wait.
void start_owned(test_scheduler& s, task<>& t) {
  t.handle().promise().set_scheduler(s.ref());
  s.schedule(t.handle());
}

// ---------------------------------------------------------------------------------------------
// Basic contract

TEST(ManualResetEvent, InitialState) {
  EXPECT_FALSE(manual_reset_event{}.is_set());
  EXPECT_FALSE(manual_reset_event{false}.is_set());
  EXPECT_TRUE(manual_reset_event{true}.is_set());
}

TEST(ManualResetEvent, SetAndResetToggleTheState) {
  manual_reset_event ev;
  ev.set();
  EXPECT_TRUE(ev.is_set());
  ev.set();  // idempotent
  EXPECT_TRUE(ev.is_set());
  ev.reset();
  EXPECT_FALSE(ev.is_set());
  ev.reset();
  EXPECT_FALSE(ev.is_set());
  ev.set();
  EXPECT_TRUE(ev.is_set());
}

TEST(ManualResetEvent, WaitOnASetEventCompletesWithoutSuspending) {
  test_scheduler s;
  manual_reset_event ev(true);
  probe a;
  probe b;
  s.spawn(plain_waiter(ev, a));
  std::stop_source src;
  s.spawn(stoppable_waiter(ev, src.get_token(), b));
  EXPECT_EQ(s.run(), 2U);  // one step each: neither suspended
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(b.resumed, 1);
  EXPECT_EQ(b.status, wait_status::ok);
  EXPECT_TRUE(ev.is_set());  // waiting does not consume anything
}

TEST(ManualResetEvent, SetWakesEveryCurrentWaiterOnItsScheduler) {
  test_scheduler s;
  manual_reset_event ev;
  std::array<probe, 4> probes;
  std::stop_source src;
  for (std::size_t i = 0; i < probes.size(); ++i) {
    if (i % 2 == 0) {
      s.spawn(plain_waiter(ev, probes[i]));
    } else {
      s.spawn(stoppable_waiter(ev, src.get_token(), probes[i]));
    }
  }
  s.run();
  for (const auto& p : probes) {
    EXPECT_EQ(p.started, 1);
    EXPECT_EQ(p.resumed, 0);
  }

  ev.set();
  EXPECT_TRUE(ev.is_set());
  EXPECT_EQ(s.ready_count(), probes.size());  // all posted, none run inline by set()
  for (const auto& p : probes) EXPECT_EQ(p.resumed, 0);

  s.run();
  for (const auto& p : probes) {
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::ok);
  }
  src.request_stop();  // after completion: no effect
  EXPECT_EQ(s.ready_count(), 0U);
}

TEST(ManualResetEvent, ResetAffectsOnlyLaterWaits) {
  test_scheduler s;
  manual_reset_event ev;
  probe early;
  s.spawn(plain_waiter(ev, early));
  s.run();

  ev.set();
  ev.reset();  // the early waiter was already woken: it stays woken
  probe late;
  s.spawn(plain_waiter(ev, late));
  s.run();
  EXPECT_EQ(early.resumed, 1);
  EXPECT_EQ(late.started, 1);
  EXPECT_EQ(late.resumed, 0);  // the reset event blocks new waits

  ev.set();
  s.run();
  EXPECT_EQ(late.resumed, 1);
  EXPECT_EQ(early.resumed, 1);
}

// ---------------------------------------------------------------------------------------------
// Cancellation

TEST(ManualResetEvent, AlreadyStoppedTokenCancelsAtOnce) {
  for (const bool initially_set : {false, true}) {
    test_scheduler s;
    manual_reset_event ev(initially_set);
    std::stop_source src;
    src.request_stop();
    probe p;
    s.spawn(stoppable_waiter(ev, src.get_token(), p));
    EXPECT_EQ(s.run(), 1U);  // never suspended
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::cancelled);
    EXPECT_EQ(ev.is_set(), initially_set);
  }
}

TEST(ManualResetEvent, StopWhileSuspendedCancelsAndResumesOnce) {
  test_scheduler s;
  manual_reset_event ev;
  std::stop_source src;
  probe cancelled;
  probe other;
  s.spawn(stoppable_waiter(ev, src.get_token(), cancelled));
  s.spawn(plain_waiter(ev, other));
  s.run();

  src.request_stop();
  EXPECT_EQ(s.ready_count(), 1U);  // posted to its scheduler, not resumed inline
  EXPECT_EQ(cancelled.resumed, 0);
  s.run();
  EXPECT_EQ(cancelled.resumed, 1);
  EXPECT_EQ(cancelled.status, wait_status::cancelled);

  ev.set();  // must not touch the cancelled (unlinked) waiter
  s.run();
  EXPECT_EQ(cancelled.resumed, 1);
  EXPECT_EQ(other.resumed, 1);
}

TEST(ManualResetEvent, StopAfterWakeIsOk) {
  test_scheduler s;
  manual_reset_event ev;
  std::stop_source src;
  probe p;
  s.spawn(stoppable_waiter(ev, src.get_token(), p));
  s.run();

  ev.set();            // claims the waiter; its resumption is queued
  src.request_stop();  // too late: the waker claimed it first
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
}

// ---------------------------------------------------------------------------------------------
// Deterministic races at the waiter core's interleaving points

TEST(ManualResetEvent, SetAtPublishedCompletesWithoutSuspending) {
  test_scheduler s;
  manual_reset_event ev;
  probe p;
  s.at(test_point::published, [&] { ev.set(); });
  s.spawn(plain_waiter(ev, p));
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
}

TEST(ManualResetEvent, SetAtBeforeArmCompletesWithoutSuspending) {
  test_scheduler s;
  manual_reset_event ev;
  std::stop_source src;
  probe p;
  s.at(test_point::before_arm, [&] { ev.set(); });
  s.spawn(stoppable_waiter(ev, src.get_token(), p));
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
  src.request_stop();  // the stop callback is gone
  EXPECT_EQ(s.run(), 0U);
  EXPECT_EQ(p.resumed, 1);
}

TEST(ManualResetEvent, StopAtPublishedOrBeforeArmCancelsWithoutSuspending) {
  for (const test_point point : {test_point::published, test_point::before_arm}) {
    test_scheduler s;
    manual_reset_event ev;
    std::stop_source src;
    probe p;
    s.at(point, [&] { src.request_stop(); });
    s.spawn(stoppable_waiter(ev, src.get_token(), p));
    EXPECT_EQ(s.run(), 1U);
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::cancelled);
    ev.set();  // the node was unlinked: nothing to wake
    EXPECT_EQ(s.run(), 0U);
    EXPECT_EQ(p.resumed, 1);
  }
}

TEST(ManualResetEvent, StopAtClaimedForWakeIsOk) {
  test_scheduler s;
  manual_reset_event ev;
  std::stop_source src;
  probe p;
  s.spawn(stoppable_waiter(ev, src.get_token(), p));
  s.run();

  s.at(test_point::claimed_for_wake, [&] { src.request_stop(); });
  ev.set();
  EXPECT_EQ(s.pending_actions(), 0U);
  s.run();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
}

TEST(ManualResetEvent, ResetAtClaimedForWakeDoesNotUndoTheWake) {
  test_scheduler s;
  manual_reset_event ev;
  probe p;
  s.spawn(plain_waiter(ev, p));
  s.run();

  s.at(test_point::claimed_for_wake, [&] { ev.reset(); });
  ev.set();
  EXPECT_FALSE(ev.is_set());
  s.run();
  EXPECT_EQ(p.resumed, 1);
}

TEST(ManualResetEvent, SetAtClaimedForCancelDoesNotWakeTheCancelledWaiterTwice) {
  test_scheduler s;
  manual_reset_event ev;
  std::stop_source src;
  probe cancelled;
  probe other;
  s.spawn(stoppable_waiter(ev, src.get_token(), cancelled));
  s.spawn(plain_waiter(ev, other));
  s.run();

  s.at(test_point::claimed_for_cancel, [&] { ev.set(); });
  src.request_stop();
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_EQ(s.ready_count(), 2U);  // one resumption each
  s.run();
  EXPECT_EQ(cancelled.resumed, 1);
  EXPECT_EQ(cancelled.status, wait_status::cancelled);
  EXPECT_EQ(other.resumed, 1);
  EXPECT_EQ(other.status, wait_status::ok);
  EXPECT_TRUE(ev.is_set());
}

// ---------------------------------------------------------------------------------------------
// Destroying a suspended waiter

TEST(ManualResetEvent, DestroyingASuspendedWaiterUnlinksIt) {
  test_scheduler s;
  manual_reset_event ev;
  std::stop_source src;
  probe doomed_plain;
  probe doomed_stoppable;
  probe first;
  probe survivor;
  auto t1 = plain_waiter(ev, doomed_plain);
  auto t2 = stoppable_waiter(ev, src.get_token(), doomed_stoppable);
  s.spawn(plain_waiter(ev, first));  // the doomed nodes are unlinked from the middle of the queue
  start_owned(s, t1);
  start_owned(s, t2);
  s.spawn(plain_waiter(ev, survivor));
  s.run();
  ASSERT_EQ(doomed_plain.started, 1);
  ASSERT_EQ(doomed_stoppable.started, 1);

  t1 = {};  // destroys the suspended frames: their nodes must leave the list
  t2 = {};
  src.request_stop();  // the stop callback was deregistered with the frame
  EXPECT_EQ(s.ready_count(), 0U);
  ev.set();  // would touch freed memory if a node were still linked
  s.run();
  EXPECT_EQ(doomed_plain.resumed, 0);
  EXPECT_EQ(doomed_stoppable.resumed, 0);
  EXPECT_EQ(first.resumed, 1);
  EXPECT_EQ(survivor.resumed, 1);
}

// ---------------------------------------------------------------------------------------------
// Plain threads and block_on

TEST(ManualResetEvent, WaitBlockingReturnsOnceSet) {
  manual_reset_event ev;
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&] {
      ev.wait_blocking();
      finished.fetch_add(1);
    });
  }
  ev.set();
  for (auto& t : threads) t.join();
  EXPECT_EQ(finished.load(), 3);
  ev.wait_blocking();  // already set: returns at once
}

TEST(ManualResetEvent, WaitTimeoutTimesOutWhenNotSet) {
  manual_reset_event ev;
  EXPECT_TRUE(ev.wait_timeout(1ms).timed_out());
  EXPECT_TRUE(ev.wait_timeout(0ms).timed_out());
  ev.set();  // the timed-out nodes are gone: must not be touched
  EXPECT_TRUE(ev.wait_timeout(0ms).ok());
  EXPECT_TRUE(ev.wait_timeout(1h).ok());
}

TEST(ManualResetEvent, WaitTimeoutCompletesWhenSetByAnotherThread) {
  manual_reset_event ev;
  std::optional<wait_status> status;
  std::thread waiter([&] { status = ev.wait_timeout(1h).status(); });
  ev.set();
  waiter.join();
  EXPECT_EQ(status, wait_status::ok);
}

TEST(ManualResetEvent, WaitBlockingWithStopToken) {
  manual_reset_event ev(true);
  std::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(ev.wait_blocking(stopped.get_token()).cancelled());  // even though set

  ev.reset();
  std::stop_source src;
  std::optional<wait_status> status;
  std::thread waiter([&] { status = ev.wait_blocking(src.get_token()).status(); });
  src.request_stop();
  waiter.join();
  EXPECT_EQ(status, wait_status::cancelled);

  std::stop_source unused;
  std::thread woken([&] { status = ev.wait_blocking(unused.get_token()).status(); });
  ev.set();
  woken.join();
  EXPECT_EQ(status, wait_status::ok);
}

TEST(ManualResetEvent, BlockOnWaits) {
  manual_reset_event ev;
  std::stop_source src;
  src.request_stop();
  EXPECT_TRUE(block_on(ev.wait(src.get_token())).cancelled());

  std::optional<wait_status> status;
  probe p;
  std::thread waiter([&] {
    block_on(ev.wait());
    status = block_on(ev.wait(std::stop_token{})).status();
    block_on(plain_waiter(ev, p));  // a task without a scheduler, resumed inline
  });
  ev.set();
  waiter.join();
  EXPECT_EQ(status, wait_status::ok);
  EXPECT_EQ(p.resumed, 1);
}

TEST(ManualResetEvent, BlockOnWaitIsCancelledByAStopFromAnotherThread) {
  manual_reset_event ev;
  std::stop_source src;
  std::optional<wait_status> status;
  std::thread waiter([&] { status = block_on(ev.wait(src.get_token())).status(); });
  src.request_stop();  // resumes the block_on driver inline on this thread if it had suspended
  waiter.join();
  EXPECT_EQ(status, wait_status::cancelled);
}

// ---------------------------------------------------------------------------------------------
// Stress: tasks on a thread pool and plain threads wait (some cancellably) while another thread
// sets the event; every waiter finishes, and every ok wait observes what was written before set().

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
      std::fprintf(stderr, "manual_reset_event stress: %d waiter(s) never finished\n", remaining_);
      std::abort();
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int remaining_;
};

struct stress_round {
  manual_reset_event& ev;
  int round = 0;
  int payload = 0;  // written before set(); read (non-atomically) after an ok wait
  std::stop_source stop;
  std::atomic<int> ok{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> bad{0};
  completion finished;

  stress_round(manual_reset_event& e, int r, int waiters) : ev(e), round(r), finished(waiters) {}

  void record(wait_status st) {
    if (st == wait_status::ok) {
      ok.fetch_add(1);
      if (payload != round) bad.fetch_add(1);
    } else if (st == wait_status::cancelled) {
      cancelled.fetch_add(1);
    } else {
      bad.fetch_add(1);
    }
  }
};

task<> stress_task(stress_round& r, bool stoppable) {
  if (stoppable) {
    r.record((co_await r.ev.wait(r.stop.get_token())).status());
  } else {
    co_await r.ev.wait();
    r.record(wait_status::ok);
  }
  r.finished.done();
}

TEST(ManualResetEvent, StressEveryWaiterFinishesAfterSet) {
  constexpr int max_rounds = 300;
  constexpr int pool_waiters = 4;
  constexpr int thread_waiters = 3;
  const auto deadline = std::chrono::steady_clock::now() + 1s;

  manual_reset_event ev;
  asyncband::runtime::thread_pool pool(2);
  int rounds = 0;
  int total_ok = 0;
  int total_cancelled = 0;
  for (; rounds < max_rounds && std::chrono::steady_clock::now() < deadline; ++rounds) {
    ev.reset();
    auto r = std::make_unique<stress_round>(ev, rounds + 1, pool_waiters + thread_waiters);
    const bool cancel_this_round = rounds % 3 == 0;

    for (int i = 0; i < pool_waiters; ++i) asyncband::runtime::spawn(pool.ref(), stress_task(*r, i % 2 == 1));
    std::vector<std::thread> threads;
    threads.emplace_back([&r] {
      r->ev.wait_blocking();
      r->record(wait_status::ok);
      r->finished.done();
    });
    threads.emplace_back([&r] {
      r->record(r->ev.wait_blocking(r->stop.get_token()).status());
      r->finished.done();
    });
    threads.emplace_back([&r] {
      r->record(block_on(r->ev.wait(r->stop.get_token())).status());
      r->finished.done();
    });
    std::thread setter([&r, cancel_this_round] {
      r->payload = r->round;
      if (cancel_this_round) r->stop.request_stop();
      r->ev.set();
    });

    r->finished.wait_or_abort(30s);
    setter.join();
    for (auto& t : threads) t.join();

    EXPECT_EQ(r->bad.load(), 0) << "round " << r->round;
    // 2 of the pool tasks and the first thread cannot be cancelled.
    EXPECT_GE(r->ok.load(), pool_waiters / 2 + 1);
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

TEST(ManualResetEventLifetime, TheWaiterMayDestroyTheEventWhileSetReturns) {
  asyncband_test::waiter_destroys_while_the_waker_returns(
      [] { return std::make_unique<asyncband::manual_reset_event>(); },
      [](asyncband::manual_reset_event& ev) { ev.set(); },
      [](asyncband::manual_reset_event& ev) { ev.wait_blocking(); });
}

}  // namespace
