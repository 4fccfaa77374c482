// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::once_map: one run per key's entry for any number of callers, keys that
// never wait for each other, get / discard / remove (in flight and finished), failures (an
// exception, a try_compute error with a user's own expected-like type) that cache nothing and
// pass the run to the next waiter, cancellation (resumed once, the run left alone, a run handed
// to a stopped waiter passed on), the deterministic races at the waiter core's test points,
// the blocking twins and timeouts, "last one out", and a bounded multi-threaded stress test.
#include "asyncband/once_map.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <latch>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/manual_reset_event.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/stop_token.hpp"
#include "support/awaited_twice.hpp"
#include "support/once_calls.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"
#include "support/thread_hook.hpp"
#include "support/wait_contract.hpp"

namespace {

using namespace asyncband_test;
using asyncband::block_on;
using asyncband::manual_reset_event;
using map = asyncband::once_map<int, int>;

// ---------------------------------------------------------------------------------------------
// Helpers

/// The once_map's forms, as support/once_calls.hpp reaches a keyed primitive.
struct compute_calls {
  using primitive_type = map;
  template <class... Args>
  static auto await(map& m, Args&&... args) {
    return m.compute(std::forward<Args>(args)...);
  }
  template <class... Args>
  static auto block(map& m, Args&&... args) {
    return m.compute_blocking(std::forward<Args>(args)...);
  }
  template <class... Args>
  static auto block_for(map& m, Args&&... args) {
    return m.compute_timeout(std::forward<Args>(args)...);
  }
  template <class... Args>
  static auto try_await(map& m, Args&&... args) {
    return m.try_compute(std::forward<Args>(args)...);
  }
  template <class... Args>
  static auto try_block(map& m, Args&&... args) {
    return m.try_compute_blocking(std::forward<Args>(args)...);
  }
};

/// A map whose key 1 has a run in progress (initialiser 1, until release()).
using held = held_key<compute_calls>;

/// A coroutine computing `key` with `f`, recorded in `p`.
template <class F>
task<void> computing(map& m, int key, F f, call_probe& p) {
  return caller([&m, key, f] { return m.compute(key, f); }, p);
}
/// The same with a stop token.
template <class F>
task<void> computing(map& m, int key, F f, asyncband::stop_token stop, call_probe& p) {
  return caller([&m, key, f, stop] { return m.compute(key, f, stop); }, p);
}
/// A coroutine try-computing `key` with `f` (a fallible_int initialiser).
template <class F>
task<void> trying(map& m, int key, F f, call_probe& p) {
  return caller([&m, key, f] { return m.try_compute(key, f); }, p);
}
/// The same with a stop token.
template <class F>
task<void> trying(map& m, int key, F f, asyncband::stop_token stop, call_probe& p) {
  return caller([&m, key, f, stop] { return m.try_compute(key, f, stop); }, p);
}

/// The call ended with value `v`, resumed once.
void expect_value(const call_probe& p, int v) {
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
  EXPECT_EQ(p.value, v);
  EXPECT_EQ(p.failure, "");
}
/// The call ended with initialiser `id`'s failure (its own), resumed once.
void expect_failure(const call_probe& p, int id) {
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.value, std::nullopt);
  EXPECT_EQ(p.failure, failure_of(id));
}
/// The call ended cancelled, resumed once.
void expect_cancelled(const call_probe& p) {
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::cancelled);
  EXPECT_EQ(p.value, std::nullopt);
  EXPECT_EQ(p.failure, "");
}

// ---------------------------------------------------------------------------------------------
// Computing, values, keys

