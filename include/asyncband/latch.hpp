// SPDX-License-Identifier: Apache-2.0
// asyncband/latch.hpp
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <atomic>
#include <cassert>
#include <cstddef>
#include <limits>
#include <stdexcept>

#include "detail/atomic.hpp"
#include "detail/broadcast_parking.hpp"
#include "detail/debug_access.hpp"
#include "detail/wait_functions.hpp"
#include "detail/wait_queue.hpp"
#include "result.hpp"

namespace asyncband {

/// A single-use countdown: waits complete once the count reaches zero, and stay complete.
///
/// Contract
/// - Synchronization: every count_down()/arrive() happens-before the completion of every wait
///   that observes the count at zero (and every try_wait() that returns true).
/// - Waking: the arrival that reaches zero wakes every queued waiter, after releasing the
///   latch's lock, each on its own scheduler (inline for coroutines without one).
/// - Errors: a negative initial count or arrival, an initial count above max(), or an arrival
///   larger than the remaining count throws std::invalid_argument and leaves the count unchanged.
/// - when_any: the count reaching zero completes a branch with nothing to give back.
/// - Cancellation: wait(stop_token) commits to cancelled if the stop request is observed before
///   the final arrival claims the waiter. A stop already requested ends the wait at once.
/// - The latch must outlive every pending wait.
class latch : public detail::wait_functions<latch> {
  class wait_node;
  friend class detail::queued_waiter<latch>;
  friend class detail::wait_functions<latch>;
  friend struct asyncband::detail::debug_access;

 public:
  /// The largest count a latch starts from.
  [[nodiscard]] static constexpr std::ptrdiff_t max() noexcept { return waiters_flag - 1; }

  /// A latch whose waits complete once count_down() has taken `count` to zero (0 to max();
  /// std::invalid_argument otherwise; 0: already complete).
  explicit latch(std::ptrdiff_t count) : state_(checked_initial(count)) {}
  latch(const latch&) = delete;
  latch& operator=(const latch&) = delete;
  /// Debug builds assert that no wait is pending.
  ~latch() { assert(queue_.no_waiters_left() && "asyncband::latch destroyed with waiters"); }

  /// Decrements the count by one.
  void count_down() { arrive(1); }

  /// Decrements the count by n; wakes every waiter when it reaches zero.
  void arrive(std::ptrdiff_t n) {
    if (n < 0) throw std::invalid_argument("asyncband::latch::arrive: negative arrival");
    std::ptrdiff_t state = state_.load(std::memory_order_relaxed);
    bool pinned = false;  // with waiters flagged, a waiter may destroy the latch once it sees zero
    do {
      if (n > (state & ~waiters_flag)) {
        if (pinned) queue_.unpin();
        throw std::invalid_argument("asyncband::latch::arrive: arrival exceeds the remaining count");
      }
      if (!pinned && (state & waiters_flag) != 0) {
        queue_.pin();
        pinned = true;
      }
    } while (!state_.compare_exchange_weak(state, state - n, std::memory_order_acq_rel));
    // Only the arrival that reaches zero with a waiter flagged takes the lock (and it pinned: the
    // flag was set). Without the flag, nothing after the decrement touches the latch.
    if (n != 0 && state == (waiters_flag | n)) {
      detail::at_test_point(detail::test_point::woken);
      // Hands its pin to the wake, which drops it before resolving: a waiter resumed inline may
      // destroy the latch, and its destructor must not wait for a pin held further up this stack.
      queue_.wake_all_adopting_pin();
      return;
    }
    if (pinned) queue_.unpin();
  }

  /// A snapshot of the count: arrivals still missing. A nonzero value may be stale by the time
  /// it returns (another thread counts down); 0 is final, since the count never rises, and a
  /// read of 0 synchronizes as try_wait() returning true.
  [[nodiscard]] std::ptrdiff_t count() const noexcept {
    return state_.load(std::memory_order_acquire) & ~waiters_flag;
  }
  /// True once the count is 0 (as std::latch::try_wait; count() tells how many are missing).
  [[nodiscard]] bool try_wait() const noexcept { return count() == 0; }

 private:
  class wait_node : public detail::queued_waiter<latch> {
   public:
    using value_type = void;
    static constexpr bool transferable = false;
    using queued_waiter::queued_waiter;

    bool try_ready() noexcept { return owner().try_wait(); }
    bool enqueue() noexcept {
      return owner().queue_.complete_or_enqueue(*this, [this] { return !owner().flag_waiter(); });
    }
    void take() noexcept {}
  };

  /// Under the lock, before queueing: sets the waiters flag unless the count is zero (false).
  /// The flag and the count share one atomic, so the final arrival's decrement either sees the
  /// flag (and takes the lock to wake, finding this waiter queued) or comes first (and this
  /// sees zero). A cancelled waiter leaves the flag set: at worst one needless lock.
  bool flag_waiter() noexcept {
    std::ptrdiff_t state = state_.load(std::memory_order_acquire);
    do {
      if ((state & ~waiters_flag) == 0) return false;
    } while (!state_.compare_exchange_weak(state, state | waiters_flag, std::memory_order_acq_rel));
    return true;
  }

  static std::ptrdiff_t checked_initial(std::ptrdiff_t count) {
    if (count < 0) throw std::invalid_argument("asyncband::latch: negative count");
    if (count > max()) throw std::invalid_argument("asyncband::latch: count above latch::max()");
    return count;
  }

  detail::wait_queue& queue() noexcept { return queue_; }
  /// Every wake-up releases all waiters at once: blocked threads share one word (wait_functions).
  detail::broadcast_parking& broadcast_word() noexcept { return parking_; }

  // The remaining count, and (waiters_flag) whether a waiter may be queued.
  static constexpr std::ptrdiff_t waiters_flag = std::ptrdiff_t{1}
                                                 << (std::numeric_limits<std::ptrdiff_t>::digits - 1);
  asyncband::detail::atomic<std::ptrdiff_t> state_;
  // mutable: debug.hpp counts the waiters of a const one
  // Blocked threads sleep on it (wait_blocking); declared before queue_, whose destruction
  // waits for a waker that still releases them.
  detail::broadcast_parking parking_;
  mutable detail::wait_queue queue_;
};

}  // namespace asyncband
