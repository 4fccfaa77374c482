// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::singleflight::group: concurrent calls for a key share one execution and
// all get its result, nothing is cached afterwards, a leader's failure (an exception, a try_work
// error with a user's own expected-like type, a stop its initialiser acts on, its coroutine
// destroyed) reaches the leader only while a follower runs its own initialiser for the others,
// followers cancel on their own, forget() starts a new flight while the old one goes on, no key
// is left behind, the deterministic races at the waiter core's test points, the blocking twins,
// "last one out", and a bounded multi-threaded stress test.
#include "asyncband/singleflight.hpp"

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
using asyncband::manual_reset_event;
using group = asyncband::singleflight::group<int, int>;

// ---------------------------------------------------------------------------------------------
// Helpers

/// The group's forms, as support/once_calls.hpp reaches a keyed primitive.
struct work_calls {
  using primitive_type = group;
  template <class... Args>
  static auto await(group& g, Args&&... args) {
    return g.work(std::forward<Args>(args)...);
  }
  template <class... Args>
  static auto block(group& g, Args&&... args) {
    return g.work_blocking(std::forward<Args>(args)...);
  }
  template <class... Args>
  static auto block_for(group& g, Args&&... args) {
    return g.work_timeout(std::forward<Args>(args)...);
  }
  template <class... Args>
  static auto try_await(group& g, Args&&... args) {
    return g.try_work(std::forward<Args>(args)...);
  }
  template <class... Args>
  static auto try_block(group& g, Args&&... args) {
    return g.try_work_blocking(std::forward<Args>(args)...);
  }
};

/// A group whose key 1 has a flight in progress: the holder leads it with initialiser 1, until
/// release().
using held = held_key<work_calls>;

/// A coroutine calling work(key, f) (with `stop` if given), recorded in `p`.
template <class F>
task<void> working(group& g, int key, F f, call_probe& p) {
  return caller([&g, key, f] { return g.work(key, f); }, p);
}
template <class F>
task<void> working(group& g, int key, F f, asyncband::stop_token stop, call_probe& p) {
  return caller([&g, key, f, stop] { return g.work(key, f, stop); }, p);
}
/// A coroutine calling try_work(key, f) (with `stop` if given), recorded in `p`.
template <class F>
task<void> trying(group& g, int key, F f, call_probe& p) {
  return caller([&g, key, f] { return g.try_work(key, f); }, p);
}
template <class F>
task<void> trying(group& g, int key, F f, asyncband::stop_token stop, call_probe& p) {
  return caller([&g, key, f, stop] { return g.try_work(key, f, stop); }, p);
}

/// The call got value `v`, resumed once.
void expect_value(const call_probe& p, int v) {
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
  EXPECT_EQ(p.value, v);
  EXPECT_EQ(p.failure, "");
}
/// The call got initialiser `id`'s failure, resumed once.
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
// One execution, not cached

TEST(Singleflight, ConcurrentCallersShareOneExecutionAndAllGetItsResult) {
  test_scheduler s;
  group g;
  run_log log;
  manual_reset_event release;
  asyncband::stop_source never;
  std::array<call_probe, 5> p;
  s.spawn(working(g, 1, scripted<>{&log, 1, &release}, p[0]));
  s.spawn(working(g, 1, scripted<>{&log, 2}, p[1]));
  s.spawn(working(g, 1, scripted<>{&log, 3}, never.get_token(), p[2]));
  s.spawn(trying(g, 1, scripted<fallible_int>{&log, 4}, p[3]));
  s.spawn(trying(g, 1, scripted<fallible_int>{&log, 5}, never.get_token(), p[4]));
  s.run();
  EXPECT_EQ(g.size(), 1U);
  for (const auto& q : p) EXPECT_EQ(q.resumed, 0);
  release.set();
  s.run();
  for (const auto& q : p) expect_value(q, 1);
  EXPECT_EQ(log.started, (std::vector<int>{1}));
  EXPECT_EQ(g.size(), 0U);
}