TEST(OnceMap, ComputeRunsTheInitialiserAndLaterCallsGetTheValueWithoutWaiting) {
  test_scheduler s;
  map m;
  run_log log;
  std::array<call_probe, 3> p;
  s.spawn(computing(m, 1, scripted<>{&log, 7}, p[0]));
  s.run();
  expect_value(p[0], 7);
  EXPECT_EQ(m.get(1), 7);
  EXPECT_EQ(m.size(), 1U);

  s.spawn(computing(m, 1, scripted<>{&log, 8}, p[1]));
  s.spawn(trying(m, 1, scripted<fallible_int>{&log, 9}, p[2]));
  EXPECT_EQ(s.run(), 2U);  // neither suspended
  expect_value(p[1], 7);
  expect_value(p[2], 7);
  EXPECT_EQ(log.started, (std::vector<int>{7}));
}

TEST(OnceMap, ValuesAreCopiesAndAPlainFunctionIsAnInitialiser) {
  asyncband::once_map<std::string, std::string> m;
  std::string v = m.compute_blocking("k", [] { return std::string("value"); });
  v += " changed by its caller";
  EXPECT_EQ(m.get("k"), "value");
  EXPECT_NE(v, "value");
  std::string w = block_on(m.compute("k", []() -> std::string { throw std::logic_error("never runs"); }));
  EXPECT_EQ(w, "value");
  EXPECT_EQ(m.remove("k"), "value");
  EXPECT_EQ(w, "value");  // the caller's copy outlives the entry
}

TEST(OnceMap, TwoKeysInitialiseInParallel) {
  test_scheduler s;
  map m;
  run_log log;
  manual_reset_event slow;
  manual_reset_event fast;
  call_probe slow_caller;
  call_probe fast_caller;
  s.spawn(computing(m, 1, scripted<>{&log, 1, &slow}, slow_caller));
  s.spawn(computing(m, 2, scripted<>{&log, 2, &fast}, fast_caller));
  s.run();
  EXPECT_EQ(log.started, (std::vector<int>{1, 2}));  // both running at once
  EXPECT_EQ(log.most_inside, 2);

  fast.set();  // the fast key completes while the slow one is still running
  s.run();
  ASSERT_EQ(fast_caller.resumed, 1);  // (else the blocking call below would wait forever)
  expect_value(fast_caller, 2);
  EXPECT_EQ(slow_caller.resumed, 0);
  EXPECT_EQ(m.get(2), 2);
  EXPECT_EQ(m.get(1), std::nullopt);

  // A plain thread's call for a third key does not wait for the slow run either.
  EXPECT_EQ(m.compute_blocking(3, [] { return 3; }), 3);

  slow.set();
  s.run();
  expect_value(slow_caller, 1);
  EXPECT_EQ(m.size(), 3U);
}

TEST(OnceMap, EveryCallerOfAKeyGetsTheValueOfOneRun) {
  test_scheduler s;
  map m;
  run_log log;
  manual_reset_event release;
  asyncband::stop_source never;
  std::array<call_probe, 5> p;
  s.spawn(computing(m, 1, scripted<>{&log, 1, &release}, p[0]));
  s.spawn(computing(m, 1, scripted<>{&log, 2}, p[1]));
  s.spawn(computing(m, 1, scripted<>{&log, 3}, never.get_token(), p[2]));
  s.spawn(trying(m, 1, scripted<fallible_int>{&log, 4}, p[3]));
  s.spawn(trying(m, 1, scripted<fallible_int>{&log, 5}, never.get_token(), p[4]));
  s.run();
  for (const auto& q : p) EXPECT_EQ(q.resumed, 0);
  release.set();
  s.run();
  for (const auto& q : p) expect_value(q, 1);
  EXPECT_EQ(log.started, (std::vector<int>{1}));
  EXPECT_EQ(m.size(), 1U);
}

TEST(OnceMap, GetNeverWaitsAndInsertsNothing) {
  held h;
  EXPECT_EQ(h.primitive.get(2), std::nullopt);
  EXPECT_EQ(h.primitive.get(held::key), std::nullopt);  // in flight
  EXPECT_EQ(h.primitive.size(), 1U);
  h.release();
  EXPECT_EQ(h.primitive.get(held::key), 1);
  EXPECT_EQ(h.primitive.size(), 1U);
}

// ---------------------------------------------------------------------------------------------
// discard and remove

