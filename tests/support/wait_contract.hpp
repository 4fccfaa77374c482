// SPDX-License-Identifier: Apache-2.0
// Scenarios shared by the tests of the primitives whose waits take no arrival of their own
// (manual_reset_event, auto_reset_event, latch): cancellation and the deterministic races at the
// waiter core's test points, the destruction of suspended waiters, and the blocking twins. Each
// scenario takes a fresh primitive and a `wake` callable (set(), notify_one(), the final
// count_down()); where the primitives' contracts differ, the caller says what it expects or
// checks the primitive's state itself afterwards.
#pragma once

#include <gtest/gtest.h>

#include <asyncband/block_on.hpp>
#include <asyncband/stop_token.hpp>
#include <optional>
#include <thread>

#include "probe.hpp"

namespace asyncband_test {

/// The two points where a waiter is linked but not yet suspended.
inline constexpr test_point before_suspension[] = {test_point::published, test_point::before_arm};

/// On a test scheduler `s`: a cancellable waiter (probe `a`, stop source `stop_a`) and, with
/// `plain_b`, a plain waiter queued after it (probe `b`), both run until they suspend. Without
/// `plain_b`, `b` is left for the test (not started).
template <class Probe = probe>
struct suspended_waiters {
  test_scheduler s;
  asyncband::stop_source stop_a;
  Probe a;
  Probe b;

  template <class Primitive>
  suspended_waiters(Primitive& primitive, bool plain_b) {
    s.spawn(stoppable_waiter(primitive, stop_a.get_token(), a));
    if (plain_b) s.spawn(plain_waiter(primitive, b));
    s.run();
  }
};

/// A wait with an already stopped token completes cancelled at once, without suspending.
template <class Primitive>
void already_stopped_token_cancels_at_once(Primitive& primitive) {
  test_scheduler s;
  asyncband::stop_source src;
  src.request_stop();
  probe p;
  s.spawn(stoppable_waiter(primitive, src.get_token(), p));
  EXPECT_EQ(s.run(), 1U);  // never suspended
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::cancelled);
}

/// For an event constructed set or not: a wait with an already stopped token cancels at once and
/// leaves the event as it was (a stored permit is not consumed).
template <class Event>
void already_stopped_token_cancels_at_once_set_or_not() {
  for (const bool initially_set : {false, true}) {
    SCOPED_TRACE(initially_set);
    Event ev(initially_set);
    already_stopped_token_cancels_at_once(ev);
    EXPECT_EQ(ev.is_set(), initially_set);
  }
}

/// Waking at `point` (the waiter is linked, not yet armed) completes the wait without
/// suspending; a later stop request finds no stop callback.
template <class Primitive, class Wake>
void wake_at_point_completes_without_suspending(test_point point, bool stoppable, Primitive& primitive,
                                                Wake wake) {
  test_scheduler s;
  asyncband::stop_source src;
  probe p;
  s.at(point, [&] { wake(primitive); });
  if (stoppable) {
    s.spawn(stoppable_waiter(primitive, src.get_token(), p));
  } else {
    s.spawn(plain_waiter(primitive, p));
  }
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
  src.request_stop();  // the stop callback is gone
  EXPECT_EQ(s.run(), 0U);
  EXPECT_EQ(p.resumed, 1);
}

/// wake_at_point_completes_without_suspending at each point before suspension, for a plain and a
/// cancellable waiter, each time on a fresh primitive from `make`; `check` then checks the
/// primitive's own state.
template <class Make, class Wake, class Check>
void wake_before_suspension_completes_without_suspending(Make make, Wake wake, Check check) {
  for (const test_point point : before_suspension) {
    for (const bool stoppable : {false, true}) {
      SCOPED_TRACE(testing::Message() << "point " << static_cast<int>(point) << ", stoppable " << stoppable);
      auto primitive = make();
      wake_at_point_completes_without_suspending(point, stoppable, primitive, wake);
      check(primitive);
    }
  }
}

/// A stop requested at `point` cancels the wait without suspending; the node was unlinked, so a
/// later wake finds nothing to wake.
template <class Primitive, class Wake>
void stop_at_point_cancels_without_suspending(test_point point, Primitive& primitive, Wake wake) {
  test_scheduler s;
  asyncband::stop_source src;
  probe p;
  s.at(point, [&] { src.request_stop(); });
  s.spawn(stoppable_waiter(primitive, src.get_token(), p));
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::cancelled);
  wake(primitive);  // nobody queued any more
  EXPECT_EQ(s.run(), 0U);
  EXPECT_EQ(p.resumed, 1);
}

