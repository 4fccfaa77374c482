// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::watch: versions and coalescing, the read guards (no lock: the sender is
// never held back by readers), send / send_replace / send_modify / send_if_modified, receivers
// and their copies, changed() and wait_for() from tasks and threads, closed(), cancellation,
// deterministic races at the waiter core's test points, and a bounded multi-threaded stress test.
#include "asyncband/watch.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/stop_token.hpp"
#include "support/last_one_out.hpp"
#include "support/lifetime.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"
#include "support/thread_hook.hpp"

namespace {

using namespace asyncband_test;
using asyncband::block_on;
using asyncband::send_status;
namespace watch = asyncband::watch;

using int_channel = std::pair<watch::sender<int>, watch::receiver<int>>;

/// What a changed() / wait_for() coroutine saw.
struct seen {
  int started = 0;
  int resumed = 0;
  std::optional<wait_status> status;
  std::optional<int> value;  // the guard's value (wait_for) or the value borrowed after changed()
};

task<void> changed_once(watch::receiver<int>& rx, seen& out) {
  ++out.started;
  const auto r = co_await rx.changed();
  ++out.resumed;
  out.status = r.status();
  if (r.ok()) out.value = *rx.borrow();
}

task<void> changed_once(watch::receiver<int>& rx, asyncband::stop_token stop, seen& out) {
  ++out.started;
  const auto r = co_await rx.changed(std::move(stop));
  ++out.resumed;
  out.status = r.status();
  if (r.ok()) out.value = *rx.borrow();
}

/// borrow_and_update, then changed(): the pattern whose window the issue names.
task<void> update_then_changed(watch::receiver<int>& rx, seen& out) {
  ++out.started;
  out.value = *rx.borrow_and_update();
  const auto r = co_await rx.changed();
  ++out.resumed;
  out.status = r.status();
  if (r.ok()) out.value = *rx.borrow_and_update();
}

template <class Predicate>
task<void> wait_for_once(watch::receiver<int>& rx, Predicate pred, asyncband::stop_token stop, seen& out) {
  ++out.started;
  const auto r = co_await rx.wait_for(std::move(pred), std::move(stop));
  ++out.resumed;
  out.status = r.status();
  if (r.ok()) out.value = **r;
}

task<void> closed_once(watch::sender<int>& tx, asyncband::stop_token stop, seen& out) {
  ++out.started;
  const auto r = co_await tx.closed(std::move(stop));
  ++out.resumed;
  out.status = r.status();
}

/// Counts live instances, to check when a version's value is destroyed.
struct counted {
  static inline int live = 0;
  int v;
  explicit counted(int x) : v(x) { ++live; }
  counted(const counted& o) : v(o.v) { ++live; }
  counted(counted&& o) noexcept : v(o.v) { ++live; }
  counted& operator=(const counted&) = default;
  counted& operator=(counted&&) = default;
  ~counted() { --live; }
};

/// A value whose copy throws on demand.
struct fragile {
  static inline bool throw_on_copy = false;
  int v = 0;
  explicit fragile(int x) : v(x) {}
  fragile(const fragile& o) : v(o.v) {
    if (throw_on_copy) throw std::runtime_error("copy");
  }
  fragile(fragile&&) noexcept = default;
  fragile& operator=(const fragile&) = default;
  fragile& operator=(fragile&&) noexcept = default;
  ~fragile() = default;
};

// ---------------------------------------------------------------------------------------------
// Versions, borrowing, sending

TEST(Watch, TheFirstReceiverHasSeenTheInitialValue) {
  auto [tx, rx] = watch::channel<int>(7);
  EXPECT_EQ(*rx.borrow(), 7);
  EXPECT_FALSE(rx.borrow().has_changed());
  EXPECT_FALSE(*rx.has_changed());
  EXPECT_EQ(*tx.borrow(), 7);
  EXPECT_EQ(tx.receiver_count(), 1U);
  EXPECT_FALSE(tx.is_closed());
}

TEST(Watch, ChannelConstructsTheValueInPlace) {
  auto [tx, rx] = watch::channel<std::string>(3, 'x');
  EXPECT_EQ(*rx.borrow(), "xxx");
  EXPECT_EQ(rx.borrow()->size(), 3U);
}

TEST(Watch, BorrowDoesNotMarkSeenBorrowAndUpdateDoes) {
  auto [tx, rx] = watch::channel<int>(0);
  ASSERT_TRUE(tx.send(1).ok());
  EXPECT_TRUE(*rx.has_changed());
  {
    const auto g = rx.borrow();
    EXPECT_EQ(*g, 1);
    EXPECT_TRUE(g.has_changed());
  }
  EXPECT_TRUE(*rx.has_changed());  // borrow() left it unseen
  {
    const auto g = rx.borrow_and_update();
    EXPECT_EQ(*g, 1);
    EXPECT_TRUE(g.has_changed());
  }
  EXPECT_FALSE(*rx.has_changed());
  EXPECT_FALSE(rx.borrow_and_update().has_changed());
}

TEST(Watch, SendWithNoReceiverHandsTheValueBackAndStoresNothing) {
  auto [tx, rx] = watch::channel<std::unique_ptr<int>>(std::make_unique<int>(1));
  { const auto drop = std::move(rx); }
  EXPECT_TRUE(tx.is_closed());
  EXPECT_EQ(tx.receiver_count(), 0U);
  auto r = tx.send(std::make_unique<int>(2));
  ASSERT_TRUE(r.closed());
  ASSERT_NE(r.value(), nullptr);
  EXPECT_EQ(*r.value(), 2);
  EXPECT_EQ(**tx.borrow(), 1);  // unchanged
}

TEST(Watch, SendReplaceStoresWithoutReceiversAndReturnsTheOldValue) {
  auto [tx, rx] = watch::channel<std::string>("a");
  { const auto drop = std::move(rx); }
  EXPECT_EQ(tx.send_replace(std::string("b")), "a");
  EXPECT_EQ(*tx.borrow(), "b");
}

TEST(Watch, SendReplaceCopiesAValueAGuardStillShows) {
  auto [tx, rx] = watch::channel<std::string>("old");
  const auto g = rx.borrow();
  EXPECT_EQ(tx.send_replace(std::string("new")), "old");
  EXPECT_EQ(*g, "old");  // the guard's version was copied from, not moved from
  EXPECT_EQ(*rx.borrow(), "new");
}

TEST(Watch, ThreeSendsBeforeAReadAreOneChangeWithTheLastValue) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(0);
  ASSERT_TRUE(tx.send(1).ok());
  ASSERT_TRUE(tx.send(2).ok());
  tx.send_modify([](int& v) { v = 3; });
  seen first;
  s.spawn(changed_once(rx, first));
  EXPECT_EQ(s.run(), 1U);  // completes at once
  EXPECT_EQ(first.status, wait_status::ok);
  EXPECT_EQ(first.value, 3);
  seen second;
  s.spawn(changed_once(rx, second));
  s.run();
  EXPECT_EQ(second.started, 1);
  EXPECT_EQ(second.resumed, 0);  // the three sends were one change
  ASSERT_TRUE(tx.send(4).ok());
  s.run();
  EXPECT_EQ(second.resumed, 1);
  EXPECT_EQ(second.value, 4);
}