TEST(OnceMap, DiscardDuringAnInFlightComputeLetsTheNextComputeRunAgain) {
  test_scheduler s;
  map m;
  run_log log;
  manual_reset_event first_run;
  manual_reset_event second_run;
  std::array<call_probe, 4> p;
  s.spawn(computing(m, 1, scripted<>{&log, 1, &first_run}, p[0]));
  s.spawn(computing(m, 1, scripted<>{&log, 2}, p[1]));  // waits on the first entry
  s.run();

  EXPECT_TRUE(m.discard(1));
  EXPECT_EQ(m.size(), 0U);
  EXPECT_EQ(m.get(1), std::nullopt);
  s.spawn(computing(m, 1, scripted<>{&log, 3, &second_run}, p[2]));  // a new entry: runs again
  s.spawn(computing(m, 1, scripted<>{&log, 4}, p[3]));               // waits on the new entry
  s.run();
  EXPECT_EQ(log.started, (std::vector<int>{1, 3}));

  first_run.set();  // the callers of the dropped entry still get its value
  s.run();
  expect_value(p[0], 1);
  expect_value(p[1], 1);
  EXPECT_EQ(m.get(1), std::nullopt);  // the dropped entry's value is not the map's
  EXPECT_EQ(p[2].resumed + p[3].resumed, 0);

  second_run.set();
  s.run();
  expect_value(p[2], 3);
  expect_value(p[3], 3);
  EXPECT_EQ(m.get(1), 3);
  EXPECT_EQ(log.started, (std::vector<int>{1, 3}));
}

TEST(OnceMap, AWaiterOnADiscardedEntryRunsItsOwnInitialiserOnItWhenItsRunFails) {
  test_scheduler s;
  map m;
  run_log log;
  manual_reset_event first_run;
  std::array<call_probe, 3> p;
  s.spawn(computing(m, 1, scripted<>{&log, 1, &first_run, ending::exception}, p[0]));
  s.spawn(computing(m, 1, scripted<>{&log, 2}, p[1]));
  s.run();
  EXPECT_TRUE(m.discard(1));
  s.spawn(computing(m, 1, scripted<>{&log, 3}, p[2]));
  s.run();
  expect_value(p[2], 3);

  first_run.set();
  s.run();
  expect_failure(p[0], 1);
  expect_value(p[1], 2);  // ran its own initialiser, on the dropped entry
  EXPECT_EQ(log.started, (std::vector<int>{1, 3, 2}));
  EXPECT_EQ(m.get(1), 3);  // the map's entry is untouched
}

TEST(OnceMap, DiscardOfAComputedEntryRunsTheNextComputeAgain) {
  map m;
  EXPECT_FALSE(m.discard(1));
  EXPECT_EQ(m.compute_blocking(1, [] { return 1; }), 1);
  EXPECT_TRUE(m.discard(1));
  EXPECT_FALSE(m.discard(1));
  EXPECT_EQ(m.get(1), std::nullopt);
  EXPECT_EQ(m.compute_blocking(1, [] { return 2; }), 2);
  EXPECT_EQ(m.get(1), 2);
}

TEST(OnceMap, RemoveReturnsTheValueAndDropsTheEntry) {
  map m;
  EXPECT_EQ(m.remove(1), std::nullopt);
  EXPECT_EQ(m.compute_blocking(1, [] { return 1; }), 1);
  EXPECT_EQ(m.compute_blocking(2, [] { return 2; }), 2);
  EXPECT_EQ(m.remove(1), 1);
  EXPECT_EQ(m.size(), 1U);
  EXPECT_EQ(m.get(1), std::nullopt);
  EXPECT_EQ(m.remove(1), std::nullopt);
  EXPECT_EQ(m.get(2), 2);  // other keys untouched
  EXPECT_EQ(m.compute_blocking(1, [] { return 3; }), 3);
}

