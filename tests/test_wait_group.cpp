// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::wait_group: membership through handles (copy adds, destroy/leave removes,
// move transfers), waits that leave first and then wait for zero members (coroutines, plain
// threads, block_on), new rounds, cancellation, deterministic races on the test scheduler,
// destroying a suspended waiter, and bounded multi-threaded stress.
#include "asyncband/wait_group.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/runtime/when_all.hpp"
#include "asyncband/stop_token.hpp"
#include "support/destroyed_with_waiters.hpp"
#include "support/lifetime.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"

namespace {

using namespace asyncband_test;
using asyncband::wait_group;
using asyncband::runtime::thread_pool;

// ---------------------------------------------------------------------------------------------
// Helpers

/// What one wait reported (see probe), and members() seen right after it.
struct outcome : probe {
  std::size_t members_after = 0;
  void after_wait(wait_group& wg) { members_after = wg.members(); }
};

/// Waits on `wg` from this thread in one of the four blocking forms (form % 4: wait_blocking(),
/// wait_blocking(token), wait_timeout(10min), block_on(wait())); false if a form that reports a
/// status reported anything but ok.
bool wait_in_blocking_form(wait_group& wg, int form) {
  asyncband::stop_source never;
  switch (form % 4) {
    case 0:
      wg.wait_blocking();
      return true;
    case 1:
      return wg.wait_blocking(never.get_token()).ok();
    case 2:
      return wg.wait_timeout(10min).ok();  // only a hang would reach the deadline
    default:
      asyncband::block_on(wg.wait());
      return true;
  }
}

/// A group with one other member (`other`) and a cancellable waiter task on `wg`, not started.
struct cancellable_waiter_and_one_other_member {
  test_scheduler s;
  wait_group wg;
  wait_group other = wg;
  asyncband::stop_source src;
  outcome w;
  task<void> tw = stoppable_waiter(wg, src.get_token(), w);

  /// Starts the waiter and runs it until it suspends.
  void start_and_suspend() {
    start_on(s, tw);
    s.run();
  }
};

/// A task that is a member (its own handle) until it leaves.
task<void> leave_later(wait_group member) {
  member.leave();
  co_return;
}

// ---------------------------------------------------------------------------------------------
// Membership

TEST(WaitGroup, NewGroupHasItsHandleAsOnlyMember) {
  wait_group wg;
  EXPECT_TRUE(wg.is_member());
  EXPECT_EQ(wg.members(), 1U);
}

TEST(WaitGroup, CopiesAddMembersAndDestructionRemovesThem) {
  wait_group wg;
  {
    wait_group a = wg;  // NOLINT(performance-unnecessary-copy-initialization): the copy is the point
    EXPECT_TRUE(a.is_member());
    EXPECT_EQ(wg.members(), 2U);
    {
      const wait_group b(a);
      EXPECT_EQ(wg.members(), 3U);
      EXPECT_EQ(b.members(), 3U);
    }
    EXPECT_EQ(wg.members(), 2U);
  }
  EXPECT_EQ(wg.members(), 1U);
  std::vector<wait_group> many(10, wg);
  EXPECT_EQ(wg.members(), 11U);
  many.clear();
  EXPECT_EQ(wg.members(), 1U);
}

TEST(WaitGroup, LeaveRemovesOnceAndIsIdempotent) {
  wait_group wg;
  wait_group a = wg;
  EXPECT_EQ(wg.members(), 2U);
  a.leave();
  EXPECT_FALSE(a.is_member());
  EXPECT_EQ(wg.members(), 1U);
  a.leave();
  EXPECT_EQ(wg.members(), 1U);
  EXPECT_EQ(a.members(), 1U);  // a former member still sees the group
  // A copy of a former member is a member (it joins the group).
  wait_group c = a;
  EXPECT_TRUE(c.is_member());
  EXPECT_EQ(wg.members(), 2U);
}

TEST(WaitGroup, MoveTransfersMembershipAndLeavesTheSourceEmpty) {
  wait_group wg;
  wait_group a = wg;
  EXPECT_EQ(wg.members(), 2U);
  wait_group moved(std::move(a));
  EXPECT_EQ(wg.members(), 2U);  // no change: the membership moved
  EXPECT_TRUE(moved.is_member());
  EXPECT_FALSE(a.is_member());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(a.members(), 0U);   // NOLINT(bugprone-use-after-move): it has no group
  a.leave();                    // NOLINT(bugprone-use-after-move): no effect
  EXPECT_EQ(wg.members(), 2U);
  // A copy of a moved-from handle has no group either.
  wait_group copy_of_empty = a;  // NOLINT(bugprone-use-after-move)
  EXPECT_FALSE(copy_of_empty.is_member());
  EXPECT_EQ(copy_of_empty.members(), 0U);
  EXPECT_EQ(wg.members(), 2U);
}

TEST(WaitGroup, MoveAssignmentLeavesTheOldGroup) {
  wait_group g1;
  wait_group g2;
  wait_group h = g1;
  EXPECT_EQ(g1.members(), 2U);
  h = wait_group(g2);  // h leaves g1, takes the new member of g2
  EXPECT_EQ(g1.members(), 1U);
  EXPECT_EQ(g2.members(), 2U);
  EXPECT_TRUE(h.is_member());
  wait_group src = g2;
  EXPECT_EQ(g2.members(), 3U);
  h = std::move(src);  // h leaves g2 once, src's membership moves in
  EXPECT_EQ(g2.members(), 2U);
  EXPECT_FALSE(src.is_member());  // NOLINT(bugprone-use-after-move)
  auto& self = h;
  h = std::move(self);  // self-move: nothing changes
  EXPECT_TRUE(h.is_member());
  EXPECT_EQ(g2.members(), 2U);
}

TEST(WaitGroup, CopyAssignment) {
  wait_group g1;
  wait_group g2;
  wait_group h = g1;
  h = g2;
  EXPECT_TRUE(h.is_member());
  EXPECT_EQ(g1.members(), 1U);
  EXPECT_EQ(g2.members(), 2U);
  const auto& self = h;
  h = self;  // self-assignment: nothing changes
  EXPECT_TRUE(h.is_member());
  EXPECT_EQ(g2.members(), 2U);
  // Reassigning a handle within its own group: the count never reaches zero in between.
  test_scheduler s;
  outcome w;
  wait_group waiter_handle = g2;
  EXPECT_EQ(g2.members(), 3U);
  auto tw = plain_waiter(waiter_handle, w);
  start_on(s, tw);
  s.run();
  EXPECT_EQ(w.resumed, 0);
  g2.leave();
  EXPECT_EQ(g2.members(), 1U);  // only h
  h = g2;                       // g2 is a former member: h joins again (+1) and leaves (-1)
  EXPECT_EQ(g2.members(), 1U);
  EXPECT_EQ(s.ready_count(), 0U);
  h.leave();
  s.run();
  EXPECT_EQ(w.resumed, 1);
}

TEST(WaitGroup, CopyAssignmentLeavingTheLastMemberWakesItsWaiters) {
  test_scheduler s;
  wait_group g1;
  wait_group h = g1;
  outcome w;
  auto tw = plain_waiter(g1, w);  // g1 leaves; h is the last member
  start_on(s, tw);
  s.run();
  EXPECT_EQ(w.resumed, 0);
  wait_group g2;
  h = g2;  // h leaves g1
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::ok);
  EXPECT_EQ(g2.members(), 2U);
}

