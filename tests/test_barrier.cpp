// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::barrier: construction errors, leaders, generations, cancellation (an
// arrival commits when the wait starts), deterministic races on the test scheduler, destroying a
// suspended waiter, and bounded multi-threaded stress with a per-generation invariant.
#include "asyncband/barrier.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/debug.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/runtime/when_all.hpp"
#include "asyncband/stop_token.hpp"
#include "support/destroyed_with_waiters.hpp"
#include "support/last_one_out.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"

namespace {

using namespace asyncband_test;
using asyncband::barrier;
using asyncband::barrier_wait_result;
using asyncband::runtime::thread_pool;

// ---------------------------------------------------------------------------------------------
// Helpers

/// What one wait reported (see probe), and whether it led its generation.
struct outcome : probe {
  bool leader = false;
  void after_wait(barrier& /*unused*/) noexcept {}
  void after_wait(barrier& /*unused*/, const barrier_wait_result& r) noexcept { leader = r.is_leader(); }
};

/// One participant: `rounds` waits; records, per wait, whether it led.
struct participant_log {
  int resumed = 0;
  std::vector<bool> led;
  std::vector<std::uint64_t> generation_after;
};

task<void> participant(barrier& b, int rounds, participant_log& log) {
  for (int k = 0; k < rounds; ++k) {
    const barrier_wait_result r = co_await b.wait();
    ++log.resumed;
    log.led.push_back(r.is_leader());
    log.generation_after.push_back(b.generation());
  }
}

/// A barrier of two and a cancellable waiter task on it (probe `a`, stop source `src`), not
/// started.
struct cancellable_waiter_of_two {
  test_scheduler s;
  barrier b{2};
  asyncband::stop_source src;
  outcome a;
  task<void> ta = stoppable_waiter(b, src.get_token(), a);

  /// Starts the waiter and runs it until it suspends (its arrival counted).
  void start_and_suspend() {
    start_on(s, ta);
    s.run();
  }
};

/// Starts a plain waiter on `s` for each outcome, in the order given; their tasks, in that order.
std::vector<task<void>> start_plain_waiters(test_scheduler& s, barrier& b,
                                            std::initializer_list<outcome*> outs) {
  std::vector<task<void>> tasks;
  for (outcome* out : outs) tasks.push_back(plain_waiter(b, *out));
  for (auto& t : tasks) start_on(s, t);
  return tasks;
}

/// Starts a two-round participant on `s` for each log, in the order given; their tasks, in that
/// order.
std::vector<task<void>> start_two_round_participants(test_scheduler& s, barrier& b,
                                                     std::initializer_list<participant_log*> logs) {
  std::vector<task<void>> tasks;
  for (participant_log* log : logs) tasks.push_back(participant(b, 2, *log));
  for (auto& t : tasks) start_on(s, t);
  return tasks;
}

// ---------------------------------------------------------------------------------------------
// Construction and counters

TEST(Barrier, ZeroParticipantsThrows) {
  EXPECT_THROW((void)barrier(0), std::invalid_argument);
}

TEST(Barrier, OneParticipantCompletesEveryGenerationAlone) {
  barrier b(1);
  EXPECT_EQ(b.participants(), 1);
  EXPECT_EQ(b.generation(), 0U);
  EXPECT_TRUE(b.wait_blocking().is_leader());
  EXPECT_EQ(b.generation(), 1U);
}

TEST(Barrier, NegativeParticipantCountThrows) {
  EXPECT_THROW((void)barrier(-1), std::invalid_argument);
  EXPECT_THROW((void)barrier(std::numeric_limits<std::ptrdiff_t>::min()), std::invalid_argument);
}

TEST(Barrier, MaxParticipantCountIsAccepted) {
  static_assert(barrier::max() == std::numeric_limits<std::ptrdiff_t>::max());
  barrier b(barrier::max());
  EXPECT_EQ(b.participants(), barrier::max());
  EXPECT_EQ(b.generation(), 0U);
  // One arrival does not complete it; an expired deadline reports timeout (the arrival stays).
  const auto r = b.wait_timeout(0ms);
  EXPECT_TRUE(r.timed_out());
  EXPECT_EQ(b.generation(), 0U);
}

TEST(Barrier, SingleParticipantLeadsEveryGenerationWithEveryWaitForm) {
  barrier b(1);
  asyncband::stop_source never;
  EXPECT_TRUE(b.wait_blocking().is_leader());
  EXPECT_EQ(b.generation(), 1U);
  {
    auto r = b.wait_blocking(never.get_token());
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->is_leader());
  }
  {
    auto r = b.wait_timeout(0ms);  // completes at arrival: the deadline never matters
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->is_leader());
  }
  EXPECT_TRUE(asyncband::block_on(b.wait()).is_leader());
  {
    auto r = asyncband::block_on(b.wait(never.get_token()));
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->is_leader());
  }
  EXPECT_EQ(b.generation(), 5U);

  test_scheduler s;
  participant_log log;
  auto t = participant(b, 10, log);
  start_on(s, t);
  s.run();
  EXPECT_TRUE(t.done());
  EXPECT_EQ(log.resumed, 10);
  for (bool led : log.led) EXPECT_TRUE(led);
  EXPECT_EQ(b.generation(), 15U);
}