TEST(OnceMap, RemovingAnInFlightEntryReturnsNothingAndItsCallersStillGetTheirValue) {
  test_scheduler s;
  held h;
  call_probe waiter;
  s.spawn(caller([&h] { return h.wait(); }, waiter));
  s.run();
  EXPECT_EQ(h.primitive.remove(held::key), std::nullopt);
  EXPECT_EQ(h.primitive.size(), 0U);
  h.release();
  s.run();
  expect_value(h.holder, 1);
  expect_value(waiter, 1);
  EXPECT_EQ(h.primitive.get(held::key), std::nullopt);
}

// ---------------------------------------------------------------------------------------------
// Failures cache nothing

TEST(OnceMap, AThrowingInitialiserCachesNothingAndTheNextWaiterRunsItsOwn) {
  test_scheduler s;
  map m;
  run_log log;
  manual_reset_event first_run;
  manual_reset_event second_run;
  std::array<call_probe, 3> p;
  s.spawn(computing(m, 1, scripted<>{&log, 1, &first_run, ending::exception}, p[0]));
  s.spawn(computing(m, 1, scripted<>{&log, 2, &second_run}, p[1]));
  s.spawn(computing(m, 1, scripted<>{&log, 3}, p[2]));
  s.run();

  first_run.set();
  s.run();
  expect_failure(p[0], 1);  // the failure reached its own caller only
  EXPECT_EQ(p[1].resumed + p[2].resumed, 0);
  EXPECT_EQ(log.started, (std::vector<int>{1, 2}));  // the oldest waiter runs its own
  EXPECT_EQ(m.get(1), std::nullopt);

  second_run.set();
  s.run();
  expect_value(p[1], 2);
  expect_value(p[2], 2);
  EXPECT_EQ(log.started, (std::vector<int>{1, 2}));
  EXPECT_EQ(log.most_inside, 1);
}

