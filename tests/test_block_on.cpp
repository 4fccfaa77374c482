// SPDX-License-Identifier: Apache-2.0
// block_on's cancellable forms: block_on(make, stop_token), block_on(make, timeout or deadline)
// and block_on(make, stop_token, timeout), where make(token) builds the awaitable. A deadline
// already passed makes the timeout deterministic (it fires as soon as the wait has suspended);
// races between the deadline and a wake-up are staged with per-thread test hooks.
#include <gtest/gtest.h>

#include <asyncband/auto_reset_event.hpp>
#include <asyncband/block_on.hpp>
#include <asyncband/manual_reset_event.hpp>
#include <asyncband/mpsc/bounded.hpp>
#include <asyncband/mpsc/unbounded.hpp>
#include <asyncband/result.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/stop_token.hpp>
#include <chrono>
#include <latch>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "support/thread_hook.hpp"

namespace {

namespace ab = asyncband;
using ab::wait_status;
using ab::runtime::task;
using asyncband::detail::test_point;
using asyncband_test::thread_hook;
using namespace std::chrono_literals;

/// A deadline that has passed: it fires as soon as the wait has suspended.
std::chrono::steady_clock::time_point passed() {
  return std::chrono::steady_clock::now() - 1s;
}

TEST(BlockOnDeadline, AWaitStillPendingAtTheDeadlineReportsTimeout) {
  ab::manual_reset_event ev;
  const auto wait = [&ev](asyncband::stop_token t) { return ev.wait(std::move(t)); };
  EXPECT_EQ(ab::block_on(wait, 0ms).status(), wait_status::timeout);
  EXPECT_EQ(ab::block_on(wait, passed()).status(), wait_status::timeout);
  EXPECT_EQ(ab::block_on(wait, asyncband::stop_token{}, 0ms).status(), wait_status::timeout);
}

TEST(BlockOnDeadline, AWaitThatCompletesFirstYieldsItsValue) {
  auto [tx_, rx_] = ab::mpsc::unbounded<std::string>();
  auto& tx = tx_;  // named references: clang 14 does not capture structured bindings
  auto& rx = rx_;
  ASSERT_TRUE(tx.send("ready").ok());
  auto r = ab::block_on([&rx](asyncband::stop_token t) { return rx.recv(std::move(t)); }, passed());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "ready");
}

TEST(BlockOnDeadline, ATimeoutTooLargeForTheClockWaitsForTheWakeUp) {
  auto [tx_, rx_] = ab::mpsc::unbounded<int>();
  auto& tx = tx_;  // named references: clang 14 does not capture structured bindings
  auto& rx = rx_;
  std::thread sender([&tx] { (void)tx.send(7); });
  auto r = ab::block_on([&rx](asyncband::stop_token t) { return rx.recv(std::move(t)); },
                        std::chrono::hours::max());
  sender.join();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 7);
}

/// A stop callback that counts a latch down.
struct count_down_on_stop {
  std::latch* latch;
  void operator()() const noexcept { latch->count_down(); }
};

/// block_on(make, passed()) with a wake-up claimed before the deadline: as the wait is about to
/// arm, another thread runs `wake`, whose waker claims the wait and holds until the deadline's
/// stop request has been seen (it finds the wait claimed); then the waker resolves it.
template <class Wake, class Make>
auto block_on_claimed_before_the_deadline(Wake wake, Make make) {
  std::latch claimed(1);
  std::latch stop_seen(1);
  std::optional<asyncband::stop_callback<count_down_on_stop>> on_stop;
  std::thread waker;
  const thread_hook at_arm(test_point::before_arm, [&] {
    waker = std::thread([&] {
      const thread_hook at_claim(test_point::claimed_for_wake, [&] {
        claimed.count_down();
        stop_seen.wait();
      });
      wake();
    });
    claimed.wait();
  });
  auto r = ab::block_on(
      [&](asyncband::stop_token t) {
        on_stop.emplace(t, count_down_on_stop{&stop_seen});
        return make(std::move(t));
      },
      passed());
  waker.join();
  return r;
}

TEST(BlockOnDeadline, AValueClaimedBeforeTheDeadlineIsReturnedNotDropped) {
  // The sender claims the receive, then the deadline fires (its stop request finds the receive
  // claimed), then the sender resolves it: block_on returns the value.
  auto [tx_, rx_] = ab::mpsc::unbounded<int>();
  auto& tx = tx_;  // named references: clang 14 does not capture structured bindings
  auto& rx = rx_;
  auto r = block_on_claimed_before_the_deadline(
      [&tx] { (void)tx.send(42); }, [&rx](asyncband::stop_token t) { return rx.recv(std::move(t)); });
  ASSERT_TRUE(r.ok()) << ab::to_string(r.status());
  EXPECT_EQ(*r, 42);
}