TEST(WaitGroup, MaxIsHalfTheSizeRange) {
  static_assert(wait_group::max() == std::numeric_limits<std::size_t>::max() / 2);
  static_assert(std::is_nothrow_move_constructible_v<wait_group>);
  static_assert(!std::is_nothrow_copy_constructible_v<wait_group>);  // a copy may overflow
  EXPECT_EQ(wait_group::max(), std::numeric_limits<std::size_t>::max() / 2);
}

}  // namespace

// The test seam the header befriends: sets the member count, so that max() is reachable.
struct asyncband::detail::wait_group_test_access {
  static void add_members(wait_group& wg, std::size_t n) { wg.state_->members.fetch_add(n); }
  static void remove_members(wait_group& wg, std::size_t n) { wg.state_->members.fetch_sub(n); }
};

namespace {

TEST(WaitGroup, CopyBeyondMaxThrowsOverflowErrorAndChangesNothing) {
  using access = asyncband::detail::wait_group_test_access;
  wait_group wg;
  access::add_members(wg, wait_group::max() - 1);  // wg plus the added ones: max() members
  ASSERT_EQ(wg.members(), wait_group::max());
  EXPECT_THROW({ wait_group extra(wg); }, std::overflow_error);
  EXPECT_EQ(wg.members(), wait_group::max());
  access::remove_members(wg, 1);
  {
    const wait_group last_one(wg);  // exactly max() again: allowed
    EXPECT_EQ(wg.members(), wait_group::max());
  }
  access::remove_members(wg, wait_group::max() - 2);
  EXPECT_EQ(wg.members(), 1U);
  wg.wait_blocking();  // the group still works: leaving the last member releases the wait
  EXPECT_EQ(wg.members(), 0U);
}

// ---------------------------------------------------------------------------------------------
// Waiting

TEST(WaitGroup, WaitOnTheSoleMemberCompletesAtOnceInEveryForm) {
  {
    wait_group wg;
    wg.wait_blocking();
    EXPECT_FALSE(wg.is_member());
    EXPECT_EQ(wg.members(), 0U);
    wg.wait_blocking();  // waiting again at zero, as a former member
  }
  {
    wait_group wg;
    asyncband::stop_source never;
    EXPECT_TRUE(wg.wait_blocking(never.get_token()).ok());
    EXPECT_EQ(wg.members(), 0U);
  }
  {
    wait_group wg;
    EXPECT_TRUE(wg.wait_timeout(0ms).ok());  // zero at the call: the deadline does not matter
    EXPECT_EQ(wg.members(), 0U);
  }
  {
    wait_group wg;
    asyncband::block_on(wg.wait());
    EXPECT_FALSE(wg.is_member());
  }
  {
    wait_group wg;
    asyncband::stop_source never;
    EXPECT_TRUE(asyncband::block_on(wg.wait(never.get_token())).ok());
  }
  {
    test_scheduler s;
    wait_group wg;
    outcome w;
    auto tw = plain_waiter(wg, w);
    start_on(s, tw);
    EXPECT_EQ(s.run(), 1U);  // one step: it never suspends
    EXPECT_EQ(w.resumed, 1);
    EXPECT_EQ(w.members_after, 0U);
  }
}

TEST(WaitGroup, WaitLeavesFirstThenWaitsForTheOtherMembers) {
  test_scheduler s;
  wait_group wg;
  wait_group m1 = wg;
  wait_group m2 = wg;
  outcome w;
  auto tw = plain_waiter(wg, w);
  start_on(s, tw);
  s.run();
  EXPECT_FALSE(wg.is_member());  // left at the call
  EXPECT_EQ(wg.members(), 2U);
  EXPECT_EQ(w.resumed, 0);
  m1.leave();
  EXPECT_EQ(s.ready_count(), 0U);
  EXPECT_EQ(w.resumed, 0);
  { const wait_group gone = std::move(m2); }  // destruction is a departure too
  EXPECT_EQ(s.ready_count(), 1U);             // posted to its scheduler, not resumed inline
  EXPECT_EQ(w.resumed, 0);
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::ok);
  EXPECT_EQ(w.members_after, 0U);
  EXPECT_TRUE(tw.done());
}

