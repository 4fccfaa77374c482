// asyncband/barrier.hpp
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "detail/wait_functions.hpp"
#include "detail/wait_queue.hpp"

namespace asyncband {

/// What a barrier wait tells its caller.
struct barrier_wait_result {
  /// Exactly one participant of each generation is the leader: the one whose arrival completed it.
  bool leader = false;
  [[nodiscard]] bool is_leader() const noexcept { return leader; }
};

/// A reusable barrier for a fixed number of participants: each generation completes when that
/// many waits have arrived, and the next generation starts at once.
///
/// Contract
/// - Arrival commits when the wait starts (before any suspension). A wait whose stop token is
///   already stopped when it starts does not arrive. A wait cancelled after it started keeps
///   its arrival: the generation still completes when the others arrive; only the waiting ends.
/// - The arrival that completes a generation returns at once as its leader and wakes every
///   waiter of that generation (after releasing the barrier's lock). A waiter belongs to the
///   generation it arrived in: it is claimed when that generation completes (or finds it
///   completed when it queues), so a waiter that resumes late can never be confused with, or
///   counted in, a later generation.
/// - Synchronization: every arrival of a generation happens-before the return of every wait of
///   that generation.
/// - Cost: an arrival is one atomic decrement; the last one resets the count with one CAS when
///   nobody waits, and takes the lock only to wake waiters.
/// - n = 0 is treated as 1. A negative n, or one above max(), throws std::invalid_argument.
/// - The barrier must outlive every pending wait.
class barrier : public detail::wait_functions<barrier> {
  class wait_node;
  friend class detail::queued_waiter<barrier>;
  friend class detail::wait_functions<barrier>;

 public:
  [[nodiscard]] static constexpr std::ptrdiff_t max() noexcept { return remaining_mask; }

  explicit barrier(std::ptrdiff_t participants)
      : participants_(checked(participants)), state_(static_cast<std::uint64_t>(participants_)) {}
  barrier(const barrier&) = delete;
  barrier& operator=(const barrier&) = delete;

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

    bool try_ready() noexcept { return false; }  // the arrival happens in enqueue()
    bool enqueue() noexcept { return owner().arrive(*this); }
    barrier_wait_result take() const noexcept { return {leader_}; }

   private:
    friend class barrier;
    bool leader_ = false;
  };

  // state_: [generation, low 32 bits | waiting flag | remaining arrivals (31 bits)]. The
  // generation bits only tell a waiter whether its own generation has completed, and a
  // generation cannot complete twice while one of its waiters is still arriving.
  static constexpr std::uint64_t remaining_mask = 0x7FFF'FFFF;
  static constexpr std::uint64_t waiting = 0x8000'0000;
  static constexpr unsigned generation_shift = 32;

  /// One arrival: true if the wait is complete (this arrival leads, or its generation completed
  /// before it could queue), false if `w` is queued.
  bool arrive(wait_node& w) noexcept {
    const std::uint64_t before = state_.fetch_sub(1, std::memory_order_acq_rel);
    if ((before & remaining_mask) == 1) {
      w.leader_ = true;
      complete(before - 1);
      return true;
    }
    const auto generation = static_cast<std::uint32_t>(before >> generation_shift);
    return queue_.complete_or_enqueue(w, [this, generation] { return !flag_waiter(generation); });
  }

  /// Under the lock, before queueing: sets the waiting flag unless `generation` has completed.
  bool flag_waiter(std::uint32_t generation) noexcept {
    std::uint64_t state = state_.load(std::memory_order_acquire);
    do {
      if (static_cast<std::uint32_t>(state >> generation_shift) != generation) return false;
    } while (!state_.compare_exchange_weak(state, state | waiting, std::memory_order_acq_rel));
    return true;
  }

  /// The leader: starts the next generation. Nobody flagged as waiting: one CAS, lock-free.
  /// Otherwise (flagged already, or the CAS lost to a waiter setting the flag: no other arrival
  /// can happen before the reset) the reset and the claim of every waiter happen under the lock.
  void complete(std::uint64_t completed) noexcept {
    const auto next_generation = static_cast<std::uint32_t>(completed >> generation_shift) + 1U;
    const std::uint64_t next = (static_cast<std::uint64_t>(next_generation) << generation_shift) |
                               static_cast<std::uint64_t>(participants_);
    generation_.fetch_add(1, std::memory_order_relaxed);  // published by the reset below
    std::uint64_t expected = completed;
    if ((completed & waiting) == 0 &&
        state_.compare_exchange_strong(expected, next, std::memory_order_acq_rel)) {
      return;
    }
    queue_.wake([this, next](detail::wait_list& waiters, detail::wake_batch& batch) {
      waiters.claim_all(batch);
      state_.store(next, std::memory_order_release);
    });
  }

  static std::ptrdiff_t checked(std::ptrdiff_t n) {
    if (n < 0) throw std::invalid_argument("asyncband::barrier: negative participant count");
    if (n > max()) throw std::invalid_argument("asyncband::barrier: participant count above barrier::max()");
    return n == 0 ? 1 : n;
  }

  detail::wait_queue& queue() noexcept { return queue_; }

  const std::ptrdiff_t participants_;
  std::atomic<std::uint64_t> state_;
  std::atomic<std::uint64_t> generation_{0};
  detail::wait_queue queue_;
};

}  // namespace asyncband
