// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband/debug.hpp: the exact text operator<< writes for every primitive, guard,
// channel half, permit and outcome, in their typical states (free and held, set and unset, with
// and without waiters, open and closed, moved from), to_string of every status, and, where the
// standard library has <format>, that std::format("{}") writes the same text.
#include "asyncband/debug.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/stop_token.hpp"
#include "support/stress.hpp"

namespace {

using namespace asyncband;
using asyncband::runtime::task;
using asyncband::runtime::test_scheduler;

template <class T>
std::string str(const T& value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

/// A value without operator<<: shown as `...`.
struct opaque {};

/// Awaits what `make()` returns once, and drops what it yields.
template <class Make>
task<void> awaiting(Make make) {
  (void)(co_await make());
}

/// Spawns `n` coroutines awaiting `make()` and runs them until they wait.
template <class Make>
void spawn_waiters(test_scheduler& s, int n, Make make) {
  for (int i = 0; i < n; ++i) s.spawn(awaiting(make));
  s.run();
}

// ---------------------------------------------------------------------------------------------
// Statuses and outcomes

TEST(DebugOutput, StatusesWriteTheirNames) {
  EXPECT_EQ(str(wait_status::ok), "ok");
  EXPECT_EQ(str(wait_status::cancelled), "cancelled");
  EXPECT_EQ(str(wait_status::timeout), "timeout");
  EXPECT_EQ(str(wait_status::closed), "closed");
  EXPECT_EQ(str(send_status::full), "full");
  EXPECT_EQ(str(send_status::closed), "closed");
  EXPECT_EQ(str(recv_status::ok), "ok");
  EXPECT_EQ(str(recv_status::empty), "empty");
  EXPECT_EQ(str(recv_status::closed), "closed");
  EXPECT_EQ(str(broadcast::recv_status::lagged), "lagged");
  EXPECT_EQ(str(broadcast::mode::overflow), "overflow");
  EXPECT_EQ(str(broadcast::mode::bounded), "bounded");
}

TEST(DebugOutput, ToStringOfRecvStatus) {
  static_assert(std::string_view(to_string(recv_status::ok)) == "ok");
  EXPECT_STREQ(to_string(recv_status::empty), "empty");
  EXPECT_STREQ(to_string(recv_status::closed), "closed");
  EXPECT_STREQ(to_string(static_cast<recv_status>(9)), "unknown");
  EXPECT_STREQ(broadcast::to_string(broadcast::recv_status::timeout), "timeout");
}

TEST(DebugOutput, ResultsShowTheStatusAndTheValue) {
  EXPECT_EQ(str(result<int>(42)), "ok(42)");
  EXPECT_EQ(str(result<int>(wait_status::cancelled)), "cancelled");
  EXPECT_EQ(str(result<std::string>(std::string("text"))), "ok(text)");
  EXPECT_EQ(str(result<opaque>(opaque{})), "ok(...)");
  EXPECT_EQ(str(result<void>()), "ok");
  EXPECT_EQ(str(result<void>(wait_status::timeout)), "timeout");
  int x = 5;
  EXPECT_EQ(str(result<int&>(x)), "ok(5)");
  EXPECT_EQ(str(result<int&>(wait_status::closed)), "closed");
  EXPECT_EQ(str(result<result<int>>(result<int>(1))), "ok(ok(1))");
}

TEST(DebugOutput, SendAndReceiveOutcomesShowTheirPayload) {
  EXPECT_EQ(str(send_result<int>()), "ok");
  EXPECT_EQ(str(send_result<int>(send_status::closed, 7)), "closed(7)");
  EXPECT_EQ(str(send_result<opaque>(send_status::full, opaque{})), "full(...)");
  EXPECT_EQ(str(try_recv_result<int>(3)), "ok(3)");
  EXPECT_EQ(str(try_recv_result<int>(recv_status::empty)), "empty");
  EXPECT_EQ(str(try_recv_result<int>(recv_status::closed)), "closed");
  EXPECT_EQ(str(broadcast::recv_result<int>(std::in_place, 4)), "ok(4)");
  EXPECT_EQ(str(broadcast::recv_result<int>::lagged_by(3)), "lagged(3)");
  EXPECT_EQ(str(broadcast::recv_result<int>(broadcast::recv_status::closed)), "closed");
  EXPECT_EQ(str(broadcast::recv_result<int>(wait_status::cancelled)), "cancelled");
}

TEST(DebugOutput, InitResultsAndSmallValues) {
  EXPECT_EQ(str(init_result<int, std::string>::with_value(1)), "value(1)");
  EXPECT_EQ(str(init_result<int, std::string>::with_error(std::string("boom"))), "error(boom)");
  int v = 8;
  EXPECT_EQ(str(init_result<int&, int>::with_value(v)), "value(8)");
  EXPECT_EQ(str(barrier_wait_result{true}), "asyncband::barrier_wait_result{leader: true}");
  EXPECT_EQ(str(barrier_wait_result{false}), "asyncband::barrier_wait_result{leader: false}");
  EXPECT_EQ(str(phase_id{3}), "asyncband::phase_id{3}");
}

// ---------------------------------------------------------------------------------------------
// Events, countdowns, lifecycle

TEST(DebugOutput, ManualResetEvent) {
  manual_reset_event e;
  EXPECT_EQ(str(e), "asyncband::manual_reset_event{unset, waiters: 0}");
  test_scheduler s;
  spawn_waiters(s, 2, [&e] { return e.wait(); });
  EXPECT_EQ(str(e), "asyncband::manual_reset_event{unset, waiters: 2}");
  e.set();
  s.run();
  EXPECT_EQ(str(e), "asyncband::manual_reset_event{set, waiters: 0}");
}

TEST(DebugOutput, WaiterCountsStopAt64) {
  manual_reset_event e;
  test_scheduler s;
  spawn_waiters(s, 64, [&e] { return e.wait(); });
  EXPECT_EQ(str(e), "asyncband::manual_reset_event{unset, waiters: 64}");
  spawn_waiters(s, 1, [&e] { return e.wait(); });
  EXPECT_EQ(str(e), "asyncband::manual_reset_event{unset, waiters: 64+}");
  e.set();
  s.run();
}

TEST(DebugOutput, AutoResetEvent) {
  auto_reset_event e;
  EXPECT_EQ(str(e), "asyncband::auto_reset_event{unset, waiters: 0}");
  e.notify_one();
  EXPECT_EQ(str(e), "asyncband::auto_reset_event{set, waiters: 0}");
  ASSERT_TRUE(e.try_wait());
  test_scheduler s;
  spawn_waiters(s, 2, [&e] { return e.wait(); });
  EXPECT_EQ(str(e), "asyncband::auto_reset_event{unset, waiters: 2}");
  e.notify_all();
  s.run();
  EXPECT_EQ(str(e), "asyncband::auto_reset_event{unset, waiters: 0}");
}

TEST(DebugOutput, Latch) {
  latch l(3);
  EXPECT_EQ(str(l), "asyncband::latch{count: 3, waiters: 0}");
  test_scheduler s;
  spawn_waiters(s, 1, [&l] { return l.wait(); });
  l.count_down();
  EXPECT_EQ(str(l), "asyncband::latch{count: 2, waiters: 1}");
  l.arrive(2);
  s.run();
  EXPECT_EQ(str(l), "asyncband::latch{count: 0, waiters: 0}");
}

TEST(DebugOutput, WaitGroup) {
  wait_group wg;
  EXPECT_EQ(str(wg), "asyncband::wait_group{members: 1, member: true, waiters: 0}");
  std::optional<wait_group> other(wg);
  EXPECT_EQ(str(wg), "asyncband::wait_group{members: 2, member: true, waiters: 0}");
  test_scheduler s;
  spawn_waiters(s, 1, [&wg] { return wg.wait(); });  // the wait leaves the group first
  EXPECT_EQ(str(wg), "asyncband::wait_group{members: 1, member: false, waiters: 1}");
  other.reset();
  s.run();
  EXPECT_EQ(str(wg), "asyncband::wait_group{members: 0, member: false, waiters: 0}");
  const wait_group taken(std::move(wg));
  EXPECT_EQ(str(wg), "asyncband::wait_group{moved-from}");  // NOLINT(bugprone-use-after-move)
}

TEST(DebugOutput, Barrier) {
  barrier b(3);
  EXPECT_EQ(str(b), "asyncband::barrier{participants: 3, remaining: 3, generation: 0, waiters: 0}");
  test_scheduler s;
  spawn_waiters(s, 2, [&b] { return b.wait(); });
  EXPECT_EQ(str(b), "asyncband::barrier{participants: 3, remaining: 1, generation: 0, waiters: 2}");
  EXPECT_EQ(str(b.wait_blocking()), "asyncband::barrier_wait_result{leader: true}");
  s.run();
  EXPECT_EQ(str(b), "asyncband::barrier{participants: 3, remaining: 3, generation: 1, waiters: 0}");
}

TEST(DebugOutput, PhaserParticipantsAndBatches) {
  const auto p = phaser::create();
  EXPECT_EQ(str(*p), "asyncband::phaser{phase: 0, participants: 0, unarrived: 0, closed: false, waiters: 0}");
  phaser_participant a = p->enroll().value();
  phaser_participant b = p->enroll().value();
  EXPECT_EQ(str(a.arrive()), "ok(asyncband::phase_id{0})");
  EXPECT_EQ(str(a), "asyncband::phaser_participant{phase: 0, arrived: true}");
  EXPECT_EQ(str(b), "asyncband::phaser_participant{phase: 0, arrived: false}");
  test_scheduler s;
  spawn_waiters(s, 1, [&p] { return p->wait(phase_id{0}); });
  EXPECT_EQ(str(*p), "asyncband::phaser{phase: 0, participants: 2, unarrived: 1, closed: false, waiters: 1}");
  (void)b.arrive();
  s.run();
  EXPECT_EQ(str(*p), "asyncband::phaser{phase: 1, participants: 2, unarrived: 2, closed: false, waiters: 0}");
  EXPECT_EQ(str(a), "asyncband::phaser_participant{phase: 1, arrived: false}");

  phaser_batch batch = p->enroll(2).value();
  EXPECT_EQ(str(batch), "asyncband::phaser_batch{remaining: 2}");
  const std::optional<phaser_participant> taken = batch.take();
  EXPECT_EQ(str(batch), "asyncband::phaser_batch{remaining: 1}");
  const phaser_participant moved(std::move(a));
  EXPECT_EQ(str(a), "asyncband::phaser_participant{deregistered}");  // NOLINT(bugprone-use-after-move)
  p->close();
  EXPECT_EQ(str(*p), "asyncband::phaser{phase: 1, participants: 4, unarrived: 4, closed: true, waiters: 0}");
}

TEST(DebugOutput, Shutdown) {
  auto pair = shutdown::make_pair();
  shutdown::sender& tx = pair.first;
  shutdown::receiver& rx = pair.second;
  const shutdown::watcher w = rx.watch();
  EXPECT_EQ(str(tx), "asyncband::shutdown::sender{shutdown: false, receivers: 1}");
  EXPECT_EQ(str(rx), "asyncband::shutdown::receiver{shutdown: false}");
  EXPECT_EQ(str(w), "asyncband::shutdown::watcher{shutdown: false}");
  tx.shutdown();
  EXPECT_EQ(str(tx), "asyncband::shutdown::sender{shutdown: true, receivers: 1}");
  EXPECT_EQ(str(rx), "asyncband::shutdown::receiver{shutdown: true}");
  EXPECT_EQ(str(w), "asyncband::shutdown::watcher{shutdown: true}");
  rx.reset();
  EXPECT_EQ(str(rx), "asyncband::shutdown::receiver{moved-from}");
  EXPECT_EQ(str(tx), "asyncband::shutdown::sender{shutdown: true, receivers: 0}");
  const shutdown::sender taken(std::move(tx));
  EXPECT_EQ(str(tx), "asyncband::shutdown::sender{moved-from}");  // NOLINT(bugprone-use-after-move)
}

// ---------------------------------------------------------------------------------------------
// The once family

/// Runs `o`'s initialiser, which waits for `go`.
task<void> run_once(once& o, manual_reset_event& go) {
  auto init = [&go]() -> task<void> { co_await go.wait(); };
  co_await o.call_once(init);
}

TEST(DebugOutput, Once) {
  once o;
  manual_reset_event go;
  EXPECT_EQ(str(o), "asyncband::once{idle, waiters: 0}");
  test_scheduler s;
  s.spawn(run_once(o, go));
  spawn_waiters(s, 2, [&o] { return o.wait(); });
  EXPECT_EQ(str(o), "asyncband::once{running, waiters: 2}");
  go.set();
  s.run();
  EXPECT_EQ(str(o), "asyncband::once{completed, waiters: 0}");
}

task<void> init_cell(once_cell<int>& c, manual_reset_event& go) {
  auto init = [&go]() -> task<int> {
    co_await go.wait();
    co_return 42;
  };
  (void)co_await c.get_or_init(init);
}

TEST(DebugOutput, OnceCell) {
  once_cell<int> c;
  manual_reset_event go;
  EXPECT_EQ(str(c), "asyncband::once_cell{empty, waiters: 0}");
  test_scheduler s;
  s.spawn(init_cell(c, go));
  spawn_waiters(s, 1, [&c] { return c.wait(); });
  EXPECT_EQ(str(c), "asyncband::once_cell{running, waiters: 1}");
  go.set();
  s.run();
  EXPECT_EQ(str(c), "asyncband::once_cell{set, value: 42}");
  const once_cell<opaque> held{opaque{}};
  EXPECT_EQ(str(held), "asyncband::once_cell{set, value: ...}");
}

task<void> fly(singleflight::group<int, int>& g, manual_reset_event& go) {
  auto f = [&go]() -> task<int> {
    co_await go.wait();
    co_return 1;
  };
  (void)co_await g.work(7, f);
}

TEST(DebugOutput, OnceMapAndSingleflight) {
  once_map<int, int> m;
  EXPECT_EQ(str(m), "asyncband::once_map{size: 0}");
  EXPECT_EQ(m.compute_blocking(1, [] { return 10; }), 10);
  EXPECT_EQ(str(m), "asyncband::once_map{size: 1}");

  singleflight::group<int, int> g;
  manual_reset_event go;
  EXPECT_EQ(str(g), "asyncband::singleflight::group{flights: 0}");
  test_scheduler s;
  s.spawn(fly(g, go));
  s.run();
  EXPECT_EQ(str(g), "asyncband::singleflight::group{flights: 1}");
  go.set();
  s.run();
  EXPECT_EQ(str(g), "asyncband::singleflight::group{flights: 0}");
}

// ---------------------------------------------------------------------------------------------
// Locks

TEST(DebugOutput, SemaphoreAndPermits) {
  semaphore sem(asyncband::strict_fifo, 3);  // partial grants
  EXPECT_EQ(str(sem), "asyncband::semaphore{available: 3, waiters: 0}");
  std::optional<semaphore_permit> held = sem.try_acquire(2);
  ASSERT_TRUE(held);
  EXPECT_EQ(str(*held), "asyncband::semaphore_permit{count: 2}");
  EXPECT_EQ(str(sem), "asyncband::semaphore{available: 1, waiters: 0}");
  test_scheduler s;
  spawn_waiters(s, 2, [&sem] { return sem.acquire(2); });
  EXPECT_EQ(str(sem), "asyncband::semaphore{available: 0, waiters: 2}");
  held.reset();  // completes the first waiter, and part of the second
  EXPECT_EQ(str(sem), "asyncband::semaphore{available: 0, waiters: 1}");
  s.run();
  EXPECT_EQ(str(sem), "asyncband::semaphore{available: 3, waiters: 0}");
  EXPECT_EQ(str(semaphore_permit()), "asyncband::semaphore_permit{count: 0}");

  semaphore owing(1);
  owing.reduce_permits(3);
  EXPECT_EQ(str(owing), "asyncband::semaphore{available: 0, deficit: 2, waiters: 0}");

  auto shared = std::make_shared<semaphore>(2);
  const std::optional<owned_semaphore_permit> owned = try_acquire_owned(shared, 2);
  ASSERT_TRUE(owned);
  EXPECT_EQ(str(*owned), "asyncband::owned_semaphore_permit{count: 2}");
}

TEST(DebugOutput, MutexShowsWhetherItIsHeldAndItsWaiters) {
  mutex<int> m(42);
  EXPECT_EQ(str(m), "asyncband::mutex{unlocked, waiters: 0}");
  std::optional<mutex_guard<int>> g = m.try_lock();
  ASSERT_TRUE(g);
  EXPECT_EQ(str(m), "asyncband::mutex{locked, waiters: 0}");  // printing never locks
  EXPECT_EQ(str(*g), "asyncband::mutex_guard{locked, value: 42}");
  test_scheduler s;
  spawn_waiters(s, 2, [&m] { return m.lock(); });
  EXPECT_EQ(str(m), "asyncband::mutex{locked, waiters: 2}");
  g->unlock();  // frees the mutex and posts the first waiter's retry (bounded barging)
  EXPECT_EQ(str(*g), "asyncband::mutex_guard{unlocked}");
  EXPECT_EQ(str(m), "asyncband::mutex{unlocked, waiters: 1}");  // the retry is out of the queue
  s.run();
  EXPECT_EQ(str(m), "asyncband::mutex{unlocked, waiters: 0}");

  mutex<int> fifo(asyncband::strict_fifo, 42);
  g = fifo.try_lock();
  ASSERT_TRUE(g);
  spawn_waiters(s, 2, [&fifo] { return fifo.lock(); });
  g->unlock();  // hands the mutex to the first waiter
  EXPECT_EQ(str(fifo), "asyncband::mutex{locked, waiters: 1}");
  s.run();
  EXPECT_EQ(str(fifo), "asyncband::mutex{unlocked, waiters: 0}");
}

TEST(DebugOutput, MutexGuards) {
  mutex<int> m(42);
  mutex_guard<int> g = *m.try_lock();
  mutex_guard<int> moved(std::move(g));
  EXPECT_EQ(str(g), "asyncband::mutex_guard{unlocked}");  // NOLINT(bugprone-use-after-move)
  const mapped_mutex_guard<int> part = std::move(moved).map([](int& v) -> int& { return v; });
  EXPECT_EQ(str(part), "asyncband::mapped_mutex_guard{locked, value: 42}");

  mutex<> plain;
  EXPECT_EQ(str(*plain.try_lock()), "asyncband::mutex_guard{locked, value: ...}");

  auto shared = std::make_shared<mutex<int>>(7);
  owned_mutex_guard<int> owned = *try_lock_owned(shared);
  EXPECT_EQ(str(owned), "asyncband::owned_mutex_guard{locked, value: 7}");
  EXPECT_EQ(str(*shared), "asyncband::mutex{locked, waiters: 0}");
  const auto owned_part = std::move(owned).map([](int& v) -> int& { return v; });
  EXPECT_EQ(str(owned_part), "asyncband::owned_mapped_mutex_guard{locked, value: 7}");
  EXPECT_EQ(str(owned), "asyncband::owned_mutex_guard{unlocked}");  // NOLINT(bugprone-use-after-move)
}

// Strict FIFO, so that the reader queues behind the writer and the queue shows both.
TEST(DebugOutput, RwlockShowsReadersWriterAndWaiters) {
  rwlock<int> l(asyncband::strict_fifo, 5);
  EXPECT_EQ(str(l), "asyncband::rwlock{unlocked, waiters: 0}");
  std::optional<rwlock_read_guard<int>> r1 = l.try_read();
  std::optional<rwlock_read_guard<int>> r2 = l.try_read();
  EXPECT_EQ(str(l), "asyncband::rwlock{read-locked, readers: 2, waiters: 0}");
  EXPECT_EQ(str(*r1), "asyncband::rwlock_read_guard{locked, value: 5}");
  test_scheduler s;
  spawn_waiters(s, 1, [&l] { return l.write(); });  // holds every share but the readers' meanwhile
  EXPECT_EQ(str(l), "asyncband::rwlock{read-locked, readers: 2, waiters: 1}");
  spawn_waiters(s, 1, [&l] { return l.read(); });
  EXPECT_EQ(str(l), "asyncband::rwlock{read-locked, readers: 2, waiters: 2}");
  r1.reset();
  EXPECT_EQ(str(l), "asyncband::rwlock{read-locked, readers: 1, waiters: 2}");
  r2.reset();  // the writer has the lock, the reader still waits
  EXPECT_EQ(str(l), "asyncband::rwlock{write-locked, waiters: 1}");
  s.run();
  EXPECT_EQ(str(l), "asyncband::rwlock{unlocked, waiters: 0}");

  std::optional<rwlock_write_guard<int>> w = l.try_write();
  EXPECT_EQ(str(l), "asyncband::rwlock{write-locked, waiters: 0}");
  EXPECT_EQ(str(*w), "asyncband::rwlock_write_guard{locked, value: 5}");
  w->unlock();
  EXPECT_EQ(str(*w), "asyncband::rwlock_write_guard{unlocked}");
}

// With bounded barging a reader takes a free share past the queued writer, and the writer's
// retry in flight is not a queued waiter: the lock shows unlocked, nobody queued, until it runs.
TEST(DebugOutput, BargingRwlockShowsTheReaderThatBargedAndTheRetryAsUnqueued) {
  rwlock<int> l(5);
  std::optional<rwlock_read_guard<int>> r1 = l.try_read();
  test_scheduler s;
  spawn_waiters(s, 1, [&l] { return l.write(); });
  EXPECT_EQ(str(l), "asyncband::rwlock{read-locked, readers: 1, waiters: 1}");
  std::optional<rwlock_read_guard<int>> r2 = l.try_read();
  EXPECT_EQ(str(l), "asyncband::rwlock{read-locked, readers: 2, waiters: 1}");
  r1.reset();
  r2.reset();  // posts the writer's retry: the lock is free
  EXPECT_EQ(str(l), "asyncband::rwlock{unlocked, waiters: 0}");
  s.run();
  EXPECT_EQ(str(l), "asyncband::rwlock{unlocked, waiters: 0}");
}

TEST(DebugOutput, OwnedRwlockGuards) {
  auto l = std::make_shared<rwlock<int>>(9);
  std::optional<owned_rwlock_read_guard<int>> r = try_read_owned(l);
  EXPECT_EQ(str(*r), "asyncband::owned_rwlock_read_guard{locked, value: 9}");
  r.reset();
  std::optional<owned_rwlock_write_guard<int>> w = try_write_owned(l);
  EXPECT_EQ(str(*w), "asyncband::owned_rwlock_write_guard{locked, value: 9}");
  EXPECT_EQ(str(*l), "asyncband::rwlock{write-locked, waiters: 0}");
}

task<void> wait_for_notification(condvar& cv, mutex<int>& m) {
  mutex_guard<int> g = co_await m.lock();
  g = co_await cv.wait(std::move(g));
}

TEST(DebugOutput, Condvar) {
  mutex<int> m;
  condvar cv;
  EXPECT_EQ(str(cv), "asyncband::condvar{waiters: 0}");
  test_scheduler s;
  s.spawn(wait_for_notification(cv, m));
  s.spawn(wait_for_notification(cv, m));
  s.run();
  EXPECT_EQ(str(cv), "asyncband::condvar{waiters: 2}");
  EXPECT_EQ(str(m), "asyncband::mutex{unlocked, waiters: 0}");
  cv.notify_all();
  s.run();
  EXPECT_EQ(str(cv), "asyncband::condvar{waiters: 0}");
}

// ---------------------------------------------------------------------------------------------
// Channels

TEST(DebugOutput, Oneshot) {
  auto [tx, rx] = oneshot::channel<int>();
  EXPECT_EQ(str(tx), "asyncband::oneshot::sender{open}");
  EXPECT_EQ(str(rx), "asyncband::oneshot::receiver{pending}");
  EXPECT_EQ(str(tx.send(42)), "ok");
  EXPECT_EQ(str(tx), "asyncband::oneshot::sender{spent}");
  EXPECT_EQ(str(rx), "asyncband::oneshot::receiver{ready}");
  EXPECT_EQ(str(rx.try_recv()), "ok(42)");
  EXPECT_EQ(str(rx), "asyncband::oneshot::receiver{terminated}");
  EXPECT_EQ(str(rx.try_recv()), "closed");

  auto [tx2, rx2] = oneshot::channel<int>();
  EXPECT_EQ(str(rx2.try_recv()), "empty");
  rx2.close();
  EXPECT_EQ(str(tx2), "asyncband::oneshot::sender{closed}");
  const oneshot::receiver<int> taken(std::move(rx2));
  EXPECT_EQ(str(rx2), "asyncband::oneshot::receiver{moved-from}");  // NOLINT(bugprone-use-after-move)
}

TEST(DebugOutput, MpscBounded) {
  auto [tx, rx] = mpsc::bounded<int>(4);
  EXPECT_EQ(str(tx), "asyncband::mpsc::sender{capacity: 4, free: 4, closed: false}");
  EXPECT_EQ(str(rx), "asyncband::mpsc::receiver{len: 0, capacity: 4, closed: false}");
  EXPECT_EQ(str(tx.try_send(1)), "ok");
  EXPECT_EQ(str(tx.try_send(2)), "ok");
  auto permit = tx.try_reserve(1);
  EXPECT_EQ(str(permit), "ok(asyncband::mpsc::permit{units: 1})");
  auto owned = tx.try_reserve_owned(1);
  EXPECT_EQ(str(*owned), "asyncband::mpsc::owned_permit{units: 1}");
  EXPECT_EQ(str(tx), "asyncband::mpsc::sender{capacity: 4, free: 0, closed: false}");
  EXPECT_EQ(str(rx), "asyncband::mpsc::receiver{len: 2, capacity: 4, closed: false}");
  EXPECT_EQ(str(tx.try_send(3)), "full(3)");
  EXPECT_EQ(str(tx.try_reserve(1)), "full");
  EXPECT_EQ(str(rx.try_recv()), "ok(1)");
  rx.close();
  EXPECT_EQ(str(tx), "asyncband::mpsc::sender{capacity: 4, free: 0, closed: true}");
  EXPECT_EQ(str(rx), "asyncband::mpsc::receiver{len: 1, capacity: 4, closed: true}");
  EXPECT_EQ(str(tx.try_send(4)), "closed(4)");

  auto [tx2, rx2] = mpsc::bounded<int>(1);
  const mpsc::sender<int> taken(std::move(tx2));
  EXPECT_EQ(str(tx2), "asyncband::mpsc::sender{moved-from}");  // NOLINT(bugprone-use-after-move)
  const mpsc::receiver<int> rx_taken(std::move(rx2));
  EXPECT_EQ(str(rx2), "asyncband::mpsc::receiver{moved-from}");  // NOLINT(bugprone-use-after-move)
}

TEST(DebugOutput, MpscUnbounded) {
  auto [tx, rx] = mpsc::unbounded<int>();
  EXPECT_EQ(str(tx), "asyncband::mpsc::unbounded_sender{len: 0, closed: false}");
  EXPECT_EQ(str(rx), "asyncband::mpsc::unbounded_receiver{len: 0, closed: false}");
  EXPECT_EQ(str(tx.send(1)), "ok");
  EXPECT_EQ(str(tx), "asyncband::mpsc::unbounded_sender{len: 1, closed: false}");
  { const mpsc::unbounded_sender<int> gone(std::move(tx)); }            // the last sender goes
  EXPECT_EQ(str(tx), "asyncband::mpsc::unbounded_sender{moved-from}");  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(str(rx), "asyncband::mpsc::unbounded_receiver{len: 1, closed: true}");
  const mpsc::unbounded_receiver<int> taken(std::move(rx));
  EXPECT_EQ(str(rx), "asyncband::mpsc::unbounded_receiver{moved-from}");  // NOLINT(bugprone-use-after-move)
}

TEST(DebugOutput, MpmcChannels) {
  auto [tx, rx] = mpmc::bounded<int>(4);
  EXPECT_EQ(str(tx), "asyncband::mpmc::sender{len: 0, capacity: 4, free: 4, closed: false}");
  EXPECT_EQ(str(rx), "asyncband::mpmc::receiver{len: 0, capacity: 4, closed: false}");
  EXPECT_EQ(str(tx.try_send(1)), "ok");
  auto permit = tx.try_reserve(2);
  EXPECT_EQ(str(*permit), "asyncband::mpmc::permit{units: 2}");
  EXPECT_EQ(str(tx), "asyncband::mpmc::sender{len: 1, capacity: 4, free: 1, closed: false}");
  EXPECT_EQ(str(rx), "asyncband::mpmc::receiver{len: 1, capacity: 4, closed: false}");
  tx.close();
  EXPECT_EQ(str(tx), "asyncband::mpmc::sender{len: 1, capacity: 4, free: 0, closed: true}");
  EXPECT_EQ(str(rx), "asyncband::mpmc::receiver{len: 1, capacity: 4, closed: true}");

  auto [utx, urx] = mpmc::unbounded<int>();
  EXPECT_EQ(str(utx.send(5)), "ok");
  EXPECT_EQ(str(utx), "asyncband::mpmc::unbounded_sender{len: 1, closed: false}");
  EXPECT_EQ(str(urx), "asyncband::mpmc::unbounded_receiver{len: 1, closed: false}");
  EXPECT_EQ(str(urx.try_recv()), "ok(5)");
  EXPECT_EQ(str(urx.try_recv()), "empty");
  const mpmc::unbounded_receiver<int> taken(std::move(urx));
  EXPECT_EQ(str(urx), "asyncband::mpmc::unbounded_receiver{moved-from}");  // NOLINT(bugprone-use-after-move)
}

TEST(DebugOutput, Broadcast) {
  auto [tx, rx] = broadcast::overflow<int>(2);
  EXPECT_EQ(str(tx),
            "asyncband::broadcast::overflow_sender{len: 0, capacity: 2, receivers: 1, closed: false}");
  EXPECT_EQ(str(rx), "asyncband::broadcast::overflow_receiver{len: 0, capacity: 2, closed: false}");
  EXPECT_EQ(str(rx.try_recv()), "empty");
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(str(tx.send(i)), "ok");
  EXPECT_EQ(str(tx),
            "asyncband::broadcast::overflow_sender{len: 2, capacity: 2, receivers: 1, closed: false}");
  EXPECT_EQ(str(rx), "asyncband::broadcast::overflow_receiver{len: 3, capacity: 2, closed: false}");
  EXPECT_EQ(str(rx.try_recv()), "lagged(1)");
  EXPECT_EQ(str(rx.try_recv()), "ok(2)");
  tx.close();
  EXPECT_EQ(str(rx), "asyncband::broadcast::overflow_receiver{len: 1, capacity: 2, closed: true}");
  EXPECT_EQ(str(rx.try_recv()), "ok(3)");
  EXPECT_EQ(str(rx.try_recv()), "closed");

  auto [btx, brx] = broadcast::bounded<int>(1);
  EXPECT_EQ(str(btx.try_send(1)), "ok");
  EXPECT_EQ(str(btx.try_send(2)), "full(2)");
  EXPECT_EQ(str(btx),
            "asyncband::broadcast::bounded_sender{len: 1, capacity: 1, receivers: 1, closed: false}");
  EXPECT_EQ(str(brx), "asyncband::broadcast::bounded_receiver{len: 1, capacity: 1, closed: false}");
  const broadcast::bounded_receiver<int> taken(std::move(brx));
  EXPECT_EQ(str(brx),
            "asyncband::broadcast::bounded_receiver{moved-from}");  // NOLINT(bugprone-use-after-move)
  const broadcast::bounded_sender<int> sender_taken(std::move(btx));
  EXPECT_EQ(str(btx), "asyncband::broadcast::bounded_sender{moved-from}");  // NOLINT(bugprone-use-after-move)
}

TEST(DebugOutput, Watch) {
  auto [tx, rx] = watch::channel<int>(1);
  EXPECT_EQ(str(tx), "asyncband::watch::sender{value: 1, receivers: 1}");
  EXPECT_EQ(str(rx), "asyncband::watch::receiver{value: 1, changed: false, closed: false}");
  EXPECT_EQ(str(tx.send(2)), "ok");
  EXPECT_EQ(str(rx), "asyncband::watch::receiver{value: 2, changed: true, closed: false}");
  watch::borrowed<int> b = rx.borrow_and_update();
  EXPECT_EQ(str(b), "asyncband::watch::borrowed{value: 2, changed: true}");
  EXPECT_EQ(str(rx), "asyncband::watch::receiver{value: 2, changed: false, closed: false}");
  const watch::borrowed<int> moved(std::move(b));
  EXPECT_EQ(str(b), "asyncband::watch::borrowed{moved-from}");  // NOLINT(bugprone-use-after-move)
  { const watch::sender<int> gone(std::move(tx)); }
  EXPECT_EQ(str(tx), "asyncband::watch::sender{moved-from}");  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(str(rx), "asyncband::watch::receiver{value: 2, changed: false, closed: true}");

  auto [otx, orx] = watch::channel<opaque>();
  EXPECT_EQ(str(otx), "asyncband::watch::sender{value: ..., receivers: 1}");
}

// ---------------------------------------------------------------------------------------------
// when_any

TEST(DebugOutput, WhenAnyResults) {
  manual_reset_event never;
  manual_reset_event set(true);
  EXPECT_EQ(str(block_on(when_any(never.wait(), set.wait()))), "asyncband::any_result{index: 1}");

  auto [tx, rx] = mpsc::unbounded<int>();
  EXPECT_EQ(str(tx.send(42)), "ok");
  EXPECT_EQ(str(block_on(when_any(never.wait(), rx.recv()))),
            "asyncband::any_result{index: 1, outcome: ok(42)}");

  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_EQ(str(block_on(when_any(stopped.get_token(), never.wait()))), "asyncband::any_result{cancelled}");

  std::vector<mpsc::unbounded_receiver<int>> rxs;
  std::vector<mpsc::unbounded_sender<int>> txs;
  for (int i = 0; i < 2; ++i) {
    auto channel = mpsc::unbounded<int>();
    txs.push_back(std::move(channel.first));
    rxs.push_back(std::move(channel.second));
  }
  EXPECT_EQ(str(txs[1].send(7)), "ok");
  EXPECT_EQ(str(block_on(when_any_of(rxs, [](auto& r) { return r.recv(); }))),
            "asyncband::selection{index: 1, size: 2, outcome: ok(7)}");
  EXPECT_EQ(str(block_on(when_any_of(
                rxs, [](auto& r) { return r.recv(); }, stopped.get_token()))),
            "asyncband::selection{cancelled, size: 2}");
}

// ---------------------------------------------------------------------------------------------
// Printing while other threads use the primitives: reads only what may be read concurrently
// (TSan checks it), and takes no lock a user of the primitive could be waiting behind.

TEST(DebugOutput, PrintsWhileOtherThreadsUseThePrimitives) {
  mutex<int> m(0);
  rwlock<int> l(0);
  semaphore sem(2);
  manual_reset_event e;
  auto channel = mpmc::bounded<int>(4);
  mpmc::sender<int>& tx = channel.first;
  mpmc::receiver<int>& rx = channel.second;
  auto watched = watch::channel<int>(0);
  watch::sender<int>& wtx = watched.first;
  // The handles printed here are copies: each handle is used by one thread at a time.
  const mpmc::sender<int> tx_seen = tx;
  const mpmc::receiver<int> rx_seen = rx;
  const watch::receiver<int> wrx_seen = watched.second;
  std::atomic<int> working{2};
  const auto work = [&](int id) {
    asyncband_test::repeat_for(20000, std::chrono::milliseconds(200), [&](int i) {
      {
        const mutex_guard<int> g = m.lock_blocking();
        *g += 1;
      }
      if (id == 0) {
        (void)l.write_blocking();
        e.set();
        (void)tx.send_blocking(i);
        (void)wtx.send(i);
      } else {
        (void)l.read_blocking();
        e.reset();
        (void)rx.recv_blocking();
      }
      const semaphore_permit p = sem.acquire_blocking(static_cast<std::size_t>(1 + id));
    });
    if (id == 0) tx.close();  // lets the receiving thread finish
    if (id == 1) {
      while (rx.recv_blocking().ok()) {
      }
    }
    working.fetch_sub(1);
  };
  std::thread a(work, 0);
  std::thread b(work, 1);
  int printed = 0;
  while (working.load() != 0) {
    const std::string text =
        str(m) + str(l) + str(sem) + str(e) + str(tx_seen) + str(rx_seen) + str(wrx_seen);
    EXPECT_EQ(text.rfind("asyncband::mutex{", 0), 0U) << text;
    ++printed;
  }
  a.join();
  b.join();
  EXPECT_GT(printed, 0);
  EXPECT_EQ(str(m), "asyncband::mutex{unlocked, waiters: 0}");
  EXPECT_EQ(str(sem), "asyncband::semaphore{available: 2, waiters: 0}");
}

// ---------------------------------------------------------------------------------------------
// std::format

#if ASYNCBAND_STD_FORMAT
TEST(DebugOutput, StdFormatWritesWhatOperatorLessLessWrites) {
  mutex<int> m(1);
  manual_reset_event e(true);
  auto [tx, rx] = mpsc::bounded<int>(2);
  const result<int> r(3);
  EXPECT_EQ(std::format("{}", m), "asyncband::mutex{unlocked, waiters: 0}");
  EXPECT_EQ(std::format("{}", e), str(e));
  EXPECT_EQ(std::format("{} / {}", tx, rx), str(tx) + " / " + str(rx));
  EXPECT_EQ(std::format("{}", r), "ok(3)");
  EXPECT_EQ(std::format("{}", wait_status::closed), "closed");
  EXPECT_EQ(std::format("{}", *m.try_lock()), "asyncband::mutex_guard{locked, value: 1}");
  EXPECT_THROW((void)std::vformat("{:x}", std::make_format_args(m)), std::format_error);
}

/// std::format("{}", value) writes what operator<< writes.
template <class T>
void formats_as_streamed(const T& value) {
  EXPECT_EQ(std::format("{}", value), str(value));
}

// One object of every type with a formatter: each specialisation is compiled and used once.
TEST(DebugOutput, StdFormatCoversEveryType) {
  formats_as_streamed(wait_status::ok);
  formats_as_streamed(send_status::full);
  formats_as_streamed(recv_status::empty);
  formats_as_streamed(broadcast::recv_status::lagged);
  formats_as_streamed(broadcast::mode::bounded);
  formats_as_streamed(barrier_wait_result{true});
  formats_as_streamed(phase_id{2});
  formats_as_streamed(result<int>(4));
  formats_as_streamed(send_result<int>(send_status::full, 3));
  formats_as_streamed(try_recv_result<int>(recv_status::empty));
  formats_as_streamed(init_result<int, int>::with_error(5));
  formats_as_streamed(broadcast::recv_result<int>::lagged_by(2));

  manual_reset_event set_event(true);
  formats_as_streamed(set_event);
  formats_as_streamed(auto_reset_event());
  formats_as_streamed(latch(1));
  formats_as_streamed(wait_group());
  formats_as_streamed(barrier(2));
  const auto ph = phaser::create();
  formats_as_streamed(*ph);
  formats_as_streamed(ph->enroll().value());
  formats_as_streamed(ph->enroll(1).value());
  const auto pair = shutdown::make_pair();
  formats_as_streamed(pair.first);
  formats_as_streamed(pair.second);
  formats_as_streamed(pair.second.watch());
  formats_as_streamed(once());
  formats_as_streamed(once_cell<int>(3));
  formats_as_streamed(once_map<int, int>());
  formats_as_streamed(singleflight::group<int, int>());

  semaphore sem(2);
  formats_as_streamed(sem);
  formats_as_streamed(*sem.try_acquire(1));
  formats_as_streamed(*try_acquire_owned(std::make_shared<semaphore>(1), 1));
  mutex<int> m(1);
  formats_as_streamed(m);
  formats_as_streamed(*m.try_lock());
  formats_as_streamed((*m.try_lock()).map([](int& v) -> int& { return v; }));
  const auto shared_m = std::make_shared<mutex<int>>(2);
  formats_as_streamed(*try_lock_owned(shared_m));
  formats_as_streamed((*try_lock_owned(shared_m)).map([](int& v) -> int& { return v; }));
  rwlock<int> rw(3);
  formats_as_streamed(rw);
  formats_as_streamed(*rw.try_read());
  formats_as_streamed(*rw.try_write());
  const auto shared_rw = std::make_shared<rwlock<int>>(4);
  formats_as_streamed(*try_read_owned(shared_rw));
  formats_as_streamed(*try_write_owned(shared_rw));
  formats_as_streamed(condvar());

  const auto os = oneshot::channel<int>();
  formats_as_streamed(os.first);
  formats_as_streamed(os.second);
  auto mb = mpsc::bounded<int>(2);
  formats_as_streamed(mb.first);
  formats_as_streamed(mb.second);
  {
    auto permit = mb.first.try_reserve(1);
    formats_as_streamed(permit);
    formats_as_streamed(*permit);
    auto owned = mb.first.try_reserve_owned(1);
    formats_as_streamed(*owned);
  }
  auto mu = mpsc::unbounded<int>();
  formats_as_streamed(mu.first);
  formats_as_streamed(mu.second);
  auto pb = mpmc::bounded<int>(2);
  formats_as_streamed(pb.first);
  formats_as_streamed(pb.second);
  {
    auto permit = pb.first.try_reserve(1);
    formats_as_streamed(*permit);
  }
  const auto pu = mpmc::unbounded<int>();
  formats_as_streamed(pu.first);
  formats_as_streamed(pu.second);
  const auto bo = broadcast::overflow<int>(2);
  formats_as_streamed(bo.first);
  formats_as_streamed(bo.second);
  const auto bb = broadcast::bounded<int>(2);
  formats_as_streamed(bb.first);
  formats_as_streamed(bb.second);
  const auto w = watch::channel<int>(5);
  formats_as_streamed(w.first);
  formats_as_streamed(w.second);
  formats_as_streamed(w.second.borrow());

  manual_reset_event never;
  formats_as_streamed(block_on(when_any(never.wait(), set_event.wait())));
  std::vector<mpsc::unbounded_receiver<int>> rxs;
  rxs.push_back(std::move(mu.second));
  EXPECT_EQ(str(mu.first.send(9)), "ok");
  formats_as_streamed(block_on(when_any_of(rxs, [](auto& r) { return r.recv(); })));
}
#endif

}  // namespace
