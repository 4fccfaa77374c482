// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::shutdown: the signal (receivers and watchers, every waiting form, handles
// made after it), the tracking of receivers by wait_done (copies, moves, reset, assignment,
// watchers not counted), dropping the sender, the stop token (callbacks, asyncband waits and
// standard code cancelled, its order against the waiters), cancellation and timeouts, races on
// the test scheduler, "last one out" (lifetime rows under ASan), and bounded stress under TSan.
#include "asyncband/shutdown.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/manual_reset_event.hpp"
#include "asyncband/mpsc/unbounded.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/stop_token.hpp"
#include "support/lifetime.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"

namespace {

using namespace asyncband_test;
namespace shutdown = asyncband::shutdown;
using asyncband::runtime::thread_pool;

// ---------------------------------------------------------------------------------------------
// Helpers

/// A pair under names that lambdas can capture (clang 14 cannot capture structured bindings).
struct pair_of {
  std::pair<shutdown::sender, shutdown::receiver> p = shutdown::make_pair();
  shutdown::sender& tx = p.first;
  shutdown::receiver& rx = p.second;
};

/// Waits once for the signal on a receiver or watcher and records it.
template <class Observer>
task<void> signal_waiter(Observer& o, probe& p) {
  ++p.started;
  co_await o.is_shutdown();
  p.finish(wait_status::ok);
}

template <class Observer>
task<void> stoppable_signal_waiter(Observer& o, asyncband::stop_token token, probe& p) {
  ++p.started;
  const auto r = co_await o.is_shutdown(std::move(token));
  p.finish(r.status());
}

task<void> done_waiter(shutdown::sender& tx, probe& p) {
  ++p.started;
  co_await tx.wait_done();
  p.finish(wait_status::ok);
}

task<void> stoppable_done_waiter(shutdown::sender& tx, asyncband::stop_token token, probe& p) {
  ++p.started;
  const auto r = co_await tx.wait_done(std::move(token));
  p.finish(r.status());
}

constexpr int kBlockingForms = 5;

/// Waits for the signal from this thread in one of the blocking forms (form % 5:
/// is_shutdown_blocking(), with a token, is_shutdown_timeout(10min), block_on of the awaitable,
/// with and without a token); the status it reported.
template <class Observer>
wait_status block_for_signal(const Observer& o, int form) {
  asyncband::stop_source never;
  switch (form % kBlockingForms) {
    case 0:
      o.is_shutdown_blocking();
      return wait_status::ok;
    case 1:
      return o.is_shutdown_blocking(never.get_token()).status();
    case 2:
      return o.is_shutdown_timeout(10min).status();  // only a hang would reach the deadline
    case 3:
      asyncband::block_on(o.is_shutdown());
      return wait_status::ok;
    default:
      return asyncband::block_on(o.is_shutdown(never.get_token())).status();
  }
}

/// The same for wait_done.
wait_status block_for_done(shutdown::sender& tx, int form) {
  asyncband::stop_source never;
  switch (form % kBlockingForms) {
    case 0:
      tx.wait_done_blocking();
      return wait_status::ok;
    case 1:
      return tx.wait_done_blocking(never.get_token()).status();
    case 2:
      return tx.wait_done_timeout(10min).status();
    case 3:
      asyncband::block_on(tx.wait_done());
      return wait_status::ok;
    default:
      return asyncband::block_on(tx.wait_done(never.get_token())).status();
  }
}

// ---------------------------------------------------------------------------------------------
// Types

static_assert(!std::is_copy_constructible_v<shutdown::sender>);
static_assert(!std::is_copy_assignable_v<shutdown::sender>);
static_assert(std::is_nothrow_move_constructible_v<shutdown::sender>);
static_assert(std::is_nothrow_move_assignable_v<shutdown::sender>);
static_assert(std::is_copy_constructible_v<shutdown::receiver>);
static_assert(std::is_nothrow_move_constructible_v<shutdown::receiver>);
static_assert(std::is_nothrow_move_assignable_v<shutdown::receiver>);
static_assert(std::is_copy_constructible_v<shutdown::watcher>);
static_assert(std::is_nothrow_move_constructible_v<shutdown::watcher>);
static_assert(
    std::is_same_v<decltype(shutdown::make_pair()), std::pair<shutdown::sender, shutdown::receiver>>);
// A receiver does not slice into a watcher: watch() is the way.
static_assert(!std::is_convertible_v<shutdown::receiver, shutdown::watcher>);

// ---------------------------------------------------------------------------------------------
// The signal

TEST(Shutdown, StartsUnsignalledWithOneTrackedReceiver) {
  auto [tx, rx] = shutdown::make_pair();
  EXPECT_FALSE(tx.is_shutdown_now());
  EXPECT_FALSE(rx.is_shutdown_now());
  EXPECT_EQ(tx.receivers(), 1U);
  const asyncband::stop_token token = rx.stop_token();
  EXPECT_TRUE(token.stop_possible());
  EXPECT_FALSE(token.stop_requested());
  EXPECT_TRUE(rx.is_shutdown_timeout(0ms).timed_out());
  EXPECT_TRUE(tx.wait_done_timeout(0ms).timed_out());
}

TEST(Shutdown, ShutdownSignalsEveryReceiverAndWatcherAndIsIdempotent) {
  auto [tx, rx] = shutdown::make_pair();
  const shutdown::receiver copy = rx;
  const shutdown::watcher w = rx.watch();
  const shutdown::watcher w2 = w;  // NOLINT(performance-unnecessary-copy-initialization)
  tx.shutdown();
  EXPECT_TRUE(tx.is_shutdown_now());
  EXPECT_TRUE(rx.is_shutdown_now());
  EXPECT_TRUE(copy.is_shutdown_now());
  EXPECT_TRUE(w.is_shutdown_now());
  EXPECT_TRUE(w2.is_shutdown_now());
  EXPECT_TRUE(rx.stop_token().stop_requested());
  EXPECT_TRUE(w.stop_token().stop_requested());
  tx.shutdown();  // again: nothing changes
  EXPECT_TRUE(rx.is_shutdown_now());
  EXPECT_EQ(tx.receivers(), 2U);  // the signal does not end the tracking
}

TEST(Shutdown, WaitsQueuedBeforeShutdownAreWokenOnceOnTheirScheduler) {
  test_scheduler s;
  auto [tx, rx] = shutdown::make_pair();
  shutdown::receiver copy = rx;
  shutdown::watcher w = rx.watch();
  asyncband::stop_source never;
  std::vector<probe> probes(4);
  auto t0 = signal_waiter(rx, probes[0]);
  auto t1 = stoppable_signal_waiter(copy, never.get_token(), probes[1]);
  auto t2 = signal_waiter(w, probes[2]);
  auto t3 = stoppable_signal_waiter(w, never.get_token(), probes[3]);
  for (auto* t : {&t0, &t1, &t2, &t3}) start_on(s, *t);
  s.run();
  for (const auto& p : probes) EXPECT_EQ(p.resumed, 0);
  tx.shutdown();
  EXPECT_EQ(s.ready_count(), probes.size());  // posted to their scheduler, not resumed inline
  for (const auto& p : probes) EXPECT_EQ(p.resumed, 0);
  tx.shutdown();  // a second call wakes nobody again
  EXPECT_EQ(s.ready_count(), probes.size());
  s.run();
  for (const auto& p : probes) {
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::ok);
  }
  EXPECT_EQ(s.run(), 0U);
}