TEST(Singleflight, DifferentKeysFlyInParallel) {
  test_scheduler s;
  group g;
  run_log log;
  manual_reset_event slow;
  std::array<call_probe, 2> p;
  s.spawn(working(g, 1, scripted<>{&log, 1, &slow}, p[0]));
  s.spawn(working(g, 2, scripted<>{&log, 2}, p[1]));
  s.run();
  ASSERT_EQ(p[1].resumed, 1);  // (else the blocking call below would wait forever)
  expect_value(p[1], 2);
  EXPECT_EQ(p[0].resumed, 0);
  EXPECT_EQ(g.size(), 1U);
  EXPECT_EQ(g.work_blocking(3, [] { return 3; }), 3);  // a plain thread does not wait either
  slow.set();
  s.run();
  expect_value(p[0], 1);
  EXPECT_EQ(g.size(), 0U);
}

TEST(Singleflight, ACallAfterCompletionRunsAgain) {
  test_scheduler s;
  group g;
  run_log log;
  std::array<call_probe, 2> p;
  s.spawn(working(g, 1, scripted<>{&log, 1}, p[0]));
  s.run();
  EXPECT_EQ(g.size(), 0U);
  s.spawn(working(g, 1, scripted<>{&log, 2}, p[1]));
  s.run();
  expect_value(p[0], 1);
  expect_value(p[1], 2);
  EXPECT_EQ(log.started, (std::vector<int>{1, 2}));
  EXPECT_EQ(g.work_blocking(1, [] { return 3; }), 3);
}

// The leader's result is in and its follower's resumption is queued: the flight has left the
// group already, so a call made now starts a new one.
TEST(Singleflight, ACallMadeBeforeTheFollowersResumeStartsANewFlight) {
  test_scheduler s;
  group g;
  run_log log;
  manual_reset_event release;
  std::array<call_probe, 3> p;
  s.spawn(working(g, 1, scripted<>{&log, 1, &release}, p[0]));
  s.spawn(working(g, 1, scripted<>{&log, 2}, p[1]));
  s.run();
  release.set();
  ASSERT_TRUE(s.step());  // the leader's run completes; the follower is posted
  expect_value(p[0], 1);
  EXPECT_EQ(p[1].resumed, 0);
  EXPECT_EQ(g.size(), 0U);
  s.spawn(working(g, 1, scripted<>{&log, 3}, p[2]));
  s.run();
  expect_value(p[1], 1);
  expect_value(p[2], 3);
  EXPECT_EQ(log.started, (std::vector<int>{1, 3}));
}

// ---------------------------------------------------------------------------------------------
// Leader failure: it alone sees it, a follower runs its own initialiser for the others

TEST(SingleflightLeader, LeaderThrowsAFollowerRerunsAndTheOthersGetItsResult) {
  test_scheduler s;
  group g;
  run_log log;
  manual_reset_event first_run;
  manual_reset_event second_run;
  std::array<call_probe, 4> p;
  s.spawn(working(g, 1, scripted<>{&log, 1, &first_run, ending::exception}, p[0]));
  s.spawn(working(g, 1, scripted<>{&log, 2, &second_run}, p[1]));
  s.spawn(working(g, 1, scripted<>{&log, 3}, p[2]));
  s.spawn(trying(g, 1, scripted<fallible_int>{&log, 4}, p[3]));
  s.run();
  first_run.set();
  s.run();
  expect_failure(p[0], 1);
  EXPECT_EQ(p[1].resumed + p[2].resumed + p[3].resumed, 0);
  EXPECT_EQ(log.started, (std::vector<int>{1, 2}));  // the oldest follower leads now
  EXPECT_EQ(g.size(), 1U);
  second_run.set();
  s.run();
  expect_value(p[1], 2);
  expect_value(p[2], 2);
  expect_value(p[3], 2);
  EXPECT_EQ(log.most_inside, 1);
  EXPECT_EQ(g.size(), 0U);
}

TEST(SingleflightLeader, ATryWorkErrorReachesOnlyItsCallerAndAFollowerReruns) {
  test_scheduler s;
  group g;
  run_log log;
  manual_reset_event first_run;
  std::array<call_probe, 3> p;
  s.spawn(trying(g, 1, scripted<fallible_int>{&log, 1, &first_run, ending::error}, p[0]));
  s.spawn(trying(g, 1, scripted<fallible_int>{&log, 2}, p[1]));
  s.spawn(working(g, 1, scripted<>{&log, 3}, p[2]));
  s.run();
  first_run.set();
  s.run();
  expect_failure(p[0], 1);
  expect_value(p[1], 2);
  expect_value(p[2], 2);
  EXPECT_EQ(log.started, (std::vector<int>{1, 2}));
  EXPECT_EQ(g.size(), 0U);
}