TEST(WaitGroup, LastDepartureWakesEveryWaiterOnce) {
  test_scheduler s;
  wait_group wg;
  std::vector<wait_group> waiters(5, wg);
  wg.leave();
  wait_group worker = waiters[0];
  std::vector<outcome> outs(waiters.size());
  std::vector<task<void>> tasks;
  for (std::size_t i = 0; i < waiters.size(); ++i) tasks.push_back(plain_waiter(waiters[i], outs[i]));
  for (auto& t : tasks) start_on(s, t);
  s.run();
  EXPECT_EQ(wg.members(), 1U);  // only the worker
  for (auto& o : outs) EXPECT_EQ(o.resumed, 0);
  auto tl = leave_later(std::move(worker));
  start_on(s, tl);
  s.run();
  for (auto& o : outs) {
    EXPECT_EQ(o.resumed, 1);
    EXPECT_EQ(o.status, wait_status::ok);
  }
  EXPECT_EQ(s.run(), 0U);
}

TEST(WaitGroup, MemberTasksOnTheTestScheduler) {
  for (std::uint64_t seed : {1ULL, 7ULL, 99ULL}) {
    test_scheduler s(seed);
    wait_group wg;
    std::vector<int> done(8, 0);
    std::vector<task<void>> members;
    for (std::size_t i = 0; i < done.size(); ++i) {
      members.push_back([](wait_group, int& slot) -> task<void> {
        slot = 1;
        co_return;  // the member leaves when the frame is destroyed
      }(wg, done[i]));
    }
    outcome w;
    auto checker = [](wait_group& group, std::vector<int>& work, outcome& out) -> task<void> {
      co_await group.wait();
      ++out.resumed;
      for (int d : work) EXPECT_EQ(d, 1);
    }(wg, done, w);
    start_on(s, checker);
    for (auto& m : members) start_on(s, m);
    s.run();
    EXPECT_EQ(w.resumed, 0);  // finished members still hold their handles in their frames
    EXPECT_EQ(wg.members(), done.size());
    members.clear();  // destroying the frames drops the members
    s.run();
    EXPECT_EQ(w.resumed, 1);
  }
}

TEST(WaitGroup, PlainThreadsWaitWithBlockingTwins) {
  for (int form = 0; form < 4; ++form) {
    SCOPED_TRACE(form);
    wait_group wg;
    std::vector<int> work(4, 0);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < work.size(); ++i) {
      threads.emplace_back([member = wait_group(wg), &work, i]() mutable {
        work[i] = static_cast<int>(i) + 1;
        member.leave();
      });
    }
    EXPECT_TRUE(wait_in_blocking_form(wg, form));
    EXPECT_EQ(wg.members(), 0U);
    for (std::size_t i = 0; i < work.size(); ++i) EXPECT_EQ(work[i], static_cast<int>(i) + 1);
    for (auto& t : threads) t.join();
  }
}