// ---------------------------------------------------------------------------------------------
// Leaders and generations

TEST(Barrier, LastArrivalLeadsAndWakesTheOthers) {
  test_scheduler s;
  barrier b(3);
  outcome a, c;
  auto tasks = start_plain_waiters(s, b, {&a, &c});
  s.run();
  EXPECT_EQ(a.resumed + c.resumed, 0);  // both suspended
  EXPECT_EQ(b.generation(), 0U);

  EXPECT_TRUE(b.wait_blocking().is_leader());  // the third arrival: returns at once
  EXPECT_EQ(b.generation(), 1U);
  EXPECT_EQ(s.ready_count(), 2U);  // woken waiters are posted, not resumed inline
  EXPECT_EQ(a.resumed + c.resumed, 0);
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(c.resumed, 1);
  EXPECT_FALSE(a.leader);
  EXPECT_FALSE(c.leader);
  for (const auto& t : tasks) EXPECT_TRUE(t.done());
}

TEST(Barrier, ExactlyOneLeaderPerGenerationAcrossManyGenerations) {
  constexpr int kParticipants = 4;
  constexpr int kRounds = 200;
  for (std::uint64_t seed : {0ULL, 1ULL, 2ULL, 3ULL, 42ULL}) {
    SCOPED_TRACE(seed);
    test_scheduler s(seed == 0 ? std::nullopt : std::optional<std::uint64_t>(seed));
    barrier b(kParticipants);
    std::vector<participant_log> logs(kParticipants);
    std::vector<task<void>> tasks;
    for (auto& log : logs) tasks.push_back(participant(b, kRounds, log));
    for (auto& t : tasks) start_on(s, t);
    s.run();
    EXPECT_EQ(b.generation(), static_cast<std::uint64_t>(kRounds));
    for (int k = 0; k < kRounds; ++k) {
      int leaders = 0;
      for (auto& log : logs) {
        ASSERT_EQ(log.led.size(), static_cast<std::size_t>(kRounds));
        leaders += log.led[static_cast<std::size_t>(k)] ? 1 : 0;
        // The k-th wait of any participant belongs to generation k: it returns once k+1 are done.
        EXPECT_GE(log.generation_after[static_cast<std::size_t>(k)], static_cast<std::uint64_t>(k + 1));
      }
      EXPECT_EQ(leaders, 1) << "generation " << k;
    }
    for (auto& log : logs) EXPECT_EQ(log.resumed, kRounds);
    for (auto& t : tasks) EXPECT_TRUE(t.done());
  }
}

TEST(Barrier, PlainThreadsWithBlockingTwins) {
  constexpr int kRounds = 50;
  barrier b(3);
  std::atomic<int> leaders{0};
  asyncband::stop_source never;
  auto body = [&](int form) {
    for (int k = 0; k < kRounds; ++k) {
      bool led = false;
      if (form == 0) {
        led = b.wait_blocking().is_leader();
      } else if (form == 1) {
        auto r = b.wait_blocking(never.get_token());
        EXPECT_TRUE(r.ok());
        led = r.ok() && r->is_leader();
      } else {
        auto r = b.wait_timeout(10min);  // only a hang would reach the deadline
        EXPECT_TRUE(r.ok());
        led = r.ok() && r->is_leader();
      }
      if (led) leaders.fetch_add(1);
    }
  };
  std::thread t1(body, 0);
  std::thread t2(body, 1);
  body(2);
  t1.join();
  t2.join();
  EXPECT_EQ(leaders.load(), kRounds);
  EXPECT_EQ(b.generation(), static_cast<std::uint64_t>(kRounds));
}

