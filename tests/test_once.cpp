// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::once: one run to success among concurrent callers; a failed run (its f
// threw, its caller was cancelled after the run came to it, or was destroyed) passes to exactly
// one waiting caller, and its exception reaches that caller only; wait() (not ended by a failed
// run); cancellation and the deterministic races at the waiter core's test points; the blocking
// twins; where a run starts; misuse; "last one out"; a bounded multi-threaded stress test.
#include "asyncband/once.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/manual_reset_event.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/stop_token.hpp"
#include "support/destroyed_with_waiters.hpp"
#include "support/last_one_out.hpp"
#include "support/lifetime.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"
#include "support/thread_hook.hpp"
#include "support/wait_contract.hpp"

namespace {

using namespace asyncband_test;
using asyncband::block_on;
using asyncband::manual_reset_event;
using asyncband::once;
using asyncband::runtime::thread_pool;

/// Thrown by an initialiser that fails; carries the id of the caller whose initialiser it was.
struct init_failure {
  int id;
};

/// The runs of one test, in the order they started, and how many were in progress at once.
struct run_log {
  std::vector<int> order;
  int active = 0;
  int max_active = 0;
};

/// One caller's own initialiser, scripted: it records its run, waits for `hold` when `held` (the
/// run stays in progress until the test sets it), then fails (throws init_failure{id}) or not.
struct script {
  int id = 0;
  bool held = false;
  bool fails = false;
  manual_reset_event hold;
  run_log* log = nullptr;
  int runs = 0;
  int ended = 0;                // ran to its end (failed or not)
  int frames_gone = 0;          // its frame was destroyed (at its end, or destroyed mid-run)
  asyncband::stop_token token;  // what the run was called with
};

/// In a run's frame: counts the frame's destruction, however it goes.
struct frame_watch {
  script& sc;
  explicit frame_watch(script& s) : sc(s) {}
  frame_watch(const frame_watch&) = delete;
  frame_watch& operator=(const frame_watch&) = delete;
  ~frame_watch() {
    ++sc.frames_gone;
    --sc.log->active;
  }
};

task<void> scripted_run(script& sc, asyncband::stop_token token) {
  ++sc.runs;
  sc.token = std::move(token);
  sc.log->order.push_back(sc.id);
  sc.log->max_active = std::max(sc.log->max_active, ++sc.log->active);
  const frame_watch watch{sc};
  if (sc.held) co_await sc.hold.wait();
  ++sc.ended;
  if (sc.fails) throw init_failure{sc.id};
}

/// The caller's f: takes the call's stop token, returns a task.
auto initializer(script& sc) {
  return [&sc](asyncband::stop_token token) { return scripted_run(sc, std::move(token)); };
}

/// A caller's record: a probe (resumed, status), plus the id of the init_failure it caught.
struct call_probe : probe {
  std::optional<int> thrown;
};

/// One call_once with `sc` as its f (cancellable when given a token), recorded in `p`.
task<void> call(once& o, script& sc, call_probe& p, std::optional<asyncband::stop_token> token) {
  ++p.started;
  try {
    if (token) {
      const auto r = co_await o.call_once(initializer(sc), *token);
      p.finish(r.status());
    } else {
      co_await o.call_once(initializer(sc));
      p.finish(wait_status::ok);
    }
  } catch (const init_failure& e) {
    p.thrown = e.id;
    ++p.resumed;
  }
}

/// A once, a test scheduler, and N scripted callers (caller i runs script i, stops with stop[i]).
template <std::size_t N>
struct stage {
  test_scheduler s;
  once o;
  run_log log;
  std::array<script, N> sc;
  std::array<call_probe, N> p;
  std::array<asyncband::stop_source, N> stop;