TEST(Shutdown, WaitsAfterShutdownCompleteAtOnceInEveryForm) {
  auto [tx, rx] = shutdown::make_pair();
  const shutdown::watcher w = rx.watch();
  tx.shutdown();
  for (int form = 0; form < kBlockingForms; ++form) {
    SCOPED_TRACE(form);
    EXPECT_EQ(block_for_signal(rx, form), wait_status::ok);
    EXPECT_EQ(block_for_signal(w, form), wait_status::ok);
  }
  EXPECT_TRUE(rx.is_shutdown_timeout(0ms).ok());  // signalled at the call: the deadline does not matter
  test_scheduler s;
  probe p;
  auto t = signal_waiter(rx, p);
  start_on(s, t);
  EXPECT_EQ(s.run(), 1U);  // one step: it never suspends
  EXPECT_EQ(p.resumed, 1);
}

TEST(Shutdown, AReceiverOrWatcherMadeAfterShutdownSeesItAtOnce) {
  auto [tx, rx] = shutdown::make_pair();
  tx.shutdown();
  const shutdown::receiver late = rx;
  const shutdown::watcher late_watch = late.watch();
  EXPECT_TRUE(late.is_shutdown_now());
  EXPECT_TRUE(late_watch.is_shutdown_now());
  EXPECT_TRUE(late.stop_token().stop_requested());
  bool ran = false;
  const asyncband::stop_callback cb(late_watch.stop_token(), [&ran] { ran = true; });
  EXPECT_TRUE(ran);  // registered on a stopped token: runs in the constructor
  test_scheduler s;
  probe p;
  probe q;
  auto t = signal_waiter(late, p);
  auto u = signal_waiter(late_watch, q);
  start_on(s, t);
  start_on(s, u);
  EXPECT_EQ(s.run(), 2U);
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(q.resumed, 1);
  EXPECT_EQ(tx.receivers(), 2U);  // a late copy is tracked like any other
}

TEST(Shutdown, PlainThreadsBlockUntilShutdownInEveryForm) {
  pair_of pr;
  std::vector<std::thread> threads;
  std::vector<wait_status> seen(2 * kBlockingForms, wait_status::closed);
  std::atomic<int> ready{0};
  int before = 0;  // written before shutdown(): visible after the wait (TSan checks)
  std::vector<int> read(seen.size(), 0);
  for (int form = 0; form < kBlockingForms; ++form) {
    const auto i = static_cast<std::size_t>(form);
    threads.emplace_back([r = pr.rx, &seen, &read, &before, &ready, form, i] {
      ready.fetch_add(1);
      seen[i] = block_for_signal(r, form);
      read[i] = before;
    });
    threads.emplace_back([w = pr.rx.watch(), &seen, &read, &before, &ready, form, i] {
      ready.fetch_add(1);
      seen[i + kBlockingForms] = block_for_signal(w, form);
      read[i + kBlockingForms] = before;
    });
  }
  while (ready.load() != static_cast<int>(threads.size())) std::this_thread::yield();
  before = 42;
  pr.tx.shutdown();  // the threads may or may not have blocked yet: both must end ok
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i], wait_status::ok) << i;
    EXPECT_EQ(read[i], 42) << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Tracking: wait_done