TEST(WaitGroup, WaiterOnAPlainThreadMemberOnThisOne) {
  wait_group wg;
  wait_group member = wg;
  int work = 0;
  std::thread waiter([&wg, &work] {
    wg.wait_blocking();
    EXPECT_EQ(work, 42);
  });
  work = 42;
  member.leave();
  waiter.join();
}

TEST(WaitGroup, WaitTimeoutExpiresAndTheMembershipStaysGivenUp) {
  wait_group wg;
  wait_group other = wg;
  const auto r = wg.wait_timeout(0ms);
  EXPECT_TRUE(r.timed_out());
  EXPECT_FALSE(wg.is_member());
  EXPECT_EQ(wg.members(), 1U);
  other.leave();
  EXPECT_EQ(wg.members(), 0U);
  EXPECT_TRUE(wg.wait_timeout(0ms).ok());
}

// ---------------------------------------------------------------------------------------------
// Rounds

TEST(WaitGroup, ACopyMadeAfterZeroStartsANewRound) {
  test_scheduler s;
  wait_group wg;
  wait_group m = wg;
  outcome first;
  auto t1 = plain_waiter(wg, first);
  start_on(s, t1);
  s.run();
  m.leave();
  s.run();
  EXPECT_EQ(first.resumed, 1);
  EXPECT_EQ(wg.members(), 0U);

  // Zero now; a copy (of a former member) starts a new round.
  wait_group late = wg;
  EXPECT_TRUE(late.is_member());
  EXPECT_EQ(wg.members(), 1U);
  outcome second;
  auto t2 = plain_waiter(wg, second);  // wg is not a member: leaving does nothing
  start_on(s, t2);
  s.run();
  EXPECT_EQ(second.resumed, 0);  // waits for `late`
  EXPECT_TRUE(wg.wait_timeout(0ms).timed_out());
  late.leave();
  s.run();
  EXPECT_EQ(second.resumed, 1);
  EXPECT_EQ(second.status, wait_status::ok);
  EXPECT_EQ(first.resumed, 1);  // the first waiter is not resumed again
}

// ---------------------------------------------------------------------------------------------
// Cancellation

TEST(WaitGroup, AlreadyStoppedTokenCancelsButStillLeaves) {
  test_scheduler s;
  wait_group wg;
  wait_group a = wg;
  wait_group b = wg;
  wait_group keep = wg;
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_EQ(wg.members(), 4U);

  EXPECT_TRUE(a.wait_blocking(stopped.get_token()).cancelled());
  EXPECT_FALSE(a.is_member());
  EXPECT_EQ(wg.members(), 3U);

  EXPECT_TRUE(asyncband::block_on(b.wait(stopped.get_token())).cancelled());
  EXPECT_FALSE(b.is_member());
  EXPECT_EQ(wg.members(), 2U);

  outcome c;
  auto tc = stoppable_waiter(wg, stopped.get_token(), c);
  start_on(s, tc);
  s.run();
  EXPECT_EQ(c.resumed, 1);
  EXPECT_EQ(c.status, wait_status::cancelled);
  EXPECT_FALSE(wg.is_member());
  EXPECT_EQ(wg.members(), 1U);  // only `keep`

  keep.leave();
  EXPECT_EQ(wg.members(), 0U);
  // Even at zero, an already-stopped token reports cancelled (the wait does not start).
  EXPECT_TRUE(wg.wait_blocking(stopped.get_token()).cancelled());
}

TEST(WaitGroup, StopWhileSuspendedCancelsOnceAndTheMembershipStaysGivenUp) {
  cancellable_waiter_and_one_other_member f;
  auto& [s, wg, other, src, w, tw] = f;
  f.start_and_suspend();
  EXPECT_EQ(w.resumed, 0);
  EXPECT_EQ(wg.members(), 1U);

  src.request_stop();
  EXPECT_EQ(s.ready_count(), 1U);  // posted to its scheduler
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::cancelled);
  EXPECT_FALSE(wg.is_member());  // no rejoin
  EXPECT_EQ(wg.members(), 1U);

  other.leave();  // the last departure: nobody is queued any more
  EXPECT_EQ(s.ready_count(), 0U);
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(wg.members(), 0U);
  EXPECT_TRUE(tw.done());
}

TEST(WaitGroup, BlockingWaitCancelledFromAnotherThread) {
  wait_group wg;
  wait_group other = wg;
  asyncband::stop_source src;
  std::optional<asyncband::result<void>> r;
  std::thread t([&] { r.emplace(wg.wait_blocking(src.get_token())); });
  src.request_stop();  // before or after the thread parks: cancelled either way
  t.join();
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->cancelled());
  EXPECT_FALSE(wg.is_member());
  EXPECT_EQ(wg.members(), 1U);
}