  stage() {
    for (std::size_t i = 0; i < N; ++i) {
      sc[i].id = p[i].id = static_cast<int>(i);
      sc[i].log = &log;
    }
  }
  std::optional<asyncband::stop_token> token_of(std::size_t i, bool stoppable) {
    if (!stoppable) return std::nullopt;
    return stop[i].get_token();
  }
  /// Caller i, detached on the scheduler (it starts at the next step).
  void spawn(std::size_t i, bool stoppable = false) { s.spawn(call(o, sc[i], p[i], token_of(i, stoppable))); }
  /// Caller i, owned by the test (which may destroy it), started on the scheduler.
  task<void> owned(std::size_t i, bool stoppable = false) {
    auto t = call(o, sc[i], p[i], token_of(i, stoppable));
    start_on(s, t);
    return t;
  }
  /// Caller i with no scheduler, started now (resumed inline by whoever resolves it).
  task<void> inline_caller(std::size_t i) {
    auto t = call(o, sc[i], p[i], std::nullopt);
    t.handle().resume();
    return t;
  }
};

void expect_ok(const call_probe& p) {
  EXPECT_EQ(p.resumed, 1) << "caller " << p.id;
  EXPECT_EQ(p.status, wait_status::ok) << "caller " << p.id;
  EXPECT_FALSE(p.thrown.has_value()) << "caller " << p.id << " got another's exception";
}
void expect_threw_its_own(const call_probe& p) {
  EXPECT_EQ(p.resumed, 1) << "caller " << p.id;
  EXPECT_EQ(p.thrown, p.id) << "caller " << p.id;
  EXPECT_FALSE(p.status.has_value()) << "caller " << p.id;
}
void expect_cancelled(const call_probe& p) {
  EXPECT_EQ(p.resumed, 1) << "caller " << p.id;
  EXPECT_EQ(p.status, wait_status::cancelled) << "caller " << p.id;
  EXPECT_FALSE(p.thrown.has_value()) << "caller " << p.id;
}
void expect_waiting(const call_probe& p) {
  EXPECT_EQ(p.started, 1) << "caller " << p.id;
  EXPECT_EQ(p.resumed, 0) << "caller " << p.id;
}

using order = std::vector<int>;

/// Completes an idle once from this thread (a plain function, run at once): the "wake" of the
/// shared wait() scenarios.
const auto complete = [](once& o) { o.call_once_blocking([] {}); };

// ---------------------------------------------------------------------------------------------
// One run

TEST(Once, TheFirstCallRunsItsInitialiserAndLaterCallsDoNot) {
  stage<3> st;
  EXPECT_FALSE(st.o.is_completed());
  st.spawn(0);
  EXPECT_EQ(st.s.run(), 1U);  // the run came at once; f ran to its end inside the call
  expect_ok(st.p[0]);
  EXPECT_TRUE(st.o.is_completed());
  st.spawn(1);
  st.spawn(2, true);
  EXPECT_EQ(st.s.run(), 2U);  // neither suspended
  expect_ok(st.p[1]);
  expect_ok(st.p[2]);
  EXPECT_EQ(st.log.order, order{0});
  EXPECT_EQ(st.sc[0].frames_gone, 1);
}

TEST(Once, ConcurrentCallersRunOneInitialiser) {
  stage<6> st;
  for (std::size_t i = 0; i < st.sc.size(); ++i) {
    st.sc[i].held = true;
    st.spawn(i, i % 2 == 1);
  }
  st.s.run();
  EXPECT_EQ(st.log.order, order{0});
  for (const auto& p : st.p) expect_waiting(p);
  EXPECT_FALSE(st.o.is_completed());

  st.sc[0].hold.set();
  st.s.run();
  for (const auto& p : st.p) expect_ok(p);
  EXPECT_EQ(st.log.order, order{0});
  EXPECT_EQ(st.log.max_active, 1);
  EXPECT_TRUE(st.o.is_completed());
}

TEST(Once, AFailedRunPassesToExactlyOneWaiterAndItsExceptionReachesOnlyItsCaller) {
  stage<4> st;
  st.sc[0].held = st.sc[0].fails = true;
  st.sc[1].held = true;
  st.spawn(0);
  st.spawn(1);
  st.spawn(2, true);
  st.spawn(3);
  std::array<probe, 2> observers;
  asyncband::stop_source never;
  spawn_alternating_waiters(st.s, st.o, observers, never.get_token());
  st.s.run();

  st.sc[0].hold.set();
  st.s.run();
  expect_threw_its_own(st.p[0]);
  EXPECT_EQ(st.log.order, (order{0, 1}));  // caller 1 (the oldest) runs its own f, and only it
  for (std::size_t i = 1; i < 4; ++i) expect_waiting(st.p[i]);
  for (const auto& o : observers) EXPECT_EQ(o.resumed, 0);  // a failure completes nothing
  EXPECT_FALSE(st.o.is_completed());

  st.sc[1].hold.set();
  st.s.run();
  for (std::size_t i = 1; i < 4; ++i) expect_ok(st.p[i]);
  for (const auto& o : observers) {
    EXPECT_EQ(o.resumed, 1);
    EXPECT_EQ(o.status, wait_status::ok);
  }
  EXPECT_EQ(st.log.order, (order{0, 1}));
  EXPECT_EQ(st.log.max_active, 1);
  EXPECT_TRUE(st.o.is_completed());
}

TEST(Once, EveryFailedRunPassesOnInArrivalOrderThenTheOnceIsIdle) {
  stage<5> st;
  st.sc[0].held = true;
  for (std::size_t i = 0; i < 4; ++i) {
    st.sc[i].fails = true;
    st.spawn(i, i == 2);
  }
  st.s.run();
  st.sc[0].hold.set();
  st.s.run();
  EXPECT_EQ(st.log.order, (order{0, 1, 2, 3}));
  for (std::size_t i = 0; i < 4; ++i) expect_threw_its_own(st.p[i]);
  EXPECT_EQ(st.log.max_active, 1);
  EXPECT_FALSE(st.o.is_completed());

  st.spawn(4);  // nobody waits: the next call runs at once
  EXPECT_EQ(st.s.run(), 1U);
  expect_ok(st.p[4]);
  EXPECT_TRUE(st.o.is_completed());
}

TEST(Once, WaitIsNotEndedByAFailedRunOnlyByASuccess) {
  stage<2> st;
  st.sc[0].held = st.sc[0].fails = true;
  st.spawn(0);
  std::array<probe, 6> observers;
  asyncband::stop_source never;
  spawn_alternating_waiters(st.s, st.o, observers, never.get_token());
  st.s.run();
  st.sc[0].hold.set();
  st.s.run();
  expect_threw_its_own(st.p[0]);
  for (const auto& o : observers) EXPECT_EQ(o.resumed, 0);

  st.spawn(1);  // idle again: runs, succeeds, ends every wait
  st.s.run();
  expect_ok(st.p[1]);
  for (const auto& o : observers) {
    EXPECT_EQ(o.resumed, 1);
    EXPECT_EQ(o.status, wait_status::ok);
  }
  probe late;  // a wait on a completed once never suspends
  st.s.spawn(plain_waiter(st.o, late));
  EXPECT_EQ(st.s.run(), 1U);
  EXPECT_EQ(late.resumed, 1);
}

TEST(Once, AnyAwaitableOrPlainFunctionIsAnInitialiser) {
  struct yields_int {  // a hand-written awaiter, not a task
    static bool await_ready() noexcept { return true; }
    static void await_suspend(std::coroutine_handle<> /*unused*/) noexcept {}
    static int await_resume() noexcept { return 7; }
  };
  int ran = 0;
  once by_awaiter;
  block_on(by_awaiter.call_once([&ran] {
    ++ran;
    return yields_int{};
  }));
  once by_value;
  block_on(by_value.call_once([&ran] { return ++ran; }));  // what f returns is dropped
  once by_void;
  block_on(by_void.call_once([&ran] { ++ran; }));
  once by_task;
  block_on(by_task.call_once([&ran]() -> task<int> { co_return ++ran; }));
  EXPECT_EQ(ran, 4);
  for (const once* o : {&by_awaiter, &by_value, &by_void, &by_task}) EXPECT_TRUE(o->is_completed());
}

// ---------------------------------------------------------------------------------------------
// Cancellation

TEST(Once, AnAlreadyStoppedTokenCancelsAtOnceWithoutRunning) {
  stage<2> st;
  st.stop[0].request_stop();
  st.spawn(0, true);
  EXPECT_EQ(st.s.run(), 1U);
  expect_cancelled(st.p[0]);
  EXPECT_EQ(st.sc[0].runs, 0);
  EXPECT_FALSE(st.o.is_completed());
  already_stopped_token_cancels_at_once(st.o);  // wait(token)
  st.spawn(1);                                  // the once was left idle
  st.s.run();
  expect_ok(st.p[1]);
}

TEST(Once, AStopWhileWaitingCancelsThatCallerOnly) {
  stage<3> st;
  st.sc[0].held = true;
  st.spawn(0);
  st.spawn(1, true);
  st.spawn(2);
  st.s.run();
  st.stop[1].request_stop();
  EXPECT_EQ(st.s.ready_count(), 1U);  // posted to its scheduler, not resumed inline
  st.s.run();
  expect_cancelled(st.p[1]);
  expect_waiting(st.p[2]);

  st.sc[0].hold.set();
  st.s.run();
  expect_ok(st.p[0]);
  expect_ok(st.p[2]);
  EXPECT_EQ(st.p[1].resumed, 1);
  EXPECT_EQ(st.log.order, order{0});
}

TEST(Once, ACancelledWaiterIsSkippedWhenTheRunFails) {
  stage<3> st;
  st.sc[0].held = st.sc[0].fails = true;
  st.spawn(0);
  st.spawn(1, true);
  st.spawn(2);
  st.s.run();
  st.stop[1].request_stop();
  st.sc[0].hold.set();
  st.s.run();
  expect_threw_its_own(st.p[0]);
  expect_cancelled(st.p[1]);
  expect_ok(st.p[2]);
  EXPECT_EQ(st.log.order, (order{0, 2}));
}

// The failure hands the run to caller 1 (claimed, not yet resumed) and its stop is requested
// right then: caller 1 reports cancelled without running, and passes the run on to caller 2, or,
// with nobody after it, leaves the once idle.
TEST(Once, AStopAfterTheRunCameToTheCallerPassesTheRunOn) {
  for (const bool another : {true, false}) {
    SCOPED_TRACE(another ? "another caller waits" : "nobody else waits");
    stage<3> st;
    st.sc[0].held = st.sc[0].fails = true;
    st.spawn(0);
    st.spawn(1, true);
    if (another) st.spawn(2);
    st.s.run();
    st.sc[0].hold.set();  // f0 goes on at the next step; its failure is the next wake-up
    st.s.at(test_point::claimed_for_wake, [&st] { st.stop[1].request_stop(); });
    st.s.run();
    EXPECT_EQ(st.s.pending_actions(), 0U);
    expect_threw_its_own(st.p[0]);
    expect_cancelled(st.p[1]);
    EXPECT_EQ(st.sc[1].runs, 0);
    if (another) {
      expect_ok(st.p[2]);
      EXPECT_EQ(st.log.order, (order{0, 2}));
      EXPECT_TRUE(st.o.is_completed());
    } else {
      EXPECT_EQ(st.log.order, order{0});
      EXPECT_FALSE(st.o.is_completed());
      st.spawn(2);  // idle, not stuck running
      EXPECT_EQ(st.s.run(), 1U);
      expect_ok(st.p[2]);
    }
  }
}

// Regression: a completion is a broadcast. A cancellable caller that the completion claimed, and
// whose stop is requested before it resumes, reports ok, as a wait(token) does: it was handed
// nothing to pass on. It used to report cancelled although the once was completed.
TEST(Once, AStopAfterTheCompletionClaimedTheCallerIsTooLate) {
  stage<2> st;
  st.sc[0].held = true;
  st.spawn(0);
  st.spawn(1, true);
  st.s.run();
  st.sc[0].hold.set();  // f0 goes on at the next step; its completion is the next wake-up
  st.s.at(test_point::claimed_for_wake, [&st] { st.stop[1].request_stop(); });
  st.s.run();
  EXPECT_EQ(st.s.pending_actions(), 0U);
  expect_ok(st.p[0]);
  expect_ok(st.p[1]);
  EXPECT_EQ(st.sc[1].runs, 0);
  EXPECT_TRUE(st.o.is_completed());
}

// The same for a plain thread blocked in call_once_blocking(f, token).
TEST(Once, AStopAfterTheCompletionClaimedABlockedCallerIsTooLate) {
  stage<1> st;
  st.sc[0].held = true;
  st.spawn(0);
  st.s.run();
  asyncband::stop_source src;
  std::latch parked(1);
  std::optional<wait_status> status;
  int runs = 0;
  std::thread blocked([&] {
    const thread_hook hook(test_point::before_arm, [&parked] { parked.count_down(); });
    status = st.o.call_once_blocking([&runs] { ++runs; }, src.get_token()).status();
  });
  parked.wait();
  st.sc[0].hold.set();
  st.s.at(test_point::claimed_for_wake, [&src] { src.request_stop(); });
  st.s.run();  // the completion claims the blocked caller, the stop comes, then it is unparked
  blocked.join();
  EXPECT_EQ(status, wait_status::ok);
  EXPECT_EQ(runs, 0);
}

TEST(Once, AStopAsTheCallerQueuesCancelsItWithoutSuspending) {
  for (const test_point point : before_suspension) {
    SCOPED_TRACE(static_cast<int>(point));
    stage<2> st;
    st.sc[0].held = true;
    st.spawn(0);
    st.s.run();
    st.s.at(point, [&st] { st.stop[1].request_stop(); });
    st.spawn(1, true);
    EXPECT_EQ(st.s.run(), 1U);
    expect_cancelled(st.p[1]);
    st.sc[0].hold.set();
    st.s.run();
    expect_ok(st.p[0]);
    EXPECT_EQ(st.p[1].resumed, 1);
    EXPECT_EQ(st.log.order, order{0});
  }
}

// A stop requested as the first caller queues, the once idle: its wait is granted the run at
// once (without suspending), sees the stop before f runs, and passes the run on: it ends
// cancelled without running, and the next caller runs f (found by review: a wait that
// completed without suspending once ignored a stop seen there, and the run was lost).
TEST(Once, AStopAsAnIdleOncesFirstCallerQueuesCancelsItAndTheRunPassesOn) {
  stage<2> st;
  st.s.at(test_point::queueing, [&st] { st.stop[0].request_stop(); });
  st.spawn(0, true);
  st.s.run();
  expect_cancelled(st.p[0]);
  st.spawn(1);
  st.s.run();
  expect_ok(st.p[1]);
  EXPECT_EQ(st.log.order, order{1});
}

// The running f fails while caller 1 is linked but not yet suspended: the run comes to caller 1
// before it arms, and its own f runs at once, without a trip through the scheduler.
TEST(Once, TheRunHandedToACallerBeforeItSuspendsRunsAtOnce) {
  for (const test_point point : before_suspension) {
    SCOPED_TRACE(static_cast<int>(point));
    stage<2> st;
    st.sc[0].held = st.sc[0].fails = true;
    const task<void> runner = st.inline_caller(0);  // its failure runs inline, inside the hook
    st.s.at(point, [&st] { st.sc[0].hold.set(); });
    st.spawn(1);
    EXPECT_EQ(st.s.run(), 1U);
    EXPECT_EQ(st.s.pending_actions(), 0U);
    expect_threw_its_own(st.p[0]);
    expect_ok(st.p[1]);
    EXPECT_EQ(st.log.order, (order{0, 1}));
    EXPECT_TRUE(runner.done());
  }
}

TEST(Once, AStopDuringTheCallersOwnRunDoesNotInterruptIt) {
  for (const bool fails : {false, true}) {
    SCOPED_TRACE(fails ? "f fails" : "f succeeds");
    stage<2> st;
    st.sc[0].held = true;
    st.sc[0].fails = fails;
    st.spawn(0, true);
    st.spawn(1);
    st.s.run();
    EXPECT_EQ(st.sc[0].token, st.stop[0].get_token());  // f received the caller's token
    st.stop[0].request_stop();
    EXPECT_EQ(st.s.ready_count(), 0U);  // nothing resumed: the run goes on
    EXPECT_TRUE(st.sc[0].token.stop_requested());
    st.sc[0].hold.set();
    st.s.run();
    if (fails) {
      expect_threw_its_own(st.p[0]);  // its own outcome, never turned into cancelled
      EXPECT_EQ(st.log.order, (order{0, 1}));
    } else {
      expect_ok(st.p[0]);
      EXPECT_EQ(st.log.order, order{0});
    }
    expect_ok(st.p[1]);
  }
}

TEST(Once, TheInitialiserReceivesTheCallersStopToken) {
  stage<6> st;
  asyncband::stop_source src;
  st.spawn(0);  // no token: f gets one that can never be stopped
  st.s.run();
  EXPECT_FALSE(st.sc[0].token.stop_possible());

  once coroutine_form;
  EXPECT_TRUE(block_on(coroutine_form.call_once(initializer(st.sc[1]), src.get_token())).ok());
  EXPECT_EQ(st.sc[1].token, src.get_token());

  once blocking;
  EXPECT_TRUE(blocking.call_once_blocking(initializer(st.sc[2]), src.get_token()).ok());
  EXPECT_EQ(st.sc[2].token, src.get_token());
  once blocking_plain;
  blocking_plain.call_once_blocking(initializer(st.sc[3]));
  EXPECT_FALSE(st.sc[3].token.stop_possible());
  once timeout;
  EXPECT_TRUE(timeout.call_once_timeout(initializer(st.sc[4]), 1h).ok());
  EXPECT_FALSE(st.sc[4].token.stop_possible());
  once plain_function;  // a plain function taking the token, in the coroutine form
  asyncband::stop_token seen;
  EXPECT_TRUE(block_on(plain_function.call_once([&seen](asyncband::stop_token t) { seen = std::move(t); },
                                                src.get_token()))
                  .ok());
  EXPECT_EQ(seen, src.get_token());
}

// ---------------------------------------------------------------------------------------------
// Destroyed callers

TEST(Once, DestroyingAWaitingCallerUnlinksIt) {
  stage<3> st;
  st.sc[0].held = st.sc[0].fails = true;
  st.spawn(0);
  auto doomed = st.owned(1);
  st.spawn(2);
  st.s.run();
  doomed = {};
  st.sc[0].hold.set();
  st.s.run();
  expect_threw_its_own(st.p[0]);
  EXPECT_EQ(st.p[1].resumed, 0);
  expect_ok(st.p[2]);
  EXPECT_EQ(st.log.order, (order{0, 2}));
}

TEST(Once, DestroyingTheCallerWhileItsInitialiserRunsPassesTheRunOn) {
  for (const bool another : {true, false}) {
    SCOPED_TRACE(another ? "another caller waits" : "nobody else waits");
    stage<3> st;
    st.sc[0].held = true;
    auto doomed = st.owned(0);
    if (another) st.spawn(1);
    probe observer;
    st.s.spawn(plain_waiter(st.o, observer));
    st.s.run();
    EXPECT_EQ(st.log.order, order{0});

    doomed = {};  // destroys the run's frame with it: f's own wait is abandoned
    EXPECT_EQ(st.sc[0].frames_gone, 1);
    EXPECT_EQ(st.sc[0].ended, 0);
    st.sc[0].hold.set();  // f's wait was unlinked: nothing to resume
    if (another) {
      EXPECT_EQ(st.s.ready_count(), 1U);  // caller 1's run, handed on by the destruction
      st.s.run();
      expect_ok(st.p[1]);
      EXPECT_EQ(st.log.order, (order{0, 1}));
    } else {
      EXPECT_EQ(st.s.ready_count(), 0U);
      EXPECT_FALSE(st.o.is_completed());
      EXPECT_EQ(observer.resumed, 0);
      st.spawn(2);  // idle: the next call runs
      st.s.run();
      expect_ok(st.p[2]);
      EXPECT_EQ(st.log.order, (order{0, 2}));
    }
    EXPECT_EQ(st.p[0].resumed, 0);
    EXPECT_EQ(observer.resumed, 1);
    EXPECT_TRUE(st.o.is_completed());
  }
}

// The failing run (a blocked thread) has claimed caller 1 for the run but not resolved it when
// caller 1's frame is destroyed (on this thread): the destructor waits for the resolution, then
// passes the run on to caller 2.
TEST(Once, ACallerDestroyedAfterTheRunCameToItPassesTheRunOn) {
  stage<3> st;
  std::latch running(1);
  std::latch proceed(1);
  std::latch claimed(1);
  std::latch destroying(1);
  int thrown = 0;
  std::thread failing_run([&] {
    const thread_hook hook(test_point::claimed_for_wake, [&] {
      claimed.count_down();
      destroying.wait();
    });
    try {
      st.o.call_once_blocking([&] {
        running.count_down();
        proceed.wait();
        throw init_failure{9};
      });
    } catch (const init_failure&) {
      ++thrown;
    }
  });
  running.wait();
  auto doomed = st.inline_caller(1);
  const auto next = st.inline_caller(2);
  expect_waiting(st.p[1]);
  expect_waiting(st.p[2]);
  proceed.count_down();
  claimed.wait();
  {
    const thread_hook hook(test_point::awaiting_resolver, [&] { destroying.count_down(); });
    doomed = {};  // caller 2 runs inline here, once the run is passed on
  }
  failing_run.join();
  EXPECT_EQ(thrown, 1);
  EXPECT_EQ(st.p[1].resumed, 0);
  EXPECT_EQ(st.sc[1].runs, 0);
  expect_ok(st.p[2]);
  EXPECT_EQ(st.log.order, order{2});
  EXPECT_TRUE(next.done());
  EXPECT_TRUE(st.o.is_completed());
}

// ---------------------------------------------------------------------------------------------
// wait(): the contract shared with the events (completion by a run, cancellation, destruction)

TEST(OnceWait, StopWhileSuspendedCancelsAndResumesOnce) {
  once o;
  stop_while_suspended_cancels_and_resumes_once(o, complete);
}

TEST(OnceWait, StopAfterCompletionIsOk) {
  once o;
  stop_after_wake_is_ok(o, complete);
}

TEST(OnceWait, CompletionAtPublishedOrBeforeArmEndsTheWaitWithoutSuspending) {
  wake_before_suspension_completes_without_suspending([] { return once(); }, complete,
                                                      [](once& o) { EXPECT_TRUE(o.is_completed()); });
}

TEST(OnceWait, StopAtPublishedOrBeforeArmCancelsWithoutSuspending) {
  for (const test_point point : before_suspension) {
    SCOPED_TRACE(static_cast<int>(point));
    once o;
    stop_at_point_cancels_without_suspending(point, o, complete);
  }
}

TEST(OnceWait, StopAtClaimedForWakeIsOk) {
  once o;
  stop_at_claimed_for_wake(o, complete, wait_status::ok);
}

TEST(OnceWait, CompletionAtClaimedForCancelDoesNotWakeTheCancelledWaiterTwice) {
  once o;
  wake_at_claimed_for_cancel_goes_to_the_other_waiter(o, complete);
}

TEST(OnceWait, DestroyingSuspendedWaitersUnlinksThem) {
  once o;
  destroying_suspended_waiters_unlinks_them(o, complete);
}

TEST(OnceWait, BlockingForms) {
  once o;
  EXPECT_TRUE(o.wait_timeout(0ms).timed_out());
  wait_timeout_completes_when_woken_by_another_thread(o, complete);
  once cancelled;
  blocking_wait_is_cancelled_by_another_thread(cancelled);
  EXPECT_FALSE(cancelled.is_completed());
  blocking_wait_is_woken_by_another_thread(cancelled, complete);
  once by_block_on;
  block_on_waits_complete_when_woken_by_another_thread(by_block_on, complete);
  once stopped;
  block_on_wait_is_cancelled_by_another_thread(stopped);
}

// ---------------------------------------------------------------------------------------------
// Blocking twins

TEST(Once, CallOnceBlockingFromManyThreadsRunsOnce) {
  once o;
  std::atomic<int> runs{0};
  int written = 0;  // by the run; read by every caller after its call (TSan checks the order)
  std::atomic<int> saw_it{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      o.call_once_blocking([&] {
        runs.fetch_add(1);
        written = 1;
      });
      if (written == 1) saw_it.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(saw_it.load(), 4);
  EXPECT_TRUE(o.is_completed());
}

TEST(Once, CallOnceBlockingRunsATaskReturningInitialiserAndOthersWaitForIt) {
  once o;
  manual_reset_event release;
  std::latch running(1);
  std::atomic<int> runs{0};
  std::thread first([&] {
    o.call_once_blocking([&]() -> task<void> {
      runs.fetch_add(1);
      running.count_down();
      co_await release.wait();
    });
  });
  running.wait();
  std::vector<std::thread> others;
  for (int i = 0; i < 2; ++i) {
    others.emplace_back([&] { o.call_once_blocking([&] { runs.fetch_add(1); }); });
  }
  release.set();  // resumes the task inline here; then `first` completes the once, waking the others
  first.join();
  for (auto& t : others) t.join();
  EXPECT_EQ(runs.load(), 1);
  EXPECT_TRUE(o.is_completed());
}

TEST(Once, CallOnceTimeoutTimesOutWhileAnotherThreadRuns) {
  once o;
  std::latch running(1);
  std::latch proceed(1);
  std::thread runner([&] {
    o.call_once_blocking([&] {
      running.count_down();
      proceed.wait();
    });
  });
  running.wait();
  bool ran = false;
  const auto mine = [&ran] { ran = true; };
  EXPECT_TRUE(o.call_once_timeout(mine, 1ms).timed_out());
  EXPECT_TRUE(o.call_once_timeout(mine, 0ms).timed_out());
  EXPECT_TRUE(o.wait_timeout(0ms).timed_out());
  proceed.count_down();
  runner.join();
  EXPECT_TRUE(o.call_once_timeout(mine, 0ms).ok());
  EXPECT_FALSE(ran);

  once idle;  // the timeout bounds the wait, never a run: a free run is taken even with 0ms
  EXPECT_TRUE(idle.call_once_timeout(mine, 0ms).ok());
  EXPECT_TRUE(ran);
}

TEST(Once, CallOnceBlockingWithAStopToken) {
  once o;
  asyncband::stop_source stopped;
  stopped.request_stop();
  bool ran = false;
  const auto mine = [&ran] { ran = true; };
  EXPECT_TRUE(o.call_once_blocking(mine, stopped.get_token()).cancelled());
  EXPECT_FALSE(ran);

  std::latch running(1);
  std::latch proceed(1);
  std::thread runner([&] {
    o.call_once_blocking([&] {
      running.count_down();
      proceed.wait();
    });
  });
  running.wait();
  asyncband::stop_source src;
  std::thread stopper([&src] { src.request_stop(); });
  EXPECT_TRUE(o.call_once_blocking(mine, src.get_token()).cancelled());  // before or while waiting
  stopper.join();
  proceed.count_down();
  runner.join();
  asyncband::stop_source unused;
  EXPECT_TRUE(o.call_once_blocking(mine, unused.get_token()).ok());
  EXPECT_FALSE(ran);
}

// A coroutine's run fails while a plain thread waits: the thread runs its own f next.
TEST(Once, ABlockedThreadRunsNextWhenACoroutinesRunFails) {
  stage<2> st;
  st.sc[0].held = st.sc[0].fails = true;
  st.spawn(0);
  st.s.run();
  std::latch parked(1);
  std::thread blocked([&] {
    const thread_hook hook(test_point::before_arm, [&parked] { parked.count_down(); });
    st.o.call_once_blocking(initializer(st.sc[1]));
  });
  parked.wait();
  st.sc[0].hold.set();
  st.s.run();  // f0 throws; its failure unparks the thread, which runs f1 through block_on
  blocked.join();
  expect_threw_its_own(st.p[0]);
  EXPECT_EQ(st.log.order, (order{0, 1}));
  EXPECT_EQ(st.sc[1].ended, 1);
  EXPECT_TRUE(st.o.is_completed());
}

// The failure hands the run to a blocked thread whose stop is requested right then: the thread
// reports cancelled without running and passes the run on (from its own thread) to caller 2.
TEST(Once, ABlockedCallerStoppedAfterTheRunCameToItPassesTheRunOn) {
  stage<3> st;
  st.sc[0].held = st.sc[0].fails = true;
  st.spawn(0);
  st.s.run();
  asyncband::stop_source src;
  std::latch parked(1);
  std::optional<wait_status> status;
  std::thread blocked([&] {
    const thread_hook hook(test_point::before_arm, [&parked] { parked.count_down(); });
    status = st.o.call_once_blocking(initializer(st.sc[1]), src.get_token()).status();
  });
  parked.wait();
  st.spawn(2);  // queued after the thread
  st.s.run();
  st.sc[0].hold.set();
  st.s.at(test_point::claimed_for_wake, [&src] { src.request_stop(); });
  ASSERT_TRUE(st.s.step());  // f0 throws; its failure hands the run to the thread, then the stop
  blocked.join();            // the scheduler is the thread's until then: it posts caller 2's run
  EXPECT_EQ(st.s.pending_actions(), 0U);
  EXPECT_EQ(status, wait_status::cancelled);
  EXPECT_EQ(st.sc[1].runs, 0);
  EXPECT_EQ(st.s.ready_count(), 1U);
  st.s.run();
  expect_threw_its_own(st.p[0]);
  expect_ok(st.p[2]);
  EXPECT_EQ(st.log.order, (order{0, 2}));
}

// A plain thread's f throws: the exception reaches that thread, and a waiting coroutine runs next.
TEST(Once, ABlockingCallersExceptionReachesItAndAWaitingCoroutineRunsNext) {
  stage<2> st;
  std::latch running(1);
  std::latch proceed(1);
  std::optional<int> thrown;
  std::thread runner([&] {
    try {
      st.o.call_once_blocking([&] {
        running.count_down();
        proceed.wait();
        throw init_failure{5};
      });
    } catch (const init_failure& e) {
      thrown = e.id;
    }
  });
  running.wait();
  st.spawn(1);
  st.s.run();
  expect_waiting(st.p[1]);
  proceed.count_down();
  runner.join();  // the failure posted caller 1's run to the scheduler from that thread
  EXPECT_EQ(thrown, 5);
  EXPECT_EQ(st.s.ready_count(), 1U);
  st.s.run();
  expect_ok(st.p[1]);
  EXPECT_EQ(st.log.order, order{1});
}

// ---------------------------------------------------------------------------------------------
// Where a run starts: on its caller's scheduler, not on the failing run's

TEST(Once, ARunHandedOnStartsOnTheCallersScheduler) {
  for (const bool plain_function : {false, true}) {
    SCOPED_TRACE(plain_function ? "a plain function" : "a task");
    stage<2> st;  // st.s runs the failing caller
    st.sc[0].held = st.sc[0].fails = true;
    st.spawn(0);
    st.s.run();
    test_scheduler mine;  // caller 1's
    manual_reset_event inside;
    int runs = 0;
    auto caller = [&]() -> task<void> {
      if (plain_function) {
        co_await st.o.call_once([&runs] { ++runs; });
      } else {
        co_await st.o.call_once([&]() -> task<void> {
          ++runs;
          co_await inside.wait();  // its own waits resume on the caller's scheduler too
        });
      }
      st.p[1].finish(wait_status::ok);
    };
    mine.spawn(caller());
    mine.run();
    st.sc[0].hold.set();
    st.s.run();  // f0 fails: caller 1's run is posted to its own scheduler, not run here
    expect_threw_its_own(st.p[0]);
    EXPECT_EQ(runs, 0);
    EXPECT_EQ(st.s.ready_count(), 0U);
    EXPECT_EQ(mine.ready_count(), 1U);
    mine.step();
    EXPECT_EQ(runs, 1);
    if (!plain_function) {
      inside.set();
      EXPECT_EQ(st.s.ready_count(), 0U);
      EXPECT_EQ(mine.ready_count(), 1U);
    }
    mine.run();
    EXPECT_EQ(st.p[1].resumed, 1);
    EXPECT_TRUE(st.o.is_completed());
  }
}

task<void> call_from_pool(thread_pool& pool, once& o, std::latch& queued, std::thread::id& ran_on,
                          std::latch& done) {
  co_await pool.schedule();
  {
    const thread_hook hook(test_point::before_arm, [&queued] { queued.count_down(); });
    co_await o.call_once([&ran_on] { ran_on = std::this_thread::get_id(); });
  }
  done.count_down();
}

TEST(Once, ARunHandedOnFromAnotherThreadRunsOnTheCallersPool) {
  thread_pool pool(1);
  const std::thread::id worker = block_on([](thread_pool& p) -> task<std::thread::id> {
    co_await p.schedule();
    co_return std::this_thread::get_id();
  }(pool));
  stage<1> st;
  st.sc[0].held = st.sc[0].fails = true;
  const task<void> failing = st.inline_caller(0);
  std::latch queued(1);
  std::latch done(1);
  std::thread::id ran_on;
  asyncband::runtime::spawn(pool.ref(), call_from_pool(pool, st.o, queued, ran_on, done));
  queued.wait();
  st.sc[0].hold.set();  // the failure, on this thread, hands the run to the pool caller
  done.wait();
  expect_threw_its_own(st.p[0]);
  EXPECT_EQ(ran_on, worker);
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(st.o.is_completed());
}

// ---------------------------------------------------------------------------------------------
// Misuse

// An awaiter is awaited once. Its first await waited, ran its own f when the run came to it and
// threw; awaiting it again (the once is idle, so it would suspend) throws std::logic_error.
TEST(Once, AwaitingACallAgainAfterItSuspendedThrows) {
  stage<2> st;
  st.sc[0].held = st.sc[0].fails = true;
  st.sc[1].fails = true;
  st.spawn(0);
  int caught = 0;
  int misuse = 0;
  auto body = [&]() -> task<void> {
    auto call = st.o.call_once(initializer(st.sc[1]));
    try {
      co_await call;
    } catch (const init_failure&) {
      ++caught;
    }
    try {
      co_await call;
    } catch (const std::logic_error&) {
      ++misuse;
    }
  };
  st.s.spawn(body());
  st.s.run();
  st.sc[0].hold.set();
  st.s.run();
  EXPECT_EQ(caught, 1);
  EXPECT_EQ(misuse, 1);
  EXPECT_EQ(st.log.order, (order{0, 1}));
  EXPECT_FALSE(st.o.is_completed());
}

TEST(OnceDeathTest, DestroyingAOnceWithAPendingWaitAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto wait_on = [](once& o) -> task<void> { co_await o.wait(); };
  EXPECT_DEATH(destroy_while_waiting(std::make_unique<once>(), wait_on),
               "asyncband::once destroyed with pending calls");
}

TEST(OnceDeathTest, DestroyingAOnceWhileACallRunsItsInitialiserAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto destroy_while_running = [] {
    auto o = std::make_unique<once>();
    auto* const ev = new asyncband::manual_reset_event;  // leaked in the dying child on purpose
    auto* const t = new task<void>([](once& o, asyncband::manual_reset_event& go) -> task<void> {
      co_await o.call_once([&go] { return go.wait(); });
    }(*o, *ev));
    t->handle().resume();  // runs until its initialiser waits: nobody is queued, a call runs
    o.reset();
  };
  EXPECT_DEATH(destroy_while_running(), "asyncband::once destroyed with pending calls");
}

// ---------------------------------------------------------------------------------------------
// "Last one out": a waiter that sees the once completed may destroy it at once, while the run
// that completed it is still returning.

TEST(OnceLifetime, TheWaiterMayDestroyTheOnceWhileTheCompletingRunReturns) {
  const auto make = [] { return std::make_unique<once>(); };
  const auto wait = [](once& o) { o.wait_blocking(); };
  waiter_destroys_while_the_waker_returns(make, complete, wait);
  waiter_destroys_while_the_waker_returns(
      make, [](once& o) { block_on(o.call_once([]() -> task<void> { co_return; })); }, wait);
}

/// A suspension the test ends by hand: no wait queue, so no test point on the way (a lifetime
/// row's hooks then fire on the once's own wake-ups only). Copy-safe: it writes through a pointer.
struct suspend_into {
  std::coroutine_handle<>* slot;
  static bool await_ready() noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const noexcept { *slot = h; }
  static void await_resume() noexcept {}
};

struct once_world {
  once o;
};

/// The completing side: a caller holding the run (its f suspended), and how that run will end.
struct once_waker : lifetime::waker_base {
  std::coroutine_handle<> run;  // the suspended f
  bool fails = false;
  int thrown = 0;
  task<void> runner;
};

task<void> held_run(once& o, once_waker& k) {
  try {
    co_await o.call_once([&k]() -> task<void> {
      co_await suspend_into{&k.run};
      if (k.fails) throw init_failure{0};
    });
  } catch (const init_failure&) {
    ++k.thrown;
  }
}

/// Setup: a caller with no scheduler takes the run and holds it.
struct hold_the_run {
  bool fails = false;
  void operator()(once_world& w, once_waker& k) const {
    k.fails = fails;
    k.runner = held_run(w.o, k);
    k.runner.handle().resume();
  }
};

/// The completing operation: the held run goes on (and completes, or fails).
const auto end_the_run = [](once_world* /*unused*/, once_waker& k) { std::exchange(k.run, {}).resume(); };

std::vector<lifetime::row> once_rows() {
  using lifetime::coroutine_row;
  using W = once_world;
  using K = once_waker;
  using asyncband::stop_token;
  const auto wait = [](W& w, stop_token) { return w.o.wait(); };
  const auto wait_stoppable = [](W& w, stop_token t) { return w.o.wait(std::move(t)); };
  const auto call = [](W& w, stop_token) { return w.o.call_once([] {}); };
  const auto call_stoppable = [](W& w, stop_token t) { return w.o.call_once([] {}, std::move(t)); };
  std::vector<lifetime::row> rows;
  rows.push_back(coroutine_row<W, K>("once_run_completes_wait", "ok", hold_the_run{}, wait, end_the_run));
  rows.push_back(coroutine_row<W, K>("once_run_completes_wait_cancellable", "ok", hold_the_run{},
                                     wait_stoppable, end_the_run));
  rows.push_back(coroutine_row<W, K>("once_run_completes_call", "ok", hold_the_run{}, call, end_the_run));
  rows.push_back(coroutine_row<W, K>("once_run_completes_call_cancellable", "ok", hold_the_run{},
                                     call_stoppable, end_the_run));
  rows.push_back(coroutine_row<W, K>("once_failed_run_hands_the_waiter_its_run", "ok", hold_the_run{true},
                                     call, end_the_run));
  rows.push_back(coroutine_row<W, K>("once_stop_cancels_wait", "cancelled", lifetime::no_setup{},
                                     wait_stoppable, lifetime::request_stop{}));
  rows.push_back(lifetime::pass_on_row<W, K>("once_failed_run_passed_on_by_a_cancelled_caller",
                                             hold_the_run{true}, call_stoppable, call, end_the_run));
  for (const int n : {3, 20}) {
    rows.push_back(lifetime::crowd_row<W, K>("once_run_completes_crowd_" + std::to_string(n), n, "ok",
                                             hold_the_run{}, call, wait,
                                             [](W* w, K& k, asyncband::stop_source&) { end_the_run(w, k); }));
  }
  rows.push_back(lifetime::thread_row<W, K>(
      "once_run_completes_blocked_caller", "ok", hold_the_run{},
      [](W& w, stop_token t) { return w.o.call_once_blocking([] {}, std::move(t)); }, end_the_run));
  rows.push_back(lifetime::thread_row<W, K>(
      "once_run_completes_blocked_wait", "ok", hold_the_run{},
      [](W& w, stop_token t) { return w.o.wait_blocking(std::move(t)); }, end_the_run));
  return rows;
}

class once_lifetime : public testing::TestWithParam<lifetime::row> {};

TEST_P(once_lifetime, WaiterResumedInlineDestroysEverything) {
  const lifetime::row& r = GetParam();
  const lifetime::watchdog guard(r.name, std::chrono::seconds(30));
  r.body();
}

INSTANTIATE_TEST_SUITE_P(test_once, once_lifetime, testing::ValuesIn(once_rows()),
                         [](const testing::TestParamInfo<lifetime::row>& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// Stress: per round, pool tasks and plain threads call_once (every form; some cancellably, with
// a stop requested mid-round in some rounds) with initialisers that hop threads and fail at
// random, and two pool tasks wait(). Invariants: never two runs at a time; exactly one success;
// every caller got ok (and then sees the winner's write), its own exception, or cancelled (only
// with a token); every run but the successful one ended in its own caller's exception.

constexpr int stress_pool_callers = 4;  // caller 0: never fails, never cancelled
constexpr int stress_thread_callers = 3;
constexpr int stress_callers = stress_pool_callers + stress_thread_callers;
constexpr int stress_observers = 2;

struct once_stress_round {
  once o;
  std::uint32_t failing;  // caller i's run fails when bit i is set
  std::atomic<int> active{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> runs{0};
  std::atomic<int> successes{0};
  int winner = -1;  // written by the successful run; read after an ok call (TSan checks the order)
  std::atomic<int> ok{0};
  std::atomic<int> thrown{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> bad{0};
  asyncband::stop_source stop;
  wait_tally waits;  // the observers'
  completion finished;

  once_stress_round(std::uint32_t failing_mask, int participants)
      : failing(failing_mask & ~1U), finished(participants) {}

  void enter() {
    if (active.fetch_add(1) != 0) overlaps.fetch_add(1);
    runs.fetch_add(1);
  }
  void leave(int i) {
    active.fetch_sub(1);
    if (((failing >> i) & 1U) != 0) throw init_failure{i};
    winner = i;
    successes.fetch_add(1);
  }
  [[nodiscard]] bool consistent() const { return o.is_completed() && winner >= 0; }
  void returned(bool stoppable, wait_status st) {
    if (st == wait_status::ok) {
      ok.fetch_add(1);
      if (!consistent()) bad.fetch_add(1);
    } else if (st == wait_status::cancelled && stoppable) {
      cancelled.fetch_add(1);
    } else {
      bad.fetch_add(1);
    }
  }
  void threw(int i, const init_failure& e) { (e.id == i ? thrown : bad).fetch_add(1); }
  void record(wait_status st) {  // an observer's (stress_waiter)
    waits.record(st, [this] { return consistent(); });
  }
  /// A run that hops onto the pool in the middle.
  auto hopping(thread_pool& pool, int i) {
    return [this, &pool, i]() -> task<void> {
      enter();
      co_await pool.schedule();
      leave(i);
    };
  }
  auto plain(int i) {
    return [this, i] {
      enter();
      leave(i);
    };
  }
};

task<void> stress_pool_caller(once_stress_round& r, thread_pool& pool, int i, bool stoppable) {
  try {
    if (stoppable) {
      const auto res = co_await r.o.call_once(r.hopping(pool, i), r.stop.get_token());
      r.returned(true, res.status());
    } else {
      co_await r.o.call_once(r.hopping(pool, i));
      r.returned(false, wait_status::ok);
    }
  } catch (const init_failure& e) {
    r.threw(i, e);
  }
  r.finished.done();
}

/// Runs a plain thread's call and records it.
template <class Call>
void stress_thread_caller(once_stress_round& r, int i, bool stoppable, Call call) {
  try {
    r.returned(stoppable, call());
  } catch (const init_failure& e) {
    r.threw(i, e);
  }
  r.finished.done();
}

TEST(OnceStress, OneRunAtATimeExactlyOneSuccessEveryCallerGetsItsOwnOutcome) {
  thread_pool pool(2);
  stress_totals totals;
  int cancelled = 0;
  int failed = 0;
  const int rounds = repeat_for(300, 1s, [&](int round) {
    std::minstd_rand rng(static_cast<std::uint32_t>(round) + 1);
    const bool cancel_this_round = round % 3 == 0;
    auto r = std::make_unique<once_stress_round>(
        static_cast<std::uint32_t>(rng()), stress_callers + stress_observers + (cancel_this_round ? 1 : 0));
    for (int i = 1; i < stress_pool_callers; ++i) {  // caller 0 comes last: the others' runs may fail
      asyncband::runtime::spawn(pool.ref(), stress_pool_caller(*r, pool, i, i % 2 == 1));
    }
    for (int i = 0; i < stress_observers; ++i) {
      asyncband::runtime::spawn(pool.ref(), stress_waiter(*r, r->o, i == 1));
    }
    std::vector<std::thread> threads;
    constexpr int t0 = stress_pool_callers;
    threads.emplace_back([&r] {
      stress_thread_caller(*r, t0, false, [&] {
        r->o.call_once_blocking(r->plain(t0));
        return wait_status::ok;
      });
    });
    threads.emplace_back([&r, &pool, t1 = t0 + 1] {
      stress_thread_caller(*r, t1, true, [&] {
        return r->o.call_once_blocking(r->hopping(pool, t1), r->stop.get_token()).status();
      });
    });
    threads.emplace_back([&r, t2 = t0 + 2] {
      stress_thread_caller(
          *r, t2, true, [&] { return block_on(r->o.call_once(r->plain(t2), r->stop.get_token())).status(); });
    });
    if (cancel_this_round) {
      threads.emplace_back([&r] {
        r->stop.request_stop();
        r->finished.done();
      });
    }
    asyncband::runtime::spawn(pool.ref(), stress_pool_caller(*r, pool, 0, false));
    r->finished.wait_or_abort(30s, "once stress");
    for (auto& t : threads) t.join();

    EXPECT_EQ(r->overlaps.load(), 0) << "round " << round << ": two runs at a time";
    EXPECT_EQ(r->successes.load(), 1) << "round " << round;
    EXPECT_EQ(r->bad.load(), 0) << "round " << round;
    EXPECT_EQ(r->ok.load() + r->thrown.load() + r->cancelled.load(), stress_callers) << "round " << round;
    EXPECT_EQ(r->runs.load(), r->thrown.load() + 1) << "round " << round << ": a failure reached nobody";
    EXPECT_TRUE(r->o.is_completed());
    if (!cancel_this_round) {
      EXPECT_EQ(r->cancelled.load(), 0) << "round " << round;
    }
    r->waits.expect_round(round, stress_observers, 1, cancel_this_round);
    totals.add(r->waits);
    cancelled += r->cancelled.load();
    failed += r->thrown.load();
    return !HasFailure();
  });
  totals.expect_and_record(rounds);
  EXPECT_GT(failed, 0) << "no run failed in any round: the failure path went untested";
  RecordProperty("callers_cancelled", cancelled);
  RecordProperty("runs_failed", failed);
}

}  // namespace
