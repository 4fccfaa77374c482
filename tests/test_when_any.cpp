// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::when_any: polling order, waiting on several primitives, the one winner,
// nothing lost by the losers (grants skipped or passed on, values left at the channel's head, a
// send's value handed back), the when_any's own stop token, a coroutine destroyed while it waits,
// deterministic commit races at the waiter core's test points, and a bounded threaded stress.
#include "asyncband/when_any.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "asyncband/asyncband.hpp"
#include "asyncband/block_on.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/stop_token.hpp"
#include "support/fuse_payload.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"

namespace {

using namespace asyncband_test;
using asyncband::auto_reset_event;
using asyncband::block_on;
using asyncband::when_any;

/// What a coroutine saw of one when_any.
struct seen {
  std::optional<std::size_t> index;
  int resumed = 0;
};

/// Runs `body` (a coroutine awaiting a when_any that records the winner) on a test scheduler:
/// after it is queued, `wake` makes exactly one operation complete. `at_claim`, if given, runs
/// when that wake-up's waker has claimed (committed) its branch and not yet resolved it: a
/// second completion racing with the commit.
template <class Body, class Wake>
std::optional<std::size_t> winner_after(Body body, Wake wake, std::function<void()> at_claim = {}) {
  test_scheduler s;
  std::optional<std::size_t> index;
  auto t = body(index);
  start_on(s, t);
  s.run();
  EXPECT_FALSE(index) << "completed before the wake-up";
  if (at_claim) s.at(test_point::claimed_for_wake, std::move(at_claim));
  wake();
  EXPECT_EQ(s.pending_actions(), 0U) << "the wake-up claimed no branch";
  s.run();
  return index;
}

/// The body of a coroutine (for winner_after) racing `make_op()` against `ev.wait()`, which
/// records the index of the winner.
template <class MakeOp>
auto racing(auto_reset_event& ev, MakeOp make_op) {
  return [&ev, make_op](std::optional<std::size_t>& index) -> task<void> {
    auto r = co_await when_any(make_op(), ev.wait());
    index = r.index();
  };
}

// ---------------------------------------------------------------------------------------------
// Polling: the first ready operation wins, the later ones are not touched

TEST(WhenAny, TheFirstReadyOperationWinsAndTheLaterOnesAreNotTouched) {
  auto_reset_event a(true);
  auto_reset_event b(true);
  auto r = block_on(when_any(a.wait(), b.wait()));
  EXPECT_EQ(r.index(), 0U);
  EXPECT_FALSE(a.is_set());
  EXPECT_TRUE(b.is_set()) << "the second event's permit was taken by a losing branch";
}

TEST(WhenAny, ALaterReadyOperationWinsWhenTheFirstIsNotReady) {
  auto_reset_event a;
  auto_reset_event b(true);
  asyncband::manual_reset_event c(true);
  auto r = block_on(when_any(a.wait(), b.wait(), c.wait()));
  EXPECT_EQ(r.index(), 1U);
  EXPECT_FALSE(b.is_set());
  EXPECT_FALSE(a.is_set());
}

// ---------------------------------------------------------------------------------------------
// Waiting

/// Waits for the first of `a.wait()` and `b.wait()` and records it in `out`.
template <class A, class B>
task<void> wait_either(A& a, B& b, seen& out) {
  auto r = co_await when_any(a.wait(), b.wait());
  out.index = r.index();
  ++out.resumed;
}

/// Two events and a coroutine waiting for the first of them (wait_either), queued on `s`, not
/// yet run. Members, not a structured binding: clang 14 cannot capture those in a lambda.
struct either_of_two {
  test_scheduler s;
  auto_reset_event a;
  auto_reset_event b;
  seen out;
  task<void> t = wait_either(a, b, out);