TEST(WaitGroup, BlockOnCancellableWaitStoppedFromAnotherThread) {
  wait_group wg;
  wait_group other = wg;
  asyncband::stop_source src;
  std::thread t([&] { src.request_stop(); });
  const auto r = asyncband::block_on(wg.wait(src.get_token()));
  t.join();
  EXPECT_TRUE(r.cancelled());
  EXPECT_EQ(wg.members(), 1U);
}

// ---------------------------------------------------------------------------------------------
// Deterministic races (test_scheduler::at)

class WaitGroupLastLeavesAt : public ::testing::TestWithParam<std::pair<test_point, bool>> {};

TEST_P(WaitGroupLastLeavesAt, WaiterResumesOnceWithOk) {
  const auto [point, cancellable] = GetParam();
  test_scheduler s;
  wait_group wg;
  wait_group last = wg;
  asyncband::stop_source never;
  outcome w;
  auto tw = cancellable ? stoppable_waiter(wg, never.get_token(), w) : plain_waiter(wg, w);
  // The last member leaves after the waiter is linked, before it arms.
  s.at(point, [&] { last.leave(); });
  start_on(s, tw);
  EXPECT_TRUE(s.step());
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_EQ(w.resumed, 1);  // resolved before it armed: it continued inline
  EXPECT_EQ(w.status, wait_status::ok);
  EXPECT_EQ(w.members_after, 0U);
  EXPECT_EQ(s.ready_count(), 0U);
  EXPECT_EQ(s.run(), 0U);
  EXPECT_EQ(w.resumed, 1);
  EXPECT_TRUE(tw.done());
}

INSTANTIATE_TEST_SUITE_P(Points, WaitGroupLastLeavesAt,
                         ::testing::Values(std::pair{test_point::published, false},
                                           std::pair{test_point::before_arm, false},
                                           std::pair{test_point::published, true},
                                           std::pair{test_point::before_arm, true}));

TEST(WaitGroup, LastMemberLeavingFromAnotherCoroutineAtPublished) {
  test_scheduler s;
  wait_group wg;
  outcome w;
  auto tw = plain_waiter(wg, w);
  auto tl = leave_later(wg);  // a member until it runs
  s.at(test_point::published, [&] { run_inline(s, tl); });
  start_on(s, tw);
  s.run();
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_TRUE(tl.done());
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::ok);
}

TEST(WaitGroup, StopRequestedAtPublishedCancels) {
  cancellable_waiter_and_one_other_member f;
  auto& [s, wg, other, src, w, tw] = f;
  s.at(test_point::published, [&f] { f.src.request_stop(); });
  start_on(s, tw);
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::cancelled);
  EXPECT_EQ(wg.members(), 1U);
  other.leave();
  EXPECT_EQ(s.ready_count(), 0U);
  EXPECT_EQ(w.resumed, 1);
}

TEST(WaitGroup, StopRequestedAfterTheLastDepartureClaimedTheWaiterIsTooLate) {
  cancellable_waiter_and_one_other_member f;
  auto& [s, wg, last, src, w, tw] = f;
  f.start_and_suspend();
  s.at(test_point::claimed_for_wake, [&f] { f.src.request_stop(); });
  last.leave();
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_TRUE(src.stop_requested());
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::ok);
  EXPECT_EQ(s.ready_count(), 0U);
}

TEST(WaitGroup, LastDepartureDuringCancellationDoesNotResumeTwice) {
  cancellable_waiter_and_one_other_member f;
  auto& [s, wg, last, src, w, tw] = f;
  f.start_and_suspend();
  // The cancellation unlinked the waiter; the last member leaves before it is resolved.
  s.at(test_point::claimed_for_cancel, [&f] { f.other.leave(); });
  src.request_stop();
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_EQ(wg.members(), 0U);
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::cancelled);
}

TEST(WaitGroup, DestroyingASuspendedWaiterUnlinksItsNode) {
  test_scheduler s;
  wait_group wg;
  wait_group last = wg;
  asyncband::stop_source src;
  outcome a, b, c;
  auto ta = plain_waiter(wg, a);
  wait_group wg2 = last;  // a second waiting handle (a member until it waits)
  auto tb = stoppable_waiter(wg2, src.get_token(), b);
  wait_group wg3 = last;
  auto tc = plain_waiter(wg3, c);
  start_on(s, ta);
  start_on(s, tb);
  start_on(s, tc);
  s.run();
  EXPECT_EQ(wg.members(), 1U);
  ta = task<void>();   // destroys a frame suspended in wait(): its node must leave the list
  tb = task<void>();   // and a cancellable one: its stop callback must be gone too
  src.request_stop();  // must not reach the destroyed node
  EXPECT_EQ(s.ready_count(), 0U);
  last.leave();  // wakes only `c` (and must not touch the destroyed nodes)
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(c.resumed, 1);
  EXPECT_EQ(a.resumed, 0);
  EXPECT_EQ(b.resumed, 0);
}