// The leader's initialiser takes the call's stop token and ends by throwing once it is stopped.
TEST(SingleflightLeader, LeaderStoppedThroughItsInitialiserAFollowerRerunsForTheOthers) {
  test_scheduler s;
  group g;
  run_log log;
  manual_reset_event never_set;
  manual_reset_event second_run;
  asyncband::stop_source stop_leader;
  std::array<call_probe, 3> p;
  s.spawn(working(g, 1, stop_aware{&log, 1, &never_set}, stop_leader.get_token(), p[0]));
  s.spawn(working(g, 1, scripted<>{&log, 2, &second_run}, p[1]));
  s.spawn(working(g, 1, scripted<>{&log, 3}, p[2]));
  s.run();
  stop_leader.request_stop();
  s.run();
  expect_failure(p[0], 1);  // its own initialiser's exception, not the others'
  EXPECT_EQ(log.started, (std::vector<int>{1, 2}));
  second_run.set();
  s.run();
  expect_value(p[1], 2);
  expect_value(p[2], 2);
  EXPECT_EQ(g.size(), 0U);
}

TEST(SingleflightLeader, ALeaderWhoseInitialiserIgnoresItsStopCompletesForEveryone) {
  test_scheduler s;
  group g;
  run_log log;
  manual_reset_event release;
  asyncband::stop_source stop_leader;
  std::array<call_probe, 2> p;
  s.spawn(working(g, 1, scripted<>{&log, 1, &release}, stop_leader.get_token(), p[0]));
  s.spawn(working(g, 1, scripted<>{&log, 2}, p[1]));
  s.run();
  stop_leader.request_stop();  // a running initialiser is never interrupted
  s.run();
  EXPECT_EQ(p[0].resumed, 0);
  release.set();
  s.run();
  expect_value(p[0], 1);
  expect_value(p[1], 1);
  EXPECT_EQ(g.size(), 0U);
}

TEST(SingleflightLeader, LeaderDestroyedMidRunAFollowerRerunsForTheOthers) {
  test_scheduler s;
  group g;
  run_log log;
  manual_reset_event never_set;
  manual_reset_event second_run;
  std::array<call_probe, 3> p;
  auto leader = working(g, 1, scripted<>{&log, 1, &never_set}, p[0]);
  start_on(s, leader);
  s.spawn(working(g, 1, scripted<>{&log, 2, &second_run}, p[1]));
  s.spawn(working(g, 1, scripted<>{&log, 3}, p[2]));
  s.run();
  leader = {};  // destroys its frame, its run's frame with it: the run passes on
  s.run();
  EXPECT_EQ(p[0].resumed, 0);
  EXPECT_EQ(log.started, (std::vector<int>{1, 2}));
  second_run.set();
  s.run();
  expect_value(p[1], 2);
  expect_value(p[2], 2);
  EXPECT_EQ(g.size(), 0U);
}

// ---------------------------------------------------------------------------------------------
// Followers cancel on their own

TEST(SingleflightFollower, ACancelledFollowerLeavesTheLeaderAndTheOthersAlone) {
  test_scheduler s;
  held h;
  asyncband::stop_source stop;
  std::array<call_probe, 3> p;
  s.spawn(caller([&h] { return h.wait(); }, p[0]));
  s.spawn(caller([&] { return h.wait(stop.get_token()); }, p[1]));
  s.spawn(caller([&h] { return h.wait(); }, p[2]));
  s.run();
  stop.request_stop();
  EXPECT_EQ(s.ready_count(), 1U);  // posted to its scheduler, not resumed inline
  s.run();
  expect_cancelled(p[1]);
  EXPECT_EQ(p[0].resumed + p[2].resumed + h.holder.resumed, 0);
  h.release();
  s.run();
  expect_value(h.holder, 1);
  expect_value(p[0], 1);
  expect_value(p[2], 1);
  EXPECT_EQ(p[1].resumed, 1);
  EXPECT_EQ(h.log.started, (std::vector<int>{1}));
  EXPECT_EQ(h.primitive.size(), 0U);
}

