// SPDX-License-Identifier: Apache-2.0
// asyncband/manual_reset_event.hpp
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <atomic>
#include <cassert>

#include "detail/atomic.hpp"
#include "detail/broadcast_parking.hpp"
#include "detail/debug_access.hpp"
#include "detail/wait_functions.hpp"
#include "detail/wait_queue.hpp"
#include "result.hpp"

namespace asyncband {

/// An event that stays set until reset: every wait completes while it is set.
///
/// Contract
/// - Synchronization: everything a thread did before set() happens-before everything after a
///   wait that completes because of that set() (or observes it through is_set()).
/// - Waking: set() wakes every waiter queued at that moment, each on its own scheduler (or inline
///   on the setting thread for coroutines without one), after releasing the event's lock.
///   reset() affects only later waits; a waiter already woken stays woken.
/// - Cancellation: wait(stop_token) commits to cancelled if the stop request is observed before
///   set() claims the waiter; otherwise it completes ok. A stop already requested when the wait
///   starts ends it cancelled at once. Nothing is granted, so nothing needs passing on.
/// - when_any: a set completes a branch with nothing to give back; a losing wait leaves no trace.
/// - Fairness: not applicable; all waiters are released together.
/// - The event must outlive every pending wait.
class manual_reset_event : public detail::wait_functions<manual_reset_event> {
  class wait_node;
  friend class detail::queued_waiter<manual_reset_event>;
  friend class detail::wait_functions<manual_reset_event>;
  friend struct asyncband::detail::debug_access;

 public:
  /// An event, set if `initially_set`.
  explicit manual_reset_event(bool initially_set = false) noexcept : state_(initially_set ? set_bit : 0U) {}
  manual_reset_event(const manual_reset_event&) = delete;
  manual_reset_event& operator=(const manual_reset_event&) = delete;
  /// Debug builds assert that no wait is pending.
  ~manual_reset_event() {
    assert(queue_.no_waiters_left() && "asyncband::manual_reset_event destroyed with waiters");
  }

  /// Sets the event and wakes every current waiter. With nobody queued: one CAS, no lock.
  void set() noexcept {
    // Guess "unset, nobody queued" instead of loading first: the CAS is the cost here, and a
    // wrong guess loads the state for free. The CAS is the last access: a waiter that sees the
    // event set may destroy it at once.
    unsigned s = 0;
    if (state_.compare_exchange_strong(s, set_bit, std::memory_order_acq_rel, std::memory_order_acquire)) {
      detail::at_test_point(detail::test_point::woken);
      return;
    }
    if ((s & set_bit) != 0) return;  // set already: no waiter can be queued
    queue_.wake([this](detail::wait_list& waiters, detail::wake_batch& batch) {
      state_.store(set_bit, std::memory_order_release);  // every waiter is claimed: none is left queued
      waiters.claim_all(batch);
    });
  }

  /// Clears the event; later waits suspend until the next set().
  void reset() noexcept {
    // A CAS, not a store: a plain store of 0 racing another reset could erase the mark of a
    // waiter that queued in between, and the next set() would then not look for it.
    unsigned s = set_bit;
    state_.compare_exchange_strong(s, 0U, std::memory_order_release, std::memory_order_relaxed);
  }

  /// The event is set now.
  [[nodiscard]] bool is_set() const noexcept {
    return (state_.load(std::memory_order_acquire) & set_bit) != 0;
  }

 private:
  class wait_node : public detail::queued_waiter<manual_reset_event> {
   public:
    using value_type = void;
    static constexpr bool transferable = false;
    using queued_waiter::queued_waiter;

    bool try_ready() noexcept { return owner().is_set(); }
    bool enqueue() noexcept {
      return owner().queue_.complete_or_enqueue(*this, [this] { return owner().set_or_mark_waiting(); });
    }
    void take() noexcept {}
  };

  /// Under the lock, for a waiter about to queue: true if the event is set (the wait completes);
  /// otherwise marks the state "somebody may be queued", so that set() takes the lock and wakes.
  /// The mark stays until a set() clears it (after a cancellation it may be stale: that set()
  /// only finds nobody to wake).
  bool set_or_mark_waiting() noexcept {
    unsigned s = state_.load(std::memory_order_acquire);
    while ((s & (set_bit | waiting_bit)) == 0) {
      if (state_.compare_exchange_weak(s, waiting_bit, std::memory_order_acquire, std::memory_order_acquire))
        return false;
    }
    return (s & set_bit) != 0;
  }

  detail::wait_queue& queue() noexcept { return queue_; }
  /// Every wake-up releases all waiters at once: blocked threads share one word (wait_functions).
  detail::broadcast_parking& broadcast_word() noexcept { return parking_; }

  static constexpr unsigned set_bit = 1;
  static constexpr unsigned waiting_bit = 2;

  // set_bit and waiting_bit are never both set: set() clears the mark, and no wait queues while
  // the event is set. Changed outside the lock only from 0 to set (set's CAS) and from set to 0
  // (reset's CAS), never while anybody is marked as queued.
  asyncband::detail::atomic<unsigned> state_;
  // mutable: debug.hpp counts the waiters of a const one
  // Blocked threads sleep on it (wait_blocking); declared before queue_, whose destruction
  // waits for a waker that still releases them.
  detail::broadcast_parking parking_;
  mutable detail::wait_queue queue_;
};

}  // namespace asyncband