TEST(Shutdown, WaitDoneCompletesOnlyAfterTheLastTrackedReceiverIsDestroyed) {
  test_scheduler s;
  auto [tx, rx] = shutdown::make_pair();
  auto r1 = std::make_unique<shutdown::receiver>(rx);
  auto r2 = std::make_unique<shutdown::receiver>(*r1);
  const shutdown::watcher w = rx.watch();  // not tracked: alive until the end
  EXPECT_EQ(tx.receivers(), 3U);
  probe done;
  auto t = done_waiter(tx, done);
  start_on(s, t);
  s.run();
  tx.shutdown();
  s.run();
  EXPECT_EQ(done.resumed, 0);  // the signal alone does not end it
  rx.reset();
  r1.reset();
  s.run();
  EXPECT_EQ(done.resumed, 0);
  EXPECT_EQ(tx.receivers(), 1U);
  r2.reset();
  EXPECT_EQ(s.ready_count(), 1U);  // posted by the last departure
  s.run();
  EXPECT_EQ(done.resumed, 1);
  EXPECT_EQ(done.status, wait_status::ok);
  EXPECT_EQ(tx.receivers(), 0U);
  EXPECT_TRUE(w.is_shutdown_now());  // the watcher is still there and still sees the signal
}

TEST(Shutdown, WatchersDoNotCount) {
  auto [tx, rx] = shutdown::make_pair();
  std::vector<shutdown::watcher> watchers(3, rx.watch());
  EXPECT_EQ(tx.receivers(), 1U);
  rx.reset();
  EXPECT_EQ(tx.receivers(), 0U);
  EXPECT_TRUE(tx.wait_done_timeout(0ms).ok());  // every watcher still alive
  EXPECT_FALSE(watchers[0].is_shutdown_now());
}

TEST(Shutdown, MovedFromReceiversDoNotCount) {
  auto [tx, rx] = shutdown::make_pair();
  shutdown::receiver a = rx;
  EXPECT_EQ(tx.receivers(), 2U);
  shutdown::receiver b(std::move(a));  // the tracking moves
  EXPECT_EQ(tx.receivers(), 2U);
  shutdown::receiver c = a;  // NOLINT(bugprone-use-after-move): a copy of an empty receiver is empty
  EXPECT_EQ(tx.receivers(), 2U);
  shutdown::receiver d = rx;
  d = std::move(b);  // d's own tracking goes, b's moves in
  EXPECT_EQ(tx.receivers(), 2U);
  {
    const shutdown::receiver gone = std::move(rx);
    EXPECT_EQ(tx.receivers(), 2U);
  }
  EXPECT_EQ(tx.receivers(), 1U);  // only d; a, b, c and rx are empty
  EXPECT_TRUE(tx.wait_done_timeout(0ms).timed_out());
  d.reset();
  EXPECT_TRUE(tx.wait_done_timeout(0ms).ok());
}

TEST(Shutdown, ResetAndAssignmentStopTracking) {
  auto [tx1, rx1] = shutdown::make_pair();
  auto [tx2, rx2] = shutdown::make_pair();
  shutdown::receiver h = rx1;
  EXPECT_EQ(tx1.receivers(), 2U);
  h = rx2;  // copy assignment: leaves pair 1, joins pair 2
  EXPECT_EQ(tx1.receivers(), 1U);
  EXPECT_EQ(tx2.receivers(), 2U);
  const auto& self = h;
  h = self;  // self-assignment: nothing changes
  EXPECT_EQ(tx2.receivers(), 2U);
  h = std::move(rx1);  // move assignment: leaves pair 2, takes rx1's tracking
  EXPECT_EQ(tx1.receivers(), 1U);
  EXPECT_EQ(tx2.receivers(), 1U);
  tx1.shutdown();
  EXPECT_TRUE(h.is_shutdown_now());
  EXPECT_FALSE(rx2.is_shutdown_now());
  h.reset();
  EXPECT_EQ(tx1.receivers(), 0U);
  h.reset();  // an empty receiver: nothing more
  EXPECT_EQ(tx1.receivers(), 0U);
  h = rx2;  // an empty receiver may be assigned to
  EXPECT_EQ(tx2.receivers(), 2U);
}

TEST(Shutdown, WaitDoneBeforeShutdownJustWaits) {
  test_scheduler s;
  auto [tx, rx] = shutdown::make_pair();
  probe done;
  auto t = done_waiter(tx, done);
  start_on(s, t);
  s.run();
  EXPECT_EQ(done.resumed, 0);
  rx.reset();
  s.run();
  EXPECT_EQ(done.resumed, 1);
  EXPECT_FALSE(tx.is_shutdown_now());  // waiting signals nothing
}

TEST(Shutdown, WaitDoneWithNoReceiverLeftCompletesAtOnceInEveryFormAndStaysComplete) {
  auto [tx, rx] = shutdown::make_pair();
  rx.reset();
  for (int form = 0; form < kBlockingForms; ++form) {
    SCOPED_TRACE(form);
    EXPECT_EQ(block_for_done(tx, form), wait_status::ok);
  }
  EXPECT_TRUE(tx.wait_done_timeout(0ms).ok());
  test_scheduler s;
  probe p;
  auto t = done_waiter(tx, p);
  start_on(s, t);
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(p.resumed, 1);
}

TEST(Shutdown, WaitDoneOnAPlainThreadSeesTheReceiversWork) {
  for (int form = 0; form < kBlockingForms; ++form) {
    SCOPED_TRACE(form);
    pair_of pr;
    std::vector<int> work(3, 0);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < work.size(); ++i) {
      threads.emplace_back([r = pr.rx, &work, i]() mutable {
        r.is_shutdown_blocking();
        work[i] = static_cast<int>(i) + 1;
        r.reset();
      });
    }
    pr.rx.reset();
    pr.tx.shutdown();
    EXPECT_EQ(block_for_done(pr.tx, form), wait_status::ok);
    for (std::size_t i = 0; i < work.size(); ++i) EXPECT_EQ(work[i], static_cast<int>(i) + 1);
    for (auto& t : threads) t.join();
  }
}