TEST(SingleflightFollower, AFollowerHandedTheFailedRunWhoseStopIsRequestedPassesItOn) {
  test_scheduler s;
  held h;
  asyncband::stop_source stop;
  call_probe stopped;
  call_probe next;
  s.spawn(caller([&] { return h.wait(stop.get_token()); }, stopped));
  s.spawn(caller([&h] { return h.wait(); }, next));
  s.run();
  s.at(test_point::claimed_for_wake, [&stop] { stop.request_stop(); });
  h.release(ending::exception);
  EXPECT_EQ(s.pending_actions(), 0U);
  s.run();
  expect_failure(h.holder, 1);
  expect_cancelled(stopped);
  expect_value(next, 2);
  EXPECT_EQ(h.log.started, (std::vector<int>{1, 2}));
  EXPECT_EQ(h.primitive.size(), 0U);
}

TEST(SingleflightFollower, AlreadyStoppedTokenCancelsAtOnce) {
  held h;
  already_stopped_token_cancels_at_once(h);
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(h.primitive.work_blocking(held::key, h.waiter_init(), stopped.get_token()).cancelled());
  EXPECT_TRUE(h.primitive.work_blocking(2, h.waiter_init(), stopped.get_token()).cancelled());
  EXPECT_EQ(h.primitive.size(), 1U);  // the cancelled calls left nothing behind
  h.release();
  EXPECT_EQ(h.primitive.size(), 0U);
}

TEST(SingleflightFollower, StopWhileQueuedCancelsAndResumesOnce) {
  held h;
  const auto probes = stop_while_suspended_cancels_and_resumes_once<valued_probe>(h, release_held);
  EXPECT_EQ(probes.other.value, 1);
  EXPECT_EQ(h.primitive.size(), 0U);
}

// ---------------------------------------------------------------------------------------------
// forget, and no key left behind

TEST(SingleflightForget, ForgetStartsANewFlightWhileTheOldOneGoesOn) {
  test_scheduler s;
  group g;
  run_log log;
  manual_reset_event old_run;
  manual_reset_event new_run;
  std::array<call_probe, 4> p;
  EXPECT_FALSE(g.forget(1));
  s.spawn(working(g, 1, scripted<>{&log, 1, &old_run}, p[0]));
  s.spawn(working(g, 1, scripted<>{&log, 2}, p[1]));
  s.run();
  EXPECT_TRUE(g.forget(1));
  EXPECT_EQ(g.size(), 0U);
  EXPECT_FALSE(g.forget(1));
  s.spawn(working(g, 1, scripted<>{&log, 3, &new_run}, p[2]));  // a new flight
  s.spawn(working(g, 1, scripted<>{&log, 4}, p[3]));            // joins the new flight
  s.run();
  EXPECT_EQ(log.started, (std::vector<int>{1, 3}));
  EXPECT_EQ(g.size(), 1U);

  old_run.set();
  s.run();
  expect_value(p[0], 1);
  expect_value(p[1], 1);
  EXPECT_EQ(g.size(), 1U);  // the old flight's landing leaves the new flight in place
  EXPECT_EQ(p[2].resumed + p[3].resumed, 0);

  new_run.set();
  s.run();
  expect_value(p[2], 3);
  expect_value(p[3], 3);
  EXPECT_EQ(g.size(), 0U);
}

TEST(SingleflightForget, AForgottenFlightsFailureStaysWithItsOwnCallers) {
  test_scheduler s;
  group g;
  run_log log;
  manual_reset_event old_run;
  manual_reset_event new_run;
  std::array<call_probe, 4> p;
  s.spawn(working(g, 1, scripted<>{&log, 1, &old_run, ending::exception}, p[0]));
  s.spawn(working(g, 1, scripted<>{&log, 2}, p[1]));
  s.run();
  EXPECT_TRUE(g.forget(1));
  s.spawn(working(g, 1, scripted<>{&log, 3, &new_run}, p[2]));
  s.run();

  old_run.set();  // the old leader fails: its follower reruns on the old flight
  s.run();
  expect_failure(p[0], 1);
  expect_value(p[1], 2);
  EXPECT_EQ(g.size(), 1U);  // the old flight's callers leaving did not take the new flight out
  s.spawn(working(g, 1, scripted<>{&log, 4}, p[3]));  // still joins the new flight
  s.run();
  new_run.set();
  s.run();
  expect_value(p[2], 3);
  expect_value(p[3], 3);
  EXPECT_EQ(log.started, (std::vector<int>{1, 3, 2}));
  EXPECT_EQ(g.size(), 0U);
}