TEST(OnceMap, ATryComputeErrorReachesOnlyItsCallerAndTheNextWaiterRunsItsOwn) {
  test_scheduler s;
  map m;
  run_log log;
  manual_reset_event first_run;
  std::array<call_probe, 4> p;
  s.spawn(trying(m, 1, scripted<fallible_int>{&log, 1, &first_run, ending::error}, p[0]));
  s.spawn(trying(m, 1, scripted<fallible_int>{&log, 2, nullptr, ending::error}, p[1]));
  s.spawn(computing(m, 1, scripted<>{&log, 3}, p[2]));  // a plain compute waits among them
  s.spawn(trying(m, 1, scripted<fallible_int>{&log, 4}, p[3]));
  s.run();
  first_run.set();
  s.run();
  expect_failure(p[0], 1);
  expect_failure(p[1], 2);
  expect_value(p[2], 3);
  expect_value(p[3], 3);
  EXPECT_EQ(log.started, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(m.get(1), 3);
}

TEST(OnceMap, AfterEveryCallerFailedTheKeyHasNoValueAndTheNextComputeRuns) {
  test_scheduler s;
  map m;
  run_log log;
  manual_reset_event first_run;
  std::array<call_probe, 4> p;
  s.spawn(computing(m, 1, scripted<>{&log, 1, &first_run, ending::exception}, p[0]));
  s.spawn(trying(m, 1, scripted<fallible_int>{&log, 2, nullptr, ending::error}, p[1]));
  s.spawn(computing(m, 1, scripted<>{&log, 3, nullptr, ending::exception}, p[2]));
  s.run();
  first_run.set();
  s.run();
  expect_failure(p[0], 1);
  expect_failure(p[1], 2);
  expect_failure(p[2], 3);
  EXPECT_EQ(m.size(), 0U);  // the last caller to leave removed the empty entry
  EXPECT_EQ(m.get(1), std::nullopt);
  EXPECT_EQ(m.remove(1), std::nullopt);

  s.spawn(computing(m, 1, scripted<>{&log, 4}, p[3]));
  s.run();
  expect_value(p[3], 4);
  EXPECT_EQ(log.started, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(m.get(1), 4);
}

// ---------------------------------------------------------------------------------------------
// Cancellation

TEST(OnceMapCancel, ACancelledComputeResumesOnceCancelledAndLeavesTheRunAlone) {
  test_scheduler s;
  held h;
  asyncband::stop_source stop;
  call_probe cancelled;
  call_probe other;
  s.spawn(caller([&] { return h.wait(stop.get_token()); }, cancelled));
  s.spawn(caller([&] { return h.wait(); }, other));
  s.run();
  stop.request_stop();
  EXPECT_EQ(s.ready_count(), 1U);  // posted to its scheduler, not resumed inline
  s.run();
  expect_cancelled(cancelled);
  EXPECT_EQ(other.resumed, 0);
  EXPECT_EQ(h.holder.resumed, 0);

  h.release();
  s.run();
  expect_value(h.holder, 1);
  expect_value(other, 1);
  EXPECT_EQ(cancelled.resumed, 1);
  EXPECT_EQ(h.log.started, (std::vector<int>{1}));
}

TEST(OnceMapCancel, AStopRequestedDuringItsOwnRunDoesNotInterruptIt) {
  test_scheduler s;
  map m;
  run_log log;
  manual_reset_event release;
  asyncband::stop_source stop;
  std::array<call_probe, 2> p;
  s.spawn(computing(m, 1, scripted<>{&log, 1, &release}, stop.get_token(), p[0]));
  s.spawn(computing(m, 1, scripted<>{&log, 2}, p[1]));
  s.run();
  stop.request_stop();
  s.run();
  EXPECT_EQ(p[0].resumed, 0);
  release.set();
  s.run();
  expect_value(p[0], 1);  // its run completed: it yields the value
  expect_value(p[1], 1);
}

TEST(OnceMapCancel, ARunHandedToAWaiterWhoseStopIsRequestedPassesOn) {
  test_scheduler s;
  held h;
  asyncband::stop_source stop;
  call_probe stopped;
  call_probe next;
  s.spawn(caller([&] { return h.wait(stop.get_token()); }, stopped));
  s.spawn(caller([&] { return h.wait(); }, next));
  s.run();
  s.at(test_point::claimed_for_wake, [&stop] { stop.request_stop(); });
  h.release(ending::exception);  // hands the run to `stopped`, which is stopped before it resumes
  EXPECT_EQ(s.pending_actions(), 0U);
  s.run();
  expect_failure(h.holder, 1);
  expect_cancelled(stopped);
  expect_value(next, 2);  // the run passed on to it
  EXPECT_EQ(h.log.started, (std::vector<int>{1, 2}));
}

TEST(OnceMapCancel, AlreadyStoppedTokenCancelsAtOnce) {
  held h;
  already_stopped_token_cancels_at_once(h);
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(h.primitive.compute_blocking(held::key, h.waiter_init(), stopped.get_token()).cancelled());
  EXPECT_TRUE(h.primitive.compute_blocking(2, h.waiter_init(), stopped.get_token()).cancelled());
  EXPECT_EQ(h.primitive.size(), 1U);  // key 2's entry went with its only (cancelled) caller
  h.release();
  EXPECT_EQ(h.log.started, (std::vector<int>{1}));
}

TEST(OnceMapCancel, StopWhileQueuedCancelsAndResumesOnce) {
  held h;
  const auto probes = stop_while_suspended_cancels_and_resumes_once<valued_probe>(h, release_held);
  EXPECT_EQ(probes.cancelled.value, std::nullopt);
  EXPECT_EQ(probes.other.value, 1);
}

// The completion claimed both waiters; a stop on the first before it resumes: it reports
// cancelled (a cancellation holds until the waiter resumes), the other gets the value.
TEST(OnceMapRace, StopAtClaimedForWakeIsTooLateBothGetTheValue) {
  held h;
  stop_at_claimed_for_wake(h, release_held, wait_status::ok);
  EXPECT_EQ(h.primitive.get(held::key), 1);
}

TEST(OnceMapRace, CompletionAtClaimedForCancelGoesToTheOtherWaiter) {
  held h;
  wake_at_claimed_for_cancel_goes_to_the_other_waiter(h, release_held);
}

TEST(OnceMapRace, CompletionAtPublishedOrBeforeArmCompletesWithoutSuspending) {
  wake_before_suspension_completes_without_suspending([] { return held(); }, release_held,
                                                      [](held& h) {
                                                        EXPECT_EQ(h.primitive.get(held::key), 1);
                                                        EXPECT_EQ(h.log.started, (std::vector<int>{1}));
                                                      });
}

TEST(OnceMapRace, StopAtPublishedOrBeforeArmCancelsWithoutSuspending) {
  for (const test_point point : before_suspension) {
    SCOPED_TRACE(static_cast<int>(point));
    held h;
    stop_at_point_cancels_without_suspending(point, h, release_held);
    EXPECT_EQ(h.primitive.get(held::key), 1);
  }
}

TEST(OnceMapDestroy, DestroyingQueuedComputesUnlinksThem) {
  held h;
  destroying_suspended_waiters_unlinks_them(h, release_held);
  EXPECT_EQ(h.log.started, (std::vector<int>{1}));
}

// Awaiting a call again once its key is computed yields the value at once (harmless); it could
// suspend again only after a failure: the waiter handed the run whose own initialiser failed.
TEST(OnceMapMisuse, AwaitingAComputeAgainAfterItSuspendedThrowsLogicError) {
  held h;
  expect_awaiting_again_throws_logic_error(
      [&h] {
        return h.primitive.try_compute(held::key, scripted<fallible_int>{&h.log, 2, nullptr, ending::error});
      },
      [&h] { h.release(ending::exception); });
  EXPECT_EQ(h.log.started, (std::vector<int>{1, 2}));
}

// ---------------------------------------------------------------------------------------------
// Blocking twins and timeouts

TEST(OnceMapBlocking, ThreadsWaitingForTheRunGetItsValueAndRunNothing) {
  constexpr int n = 3;
  held h;
  std::latch parked(n);
  std::array<call_probe, n> p;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&h, &parked, &q = p[static_cast<std::size_t>(i)], i] {
      const thread_hook hook(test_point::before_arm, [&parked] { parked.count_down(); });
      call_blocking([&] { return h.primitive.compute_blocking(held::key, scripted<>{&h.log, 10 + i}); }, q);
    });
  }
  parked.wait();
  h.release();
  for (auto& t : threads) t.join();
  for (const auto& q : p) expect_value(q, 1);
  EXPECT_EQ(h.log.started, (std::vector<int>{1}));
}