TEST(BlockOnDeadline, APermitGrantedBeforeTheDeadlinePassesOnAndReportsTimeout) {
  // The same race with an auto-reset event, whose permit a late cancellation passes on: the wait
  // reports the timeout, and the permit is stored back, not lost.
  ab::auto_reset_event ev;
  const auto r = block_on_claimed_before_the_deadline(
      [&ev] { ev.notify_one(); }, [&ev](asyncband::stop_token t) { return ev.wait(std::move(t)); });
  EXPECT_EQ(r.status(), wait_status::timeout);
  EXPECT_TRUE(ev.try_wait()) << "the permit was passed on";
}

TEST(BlockOnDeadline, ASendThatTimesOutHandsItsValueBack) {
  auto [tx_, rx] = ab::mpsc::bounded<std::string>(1);
  auto& tx = tx_;  // a named reference: clang 14 does not capture structured bindings
  ASSERT_TRUE(tx.try_send("first").ok());
  auto r = ab::block_on([&tx](asyncband::stop_token t) { return tx.send("second", std::move(t)); }, passed());
  ASSERT_TRUE(r.timed_out()) << ab::to_string(r.status());
  EXPECT_EQ(std::move(r).value(), "second");
}

TEST(BlockOnStop, AStopRequestedFromAnotherThreadCancels) {
  ab::manual_reset_event ev;
  asyncband::stop_source stop;
  std::thread stopper([&stop] { stop.request_stop(); });
  const auto r =
      ab::block_on([&ev](asyncband::stop_token t) { return ev.wait(std::move(t)); }, stop.get_token());
  stopper.join();
  EXPECT_EQ(r.status(), wait_status::cancelled);
}

TEST(BlockOnStop, AStopBeforeTheDeadlineIsACancellationNotATimeout) {
  ab::manual_reset_event ev;
  const auto wait = [&ev](asyncband::stop_token t) { return ev.wait(std::move(t)); };
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_EQ(ab::block_on(wait, stopped.get_token(), passed()).status(), wait_status::cancelled);

  asyncband::stop_source stop;
  std::thread stopper([&stop] { stop.request_stop(); });
  EXPECT_EQ(ab::block_on(wait, stop.get_token(), std::chrono::hours::max()).status(), wait_status::cancelled);
  stopper.join();
}

task<ab::result<void>> wait_in_task(ab::manual_reset_event& ev, asyncband::stop_token t) {
  co_return co_await ev.wait(std::move(t));
}

task<int> ignores_its_token(asyncband::stop_token /*unused*/) {
  co_return 3;
}

task<int> throws_after_waiting(ab::manual_reset_event& ev, asyncband::stop_token t) {
  (void)co_await ev.wait(std::move(t));
  throw std::runtime_error("after the wait");
  co_return 0;
}

TEST(BlockOnDeadline, ATaskEndsThroughItsOwnCancellation) {
  ab::manual_reset_event ev;
  const auto r =
      ab::block_on([&ev](asyncband::stop_token t) { return wait_in_task(ev, std::move(t)); }, passed());
  EXPECT_EQ(r.status(), wait_status::timeout);
  EXPECT_EQ(ab::block_on(ignores_its_token, passed()), 3) << "an outcome without a status is returned as is";
  EXPECT_THROW(
      (void)ab::block_on([&ev](asyncband::stop_token t) { return throws_after_waiting(ev, std::move(t)); },
                         passed()),
      std::runtime_error);
}

TEST(BlockOnDeadline, AThrowingMakerStartsNothing) {
  const auto make = [](asyncband::stop_token /*unused*/) -> task<int> {
    throw std::invalid_argument("make");
  };
  EXPECT_THROW((void)ab::block_on(make, 0ms), std::invalid_argument);
}

/// Counts moves.
struct counted {
  int* moves;
  explicit counted(int* m) noexcept : moves(m) {}
  counted(counted&& o) noexcept : moves(o.moves) { ++*moves; }
  counted(const counted&) = delete;
  counted& operator=(const counted&) = delete;
  counted& operator=(counted&&) = delete;
  ~counted() = default;
};

TEST(BlockOnDeadline, AReceivedValueMovesNoMoreThanThroughPlainBlockOn) {
  auto [tx_, rx_] = ab::mpsc::unbounded<counted>();
  auto& tx = tx_;  // named references: clang 14 does not capture structured bindings
  auto& rx = rx_;
  int plain = 0;
  ASSERT_TRUE(tx.send(counted(&plain)).ok());
  const int sent_plain = plain;
  const auto a = ab::block_on(rx.recv());
  ASSERT_TRUE(a.ok());
  int timed = 0;
  ASSERT_TRUE(tx.send(counted(&timed)).ok());
  const int sent_timed = timed;
  const auto b = ab::block_on([&rx](asyncband::stop_token t) { return rx.recv(std::move(t)); },
                              std::chrono::hours::max());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(timed - sent_timed, plain - sent_plain);
  EXPECT_EQ(plain - sent_plain, 1) << "one move, from the channel into the result";
}

}  // namespace