// ---------------------------------------------------------------------------------------------
// Dropping the sender

TEST(Shutdown, DestroyingTheSenderSignals) {
  test_scheduler s;
  auto p = std::make_unique<std::pair<shutdown::sender, shutdown::receiver>>(shutdown::make_pair());
  const shutdown::receiver rx = std::move(p->second);
  const shutdown::watcher w = rx.watch();
  const asyncband::stop_token token = rx.stop_token();
  probe a;
  auto t = signal_waiter(rx, a);
  start_on(s, t);
  s.run();
  p.reset();  // the sender goes without shutdown()
  EXPECT_TRUE(rx.is_shutdown_now());
  EXPECT_TRUE(w.is_shutdown_now());
  EXPECT_TRUE(token.stop_requested());
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::ok);
}

TEST(Shutdown, AMovedFromSenderSignalsNothing) {
  auto [tx, rx] = shutdown::make_pair();
  {
    shutdown::sender moved(std::move(tx));
    tx.shutdown();  // NOLINT(bugprone-use-after-move): a moved-from sender has no pair: no-op
    EXPECT_FALSE(rx.is_shutdown_now());
    EXPECT_EQ(tx.receivers(), 0U);  // NOLINT(bugprone-use-after-move)
    tx = std::move(moved);          // the moved-from sender takes it back (it had nothing to signal)
    EXPECT_FALSE(rx.is_shutdown_now());
  }  // `moved`, now moved from again, is destroyed: nothing
  EXPECT_FALSE(rx.is_shutdown_now());
  EXPECT_EQ(tx.receivers(), 1U);
}

TEST(Shutdown, MoveAssigningASenderSignalsItsOldPair) {
  auto [tx1, rx1] = shutdown::make_pair();
  auto [tx2, rx2] = shutdown::make_pair();
  tx1 = std::move(tx2);
  EXPECT_TRUE(rx1.is_shutdown_now());  // pair 1 lost its sender
  EXPECT_FALSE(rx2.is_shutdown_now());
  tx1.shutdown();  // tx1 is pair 2's now
  EXPECT_TRUE(rx2.is_shutdown_now());
}

// ---------------------------------------------------------------------------------------------
// The stop token

task<void> record_after_signal(shutdown::receiver& rx, std::vector<std::string>& order, bool& token_stopped) {
  co_await rx.is_shutdown();
  order.emplace_back("waiter");
  token_stopped = rx.stop_token().stop_requested();
}

TEST(ShutdownStopToken, CallbacksRunOnTheCallersThreadBeforeTheQueuedWaitersAreWoken) {
  pair_of pr;
  std::vector<std::string> order;
  bool flag_seen_by_callback = false;
  std::thread::id callback_thread;
  const asyncband::stop_callback cb(pr.rx.stop_token(), [&] {
    order.emplace_back("callback");
    flag_seen_by_callback = pr.rx.is_shutdown_now();
    callback_thread = std::this_thread::get_id();
  });
  bool token_seen_by_waiter = false;
  auto waiter = record_after_signal(pr.rx, order, token_seen_by_waiter);
  waiter.handle().resume();  // no scheduler: shutdown() resumes it inline
  ASSERT_TRUE(order.empty());
  pr.tx.shutdown();
  EXPECT_EQ(order, (std::vector<std::string>{"callback", "waiter"}));
  EXPECT_TRUE(flag_seen_by_callback);  // the flag is set before any callback runs
  EXPECT_TRUE(token_seen_by_waiter);   // a woken waiter finds the token stopped
  EXPECT_EQ(callback_thread, std::this_thread::get_id());
  EXPECT_TRUE(waiter.done());
}

task<void> receive_until_cancelled(asyncband::mpsc::unbounded_receiver<int>& ch, asyncband::stop_token token,
                                   std::vector<int>& got, probe& p) {
  ++p.started;
  for (;;) {
    auto r = co_await ch.recv(token);
    if (!r.ok()) {
      p.finish(r.status());
      co_return;
    }
    got.push_back(*r);
  }
}

TEST(ShutdownStopToken, CancelsAChannelReceiveAndLosesNothing) {
  test_scheduler s;
  auto [tx, rx] = shutdown::make_pair();
  auto [ch_tx, ch_rx] = asyncband::mpsc::unbounded<int>();
  std::vector<int> got;
  probe p;
  auto t = receive_until_cancelled(ch_rx, rx.stop_token(), got, p);
  start_on(s, t);
  s.run();
  EXPECT_TRUE(ch_tx.send(1).ok());
  s.run();
  EXPECT_EQ(got, std::vector<int>{1});
  EXPECT_EQ(p.resumed, 0);
  tx.shutdown();
  s.run();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::cancelled);
  EXPECT_TRUE(ch_tx.send(2).ok());  // the channel is untouched: a later value waits there
  auto later = ch_rx.try_recv();
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(*later, 2);
}