TEST(Watch, SendWakesEveryWaitingReceiverOnItsScheduler) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(0);
  std::vector<watch::receiver<int>> receivers(4, rx);
  std::vector<seen> seen_by(4);
  for (std::size_t i = 0; i < 4; ++i) s.spawn(changed_once(receivers[i], seen_by[i]));
  s.run();
  EXPECT_EQ(tx.receiver_count(), 5U);
  ASSERT_TRUE(tx.send(9).ok());
  EXPECT_EQ(s.ready_count(), 4U);  // posted, none resumed inside send()
  for (const auto& x : seen_by) EXPECT_EQ(x.resumed, 0);
  s.run();
  for (const auto& x : seen_by) {
    EXPECT_EQ(x.resumed, 1);
    EXPECT_EQ(x.value, 9);
  }
}

TEST(Watch, SendIfModifiedReportingNoChangeNeitherBumpsNorWakes) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(5);
  seen w;
  s.spawn(changed_once(rx, w));
  s.run();
  EXPECT_FALSE(tx.send_if_modified([](int& v) {
    v = 6;  // reported as no change: the copy it modified is discarded
    return false;
  }));
  EXPECT_EQ(s.ready_count(), 0U);
  EXPECT_FALSE(*rx.has_changed());
  EXPECT_EQ(*rx.borrow(), 5);
  EXPECT_TRUE(tx.send_if_modified([](int& v) {
    v = 7;
    return true;
  }));
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.value, 7);
}

TEST(Watch, AThrowingModificationChangesNothing) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(1);
  seen w;
  s.spawn(changed_once(rx, w));
  s.run();
  EXPECT_THROW(tx.send_modify([](int& v) {
    v = 2;
    throw std::runtime_error("f");
  }),
               std::runtime_error);
  EXPECT_THROW((void)tx.send_if_modified([](int&) -> bool { throw std::runtime_error("f"); }),
               std::runtime_error);
  EXPECT_EQ(s.ready_count(), 0U);  // no version, no wake-up
  EXPECT_FALSE(*rx.has_changed());
  EXPECT_EQ(*rx.borrow(), 1);
  tx.send_modify([](int& v) { v += 10; });  // and the channel still works
  s.run();
  EXPECT_EQ(w.value, 11);
}

TEST(Watch, AThrowingCopyInSendModifyChangesNothing) {
  auto [tx, rx] = watch::channel<fragile>(1);
  fragile::throw_on_copy = true;
  EXPECT_THROW(tx.send_modify([](fragile& f) { f.v = 2; }), std::runtime_error);
  fragile::throw_on_copy = false;
  EXPECT_FALSE(*rx.has_changed());
  EXPECT_EQ(rx.borrow()->v, 1);
  tx.send_modify([](fragile& f) { f.v = 3; });
  EXPECT_EQ(rx.borrow_and_update()->v, 3);
}