// Issue 16: a plain wait_blocking() sleeps on the barrier's broadcast word with no wait node, so
// that the leader releases a whole generation of threads with one notify.
TEST(Barrier, PlainBlockedThreadsWaitWithoutANode) {
  barrier b(3);
  std::atomic<int> leaders{0};
  auto body = [&] {
    if (b.wait_blocking().is_leader()) leaders.fetch_add(1);
  };
  std::thread t1(body);
  std::thread t2(body);
  for (;;) {
    const auto st = asyncband::detail::debug_access::state(b);
    if (st.remaining == 1) {
      EXPECT_EQ(st.waiters.counted, 0U) << "a plain blocked thread queued a node";
      break;
    }
    std::this_thread::yield();
  }
  body();
  t1.join();
  t2.join();
  EXPECT_EQ(leaders.load(), 1);
  EXPECT_EQ(b.generation(), 1U);
}

TEST(BarrierLifetime, AThreadReleasedFromTheBroadcastWordMayDestroyTheBarrierWhileTheLeaderNotifies) {
  released_thread_destroys_while_the_waker_notifies(
      [] { return std::make_unique<barrier>(2); },
      [](barrier& b) { EXPECT_TRUE(b.wait_blocking().is_leader()); },
      [](barrier& b) { EXPECT_FALSE(b.wait_blocking().is_leader()); });
}

// Review finding: a blocked thread reads the generation without the lock, so it may see the
// leader's move and destroy the barrier while the leader still holds the lock (stopped right
// after the move). The leader pinned the barrier before the move; the destructor waits.
TEST(BarrierLifetime, AThreadThatSeesTheGenerationMoveMayDestroyTheBarrierWhileTheLeaderHoldsItsLock) {
  released_thread_destroys_while_the_waker_notifies(
      [] { return std::make_unique<barrier>(2); },
      [](barrier& b) { EXPECT_TRUE(b.wait_blocking().is_leader()); },
      [](barrier& b) { EXPECT_FALSE(b.wait_blocking().is_leader()); }, asyncband::detail::test_point::woken);
}

TEST(Barrier, BlockOnWaitFromPlainThreads) {
  barrier b(2);
  std::optional<barrier_wait_result> other;
  std::thread t([&] { other = asyncband::block_on(b.wait()); });
  const barrier_wait_result mine = asyncband::block_on(b.wait());
  t.join();
  ASSERT_TRUE(other.has_value());
  EXPECT_NE(mine.is_leader(), other->is_leader());  // exactly one of the two leads
  EXPECT_EQ(b.generation(), 1U);
}

TEST(Barrier, TimedOutWaitKeepsItsArrival) {
  barrier b(2);
  EXPECT_TRUE(b.wait_timeout(0ms).timed_out());
  EXPECT_EQ(b.generation(), 0U);
  // The timed-out arrival counted: one more completes the generation.
  EXPECT_TRUE(b.wait_blocking().is_leader());
  EXPECT_EQ(b.generation(), 1U);
}

// ---------------------------------------------------------------------------------------------
// Cancellation

TEST(Barrier, AlreadyStoppedTokenDoesNotArrive) {
  test_scheduler s;
  barrier b(2);
  asyncband::stop_source stopped;
  stopped.request_stop();

  EXPECT_TRUE(b.wait_blocking(stopped.get_token()).cancelled());
  EXPECT_TRUE(asyncband::block_on(b.wait(stopped.get_token())).cancelled());
  outcome c;
  auto tc = stoppable_waiter(b, stopped.get_token(), c);
  start_on(s, tc);
  s.run();
  EXPECT_EQ(c.resumed, 1);
  EXPECT_EQ(c.status, wait_status::cancelled);
  EXPECT_FALSE(c.leader);
  EXPECT_EQ(b.generation(), 0U);

  // None of the three arrived: two fresh arrivals are still needed.
  outcome a;
  auto ta = plain_waiter(b, a);
  start_on(s, ta);
  s.run();
  EXPECT_EQ(a.resumed, 0);
  EXPECT_TRUE(b.wait_blocking().is_leader());
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_FALSE(a.leader);
  EXPECT_EQ(b.generation(), 1U);
}

