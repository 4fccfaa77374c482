// SPDX-License-Identifier: Apache-2.0
// Pieces of the bounded multi-threaded stress tests: a loop bounded by both an iteration cap and
// a time budget, a count of finished participants that aborts on a hang, and a pool task that
// requests stop.
#pragma once

#include <gtest/gtest.h>

#include <asyncband/result.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/stop_token.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <type_traits>
#include <utility>

namespace asyncband_test {

/// Runs `body(i)` for i = 0, 1, ... until `cap` rounds ran or `budget` has passed (a round that
/// started always finishes), or until `body` returns false when it returns bool. Returns how
/// many rounds ran.
template <class Body>
int repeat_for(int cap, std::chrono::steady_clock::duration budget, Body body) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  int rounds = 0;
  while (rounds < cap && std::chrono::steady_clock::now() < deadline) {
    if constexpr (std::is_same_v<decltype(body(rounds)), bool>) {
      if (!body(rounds++)) break;
    } else {
      body(rounds++);
    }
  }
  return rounds;
}

/// Bounds each participant's loop of a stress test by an iteration cap and a shared time budget.
class stress_budget {
 public:
  stress_budget(int cap, std::chrono::steady_clock::duration budget) noexcept
      : cap_(cap), budget_(budget), deadline_(std::chrono::steady_clock::now() + budget) {}
  /// Starts the time budget now (when every participant is released together).
  void restart() noexcept { deadline_ = std::chrono::steady_clock::now() + budget_; }
  [[nodiscard]] bool keep_going(int i) const noexcept {
    return i < cap_ && std::chrono::steady_clock::now() < deadline_;
  }

 private:
  int cap_;
  std::chrono::steady_clock::duration budget_;
  std::chrono::steady_clock::time_point deadline_;
};

/// The stop source a stress test's cancellable waits share: cancel_current() stops every wait
/// that took a token so far, and later waits take the next epoch's token.
class stop_epoch {
 public:
  asyncband::stop_token token() {
    const std::lock_guard lock(mutex_);
    return source_.get_token();
  }
  void cancel_current() {
    asyncband::stop_source old;
    {
      const std::lock_guard lock(mutex_);
      old = std::exchange(source_, asyncband::stop_source{});
    }
    old.request_stop();  // outside the lock: it runs the waits' stop callbacks
  }

 private:
  std::mutex mutex_;
  asyncband::stop_source source_;
};

/// Counts participants down to zero; the waiting thread may destroy it as soon as a wait
/// returns.
class completion {
 public:
  explicit completion(int n = 0) : remaining_(n) {}
  void reset(int n) {
    const std::lock_guard lock(mutex_);
    remaining_ = n;
  }
  void done() {
    const std::lock_guard lock(mutex_);
    if (--remaining_ == 0) cv_.notify_all();
  }
  [[nodiscard]] bool wait_for(std::chrono::steady_clock::duration d) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, d, [this] { return remaining_ == 0; });
  }
  /// Aborts rather than letting a hang (a lost wake-up) run into destroyed state.
  void wait_or_abort(std::chrono::steady_clock::duration limit, const char* what) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, limit, [this] { return remaining_ == 0; })) {
      std::fprintf(stderr, "%s: %d participant(s) never finished\n", what, remaining_);
      std::abort();
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int remaining_;
};

/// How the waits of one stress round ended. An ok wait must also find `consistent()` true (what
/// was written before the wake is visible, the primitive is in its woken state); anything but
/// ok and cancelled is bad.
struct wait_tally {
  std::atomic<int> ok{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> bad{0};

  template <class Consistent>
  void record(asyncband::wait_status st, Consistent consistent) {
    if (st == asyncband::wait_status::ok) {
      ok.fetch_add(1);
      if (!consistent()) bad.fetch_add(1);
    } else if (st == asyncband::wait_status::cancelled) {
      cancelled.fetch_add(1);
    } else {
      bad.fetch_add(1);
    }
  }

  /// After a round of `waiters` waits of which at least `min_ok` cannot be cancelled; without
  /// `stops_requested`, none may end cancelled.
  void expect_round(int round, int waiters, int min_ok, bool stops_requested) const {
    EXPECT_EQ(bad.load(), 0) << "round " << round;
    EXPECT_GE(ok.load(), min_ok) << "round " << round;
    EXPECT_EQ(ok.load() + cancelled.load(), waiters) << "round " << round;
    if (!stops_requested) {
      EXPECT_EQ(cancelled.load(), 0) << "round " << round;
    }
  }
};

/// The waits of all the rounds of a stress test: each round adds its tally; at the end, at least
/// one round ran and at least one wait ended ok, and the rounds and cancellations are recorded
/// as test properties.
struct stress_totals {
  int ok = 0;
  int cancelled = 0;

  void add(const wait_tally& round) {
    ok += round.ok.load();
    cancelled += round.cancelled.load();
  }
  void expect_and_record(int rounds) const {
    EXPECT_GT(rounds, 0);
    EXPECT_GT(ok, 0);
    ::testing::Test::RecordProperty("rounds", rounds);
    ::testing::Test::RecordProperty("cancelled", cancelled);
  }
};

/// A waiter of a stress round `r` (with members stop, record(wait_status) and finished): waits
/// once on `primitive`, with the round's stop token when `stoppable`, records how the wait ended
/// and reports itself finished.
template <class Round, class Primitive>
asyncband::runtime::task<void> stress_waiter(Round& r, Primitive& primitive, bool stoppable) {
  if (stoppable) {
    const auto result = co_await primitive.wait(r.stop.get_token());
    r.record(result.status());
  } else {
    co_await primitive.wait();
    r.record(asyncband::wait_status::ok);
  }
  r.finished.done();
}

/// Requests stop from a pool thread.
inline asyncband::runtime::task<void> pool_request_stop(asyncband::runtime::thread_pool& pool,
                                                        asyncband::stop_source& src) {
  co_await pool.schedule();
  src.request_stop();
}

}  // namespace asyncband_test