  either_of_two() { start_on(s, t); }
};

TEST(WhenAny, WaitsUntilOneCompletesAndCancelsTheOther) {
  either_of_two w;
  w.s.run();
  EXPECT_EQ(w.out.resumed, 0);
  w.b.notify_one();
  w.s.run();
  EXPECT_EQ(w.out.resumed, 1);
  EXPECT_EQ(w.out.index, 1U);
  w.a.notify_one();  // nobody waits on `a` any more: the permit is stored
  EXPECT_TRUE(w.a.is_set());
  EXPECT_FALSE(w.b.is_set());
}

task<void> receive_either(asyncband::mpsc::receiver<int>& x, asyncband::mpsc::receiver<int>& y,
                          std::optional<std::size_t>& index, std::optional<int>& value) {
  auto r = co_await when_any(x.recv(), y.recv());
  index = r.index();
  value = r.index() == 0 ? *r.get<0>() : *r.get<1>();
}

TEST(WhenAny, ReceivesFromWhicheverChannelHasAValueAndTheOtherKeepsItsValues) {
  test_scheduler s;
  auto [tx1, rx1] = asyncband::mpsc::bounded<int>(4);
  auto [tx2, rx2] = asyncband::mpsc::bounded<int>(4);
  std::optional<std::size_t> index;
  std::optional<int> value;
  auto t = receive_either(rx1, rx2, index, value);
  start_on(s, t);
  s.run();
  EXPECT_FALSE(index);
  EXPECT_TRUE(tx2.try_send(7).ok());
  s.run();
  EXPECT_EQ(index, 1U);
  EXPECT_EQ(value, 7);
  EXPECT_TRUE(tx1.try_send(1).ok());
  EXPECT_EQ(*rx1.try_recv(), 1);  // the losing receive is over: the receiver is free again
}

TEST(WhenAny, ALosingReceiveLeavesTheValueAtTheHeadOfItsChannel) {
  auto [tx1, rx1] = asyncband::mpsc::unbounded<int>();
  auto [tx2, rx2] = asyncband::mpsc::unbounded<int>();
  EXPECT_TRUE(tx1.send(1).ok());
  EXPECT_TRUE(tx2.send(2).ok());
  EXPECT_TRUE(tx2.send(3).ok());
  auto r = block_on(when_any(rx1.recv(), rx2.recv()));
  ASSERT_EQ(r.index(), 0U);
  EXPECT_EQ(*r.get<0>(), 1);
  EXPECT_TRUE(r.has<1>());
  EXPECT_TRUE(r.get<1>().cancelled());
  EXPECT_EQ(*rx2.try_recv(), 2);
  EXPECT_EQ(*rx2.try_recv(), 3);
}

TEST(WhenAny, ALosingSendHandsItsValueBackInTheResult) {
  auto [tx, rx] = asyncband::mpsc::bounded<std::unique_ptr<int>>(1);
  EXPECT_TRUE(tx.try_send(std::make_unique<int>(1)).ok());  // full
  auto_reset_event ev(true);
  auto r = block_on(when_any(tx.send(std::make_unique<int>(2)), ev.wait()));
  ASSERT_EQ(r.index(), 1U);
  ASSERT_TRUE(r.has<0>());
  EXPECT_TRUE(r.get<0>().cancelled());
  ASSERT_NE(r.get<0>().value(), nullptr);
  EXPECT_EQ(*r.get<0>().value(), 2);
  EXPECT_EQ(rx.len(), 1U);
}

task<void> lock_either(asyncband::mutex<>& m1, asyncband::mutex<>& m2, seen& out) {
  auto r = co_await when_any(m1.lock(), m2.lock());
  out.index = r.index();
  ++out.resumed;
}

TEST(WhenAny, LocksWhicheverMutexIsFreedFirstAndLeavesTheOtherToItsNextWaiter) {
  test_scheduler s;
  asyncband::mutex<> m1;
  asyncband::mutex<> m2;
  auto g1 = m1.try_lock();
  auto g2 = m2.try_lock();
  ASSERT_TRUE(g1 && g2);
  seen out;
  auto t = lock_either(m1, m2, out);
  start_on(s, t);
  s.run();
  g2.reset();  // hands m2 to the when_any
  s.run();
  EXPECT_EQ(out.index, 1U);
  g1.reset();  // the losing lock left m1's queue: m1 is free
  EXPECT_TRUE(m1.try_lock().has_value());
  EXPECT_TRUE(m2.try_lock().has_value()) << "the winner's guard was dropped with the result";
}

// ---------------------------------------------------------------------------------------------
// The commit point: two completions racing, one winner, nothing granted to the loser

TEST(WhenAnyRace, ANotifyOnTheLosingEventAfterTheWinnerCommittedStoresItsPermit) {
  either_of_two w;
  w.s.run();
  // a's notify claims (commits) the first branch; before it resolves, b is notified: the second
  // branch has lost, so b's waker skips it and stores the permit.
  bool stored_at_once = false;
  w.s.at(test_point::claimed_for_wake, [&] {
    w.b.notify_one();
    stored_at_once = w.b.is_set();  // not handed to the loser and given back later: never its
  });
  w.a.notify_one();
  w.s.run();
  EXPECT_EQ(w.out.index, 0U);
  EXPECT_TRUE(stored_at_once) << "the permit went to a branch that had lost";
  EXPECT_TRUE(w.b.is_set());
  EXPECT_FALSE(w.a.is_set());
}

TEST(WhenAnyRace, AReleaseOnTheLosingSemaphoreAfterTheWinnerCommittedStaysAvailable) {
  asyncband::semaphore x(0);
  asyncband::semaphore y(0);
  const auto body = [&](std::optional<std::size_t>& index) -> task<void> {
    auto r = co_await when_any(x.acquire(2), y.acquire(2));
    index = r.index();
  };
  std::size_t available_at_once = 0;
  const auto release_y = [&] {
    y.release(2);
    available_at_once = y.available();
  };
  EXPECT_EQ(winner_after(
                body, [&] { x.release(2); }, release_y),
            0U);
  EXPECT_EQ(available_at_once, 2U) << "the permits went to a branch that had lost";
  EXPECT_EQ(y.available(), 2U);
  EXPECT_EQ(x.available(), 2U) << "the winner's permit was returned with the result";
}

TEST(WhenAnyRace, ALosingAcquisitionIsNotGivenEvenPartOfARelease) {
  auto_reset_event ev;
  asyncband::semaphore sem(0);
  const auto body = [&](std::optional<std::size_t>& out) -> task<void> {
    auto r = co_await when_any(ev.wait(), sem.acquire(2));
    out = r.index();
  };
  std::size_t available_at_once = 0;
  const auto release_one = [&] {
    sem.release(1);  // the acquisition has lost: the permit stays available, not parked in it
    available_at_once = sem.available();
  };
  EXPECT_EQ(winner_after(
                body, [&] { ev.notify_one(); }, release_one),
            0U);
  EXPECT_EQ(available_at_once, 1U);
  EXPECT_EQ(sem.available(), 1U);
}

TEST(WhenAnyRace, ABranchCompletingDuringItsPublicationAfterAnotherWonPassesItsPermitOn) {
  either_of_two w;
  // The first branch publishes; as the second is about to queue, `a` is notified (the first
  // branch wins) and `b` gets a permit, which the second branch takes at once as it publishes.
  w.s.at(test_point::queueing, [] {});
  w.s.at(test_point::queueing, [&] {
    w.a.notify_one();
    w.b.notify_one();
  });
  w.s.run();
  EXPECT_EQ(w.out.index, 0U);
  EXPECT_TRUE(w.b.is_set()) << "the losing branch kept the permit it took during publication";
}

// ---------------------------------------------------------------------------------------------
// The when_any's own stop token

task<void> wait_any_until_stopped(auto_reset_event& a, auto_reset_event& b, asyncband::stop_token stop,
                                  seen& out) {
  auto r = co_await when_any(std::move(stop), a.wait(), b.wait());
  out.index = r.index();
  ++out.resumed;
}

TEST(WhenAny, ItsStopTokenEndsItWithNoWinnerAndCancelsEveryOperation) {
  test_scheduler s;
  auto_reset_event a;
  auto_reset_event b;
  asyncband::stop_source stop;
  seen out;
  auto t = wait_any_until_stopped(a, b, stop.get_token(), out);
  start_on(s, t);
  s.run();
  stop.request_stop();
  s.run();
  EXPECT_EQ(out.index, asyncband::any_result<std::monostate>::npos);
  a.notify_one();
  b.notify_one();
  EXPECT_TRUE(a.is_set());
  EXPECT_TRUE(b.is_set());
}

TEST(WhenAny, AStopAlreadyRequestedTouchesNoOperation) {
  auto_reset_event a(true);
  asyncband::stop_source stop;
  stop.request_stop();
  auto r = block_on(when_any(stop.get_token(), a.wait()));
  EXPECT_TRUE(r.cancelled());
  EXPECT_TRUE(a.is_set());
}

// ---------------------------------------------------------------------------------------------
// A coroutine destroyed while it waits in a when_any

TEST(WhenAny, DestroyingTheWaitingCoroutineCancelsEveryOperation) {
  either_of_two w;
  w.s.run();
  w.t = task<void>();  // destroys the coroutine where it waits
  w.a.notify_one();
  w.b.notify_one();
  EXPECT_TRUE(w.a.is_set());
  EXPECT_TRUE(w.b.is_set());
  EXPECT_EQ(w.out.resumed, 0);
}

bare_coroutine destroy_after(asyncband::manual_reset_event& m, std::optional<task<void>>& victim) {
  co_await m.wait();
  victim.reset();
}

TEST(WhenAny, ACoroutineDestroyedByAnInlineWaiterOfTheSameWakeUpIsNotWaitedFor) {
  // set() claims the bare coroutine and the when_any's first branch in one batch; the bare
  // coroutine, resumed inline first, destroys the when_any's coroutine, whose branch is still in
  // that batch, further up this stack: waiting for it there would never end.
  test_scheduler s;
  asyncband::manual_reset_event m;
  auto_reset_event b;
  seen out;
  std::optional<task<void>> victim;
  destroy_after(m, victim);
  victim.emplace(wait_either(m, b, out));
  start_on(s, *victim);
  s.run();
  m.set();
  EXPECT_FALSE(victim.has_value());
  EXPECT_EQ(out.resumed, 0);
  b.notify_one();
  EXPECT_TRUE(b.is_set()) << "the destroyed when_any's branch stayed queued on b";
}

// ---------------------------------------------------------------------------------------------
// Threads: every permit is received by exactly one when_any, or stays stored

TEST(WhenAnyStress, EveryPermitIsTakenByExactlyOneWinnerOrStaysAvailable) {
  // Two threads release permits one by one into two semaphores while a third takes one from
  // whichever has one, forgetting it. A permit granted to a losing branch and lost, or taken
  // twice, breaks the sum.
  constexpr int per_releaser = 20000;
  asyncband::semaphore x(0);
  asyncband::semaphore y(0);
  std::atomic<int> released{0};
  const int taken = [&] {
    std::thread rx([&] {
      for (int i = 0; i < per_releaser; ++i) x.release(), released.fetch_add(1);
    });
    std::thread ry([&] {
      for (int i = 0; i < per_releaser; ++i) y.release(), released.fetch_add(1);
    });
    int n = 0;
    repeat_for(2 * per_releaser, std::chrono::seconds(5), [&](int) {
      auto r = block_on(when_any(x.acquire(1), y.acquire(1)));
      (r.index() == 0 ? r.get<0>() : r.get<1>()).forget();
      ++n;
      return released.load() < 2 * per_releaser || x.available() + y.available() != 0;
    });
    rx.join();
    ry.join();
    return n;
  }();
  EXPECT_EQ(static_cast<std::size_t>(taken) + x.available() + y.available(), 2U * per_releaser);
}

}  // namespace