TEST(OnceMapBlocking, AFailedRunPassesToTheOldestBlockedThreadWhichRunsItsOwnPlainFunction) {
  held h;
  std::atomic<int> runs{0};
  std::array<call_probe, 2> p;
  std::latch parked_0(1);
  std::latch parked_1(1);
  std::array<std::latch*, 2> parked{&parked_0, &parked_1};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {  // one at a time, so that thread 0 is the oldest waiter
    std::latch& this_one = *parked[static_cast<std::size_t>(i)];
    threads.emplace_back([&, i] {
      const thread_hook hook(test_point::before_arm, [&this_one] { this_one.count_down(); });
      call_blocking(
          [&] {
            return h.primitive.compute_blocking(held::key, [&runs, i] {
              runs.fetch_add(1);
              return 100 + i;
            });
          },
          p[static_cast<std::size_t>(i)]);
    });
    this_one.wait();
  }
  h.release(ending::exception);
  for (auto& t : threads) t.join();
  expect_failure(h.holder, 1);
  expect_value(p[0], 100);
  expect_value(p[1], 100);
  EXPECT_EQ(runs.load(), 1);
}

TEST(OnceMapBlocking, ComputeTimeoutTimesOutWhileTheKeyIsComputedElsewhere) {
  held h;
  EXPECT_TRUE(h.primitive.compute_timeout(held::key, h.waiter_init(), 1ms).timed_out());
  EXPECT_TRUE(h.primitive.compute_timeout(held::key, h.waiter_init(), 0ms).timed_out());
  EXPECT_TRUE(h.primitive.try_compute_timeout(held::key, scripted<fallible_int>{&h.log, 3}, 0ms).timed_out());
  h.release(ending::exception);  // the timed-out calls are gone: nobody to hand the run to
  EXPECT_EQ(h.log.started, (std::vector<int>{1}));
  const auto computed = h.primitive.compute_timeout(held::key, h.waiter_init(), 0ms);  // runs its own
  ASSERT_TRUE(computed.ok());
  EXPECT_EQ(*computed, 2);
  EXPECT_EQ(h.primitive.compute_timeout(held::key, h.waiter_init(), 0ms).value(), 2);
}

