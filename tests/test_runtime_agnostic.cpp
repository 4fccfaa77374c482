// SPDX-License-Identifier: Apache-2.0
// The primitives from three kinds of caller: a minimal coroutine type written here with no
// scheduler hook (wake-ups resume it inline on the waking thread), runtime::task on a
// runtime::thread_pool (wake-ups are posted to the pool: a broadcast returns before any waiter
// runs, and the waiters run in parallel), and block_on from a plain thread.
#include <gtest/gtest.h>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/stop_token.hpp>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <exception>
#include <optional>
#include <thread>

#include "support/probe.hpp"

namespace {

namespace ab = asyncband;
using ab::wait_status;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------
// A minimal eager, self-destroying coroutine type with no asyncband_scheduler() hook.
using bare_task = asyncband_test::bare_coroutine;
static_assert(!ab::scheduler_aware_promise<bare_task::promise_type>);

// Where the coroutine continued after its wait, and with what.
struct observed {
  std::atomic<bool> done{false};
  std::thread::id thread;
  std::optional<wait_status> status;
  bool leader = false;
};

// `make_wait` is a parameter, so it lives in the coroutine frame.
template <class MakeWait>
bare_task await_and_record(MakeWait make_wait, observed& out) {
  using yield_t = ab::detail::await_result_t<decltype(make_wait())>;
  if constexpr (std::is_void_v<yield_t>) {
    co_await make_wait();
    out.status = wait_status::ok;
  } else {
    auto r = co_await make_wait();
    if constexpr (std::is_same_v<decltype(r), ab::barrier_wait_result>) {
      out.status = wait_status::ok;
      out.leader = r.is_leader();
    } else {
      out.status = r.status();
    }
  }
  out.thread = std::this_thread::get_id();
  out.done.store(true);
}

// Runs `wake` on a new thread and returns that thread's id once it has finished.
template <class Wake>
std::thread::id wake_from_thread(Wake wake) {
  std::thread waker(wake);
  const std::thread::id id = waker.get_id();
  waker.join();
  return id;
}

TEST(bare_coroutine, manual_reset_event_resumes_inline_on_the_setter) {
  ab::manual_reset_event ev;
  observed o;
  await_and_record([&] { return ev.wait(); }, o);
  EXPECT_FALSE(o.done.load());
  const auto waker = wake_from_thread([&] { ev.set(); });
  ASSERT_TRUE(o.done.load()) << "set() returned before the inline waiter ran";
  EXPECT_EQ(o.thread, waker);
}

TEST(bare_coroutine, auto_reset_event_resumes_inline_on_the_notifier) {
  ab::auto_reset_event ev;
  observed o;
  await_and_record([&] { return ev.wait(); }, o);
  EXPECT_FALSE(o.done.load());
  const auto waker = wake_from_thread([&] { ev.notify_one(); });
  ASSERT_TRUE(o.done.load());
  EXPECT_EQ(o.thread, waker);
  EXPECT_FALSE(ev.is_set());
}

TEST(bare_coroutine, latch_resumes_inline_on_the_final_arrival) {
  ab::latch lat(2);
  observed o;
  await_and_record([&] { return lat.wait(); }, o);
  lat.count_down();
  EXPECT_FALSE(o.done.load());
  const auto waker = wake_from_thread([&] { lat.count_down(); });
  ASSERT_TRUE(o.done.load());
  EXPECT_EQ(o.thread, waker);
}

TEST(bare_coroutine, wait_group_resumes_inline_on_the_last_leaving_member) {
  ab::wait_group wg;
  std::optional<ab::wait_group> member(wg);
  observed o;
  await_and_record([&] { return wg.wait(); }, o);
  EXPECT_FALSE(o.done.load());
  const auto waker = wake_from_thread([&] { member.reset(); });
  ASSERT_TRUE(o.done.load());
  EXPECT_EQ(o.thread, waker);
}

TEST(bare_coroutine, barrier_resumes_inline_on_the_completing_arrival) {
  ab::barrier bar(2);
  observed o;
  await_and_record([&] { return bar.wait(); }, o);
  EXPECT_FALSE(o.done.load());
  bool waker_led = false;
  const auto waker = wake_from_thread([&] { waker_led = bar.wait_blocking().is_leader(); });
  ASSERT_TRUE(o.done.load());
  EXPECT_EQ(o.thread, waker);
  EXPECT_TRUE(waker_led);
  EXPECT_FALSE(o.leader);
}

TEST(bare_coroutine, stop_request_resumes_inline_on_the_requesting_thread) {
  ab::manual_reset_event ev;
  asyncband::stop_source stop;
  observed o;
  await_and_record([&] { return ev.wait(stop.get_token()); }, o);
  EXPECT_FALSE(o.done.load());
  const auto waker = wake_from_thread([&] { stop.request_stop(); });
  ASSERT_TRUE(o.done.load());
  EXPECT_EQ(o.thread, waker);
  EXPECT_EQ(o.status, wait_status::cancelled);
}

// ---------------------------------------------------------------------------------------------
// runtime::task on runtime::thread_pool.

// Starts `t` inline on this thread, as a root whose scheduler is `s`: when this returns, the
// task has run up to its first suspension (its waiter is queued), and its wake-ups go to `s`.
struct eager_root {
  struct promise_type {
    ab::scheduler_ref scheduler;
    [[nodiscard]] ab::scheduler_ref asyncband_scheduler() const noexcept { return scheduler; }
    eager_root get_return_object() noexcept {
      return eager_root{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
  std::coroutine_handle<promise_type> handle;
};

eager_root run_root(ab::runtime::task<void> t) {
  co_await std::move(t);
}

void start_inline_on(ab::scheduler_ref s, ab::runtime::task<void> t) {
  const auto root = run_root(std::move(t));
  root.handle.promise().scheduler = s;
  root.handle.resume();
}

TEST(runtime_task_on_pool, broadcast_set_returns_before_waiters_run_in_parallel_on_the_pool) {
  constexpr int waiters = 8;
  ab::runtime::thread_pool pool(2);
  ab::manual_reset_event ev;
  ab::manual_reset_event gate;
  ab::latch two_at_gate(2);  // two waiters are blocked at the gate at the same time
  ab::latch finished(waiters);
  std::atomic<int> at_gate{0};
  std::atomic<bool> set_returned{false};
  std::atomic<int> off_pool{0};
  std::atomic<int> gate_timeouts{0};

  auto waiter = [&]() -> ab::runtime::task<void> {
    co_await ev.wait();
    if (!pool.on_worker_thread()) off_pool.fetch_add(1);
    if (at_gate.fetch_add(1) < 2) two_at_gate.count_down();
    // Blocks this pool thread until the test opens the gate, which it does only after set()
    // returned and two waiters are here at once. A waiter run inline by set() would block set()
    // itself: the bounded wait turns that deadlock into a failure.
    if (!gate.wait_timeout(10s).ok()) gate_timeouts.fetch_add(1);
    if (!set_returned.load()) off_pool.fetch_add(1);
    finished.count_down();
  };
  for (int i = 0; i < waiters; ++i) start_inline_on(pool.ref(), waiter());  // all queued now
  EXPECT_EQ(at_gate.load(), 0);

  ev.set();
  set_returned.store(true);

  const auto both = two_at_gate.wait_timeout(10s);
  gate.set();
  ASSERT_TRUE(both.ok()) << "two waiters were never at the gate together: they did not run in parallel";
  ASSERT_TRUE(finished.wait_timeout(10s).ok()) << "waiters did not finish";
  EXPECT_EQ(gate_timeouts.load(), 0) << "a waiter ran inside set(), which blocked until the gate timed out";
  EXPECT_EQ(off_pool.load(), 0);
  EXPECT_EQ(at_gate.load(), waiters);
}

TEST(runtime_task_on_pool, each_primitive_resumes_on_a_pool_thread) {
  ab::runtime::thread_pool pool(2);
  ab::auto_reset_event are;
  ab::latch lat(1);
  ab::barrier bar(2);
  ab::wait_group wg;
  std::optional<ab::wait_group> member(wg);
  ab::latch done(5);
  std::atomic<int> on_pool{0};
  std::atomic<int> leaders{0};
  auto record = [&] {
    if (pool.on_worker_thread()) on_pool.fetch_add(1);
    done.count_down();
  };
  // Named closures: a coroutine lambda's captures live in the closure, not in the frame.
  auto on_are = [&]() -> ab::runtime::task<void> {
    co_await are.wait();
    record();
  };
  auto on_latch = [&]() -> ab::runtime::task<void> {
    EXPECT_TRUE((co_await lat.wait(asyncband::stop_token{})).ok());
    record();
  };
  auto on_wg = [&]() -> ab::runtime::task<void> {
    co_await wg.wait();
    record();
  };
  auto on_barrier = [&]() -> ab::runtime::task<void> {
    if ((co_await bar.wait()).is_leader()) leaders.fetch_add(1);
    record();
  };
  start_inline_on(pool.ref(), on_are());
  start_inline_on(pool.ref(), on_latch());
  start_inline_on(pool.ref(), on_wg());
  for (int i = 0; i < 2; ++i) ab::runtime::spawn(pool.ref(), on_barrier());
  are.notify_one();
  lat.count_down();
  member.reset();
  ASSERT_TRUE(done.wait_timeout(10s).ok()) << "a waiter never resumed";
  EXPECT_EQ(on_pool.load(), 5);
  EXPECT_EQ(leaders.load(), 1);
}

TEST(runtime_task_on_pool, stop_request_resumes_on_the_pool) {
  ab::runtime::thread_pool pool(2);
  ab::manual_reset_event ev;
  asyncband::stop_source stop;
  ab::latch done(1);
  std::optional<wait_status> status;
  bool on_pool = false;
  auto waiter = [&]() -> ab::runtime::task<void> {
    status = (co_await ev.wait(stop.get_token())).status();
    on_pool = pool.on_worker_thread();
    done.count_down();
  };
  start_inline_on(pool.ref(), waiter());
  stop.request_stop();
  ASSERT_TRUE(done.wait_timeout(10s).ok());
  EXPECT_EQ(status, wait_status::cancelled);
  EXPECT_TRUE(on_pool);
}

// ---------------------------------------------------------------------------------------------
// block_on from a plain thread.

TEST(block_on_primitives, each_primitive) {
  ab::manual_reset_event ev;
  ab::latch lat(1);
  ab::barrier bar(2);
  ab::auto_reset_event are;
  bool helper_led = false;
  std::thread helper([&] {
    ev.set();
    lat.count_down();
    helper_led = bar.wait_blocking().is_leader();
    are.notify_one();
  });
  ab::block_on(ev.wait());
  EXPECT_TRUE(ab::block_on(lat.wait(asyncband::stop_token{})).ok());
  const bool main_led = ab::block_on(bar.wait()).is_leader();
  ab::block_on(are.wait());
  helper.join();
  EXPECT_EQ(bar.generation(), 1u);
  EXPECT_NE(main_led, helper_led);
  EXPECT_FALSE(are.is_set());
}

TEST(block_on_primitives, barrier_has_exactly_one_leader) {
  ab::barrier bar(2);
  bool helper_led = false;
  std::thread helper([&] { helper_led = bar.wait_blocking().is_leader(); });
  const bool main_led = ab::block_on(bar.wait()).is_leader();
  helper.join();
  EXPECT_NE(helper_led, main_led);
  EXPECT_EQ(bar.generation(), 1u);
}

TEST(block_on_primitives, cancelled_by_another_thread) {
  ab::latch lat(1);
  asyncband::stop_source stop;
  std::thread canceller([&] { stop.request_stop(); });
  const auto r = ab::block_on(lat.wait(stop.get_token()));
  canceller.join();
  EXPECT_TRUE(r.cancelled());
  EXPECT_EQ(lat.count(), 1);
}

TEST(block_on_primitives, a_task_that_waits_on_the_pool) {
  ab::runtime::thread_pool pool(2);
  ab::wait_group wg;
  std::optional<ab::wait_group> member(wg);
  auto t = [&]() -> ab::runtime::task<bool> {
    co_await pool.schedule();
    co_await wg.wait();
    co_return pool.on_worker_thread();
  };
  std::thread leaver([&] { member.reset(); });
  const bool resumed_on_pool = ab::block_on(t());
  leaver.join();
  EXPECT_TRUE(resumed_on_pool);
  EXPECT_EQ(wg.members(), 0u);
}

}  // namespace