TEST(SingleflightForget, AFlightWhereEveryCallerFailedLeavesNoKeyBehind) {
  test_scheduler s;
  group g;
  run_log log;
  manual_reset_event first_run;
  asyncband::stop_source stop;
  std::array<call_probe, 5> p;
  s.spawn(working(g, 1, scripted<>{&log, 1, &first_run, ending::exception}, p[0]));
  s.spawn(trying(g, 1, scripted<fallible_int>{&log, 2, nullptr, ending::error}, p[1]));
  s.spawn(working(g, 1, scripted<>{&log, 3}, stop.get_token(), p[2]));
  s.spawn(working(g, 1, scripted<>{&log, 4, nullptr, ending::exception}, p[3]));
  s.run();
  stop.request_stop();
  s.run();
  first_run.set();
  s.run();
  expect_failure(p[0], 1);
  expect_failure(p[1], 2);
  expect_cancelled(p[2]);
  expect_failure(p[3], 4);
  EXPECT_EQ(g.size(), 0U);
  EXPECT_FALSE(g.forget(1));

  s.spawn(working(g, 1, scripted<>{&log, 5}, p[4]));
  s.run();
  expect_value(p[4], 5);
  EXPECT_EQ(log.started, (std::vector<int>{1, 2, 4, 5}));
  EXPECT_EQ(g.size(), 0U);
}

// ---------------------------------------------------------------------------------------------
// Deterministic races at the waiter core's interleaving points

TEST(SingleflightRace, StopAtClaimedForWakeIsTooLateBothGetTheResult) {
  held h;
  stop_at_claimed_for_wake(h, release_held, wait_status::ok);
  EXPECT_EQ(h.primitive.size(), 0U);
}

TEST(SingleflightRace, CompletionAtClaimedForCancelGoesToTheOtherFollower) {
  held h;
  wake_at_claimed_for_cancel_goes_to_the_other_waiter(h, release_held);
  EXPECT_EQ(h.primitive.size(), 0U);
}

TEST(SingleflightRace, CompletionAtPublishedOrBeforeArmCompletesWithoutSuspending) {
  wake_before_suspension_completes_without_suspending([] { return held(); }, release_held,
                                                      [](held& h) {
                                                        EXPECT_EQ(h.log.started, (std::vector<int>{1}));
                                                        EXPECT_EQ(h.primitive.size(), 0U);
                                                      });
}

TEST(SingleflightRace, StopAtPublishedOrBeforeArmCancelsWithoutSuspending) {
  for (const test_point point : before_suspension) {
    SCOPED_TRACE(static_cast<int>(point));
    held h;
    stop_at_point_cancels_without_suspending(point, h, release_held);
    EXPECT_EQ(h.primitive.size(), 0U);
  }
}

TEST(SingleflightDestroy, DestroyingQueuedFollowersUnlinksThem) {
  held h;
  destroying_suspended_waiters_unlinks_them(h, release_held);
  EXPECT_EQ(h.log.started, (std::vector<int>{1}));
  EXPECT_EQ(h.primitive.size(), 0U);
}

// Awaited again after its own run failed (the only way it could suspend again), a call throws.
TEST(SingleflightMisuse, AwaitingAWorkAgainAfterItSuspendedThrowsLogicError) {
  held h;
  expect_awaiting_again_throws_logic_error(
      [&h] {
        return h.primitive.try_work(held::key, scripted<fallible_int>{&h.log, 2, nullptr, ending::error});
      },
      [&h] { h.release(ending::exception); });
  EXPECT_EQ(h.log.started, (std::vector<int>{1, 2}));
}

// ---------------------------------------------------------------------------------------------
// Blocking twins