namespace {

// ---------------------------------------------------------------------------------------------
// A range of operations: when_any_of and select_loop

task<void> receive_from_any(std::vector<asyncband::mpsc::receiver<int>>& rxs,
                            std::vector<std::pair<std::size_t, int>>& got, int rounds) {
  asyncband::select_loop loop(rxs, [](asyncband::mpsc::receiver<int>& rx) { return rx.recv(); });
  for (int i = 0; i < rounds; ++i) {
    auto& round = co_await loop.next();
    got.emplace_back(round.index(), *round.get());
  }
}

TEST(WhenAnyOf, ReceivesFromWhicheverOfNChannelsHasAValueRoundAfterRound) {
  test_scheduler s;
  std::vector<asyncband::mpsc::sender<int>> txs;
  std::vector<asyncband::mpsc::receiver<int>> rxs;
  for (int i = 0; i < 4; ++i) {
    auto [tx, rx] = asyncband::mpsc::bounded<int>(2);
    txs.push_back(std::move(tx));
    rxs.push_back(std::move(rx));
  }
  std::vector<std::pair<std::size_t, int>> got;
  auto t = receive_from_any(rxs, got, 3);
  start_on(s, t);
  s.run();
  EXPECT_TRUE(got.empty());
  EXPECT_TRUE(txs[2].try_send(20).ok());
  s.run();
  EXPECT_TRUE(txs[3].try_send(30).ok());
  EXPECT_TRUE(txs[1].try_send(10).ok());
  s.run();  // the third round polls: channel 1 comes first in the range
  ASSERT_EQ(got.size(), 3U);
  EXPECT_EQ(got[0], (std::pair<std::size_t, int>{2, 20}));
  EXPECT_EQ(got[1], (std::pair<std::size_t, int>{3, 30}));
  EXPECT_EQ(got[2], (std::pair<std::size_t, int>{1, 10}));
}

TEST(WhenAnyOf, AOneShotSelectionOwnsItsOutcomesAndLosersKeepTheirValues) {
  std::vector<asyncband::mpsc::unbounded_sender<int>> txs;
  std::vector<asyncband::mpsc::unbounded_receiver<int>> rxs;
  for (int i = 0; i < 3; ++i) {
    auto [tx, rx] = asyncband::mpsc::unbounded<int>();
    txs.push_back(std::move(tx));
    rxs.push_back(std::move(rx));
  }
  EXPECT_TRUE(txs[1].send(11).ok());
  EXPECT_TRUE(txs[2].send(22).ok());
  auto r = block_on(asyncband::when_any_of(rxs, [](auto& rx) { return rx.recv(); }));
  ASSERT_EQ(r.index(), 1U);
  EXPECT_EQ(*r.get(), 11);
  EXPECT_EQ(r.size(), 3U);
  EXPECT_EQ(*rxs[2].try_recv(), 22);
}

TEST(WhenAnyOf, SendsToWhicheverChannelHasRoomAndTheOthersHandTheirValuesBack) {
  std::vector<asyncband::mpsc::sender<std::unique_ptr<int>>> txs;
  std::vector<asyncband::mpsc::receiver<std::unique_ptr<int>>> rxs;
  for (int i = 0; i < 3; ++i) {
    auto [tx, rx] = asyncband::mpsc::bounded<std::unique_ptr<int>>(1);
    if (i != 2) {
      EXPECT_TRUE(tx.try_send(std::make_unique<int>(-1)).ok());  // full
    }
    txs.push_back(std::move(tx));
    rxs.push_back(std::move(rx));
  }
  int next = 0;
  auto r = block_on(
      asyncband::when_any_of(txs, [&next](auto& tx) { return tx.send(std::make_unique<int>(next++)); }));
  ASSERT_EQ(r.index(), 2U);
  EXPECT_TRUE(r.get().ok());
  ASSERT_TRUE(r.has(0) && r.has(1));
  EXPECT_EQ(*r.get(0).value(), 0);
  EXPECT_EQ(*r.get(1).value(), 1);
  EXPECT_EQ(**rxs[2].try_recv(), 2);
}

}  // namespace