TEST(OnceMapBlocking, TryComputeBlockingErrorCachesNothing) {
  map m;
  const auto failing = [] { return fallible_int::failure("no"); };
  const auto failed = m.try_compute_blocking(1, failing);
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error(), "no");
  EXPECT_EQ(m.get(1), std::nullopt);
  const auto computed = m.try_compute_blocking(1, [] { return fallible_int::of(5); });
  ASSERT_TRUE(computed.has_value());
  EXPECT_EQ(computed.value(), 5);
  const auto again = m.try_compute_blocking(1, failing);  // computed: never runs
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again.value(), 5);
  EXPECT_THROW((void)m.compute_blocking(2, []() -> int { throw std::runtime_error("thrown"); }),
               std::runtime_error);
  EXPECT_EQ(m.get(2), std::nullopt);
}

TEST(OnceMapBlocking, ComputeTimeoutCompletesWhenAnotherThreadCompletesTheRun) {
  held h;
  wait_timeout_completes_when_woken_by_another_thread(h, release_held);
}

TEST(OnceMapBlocking, ComputeBlockingWithStopToken) {
  held h;
  blocking_wait_is_cancelled_by_another_thread(h);
  blocking_wait_is_woken_by_another_thread(h, release_held);
}

TEST(OnceMapBlocking, BlockOnComputes) {
  held h;
  const auto p = block_on_waits_complete_when_woken_by_another_thread<valued_probe>(h, release_held);
  EXPECT_EQ(p.value, 1);
}

TEST(OnceMapBlocking, BlockOnComputeIsCancelledByAStopFromAnotherThread) {
  held h;
  block_on_wait_is_cancelled_by_another_thread(h);
  h.release();
}

// ---------------------------------------------------------------------------------------------
// Last one out: a waiter resumed inline by the run's completion, failure or destruction (or a
// blocked thread woken by it) destroys the map at once.

class OnceMapLifetime : public testing::TestWithParam<lifetime::row> {};

TEST_P(OnceMapLifetime, AWaiterWokenByTheRunMayDestroyTheMap) {
  run_row(GetParam());
}

INSTANTIATE_TEST_SUITE_P(once_map, OnceMapLifetime,
                         testing::ValuesIn(held_run_rows<compute_calls>("once_map")),
                         [](const testing::TestParamInfo<lifetime::row>& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// Stress: every caller is consistent (support/once_calls.hpp), and each key's entry is computed
// once: at most one successful run per key, whose value every successful caller got and the map
// holds.

TEST(OnceMapStress, EachKeysValueIsProducedOnce) {
  run_stress_rounds<compute_calls>([](int round, stress_round<compute_calls>& r) {
    for (int k = 0; k < stress_round<compute_calls>::keys; ++k) {
      const auto& produced = r.key(k).produced;
      ASSERT_LE(produced.size(), 1U) << "round " << round << " key " << k;
      const std::optional<int> value = produced.empty() ? std::nullopt : std::optional<int>(produced.front());
      EXPECT_EQ(r.primitive().get(k), value) << "round " << round << " key " << k;
    }
  });
}

}  // namespace
