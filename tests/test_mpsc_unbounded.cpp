// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::mpsc::unbounded: send, try_recv and every receive form (coroutine inline,
// on the test scheduler and on a pool, blocking, blocking with a stop token, timeout, block_on);
// FIFO per producer with several producers; len(); the handles (copies, moves, moved from);
// close(); the last sender gone; the receiver gone (queued values destroyed exactly once, later
// sends hand the value back); move-only payloads; a payload whose move constructor throws;
// cancel-safety of recv; deterministic races at the waiter core's test points and inside the
// payload's move constructor (the window of a send between its first check of `closed` and its
// publication); the same races on real threads; "last one out"; and a bounded soak.
#include "asyncband/mpsc/unbounded.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/result.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/stop_token.hpp"
#include "support/fuse_payload.hpp"
#include "support/last_one_out.hpp"
#include "support/lifetime.hpp"
#include "support/probe.hpp"
#include "support/recv_many.hpp"
#include "support/second_receive.hpp"
#include "support/stress.hpp"
#include "support/thread_hook.hpp"

namespace {

using namespace asyncband_test;
using asyncband::block_on;
using asyncband::recv_status;
using asyncband::result;
using asyncband::send_status;
using asyncband::mpsc::unbounded;
using asyncband::mpsc::unbounded_receiver;
using asyncband::mpsc::unbounded_sender;
using asyncband::runtime::thread_pool;

// ---------------------------------------------------------------------------------------------
// Helpers

/// Both halves of a fresh channel, each in an optional so that a test can drop either.
template <class T = int>
struct halves {
  std::optional<unbounded_sender<T>> tx;
  std::optional<unbounded_receiver<T>> rx;

  halves() {
    auto pair = unbounded<T>();
    tx.emplace(std::move(pair.first));
    rx.emplace(std::move(pair.second));
  }
};

/// Counts, per value id, the destructions of the object that owned the value.
class ledger {
 public:
  explicit ledger(std::size_t ids) : counts_(ids) {
    for (auto& c : counts_) c.store(0);
  }
  void destroyed(int id) noexcept { counts_[index(id)].fetch_add(1, std::memory_order_relaxed); }
  [[nodiscard]] int destructions(int id) const { return counts_[index(id)].load(); }
  [[nodiscard]] std::size_t size() const noexcept { return counts_.size(); }

 private:
  [[nodiscard]] std::size_t index(int id) const noexcept {
    const auto i = static_cast<std::size_t>(id);
    if (id < 0 || i >= counts_.size()) std::abort();  // a garbled value
    return i;
  }
  std::vector<std::atomic<int>> counts_;
};

/// Thrown by a move hook.
struct payload_error : std::runtime_error {
  payload_error() : std::runtime_error("payload move constructor failed") {}
};

/// Runs once, at the start of the next move construction of an `item` on this thread (the
/// channel's only calls of user code inside send: the move into the node, and a hand-back).
thread_local std::function<void()> next_move_hook;

/// A move-only payload: an id, and the ledger that counts its destruction (none: untracked).
/// The move constructor runs this thread's move hook first (it may throw: the source then still
/// owns the value) and then takes the value over.
struct item {
  int id;
  ledger* book;

  explicit item(int i, ledger* b = nullptr) noexcept : id(i), book(b) {}
  item(item&& other) : id(other.id), book(other.book) {
    if (next_move_hook) std::exchange(next_move_hook, nullptr)();
    other.book = nullptr;
  }
  item(const item&) = delete;
  item& operator=(const item&) = delete;
  item& operator=(item&&) = delete;
  ~item() {
    if (book != nullptr) book->destroyed(id);
  }
};

constexpr bool cancellable = true;
constexpr bool plain = false;

/// One receive by a coroutine (see probe): the value it got, and the stop source of a
/// cancellable receive.
template <class T>
struct reception : probe {
  asyncband::stop_source stop;
  std::optional<T> value;

  void keep(result<T>& r) {
    if (r.ok()) value.emplace(std::move(*r));
    finish(r.status());
  }
};

/// Receives once (with `r.stop`'s token when `can_cancel`) into `r`.
template <class T>
task<void> receive_into(unbounded_receiver<T>& rx, reception<T>& r, bool can_cancel) {
  ++r.started;
  if (can_cancel) {
    auto res = co_await rx.recv(r.stop.get_token());
    r.keep(res);
  } else {
    auto res = co_await rx.recv();
    r.keep(res);
  }
}

/// try_recv that must yield `expected`.
template <class T>
void expect_try_recv(unbounded_receiver<T>& rx, int expected) {
  auto r = rx.try_recv();
  ASSERT_TRUE(r.ok()) << "try_recv status " << static_cast<int>(r.status()) << ", expected " << expected;
  if constexpr (std::is_same_v<T, item>) {
    EXPECT_EQ(r->id, expected);
  } else {
    EXPECT_EQ(*r, expected);
  }
}

/// The coroutine of `r` started and is suspended in its receive.
template <class T>
void expect_asleep(const reception<T>& r) {
  EXPECT_EQ(r.started, 1);
  EXPECT_EQ(r.resumed, 0);
}

// ---------------------------------------------------------------------------------------------
// Sending and receiving

TEST(Unbounded, TryRecvTakesValuesInOrderAndReportsEmptyWhenNothingIsQueued) {
  halves h;
  EXPECT_TRUE(h.rx->try_recv().empty());
  EXPECT_TRUE(h.rx->empty());
  for (int i = 1; i <= 3; ++i) EXPECT_TRUE(h.tx->send(i).ok());
  EXPECT_EQ(h.rx->len(), 3U);
  EXPECT_FALSE(h.rx->empty());
  for (int i = 1; i <= 3; ++i) expect_try_recv(*h.rx, i);
  const auto none = h.rx->try_recv();
  EXPECT_TRUE(none.empty());
  EXPECT_FALSE(none.closed());
  EXPECT_EQ(h.rx->len(), 0U);
  EXPECT_FALSE(h.tx->is_closed());
}

TEST(Unbounded, LenCountsValuesSentAndNotYetReceived) {
  halves h;
  auto copy = *h.tx;
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE((i % 2 == 0 ? *h.tx : copy).send(i).ok());
    EXPECT_EQ(h.rx->len(), static_cast<std::size_t>(i + 1));
  }
  EXPECT_EQ(*h.rx->recv_blocking(), 0);
  EXPECT_EQ(h.rx->len(), 4U);
  h.rx->close();  // accepted values still count
  EXPECT_EQ(h.rx->len(), 4U);
  EXPECT_TRUE(h.tx->send(9).closed());
  EXPECT_EQ(h.rx->len(), 4U);  // a refused send does not count
  for (int i = 1; i < 5; ++i) expect_try_recv(*h.rx, i);
  EXPECT_EQ(h.rx->len(), 0U);
  EXPECT_TRUE(h.rx->empty());
}

TEST(Unbounded, RecvCompletesWithoutSuspendingWhenAValueIsQueued) {
  for (const bool can_cancel : {plain, cancellable}) {
    SCOPED_TRACE(can_cancel);
    halves h;
    test_scheduler s;
    reception<int> r;
    EXPECT_TRUE(h.tx->send(7).ok());
    s.spawn(receive_into(*h.rx, r, can_cancel));
    EXPECT_EQ(s.run(), 1U);  // never suspended
    EXPECT_EQ(r.resumed, 1);
    EXPECT_EQ(r.status, wait_status::ok);
    EXPECT_EQ(r.value, 7);
    EXPECT_EQ(h.rx->len(), 0U);
  }
}

TEST(Unbounded, RecvSuspendsAndASendPostsTheReceiverToItsScheduler) {
  for (const bool can_cancel : {plain, cancellable}) {
    SCOPED_TRACE(can_cancel);
    halves h;
    test_scheduler s;
    reception<int> r;
    s.spawn(receive_into(*h.rx, r, can_cancel));
    EXPECT_EQ(s.run(), 1U);
    expect_asleep(r);
    EXPECT_TRUE(h.tx->send(5).ok());
    EXPECT_EQ(s.ready_count(), 1U);  // posted, not resumed inside the send
    EXPECT_EQ(r.resumed, 0);
    EXPECT_TRUE(h.tx->send(6).ok());  // the receiver is awake: nothing more to post
    EXPECT_EQ(s.ready_count(), 1U);
    s.run();
    EXPECT_EQ(r.resumed, 1);
    EXPECT_EQ(r.status, wait_status::ok);
    EXPECT_EQ(r.value, 5);
    expect_try_recv(*h.rx, 6);
  }
}

TEST(Unbounded, ACoroutineWithoutASchedulerIsResumedInsideTheSend) {
  halves h;
  std::optional<int> got;
  bool done = false;
  [](unbounded_receiver<int>& rx, std::optional<int>& out, bool& finished) -> bare_coroutine {
    auto r = co_await rx.recv();
    if (r.ok()) out = *r;
    finished = true;
  }(*h.rx, got, done);
  EXPECT_FALSE(done);
  EXPECT_TRUE(h.tx->send(4).ok());
  EXPECT_TRUE(done);
  EXPECT_EQ(got, 4);
}

/// Receives on the pool until the channel ends; records the values, how it ended, and whether
/// every wake-up resumed it on a worker.
task<void> drain_on_pool(thread_pool& pool, unbounded_receiver<int>& rx, std::vector<int>& got,
                         std::optional<wait_status>& end, bool& always_on_pool) {
  co_await pool.schedule();
  for (;;) {
    auto r = co_await rx.recv();
    if (!pool.on_worker_thread()) always_on_pool = false;
    if (!r.ok()) {
      end = r.status();
      co_return;
    }
    got.push_back(*r);
  }
}