namespace {

// ---------------------------------------------------------------------------------------------
// Each primitive as a branch: it wins with its own outcome, or loses leaving the primitive as if
// it had never been waited on.

TEST(WhenAnyPrimitives, LatchWinsOrLosesWithoutAnEffect) {
  asyncband::latch l(1);
  auto_reset_event ev;
  const auto body = racing(ev, [&] { return l.wait(); });
  EXPECT_EQ(winner_after(body, [&] { ev.notify_one(); }), 1U);
  EXPECT_EQ(winner_after(body, [&] { l.count_down(); }), 0U);
  EXPECT_FALSE(ev.is_set());
}

TEST(WhenAnyPrimitives, RwlockReadLosesAndTheWriterAfterItIsNotHeldUp) {
  asyncband::rwlock<int> rw(0);
  auto w = rw.try_write();
  ASSERT_TRUE(w);
  auto_reset_event ev;
  const auto body = racing(ev, [&] { return rw.read(); });
  EXPECT_EQ(winner_after(body, [&] { ev.notify_one(); }), 1U);
  w.reset();
  EXPECT_TRUE(rw.try_write().has_value()) << "the losing read is still queued or holds the lock";
  w = rw.try_write();
  EXPECT_EQ(winner_after(body, [&] { w.reset(); }), 0U);
  EXPECT_TRUE(rw.try_write().has_value()) << "the winner's read guard was dropped with the result";
}

TEST(WhenAnyPrimitives, OneshotReceiveLosesAndTheValueSentLaterIsStillReceived) {
  auto ends1 = asyncband::oneshot::channel<int>();
  auto& tx = ends1.first;
  auto& rx = ends1.second;
  auto_reset_event ev;
  const auto body = racing(ev, [&] { return rx.recv(); });
  EXPECT_EQ(winner_after(body, [&] { ev.notify_one(); }), 1U);
  EXPECT_TRUE(tx.send(5).ok());
  EXPECT_EQ(*rx.recv_blocking(), 5);
}

TEST(WhenAnyPrimitives, OneshotValueWokenForALosingReceiveStaysInTheChannel) {
  auto ends2 = asyncband::oneshot::channel<int>();
  auto& tx = ends2.first;
  auto& rx = ends2.second;
  auto_reset_event ev;
  const auto body = [&](std::optional<std::size_t>& out) -> task<void> {
    auto r = co_await when_any(ev.wait(), rx.recv());
    out = r.index();
  };
  // ev's waker commits the first branch; before it resolves, the value arrives and wakes the
  // receive, which has lost: the value must stay in the channel.
  EXPECT_EQ(winner_after(
                body, [&] { ev.notify_one(); }, [&] { EXPECT_TRUE(tx.send(9).ok()); }),
            0U);
  EXPECT_EQ(*rx.recv_blocking(), 9);
}

TEST(WhenAnyPrimitives, BroadcastReceiveLosesAndKeepsItsPlace) {
  auto ends3 = asyncband::broadcast::overflow<int>(4);
  auto& tx = ends3.first;
  auto& rx = ends3.second;
  auto_reset_event ev;
  const auto body = racing(ev, [&] { return rx.recv(); });
  EXPECT_EQ(winner_after(body, [&] { ev.notify_one(); }), 1U);
  EXPECT_TRUE(tx.send(1).ok());
  EXPECT_EQ(*rx.try_recv(), 1);
  EXPECT_EQ(winner_after(body, [&] { EXPECT_TRUE(tx.send(2).ok()); }), 0U);
  EXPECT_TRUE(rx.try_recv().empty()) << "the winner's message was received once";
}

TEST(WhenAnyPrimitives, BoundedBroadcastSendLosesAndHandsItsValueBack) {
  auto ends4 = asyncband::broadcast::bounded<int>(1);
  auto& tx = ends4.first;
  auto& rx = ends4.second;
  auto_reset_event ev(true);
  EXPECT_TRUE(tx.try_send(1).ok());  // full until rx reads
  auto r = block_on(when_any(tx.send(2), ev.wait()));
  ASSERT_EQ(r.index(), 1U);
  EXPECT_TRUE(r.get<0>().cancelled());
  EXPECT_EQ(r.get<0>().value(), 2);
  EXPECT_EQ(*rx.try_recv(), 1);
  EXPECT_TRUE(tx.try_send(3).ok()) << "the losing send kept a unit of capacity";
}

TEST(WhenAnyPrimitives, WatchChangeLosesAndStaysUnseen) {
  auto ends5 = asyncband::watch::channel<int>(0);
  auto& tx = ends5.first;
  auto& rx = ends5.second;
  auto_reset_event ev;
  const auto body = racing(ev, [&] { return rx.changed(); });
  EXPECT_EQ(winner_after(body, [&] { ev.notify_one(); }), 1U);
  EXPECT_EQ(winner_after(body, [&] { EXPECT_TRUE(tx.send(1).ok()); }), 0U);
  auto r = block_on(when_any(rx.changed(), asyncband::manual_reset_event(true).wait()));
  EXPECT_EQ(r.index(), 1U) << "the winner's change was not marked seen";
}

TEST(WhenAnyPrimitives, ShutdownSignalEndsAServiceLoopsReceive) {
  auto p = asyncband::shutdown::make_pair();
  auto ends6 = asyncband::mpsc::bounded<int>(2);
  auto& tx = ends6.first;
  auto& rx = ends6.second;
  const auto body = [&](std::optional<std::size_t>& index) -> task<void> {
    auto r = co_await when_any(p.second.is_shutdown(), rx.recv());
    index = r.index();
  };
  EXPECT_EQ(winner_after(body, [&] { EXPECT_TRUE(tx.try_send(1).ok()); }), 1U);
  EXPECT_EQ(winner_after(body, [&] { p.first.shutdown(); }), 0U);
}

TEST(WhenAnyPrimitives, ReserveLosesAndItsCapacityUnitGoesToTheNextSend) {
  auto ends7 = asyncband::mpsc::bounded<int>(1);
  auto& tx = ends7.first;
  auto& rx = ends7.second;
  EXPECT_TRUE(tx.try_send(1).ok());
  auto_reset_event ev;
  const auto body = racing(ev, [&] { return tx.reserve(); });
  EXPECT_EQ(winner_after(body, [&] { ev.notify_one(); }), 1U);
  EXPECT_EQ(*rx.try_recv(), 1);
  EXPECT_TRUE(tx.try_send(2).ok()) << "the losing reserve kept the unit";
}

TEST(WhenAnyPrimitives, APartlyGrantedAcquisitionThatLosesReturnsWhatItHad) {
  asyncband::semaphore sem(1);
  auto_reset_event ev;
  const auto body = racing(ev, [&] { return sem.acquire(2); });
  EXPECT_EQ(winner_after(body, [&] { ev.notify_one(); }), 1U);
  EXPECT_EQ(sem.available(), 1U);
}

TEST(WhenAnyPrimitives, ABarrierArrivalIsKeptEvenWhenItsWaitLoses) {
  asyncband::barrier b(2);
  auto_reset_event ev;
  const auto body = racing(ev, [&] { return b.wait(); });
  EXPECT_EQ(winner_after(body, [&] { ev.notify_one(); }), 1U);
  static_cast<void>(b.wait_blocking());  // completes the generation with the kept arrival
}

// Not selectable: waits that run user code or re-lock in their own protocol.
static_assert(!asyncband::detail::selectable<decltype(std::declval<asyncband::condvar&>().wait(
                  std::declval<asyncband::mutex_guard<int>>()))>);
static_assert(asyncband::detail::selectable<decltype(std::declval<asyncband::semaphore&>().acquire(1))>);

}  // namespace

