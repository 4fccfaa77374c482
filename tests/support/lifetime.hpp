// SPDX-License-Identifier: Apache-2.0
// The lifetime harness (issue 11): a waiter resumed inline by the operation that completes its
// wait destroys, at once, everything it may destroy under "last one out" (docs/design.md): the
// primitive (or its shared state's last handle), its own handles, and its own coroutine frame.
// The completing call must touch none of it afterwards; ASan reports it if it does, and a
// watchdog turns a hang (a waker waiting for itself) into an abort naming the row.
//
// A row is a name and a body; the builders below make the body from the row's parts:
//   World    what the waiter may destroy (the primitive, handles), built by its default
//            constructor, owned by the waiter from the start;
//   Waker    what the completing side keeps (a guard it holds, its own handle, the stop source),
//            derived from waker_base, outlives the row;
//   setup    (World&, Waker&): before the waiter starts (take a lock, fill a channel);
//   wait     (World&, asyncband::stop_token) -> an awaitable (coroutine rows) or the blocking call's
//            result (thread rows);
//   complete (World*, Waker&): the operation that completes the wait. The World is gone as soon
//            as the waiter resumed, so it may touch the World only until then.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <asyncband/detail/awaitable_traits.hpp>
#include <asyncband/detail/waiter.hpp>
#include <asyncband/result.hpp>
#include <asyncband/stop_token.hpp>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "thread_hook.hpp"