TEST(ShutdownStopToken, CancelsEventWaitsOfCoroutinesAndThreadsThroughAWatchersToken) {
  test_scheduler s;
  auto [tx, rx] = shutdown::make_pair();
  const shutdown::watcher w = rx.watch();
  asyncband::manual_reset_event ev;
  probe p;
  auto t = stoppable_waiter(ev, w.stop_token(), p);
  start_on(s, t);
  s.run();
  std::optional<asyncband::result<void>> blocked;
  std::thread thread([&blocked, &ev, token = w.stop_token()] { blocked.emplace(ev.wait_blocking(token)); });
  tx.shutdown();
  thread.join();
  s.run();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::cancelled);
  ASSERT_TRUE(blocked.has_value());
  EXPECT_TRUE(blocked->cancelled());
  EXPECT_FALSE(ev.is_set());
}

TEST(ShutdownStopToken, CancelsStopTokenAwareStandardCode) {
#if ASYNCBAND_STD_STOP_TOKEN
  pair_of pr;
  std::mutex m;
  std::condition_variable_any cv;
  bool woken_by_shutdown = false;
  std::jthread worker([&m, &cv, &woken_by_shutdown, token = pr.rx.stop_token()] {
    std::unique_lock lock(m);
    const bool pred = cv.wait(lock, token, [] { return false; });  // only a stop ends it
    woken_by_shutdown = !pred && token.stop_requested();
  });
  pr.tx.shutdown();
  worker.join();
  EXPECT_TRUE(woken_by_shutdown);
#else
  GTEST_SKIP() << "this standard library has no stop token (asyncband uses its own)";
#endif
}

TEST(ShutdownStopToken, OutlivesEveryHandleAndIsStoppedOnceTheyAreGone) {
  asyncband::stop_token token;
  {
    auto [tx, rx] = shutdown::make_pair();
    token = rx.watch().stop_token();
    EXPECT_FALSE(token.stop_requested());
  }  // the sender goes unsignalled: its destruction signals
  EXPECT_TRUE(token.stop_possible());
  EXPECT_TRUE(token.stop_requested());
}

TEST(ShutdownStopToken, AnIsShutdownWaitGivenItsOwnTokenEndsCancelled) {
  test_scheduler s;
  auto [tx, rx] = shutdown::make_pair();
  probe p;
  auto t = stoppable_signal_waiter(rx, rx.stop_token(), p);
  start_on(s, t);
  s.run();
  tx.shutdown();  // the stop callback runs first and claims it
  s.run();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::cancelled);
}

// ---------------------------------------------------------------------------------------------
// Cancellation, timeouts, races on the test scheduler

TEST(ShutdownCancel, IsShutdownStopResumesOnceCancelledAndShutdownDoesNotResumeItAgain) {
  test_scheduler s;
  auto [tx, rx] = shutdown::make_pair();
  const shutdown::watcher w = rx.watch();
  asyncband::stop_source src;
  probe a;
  probe b;
  probe bystander;
  auto ta = stoppable_signal_waiter(rx, src.get_token(), a);
  auto tb = stoppable_signal_waiter(w, src.get_token(), b);
  auto tc = signal_waiter(rx, bystander);
  for (auto* t : {&ta, &tb, &tc}) start_on(s, *t);
  s.run();
  src.request_stop();
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::cancelled);
  EXPECT_EQ(b.resumed, 1);
  EXPECT_EQ(b.status, wait_status::cancelled);
  EXPECT_EQ(bystander.resumed, 0);
  tx.shutdown();
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(b.resumed, 1);
  EXPECT_EQ(bystander.resumed, 1);
  EXPECT_TRUE(rx.is_shutdown_timeout(0ms).ok());  // the receiver is fine after a cancelled wait
}

TEST(ShutdownCancel, AnAlreadyStoppedTokenEndsTheWaitCancelledAtOnceEvenAfterShutdown) {
  auto [tx, rx] = shutdown::make_pair();
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(rx.is_shutdown_blocking(stopped.get_token()).cancelled());
  EXPECT_TRUE(asyncband::block_on(rx.is_shutdown(stopped.get_token())).cancelled());
  EXPECT_TRUE(tx.wait_done_blocking(stopped.get_token()).cancelled());
  tx.shutdown();
  EXPECT_TRUE(rx.is_shutdown_blocking(stopped.get_token()).cancelled());
  rx.reset();
  EXPECT_TRUE(asyncband::block_on(tx.wait_done(stopped.get_token())).cancelled());
}

// Named race: the stop request arrives after shutdown() claimed the waiter, before it resolved
// it. The claim wins: the wait ends ok, once.
TEST(ShutdownCancel, StopAfterShutdownClaimedTheWaiterEndsOk) {
  test_scheduler s;
  auto [tx, rx] = shutdown::make_pair();
  asyncband::stop_source src;
  probe p;
  auto t = stoppable_signal_waiter(rx, src.get_token(), p);
  start_on(s, t);
  s.run();
  s.at(test_point::claimed_for_wake, [&src] { src.request_stop(); });
  tx.shutdown();
  EXPECT_EQ(s.pending_actions(), 0U);
  s.run();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
}

// Named race: shutdown() runs after the cancellation unlinked the waiter, before it resolved
// it. The cancellation wins: cancelled, once; shutdown() finds nobody to wake.
TEST(ShutdownCancel, ShutdownAfterTheCancellationClaimedTheWaiterEndsCancelled) {
  test_scheduler s;
  pair_of pr;
  asyncband::stop_source src;
  probe p;
  auto t = stoppable_signal_waiter(pr.rx, src.get_token(), p);
  start_on(s, t);
  s.run();
  s.at(test_point::claimed_for_cancel, [&pr] { pr.tx.shutdown(); });
  src.request_stop();
  EXPECT_EQ(s.pending_actions(), 0U);
  s.run();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::cancelled);
  EXPECT_TRUE(pr.rx.is_shutdown_now());
}

