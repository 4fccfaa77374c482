// asyncband/latch.hpp
#pragma once

#include <atomic>
#include <cstddef>
#include <limits>
#include <stdexcept>

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
/// - Errors: a negative initial count or arrival, or an arrival larger than the remaining count,
///   throws std::invalid_argument and leaves the count unchanged.
/// - Cancellation: wait(stop_token) commits to cancelled if the stop request is observed before
///   the final arrival claims the waiter. A stop already requested ends the wait at once.
/// - The latch must outlive every pending wait.
class latch : public detail::wait_functions<latch> {
  class wait_node;
  friend class detail::queued_waiter<latch>;
  friend class detail::wait_functions<latch>;

 public:
  [[nodiscard]] static constexpr std::ptrdiff_t max() noexcept {
    return std::numeric_limits<std::ptrdiff_t>::max();
  }

  explicit latch(std::ptrdiff_t count) : count_(checked_initial(count)) {}
  latch(const latch&) = delete;
  latch& operator=(const latch&) = delete;

  /// Decrements the count by one.
  void count_down() { arrive(1); }

  /// Decrements the count by n; wakes every waiter when it reaches zero.
  void arrive(std::ptrdiff_t n) {
    std::ptrdiff_t current = count_.load(std::memory_order_relaxed);
    do {
      if (n < 0) throw std::invalid_argument("asyncband::latch::arrive: negative arrival");
      if (n > current) throw std::invalid_argument("asyncband::latch::arrive: arrival exceeds the remaining count");
    } while (!count_.compare_exchange_weak(current, current - n, std::memory_order_acq_rel));
    if (current == n && n != 0) queue_.wake_all();
  }

  [[nodiscard]] std::ptrdiff_t count() const noexcept { return count_.load(std::memory_order_acquire); }
  [[nodiscard]] bool try_wait() const noexcept { return count() == 0; }

 private:
  class wait_node : public detail::queued_waiter<latch> {
   public:
    using value_type = void;
    static constexpr bool transferable = false;
    using queued_waiter::queued_waiter;

    bool try_ready() noexcept { return owner().try_wait(); }
    // Reading the count under the lock is enough: the final arrival's wake takes the same
    // lock after its decrement, so it either finds this node queued or this read sees zero.
    bool enqueue() noexcept {
      return owner().queue_.complete_or_enqueue(*this, [this] { return owner().try_wait(); });
    }
    void take() noexcept {}
  };

  static std::ptrdiff_t checked_initial(std::ptrdiff_t count) {
    if (count < 0) throw std::invalid_argument("asyncband::latch: negative count");
    return count;
  }

  detail::wait_queue& queue() noexcept { return queue_; }

  std::atomic<std::ptrdiff_t> count_;
  detail::wait_queue queue_;
};

}  // namespace asyncband