TEST(Barrier, CancelledWhileSuspendedKeepsItsArrival) {
  test_scheduler s;
  barrier b(3);
  asyncband::stop_source src;
  outcome a, w;
  auto ta = stoppable_waiter(b, src.get_token(), a);
  auto tw = plain_waiter(b, w);
  start_on(s, ta);
  start_on(s, tw);
  s.run();
  EXPECT_EQ(a.resumed + w.resumed, 0);

  src.request_stop();
  EXPECT_EQ(s.ready_count(), 1U);  // the cancelled waiter is posted to its scheduler
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::cancelled);
  EXPECT_FALSE(a.leader);
  EXPECT_EQ(b.generation(), 0U);
  EXPECT_EQ(w.resumed, 0);

  // Its arrival stays: the third participant completes the generation.
  EXPECT_TRUE(b.wait_blocking().is_leader());
  EXPECT_EQ(b.generation(), 1U);
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_FALSE(w.leader);
  EXPECT_EQ(a.resumed, 1);  // resumed exactly once
  EXPECT_TRUE(ta.done() && tw.done());
}

TEST(Barrier, BlockingWaitCancelledKeepsItsArrival) {
  barrier b(2);
  asyncband::stop_source src;
  std::optional<asyncband::result<barrier_wait_result>> r;
  std::thread t([&] { r.emplace(b.wait_blocking(src.get_token())); });
  // Whether the stop lands before or after the thread arrives, the thread's wait ends cancelled;
  // only when it arrived first does the next arrival complete the generation.
  src.request_stop();
  t.join();
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->cancelled());
  EXPECT_EQ(b.generation(), 0U);
}

TEST(Barrier, CompletingArrivalLeadsEvenIfItsTokenIsStoppedAfterwards) {
  test_scheduler s;
  barrier b(2);
  asyncband::stop_source src;
  outcome a, leader;
  auto ta = stoppable_waiter(b, src.get_token(), a);
  auto tl = stoppable_waiter(b, src.get_token(), leader);
  start_on(s, ta);
  s.run();
  // The completing arrival claims `a`; a stop requested right then (after the claim) is too late
  // for either of them.
  s.at(test_point::claimed_for_wake, [&] { src.request_stop(); });
  start_on(s, tl);
  s.run();
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_EQ(leader.resumed, 1);
  EXPECT_EQ(leader.status, wait_status::ok);
  EXPECT_TRUE(leader.leader);
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::ok);
  EXPECT_FALSE(a.leader);
  EXPECT_EQ(b.generation(), 1U);
}

// ---------------------------------------------------------------------------------------------
// Deterministic races (test_scheduler::at)

TEST(Barrier, StopRequestedAfterWakeClaimedTheWaiterIsTooLate) {
  cancellable_waiter_of_two f;
  auto& [s, b, src, a, ta] = f;
  f.start_and_suspend();
  s.at(test_point::claimed_for_wake, [&f] { f.src.request_stop(); });
  EXPECT_TRUE(b.wait_blocking().is_leader());
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_TRUE(src.stop_requested());
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::ok);
  EXPECT_FALSE(a.leader);
  EXPECT_EQ(b.generation(), 1U);
  EXPECT_EQ(s.ready_count(), 0U);
}

TEST(Barrier, LastArrivalDuringCancellationCompletesTheGeneration) {
  cancellable_waiter_of_two f;
  auto& [s, b, src, a, ta] = f;
  f.start_and_suspend();
  // The cancellation has unlinked `a` (its arrival stays); the last arrival comes right then.
  bool last_led = false;
  s.at(test_point::claimed_for_cancel, [&f, &last_led] { last_led = f.b.wait_blocking().is_leader(); });
  src.request_stop();
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_TRUE(last_led);
  EXPECT_EQ(b.generation(), 1U);
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::cancelled);
  EXPECT_FALSE(a.leader);
}

class BarrierLastArrivalAt : public ::testing::TestWithParam<std::pair<test_point, bool>> {};

TEST_P(BarrierLastArrivalAt, WaiterResumesOnceWithOk) {
  const auto [point, cancellable] = GetParam();
  test_scheduler s;
  barrier b(2);
  asyncband::stop_source src;  // never stopped
  outcome a, last;
  auto ta = cancellable ? stoppable_waiter(b, src.get_token(), a) : plain_waiter(b, a);
  auto tlast = plain_waiter(b, last);
  // The last participant arrives after `a` is linked, before it arms.
  s.at(point, [&] { run_inline(s, tlast); });
  start_on(s, ta);
  EXPECT_TRUE(s.step());
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_EQ(last.resumed, 1);
  EXPECT_TRUE(last.leader);
  // `a` was resolved before it armed: it continued inline, nothing was posted.
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::ok);
  EXPECT_FALSE(a.leader);
  EXPECT_EQ(s.ready_count(), 0U);
  EXPECT_EQ(s.run(), 0U);
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(b.generation(), 1U);
  EXPECT_TRUE(ta.done() && tlast.done());
}

