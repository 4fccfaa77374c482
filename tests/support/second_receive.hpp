// SPDX-License-Identifier: Apache-2.0
// tests/support/second_receive.hpp: one receive at a time. While a receive of a channel's
// receiver is pending (a coroutine suspended in co_await rx.recv(), or a thread blocked in
// rx.recv_blocking()), every other receive form throws std::logic_error (try_recv if it would
// take a value), and the pending one then completes normally. The same checks for oneshot, mpsc::unbounded
// and mpsc::bounded.
#pragma once

#include <gtest/gtest.h>

#include <asyncband/block_on.hpp>
#include <asyncband/detail/waiter.hpp>
#include <asyncband/result.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <asyncband/stop_token.hpp>
#include <chrono>
#include <latch>
#include <optional>
#include <stdexcept>
#include <thread>

#include "thread_hook.hpp"

namespace asyncband_test {

namespace detail {

/// Receives once with co_await rx.recv() and keeps the outcome.
template <class Receiver, class T>
asyncband::runtime::task<void> first_receive(Receiver& rx, std::optional<asyncband::result<T>>& out) {
  out.emplace(co_await rx.recv());
}

/// A second receive in a coroutine, with or without a stop token: counts the logic_error.
template <class Receiver>
asyncband::runtime::task<void> second_receive(Receiver& rx, bool stoppable, int& refused) {
  try {
    if (stoppable) {
      (void)co_await rx.recv(asyncband::stop_token{});
    } else {
      (void)co_await rx.recv();
    }
    ADD_FAILURE() << "a second receive in a coroutine was accepted";
  } catch (const std::logic_error&) {
    ++refused;
  }
}

/// While a receive is pending: every other receive form, from this thread (coroutines on `s`,
/// block_on, the blocking forms), throws std::logic_error.
template <class Receiver>
void every_other_receive_throws(Receiver& rx, asyncband::runtime::test_scheduler& s) {
  int refused = 0;
  s.spawn(second_receive(rx, false, refused));
  s.spawn(second_receive(rx, true, refused));
  s.run();
  // Before the forms that would block for good if accepted (so that the test fails, not hangs).
  ASSERT_EQ(refused, 2) << "a second receive in a coroutine was accepted";
  EXPECT_THROW((void)asyncband::block_on(rx.recv()), std::logic_error);
  EXPECT_THROW((void)rx.recv_blocking(), std::logic_error);
  EXPECT_THROW((void)rx.recv_blocking(asyncband::stop_token{}), std::logic_error);
  EXPECT_THROW((void)rx.recv_timeout(std::chrono::milliseconds(0)), std::logic_error);
}

}  // namespace detail

/// What a try_recv does while a receive is pending and nothing is there to take.
enum class idle_try_recv {
  harmless,  ///< reports empty (the receive's own thread alone moves the cursor: oneshot, unbounded)
  throws,    ///< throws std::logic_error (senders move the cursor of a sleeping receive: bounded)
};

/// A coroutine's receive is pending; every other receive throws, before and after `send(5)`
/// woke it (a try_recv then too); it then completes with 5, and receives work again afterwards.
template <class Receiver, class Send>
void a_second_receive_throws_while_a_coroutine_receives(Receiver& rx, Send send,
                                                        idle_try_recv idle = idle_try_recv::harmless) {
  using T = typename decltype(rx.recv_blocking())::value_type;
  asyncband::runtime::test_scheduler s;
  std::optional<asyncband::result<T>> first;
  s.spawn(detail::first_receive(rx, first));
  s.run();
  ASSERT_FALSE(first) << "the first receive must be pending";
  ASSERT_NO_FATAL_FAILURE(detail::every_other_receive_throws(rx, s));
  EXPECT_FALSE(first) << "the pending receive was disturbed";
  if (idle == idle_try_recv::harmless) {
    EXPECT_TRUE(rx.try_recv().empty()) << "a try_recv that takes nothing is harmless";
  } else {
    EXPECT_THROW((void)rx.try_recv(), std::logic_error) << "senders own the sleeping receive's cursor";
  }
  send(5);
  ASSERT_FALSE(first) << "woken, on its scheduler, not resumed yet";
  asyncband::runtime::test_scheduler others;  // not s: that would resume the first one now
  ASSERT_NO_FATAL_FAILURE(detail::every_other_receive_throws(rx, others));
  EXPECT_THROW((void)rx.try_recv(), std::logic_error) << "it would take the woken receive's value";
  s.run();
  ASSERT_TRUE(first) << "the pending receive never completed";
  ASSERT_TRUE(first->ok());
  EXPECT_EQ(**first, 5);
  EXPECT_NO_THROW((void)rx.recv_timeout(std::chrono::milliseconds(0)));  // one receive at a time again
}

/// A thread's blocking receive is pending (queued: its test point `published` was reached);
/// every other receive throws; `send(5)` then completes the pending one with 5.
template <class Receiver, class Send>
void a_second_receive_throws_while_a_thread_receives(Receiver& rx, Send send) {
  using T = typename decltype(rx.recv_blocking())::value_type;
  std::latch queued(1);
  std::optional<asyncband::result<T>> first;
  std::thread receiver([&] {
    const thread_hook hook(asyncband::detail::test_point::published, [&] { queued.count_down(); });
    first.emplace(rx.recv_blocking());
  });
  queued.wait();
  asyncband::runtime::test_scheduler s;
  detail::every_other_receive_throws(rx, s);
  send(5);
  receiver.join();
  ASSERT_TRUE(first) << "the pending receive never completed";
  ASSERT_TRUE(first->ok());
  EXPECT_EQ(**first, 5);
  EXPECT_NO_THROW((void)rx.recv_timeout(std::chrono::milliseconds(0)));
}

}  // namespace asyncband_test
