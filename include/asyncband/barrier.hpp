// SPDX-License-Identifier: Apache-2.0
// asyncband/barrier.hpp
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <stdexcept>

#include "detail/atomic.hpp"
#include "detail/broadcast_parking.hpp"
#include "detail/debug_access.hpp"
#include "detail/wait_functions.hpp"
#include "detail/wait_queue.hpp"

namespace asyncband {

/// What a barrier wait tells its caller.
struct barrier_wait_result {
  /// Exactly one participant of each generation is the leader: the one whose arrival completed it.
  bool leader = false;
  /// leader.
  [[nodiscard]] bool is_leader() const noexcept { return leader; }
};

/// A reusable barrier for a fixed number of participants: each generation completes when that
/// many waits have arrived, and the next generation starts at once.
///
/// Contract
/// - when_any: a barrier wait arrives when it starts, and keeps its arrival if it loses (an
///   arrival is a side effect, not a grant).
/// - Arrival commits when the wait starts (before any suspension). A wait whose stop token is
///   already stopped when it starts does not arrive. A wait cancelled after it started keeps
///   its arrival: the generation still completes when the others arrive; only the waiting ends.
/// - The arrival that completes a generation returns at once as its leader and wakes every
///   waiter of that generation (after releasing the barrier's lock). Waiters are claimed under
///   the lock when their generation completes, so a waiter that resumes late can never be
///   confused with, or counted in, a later generation.
/// - Synchronization: every arrival of a generation happens-before the return of every wait of
///   that generation.
/// - Plain threads: `wait_blocking()` (no stop token, no deadline) arrives under the lock and
///   then sleeps on the barrier's one broadcast word, without a wait node; the leader releases
///   a whole generation of such threads with one notify (at most one system call), after
///   releasing the lock. The cancellable and timed forms queue a node, as coroutines do.
/// - n must be at least 1: zero or a negative n throws std::invalid_argument (a barrier that
///   nobody can complete is a mistake, as a zero-capacity channel is).
/// - The barrier must outlive every pending wait.
class barrier : public detail::wait_functions<barrier> {
  class wait_node;
  friend class detail::queued_waiter<barrier>;
  friend class detail::wait_functions<barrier>;
  friend struct asyncband::detail::debug_access;

 public:
  /// The largest participant count.
  [[nodiscard]] static constexpr std::ptrdiff_t max() noexcept {
    return std::numeric_limits<std::ptrdiff_t>::max();
  }

  /// A barrier for `participants` participants (at least 1; std::invalid_argument otherwise).
  explicit barrier(std::ptrdiff_t participants)
      : participants_(checked(participants)), remaining_(participants_) {}
  barrier(const barrier&) = delete;
  barrier& operator=(const barrier&) = delete;
  /// Debug builds assert that no queued wait is pending (a plain wait_blocking() queues no node).
  ~barrier() { assert(queue_.no_waiters_left() && "asyncband::barrier destroyed with waiters"); }

  /// The participant count of every generation.
  [[nodiscard]] std::ptrdiff_t participants() const noexcept { return participants_; }

  /// Completed generations so far (a snapshot).
  [[nodiscard]] std::uint64_t generation() const noexcept {
    return generation_.load(std::memory_order_acquire);
  }

 private:
  class wait_node : public detail::queued_waiter<barrier> {
   public:
    using value_type = barrier_wait_result;
    static constexpr bool transferable = false;
    using queued_waiter::queued_waiter;

    // The arrival that completes the generation needs no suspension setup: it arrives here.
    // Any other arrival is left to enqueue(), which arrives and queues under one hold of the lock
    // (an arrival that the lock-free look takes for not the last, wrongly, completes there).
    bool try_ready() noexcept {
      if (!owner().may_be_last()) return false;
      return owner().queue_.complete_under_lock(
          [this](detail::wait_list& waiters, detail::wake_batch& batch) {
            return leader_ = owner().arrive_locked_if_last(waiters, batch);
          });
    }
    bool enqueue() noexcept {
      return owner().queue_.complete_or_enqueue(
          *this, [this](detail::wait_list& waiters, detail::wake_batch& batch) {
            return leader_ = owner().arrive_locked(waiters, batch);
          });
    }
    barrier_wait_result take() const noexcept { return {leader_}; }

   private:
    bool leader_ = false;
  };

  /// Under the lock: records one arrival; if it completes the generation, claims every waiter
  /// into `batch` (resolved once the lock is released) and returns true: this arrival leads.
  bool arrive_locked_if_last(detail::wait_list& waiters, detail::wake_batch& batch) noexcept {
    return remaining_.load(std::memory_order_relaxed) == 1 && arrive_locked(waiters, batch);
  }

  bool arrive_locked(detail::wait_list& waiters, detail::wake_batch& batch) noexcept {
    const std::ptrdiff_t left = remaining_.load(std::memory_order_relaxed) - 1;
    if (left > 0) {
      remaining_.store(left, std::memory_order_relaxed);
      return false;
    }
    // Blocked threads of this generation (block_until_released) counted themselves under this
    // lock. They read the generation without it and may destroy the barrier once they see it
    // move: pinned before the move, until the notify after the lock (wake_batch::release_word).
    const bool release_sleepers = parking_.has_counted_sleepers();
    if (release_sleepers) queue_.pin();
    remaining_.store(participants_, std::memory_order_relaxed);
    generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    detail::at_test_point(detail::test_point::woken);
    waiters.claim_all(batch);
    if (release_sleepers) batch.release_word(parking_);
    return true;
  }

  /// wait_blocking(): a plain thread arrives under the lock, and, unless it leads, sleeps on the
  /// broadcast word without a node until the generation moves on. The leader's release then
  /// costs one notify, however many threads are blocked, and touches none of their stacks.
  barrier_wait_result block_until_released() noexcept {
    std::uint64_t arrived_in = 0;
    const bool leader = queue_.complete_under_lock(
        [this, &arrived_in](detail::wait_list& waiters, detail::wake_batch& batch) {
          arrived_in = generation_.load(std::memory_order_relaxed);
          if (arrive_locked(waiters, batch)) return true;
          parking_.count_sleeper();
          return false;
        });
    if (leader) return {true};
    // Its arrival is visible: the generation may complete, and the word move, from here on.
    detail::at_test_point(detail::test_point::published);
    parking_.sleep_until([this, arrived_in] { return generation() != arrived_in; },
                         [] { detail::at_test_point(detail::test_point::parking); });
    parking_.uncount_sleeper();  // its own wait is still pending: the barrier is there
    return {false};
  }

  /// Without the lock, a hint: this arrival may complete the generation. With N threads arriving
  /// one after another, the N - 1 that cannot take the lock once instead of twice.
  [[nodiscard]] bool may_be_last() const noexcept { return remaining_.load(std::memory_order_relaxed) == 1; }

  static std::ptrdiff_t checked(std::ptrdiff_t n) {
    if (n < 0) throw std::invalid_argument("asyncband::barrier: negative participant count");
    if (n == 0) throw std::invalid_argument("asyncband::barrier: zero participants");
    return n;
  }

  detail::wait_queue& queue() noexcept { return queue_; }

  const std::ptrdiff_t participants_;
  asyncband::detail::atomic<std::ptrdiff_t>
      remaining_;  // written under queue_.mutex(); read lock-free as a hint
  asyncband::detail::atomic<std::uint64_t> generation_{0};  // written under queue_.mutex()
  // Blocked threads sleep on it (wait_blocking); declared before queue_, whose destruction
  // waits for a waker that still releases them.
  detail::broadcast_parking parking_;
  mutable detail::wait_queue queue_;
};

}  // namespace asyncband