// ---------------------------------------------------------------------------------------------
// Guards: no lock, the sender never waits for readers

TEST(Watch, AGuardKeepsItsVersionWhileTheSenderPublishesNewOnes) {
  // With a reader-writer lock this would deadlock: the sender would wait for the guards held on
  // its own thread. Readers cannot hold the writer back, however many there are.
  auto [tx, rx] = watch::channel<int>(0);
  std::vector<watch::borrowed<int>> guards;
  for (int i = 0; i < 100; ++i) {
    guards.push_back(rx.borrow());
    ASSERT_TRUE(tx.send(i + 1).ok());
    tx.send_modify([](int& v) { v *= 2; });
    EXPECT_EQ(tx.send_replace(2 * (i + 1)), 2 * (i + 1));
  }
  for (int i = 0; i < 100; ++i) EXPECT_EQ(*guards[static_cast<std::size_t>(i)], i == 0 ? 0 : 2 * i);
  EXPECT_EQ(*rx.borrow(), 200);
}

TEST(Watch, AReaderOnAnotherThreadHoldingAGuardDoesNotBlockTheSender) {
  auto [tx, rx] = watch::channel<int>(0);
  std::atomic<bool> holding{false};
  std::atomic<bool> release{false};
  std::thread reader([&rx = rx, &holding, &release] {
    const auto g = rx.borrow();
    holding = true;
    while (!release) std::this_thread::yield();
    EXPECT_EQ(*g, 0);
  });
  while (!holding) std::this_thread::yield();
  for (int i = 1; i <= 1000; ++i) ASSERT_TRUE(tx.send(i).ok());  // never waits for the reader
  release = true;
  reader.join();
  EXPECT_EQ(*rx.borrow(), 1000);
}

TEST(Watch, TheLastGuardOnAnOldVersionDestroysItsValue) {
  counted::live = 0;
  {
    auto [tx, rx] = watch::channel<counted>(1);
    EXPECT_EQ(counted::live, 1);
    auto g = rx.borrow();
    const auto copy = g;  // a copy is another reference, not another value
    EXPECT_EQ(counted::live, 1);
    ASSERT_TRUE(tx.send(counted(2)).ok());
    EXPECT_EQ(counted::live, 2);  // the old version lives on in the guards
    g = rx.borrow();
    EXPECT_EQ(counted::live, 2);
    EXPECT_EQ(copy->v, 1);
    EXPECT_EQ(g->v, 2);
  }
  EXPECT_EQ(counted::live, 0);
}

TEST(Watch, AGuardMayOutliveTheChannel) {
  counted::live = 0;
  std::optional<watch::borrowed<counted>> g;
  {
    auto [tx, rx] = watch::channel<counted>(4);
    g.emplace(rx.borrow());
  }
  EXPECT_EQ(counted::live, 1);
  EXPECT_EQ((*g)->v, 4);
  g.reset();
  EXPECT_EQ(counted::live, 0);
}

TEST(Watch, TheSendersBorrowNeverReportsAChange) {
  auto [tx, rx] = watch::channel<int>(0);
  ASSERT_TRUE(tx.send(1).ok());
  const auto g = tx.borrow();
  EXPECT_EQ(*g, 1);
  EXPECT_FALSE(g.has_changed());
}

// ---------------------------------------------------------------------------------------------
// Receivers: copies and subscriptions

TEST(Watch, ACopiedReceiverStartsWithTheSameSeenVersion) {
  auto [tx, rx] = watch::channel<int>(0);
  ASSERT_TRUE(tx.send(1).ok());
  auto copy = rx;  // rx has not seen version 1: neither has the copy
  EXPECT_EQ(tx.receiver_count(), 2U);
  EXPECT_TRUE(*copy.has_changed());
  (void)copy.borrow_and_update();
  EXPECT_FALSE(*copy.has_changed());
  EXPECT_TRUE(*rx.has_changed());  // each receiver has its own seen version
  auto assigned = tx.subscribe();
  assigned = rx;
  EXPECT_TRUE(*assigned.has_changed());
  EXPECT_TRUE(assigned.same_channel(rx));
  EXPECT_EQ(tx.receiver_count(), 3U);
  { const auto gone = std::move(copy); }
  EXPECT_EQ(tx.receiver_count(), 2U);
}

TEST(Watch, SubscribeStartsAtTheCurrentVersion) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(0);
  ASSERT_TRUE(tx.send(1).ok());
  auto sub = tx.subscribe();
  EXPECT_FALSE(*sub.has_changed());
  seen w;
  s.spawn(changed_once(sub, w));
  s.run();
  EXPECT_EQ(w.resumed, 0);
  ASSERT_TRUE(tx.send(2).ok());
  s.run();
  EXPECT_EQ(w.value, 2);
}