// Named race: shutdown() runs while a wait is being published (linked, not yet suspended). It
// claims the new node; the wait continues without suspending, ok, once.
TEST(ShutdownCancel, ShutdownWhileAWaitIsBeingPublished) {
  for (bool stoppable : {false, true}) {
    SCOPED_TRACE(stoppable);
    test_scheduler s;
    pair_of pr;
    asyncband::stop_source never;
    probe p;
    auto t = stoppable ? stoppable_signal_waiter(pr.rx, never.get_token(), p) : signal_waiter(pr.rx, p);
    s.at(test_point::published, [&pr] { pr.tx.shutdown(); });
    start_on(s, t);
    s.run();
    EXPECT_EQ(s.pending_actions(), 0U);
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::ok);
    EXPECT_TRUE(t.done());
  }
}

TEST(ShutdownCancel, WaitDoneStopResumesOnceCancelledAndALaterWaitSucceeds) {
  test_scheduler s;
  auto [tx, rx] = shutdown::make_pair();
  asyncband::stop_source src;
  probe a;
  auto ta = stoppable_done_waiter(tx, src.get_token(), a);
  start_on(s, ta);
  s.run();
  src.request_stop();
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, wait_status::cancelled);
  EXPECT_EQ(tx.receivers(), 1U);
  probe b;
  auto tb = done_waiter(tx, b);
  start_on(s, tb);
  s.run();
  rx.reset();
  s.run();
  EXPECT_EQ(a.resumed, 1);  // not resumed again by the departure
  EXPECT_EQ(b.resumed, 1);
  EXPECT_EQ(b.status, wait_status::ok);
}

// Named race: the stop request arrives after the last receiver's departure claimed the
// wait_done waiter: ok, once.
TEST(ShutdownCancel, StopAfterTheLastDepartureClaimedWaitDoneEndsOk) {
  test_scheduler s;
  auto [tx, rx] = shutdown::make_pair();
  asyncband::stop_source src;
  probe p;
  auto t = stoppable_done_waiter(tx, src.get_token(), p);
  start_on(s, t);
  s.run();
  s.at(test_point::claimed_for_wake, [&src] { src.request_stop(); });
  rx.reset();
  EXPECT_EQ(s.pending_actions(), 0U);
  s.run();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
}

TEST(ShutdownCancel, TimeoutsExpireAndLaterWaitsSucceed) {
  auto [tx, rx] = shutdown::make_pair();
  const shutdown::watcher w = rx.watch();
  EXPECT_TRUE(rx.is_shutdown_timeout(0ms).timed_out());
  EXPECT_TRUE(w.is_shutdown_timeout(1ms).timed_out());
  EXPECT_TRUE(tx.wait_done_timeout(0ms).timed_out());
  EXPECT_TRUE(tx.wait_done_timeout(1ms).timed_out());
  tx.shutdown();
  EXPECT_TRUE(w.is_shutdown_timeout(0ms).ok());
  rx.reset();
  EXPECT_TRUE(tx.wait_done_timeout(0ms).ok());
}

TEST(ShutdownCancel, DestroyingSuspendedWaitersUnlinksThem) {
  test_scheduler s;
  auto [tx, rx] = shutdown::make_pair();
  asyncband::stop_source src;
  probe a;
  probe b;
  probe c;
  probe d;
  auto ta = signal_waiter(rx, a);
  auto tb = stoppable_signal_waiter(rx, src.get_token(), b);
  auto tc = done_waiter(tx, c);
  auto td = signal_waiter(rx, d);
  for (auto* t : {&ta, &tb, &tc, &td}) start_on(s, *t);
  s.run();
  ta = task<void>();  // destroyed while suspended: their nodes leave the queues
  tb = task<void>();
  tc = task<void>();
  src.request_stop();  // must not reach the destroyed node
  tx.shutdown();       // wakes only d
  EXPECT_EQ(s.ready_count(), 1U);
  rx.reset();  // no wait_done waiter left to wake
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(d.resumed, 1);
  EXPECT_EQ(a.resumed + b.resumed + c.resumed, 0);
}

// ---------------------------------------------------------------------------------------------
// Last one out: a waiter resumed inline by the completing call (shutdown(), the sender's
// destruction, the last receiver's departure) destroys at once everything: the sender, every
// receiver and watcher, and with them the shared state. The call must touch none of it afterwards
// (ASan; without it the harness's quarantine sees late writes).

using namespace asyncband_test::lifetime;

struct pair_world {
  std::pair<shutdown::sender, shutdown::receiver> p = shutdown::make_pair();
  shutdown::watcher w = p.second.watch();
  shutdown::receiver extra = p.second;
  asyncband::manual_reset_event ev;
};

struct no_waker : waker_base {};

/// The completing side keeps the sender.
struct sender_waker : waker_base {
  std::unique_ptr<shutdown::sender> tx;
};
const auto take_sender = [](pair_world& w, sender_waker& k) {
  k.tx = std::make_unique<shutdown::sender>(std::move(w.p.first));
};