INSTANTIATE_TEST_SUITE_P(Points, BarrierLastArrivalAt,
                         ::testing::Values(std::pair{test_point::published, false},
                                           std::pair{test_point::before_arm, false},
                                           std::pair{test_point::published, true},
                                           std::pair{test_point::before_arm, true}));

TEST(Barrier, StopRequestedAtPublishedCancelsButKeepsArrival) {
  cancellable_waiter_of_two f;
  auto& [s, b, src, a, ta] = f;
  // Linked (arrival counted), stop callback not yet registered: registering it cancels at once.
  s.at(test_point::published, [&f] { f.src.request_stop(); });
  start_on(s, ta);
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::cancelled);
  EXPECT_EQ(b.generation(), 0U);
  EXPECT_TRUE(b.wait_blocking().is_leader());
  EXPECT_EQ(b.generation(), 1U);
}

// A waiter of generation g is woken, but its resumption stays queued while the other
// participants arrive for generation g+1; it then resumes with generation g's outcome, and
// generation g+1 still needs its arrival.
TEST(Barrier, DelayedWaiterIsNotConfusedWithTheNextGeneration) {
  test_scheduler s;  // FIFO
  barrier b(3);
  participant_log p1, d, p2;
  auto tasks = start_two_round_participants(s, b, {&p1, &d, &p2});
  EXPECT_TRUE(s.step());  // p1 arrives (gen 0), suspends
  EXPECT_TRUE(s.step());  // d arrives (gen 0), suspends
  EXPECT_TRUE(s.step());  // p2 completes gen 0 (leader), posts p1 and d, arrives for gen 1
  EXPECT_EQ(b.generation(), 1U);
  ASSERT_EQ(p2.led.size(), 1U);
  EXPECT_TRUE(p2.led[0]);
  EXPECT_EQ(s.ready_count(), 2U);  // [p1, d]
  EXPECT_TRUE(s.step());           // p1 resumes (gen 0), arrives for gen 1
  EXPECT_EQ(p1.resumed, 1);
  EXPECT_EQ(d.resumed, 0);  // still queued
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_EQ(b.generation(), 1U);  // gen 1 has two arrivals of three

  EXPECT_TRUE(s.step());  // d resumes with gen 0's outcome, then completes gen 1
  ASSERT_EQ(d.led.size(), 2U);
  EXPECT_FALSE(d.led[0]);
  EXPECT_EQ(d.generation_after[0], 1U);
  EXPECT_TRUE(d.led[1]);
  EXPECT_EQ(b.generation(), 2U);
  s.run();
  EXPECT_EQ(p1.led, (std::vector<bool>{false, false}));
  EXPECT_EQ(p2.led, (std::vector<bool>{true, false}));
  EXPECT_EQ(p1.resumed + d.resumed + p2.resumed, 6);
  for (const auto& t : tasks) EXPECT_TRUE(t.done());
}

// Stronger: with three coroutines sharing two places, generation g+1 completes entirely (and the
// next one starts) while the woken waiter of generation g is still queued.
TEST(Barrier, DelayedWaiterSurvivesACompleteLaterGeneration) {
  test_scheduler s;  // FIFO
  barrier b(2);
  participant_log d, p1, p2;
  auto tasks = start_two_round_participants(s, b, {&d, &p1, &p2});
  EXPECT_TRUE(s.step());  // d arrives (gen 0)
  EXPECT_TRUE(s.step());  // p1 completes gen 0 (leader), posts d, arrives for gen 1
  EXPECT_EQ(b.generation(), 1U);
  EXPECT_TRUE(s.step());  // p2 completes gen 1 (leader), posts p1, arrives for gen 2
  EXPECT_EQ(b.generation(), 2U);
  EXPECT_EQ(d.resumed, 0);  // d's wake from gen 0 is still queued, ahead of p1's
  EXPECT_EQ(s.ready_count(), 2U);

  EXPECT_TRUE(s.step());  // d: gen 0's outcome (not leader), then it completes gen 2
  ASSERT_EQ(d.led.size(), 2U);
  EXPECT_FALSE(d.led[0]);
  EXPECT_TRUE(d.led[1]);
  EXPECT_EQ(b.generation(), 3U);
  s.run();
  EXPECT_EQ(p1.led, (std::vector<bool>{true, false}));  // gen 0, gen 1
  EXPECT_EQ(p2.led, (std::vector<bool>{true, false}));  // gen 1, gen 2
  EXPECT_EQ(d.resumed + p1.resumed + p2.resumed, 6);
  EXPECT_EQ(b.generation(), 3U);
  for (const auto& t : tasks) EXPECT_TRUE(t.done());
}