TEST(Unbounded, ARecvOnThePoolResumesOnAWorkerAndEndsClosedWhenTheSenderGoes) {
  constexpr int kValues = 2000;
  thread_pool pool(2);
  halves h;
  std::vector<int> got;
  std::optional<wait_status> end;
  bool always_on_pool = true;
  std::thread producer([tx = std::move(*h.tx)]() mutable {
    for (int i = 0; i < kValues; ++i) {
      if (!tx.send(i).ok()) std::abort();
      if (i % 100 == 0) std::this_thread::yield();
    }
  });  // the sender goes with the thread's lambda
  h.tx.reset();
  block_on(drain_on_pool(pool, *h.rx, got, end, always_on_pool));
  producer.join();
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kValues));
  for (int i = 0; i < kValues; ++i) EXPECT_EQ(got[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(end, wait_status::closed);
  EXPECT_TRUE(always_on_pool);
}

TEST(UnboundedBlocking, RecvBlockingWaitsForASendFromAnotherThread) {
  halves h;
  std::thread sender([&h] {
    std::this_thread::sleep_for(5ms);
    EXPECT_TRUE(h.tx->send(11).ok());
  });
  const auto r = h.rx->recv_blocking();
  sender.join();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 11);
}

TEST(UnboundedBlocking, RecvBlockingWithAStopTokenReceivesOrIsCancelledAndTakesNothing) {
  halves h;
  asyncband::stop_source never;
  EXPECT_TRUE(h.tx->send(1).ok());
  EXPECT_EQ(*h.rx->recv_blocking(never.get_token()), 1);

  std::thread sender([&h] { EXPECT_TRUE(h.tx->send(2).ok()); });
  const auto second = h.rx->recv_blocking(never.get_token());
  sender.join();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, 2);

  asyncband::stop_source stop;
  std::optional<wait_status> status;
  std::thread waiter([&] { status = h.rx->recv_blocking(stop.get_token()).status(); });
  std::this_thread::sleep_for(5ms);
  stop.request_stop();  // before or after it sleeps: cancelled
  waiter.join();
  EXPECT_EQ(status, wait_status::cancelled);
  EXPECT_TRUE(h.rx->try_recv().empty());
  EXPECT_TRUE(h.tx->send(3).ok());
  expect_try_recv(*h.rx, 3);
}

TEST(UnboundedBlocking, RecvTimeoutTimesOutTakesNothingAndReceivesOnceAValueComes) {
  halves h;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(h.rx->recv_timeout(20ms).timed_out());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 20ms);
  EXPECT_TRUE(h.rx->recv_timeout(0ms).timed_out());

  EXPECT_TRUE(h.tx->send(1).ok());
  EXPECT_EQ(*h.rx->recv_timeout(0ms), 1);  // a value waiting: no wait at all

  std::thread sender([&h] {
    std::this_thread::sleep_for(5ms);
    EXPECT_TRUE(h.tx->send(2).ok());
  });
  const auto r = h.rx->recv_timeout(1h);
  sender.join();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2);

  h.rx->close();
  EXPECT_TRUE(h.rx->recv_timeout(1h).closed());
  EXPECT_TRUE(h.rx->recv_timeout(std::chrono::nanoseconds::max()).closed());
}

TEST(UnboundedBlocking, BlockOnRecvFromAnotherThread) {
  halves h;
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(h.tx->send(1).ok());
  EXPECT_TRUE(block_on(h.rx->recv(stopped.get_token())).cancelled());  // the value stays
  EXPECT_EQ(h.rx->len(), 1U);
  std::optional<int> first;
  std::optional<int> second;
  std::optional<wait_status> third;
  std::thread receiver([&] {
    first = *block_on(h.rx->recv());
    second = *block_on(h.rx->recv(asyncband::stop_token{}));
    third = block_on(h.rx->recv()).status();
  });
  EXPECT_TRUE(h.tx->send(2).ok());
  h.tx.reset();  // the last sender: the third receive ends closed
  receiver.join();
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 2);
  EXPECT_EQ(third, wait_status::closed);
}

TEST(Unbounded, MoveOnlyPayloadsGoThroughAndComeBack) {
  halves<std::unique_ptr<int>> h;
  EXPECT_TRUE(h.tx->send(std::make_unique<int>(1)).ok());
  EXPECT_TRUE(h.tx->send(std::make_unique<int>(2)).ok());
  auto first = h.rx->try_recv();
  ASSERT_TRUE(first.ok());
  ASSERT_NE(*first, nullptr);
  EXPECT_EQ(**first, 1);
  auto second = h.rx->recv_blocking();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(**second, 2);
  h.rx->close();
  auto refused = h.tx->send(std::make_unique<int>(3));
  ASSERT_TRUE(refused.closed());
  ASSERT_NE(refused.value(), nullptr);
  EXPECT_EQ(*refused.value(), 3);
  std::unique_ptr<int> back = std::move(refused).value();
  EXPECT_EQ(*back, 3);
}

// ---------------------------------------------------------------------------------------------
// Order: values of one producer arrive in the order sent, whatever the other producers do.

/// Sends `n` values p * n + seq, seq = 0, 1, ... from the pool, rescheduling now and then.
task<void> ordered_producer(thread_pool& pool, unbounded_sender<int> tx, int p, int n) {
  co_await pool.schedule();
  for (int seq = 0; seq < n; ++seq) {
    if (!tx.send(p * n + seq).ok()) std::abort();
    if (seq % 50 == 0) co_await pool.schedule();
  }
  const unbounded_sender<int> gone = std::move(tx);
}