/// Waiter `a` (cancellable) and waiter `b` (plain) are suspended; a stop on `a` is requested
/// while the wake holds `a` claimed, before it resolves it. The stop cannot unlink `a` any more:
/// `a` resumes once, with `a_status` (ok for a broadcast; cancelled for a transferable grant,
/// which it then passes on), and `b` receives a wake-up (its own, or the grant passed on).
template <class Primitive, class Wake>
void stop_at_claimed_for_wake(Primitive& primitive, Wake wake, wait_status a_status) {
  suspended_waiters waiters(primitive, true);
  auto& [s, stop_a, a, b] = waiters;
  s.at(test_point::claimed_for_wake, [&waiters] { waiters.stop_a.request_stop(); });
  wake(primitive);
  EXPECT_EQ(s.pending_actions(), 0U);
  s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(a.status, a_status);
  EXPECT_EQ(b.resumed, 1);
  EXPECT_EQ(b.status, wait_status::ok);
}

/// A wake that comes while the stop request holds the cancellable waiter claimed does not wake
/// it a second time: it goes to the other waiter. One resumption each.
template <class Primitive, class Wake>
void wake_at_claimed_for_cancel_goes_to_the_other_waiter(Primitive& primitive, Wake wake) {
  suspended_waiters waiters(primitive, true);
  auto& [s, src, cancelled, other] = waiters;
  s.at(test_point::claimed_for_cancel, [&] { wake(primitive); });
  src.request_stop();
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_EQ(s.ready_count(), 2U);  // one resumption each
  s.run();
  EXPECT_EQ(cancelled.resumed, 1);
  EXPECT_EQ(cancelled.status, wait_status::cancelled);
  EXPECT_EQ(other.resumed, 1);
  EXPECT_EQ(other.status, wait_status::ok);
}

/// The probes of stop_while_suspended_cancels_and_resumes_once.
template <class Probe>
struct cancelled_and_other {
  Probe cancelled;
  Probe other;
};

/// A stop request while suspended posts the cancelled waiter to its scheduler (it resumes once,
/// cancelled); a later wake must not touch the unlinked node and wakes the other waiter.
template <class Probe = probe, class Primitive, class Wake>
cancelled_and_other<Probe> stop_while_suspended_cancels_and_resumes_once(Primitive& primitive, Wake wake) {
  suspended_waiters<Probe> waiters(primitive, true);
  auto& [s, src, cancelled, other] = waiters;
  src.request_stop();
  EXPECT_EQ(s.ready_count(), 1U);  // posted to its scheduler, not resumed inline
  EXPECT_EQ(cancelled.resumed, 0);
  s.run();
  EXPECT_EQ(cancelled.resumed, 1);
  EXPECT_EQ(cancelled.status, wait_status::cancelled);
  EXPECT_EQ(other.resumed, 0);

  wake(primitive);  // must not touch the cancelled (unlinked) waiter
  s.run();
  EXPECT_EQ(cancelled.resumed, 1);
  EXPECT_EQ(other.resumed, 1);
  EXPECT_EQ(other.status, wait_status::ok);
  return {cancelled, other};
}

/// A stop requested after the wake claimed the waiter (its resumption is queued) is too late.
template <class Primitive, class Wake>
void stop_after_wake_is_ok(Primitive& primitive, Wake wake) {
  suspended_waiters waiters(primitive, false);
  auto& [s, src, p, unused] = waiters;
  wake(primitive);     // claims the waiter; its resumption is queued
  src.request_stop();  // too late: the waker claimed it first
  EXPECT_EQ(s.run(), 1U);
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
}