TEST(Watch, SubscribeAfterTheLastReceiverWentReopensSending) {
  auto [tx, rx] = watch::channel<int>(0);
  { const auto drop = std::move(rx); }
  EXPECT_TRUE(tx.send(1).closed());
  auto sub = tx.subscribe();
  EXPECT_FALSE(tx.is_closed());
  EXPECT_TRUE(tx.send(2).ok());
  EXPECT_EQ(*sub.borrow(), 2);
}

TEST(Watch, MovedFromHandlesThrow) {
  auto [tx, rx] = watch::channel<int>(0);
  auto tx2 = std::move(tx);
  auto rx2 = std::move(rx);
  EXPECT_THROW((void)tx.send(1), std::logic_error);        // NOLINT(bugprone-use-after-move)
  EXPECT_THROW((void)rx.borrow(), std::logic_error);       // NOLINT(bugprone-use-after-move)
  EXPECT_THROW((void)rx.has_changed(), std::logic_error);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(tx2.send(1).ok());
  EXPECT_EQ(*rx2.borrow(), 1);
}

// ---------------------------------------------------------------------------------------------
// The sender's departure

TEST(Watch, TheSendersDepartureEndsPendingWaitsClosed) {
  test_scheduler s;
  auto ch = std::make_optional<int_channel>(watch::channel<int>(0));
  seen w;
  s.spawn(changed_once(ch->second, w));
  s.run();
  auto rx = std::move(ch->second);
  ch.reset();  // the sender goes
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::closed);
  EXPECT_EQ(*rx.borrow(), 0);  // the last value stays borrowable
}

TEST(Watch, AnUnseenVersionIsStillDeliveredAfterTheSenderWentButHasChangedSaysClosed) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(0);
  ASSERT_TRUE(tx.send(1).ok());
  { const auto gone = std::move(tx); }
  EXPECT_TRUE(rx.has_changed().closed());  // tokio's rule: closed first
  seen first;
  s.spawn(changed_once(rx, first));
  s.run();
  EXPECT_EQ(first.status, wait_status::ok);  // the unseen version
  EXPECT_EQ(first.value, 1);
  seen second;
  s.spawn(changed_once(rx, second));
  s.run();
  EXPECT_EQ(second.status, wait_status::closed);
  EXPECT_TRUE(rx.changed_blocking().closed());
}

// ---------------------------------------------------------------------------------------------
// Deterministic races

TEST(Watch, AVersionPublishedBetweenBorrowAndUpdateAndChangedIsNotMissed) {
  // The send lands after changed()'s lock-free check found nothing new and before its locked
  // re-check and queueing: the re-check must see it (else the wait sleeps through it).
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(0);
  seen w;
  s.at(test_point::queueing, [&tx = tx] { ASSERT_TRUE(tx.send(1).ok()); });
  s.spawn(update_then_changed(rx, w));
  EXPECT_EQ(s.run(), 1U);  // never suspended
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::ok);
  EXPECT_EQ(w.value, 1);
}

TEST(Watch, AVersionPublishedWhileTheWaitIsQueuedButNotSuspendedCompletesIt) {
  for (const test_point point : {test_point::published, test_point::before_arm}) {
    SCOPED_TRACE(static_cast<int>(point));
    test_scheduler s;
    auto [tx, rx] = watch::channel<int>(0);
    seen w;
    s.at(point, [&tx = tx] { ASSERT_TRUE(tx.send(1).ok()); });
    s.spawn(update_then_changed(rx, w));
    EXPECT_EQ(s.run(), 1U);
    EXPECT_EQ(w.status, wait_status::ok);
    EXPECT_EQ(w.value, 1);
  }
}

TEST(Watch, TheSendersDepartureBetweenCheckAndQueueEndsTheWaitClosed) {
  test_scheduler s;
  auto ch = std::make_optional<int_channel>(watch::channel<int>(0));
  auto rx = std::move(ch->second);
  seen w;
  s.at(test_point::queueing, [&ch] { ch.reset(); });
  s.spawn(changed_once(rx, w));
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(w.status, wait_status::closed);
}

// ---------------------------------------------------------------------------------------------
// Cancellation

TEST(Watch, AnAlreadyStoppedTokenCancelsAtOnceEvenWithAnUnseenVersion) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(0);
  ASSERT_TRUE(tx.send(1).ok());
  asyncband::stop_source src;
  src.request_stop();
  seen w;
  s.spawn(changed_once(rx, src.get_token(), w));
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(w.status, wait_status::cancelled);
  EXPECT_TRUE(*rx.has_changed());  // not marked seen
}

TEST(Watch, StopWhileSuspendedCancelsAndResumesOnce) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(0);
  asyncband::stop_source src;
  seen w;
  s.spawn(changed_once(rx, src.get_token(), w));
  s.run();
  src.request_stop();
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::cancelled);
  ASSERT_TRUE(tx.send(1).ok());  // nobody queued any more
  EXPECT_EQ(s.run(), 0U);
  EXPECT_EQ(w.resumed, 1);
  EXPECT_TRUE(*rx.has_changed());  // the cancelled wait did not consume the change
}