// ---------------------------------------------------------------------------------------------
// Regression: a new round must not be released by the previous round's last departure.
//
// leave() used to decrement the count (fetch_sub) and only afterwards take the group's lock to
// claim the waiters. In between, another thread could start a new round (copy a handle: 0 -> 1)
// and then a wait, which saw one member under the lock and linked itself; the stale wake-up of
// the previous round then claimed it, and the wait completed with `ok` while the new member was
// still there. The count now moves to and from zero only under the lock. There is no test point
// between the decrement and the lock (there is no such gap any more), so this is a bounded race:
// it failed within a few hundred rounds before the fix.

TEST(WaitGroupRace, AWaitInANewRoundIsNotReleasedByThePreviousRoundsLastDeparture) {
  // A third thread keeps the group's lock busy with probe waits (by a non-member handle), so that
  // the leaving thread often has to block on the lock right after its decrement: that widens the
  // window from a few instructions to a futex wake-up.
  std::atomic<wait_group*> probe_handle{nullptr};
  std::atomic<bool> probing{false};
  std::atomic<bool> quit{false};
  std::thread prober([&] {
    while (!quit.load()) {
      probing.store(true);
      if (wait_group* probe = probe_handle.load()) (void)probe->wait_timeout(0ms);
      probing.store(false);
    }
  });
  int spurious = 0;
  const int rounds = repeat_for(5000, 1500ms, [&](int /*round*/) {
    wait_group wg;
    wait_group last = wg;
    wait_group probe = wg;
    probe.leave();
    wg.leave();  // `last` is the only member
    probe_handle.store(&probe);
    std::thread leaver([&last] { last.leave(); });  // the round ends on another thread
    while (wg.members() != 0) {
    }                            // spin until the count is zero: the previous round has just ended
    const wait_group late = wg;  // a new round: one member
    // A later wait must wait for `late`, which does not leave before the wait ends: the only
    // correct outcome is timeout (the zero deadline only keeps a correct run from blocking).
    if (wg.wait_timeout(0ms).ok()) ++spurious;
    leaver.join();
    probe_handle.store(nullptr);
    while (probing.load()) {
    }  // the prober is done with `probe`
    return spurious == 0;
  });
  quit.store(true);
  prober.join();
  EXPECT_EQ(spurious, 0) << "after " << rounds
                         << " rounds: a wait started in a new round (one member) completed with ok; it was "
                            "released by the previous round's last departure";
}

// ---------------------------------------------------------------------------------------------
// Stress: bounded in rounds and time. Members write plain data and leave; the waiter must see
// all of it (TSan checks the happens-before).

constexpr auto kStressTime = 600ms;

task<void> pool_member(thread_pool& pool, wait_group member, std::vector<int>& work, std::size_t i,
                       int round) {
  co_await pool.schedule();
  if (i % 2 == 0) {
    work[i] = round;
    member.leave();
  } else {
    const wait_group mine = std::move(member);  // departs when this scope ends
    work[i] = round;
  }
}

TEST(WaitGroupStress, PoolMembersPlainThreadWaiter) {
  constexpr std::size_t kMembers = 6;
  std::vector<int> work(kMembers, 0);
  thread_pool pool(2);
  int failures = 0;
  const int rounds = repeat_for(3000, kStressTime, [&](int index) {
    const int round = index + 1;
    wait_group wg;
    for (std::size_t i = 0; i < kMembers; ++i) {
      asyncband::runtime::spawn(pool.ref(), pool_member(pool, wg, work, i, round));
    }
    if (!wait_in_blocking_form(wg, round)) ++failures;
    if (wg.members() != 0) ++failures;
    for (int w : work) {
      if (w != round) ++failures;
    }
  });
  EXPECT_EQ(failures, 0) << "in " << rounds << " rounds";
}

task<void> pool_waiter(thread_pool& pool, wait_group& wg, const std::vector<int>& work, int round,
                       int& failures) {
  co_await pool.schedule();
  co_await wg.wait();
  if (!pool.on_worker_thread()) ++failures;  // woken by a plain thread: posted to the pool
  for (int w : work) {
    if (w != round) ++failures;
  }
}

TEST(WaitGroupStress, PlainThreadMembersPoolWaiter) {
  constexpr std::size_t kMembers = 2;
  std::vector<int> work(kMembers, 0);
  thread_pool pool(2);
  int failures = 0;
  const int rounds = repeat_for(300, kStressTime, [&](int index) {
    const int round = index + 1;
    wait_group wg;
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < kMembers; ++i) {
      threads.emplace_back([member = wait_group(wg), &work, i, round]() mutable {
        work[i] = round;
        member.leave();
      });
    }
    asyncband::block_on(pool_waiter(pool, wg, work, round, failures));
    for (auto& t : threads) t.join();
  });
  EXPECT_EQ(failures, 0) << "in " << rounds << " rounds";
}