TEST(Barrier, DestroyingASuspendedWaiterUnlinksItsNode) {
  test_scheduler s;
  barrier b(2);
  asyncband::stop_source src;
  {
    outcome a, c;
    auto ta = plain_waiter(b, a);
    auto tc = stoppable_waiter(b, src.get_token(), c);
    start_on(s, ta);
    s.run();
    EXPECT_EQ(a.resumed, 0);
    ta = task<void>();  // destroys the frame suspended in wait(): its node must leave the list
    // The abandoned arrival still counts: the next arrival completes generation 0 (and must not
    // touch the destroyed node).
    start_on(s, tc);
    s.run();
    EXPECT_EQ(c.resumed, 1);
    EXPECT_TRUE(c.leader);
    EXPECT_EQ(b.generation(), 1U);
  }
  {
    // A cancellable waiter destroyed while suspended: its stop callback is gone too.
    outcome a;
    auto ta = stoppable_waiter(b, src.get_token(), a);
    start_on(s, ta);
    s.run();
    EXPECT_EQ(a.resumed, 0);
    ta = task<void>();
    src.request_stop();  // must not reach the destroyed node
    EXPECT_EQ(s.ready_count(), 0U);
    EXPECT_EQ(a.resumed, 0);
  }
  // Generation 1 holds the abandoned arrival: one more completes it; the list is empty.
  EXPECT_TRUE(b.wait_blocking().is_leader());
  EXPECT_EQ(b.generation(), 2U);
  outcome x, y;
  auto tasks = start_plain_waiters(s, b, {&x, &y});
  s.run();
  EXPECT_EQ(x.resumed, 1);
  EXPECT_EQ(y.resumed, 1);
  EXPECT_NE(x.leader, y.leader);
  EXPECT_EQ(b.generation(), 3U);
}

// ---------------------------------------------------------------------------------------------
// Stress: bounded in rounds and time. Participant 0 decides, before arriving at generation k,
// whether k is the last one (so every participant runs the same number of generations); the
// barrier's happens-before makes that decision visible to everybody returning from k.

constexpr auto kStressTime = 700ms;

class generation_checker {
 public:
  generation_checker(int participants, int cap)
      : n_(participants),
        cap_(cap),
        deadline_(std::chrono::steady_clock::now() + kStressTime),
        last_round_(cap - 1),
        arrived_(static_cast<std::size_t>(cap)),
        returned_(static_cast<std::size_t>(cap)),
        leaders_(static_cast<std::size_t>(cap)),
        slots_(static_cast<std::size_t>(cap) * static_cast<std::size_t>(participants), 0) {}

  /// Before participant `id` arrives at generation k.
  void before(int id, int k) {
    if (id == 0 && k < cap_ - 1 && last_round_.load(std::memory_order_relaxed) == cap_ - 1 &&
        std::chrono::steady_clock::now() >= deadline_) {
      last_round_.store(k, std::memory_order_relaxed);
    }
    slot(k, id) = k + 1;  // plain write: read by the others after the generation completes
    if (arrived_[idx(k)].fetch_add(1, std::memory_order_relaxed) >= n_) violation();
  }

  /// After its wait of generation k returned; false when k was the last generation.
  bool after(int k, bool leader) {
    if (arrived_[idx(k)].load(std::memory_order_relaxed) != n_) violation();  // all arrived first
    for (int j = 0; j < n_; ++j) {
      if (slot(k, j) != k + 1) violation();
    }
    if (leader) leaders_[idx(k)].fetch_add(1, std::memory_order_relaxed);
    returned_[idx(k)].fetch_add(1, std::memory_order_relaxed);
    return k < last_round_.load(std::memory_order_relaxed);
  }