// ---------------------------------------------------------------------------------------------
// Found by the race review of the first version: a test for each window it found.

namespace {

// 1. A losing branch whose handed-back value throws while it is moved into the result: the
//    winner is never settled, so its grant (here the permit an acquisition took while polled) is
//    never turned into a permit, and is lost for good.
TEST(WhenAnyReview, ALoserWhoseValueThrowsOnItsWayBackStillPassesOnTheWinnersGrant) {
  auto [tx, rx] = asyncband::mpsc::bounded<fuse_payload>(1);
  ASSERT_TRUE(tx.try_send(fuse_payload(0)).ok());  // full: the send is not ready
  asyncband::semaphore sem(1);
  {
    auto send = tx.send(fuse_payload(1));
    auto acquire = sem.acquire(1);
    fuse_payload::arm(1);  // the next move (handing the send's value back) throws
    EXPECT_THROW(static_cast<void>(block_on(when_any(send, acquire))), fuse_blown);
    fuse_payload::disarm();
  }
  EXPECT_EQ(sem.available(), 1U) << "the winning acquisition's permit was lost";
}

// 2. A branch that completed during its publication (a barrier's last arrival) but lost is
//    cancelled again by the sweep, which locks its primitive. The arrival resumed the barrier's
//    other waiters inline, and one of them destroyed the barrier (last one out, which a plain
//    `co_await b.wait()` allows): the sweep then locks freed memory. Seen under ASan
//    (heap-use-after-free); a plain build reads freed memory silently.
bare_coroutine wait_then_destroy(std::unique_ptr<asyncband::barrier>& b) {
  co_await b->wait();
  b.reset();
}
bare_coroutine just_wait(asyncband::barrier& b) {
  co_await b.wait();
}

TEST(WhenAnyReview, TheSweepDoesNotTouchTheBarrierOfABranchThatCompletedDuringItsPublication) {
  test_scheduler s;
  auto_reset_event a;
  auto b = std::make_unique<asyncband::barrier>(3);
  asyncband::barrier* const raw = b.get();
  wait_then_destroy(b);  // first arrival, queued
  seen out;
  auto t = wait_either(a, *raw, out);
  start_on(s, t);
  s.at(test_point::queueing, [] {});  // branch 0 (a) queues
  s.at(test_point::queueing, [&] {    // branch 1 (the barrier) is about to arrive and queue
    a.notify_one();                   // branch 0 wins
    just_wait(*raw);                  // second arrival: the when_any's arrival is the last
  });
  s.run();
  EXPECT_EQ(b, nullptr);
  EXPECT_EQ(out.index, 0U);
  EXPECT_EQ(out.resumed, 1);
}

// 3. The sweep's cancellation of a semaphore branch passes its partial grant on and serves the
//    next waiter, a coroutine without a scheduler, which destroys the when_any's coroutine. Run
//    inside the sweep, it found that coroutine suspended and its destructor waited for the
//    winner's unit, held further up this very stack: forever. Now what the sweep wakes runs
//    after the winner's release, as in a plain cancelled wait whose passed-on grant serves the
//    next waiter (SemaphoreDestroyDeathTest.AWaiterServedByACancellationMayDestroyTheCancelledWaiter):
//    the when_any's coroutine (no scheduler) has resumed and finished by then.
bare_coroutine acquire_then_destroy(asyncband::semaphore& y, std::optional<task<void>>& victim, bool& ran) {
  auto permit = co_await y.acquire(1);
  victim.reset();
  ran = true;
}

task<void> acquire_either(asyncband::semaphore& x, asyncband::semaphore& y, seen& out) {
  auto r = co_await when_any(x.acquire(1), y.acquire(2));
  out.index = r.index();
  ++out.resumed;
}

void a_waiter_served_by_the_sweep_destroys_the_when_any() {
  asyncband::semaphore x(asyncband::strict_fifo, 0);
  asyncband::semaphore y(asyncband::strict_fifo, 1);  // the second branch gets 1 of its 2 as a partial grant
  seen out;
  std::optional<task<void>> victim;
  victim.emplace(acquire_either(x, y, out));
  victim->handle().resume();  // no scheduler: resumed inline by whoever settles it
  bool ran = false;
  acquire_then_destroy(y, victim, ran);  // queued behind the when_any's branch on y
  x.release(1);  // branch 0 wins; its sweep cancels branch 1, whose permit serves the waiter
  EXPECT_TRUE(ran);
  EXPECT_FALSE(victim.has_value());
  EXPECT_EQ(out.resumed, 1);
  EXPECT_EQ(out.index, 0U);
  EXPECT_EQ(x.available() + y.available(), 2U);
}

TEST(WhenAnyReviewDeathTest, AWaiterServedByTheSweepMayDestroyTheWhenAnysCoroutine) {
  EXPECT_EXIT(
      {
        alarm(5);
        a_waiter_served_by_the_sweep_destroys_the_when_any();
        std::fflush(nullptr);
        std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace

namespace {

// ---------------------------------------------------------------------------------------------
// Threads and a pool: selects racing producers, cancellations and a quit signal

task<std::pair<int, int>> route_until_quit(asyncband::runtime::thread_pool& pool,
                                           asyncband::mpsc::receiver<int>& a,
                                           asyncband::mpsc::unbounded_receiver<int>& b,
                                           asyncband::manual_reset_event& quit) {
  co_await pool.schedule();
  int routed = 0;
  for (;;) {
    auto r = co_await when_any(quit.wait(), a.recv(), b.recv());
    if (r.index() == 0) break;
    ++routed;
  }
  int drained = 0;
  while (a.try_recv()) ++drained;
  while (b.try_recv()) ++drained;
  co_return std::pair{routed, drained};
}

TEST(WhenAnyStress, ARouterOnAPoolLosesNoValueAndReceivesNoneTwice) {
  constexpr int per_producer = 3000;
  repeat_for(20, std::chrono::seconds(5), [&](int) {
    asyncband::runtime::thread_pool pool(2);
    auto [atx, arx] = asyncband::mpsc::bounded<int>(8);
    auto [btx, brx] = asyncband::mpsc::unbounded<int>();
    asyncband::manual_reset_event quit;
    std::thread pa([&tx = atx] {
      for (int i = 0; i < per_producer; ++i) static_cast<void>(tx.send_blocking(i));
    });
    std::thread pb([&tx = btx] {
      for (int i = 0; i < per_producer; ++i) static_cast<void>(tx.send(i));
    });
    std::thread quitter([&] {
      pa.join();
      pb.join();
      quit.set();
    });
    const auto [routed, drained] = block_on(route_until_quit(pool, arx, brx, quit));
    quitter.join();
    EXPECT_EQ(routed + drained, 2 * per_producer);
  });
}

task<int> fan_in_rounds(asyncband::runtime::thread_pool& pool,
                        std::vector<asyncband::mpsc::receiver<int>>& feeds, int rounds) {
  co_await pool.schedule();
  std::vector<int> next(feeds.size(), 0);
  asyncband::select_loop loop(feeds, [](asyncband::mpsc::receiver<int>& rx) { return rx.recv(); });
  int in_order = 0;
  for (int i = 0; i < rounds; ++i) {
    auto& round = co_await loop.next();
    const std::size_t f = round.index();
    if (round.get().ok() && *round.get() == next[f]) ++in_order;
    ++next[f];
  }
  co_return in_order;
}

TEST(WhenAnyStress, ASelectLoopOverFourFeedsReceivesEveryValueOnceInOrder) {
  constexpr int feeds_count = 4;
  constexpr int per_feed = 2000;
  asyncband::runtime::thread_pool pool(2);
  std::vector<asyncband::mpsc::receiver<int>> feeds;
  std::vector<asyncband::mpsc::sender<int>> senders;
  for (int f = 0; f < feeds_count; ++f) {
    auto [tx, rx] = asyncband::mpsc::bounded<int>(4);
    feeds.push_back(std::move(rx));
    senders.push_back(std::move(tx));
  }
  std::vector<std::thread> producers;
  for (auto& tx : senders) {
    producers.emplace_back([&tx] {
      for (int i = 0; i < per_feed; ++i) static_cast<void>(tx.send_blocking(i));
    });
  }
  EXPECT_EQ(block_on(fan_in_rounds(pool, feeds, feeds_count * per_feed)), feeds_count * per_feed);
  for (auto& t : producers) t.join();
}

}  // namespace
