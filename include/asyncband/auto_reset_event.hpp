// SPDX-License-Identifier: Apache-2.0
// asyncband/auto_reset_event.hpp
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <atomic>
#include <cassert>
#include <cstdint>

#include "detail/atomic.hpp"
#include "detail/debug_access.hpp"
#include "detail/wait_functions.hpp"
#include "detail/wait_queue.hpp"
#include "result.hpp"

namespace asyncband {

/// A notification with at most one stored permit (the semantics of tokio's and Asyncband's
/// Notify).
///
/// Contract
/// - notify_one(): hands one permit to the longest-waiting waiter; with no waiter, stores it
///   (at most one: notifying again while a permit is stored changes nothing).
/// - notify_all(): wakes every current waiter and stores nothing.
/// - A wait consumes the stored permit if there is one and completes at once.
/// - Synchronization: a notify happens-before the completion of the wait it wakes or whose
///   permit that wait consumes.
/// - Cancellation: wait(stop_token) commits to cancelled if the stop request is observed before
///   the waiter resumes. A waiter that had already been handed a permit by notify_one passes it
///   on, as if notify_one were called again: the permit goes to the next waiter or is stored.
///   A notify_all wake-up is not a permit and is not passed on.
/// - when_any: a wait that lost its when_any is never handed the permit (notify_one commits the
///   head first and stores the permit, or serves the next waiter, when it lost).
/// - Fairness: FIFO. notify_one always serves the head of the queue; a new wait never takes a
///   permit while others are queued (a permit is only stored when no one waits).
/// - The event must outlive every pending wait.
class auto_reset_event : public detail::wait_functions<auto_reset_event> {
  class wait_node;
  friend class detail::queued_waiter<auto_reset_event>;
  friend class detail::wait_functions<auto_reset_event>;
  friend struct asyncband::detail::debug_access;

 public:
  /// An event holding no permit.
  auto_reset_event() noexcept = default;
  /// An event holding a permit if `initially_set`.
  explicit auto_reset_event(bool initially_set) noexcept : state_(initially_set ? permit : 0U) {}
  auto_reset_event(const auto_reset_event&) = delete;
  auto_reset_event& operator=(const auto_reset_event&) = delete;
  /// Debug builds assert that no wait is pending.
  ~auto_reset_event() {
    assert(queue_.no_waiters_left() && "asyncband::auto_reset_event destroyed with waiters");
  }

  /// Wakes the head waiter with a permit, or stores one permit if nobody waits.
  void notify_one() noexcept {
    // Nobody waits: store the permit with one CAS, which is also the last access (a waiter that
    // takes it may destroy the event at once).
    // Guess "nothing stored, nobody waits" instead of loading first: the CAS is the cost here.
    std::uint8_t state = 0;
    while ((state & waiting) == 0) {
      if (state_.compare_exchange_weak(state, state | permit, std::memory_order_release,
                                       std::memory_order_relaxed)) {
        detail::at_test_point(detail::test_point::woken);
        return;
      }
    }
    queue_.wake([this](detail::wait_list& waiters, detail::wake_batch& batch) {
      // Heads whose when_any another branch won are claimed cancelled: the permit is not theirs.
      detail::waiter* const head = waiters.committed_front(batch);
      if (head == nullptr) {  // the waiters left meanwhile
        state_.store(permit, std::memory_order_release);
        return;
      }
      static_cast<wait_node&>(*head).holds_permit = true;
      waiters.claim_front(batch);
      if (waiters.empty()) state_.store(0, std::memory_order_relaxed);
    });
  }

  /// Wakes every current waiter; stores nothing.
  void notify_all() noexcept {
    if ((state_.load(std::memory_order_acquire) & waiting) == 0) return;  // nobody to wake
    queue_.wake([this](detail::wait_list& waiters, detail::wake_batch& batch) {
      waiters.claim_all(batch);
      state_.fetch_and(static_cast<std::uint8_t>(~waiting), std::memory_order_relaxed);
    });
  }

  /// True if a permit is stored (a wait would complete at once).
  [[nodiscard]] bool is_set() const noexcept {
    return (state_.load(std::memory_order_acquire) & permit) != 0;
  }

  /// Consumes the stored permit if there is one.
  [[nodiscard]] bool try_wait() noexcept {
    // A stored permit is the whole state (nobody waits while one is stored): one CAS takes it,
    // with no load first (measured: the load before the CAS cost more than it saved).
    std::uint8_t expected = permit;
    return state_.compare_exchange_strong(expected, 0, std::memory_order_acq_rel, std::memory_order_relaxed);
  }

 private:
  class wait_node : public detail::queued_waiter<auto_reset_event> {
   public:
    using value_type = void;
    static constexpr bool transferable = true;
    using queued_waiter::queued_waiter;

    // Set under the lock by the notify_one that claims this waiter, or by a consumed stored
    // permit: what a late cancellation must pass on.
    bool holds_permit = false;

    // A stored permit exists only when nobody waits, so taking it lock-free cannot barge.
    bool try_ready() noexcept { return holds_permit = owner().try_wait(); }
    bool enqueue() noexcept {
      return owner().queue_.complete_or_enqueue(*this,
                                                [this] { return holds_permit = owner().take_or_flag(); });
    }
    bool cancel(wait_status why) noexcept {
      return owner().queue_.cancel(*this, why, [this](const detail::wait_list& waiters) {
        if (waiters.empty())
          owner().state_.fetch_and(static_cast<std::uint8_t>(~waiting), std::memory_order_relaxed);
      });
    }
    void take() noexcept {}
    void give_back() noexcept {
      if (holds_permit) owner().notify_one();
    }
  };

  /// Under the lock, before queueing: takes the stored permit (true), or flags that somebody
  /// waits (false). Permit and flag share one atomic, so a lock-free notify_one either sees the
  /// flag and takes the lock, or stores its permit first and this takes it.
  bool take_or_flag() noexcept {
    std::uint8_t state = state_.load(std::memory_order_acquire);
    for (;;) {
      const std::uint8_t next = (state & permit) != 0 ? 0 : waiting;
      if (state_.compare_exchange_weak(state, next, std::memory_order_acq_rel)) return next == 0;
    }
  }

  detail::wait_queue& queue() noexcept { return queue_; }

  // `permit`: one is stored (only while nobody waits); `waiting`: the queue is not empty. Both
  // change only under the lock, except a permit stored or taken while nobody waits.
  static constexpr std::uint8_t permit = 1;
  static constexpr std::uint8_t waiting = 2;
  asyncband::detail::atomic<std::uint8_t> state_{0};
  // mutable: debug.hpp counts the waiters of a const one
  mutable detail::wait_queue queue_;
};

}  // namespace asyncband