TEST(UnboundedOrder, EachProducersValuesArriveInTheOrderSent) {
  constexpr int kThreads = 2;
  constexpr int kTasks = 2;
  constexpr int kEach = 5000;
  halves h;
  std::vector<int> next(kThreads + kTasks, 0);
  int received = 0;
  {
    thread_pool pool(2);
    std::vector<std::thread> threads;
    for (int p = 0; p < kThreads; ++p) {
      threads.emplace_back(
          [p](unbounded_sender<int> tx) {
            for (int seq = 0; seq < kEach; ++seq) {
              if (!tx.send(p * kEach + seq).ok()) std::abort();
            }
          },
          *h.tx);
    }
    for (int p = kThreads; p < kThreads + kTasks; ++p)
      asyncband::runtime::spawn(pool.ref(), ordered_producer(pool, *h.tx, p, kEach));
    h.tx.reset();
    for (;;) {
      auto r = h.rx->recv_blocking();
      if (!r.ok()) {
        EXPECT_TRUE(r.closed());
        break;
      }
      const int p = *r / kEach;
      const int seq = *r % kEach;
      ASSERT_GE(p, 0);
      ASSERT_LT(p, kThreads + kTasks);
      ASSERT_EQ(seq, next[static_cast<std::size_t>(p)]) << "producer " << p;
      ++next[static_cast<std::size_t>(p)];
      ++received;
    }
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(received, (kThreads + kTasks) * kEach);
  for (const int n : next) EXPECT_EQ(n, kEach);
}

// ---------------------------------------------------------------------------------------------
// The handles

TEST(UnboundedHandles, EverySenderCopyIsAProducerAndAssignmentsMoveBetweenChannels) {
  halves a;
  halves b;
  unbounded_sender<int> copy = *a.tx;
  unbounded_sender<int>& same = copy;
  copy = same;  // self-assignment keeps it a producer
  unbounded_sender<int> moved = std::move(copy);
  unbounded_sender<int> switched = *b.tx;
  switched = moved;  // now a producer of a, not of b
  EXPECT_TRUE(moved.send(1).ok());
  EXPECT_TRUE(switched.send(2).ok());
  b.tx.reset();  // b's last producer
  EXPECT_TRUE(b.rx->try_recv().closed());
  a.tx.reset();
  EXPECT_TRUE(a.rx->try_recv().ok());
  EXPECT_TRUE(a.rx->try_recv().ok());
  EXPECT_TRUE(a.rx->try_recv().empty());  // `moved` and `switched` remain
  moved = std::move(switched);            // one producer left
  EXPECT_TRUE(a.rx->try_recv().empty());
  EXPECT_TRUE(moved.send(3).ok());
  moved = unbounded_sender<int>(moved);  // a copy of itself, assigned: still one producer
  expect_try_recv(*a.rx, 3);
  { const unbounded_sender<int> gone = std::move(moved); }
  EXPECT_TRUE(a.rx->try_recv().closed());
}

TEST(UnboundedHandles, MovedFromHandlesRefuseToWorkAndLeaveTheChannelAlone) {
  halves h;
  unbounded_sender<int> tx = std::move(*h.tx);
  unbounded_receiver<int> rx = std::move(*h.rx);
  // NOLINTBEGIN(bugprone-use-after-move): what moved-from handles do is the point
  EXPECT_TRUE(h.tx->is_closed());
  EXPECT_THROW((void)h.tx->send(1), std::logic_error);
  EXPECT_THROW((void)h.rx->try_recv(), std::logic_error);
  EXPECT_THROW((void)h.rx->recv_blocking(), std::logic_error);
  EXPECT_THROW((void)h.rx->recv_timeout(1ms), std::logic_error);
  EXPECT_THROW((void)h.rx->recv(), std::logic_error);
  EXPECT_EQ(h.rx->len(), 0U);
  EXPECT_TRUE(h.rx->empty());
  h.rx->close();  // no effect
  // NOLINTEND(bugprone-use-after-move)
  EXPECT_FALSE(tx.is_closed());
  h.tx.reset();
  h.rx.reset();
  EXPECT_FALSE(tx.is_closed());
  EXPECT_TRUE(tx.send(1).ok());
  expect_try_recv(rx, 1);
  unbounded_receiver<int>& same = rx;
  rx = std::move(same);  // self-move keeps the receiver
  EXPECT_TRUE(tx.send(2).ok());
  expect_try_recv(rx, 2);
}

/// `s`, with the compiler made to forget what it knows of it (g++ would otherwise see the null
/// dereference below at compile time and fail the build with -Wstringop-overflow).
const unbounded_sender<int>& opaque(const unbounded_sender<int>& s) {
  const auto* p = &s;
  asm volatile("" : "+r"(p) : : "memory");
  return *p;
}

// Regression: unbounded_sender's copy constructor called channel_core::add_producer without
// checking for a moved-from sender, so copying one (or copy-assigning from one, which copies
// first) dereferenced a null state (SIGSEGV), although every other member treats a moved-from
// sender as a valid handle. The copy is now another moved-from sender (mpsc::sender had the same
// fault and fix). The scenario runs in a child process.
void copy_a_moved_from_sender() {
  halves h;
  const unbounded_sender<int> live = std::move(*h.tx);
  const unbounded_sender<int> copy(opaque(*h.tx));  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(copy.is_closed());
  unbounded_sender<int> assigned = live;
  assigned = opaque(*h.tx);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(assigned.is_closed());
  EXPECT_THROW((void)assigned.send(1), std::logic_error);
}

TEST(UnboundedHandlesDeathTest, CopyingAMovedFromSenderGivesAMovedFromSender) {
  EXPECT_EXIT(
      {
        copy_a_moved_from_sender();
        std::fflush(nullptr);
        std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------------------------
// close()

TEST(UnboundedClose, LaterSendsHandTheValueBackAndAcceptedValuesAreStillReceived) {
  halves h;
  auto copy = *h.tx;
  EXPECT_TRUE(h.tx->send(1).ok());
  EXPECT_TRUE(copy.send(2).ok());
  h.rx->close();
  EXPECT_TRUE(h.tx->is_closed());
  EXPECT_TRUE(copy.is_closed());
  auto refused = h.tx->send(3);
  EXPECT_TRUE(refused.closed());
  EXPECT_EQ(refused.status(), send_status::closed);
  EXPECT_EQ(refused.value(), 3);
  EXPECT_TRUE(copy.send(4).closed());
  EXPECT_EQ(h.rx->len(), 2U);
  EXPECT_EQ(*h.rx->recv_blocking(), 1);
  expect_try_recv(*h.rx, 2);
  EXPECT_TRUE(h.rx->recv_blocking().closed());
  EXPECT_TRUE(block_on(h.rx->recv()).closed());
  const auto t = h.rx->try_recv();
  EXPECT_TRUE(t.closed());
  EXPECT_EQ(t.status(), recv_status::closed);
  h.rx->close();  // again: nothing changes
  EXPECT_TRUE(h.rx->try_recv().closed());
  EXPECT_EQ(h.rx->len(), 0U);
}

TEST(UnboundedClose, ClosingWakesASleepingReceiverWithClosed) {
  for (const bool can_cancel : {plain, cancellable}) {
    SCOPED_TRACE(can_cancel);
    halves h;
    test_scheduler s;
    reception<int> r;
    s.spawn(receive_into(*h.rx, r, can_cancel));
    s.run();
    expect_asleep(r);
    h.rx->close();
    EXPECT_EQ(s.ready_count(), 1U);
    s.run();
    EXPECT_EQ(r.resumed, 1);
    EXPECT_EQ(r.status, wait_status::closed);
    EXPECT_FALSE(r.value.has_value());
  }
  halves h;
  std::optional<wait_status> status;
  std::thread waiter([&] { status = h.rx->recv_blocking().status(); });
  std::this_thread::sleep_for(5ms);  // most likely asleep by now; closed either way
  h.rx->close();
  waiter.join();
  EXPECT_EQ(status, wait_status::closed);
}

// ---------------------------------------------------------------------------------------------
// The senders gone

TEST(UnboundedDisconnect, TheReceiverSeesClosedOnlyOnceEveryCopyIsGoneAndAllIsDrained) {
  halves h;
  std::optional<unbounded_sender<int>> copy(*h.tx);
  EXPECT_TRUE(h.tx->send(1).ok());
  EXPECT_TRUE(copy->send(2).ok());
  h.tx.reset();
  EXPECT_TRUE(copy->send(3).ok());
  EXPECT_FALSE(copy->is_closed());
  expect_try_recv(*h.rx, 1);
  copy.reset();
  EXPECT_EQ(h.rx->len(), 2U);
  EXPECT_EQ(*h.rx->recv_blocking(), 2);
  EXPECT_EQ(*block_on(h.rx->recv()), 3);
  EXPECT_TRUE(h.rx->try_recv().closed());
  EXPECT_TRUE(h.rx->recv_blocking().closed());
  EXPECT_TRUE(h.rx->recv_timeout(1h).closed());
  asyncband::stop_source never;
  EXPECT_TRUE(h.rx->recv_blocking(never.get_token()).closed());
}

TEST(UnboundedDisconnect, ASleepingReceiverWakesClosedWhenTheLastSenderGoes) {
  for (const bool can_cancel : {plain, cancellable}) {
    SCOPED_TRACE(can_cancel);
    halves h;
    std::optional<unbounded_sender<int>> copy(*h.tx);
    test_scheduler s;
    reception<int> r;
    s.spawn(receive_into(*h.rx, r, can_cancel));
    s.run();
    expect_asleep(r);
    h.tx.reset();
    EXPECT_EQ(s.ready_count(), 0U);  // a copy remains
    copy.reset();
    EXPECT_EQ(s.ready_count(), 1U);
    s.run();
    EXPECT_EQ(r.resumed, 1);
    EXPECT_EQ(r.status, wait_status::closed);
  }
  halves h;
  std::optional<wait_status> status;
  std::thread waiter([&] { status = h.rx->recv_blocking().status(); });
  std::this_thread::sleep_for(5ms);
  h.tx.reset();
  waiter.join();
  EXPECT_EQ(status, wait_status::closed);
}

TEST(UnboundedDisconnect, AssigningOverTheLastSenderDisconnectsItsChannel) {
  halves a;
  halves b;
  test_scheduler s;
  reception<int> r;
  s.spawn(receive_into(*a.rx, r, plain));
  s.run();
  *a.tx = *b.tx;  // a's last producer goes
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(r.status, wait_status::closed);
  EXPECT_TRUE(a.tx->send(5).ok());  // into b
  expect_try_recv(*b.rx, 5);
}

// ---------------------------------------------------------------------------------------------
// The receiver gone

TEST(UnboundedReceiverGone, QueuedValuesAreDestroyedOnceAndLaterSendsHandTheValueBack) {
  ledger book(6);
  halves<item> h;
  std::optional<unbounded_sender<item>> copy(*h.tx);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(h.tx->send(item(i, &book)).ok());
  expect_try_recv(*h.rx, 0);
  EXPECT_EQ(book.destructions(0), 1);
  EXPECT_EQ(book.destructions(1), 0);
  h.rx.reset();
  EXPECT_EQ(book.destructions(1), 1);
  EXPECT_EQ(book.destructions(2), 1);
  EXPECT_TRUE(h.tx->is_closed());
  EXPECT_TRUE(copy->is_closed());
  {
    auto refused = h.tx->send(item(3, &book));
    ASSERT_TRUE(refused.closed());
    EXPECT_EQ(refused.value().id, 3);
    EXPECT_EQ(refused.value().book, &book);  // it owns the value
    EXPECT_EQ(book.destructions(3), 0);
    auto also = copy->send(item(4, &book));
    ASSERT_TRUE(also.closed());
    EXPECT_EQ(also.value().id, 4);
  }
  EXPECT_EQ(book.destructions(3), 1);
  EXPECT_EQ(book.destructions(4), 1);
  h.tx.reset();
  copy.reset();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(book.destructions(i), 1) << "value " << i;
  EXPECT_EQ(book.destructions(5), 0);
}

TEST(UnboundedReceiverGone, ValuesLeftAfterTheSendersWentAreDestroyedOnceWithTheReceiver) {
  ledger book(4);
  {
    halves<item> h;
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(h.tx->send(item(i, &book)).ok());
    h.tx.reset();
    expect_try_recv(*h.rx, 0);
    unbounded_receiver<item> moved = std::move(*h.rx);
    h.rx.reset();  // moved from: nothing happens
    for (int i = 1; i < 4; ++i) EXPECT_EQ(book.destructions(i), 0);
    expect_try_recv(moved, 1);
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(book.destructions(i), 1) << "value " << i;
}

TEST(UnboundedReceiverGone, MovingAReceiverOverAnotherDisconnectsTheOldChannel) {
  ledger book(2);
  halves<item> a;
  halves<item> b;
  EXPECT_TRUE(a.tx->send(item(0, &book)).ok());
  EXPECT_TRUE(b.tx->send(item(1, &book)).ok());
  *a.rx = std::move(*b.rx);  // a's receiver goes: its value is destroyed
  EXPECT_EQ(book.destructions(0), 1);
  EXPECT_TRUE(a.tx->is_closed());
  EXPECT_TRUE(a.tx->send(item(-1)).closed());
  EXPECT_FALSE(b.tx->is_closed());
  expect_try_recv(*a.rx, 1);
}

// ---------------------------------------------------------------------------------------------
// A payload whose move constructor throws

TEST(UnboundedThrowingPayload, TheSendPropagatesTheExceptionAndNothingIsSent) {
  ledger book(3);
  halves<item> h;
  test_scheduler s;
  reception<item> r;
  s.spawn(receive_into(*h.rx, r, plain));
  s.run();
  next_move_hook = [] { throw payload_error(); };
  EXPECT_THROW((void)h.tx->send(item(0, &book)), payload_error);
  EXPECT_FALSE(next_move_hook);
  EXPECT_EQ(book.destructions(0), 1);  // the argument, still owning it, on unwinding
  EXPECT_EQ(h.rx->len(), 0U);
  EXPECT_EQ(s.ready_count(), 0U);  // the receiver was not woken
  expect_asleep(r);
  EXPECT_TRUE(h.tx->send(item(1, &book)).ok());
  s.run();
  ASSERT_TRUE(r.value.has_value());
  EXPECT_EQ(r.value->id, 1);
  EXPECT_TRUE(h.rx->try_recv().empty());

  EXPECT_TRUE(h.tx->send(item(2, &book)).ok());
  next_move_hook = [] { throw payload_error(); };
  EXPECT_THROW((void)h.tx->send(item(-1)), payload_error);
  EXPECT_EQ(h.rx->len(), 1U);
  expect_try_recv(*h.rx, 2);
  EXPECT_TRUE(h.rx->try_recv().empty());
  r.value.reset();
  h.rx.reset();
  h.tx.reset();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(book.destructions(i), 1) << "value " << i;
}

TEST(UnboundedThrowingPayload, AThrowOnAClosedChannelPropagatesAndChangesNothing) {
  ledger book(1);
  halves<item> h;
  h.rx->close();
  next_move_hook = [] { throw payload_error(); };
  EXPECT_THROW((void)h.tx->send(item(0, &book)), payload_error);
  EXPECT_EQ(book.destructions(0), 1);
  EXPECT_EQ(h.rx->len(), 0U);
  EXPECT_TRUE(h.rx->try_recv().closed());
}

// Regression: in unbounded_state::send, a send that has counted itself in `pending_` and then
// finds the channel closed moves its value back out of the node to hand it back. When that move
// threw, the exception skipped destroying the value, freeing the node and
// unbounded_state::withdraw: both leaked and `pending_` stayed one too high, so len() was 1 on an
// empty channel, try_recv() reported empty, and a recv on the closed channel never ended while a
// sender lived. Scenario: the receiver closes while the send constructs its node, and the move
// that hands the value back throws.
TEST(UnboundedThrowingPayload, AHandBackThatThrowsAfterACloseInFlightLeavesNothingCounted) {
  ledger book(1);
  halves<item> h;
  next_move_hook = [&h] {  // the send constructs its node: the receiver closes meanwhile
    h.rx->close();
    next_move_hook = [] { throw payload_error(); };  // and moving the value back out throws
  };
  EXPECT_THROW((void)h.tx->send(item(0, &book)), payload_error);
  next_move_hook = nullptr;
  EXPECT_EQ(h.rx->len(), 0U);
  EXPECT_TRUE(h.rx->try_recv().closed());
  EXPECT_TRUE(h.rx->recv_timeout(50ms).closed());
  h.tx.reset();
  h.rx.reset();
  EXPECT_EQ(book.destructions(0), 1) << "the value must be destroyed exactly once";
}

// ---------------------------------------------------------------------------------------------
// Cancel-safety: a cancelled or destroyed receive takes nothing.

TEST(UnboundedCancel, AnAlreadyStoppedTokenCancelsAtOnceAndLeavesQueuedValues) {
  halves h;
  EXPECT_TRUE(h.tx->send(1).ok());
  test_scheduler s;
  reception<int> r;
  r.stop.request_stop();
  s.spawn(receive_into(*h.rx, r, cancellable));
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(r.status, wait_status::cancelled);
  EXPECT_FALSE(r.value.has_value());
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(h.rx->recv_blocking(stopped.get_token()).cancelled());
  EXPECT_EQ(h.rx->len(), 1U);
  expect_try_recv(*h.rx, 1);
}

TEST(UnboundedCancel, ACancelledRecvTakesNothingAndTheNextRecvGetsTheValue) {
  halves h;
  test_scheduler s;
  reception<int> cancelled;
  s.spawn(receive_into(*h.rx, cancelled, cancellable));
  s.run();
  cancelled.stop.request_stop();
  EXPECT_EQ(s.ready_count(), 1U);  // posted to its scheduler
  s.run();
  EXPECT_EQ(cancelled.resumed, 1);
  EXPECT_EQ(cancelled.status, wait_status::cancelled);
  EXPECT_TRUE(h.tx->send(5).ok());  // must not touch the unlinked receive
  EXPECT_EQ(s.ready_count(), 0U);
  EXPECT_EQ(h.rx->len(), 1U);
  reception<int> next;
  s.spawn(receive_into(*h.rx, next, cancellable));
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(next.value, 5);
  EXPECT_EQ(cancelled.resumed, 1);
}

TEST(UnboundedCancel, ARecvDestroyedWhileSuspendedTakesNothing) {
  for (const bool can_cancel : {plain, cancellable}) {
    SCOPED_TRACE(can_cancel);
    halves h;
    test_scheduler s;
    reception<int> doomed;
    task<void> t = receive_into(*h.rx, doomed, can_cancel);
    start_on(s, t);
    s.run();
    expect_asleep(doomed);
    t = {};                      // destroys the suspended frame: its node leaves the queue
    doomed.stop.request_stop();  // its stop callback went with it
    EXPECT_TRUE(h.tx->send(5).ok());
    EXPECT_EQ(s.ready_count(), 0U);
    EXPECT_EQ(doomed.resumed, 0);
    reception<int> next;
    s.spawn(receive_into(*h.rx, next, plain));
    s.run();
    EXPECT_EQ(next.value, 5);
  }
}

// The send has claimed the sleeping receive but not resolved it when its frame is destroyed (on
// another thread): the destructor waits for the send to resolve it, and the value stays queued.
TEST(UnboundedCancel, ARecvDestroyedAfterASendClaimedItLeavesTheValue) {
  halves h;
  reception<int> doomed;
  task<void> t = receive_into(*h.rx, doomed, cancellable);
  t.handle().resume();  // no scheduler: resumed inline by whoever resolves it
  expect_asleep(doomed);
  std::latch claimed(1);
  std::latch destroying(1);
  std::optional<send_status> sent;
  std::thread sender([&] {
    const thread_hook hook(test_point::claimed_for_wake, [&] {
      claimed.count_down();
      destroying.wait();  // resolve only once the destructor waits for it
    });
    sent = h.tx->send(5).status();
  });
  claimed.wait();
  {
    const thread_hook hook(test_point::awaiting_resolver, [&] { destroying.count_down(); });
    t = {};
  }
  sender.join();
  EXPECT_EQ(sent, send_status::ok);
  EXPECT_EQ(doomed.resumed, 0);
  EXPECT_EQ(h.rx->len(), 1U);
  expect_try_recv(*h.rx, 5);
}

// ---------------------------------------------------------------------------------------------
// Deterministic races at the waiter core's test points and inside the payload's move
// constructor.

// The receiver is linked and announced asleep, not yet armed, when a send publishes: the send
// sees it asleep and completes it; it continues without suspending.
TEST(UnboundedRace, ASendBeforeTheReceiverSuspendsCompletesTheRecvWithoutSuspending) {
  for (const test_point point : {test_point::published, test_point::before_arm}) {
    for (const bool can_cancel : {plain, cancellable}) {
      SCOPED_TRACE(testing::Message()
                   << "point " << static_cast<int>(point) << ", cancellable " << can_cancel);
      halves h;
      test_scheduler s;
      reception<int> r;
      s.at(point, [&h] { EXPECT_TRUE(h.tx->send(8).ok()); });
      s.spawn(receive_into(*h.rx, r, can_cancel));
      EXPECT_EQ(s.run(), 1U);
      EXPECT_EQ(s.pending_actions(), 0U);
      EXPECT_EQ(r.resumed, 1);
      EXPECT_EQ(r.value, 8);
      r.stop.request_stop();  // no stop callback any more
      EXPECT_EQ(s.run(), 0U);
      EXPECT_TRUE(h.rx->try_recv().empty());
    }
  }
}

// The receiver finds nothing and goes to sleep while a send is constructing its value (before it
// counts and links it): the send must see it asleep and wake it.
TEST(UnboundedRace, TheReceiverGoingToSleepWhileASendConstructsItsValueIsWokenByIt) {
  for (const bool can_cancel : {plain, cancellable}) {
    SCOPED_TRACE(can_cancel);
    halves<item> h;
    test_scheduler s;
    reception<item> r;
    s.spawn(receive_into(*h.rx, r, can_cancel));
    next_move_hook = [&] {
      EXPECT_EQ(s.run(), 1U);
      expect_asleep(r);
    };
    EXPECT_TRUE(h.tx->send(item(7)).ok());
    EXPECT_FALSE(next_move_hook);
    EXPECT_EQ(s.ready_count(), 1U);
    s.run();
    EXPECT_EQ(r.status, wait_status::ok);
    ASSERT_TRUE(r.value.has_value());
    EXPECT_EQ(r.value->id, 7);
  }
}

// close() lands while a send constructs its value (after its first check of `closed`): the send
// hands the value back, nothing is received, and a sleeping receiver wakes closed.
TEST(UnboundedRace, ACloseWhileASendIsInFlightHandsTheValueBack) {
  for (const bool receiver_asleep : {false, true}) {
    SCOPED_TRACE(receiver_asleep);
    ledger book(1);
    halves<item> h;
    test_scheduler s;
    reception<item> r;
    if (receiver_asleep) {
      s.spawn(receive_into(*h.rx, r, plain));
      s.run();
    }
    next_move_hook = [&h] { h.rx->close(); };
    {
      auto sent = h.tx->send(item(0, &book));
      EXPECT_TRUE(sent.closed());
      EXPECT_EQ(sent.value().id, 0);
      EXPECT_EQ(sent.value().book, &book);
      EXPECT_EQ(h.rx->len(), 0U);
    }
    EXPECT_EQ(book.destructions(0), 1);
    s.run();
    if (receiver_asleep) {
      EXPECT_EQ(r.resumed, 1);
      EXPECT_EQ(r.status, wait_status::closed);
    }
    EXPECT_TRUE(h.rx->try_recv().closed());
    EXPECT_TRUE(h.rx->recv_blocking().closed());
  }
}

// close() lands after a send linked its value and claimed the sleeping receiver, before it
// resolved it: the send reported ok, so the value is received; then the channel is closed.
TEST(UnboundedRace, ACloseAfterASendLinkedItsValueStillDeliversIt) {
  for (const bool can_cancel : {plain, cancellable}) {
    SCOPED_TRACE(can_cancel);
    halves h;
    test_scheduler s;
    reception<int> r;
    s.spawn(receive_into(*h.rx, r, can_cancel));
    s.run();
    s.at(test_point::claimed_for_wake, [&h] { h.rx->close(); });
    EXPECT_TRUE(h.tx->send(5).ok());
    EXPECT_EQ(s.pending_actions(), 0U);
    EXPECT_TRUE(h.tx->send(6).closed());
    s.run();
    EXPECT_EQ(r.status, wait_status::ok);
    EXPECT_EQ(r.value, 5);
    EXPECT_TRUE(h.rx->try_recv().closed());
  }
}

// The last sender goes while the receiver is linked and announced asleep, not yet armed: the
// receive ends closed without suspending.
TEST(UnboundedRace, TheLastSenderLeavingBeforeTheReceiverSuspendsEndsTheRecvClosed) {
  for (const test_point point : {test_point::published, test_point::before_arm}) {
    for (const bool can_cancel : {plain, cancellable}) {
      SCOPED_TRACE(testing::Message()
                   << "point " << static_cast<int>(point) << ", cancellable " << can_cancel);
      halves h;
      test_scheduler s;
      reception<int> r;
      s.at(point, [&h] { h.tx.reset(); });
      s.spawn(receive_into(*h.rx, r, can_cancel));
      EXPECT_EQ(s.run(), 1U);
      EXPECT_EQ(s.pending_actions(), 0U);
      EXPECT_EQ(r.resumed, 1);
      EXPECT_EQ(r.status, wait_status::closed);
    }
  }
}

// A sender that is not the last goes at the same moment: the receiver stays asleep, and the
// remaining sender's value wakes it.
TEST(UnboundedRace, ASenderLeavingBeforeTheReceiverSuspendsKeepsItWaitingWhileACopyRemains) {
  for (const test_point point : {test_point::published, test_point::before_arm}) {
    SCOPED_TRACE(static_cast<int>(point));
    halves h;
    std::optional<unbounded_sender<int>> copy(*h.tx);
    test_scheduler s;
    reception<int> r;
    s.at(point, [&h] { h.tx.reset(); });
    s.spawn(receive_into(*h.rx, r, cancellable));
    EXPECT_EQ(s.run(), 1U);
    expect_asleep(r);
    EXPECT_TRUE(copy->send(3).ok());
    s.run();
    EXPECT_EQ(r.value, 3);
  }
}

// close() lands while a send constructs its value; the send then counts itself, finds the channel
// closed and moves the value back out to hand it back. The receiver looks exactly then (a send
// counted, nothing linked): it may end closed at once or go to sleep, but then the send's
// withdrawal must wake it. Either way the receive ends closed.
TEST(UnboundedRace, AReceiverLookingWhileARefusedSendIsStillCountedEndsClosed) {
  for (const bool can_cancel : {plain, cancellable}) {
    SCOPED_TRACE(can_cancel);
    ledger book(1);
    halves<item> h;
    test_scheduler s;
    reception<item> r;
    s.spawn(receive_into(*h.rx, r, can_cancel));  // not started yet
    next_move_hook = [&] {                        // the move into the node: not counted yet
      h.rx->close();
      next_move_hook = [&s] { s.run(); };  // the hand-back: counted, not withdrawn yet
    };
    {
      auto sent = h.tx->send(item(0, &book));
      EXPECT_FALSE(next_move_hook);
      ASSERT_TRUE(sent.closed());
      EXPECT_EQ(sent.value().id, 0);
    }
    EXPECT_EQ(book.destructions(0), 1);
    s.run();
    EXPECT_EQ(r.started, 1);
    EXPECT_EQ(r.resumed, 1) << "the receiver slept through the end of the channel";
    EXPECT_EQ(r.status, wait_status::closed);
    EXPECT_EQ(h.rx->len(), 0U);
    EXPECT_TRUE(h.rx->try_recv().closed());
  }
}

// The receiver goes while a send constructs its value: the values it left are destroyed then,
// once, and the send hands its value back.
TEST(UnboundedRace, TheReceiverGoingWhileASendIsInFlightHandsTheValueBack) {
  ledger book(3);
  halves<item> h;
  EXPECT_TRUE(h.tx->send(item(0, &book)).ok());
  EXPECT_TRUE(h.tx->send(item(1, &book)).ok());
  next_move_hook = [&] {
    h.rx.reset();
    EXPECT_EQ(book.destructions(0), 1);
    EXPECT_EQ(book.destructions(1), 1);
  };
  {
    auto sent = h.tx->send(item(2, &book));
    EXPECT_FALSE(next_move_hook);
    ASSERT_TRUE(sent.closed());
    EXPECT_EQ(sent.value().id, 2);
    EXPECT_EQ(sent.value().book, &book);
    EXPECT_EQ(book.destructions(2), 0);
  }
  EXPECT_TRUE(h.tx->is_closed());
  h.tx.reset();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(book.destructions(i), 1) << "value " << i;
}

// A stop request lands after a send claimed the cancellable receive, before it resolved it: too
// late, the receive reports ok and takes the value (nothing to pass on, nothing lost).
TEST(UnboundedRace, AStopAfterASendClaimedTheRecvIsTooLateAndTheValueIsTaken) {
  halves h;
  test_scheduler s;
  reception<int> r;
  s.spawn(receive_into(*h.rx, r, cancellable));
  s.run();
  s.at(test_point::claimed_for_wake, [&r] { r.stop.request_stop(); });
  EXPECT_TRUE(h.tx->send(5).ok());
  EXPECT_EQ(s.pending_actions(), 0U);
  s.run();
  EXPECT_EQ(r.resumed, 1);
  EXPECT_EQ(r.status, wait_status::ok);
  EXPECT_EQ(r.value, 5);
  EXPECT_EQ(h.rx->len(), 0U);
}

// A send lands while the stop request holds the receive claimed, before resolving it: the send
// finds nobody asleep, the receive ends cancelled, and the value waits for the next receive.
TEST(UnboundedRace, ASendWhileACancellationHoldsTheRecvStaysForTheNextRecv) {
  halves h;
  test_scheduler s;
  reception<int> r;
  s.spawn(receive_into(*h.rx, r, cancellable));
  s.run();
  s.at(test_point::claimed_for_cancel, [&h] { EXPECT_TRUE(h.tx->send(5).ok()); });
  r.stop.request_stop();
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_EQ(s.ready_count(), 1U);  // one resumption
  s.run();
  EXPECT_EQ(r.resumed, 1);
  EXPECT_EQ(r.status, wait_status::cancelled);
  EXPECT_FALSE(r.value.has_value());
  EXPECT_EQ(h.rx->len(), 1U);
  expect_try_recv(*h.rx, 5);
}

// Producers, a receiver and a canceller as coroutines on a seeded test scheduler; some seeds
// close the channel after a number of receives. Whatever the order: each value sent ok is
// received once, in its producer's order; each value handed back is never received; the receive
// ends closed once the producers are gone.
struct seeded_run {
  test_scheduler s;
  asyncband::stop_source stop;  // the receiver's current one; the canceller stops and replaces it
  std::vector<int> accepted;
  std::vector<int> handed_back;
  std::vector<int> received;
  std::optional<wait_status> end;
  explicit seeded_run(std::uint64_t seed) : s(seed) {}
};

constexpr int kSeededEach = 12;

task<void> seeded_producer(seeded_run& run, unbounded_sender<int> tx, int p) {
  for (int seq = 0; seq < kSeededEach; ++seq) {
    const int id = p * kSeededEach + seq;
    auto r = tx.send(id);
    if (!r.ok()) {
      run.handed_back.push_back(r.value());
      co_return;
    }
    run.accepted.push_back(id);
    if (seq % 3 != 2) co_await run.s.schedule();
  }
}

task<void> seeded_receiver(seeded_run& run, unbounded_receiver<int>& rx, std::size_t close_after) {
  for (unsigned n = 0;; ++n) {
    if (run.received.size() == close_after) rx.close();
    if (n % 2 == 0) {
      auto r = co_await rx.recv();
      if (!r.ok()) {
        run.end = r.status();
        co_return;
      }
      run.received.push_back(*r);
    } else {
      auto r = co_await rx.recv(run.stop.get_token());
      if (r.cancelled()) continue;
      if (!r.ok()) {
        run.end = r.status();
        co_return;
      }
      run.received.push_back(*r);
    }
  }
}

task<void> seeded_canceller(seeded_run& run, int times) {
  for (int i = 0; i < times; ++i) {
    co_await run.s.schedule();
    std::exchange(run.stop, asyncband::stop_source{}).request_stop();
  }
}

TEST(UnboundedRace, SeededInterleavingsDeliverEachAcceptedValueOnceInItsProducersOrder) {
  constexpr int kProducers = 3;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    halves h;
    seeded_run run(seed);
    const std::size_t close_after =
        seed % 3 == 0 ? static_cast<std::size_t>(seed / 3 % (kProducers * kSeededEach)) : std::size_t(-1);
    for (int p = 0; p < kProducers; ++p) run.s.spawn(seeded_producer(run, *h.tx, p));
    h.tx.reset();
    run.s.spawn(seeded_receiver(run, *h.rx, close_after));
    run.s.spawn(seeded_canceller(run, 6));
    run.s.run();
    ASSERT_EQ(run.end, wait_status::closed);
    std::vector<int> next(kProducers, 0);
    for (const int id : run.received) {
      const int p = id / kSeededEach;
      ASSERT_EQ(id % kSeededEach, next[static_cast<std::size_t>(p)]) << "producer " << p;
      ++next[static_cast<std::size_t>(p)];
    }
    auto accepted = run.accepted;
    auto received = run.received;
    std::sort(accepted.begin(), accepted.end());
    std::sort(received.begin(), received.end());
    EXPECT_EQ(received, accepted);
    for (const int id : run.handed_back) {
      EXPECT_EQ(std::count(received.begin(), received.end(), id), 0) << "value " << id;
    }
    if (close_after == std::size_t(-1)) {
      EXPECT_TRUE(run.handed_back.empty());
      EXPECT_EQ(received.size(), static_cast<std::size_t>(kProducers * kSeededEach));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The same races on real threads, repeated (bounded in iterations and time).

// A send on another thread against the receiver going to sleep, and the last sender leaving
// against it: never slept through (a lost wake-up shows as a timeout).
TEST(UnboundedRace, ASendOrTheLastSenderLeavingOnAnotherThreadIsNeverSleptThrough) {
  const int rounds = repeat_for(4000, 400ms, [](int i) {
    halves h;
    const bool leave = i % 3 == 2;
    std::thread other([&h, i, leave] {
      if (leave) {
        h.tx.reset();
      } else {
        EXPECT_TRUE(h.tx->send(i).ok());
      }
    });
    const auto r = h.rx->recv_timeout(10s);
    other.join();
    if (leave) {
      EXPECT_TRUE(r.closed()) << "round " << i << ": status " << to_string(r.status());
    } else {
      EXPECT_TRUE(r.ok()) << "round " << i << ": status " << to_string(r.status());
      if (r.ok()) {
        EXPECT_EQ(*r, i);
      }
    }
    return !::testing::Test::HasFailure();
  });
  EXPECT_GT(rounds, 0);
}

// close() on this thread against a send on another: a send that reports ok is received, one
// that reports disconnected is not; a receiver asleep on the closed channel while the send is
// counted but not linked wakes when the send links or withdraws (never a timeout).
TEST(UnboundedRace, ACloseRacingASendOnAnotherThreadNeverLosesAnAcceptedValue) {
  int accepted = 0;
  const int rounds = repeat_for(4000, 400ms, [&accepted](int i) {
    halves h;
    std::optional<send_status> status;
    std::thread sender([&h, &status, i] { status = h.tx->send(i).status(); });
    if (i % 2 == 1) std::this_thread::yield();
    h.rx->close();
    const auto first = h.rx->recv_timeout(10s);
    const auto second = h.rx->recv_timeout(10s);
    sender.join();
    EXPECT_FALSE(first.timed_out()) << "round " << i;
    EXPECT_TRUE(second.closed()) << "round " << i;
    if (status == send_status::ok) {
      ++accepted;
      EXPECT_TRUE(first.ok()) << "round " << i << ": an accepted value was lost";
      if (first.ok()) {
        EXPECT_EQ(*first, i);
      }
    } else {
      EXPECT_EQ(status, send_status::closed);
      EXPECT_TRUE(first.closed()) << "round " << i << ": a value handed back was also received";
    }
    return !::testing::Test::HasFailure();
  });
  EXPECT_GT(rounds, 0);
  RecordProperty("rounds", rounds);
  RecordProperty("accepted", accepted);
}

// Producers on other threads stream values while the receiver keeps up with them, then it closes
// and drains: every value a producer saw accepted is received, in its producer's order, and the
// receive then ends closed (the producers stay alive meanwhile, so only the withdrawal of the
// refused sends can end it). More producers than cores: one preempted between its check of
// `closed` and its publication is the case that matters.
TEST(UnboundedRace, ACloseWhileProducersStreamKeepsEveryAcceptedValue) {
  constexpr int kProducers = 3;
  constexpr int kSpan = 1 << 20;  // producer p sends p * kSpan + seq
  int total = 0;
  const int rounds = repeat_for(4000, 500ms, [&total](int i) {
    halves h;
    std::vector<std::atomic<int>> accepted(kProducers);
    std::atomic<int> garbled{0};
    std::latch drained(1);
    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p) {
      accepted[static_cast<std::size_t>(p)].store(0);
      producers.emplace_back(
          [&, p](unbounded_sender<int> tx) {
            for (int seq = 0; seq < kSpan; ++seq) {
              auto r = tx.send(p * kSpan + seq);
              if (!r.ok()) {
                if (!r.closed() || r.value() != p * kSpan + seq) garbled.fetch_add(1);
                break;
              }
              accepted[static_cast<std::size_t>(p)].store(seq + 1, std::memory_order_relaxed);
            }
            drained.wait();
          },
          *h.tx);
    }
    std::vector<int> got(kProducers, 0);
    const auto take = [&got, i](int v) {
      const auto p = static_cast<std::size_t>(v / kSpan);
      EXPECT_EQ(v % kSpan, got[p]) << "round " << i << ", producer " << p;
      got[p] = v % kSpan + 1;
    };
    for (int n = i % 64; n > 0;) {
      auto r = h.rx->try_recv();
      if (!r.ok()) continue;
      take(*r);
      --n;
    }
    h.rx->close();
    for (;;) {
      auto r = i % 2 == 0 ? h.rx->recv_timeout(5s) : block_on(h.rx->recv());
      if (!r.ok()) {
        EXPECT_TRUE(r.closed()) << "round " << i << ": " << to_string(r.status());
        break;
      }
      take(*r);
    }
    drained.count_down();
    for (auto& t : producers) t.join();
    for (int p = 0; p < kProducers; ++p) {
      EXPECT_EQ(got[static_cast<std::size_t>(p)], accepted[static_cast<std::size_t>(p)].load())
          << "round " << i << ", producer " << p << ": accepted values lost";
      total += got[static_cast<std::size_t>(p)];
    }
    EXPECT_EQ(garbled.load(), 0) << "round " << i;
    return !::testing::Test::HasFailure();
  });
  EXPECT_GT(rounds, 0);
  RecordProperty("rounds", rounds);
  RecordProperty("received", total);
}

// The receiver goes on this thread while a send runs on another: the value is handed back, or
// accepted and destroyed with the channel; once either way.
TEST(UnboundedRace, TheReceiverGoingRacingASendDestroysOrHandsBackEachValueOnce) {
  const int rounds = repeat_for(4000, 400ms, [](int i) {
    ledger book(2);
    halves<item> h;
    EXPECT_TRUE(h.tx->send(item(0, &book)).ok());
    std::optional<send_status> status;
    int handed_back = -1;
    std::thread sender([&] {
      auto r = h.tx->send(item(1, &book));
      status = r.status();
      if (!r.ok()) handed_back = r.value().id;
    });
    if (i % 2 == 1) std::this_thread::yield();
    h.rx.reset();
    sender.join();
    EXPECT_EQ(book.destructions(0), 1) << "round " << i;
    if (status == send_status::closed) {
      EXPECT_EQ(handed_back, 1) << "round " << i;
      EXPECT_EQ(book.destructions(1), 1) << "round " << i;
    } else {
      EXPECT_EQ(status, send_status::ok) << "round " << i;
    }
    h.tx.reset();  // the channel goes: an accepted value with it
    EXPECT_EQ(book.destructions(1), 1) << "round " << i;
    return !::testing::Test::HasFailure();
  });
  EXPECT_GT(rounds, 0);
}

// "Last one out": the receiver sees the last sender gone and goes at once, while that sender's
// wake-up is still inside the channel (stopped at `woken`, holding the receiver's lock). The
// channel's reference count keeps it alive for the sender; ASan reports any access to freed
// memory.
TEST(UnboundedLifetime, TheReceiverMayGoWhileTheLastSendersWakeUpIsStillInside) {
  std::optional<unbounded_sender<int>> last;
  waiter_destroys_while_the_waker_returns(
      [&last] {
        auto pair = unbounded<int>();
        last.emplace(std::move(pair.first));
        return std::make_unique<unbounded_receiver<int>>(std::move(pair.second));
      },
      [&last](unbounded_receiver<int>& /*unused*/) {
        const unbounded_sender<int> leaving = std::move(*last);  // goes on this thread
      },
      [](unbounded_receiver<int>& rx) { EXPECT_TRUE(rx.try_recv().closed()); }, waker_path::last_access);
}

// ---------------------------------------------------------------------------------------------
// Soak, bounded in rounds and time. Each round: producers on plain threads and as pool tasks
// send numbered values while the receiver (on this thread with every blocking form, or as a pool
// coroutine) receives; at a seeded point it closes the channel and drains it, or goes; or it just
// drains until the producers are gone. Producers stop the receiver's cancellable waits now and
// then (a cancelled or timed-out receive must take nothing). Invariants: each producer's values
// arrive in order without gaps; every value sent ok is received, or (receiver gone) destroyed
// with the channel, exactly once; every value handed back is intact and never received; values
// never sent are never seen.

constexpr int kSoakThreads = 2;
constexpr int kSoakTasks = 2;
constexpr int kSoakProducers = kSoakThreads + kSoakTasks;
constexpr int kSoakEach = 400;
constexpr int kSoakValues = kSoakProducers * kSoakEach;
constexpr int kSoakRounds = 5000;
constexpr auto kSoakTime = 1500ms;

enum class soak_end : std::uint8_t { drain, close, leave };
enum sent_as : std::uint8_t { untried, accepted, handed_back, garbled };

struct soak_round {
  std::mt19937_64 rng;  // the receiver's
  ledger book{kSoakValues};
  std::vector<std::atomic<std::uint8_t>> outcome;
  std::vector<std::atomic<int>> received;
  std::vector<int> next_seq;  // the receiver's
  stop_epoch epoch;           // the receiver's cancellable waits
  completion producers_done{kSoakProducers};
  std::atomic<int> violations{0};
  std::mutex note_mutex;
  std::string first_violation;

  explicit soak_round(std::uint64_t seed)
      : rng(seed), outcome(kSoakValues), received(kSoakValues), next_seq(kSoakProducers, 0) {
    for (auto& o : outcome) o.store(untried);
    for (auto& r : received) r.store(0);
  }

  void violation(const std::string& what) {
    if (violations.fetch_add(1) == 0) {
      const std::lock_guard lock(note_mutex);
      first_violation = what;
    }
  }

  /// Producer p's send of its value `seq`; false once the channel refused it.
  bool send(unbounded_sender<item>& tx, int p, int seq) {
    const int id = p * kSoakEach + seq;
    auto r = tx.send(item(id, &book));
    if (r.ok()) {
      outcome[static_cast<std::size_t>(id)].store(accepted);
      return true;
    }
    const bool intact = r.closed() && r.value().id == id && r.value().book == &book;
    outcome[static_cast<std::size_t>(id)].store(intact ? handed_back : garbled);
    return false;
  }

  /// A value the receiver got: the next of its producer.
  void record(const item& v) {
    if (v.book != &book || v.id < 0 || v.id >= kSoakValues) {
      violation("received a garbled value");
      return;
    }
    const int p = v.id / kSoakEach;
    const int seq = v.id % kSoakEach;
    int& next = next_seq[static_cast<std::size_t>(p)];
    if (seq != next) {
      violation("producer " + std::to_string(p) + ": received " + std::to_string(seq) + ", expected " +
                std::to_string(next));
    }
    next = seq + 1;
    received[static_cast<std::size_t>(v.id)].fetch_add(1);
  }

  /// Once everything is gone: the invariants, value by value.
  void check(soak_end end) {
    for (int id = 0; id < kSoakValues; ++id) {
      const auto i = static_cast<std::size_t>(id);
      const int got = received[i].load();
      const int destroyed = book.destructions(id);
      const std::string which = "value " + std::to_string(id) + ": ";
      switch (outcome[i].load()) {
        case untried:
          if (got != 0 || destroyed != 0) violation(which + "never sent, yet seen");
          break;
        case accepted:
          if (destroyed != 1)
            violation(which + "accepted, destroyed " + std::to_string(destroyed) + " times");
          if (got > 1) violation(which + "received twice");
          if (got == 0 && end != soak_end::leave) violation(which + "accepted and never received");
          break;
        case handed_back:
          if (got != 0) violation(which + "handed back and received");
          if (destroyed != 1)
            violation(which + "handed back, destroyed " + std::to_string(destroyed) + " times");
          break;
        default:
          violation(which + "handed back garbled or with a wrong status");
          break;
      }
    }
  }
};

void soak_thread_producer(soak_round& r, unbounded_sender<item> tx, int p) {
  for (int seq = 0; seq < kSoakEach; ++seq) {
    if (!r.send(tx, p, seq)) break;
    if (seq % 29 == 28) r.epoch.cancel_current();
    if (seq % 64 == 63) std::this_thread::yield();
  }
  { const unbounded_sender<item> gone = std::move(tx); }
  r.producers_done.done();
}

task<void> soak_task_producer(thread_pool& pool, soak_round& r, unbounded_sender<item> tx, int p) {
  co_await pool.schedule();
  for (int seq = 0; seq < kSoakEach; ++seq) {
    if (!r.send(tx, p, seq)) break;
    if (seq % 31 == 30) r.epoch.cancel_current();
    if (seq % 16 == 15) co_await pool.schedule();
  }
  { const unbounded_sender<item> gone = std::move(tx); }
  r.producers_done.done();
}

/// On this thread: the next value by a seeded form, or nullopt once the channel ended.
std::optional<item> soak_receive_here(soak_round& r, unbounded_receiver<item>& rx) {
  for (;;) {
    switch (r.rng() % 5) {
      case 0: {
        auto res = rx.recv_blocking();
        if (res.ok()) return std::move(*res);
        if (!res.closed()) r.violation("recv_blocking: " + std::string(to_string(res.status())));
        return std::nullopt;
      }
      case 1: {
        auto res = rx.try_recv();
        if (res.ok()) return std::move(*res);
        if (res.closed()) return std::nullopt;
        std::this_thread::yield();
        break;
      }
      case 2: {
        auto res = rx.recv_timeout(std::chrono::microseconds(r.rng() % 50));
        if (res.ok()) return std::move(*res);
        if (res.closed()) return std::nullopt;
        if (!res.timed_out()) r.violation("recv_timeout: " + std::string(to_string(res.status())));
        break;
      }
      case 3: {
        auto res = block_on(rx.recv(r.epoch.token()));
        if (res.ok()) return std::move(*res);
        if (res.closed()) return std::nullopt;
        if (!res.cancelled()) r.violation("block_on(recv): " + std::string(to_string(res.status())));
        break;
      }
      default: {
        auto res = rx.recv_blocking(r.epoch.token());
        if (res.ok()) return std::move(*res);
        if (res.closed()) return std::nullopt;
        if (!res.cancelled()) r.violation("recv_blocking(token): " + std::string(to_string(res.status())));
        break;
      }
    }
  }
}

void soak_receiver_here(soak_round& r, std::optional<unbounded_receiver<item>>& rx, soak_end end,
                        int stop_after) {
  int got = 0;
  bool closed = false;
  for (;;) {
    if (got >= stop_after && end == soak_end::leave) {
      rx.reset();
      return;
    }
    if (got >= stop_after && end == soak_end::close && !closed) {
      rx->close();
      closed = true;
    }
    const std::optional<item> v = soak_receive_here(r, *rx);
    if (!v) return;
    r.record(*v);
    ++got;
  }
}

task<void> soak_receiver_on_pool(thread_pool& pool, soak_round& r,
                                 std::optional<unbounded_receiver<item>>& rx, soak_end end, int stop_after) {
  co_await pool.schedule();
  int got = 0;
  bool closed = false;
  for (;;) {
    if (got >= stop_after && end == soak_end::leave) {
      rx.reset();
      co_return;
    }
    if (got >= stop_after && end == soak_end::close && !closed) {
      rx->close();
      closed = true;
    }
    std::optional<item> v;
    if (r.rng() % 2 == 0) {
      auto res = co_await rx->recv();
      if (!res.ok()) {
        if (!res.closed()) r.violation("pool recv: " + std::string(to_string(res.status())));
        co_return;
      }
      v.emplace(std::move(*res));
    } else {
      auto res = co_await rx->recv(r.epoch.token());
      if (res.cancelled()) continue;
      if (!res.ok()) {
        if (!res.closed()) r.violation("pool recv(token): " + std::string(to_string(res.status())));
        co_return;
      }
      v.emplace(std::move(*res));
    }
    if (!pool.on_worker_thread()) r.violation("a receive resumed off the pool");
    r.record(*v);
    ++got;
  }
}

struct soak_totals {
  int accepted = 0;
  int received = 0;
  int discarded = 0;  // accepted, then destroyed with the channel
  int handed_back = 0;
};

void soak_one_round(thread_pool& pool, std::uint64_t seed, soak_totals& totals) {
  soak_round r(seed);
  const auto end = static_cast<soak_end>(r.rng() % 3);
  const int stop_after = static_cast<int>(r.rng() % (kSoakValues / 2));
  const bool receive_on_pool = r.rng() % 2 == 0;
  {
    halves<item> h;
    std::vector<std::thread> threads;
    for (int p = 0; p < kSoakThreads; ++p) threads.emplace_back(soak_thread_producer, std::ref(r), *h.tx, p);
    for (int p = kSoakThreads; p < kSoakProducers; ++p)
      asyncband::runtime::spawn(pool.ref(), soak_task_producer(pool, r, *h.tx, p));
    h.tx.reset();  // the producers' copies remain
    if (receive_on_pool) {
      block_on(soak_receiver_on_pool(pool, r, h.rx, end, stop_after));
    } else {
      soak_receiver_here(r, h.rx, end, stop_after);
    }
    r.producers_done.wait_or_abort(60s, "unbounded soak");
    for (auto& t : threads) t.join();
  }  // the receiver (if still there) goes: the channel with it
  r.check(end);
  EXPECT_EQ(r.violations.load(), 0) << "seed " << seed << " (end " << static_cast<int>(end) << ", stop after "
                                    << stop_after << ", on pool " << receive_on_pool
                                    << "): " << r.first_violation;
  for (int id = 0; id < kSoakValues; ++id) {
    const auto i = static_cast<std::size_t>(id);
    const auto o = r.outcome[i].load();
    if (o == accepted) ++totals.accepted;
    if (o == handed_back) ++totals.handed_back;
    totals.received += r.received[i].load();
    if (o == accepted && r.received[i].load() == 0) ++totals.discarded;
  }
}

TEST(UnboundedSoak, ProducersOnThreadsAndThePoolAgainstAReceiverThatDrainsClosesOrGoes) {
  thread_pool pool(2);
  soak_totals totals;
  const int rounds = repeat_for(kSoakRounds, kSoakTime, [&](int i) {
    soak_one_round(pool, 0x5eed0000U + static_cast<std::uint64_t>(i), totals);
    return !::testing::Test::HasFailure();
  });
  EXPECT_GT(rounds, 0);
  EXPECT_GT(totals.received, 0);
  RecordProperty("rounds", rounds);
  RecordProperty("accepted", totals.accepted);
  RecordProperty("received", totals.received);
  RecordProperty("discarded", totals.discarded);
  RecordProperty("handed_back", totals.handed_back);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The senders' closed(): tokio's Sender::closed, completed by close() or the receiver going.

TEST(UnboundedSenderClosed, ClosedWaitsForTheReceiversCloseAndThenSendsHandTheirValueBack) {
  auto [tx, rx] = unbounded<int>();
  bool done = false;
  [](unbounded_sender<int>& t, bool& out) -> bare_coroutine {
    co_await t.closed();
    out = true;
  }(tx, done);
  EXPECT_TRUE(tx.send(1).ok());
  EXPECT_FALSE(done);
  rx.close();
  EXPECT_TRUE(done);
  EXPECT_TRUE(tx.send(2).closed());
  EXPECT_EQ(rx.try_recv().value(), 1);
  EXPECT_EQ(tx.closed_timeout(std::chrono::milliseconds(0)).status(), wait_status::ok);
}

TEST(UnboundedSenderClosed, TheReceiverGoingCompletesEveryFormAndAStoppedWaitEndsCancelled) {
  auto [tx, rx] = unbounded<int>();
  EXPECT_EQ(tx.closed_timeout(std::chrono::milliseconds(1)).status(), wait_status::timeout);
  asyncband::stop_source stop;
  result<void> stopped(wait_status::ok);
  bool stopped_done = false;
  [](unbounded_sender<int>& t, asyncband::stop_token token, result<void>& out,
     bool& finished) -> bare_coroutine {
    out = co_await t.closed(std::move(token));
    finished = true;
  }(tx, stop.get_token(), stopped, stopped_done);
  EXPECT_FALSE(stopped_done);
  stop.request_stop();
  EXPECT_TRUE(stopped_done);
  EXPECT_TRUE(stopped.cancelled());

  std::thread blocked([&sender = tx] { sender.closed_blocking(); });
  { auto gone = std::move(rx); }  // the receiver goes
  blocked.join();
  EXPECT_TRUE(block_on(tx.closed(asyncband::stop_token{})).ok());
  EXPECT_TRUE(tx.closed_blocking(asyncband::stop_token{}).ok());
  EXPECT_TRUE(tx.is_closed());
}

// A closed() wait resumed inline by the receiver's going may destroy every handle: the going
// keeps a reference of its own until its end (ASan checks it touches nothing after).
TEST(UnboundedSenderClosed, AClosedWaitResumedInlineMayDestroyEveryHandle) {
  auto [t, r] = unbounded<std::string>();
  auto tx = std::make_unique<unbounded_sender<std::string>>(std::move(t));
  auto rx = std::make_unique<unbounded_receiver<std::string>>(std::move(r));
  ASSERT_TRUE(tx->send(std::string(64, 'x')).ok());  // a value nobody receives
  bool done = false;
  [](std::unique_ptr<unbounded_sender<std::string>>& t_owner,
     std::unique_ptr<unbounded_receiver<std::string>>& r_owner, bool& out) -> bare_coroutine {
    co_await t_owner->closed();
    t_owner.reset();
    r_owner.reset();  // the closing call is this receiver's own close()
    out = true;
  }(tx, rx, done);
  rx->close();
  EXPECT_TRUE(done);
  EXPECT_EQ(tx, nullptr);
  EXPECT_EQ(rx, nullptr);
}

// ---------------------------------------------------------------------------------------------
// A move that throws while the receiver takes a value leaves the value in the channel.

namespace {
struct fragile {
  static inline int throws_left = 0;
  int id = 0;
  explicit fragile(int i) : id(i) {}
  fragile(fragile&& other) : id(other.id) {  // NOLINT(performance-noexcept-move-constructor)
    if (throws_left > 0 && --throws_left == 0) throw std::runtime_error("fragile move");
  }
  fragile(const fragile&) = delete;
  fragile& operator=(const fragile&) = delete;
  fragile& operator=(fragile&&) = delete;
  ~fragile() = default;
};
}  // namespace

TEST(UnboundedThrowingPayload, AMoveThatThrowsInTheReceiveLeavesTheValueForTheNextReceive) {
  auto [tx, rx] = asyncband::mpsc::unbounded<fragile>();
  ASSERT_TRUE(tx.send(fragile(1)).ok());
  ASSERT_TRUE(tx.send(fragile(2)).ok());
  fragile::throws_left = 1;  // the receive's move out of the channel
  EXPECT_THROW((void)rx.try_recv(), std::runtime_error);
  EXPECT_EQ(rx.len(), 2U);
  auto first = rx.try_recv();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->id, 1);
  auto second = rx.recv_blocking();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->id, 2);
}

// Last one out for the sender (found by the lifetime harness, tests/test_lifetime.cpp): move
// assignment dropped the last producer, waking the receiver inline, and then wrote the sender,
// which that receiver may already have destroyed (caught by the harness's late-write check; ASan).

namespace {
struct unbounded_pair {
  std::pair<asyncband::mpsc::unbounded_sender<int>, asyncband::mpsc::unbounded_receiver<int>> ch =
      asyncband::mpsc::unbounded<int>();
};
struct another_unbounded : asyncband_test::lifetime::waker_base {
  unbounded_pair other;
};
}  // namespace

TEST(UnboundedLastOneOut, SenderMoveAssignmentLeavesAsItsLastAccess) {
  using namespace asyncband_test::lifetime;
  coroutine_row<unbounded_pair, another_unbounded>(
      "move_assigned", "closed", no_setup{},
      [](unbounded_pair& w, asyncband::stop_token) { return w.ch.second.recv(); },
      [](unbounded_pair* w, another_unbounded& k) { w->ch.first = std::move(k.other.ch.first); })
      .body();
}

// ---------------------------------------------------------------------------------------------
// Issue 11, bug 4: a throwing move on the receive side lost the message. The receive moved the
// value into a local, freed the node, then moved it again into the result (block_on added two
// more moves), so a throw from any but the first move lost it. Now every receive form moves the
// value exactly once, into the outcome constructed in place, and frees the node only after.

namespace {

/// How the fuse scenarios (support/fuse_payload.hpp) use an unbounded channel.
struct unbounded_fuse_channel {
  static auto make(std::size_t /*capacity*/) { return unbounded<fuse_payload>(); }
  template <class Sender>
  static bool send(Sender& tx, int v) {
    return tx.send(fuse_payload(v)).ok();
  }
  template <class Sender, class Receiver>
  static void expect_value_held(Sender& /*unused*/, Receiver& rx) {
    EXPECT_GE(rx.len(), 1U);
  }
  template <class Sender, class Receiver>
  static void expect_drained(Sender& /*unused*/, Receiver& /*unused*/) {}
};

}  // namespace

TEST(UnboundedThrowingPayload, EveryReceiveFormMovesOnceAndTheNthMoveThrowingLosesNothing) {
  every_receive_form_with_the_nth_move_throwing<unbounded_fuse_channel>();
}

// A receive that waited for the value: the move on its resumption throws; the value stays.
TEST(UnboundedThrowingPayload, AWaitingReceiveWhoseMoveThrowsLeavesTheValue) {
  awaiting_receive_whose_move_throws_leaves_the_value<unbounded_fuse_channel>();
}

// ---------------------------------------------------------------------------------------------
// Issue 11, misuse: a second receive while one is pending could leave a coroutine asleep for
// good, or take the value the first was woken for. Now it throws std::logic_error, and the
// pending one completes.

TEST(UnboundedMisuse, ASecondReceiveWhileACoroutineReceivesThrowsAndTheFirstCompletes) {
  auto c = unbounded<int>();  // no structured bindings: clang 14 cannot capture them
  a_second_receive_throws_while_a_coroutine_receives(c.second,
                                                     [&c](int v) { ASSERT_TRUE(c.first.send(v).ok()); });
}

TEST(UnboundedMisuse, ASecondReceiveWhileAThreadReceivesThrowsAndTheFirstCompletes) {
  auto c = unbounded<int>();  // no structured bindings: clang 14 cannot capture them
  a_second_receive_throws_while_a_thread_receives(c.second,
                                                  [&c](int v) { ASSERT_TRUE(c.first.send(v).ok()); });
}

// ---------------------------------------------------------------------------------------------
// Batch receives (issue 17): recv_many, try_recv_many and their blocking twins
// (support/recv_many.hpp).

namespace {

using namespace asyncband_test::recv_many_scenarios;

struct unbounded_factory {
  template <class T>
  static auto make(std::size_t /*room*/) {
    return unbounded<T>();
  }
};
/// How the batch receive scenarios use an unbounded MPSC channel.
using batch_kind = channel_kind<unbounded_sender, unbounded_receiver, unbounded_factory>;

}  // namespace

TEST(UnboundedRecvMany, EveryFormAppendsInOrderUpToTheLimit) {
  every_form_appends_in_order_up_to_the_limit<batch_kind>();
}
TEST(UnboundedRecvMany, ALimitOfZeroYieldsZeroAtOnce) {
  a_limit_of_zero_yields_zero_at_once<batch_kind>();
}
TEST(UnboundedRecvMany, AWaitingBatchReceiveTakesTheValuesSentBeforeItRuns) {
  a_waiting_batch_receive_takes_the_values_sent_before_it_runs<batch_kind>();
}
TEST(UnboundedRecvMany, BatchesDrainAClosedChannelThenEndClosed) {
  batches_drain_a_closed_channel_then_end_closed<batch_kind>();
}
TEST(UnboundedRecvMany, ACancelledOrDestroyedBatchReceiveTakesNothing) {
  a_cancelled_or_destroyed_batch_receive_takes_nothing<batch_kind>();
}
TEST(UnboundedRecvMany, AStopAfterTheWakeUpIsTooLateAndTheBatchTakesTheValues) {
  EXPECT_EQ(a_batch_receive_woken_then_stopped<batch_kind>(), wait_status::ok);
}
TEST(UnboundedRecvMany, ABatchReceiveThatLosesAWhenAnyTakesNothing) {
  a_batch_receive_that_loses_a_when_any_takes_nothing<batch_kind>();
}
TEST(UnboundedRecvMany, AThrowingMoveKeepsTheValuesAppendedAndLeavesTheRest) {
  a_throwing_move_keeps_the_values_appended_and_leaves_the_rest<batch_kind>();
}
TEST(UnboundedRecvMany, ABufferThatCannotGrowTakesNothing) {
  a_buffer_that_cannot_grow_takes_nothing<batch_kind>();
}
TEST(UnboundedRecvMany, ABatchReceiveIsOneReceiveAtATime) {
  a_batch_receive_is_one_receive_at_a_time<batch_kind>(false);
}
TEST(UnboundedRecvMany, ProducerThreadsAndABatchReceivingThreadExchangeEveryValueOnceInOrder) {
  threads_receive_every_value_once_in_batches<batch_kind>(1, 16);
}

// An unbounded channel's senders never block, so a sender given the receiver's core would keep
// it for a whole time slice: its blocking receive spins with the pause hint, never yielding.
TEST(UnboundedSpin, ABlockingReceiveDoesNotYieldWhileSpinning) {
  using state = asyncband::mpsc::detail::unbounded_state<int>;
  state s;
  asyncband::mpsc::detail::recv_wait<state, int> receive(&s);
  EXPECT_FALSE(asyncband::detail::spins_by_yielding(receive));
}