TEST(WaitGroupStress, ManyPoolTasksWaitTogether) {
  constexpr std::size_t kMembers = 4;
  constexpr int kWaiters = 3;
  std::vector<int> work(kMembers, 0);
  thread_pool pool(2);
  std::vector<int> failures(kWaiters, 0);
  const int rounds = repeat_for(3000, kStressTime, [&](int index) {
    const int round = index + 1;
    wait_group wg;
    std::vector<wait_group> waiting(kWaiters, wg);
    std::vector<task<void>> tasks;
    for (std::size_t i = 0; i < kMembers; ++i) tasks.push_back(pool_member(pool, wg, work, i, round));
    wg.leave();
    for (int k = 0; k < kWaiters; ++k) {
      tasks.push_back(pool_waiter(pool, waiting[static_cast<std::size_t>(k)], work, round,
                                  failures[static_cast<std::size_t>(k)]));
    }
    asyncband::block_on(asyncband::runtime::when_all(std::move(tasks)));
    if (wg.members() != 0) ++failures[0];
  });
  for (int f : failures) EXPECT_EQ(f, 0) << "in " << rounds << " rounds";
}

// The last departure, a stop request and the waiter race on the pool: the wait resumes once,
// and when it reports ok, all the members' work is visible.

task<void> pool_cancellable_waiter(thread_pool& pool, wait_group& wg, asyncband::stop_token token,
                                   const std::vector<int>& work, int round, outcome& out, int& failures) {
  co_await pool.schedule();
  auto r = co_await wg.wait(std::move(token));
  ++out.resumed;
  out.status = r.status();
  if (r.ok()) {
    for (int w : work) {
      if (w != round) ++failures;
    }
  }
}

TEST(WaitGroupStress, StopRacesLastDeparture) {
  constexpr std::size_t kMembers = 2;
  std::vector<int> work(kMembers, 0);
  thread_pool pool(2);
  int failures = 0;
  int oks = 0;
  const int rounds = repeat_for(3000, kStressTime, [&](int index) {
    const int round = index + 1;
    wait_group wg;
    asyncband::stop_source src;
    outcome w;
    std::vector<task<void>> tasks;
    for (std::size_t i = 0; i < kMembers; ++i) tasks.push_back(pool_member(pool, wg, work, i, round));
    tasks.push_back(pool_cancellable_waiter(pool, wg, src.get_token(), work, round, w, failures));
    tasks.push_back(pool_request_stop(pool, src));
    asyncband::block_on(asyncband::runtime::when_all(std::move(tasks)));
    if (w.resumed != 1) ++failures;
    if (w.status != wait_status::ok && w.status != wait_status::cancelled) ++failures;
    if (w.status == wait_status::ok) ++oks;
    if (wg.is_member() || wg.members() != 0) ++failures;
  });
  EXPECT_EQ(failures, 0) << "in " << rounds << " rounds, " << oks << " completed";
}

TEST(WaitGroupStress, StopRacesLastDepartureForABlockingWaiter) {
  constexpr std::size_t kMembers = 2;
  std::vector<int> work(kMembers, 0);
  thread_pool pool(2);
  int failures = 0;
  const int rounds = repeat_for(300, kStressTime, [&](int index) {  // a thread per round
    const int round = index + 1;
    wait_group wg;
    asyncband::stop_source src;
    std::vector<task<void>> tasks;
    for (std::size_t i = 0; i < kMembers; ++i) tasks.push_back(pool_member(pool, wg, work, i, round));
    tasks.push_back(pool_request_stop(pool, src));
    // The blocking twin on a plain thread races the pool.
    std::optional<asyncband::result<void>> r;
    std::thread waiter([&] { r.emplace(wg.wait_blocking(src.get_token())); });
    asyncband::block_on(asyncband::runtime::when_all(std::move(tasks)));
    waiter.join();
    if (!r || !(r->ok() || r->cancelled())) ++failures;
    if (r && r->ok()) {
      for (int w : work) {
        if (w != round) ++failures;
      }
    }
  });
  EXPECT_EQ(failures, 0) << "in " << rounds << " rounds";
}

// ---------------------------------------------------------------------------------------------
// Last one out through assignment (found by the lifetime harness, tests/test_lifetime.cpp):
// assigning to the last member's handle leaves, which resumes a scheduler-less waiter inline, and
// that waiter may destroy the handle at once. The assignment used to write the handle after the
// leave (heap-use-after-free; without ASan, the harness's quarantine sees the late write).

struct last_member_world {
  wait_group mine;
  wait_group last{mine};
};

TEST(WaitGroupLastOneOut, MoveAssigningTheLastMembersHandleLetsTheWaiterDestroyIt) {
  using namespace asyncband_test::lifetime;
  coroutine_row<last_member_world, waker_base>(
      "move_assigned", "ok", no_setup{},
      [](last_member_world& w, asyncband::stop_token) { return w.mine.wait(); },
      [](last_member_world* w, waker_base&) { w->last = wait_group{}; })
      .body();
}