TEST(Watch, AWaitWokenThenStoppedReportsOkAndMarksTheVersionSeen) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(0);
  asyncband::stop_source src;
  seen w;
  s.spawn(changed_once(rx, src.get_token(), w));
  s.run();
  s.at(test_point::claimed_for_wake, [&] { src.request_stop(); });  // claimed, not yet resumed
  ASSERT_TRUE(tx.send(1).ok());
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::ok);
  EXPECT_EQ(w.value, 1);
  EXPECT_FALSE(*rx.has_changed());
}

TEST(Watch, AStopBeforeArmCancelsWithoutSuspending) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(0);
  asyncband::stop_source src;
  seen w;
  s.at(test_point::before_arm, [&] { src.request_stop(); });
  s.spawn(changed_once(rx, src.get_token(), w));
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(w.status, wait_status::cancelled);
  ASSERT_TRUE(tx.send(1).ok());
  EXPECT_EQ(s.run(), 0U);
}

TEST(Watch, DestroyingASuspendedWaitUnlinksIt) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(0);
  seen w;
  {
    auto t = changed_once(rx, w);
    start_on(s, t);
    s.run();
    EXPECT_EQ(w.started, 1);
  }  // the frame goes while suspended
  ASSERT_TRUE(tx.send(1).ok());
  EXPECT_EQ(s.run(), 0U);
  EXPECT_EQ(w.resumed, 0);
}

// ---------------------------------------------------------------------------------------------
// wait_for

TEST(Watch, WaitForChecksTheCurrentValueFirst) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(5);
  seen w;
  s.spawn(wait_for_once(
      rx, [](int v) { return v == 5; }, {}, w));
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(w.status, wait_status::ok);
  EXPECT_EQ(w.value, 5);
}

TEST(Watch, WaitForResumesOnlyOnAValueThatSatisfiesThePredicate) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(0);
  seen w;
  int checks = 0;
  s.spawn(wait_for_once(
      rx,
      [&checks](int v) {
        ++checks;
        return v >= 3;
      },
      {}, w));
  s.run();
  EXPECT_EQ(checks, 1);
  ASSERT_TRUE(tx.send(1).ok());
  ASSERT_TRUE(tx.send(2).ok());
  EXPECT_EQ(s.ready_count(), 0U);  // checked on the sender's side, not resumed
  EXPECT_EQ(checks, 3);
  ASSERT_TRUE(tx.send(3).ok());
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::ok);
  EXPECT_EQ(w.value, 3);
  EXPECT_FALSE(*rx.has_changed());  // marked seen
}

TEST(Watch, WaitForEndsClosedWhenTheSenderGoesAndCancelledOnStop) {
  test_scheduler s;
  auto ch = std::make_optional<int_channel>(watch::channel<int>(0));
  auto rx = std::move(ch->second);
  auto rx2 = rx;
  asyncband::stop_source src;
  seen closed;
  seen stopped;
  s.spawn(wait_for_once(
      rx, [](int v) { return v > 10; }, {}, closed));
  s.spawn(wait_for_once(
      rx2, [](int v) { return v > 10; }, src.get_token(), stopped));
  s.run();
  ASSERT_TRUE(ch->first.send(1).ok());  // not enough for either
  s.run();
  src.request_stop();
  s.run();
  EXPECT_EQ(stopped.status, wait_status::cancelled);
  EXPECT_EQ(closed.resumed, 0);
  ch.reset();
  s.run();
  EXPECT_EQ(closed.status, wait_status::closed);
  EXPECT_EQ(closed.resumed, 1);
}

TEST(Watch, WaitForOnAClosedChannelChecksTheLastValue) {
  test_scheduler s;
  auto ch = std::make_optional<int_channel>(watch::channel<int>(4));
  auto rx = std::move(ch->second);
  ch.reset();
  seen yes;
  seen no;
  s.spawn(wait_for_once(
      rx, [](int v) { return v == 4; }, {}, yes));
  s.spawn(wait_for_once(
      rx, [](int v) { return v == 5; }, {}, no));
  s.run();
  EXPECT_EQ(yes.status, wait_status::ok);
  EXPECT_EQ(no.status, wait_status::closed);
}

TEST(Watch, AThrowingPredicateEndsWaitForWithTheException) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(0);
  bool threw = false;
  auto waiter = [](watch::receiver<int>& r, bool& out) -> task<void> {
    try {
      (void)co_await r.wait_for([](int v) {
        if (v == 2) throw std::runtime_error("pred");
        return false;
      });
    } catch (const std::runtime_error&) {
      out = true;
    }
  };
  s.spawn(waiter(rx, threw));
  s.run();
  ASSERT_TRUE(tx.send(1).ok());
  ASSERT_TRUE(tx.send(2).ok());
  s.run();
  EXPECT_TRUE(threw);
  ASSERT_TRUE(tx.send(3).ok());  // nothing queued any more
  EXPECT_EQ(s.run(), 0U);
}