/// Destroying coroutines suspended in a wait (plain and cancellable, at the head, in the middle
/// and at the tail of the queue) unlinks their nodes and deregisters their stop callbacks; a
/// later wake reaches only the survivors.
template <class Primitive, class Wake>
void destroying_suspended_waiters_unlinks_them(Primitive& primitive, Wake wake) {
  test_scheduler s;
  asyncband::stop_source src;
  probe doomed_head, doomed_plain, doomed_stoppable, doomed_tail;
  probe first, survivor;
  auto t_head = plain_waiter(primitive, doomed_head);
  auto t_plain = plain_waiter(primitive, doomed_plain);
  auto t_stoppable = stoppable_waiter(primitive, src.get_token(), doomed_stoppable);
  auto t_tail = stoppable_waiter(primitive, src.get_token(), doomed_tail);
  start_on(s, t_head);
  s.spawn(plain_waiter(primitive, first));
  start_on(s, t_plain);
  start_on(s, t_stoppable);
  s.spawn(plain_waiter(primitive, survivor));
  start_on(s, t_tail);
  s.run();
  for (const probe* p : {&doomed_head, &doomed_plain, &doomed_stoppable, &doomed_tail}) {
    ASSERT_EQ(p->started, 1);
  }

  t_head = {};  // destroys the suspended frames: their nodes must leave the list
  t_plain = {};
  t_stoppable = {};
  t_tail = {};
  src.request_stop();  // the stop callbacks were deregistered with the frames
  EXPECT_EQ(s.ready_count(), 0U);
  wake(primitive);  // would touch freed memory if a node were still linked
  s.run();
  for (const probe* p : {&doomed_head, &doomed_plain, &doomed_stoppable, &doomed_tail}) {
    EXPECT_EQ(p->resumed, 0);
  }
  EXPECT_EQ(first.resumed, 1);
  EXPECT_EQ(survivor.resumed, 1);
}

/// wait_timeout(1h) on another thread completes ok once `wake` runs on this one.
template <class Primitive, class Wake>
void wait_timeout_completes_when_woken_by_another_thread(Primitive& primitive, Wake wake) {
  std::optional<wait_status> status;
  std::thread waiter([&] { status = primitive.wait_timeout(1h).status(); });
  wake(primitive);
  waiter.join();
  EXPECT_EQ(status, wait_status::ok);
}

/// wait_blocking(token) on another thread ends cancelled when this thread requests stop.
template <class Primitive>
void blocking_wait_is_cancelled_by_another_thread(Primitive& primitive) {
  asyncband::stop_source src;
  std::optional<wait_status> status;
  std::thread waiter([&] { status = primitive.wait_blocking(src.get_token()).status(); });
  src.request_stop();
  waiter.join();
  EXPECT_EQ(status, wait_status::cancelled);
}

/// wait_blocking(token) on another thread, with a token never stopped, ends ok once `wake` runs.
template <class Primitive, class Wake>
void blocking_wait_is_woken_by_another_thread(Primitive& primitive, Wake wake) {
  asyncband::stop_source unused;
  std::optional<wait_status> status;
  std::thread woken([&] { status = primitive.wait_blocking(unused.get_token()).status(); });
  wake(primitive);
  woken.join();
  EXPECT_EQ(status, wait_status::ok);
}

/// block_on on another thread: wait(), wait(token) and a task without a scheduler (resumed
/// inline) all complete ok once `wake` runs on this one (after an already stopped token was
/// cancelled at once). Returns the task's probe, for the caller's own checks.
template <class Probe = probe, class Primitive, class Wake>
Probe block_on_waits_complete_when_woken_by_another_thread(Primitive& primitive, Wake wake) {
  asyncband::stop_source src;
  src.request_stop();
  EXPECT_TRUE(asyncband::block_on(primitive.wait(src.get_token())).cancelled());

  std::optional<wait_status> status;
  Probe p;
  std::thread waiter([&] {
    asyncband::block_on(primitive.wait());
    status = asyncband::block_on(primitive.wait(asyncband::stop_token{})).status();
    asyncband::block_on(plain_waiter(primitive, p));  // a task without a scheduler, resumed inline
  });
  wake(primitive);
  waiter.join();
  EXPECT_EQ(status, wait_status::ok);
  EXPECT_EQ(p.resumed, 1);
  return p;
}

/// block_on(wait(token)) on another thread ends cancelled when this thread requests stop.
template <class Primitive>
void block_on_wait_is_cancelled_by_another_thread(Primitive& primitive) {
  asyncband::stop_source src;
  std::optional<wait_status> status;
  std::thread waiter([&] { status = asyncband::block_on(primitive.wait(src.get_token())).status(); });
  src.request_stop();  // resumes the block_on driver inline on this thread if it had suspended
  waiter.join();
  EXPECT_EQ(status, wait_status::cancelled);
}

}  // namespace asyncband_test