/// The completing side keeps the last receiver (the World's are reset).
struct receiver_waker : waker_base {
  std::unique_ptr<shutdown::receiver> last;
};
const auto take_last_receiver = [](pair_world& w, receiver_waker& k) {
  k.last = std::make_unique<shutdown::receiver>(w.p.second);
  w.p.second.reset();
  w.extra.reset();
};
/// Only the World's `extra` receiver is left.
const auto extra_is_last = [](pair_world& w, no_waker&) { w.p.second.reset(); };

/// The completing side has a pair of its own to assign from.
struct other_pair_waker : waker_base {
  std::pair<shutdown::sender, shutdown::receiver> other = shutdown::make_pair();
};
const auto extra_is_last_other = [](pair_world& w, other_pair_waker&) { w.p.second.reset(); };

using W = pair_world;
const auto on_receiver = [](W& w, asyncband::stop_token) { return w.p.second.is_shutdown(); };
const auto on_receiver_cancellable = [](W& w, asyncband::stop_token t) { return w.p.second.is_shutdown(t); };
const auto on_watcher = [](W& w, asyncband::stop_token) { return w.w.is_shutdown(); };
const auto on_event_with_token = [](W& w, asyncband::stop_token) {
  return w.ev.wait(w.p.second.stop_token());
};
const auto on_done = [](W& w, asyncband::stop_token) { return w.p.first.wait_done(); };
const auto on_done_cancellable = [](W& w, asyncband::stop_token t) { return w.p.first.wait_done(t); };
const auto shutdown_call = [](W* w, no_waker&) { w->p.first.shutdown(); };

TEST(ShutdownLastOneOut, ShutdownLetsTheReceiversWaiterDestroyEverything) {
  coroutine_row<W, no_waker>("is_shutdown", "ok", no_setup{}, on_receiver, shutdown_call).body();
  coroutine_row<W, no_waker>("is_shutdown_cancellable", "ok", no_setup{}, on_receiver_cancellable,
                             shutdown_call)
      .body();
}

TEST(ShutdownLastOneOut, ShutdownLetsTheWatchersWaiterDestroyEverything) {
  coroutine_row<W, no_waker>("watcher_is_shutdown", "ok", no_setup{}, on_watcher, shutdown_call).body();
}

TEST(ShutdownLastOneOut, AWaitCancelledByTheStopTokenMayDestroyEverythingInsideTheCallback) {
  coroutine_row<W, no_waker>("event_wait_with_the_token", "cancelled", no_setup{}, on_event_with_token,
                             shutdown_call)
      .body();
}

TEST(ShutdownLastOneOut, TheSendersDestructionLetsTheWaiterDestroyEverything) {
  coroutine_row<W, sender_waker>("sender_destroyed", "ok", take_sender, on_receiver, [](W*, sender_waker& k) {
    k.tx.reset();
  }).body();
  coroutine_row<W, sender_waker>("sender_destroyed_token", "cancelled", take_sender, on_event_with_token,
                                 [](W*, sender_waker& k) { k.tx.reset(); })
      .body();
  coroutine_row<W, sender_waker>("sender_shutdown", "ok", take_sender, on_receiver, [](W*, sender_waker& k) {
    k.tx->shutdown();
  }).body();
}

TEST(ShutdownLastOneOut, TheLastReceiversDestructionLetsTheWaitDoneWaiterDestroyEverything) {
  coroutine_row<W, receiver_waker>("last_receiver_destroyed", "ok", take_last_receiver, on_done,
                                   [](W*, receiver_waker& k) { k.last.reset(); })
      .body();
  coroutine_row<W, receiver_waker>("last_receiver_destroyed_cancellable", "ok", take_last_receiver,
                                   on_done_cancellable, [](W*, receiver_waker& k) { k.last.reset(); })
      .body();
  coroutine_row<W, receiver_waker>("last_receiver_reset", "ok", take_last_receiver, on_done,
                                   [](W*, receiver_waker& k) { k.last->reset(); })
      .body();
}

TEST(ShutdownLastOneOut, TheLastReceiverMayBeTheWaitersToDestroy) {
  coroutine_row<W, no_waker>("extra_reset", "ok", extra_is_last, on_done, [](W* w, no_waker&) {
    w->extra.reset();
  }).body();
  coroutine_row<W, other_pair_waker>("extra_move_assigned", "ok", extra_is_last_other, on_done,
                                     [](W* w, other_pair_waker& k) { w->extra = std::move(k.other.second); })
      .body();
  coroutine_row<W, other_pair_waker>("extra_copy_assigned", "ok", extra_is_last_other, on_done,
                                     [](W* w, other_pair_waker& k) { w->extra = k.other.second; })
      .body();
}

TEST(ShutdownLastOneOut, StopRequestsLetTheWaiterDestroyEverything) {
  coroutine_row<W, no_waker>("is_shutdown_stop", "cancelled", no_setup{}, on_receiver_cancellable,
                             request_stop{})
      .body();
  coroutine_row<W, no_waker>("wait_done_stop", "cancelled", no_setup{}, on_done_cancellable, request_stop{})
      .body();
}

TEST(ShutdownLastOneOut, PlainThreadsWokenByShutdownOrTheLastDepartureDestroyEverything) {
  thread_row<W, no_waker>(
      "is_shutdown_blocking", "ok", no_setup{},
      [](W& w, asyncband::stop_token) {
        w.p.second.is_shutdown_blocking();
        return true;
      },
      shutdown_call)
      .body();
  thread_row<W, no_waker>(
      "is_shutdown_timeout", "ok", no_setup{},
      [](W& w, asyncband::stop_token) { return w.w.is_shutdown_timeout(1h); }, shutdown_call)
      .body();
  thread_row<W, no_waker>(
      "wait_done_blocking", "ok", extra_is_last,
      [](W& w, asyncband::stop_token t) { return w.p.first.wait_done_blocking(std::move(t)); },
      [](W* w, no_waker&) { w->extra.reset(); })
      .body();
  thread_row<W, receiver_waker>(
      "wait_done_timeout", "ok", take_last_receiver,
      [](W& w, asyncband::stop_token) { return w.p.first.wait_done_timeout(1h); },
      [](W*, receiver_waker& k) { k.last.reset(); })
      .body();
}