  void violation() noexcept { violations_.fetch_add(1, std::memory_order_relaxed); }

  /// After every participant has finished.
  void verify(const barrier& b) const {
    const int last = last_round_.load();
    EXPECT_EQ(violations_.load(), 0);
    EXPECT_EQ(b.generation(), static_cast<std::uint64_t>(last + 1));
    for (int k = 0; k <= last; ++k) {
      EXPECT_EQ(leaders_[idx(k)].load(), 1) << "generation " << k;
      EXPECT_EQ(arrived_[idx(k)].load(), n_) << "generation " << k;
      EXPECT_EQ(returned_[idx(k)].load(), n_) << "generation " << k;
    }
  }

 private:
  static std::size_t idx(int k) { return static_cast<std::size_t>(k); }
  int& slot(int k, int id) {
    return slots_[idx(k) * static_cast<std::size_t>(n_) + static_cast<std::size_t>(id)];
  }

  const int n_;
  const int cap_;
  const std::chrono::steady_clock::time_point deadline_;
  std::atomic<int> last_round_;
  std::vector<std::atomic<int>> arrived_;
  std::vector<std::atomic<int>> returned_;
  std::vector<std::atomic<int>> leaders_;
  std::vector<int> slots_;
  std::atomic<int> violations_{0};
};

void thread_participant(barrier& b, generation_checker& check, int id) {
  asyncband::stop_source never;
  for (int k = 0;; ++k) {
    check.before(id, k);
    bool led = false;
    switch (k % 3) {
      case 0:
        led = b.wait_blocking().is_leader();
        break;
      case 1: {
        auto r = b.wait_blocking(never.get_token());
        if (!r.ok()) check.violation();
        led = r.ok() && r->is_leader();
        break;
      }
      default: {
        auto r = b.wait_timeout(10min);  // only a hang would reach the deadline
        if (!r.ok()) check.violation();
        led = r.ok() && r->is_leader();
        break;
      }
    }
    if (!check.after(k, led)) return;
  }
}

task<void> pool_participant(thread_pool& pool, barrier& b, generation_checker& check, int id) {
  co_await pool.schedule();
  asyncband::stop_source never;
  for (int k = 0;; ++k) {
    check.before(id, k);
    bool led = false;
    if (k % 2 == 0) {
      led = (co_await b.wait()).is_leader();
    } else {
      auto r = co_await b.wait(never.get_token());
      if (!r.ok()) check.violation();
      led = r.ok() && r->is_leader();
    }
    if (!pool.on_worker_thread()) check.violation();  // wake-ups are posted to the pool
    if (!check.after(k, led)) co_return;
  }
}

TEST(BarrierStress, PoolTasks) {
  constexpr int kParticipants = 5;  // more tasks than pool threads
  barrier b(kParticipants);
  generation_checker check(kParticipants, 20000);
  thread_pool pool(2);
  std::vector<task<void>> tasks;
  for (int id = 0; id < kParticipants; ++id) tasks.push_back(pool_participant(pool, b, check, id));
  asyncband::block_on(asyncband::runtime::when_all(std::move(tasks)));
  check.verify(b);
}

TEST(BarrierStress, PlainThreadsWithBlockingTwins) {
  constexpr int kParticipants = 3;
  barrier b(kParticipants);
  generation_checker check(kParticipants, 20000);
  std::vector<std::thread> threads;
  for (int id = 1; id < kParticipants; ++id)
    threads.emplace_back(thread_participant, std::ref(b), std::ref(check), id);
  thread_participant(b, check, 0);
  for (auto& t : threads) t.join();
  check.verify(b);
}

TEST(BarrierStress, PoolTasksAndPlainThreadsTogether) {
  constexpr int kThreads = 2;
  constexpr int kTasks = 2;
  barrier b(kThreads + kTasks);
  generation_checker check(kThreads + kTasks, 20000);
  thread_pool pool(2);
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id)
    threads.emplace_back(thread_participant, std::ref(b), std::ref(check), id);
  std::vector<task<void>> tasks;
  for (int id = kThreads; id < kThreads + kTasks; ++id) tasks.push_back(pool_participant(pool, b, check, id));
  asyncband::block_on(asyncband::runtime::when_all(std::move(tasks)));
  for (auto& t : threads) t.join();
  check.verify(b);
}