namespace asyncband_test::lifetime {

/// Aborts the process, naming the row, if the row has not finished after `limit`: a hang
/// detector (a waker that waits for itself never returns), not a timing assertion.
class watchdog {
 public:
  watchdog(std::string name, std::chrono::seconds limit) : name_(std::move(name)) {
    thread_ = std::thread([this, limit] {
      std::unique_lock lock(mutex_);
      if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
        std::fprintf(stderr, "lifetime row '%s': not finished after %lld s (a hang); aborting\n",
                     name_.c_str(), static_cast<long long>(limit.count()));
        std::fflush(stderr);
        std::abort();
      }
    });
  }
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    {
      const std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

 private:
  std::string name_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool under_asan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool under_asan = true;
#else
inline constexpr bool under_asan = false;
#endif
#else
inline constexpr bool under_asan = false;
#endif

/// Destroyed Worlds, kept filled with a pattern until the row ends: a completing call that
/// writes to what the waiter destroyed changes the pattern, which the row then reports even
/// without ASan (a read of a destroyed handle finds garbage pointers and crashes). Under ASan the
/// memory is freed at once instead, so that ASan sees every access.
class quarantine {
 public:
  static constexpr unsigned char pattern = 0xdb;
  static void keep(void* p, std::size_t n) noexcept {
    std::memset(p, pattern, n);
    const std::lock_guard lock(mutex());
    blocks().emplace_back(p, n);
  }
  /// Frees every kept block; returns how many were written to after their destruction.
  static int release_and_count_late_writes() {
    std::vector<std::pair<void*, std::size_t>> kept;
    {
      const std::lock_guard lock(mutex());
      kept.swap(blocks());
    }
    int written = 0;
    for (auto [p, n] : kept) {
      const auto* bytes = static_cast<const unsigned char*>(p);
      if (std::any_of(bytes, bytes + n, [](unsigned char c) { return c != pattern; })) ++written;
      ::operator delete(p);
    }
    return written;
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::pair<void*, std::size_t>>& blocks() {
    static std::vector<std::pair<void*, std::size_t>> b;
    return b;
  }
};

/// A World whose memory goes to the quarantine when it is destroyed.
template <class World>
struct guarded : World {
  static void* operator new(std::size_t n) { return ::operator new(n); }
  static void operator delete(void* p, std::size_t n) noexcept {
    if constexpr (under_asan) {
      ::operator delete(p);
    } else {
      quarantine::keep(p, n);
    }
  }
};

/// At the end of a row: nothing wrote to a destroyed World.
inline void expect_no_late_writes() {
  EXPECT_EQ(quarantine::release_and_count_late_writes(), 0)
      << "the completing call wrote to what the waiter had destroyed";
}

/// A coroutine with no scheduler (its promise has no asyncband_scheduler hook), so a waker
/// resumes it inline; it starts at once and its frame is freed as it returns (final_suspend
/// never suspends), so a waiter that returns right after its wait frees its own frame inside the
/// waking call. `handle` is valid only while the coroutine is suspended (see waiter_record).
struct inline_coroutine {
  struct promise_type {
    inline_coroutine get_return_object() noexcept {
      return {std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    static std::suspend_never initial_suspend() noexcept { return {}; }
    static std::suspend_never final_suspend() noexcept { return {}; }
    static void return_void() noexcept {}
    static void unhandled_exception() noexcept { std::terminate(); }
  };
  std::coroutine_handle<promise_type> handle;
};

/// What a waiter reports about its one wait.
struct waiter_record {
  int started = 0;
  int resumed = 0;
  bool finished = false;  ///< it destroyed its World and is returning (its frame is going)
  std::string outcome;    ///< "ok", or the status that ended the wait
  std::thread::id resumed_on;
};

/// The outcome of a wait as text: the status of a result / send_result, "ok" for anything else
/// (a guard, a permit, a value).
template <class Outcome>
std::string outcome_of(const Outcome& outcome) {
  if constexpr (requires { outcome.status(); }) {
    return to_string(outcome.status());
  } else {
    return "ok";
  }
}

/// Everything a row's completing side keeps has a stop source: the stop rows request stop.
struct waker_base {
  asyncband::stop_source stop;
};

/// Waits once, then destroys what it waited for and returns (its frame goes with it). The
/// outcome (a guard, a permit, a value) is destroyed first, then the World.
template <class World, class Wait>
inline_coroutine destroying_waiter(std::unique_ptr<guarded<World>> world, Wait wait,
                                   asyncband::stop_token token, waiter_record& rec) {
  ++rec.started;
  using outcome_type = asyncband::detail::await_result_t<decltype(wait(*world, token))>;
  if constexpr (std::is_void_v<outcome_type>) {
    co_await wait(*world, std::move(token));
    rec.outcome = "ok";
  } else {
    const auto outcome = co_await wait(*world, std::move(token));
    rec.outcome = outcome_of(outcome);
  }
  ++rec.resumed;
  rec.resumed_on = std::this_thread::get_id();
  world.reset();
  rec.finished = true;
}

/// Waits once and records it, destroying nothing: another waiter of the same row does.
template <class World, class Wait>
inline_coroutine bystander_waiter(World* world, Wait wait, asyncband::stop_token token, waiter_record& rec) {
  ++rec.started;
  using outcome_type = asyncband::detail::await_result_t<decltype(wait(*world, token))>;
  if constexpr (std::is_void_v<outcome_type>) {
    co_await wait(*world, std::move(token));
    rec.outcome = "ok";
    ++rec.resumed;
  } else {
    const auto outcome = co_await wait(*world, std::move(token));
    rec.outcome = outcome_of(outcome);
    ++rec.resumed;
  }  // the outcome (a guard, a permit) goes here: that may resume the next waiter inline
  rec.finished = true;
}

/// One row of the harness.
struct row {
  std::string name;
  std::function<void()> body;
};

/// GoogleTest prints a parameter by its name (instead of its bytes, in test listings).
inline void PrintTo(const row& r, std::ostream* os) {
  *os << r.name;
}

/// After the completing operation: the waiter resumed once, inline on this thread, with the
/// expected outcome, and destroyed everything. A waiter that never resumed is destroyed here
/// (it is suspended in its wait, which that unlinks).
inline void expect_destroyed_inline(const waiter_record& rec, inline_coroutine co, const char* expected) {
  EXPECT_EQ(rec.resumed, 1) << "the completing operation did not resume the waiter";
  EXPECT_EQ(rec.resumed_on, rec.resumed != 0 ? std::this_thread::get_id() : std::thread::id{})
      << "not resumed inline by the completing operation";
  EXPECT_TRUE(rec.finished);
  EXPECT_EQ(rec.outcome, rec.resumed != 0 ? std::string(expected) : std::string{});
  if (rec.started == 1 && rec.resumed == 0) co.handle.destroy();
}

/// A coroutine waiter with no scheduler, resumed inline by `complete` on this thread.
template <class World, class Waker, class Setup, class Wait, class Complete>
row coroutine_row(std::string name, const char* expected, Setup setup, Wait wait, Complete complete) {
  return {std::move(name), [expected, setup, wait, complete] {
            auto world = std::make_unique<guarded<World>>();
            Waker waker;
            setup(*world, waker);
            World* const raw = world.get();
            waiter_record rec;
            const inline_coroutine co =
                destroying_waiter<World>(std::move(world), wait, waker.stop.get_token(), rec);
            ASSERT_EQ(rec.started, 1);
            // Completed at once: the World is gone already and the row tests nothing.
            ASSERT_EQ(rec.resumed, 0) << "the wait completed without suspending: fix the row's setup";
            complete(raw, waker);  // raw may be dangling from the waiter's resumption on
            expect_destroyed_inline(rec, co, expected);
            expect_no_late_writes();
          }};
}

/// A grant passed on: waiter A (cancellable, a bystander) is claimed by `complete`, and its stop
/// is requested right then (test point claimed_for_wake), so on resuming it passes what it was
/// granted on to waiter B, which resumes inline inside A's pass-on and destroys everything. A
/// must not touch the primitive after passing the grant on.
template <class World, class Waker, class Setup, class WaitA, class WaitB, class Complete>
row pass_on_row(std::string name, Setup setup, WaitA wait_a, WaitB wait_b, Complete complete) {
  return {std::move(name), [setup, wait_a, wait_b, complete] {
            auto world = std::make_unique<guarded<World>>();
            Waker waker;
            setup(*world, waker);
            World* const raw = world.get();
            waiter_record a;
            waiter_record b;
            asyncband::stop_source stop_a;
            const inline_coroutine co_a = bystander_waiter(raw, wait_a, stop_a.get_token(), a);
            const inline_coroutine co_b =
                destroying_waiter<World>(std::move(world), wait_b, asyncband::stop_token{}, b);
            ASSERT_EQ(a.started + b.started, 2);
            ASSERT_EQ(a.resumed + b.resumed, 0) << "a wait completed without suspending: fix the row's setup";
            {
              const thread_hook hook(asyncband::detail::test_point::claimed_for_wake,
                                     [&] { stop_a.request_stop(); });
              complete(raw, waker);
            }
            EXPECT_EQ(a.resumed, 1);
            EXPECT_EQ(a.outcome, "cancelled");
            expect_destroyed_inline(b, co_b, "ok");
            if (a.started == 1 && a.resumed == 0) co_a.handle.destroy();
            expect_no_late_writes();
          }};
}

/// Several waiters: `bystanders` coroutines waiting with `wait_a` (their tokens come from one stop
/// source, `complete`'s third argument), then one waiting with `wait_b` that destroys everything.
/// A bystander releases its outcome (a guard, a permit) as it returns, which may resume the next
/// waiter inline. `complete(World*, Waker&, asyncband::stop_source& bystanders)` starts it all: every
/// bystander must end with `bystander_outcome`, and the last waiter with ok. With more bystanders
/// than the nesting limit of inline resolution (16), the chain also runs through the deferred
/// resolution of nested wake-ups.
template <class World, class Waker, class Setup, class WaitA, class WaitB, class Complete>
row crowd_row(std::string name, int bystanders, const char* bystander_outcome, Setup setup, WaitA wait_a,
              WaitB wait_b, Complete complete) {
  return {std::move(name), [bystanders, bystander_outcome, setup, wait_a, wait_b, complete] {
            auto world = std::make_unique<guarded<World>>();
            Waker waker;
            setup(*world, waker);
            World* const raw = world.get();
            asyncband::stop_source stop_a;
            std::vector<waiter_record> a(static_cast<std::size_t>(bystanders));
            std::vector<inline_coroutine> co_a;
            for (auto& rec : a) co_a.push_back(bystander_waiter(raw, wait_a, stop_a.get_token(), rec));
            waiter_record b;
            const inline_coroutine co_b =
                destroying_waiter<World>(std::move(world), wait_b, asyncband::stop_token{}, b);
            for (const auto& rec : a) ASSERT_EQ(rec.resumed, 0) << "a wait completed without suspending";
            ASSERT_EQ(b.resumed, 0) << "a wait completed without suspending: fix the row's setup";
            complete(raw, waker, stop_a);
            for (std::size_t i = 0; i < a.size(); ++i) {
              EXPECT_EQ(a[i].resumed, 1) << "bystander " << i;
              EXPECT_EQ(a[i].outcome, a[i].resumed != 0 ? bystander_outcome : "") << "bystander " << i;
              if (a[i].started == 1 && a[i].resumed == 0) co_a[i].handle.destroy();
            }
            expect_destroyed_inline(b, co_b, "ok");
            expect_no_late_writes();
          }};
}

/// A plain thread blocked in `wait` (a form that queues a node: it announces itself parked at
/// test point before_arm), woken by `complete` on this thread, destroys everything as soon as its
/// wait returns, racing with the rest of the completing call (repeated, so that ASan sees a late
/// access when there is one).
///
/// A form that parks without a node (the phaser's broadcast parking) never reaches before_arm:
/// with `queues_a_node` false the thread announces itself just before the call instead, so the
/// completing call races the thread's way into the wait as well.
template <class World, class Waker, class Setup, class Wait, class Complete>
row thread_row(std::string name, const char* expected, Setup setup, Wait wait, Complete complete,
               int repetitions = 20, bool queues_a_node = true) {
  return {std::move(name), [expected, setup, wait, complete, repetitions, queues_a_node] {
            for (int i = 0; i < repetitions; ++i) {
              auto world = std::make_unique<guarded<World>>();
              Waker waker;
              setup(*world, waker);
              World* const raw = world.get();
              std::latch parked(1);
              std::string outcome;
              std::thread waiter([&parked, &outcome, &wait, queues_a_node, token = waker.stop.get_token(),
                                  w = std::move(world)]() mutable {
                if (!queues_a_node) parked.count_down();
                {
                  const thread_hook hook(asyncband::detail::test_point::before_arm,
                                         [&parked] { parked.count_down(); });
                  const auto result = wait(*w, std::move(token));
                  outcome = outcome_of(result);
                }
                w.reset();
              });
              parked.wait();
              complete(raw, waker);  // raw may be dangling from the waiter's return on
              waiter.join();
              EXPECT_EQ(outcome, expected) << "repetition " << i;
            }
            expect_no_late_writes();
          }};
}

/// Nothing to prepare.
struct no_setup {
  template <class World, class Waker>
  void operator()(World& /*unused*/, Waker& /*unused*/) const noexcept {}
};

/// Requests stop on the row's stop source: the completing operation of every stop row.
struct request_stop {
  template <class World, class Waker>
  void operator()(World* /*unused*/, Waker& k) const noexcept {
    k.stop.request_stop();
  }
};

}  // namespace asyncband_test::lifetime

/// Defines the parameterized test suite `Suite` whose test TheWaiterMayDestroyEverythingInside-
/// TheCallThatWokeIt runs each of the rows `rows()` returns (named by the row), under a watchdog.
#define ASYNCBAND_LIFETIME_ROWS(Suite, rows)                                                   \
  class Suite : public ::testing::TestWithParam<::asyncband_test::lifetime::row> {};           \
  TEST_P(Suite, TheWaiterMayDestroyEverythingInsideTheCallThatWokeIt) {                        \
    const ::asyncband_test::lifetime::watchdog dog(GetParam().name, std::chrono::seconds(60)); \
    GetParam().body();                                                                         \
  }                                                                                            \
  INSTANTIATE_TEST_SUITE_P(                                                                    \
      Rows, Suite, ::testing::ValuesIn(rows()),                                                \
      [](const ::testing::TestParamInfo<::asyncband_test::lifetime::row>& info) { return info.param.name; })