TEST(SingleflightBlocking, ThreadsJoiningTheFlightGetItsResultAndRunNothing) {
  constexpr int n = 3;
  held h;
  std::latch parked(n);
  std::array<call_probe, n> p;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&h, &parked, &q = p[static_cast<std::size_t>(i)], i] {
      const thread_hook hook(test_point::before_arm, [&parked] { parked.count_down(); });
      call_blocking([&] { return h.primitive.work_blocking(held::key, scripted<>{&h.log, 10 + i}); }, q);
    });
  }
  parked.wait();
  EXPECT_EQ(h.primitive.size(), 1U);
  h.release();
  for (auto& t : threads) t.join();
  for (const auto& q : p) expect_value(q, 1);
  EXPECT_EQ(h.log.started, (std::vector<int>{1}));
  EXPECT_EQ(h.primitive.size(), 0U);
}

TEST(SingleflightBlocking, ALeaderFailureHandsTheRunToABlockedThreadWhichRunsItsOwnFunction) {
  held h;
  std::latch parked(1);
  std::atomic<int> runs{0};
  call_probe p;
  std::thread follower([&] {
    const thread_hook hook(test_point::before_arm, [&parked] { parked.count_down(); });
    call_blocking(
        [&] {
          return h.primitive.try_work_blocking(held::key, [&runs] {
            runs.fetch_add(1);
            return fallible_int::of(7);
          });
        },
        p);
  });
  parked.wait();
  h.release(ending::exception);
  follower.join();
  expect_failure(h.holder, 1);
  expect_value(p, 7);
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(h.primitive.size(), 0U);
}

TEST(SingleflightBlocking, WorkTimeoutTimesOutWhileTheFlightIsInProgress) {
  held h;
  EXPECT_TRUE(h.primitive.work_timeout(held::key, h.waiter_init(), 1ms).timed_out());
  EXPECT_TRUE(h.primitive.try_work_timeout(held::key, scripted<fallible_int>{&h.log, 3}, 0ms).timed_out());
  EXPECT_EQ(h.primitive.size(), 1U);
  h.release(ending::exception);  // nobody left to hand the run to
  EXPECT_EQ(h.primitive.size(), 0U);
  const auto again = h.primitive.work_timeout(held::key, h.waiter_init(), 0ms);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 2);
  EXPECT_EQ(h.log.started, (std::vector<int>{1, 2}));
}

TEST(SingleflightBlocking, WorkTimeoutCompletesWhenAnotherThreadLands) {
  held h;
  wait_timeout_completes_when_woken_by_another_thread(h, release_held);
}

TEST(SingleflightBlocking, WorkBlockingWithStopToken) {
  held h;
  blocking_wait_is_cancelled_by_another_thread(h);
  blocking_wait_is_woken_by_another_thread(h, release_held);
  EXPECT_EQ(h.primitive.size(), 0U);
}

TEST(SingleflightBlocking, BlockOnWork) {
  held h;
  const auto p = block_on_waits_complete_when_woken_by_another_thread<valued_probe>(h, release_held);
  EXPECT_EQ(p.value, 2);  // after the flight landed, the task's call ran again
}

TEST(SingleflightBlocking, BlockOnWorkIsCancelledByAStopFromAnotherThread) {
  held h;
  block_on_wait_is_cancelled_by_another_thread(h);
  h.release();
  EXPECT_EQ(h.primitive.size(), 0U);
}

// ---------------------------------------------------------------------------------------------
// Last one out: a follower resumed inline by the leader's completion, failure or destruction (or
// a blocked thread woken by it) destroys the group at once.

class SingleflightLifetime : public testing::TestWithParam<lifetime::row> {};

TEST_P(SingleflightLifetime, AFollowerWokenByTheLeaderMayDestroyTheGroup) {
  run_row(GetParam());
}

INSTANTIATE_TEST_SUITE_P(singleflight, SingleflightLifetime,
                         testing::ValuesIn(held_run_rows<work_calls>("singleflight")),
                         [](const testing::TestParamInfo<lifetime::row>& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// Stress: every caller is consistent (support/once_calls.hpp): no two runs of a key overlap, a
// value comes from a successful run of its key, a failure is the caller's own; and no flight is
// left behind.

TEST(SingleflightStress, RunsNeverOverlapAndEveryCallerGetsARunsResultItsOwnFailureOrCancelled) {
  run_stress_rounds<work_calls>([](int round, stress_round<work_calls>& r) {
    EXPECT_EQ(r.primitive().size(), 0U) << "round " << round;
  });
}

}  // namespace