TEST(Watch, WaitForBlockingFormsOnAnotherThread) {
  auto [tx, rx] = watch::channel<int>(0);
  std::thread t([&rx = rx] {
    const auto r = rx.wait_for_blocking([](int v) { return v == 3; });
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(**r, 3);
  });
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(tx.send(i).ok());
  t.join();
  EXPECT_TRUE(rx.wait_for_timeout([](int v) { return v == 9; }, 1ms).timed_out());
  asyncband::stop_source src;
  src.request_stop();
  EXPECT_TRUE(rx.wait_for_blocking([](int v) { return v == 9; }, src.get_token()).cancelled());
  EXPECT_TRUE(rx.wait_for_blocking([](int v) { return v == 3; }, src.get_token()).ok());  // pred first
}

// ---------------------------------------------------------------------------------------------
// Blocking forms

TEST(Watch, ChangedBlockingReturnsOnASendFromAnotherThread) {
  auto [tx, rx] = watch::channel<int>(0);
  std::vector<std::thread> threads;
  std::vector<watch::receiver<int>> receivers(3, rx);
  std::atomic<int> ok{0};
  for (auto& r : receivers) {
    threads.emplace_back([&r, &ok] {
      if (r.changed_blocking().ok() && *r.borrow() == 1) ok.fetch_add(1);
    });
  }
  ASSERT_TRUE(tx.send(1).ok());
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 3);
}

TEST(Watch, ChangedTimeoutAndStopForms) {
  auto [tx, rx] = watch::channel<int>(0);
  EXPECT_TRUE(rx.changed_timeout(1ms).timed_out());
  asyncband::stop_source src;
  std::thread stopper([&src] { src.request_stop(); });
  const auto r = rx.changed_blocking(src.get_token());
  stopper.join();
  EXPECT_TRUE(r.cancelled());
  ASSERT_TRUE(tx.send(1).ok());
  EXPECT_TRUE(rx.changed_timeout(1h).ok());
  EXPECT_TRUE(block_on(rx.changed(src.get_token())).cancelled());  // already stopped
}

// ---------------------------------------------------------------------------------------------
// closed(): every receiver gone

TEST(Watch, ClosedCompletesWhenTheLastReceiverGoes) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(0);
  auto copy = std::make_optional(rx);
  auto original = std::make_optional(std::move(rx));
  seen w;
  s.spawn(closed_once(tx, {}, w));
  s.run();
  EXPECT_EQ(w.resumed, 0);
  original.reset();
  s.run();
  EXPECT_EQ(w.resumed, 0);  // a copy is still there
  copy.reset();
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::ok);
  EXPECT_TRUE(tx.is_closed());
}

TEST(Watch, TheLastReceiverGoingAtAnyPointOfClosedsQueueingCompletesIt) {
  // The receiver's destruction races closed()'s check: between the lock-free check and the
  // locked re-check, once queued but not suspended; each time it completes without suspending.
  for (const test_point point : {test_point::queueing, test_point::published, test_point::before_arm}) {
    SCOPED_TRACE(static_cast<int>(point));
    test_scheduler s;
    auto [tx, rx] = watch::channel<int>(0);
    auto r = std::make_optional(std::move(rx));
    seen w;
    s.at(point, [&r] { r.reset(); });
    s.spawn(closed_once(tx, {}, w));
    EXPECT_EQ(s.run(), 1U);
    EXPECT_EQ(s.pending_actions(), 0U);
    EXPECT_EQ(w.status, wait_status::ok);
  }
}

TEST(Watch, ClosedRacesReceiverDestructionOnTwoThreads) {
  for (int round = 0; round < 200; ++round) {
    auto [tx, rx] = watch::channel<int>(0);
    std::thread t([r = std::move(rx)]() mutable { const auto gone = std::move(r); });
    tx.closed_blocking();
    t.join();
    EXPECT_TRUE(tx.is_closed());
  }
}

TEST(Watch, ClosedIsCancellableAndHasBlockingForms) {
  test_scheduler s;
  auto [tx, rx] = watch::channel<int>(0);
  asyncband::stop_source src;
  seen w;
  s.spawn(closed_once(tx, src.get_token(), w));
  s.run();
  src.request_stop();
  s.run();
  EXPECT_EQ(w.status, wait_status::cancelled);
  EXPECT_TRUE(tx.closed_timeout(1ms).timed_out());
  EXPECT_TRUE(tx.closed_blocking(src.get_token()).cancelled());
  { const auto gone = std::move(rx); }
  EXPECT_TRUE(tx.closed_blocking(src.get_token()).cancelled());  // a stop already requested wins
  tx.closed_blocking();
  block_on(tx.closed());  // completes at once
}

// ---------------------------------------------------------------------------------------------
// Stress: receivers on the pool and on threads, each sees a non-decreasing sequence that ends
// with the last value

task<void> pool_reader(watch::receiver<int> rx, std::atomic<int>& bad, std::atomic<int>& last,
                       completion& done, bool use_wait_for) {
  int previous = *rx.borrow_and_update();
  for (;;) {
    if (use_wait_for) {
      const auto r = co_await rx.wait_for([previous](int v) { return v > previous; });
      if (!r.ok()) break;
      if (**r <= previous) bad.fetch_add(1);
      previous = **r;
    } else {
      const auto r = co_await rx.changed();
      if (!r.ok()) break;
      const int v = *rx.borrow_and_update();
      if (v <= previous) bad.fetch_add(1);  // changed() means a newer version: a larger value
      previous = v;
    }
  }
  last.store(previous);
  done.done();
}