// Stop requests racing arrivals: two waits with the same token and a stopper, all on the pool.
// Whatever the interleaving: each wait resumes once; leaders == completed generations; a
// non-leader that completed implies the other one led.

task<void> pool_cancellable_wait(thread_pool& pool, barrier& b, asyncband::stop_token token, outcome& out) {
  co_await pool.schedule();
  auto r = co_await b.wait(std::move(token));
  ++out.resumed;
  out.status = r.status();
  out.leader = r.ok() && r->is_leader();
}

void check_pair(const barrier& b, const outcome& x, const outcome& y, int& failures) {
  const auto ok = [](const outcome& o) { return o.status == wait_status::ok; };
  bool good = x.resumed == 1 && y.resumed == 1;
  good = good && (ok(x) || x.status == wait_status::cancelled || x.status == wait_status::timeout);
  good = good && (ok(y) || y.status == wait_status::cancelled || y.status == wait_status::timeout);
  const int leaders = (x.leader ? 1 : 0) + (y.leader ? 1 : 0);
  good = good && static_cast<std::uint64_t>(leaders) == b.generation() && leaders <= 1;
  good = good && (!ok(x) || x.leader || y.leader);  // a completed non-leader: the other led
  good = good && (!ok(y) || y.leader || x.leader);
  if (!good) ++failures;
}

TEST(BarrierStress, StopRacesArrivalOnPool) {
  thread_pool pool(2);
  int failures = 0;
  const int rounds = repeat_for(2000, kStressTime, [&](int /*round*/) {
    barrier b(2);
    asyncband::stop_source src;
    outcome x, y;
    asyncband::block_on(asyncband::runtime::when_all(pool_cancellable_wait(pool, b, src.get_token(), x),
                                                     pool_cancellable_wait(pool, b, src.get_token(), y),
                                                     pool_request_stop(pool, src)));
    check_pair(b, x, y, failures);
  });
  EXPECT_EQ(failures, 0) << "in " << rounds << " rounds";
}

task<void> then_count_down(task<void> t, completion& done) {
  co_await std::move(t);
  done.done();
}

TEST(BarrierStress, StopRacesBlockingArrivalOnPlainThread) {
  completion done;
  thread_pool pool(2);
  int failures = 0;
  const int rounds = repeat_for(2000, kStressTime, [&](int round) {
    barrier b(2);
    asyncband::stop_source src;
    outcome x, y;
    done.reset(2);
    asyncband::runtime::spawn(pool.ref(),
                              then_count_down(pool_cancellable_wait(pool, b, src.get_token(), x), done));
    asyncband::runtime::spawn(pool.ref(), then_count_down(pool_request_stop(pool, src), done));
    // The blocking twin on this thread, alternating between a token and an expired deadline.
    if (round % 2 == 0) {
      auto r = b.wait_blocking(src.get_token());
      y.status = r.status();
      y.leader = r.ok() && r->is_leader();
    } else {
      auto r = b.wait_timeout(0ms);
      y.status = r.status();
      y.leader = r.ok() && r->is_leader();
    }
    ++y.resumed;
    done.wait_or_abort(30s, "barrier stress");
    check_pair(b, x, y, failures);
  });
  EXPECT_EQ(failures, 0) << "in " << rounds << " rounds";
}

TEST(BarrierStress, TwoThreadsOnASingleParticipantBarrierEachLeadTheirOwnGeneration) {
  // barrier(1): every arrival completes a generation by itself, also when two threads arrive at
  // once (no arrival may meet a count already at zero and be lost).
  barrier b(1);
  constexpr int kWaits = 20000;
  std::atomic<int> leaders{0};
  auto run = [&] {
    for (int i = 0; i < kWaits; ++i) {
      if (b.wait_blocking().is_leader()) ++leaders;
    }
  };
  std::thread other(run);
  run();
  other.join();
  EXPECT_EQ(leaders.load(), 2 * kWaits);
  EXPECT_EQ(b.generation(), static_cast<std::uint64_t>(2 * kWaits));
}

// ---------------------------------------------------------------------------------------------
// Misuse: destroyed with a pending wait (a debug-build assertion names the primitive)

TEST(BarrierDeathTest, DestroyingABarrierWithAPendingWaitAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto wait_on = [](barrier& b) -> task<void> { (void)co_await b.wait(); };
  EXPECT_DEATH(destroy_while_waiting(std::make_unique<barrier>(2), wait_on),
               "asyncband::barrier destroyed with waiters");
}

}  // namespace