// ---------------------------------------------------------------------------------------------
// Stress: bounded in rounds and time (TSan checks the happens-before).

constexpr auto kStressTime = 600ms;

// Threads copy (all from one shared receiver at once), watch and drop receivers while another
// thread signals and the main thread waits on the same sender for them all to be gone: wait_done
// must complete exactly when every copy is gone and see every thread's work; every signal wait
// must end ok.
TEST(ShutdownStress, ThreadsCopyAndDropReceiversWhileShutdownAndWaitDoneRun) {
  constexpr std::size_t kThreads = 3;
  constexpr int kCopies = 4;
  std::vector<int> work(kThreads, 0);
  int failures = 0;
  const int rounds = repeat_for(2000, kStressTime, [&](int index) {
    const int round = index + 1;
    auto [tx, rx] = shutdown::make_pair();
    auto shared = std::make_unique<const shutdown::receiver>(std::move(rx));
    std::latch copied(kThreads);  // std::latch: the test's own synchronization has no hooks
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < kThreads; ++i) {
      threads.emplace_back([&shared = *shared, &copied, &work, &bad, i, round] {
        shutdown::receiver r = shared;  // concurrent copies of one receiver
        copied.count_down();
        std::vector<shutdown::receiver> copies;
        for (int k = 0; k < kCopies; ++k) copies.push_back(r);
        const shutdown::watcher w = copies.back().watch();
        if (block_for_signal(i % 2 == 0 ? copies[0] : r, round + static_cast<int>(i)) != wait_status::ok) {
          bad.fetch_add(1);
        }
        if (!w.is_shutdown_now() || !w.stop_token().stop_requested()) bad.fetch_add(1);
        work[i] = round;
        copies.clear();
        r.reset();  // the last of this thread's receivers
      });
    }
    copied.wait();
    shared.reset();
    // shutdown() on another thread while this one waits on the same sender (both only read it).
    std::thread signaller([&tx = tx] { tx.shutdown(); });
    if (block_for_done(tx, round) != wait_status::ok) ++failures;
    if (tx.receivers() != 0) ++failures;
    for (const int w : work) {
      if (w != round) ++failures;
    }
    signaller.join();
    for (auto& t : threads) t.join();
    failures += bad.load();
  });
  EXPECT_EQ(failures, 0) << "in " << rounds << " rounds";
}

// Pool workers each receive from their own channel with the pair's stop token until shutdown
// cancels them; a pool task signals while values are still being sent. Nothing is lost: what a
// worker received plus what is left in its channel is everything that was sent.
task<void> pool_worker(thread_pool& pool, shutdown::receiver rx, asyncband::mpsc::unbounded_receiver<int>& ch,
                       int& received, int& failures) {
  co_await pool.schedule();
  for (;;) {
    auto r = co_await ch.recv(rx.stop_token());
    if (r.cancelled()) break;
    if (!r.ok()) {
      ++failures;
      break;
    }
    ++received;
  }
  if (!rx.is_shutdown_now()) ++failures;
}  // the frame, and the receiver in it, goes: the worker is done

task<void> pool_shutdown(thread_pool& pool, shutdown::sender& tx) {
  co_await pool.schedule();
  tx.shutdown();
}

TEST(ShutdownStress, PoolWorkersAreCancelledByTheStopTokenAndWaitDoneSeesThemGone) {
  constexpr std::size_t kWorkers = 3;
  constexpr int kValues = 20;
  thread_pool pool(2);
  int failures = 0;
  const int rounds = repeat_for(1000, kStressTime, [&](int /*round*/) {
    auto [tx, rx] = shutdown::make_pair();
    std::vector<std::pair<asyncband::mpsc::unbounded_sender<int>, asyncband::mpsc::unbounded_receiver<int>>>
        chans;
    std::vector<int> received(kWorkers, 0);
    std::vector<int> worker_failures(kWorkers, 0);
    for (std::size_t i = 0; i < kWorkers; ++i) chans.push_back(asyncband::mpsc::unbounded<int>());
    for (std::size_t i = 0; i < kWorkers; ++i) {
      asyncband::runtime::spawn(pool.ref(),
                                pool_worker(pool, rx, chans[i].second, received[i], worker_failures[i]));
    }
    rx.reset();
    asyncband::runtime::spawn(pool.ref(), pool_shutdown(pool, tx));
    for (int v = 0; v < kValues; ++v) {
      for (auto& ch : chans) {
        if (!ch.first.send(v).ok()) ++failures;
      }
    }
    asyncband::block_on(tx.wait_done());
    if (!tx.is_shutdown_now()) ++failures;
    for (std::size_t i = 0; i < kWorkers; ++i) {
      failures += worker_failures[i];
      int left = 0;
      while (chans[i].second.try_recv().ok()) ++left;
      if (received[i] + left != kValues) ++failures;
    }
  });
  EXPECT_EQ(failures, 0) << "in " << rounds << " rounds";
}

}  // namespace