TEST(Watch, StressReceiversSeeNonDecreasingValuesEndingWithTheLast) {
  constexpr int pool_readers = 4;
  constexpr int thread_readers = 2;
  const int rounds = repeat_for(20, 2s, [&](int) {
    asyncband::runtime::thread_pool pool(2);
    auto ch = std::make_optional<int_channel>(watch::channel<int>(0));
    auto& tx = ch->first;
    std::atomic<int> bad{0};
    std::vector<std::atomic<int>> last(pool_readers + thread_readers);
    completion done(pool_readers + thread_readers);
    for (int i = 0; i < pool_readers; ++i) {
      asyncband::runtime::spawn(
          pool.ref(), pool_reader(ch->second, bad, last[static_cast<std::size_t>(i)], done, i % 2 == 1));
    }
    std::vector<std::thread> threads;
    for (int i = 0; i < thread_readers; ++i) {
      threads.emplace_back(
          [rx = ch->second, &bad, &slot = last[static_cast<std::size_t>(pool_readers + i)], &done]() mutable {
            int previous = *rx.borrow_and_update();
            while (rx.changed_blocking().ok()) {
              const int v = *rx.borrow_and_update();
              if (v <= previous) bad.fetch_add(1);
              previous = v;
            }
            slot.store(previous);
            done.done();
          });
    }
    { const auto drop = std::move(ch->second); }
    constexpr int sends = 2000;
    for (int v = 1; v <= sends; ++v) {
      if (v % 3 == 0) {
        tx.send_modify([v](int& x) { x = v; });
      } else {
        (void)tx.send(v);
      }
    }
    ch.reset();  // the sender goes: every reader ends closed after seeing the last value
    done.wait_or_abort(30s, "watch stress");
    for (auto& t : threads) t.join();
    EXPECT_EQ(bad.load(), 0);
    for (const auto& l : last) EXPECT_EQ(l.load(), sends);
    return !HasFailure();
  });
  EXPECT_GE(rounds, 1);
}

// ---------------------------------------------------------------------------------------------
// Plain threads parked without a node: changed_blocking(), wait_for_blocking(pred) and
// closed_blocking() without a stop token or a timeout sleep on one word of the channel, which a
// send (or a departure) bumps under the lock and notifies once after unlocking. The races below
// land at test point `parking`: the wait has read its key and found nothing, and sleeps next.
// The change made there must end the sleep at once. A wait that read its key after its check, or
// a change that does not bump the word, sleeps forever: the watchdog turns that into an abort.

constexpr auto hang_limit = std::chrono::seconds(60);

enum class send_form { send, send_replace, send_modify, send_if_modified };

void send_with(watch::sender<int>& tx, send_form form, int v) {
  switch (form) {
    case send_form::send:
      ASSERT_TRUE(tx.send(v).ok());
      break;
    case send_form::send_replace:
      (void)tx.send_replace(v);
      break;
    case send_form::send_modify:
      tx.send_modify([v](int& x) { x = v; });
      break;
    case send_form::send_if_modified:
      ASSERT_TRUE(tx.send_if_modified([v](int& x) {
        x = v;
        return true;
      }));
      break;
  }
}

class WatchParkedSend : public ::testing::TestWithParam<send_form> {};

TEST_P(WatchParkedSend, ASendBetweenTheKeyAndTheSleepEndsChangedBlocking) {
  const lifetime::watchdog hang("WatchParkedSend.changed_blocking", hang_limit);
  auto [tx, rx] = watch::channel<int>(0);
  int fired = 0;
  {
    const thread_hook hook(test_point::parking, [&fired, &tx = tx] {
      ++fired;
      send_with(tx, GetParam(), 1);
    });
    EXPECT_TRUE(rx.changed_blocking().ok());
  }
  EXPECT_EQ(fired, 1);              // the wait did reach its sleep
  EXPECT_FALSE(*rx.has_changed());  // the version is marked seen
  EXPECT_EQ(*rx.borrow(), 1);
}

TEST_P(WatchParkedSend, ASendBetweenTheKeyAndTheSleepEndsWaitForBlocking) {
  const lifetime::watchdog hang("WatchParkedSend.wait_for_blocking", hang_limit);
  auto [tx, rx] = watch::channel<int>(0);
  int fired = 0;
  {
    const thread_hook hook(test_point::parking, [&fired, &tx = tx] {
      ++fired;
      send_with(tx, GetParam(), 3);
    });
    const auto r = rx.wait_for_blocking([](int v) { return v == 3; });
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(**r, 3);
  }
  EXPECT_EQ(fired, 1);
  EXPECT_FALSE(*rx.has_changed());
}