TEST(WaitGroupLastOneOut, CopyAssigningTheLastMembersHandleLetsTheWaiterDestroyIt) {
  using namespace asyncband_test::lifetime;
  struct other_group : waker_base {
    wait_group group;
  };
  coroutine_row<last_member_world, other_group>(
      "copy_assigned", "ok", no_setup{},
      [](last_member_world& w, asyncband::stop_token) { return w.mine.wait(); },
      [](last_member_world* w, other_group& k) { w->last = k.group; })
      .body();
}

TEST(WaitGroupLastOneOut, AssignmentKeepsTheCounts) {
  wait_group a;
  wait_group b(a);
  wait_group other;
  b = other;  // b leaves a's group and joins other's
  EXPECT_EQ(a.members(), 1U);
  EXPECT_EQ(other.members(), 2U);
  b = std::move(a);  // b leaves other's group and takes a's membership
  EXPECT_EQ(other.members(), 1U);
  EXPECT_EQ(b.members(), 1U);
  EXPECT_TRUE(b.is_member());
}

// Issue 11: the wait forms leave first. When that departure is the last member's, it resumes a
// scheduler-less waiter inline, which may destroy the handle whose wait is being made: the wait
// must then be over without reading the handle (heap-use-after-free under ASan before the fix).

task<void> wait_then_drop(wait_group wg, std::unique_ptr<wait_group>& victim, probe& p) {
  ++p.started;
  co_await wg.wait();
  p.finish(wait_status::ok);
  victim.reset();
}

task<void> wait_on(wait_group& wg, bool stoppable, std::optional<wait_status>& out) {
  asyncband::stop_source never;
  if (stoppable) {
    out = (co_await wg.wait(never.get_token())).status();
  } else {
    co_await wg.wait();
    out = wait_status::ok;
  }
}

class WaitGroupLastDepartureLifetime : public ::testing::TestWithParam<int> {};

TEST_P(WaitGroupLastDepartureLifetime, AWaiterResumedInlineByTheWaitsOwnDepartureMayDestroyTheHandle) {
  const int form = GetParam();
  auto holder = std::make_unique<wait_group>();
  probe seen;
  task<void> dropper = wait_then_drop(*holder, holder, seen);  // a copy: a second member
  dropper.handle().resume();  // leaves; waits for the holder, resumed inline by its departure
  ASSERT_EQ(seen.resumed, 0);
  wait_group& last = *holder;
  std::optional<wait_status> waited;
  task<void> waiting;
  asyncband::stop_source never;
  switch (form) {
    case 0:
    case 1:
      waiting = wait_on(last, form == 1, waited);
      waiting.handle().resume();
      EXPECT_TRUE(waiting.done());
      break;
    case 2:
      last.wait_blocking();
      waited = wait_status::ok;
      break;
    case 3:
      waited = last.wait_blocking(never.get_token()).status();
      break;
    case 4:
      waited = last.wait_timeout(10min).status();
      break;
    default:
      asyncband::block_on(last.wait());
      waited = wait_status::ok;
      break;
  }
  EXPECT_EQ(seen.resumed, 1);
  EXPECT_EQ(holder, nullptr);
  EXPECT_EQ(waited, wait_status::ok);
}

INSTANTIATE_TEST_SUITE_P(EveryForm, WaitGroupLastDepartureLifetime, ::testing::Range(0, 6));

TEST(WaitGroupLifetime, AMoveAssignmentLeavesAsItsLastAccess) {
  auto holder = std::make_unique<wait_group>();
  probe seen;
  task<void> dropper = wait_then_drop(*holder, holder, seen);
  dropper.handle().resume();
  ASSERT_EQ(seen.resumed, 0);
  wait_group& target = *holder;
  target = wait_group();  // the old membership's departure destroys `target`'s owner inline
  EXPECT_EQ(seen.resumed, 1);
  EXPECT_EQ(holder, nullptr);
}

// ---------------------------------------------------------------------------------------------
// Misuse: destroyed with a pending wait (a debug-build assertion names the primitive)

// Every member leaves when destroyed, so the shared state outlives its waits in any program that
// destroys its handles; a member added behind the handles' back stands for one that never left.
TEST(WaitGroupDeathTest, DestroyingTheStateWithAPendingWaitAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto wait_on = [](wait_group& g) -> task<void> { co_await g.wait(); };
  const auto with_a_member_that_never_leaves = [] {
    auto g = std::make_unique<wait_group>();
    asyncband::detail::wait_group_test_access::add_members(*g, 1);
    return g;
  };
  EXPECT_DEATH(destroy_while_waiting(with_a_member_that_never_leaves(), wait_on),
               "asyncband::wait_group destroyed with waiters");
}

}  // namespace