INSTANTIATE_TEST_SUITE_P(Forms, WatchParkedSend,
                         ::testing::Values(send_form::send, send_form::send_replace, send_form::send_modify,
                                           send_form::send_if_modified),
                         [](const ::testing::TestParamInfo<send_form>& info) {
                           switch (info.param) {
                             case send_form::send:
                               return std::string("Send");
                             case send_form::send_replace:
                               return std::string("SendReplace");
                             case send_form::send_modify:
                               return std::string("SendModify");
                             case send_form::send_if_modified:
                               return std::string("SendIfModified");
                           }
                           return std::string("Unknown");
                         });

TEST(WatchParking, ThreeSendsBetweenTheKeyAndTheSleepAreOneChangeWithTheLastValue) {
  const lifetime::watchdog hang("WatchParking.coalescing", hang_limit);
  auto [tx, rx] = watch::channel<int>(0);
  {
    const thread_hook hook(test_point::parking, [&tx = tx] {
      for (int v = 1; v <= 3; ++v) ASSERT_TRUE(tx.send(v).ok());
    });
    EXPECT_TRUE(rx.changed_blocking().ok());
  }
  const auto guard = rx.borrow();
  EXPECT_EQ(*guard, 3);
  EXPECT_FALSE(guard.has_changed());  // the three versions were one change
}

TEST(WatchParking, TheSendersDepartureBetweenTheKeyAndTheSleepEndsChangedBlockingClosed) {
  const lifetime::watchdog hang("WatchParking.sender_departure", hang_limit);
  auto ch = std::make_optional<int_channel>(watch::channel<int>(0));
  auto rx = std::move(ch->second);
  int fired = 0;
  {
    const thread_hook hook(test_point::parking, [&fired, &ch] {
      ++fired;
      ch.reset();
    });
    EXPECT_TRUE(rx.changed_blocking().closed());
  }
  EXPECT_EQ(fired, 1);
  EXPECT_TRUE(rx.wait_for_blocking([](int v) { return v == 1; }).closed());  // the parked form, too
}

TEST(WatchParking, TheLastReceiverGoingBetweenTheKeyAndTheSleepEndsClosedBlocking) {
  const lifetime::watchdog hang("WatchParking.closed_blocking", hang_limit);
  auto [tx, rx] = watch::channel<int>(0);
  auto r = std::make_optional(std::move(rx));
  int fired = 0;
  {
    const thread_hook hook(test_point::parking, [&fired, &r] {
      ++fired;
      r.reset();
    });
    tx.closed_blocking();
  }
  EXPECT_EQ(fired, 1);
  EXPECT_TRUE(tx.is_closed());
}

// Last one out: a parked thread that sees the version (it never slept, or its spin saw it) may
// destroy the whole channel while the send is still notifying and releasing the old value. The
// send is stopped right after its change (test point `woken`); the channel's destruction must
// wait for it (the queue's pin), and nothing of the state may be touched after (ASan).
struct watch_pair {
  int_channel ch = watch::channel<int>(0);
};

TEST(WatchParking, AParkedReceiverMayDestroyTheChannelWhileTheSendNotifies) {
  waiter_destroys_while_the_waker_returns(
      [] { return std::make_unique<watch_pair>(); },
      [](watch_pair& w) { ASSERT_TRUE(w.ch.first.send(1).ok()); },
      [](watch_pair& w) { EXPECT_TRUE(w.ch.second.changed_blocking().ok()); });
}

TEST(WatchParking, EightParkedThreadsAreAllWokenByEverySend) {
  // Real sleepers: each thread announces itself at the parking point, so most of them sleep in
  // the kernel when the send comes (the rest are on their way: the key covers them). Every round
  // must wake all eight, with the round's value.
  constexpr int threads_n = 8;
  constexpr int rounds = 50;
  const lifetime::watchdog hang("WatchParking.eight_threads", hang_limit);
  auto [tx, rx] = watch::channel<int>(0);
  std::atomic<int> bad{0};
  std::vector<std::unique_ptr<std::latch>> parked;
  std::vector<std::unique_ptr<std::latch>> acked;
  for (int i = 0; i < rounds; ++i) {
    parked.push_back(std::make_unique<std::latch>(threads_n));
    acked.push_back(std::make_unique<std::latch>(threads_n));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_n; ++t) {
    threads.emplace_back([r = rx, &parked, &acked, &bad]() mutable {
      for (int i = 0; i < rounds; ++i) {
        const auto index = static_cast<std::size_t>(i);
        bool announced = false;
        {
          const thread_hook hook(test_point::parking, [&] {
            announced = true;
            parked[index]->count_down();
          });
          if (!r.changed_blocking().ok() || *r.borrow_and_update() != i + 1) bad.fetch_add(1);
        }
        if (!announced) bad.fetch_add(1);  // it cannot have completed without parking
        acked[index]->count_down();
      }
    });
  }
  for (int i = 0; i < rounds; ++i) {
    parked[static_cast<std::size_t>(i)]->wait();
    ASSERT_TRUE(tx.send(i + 1).ok());
    acked[static_cast<std::size_t>(i)]->wait();
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
