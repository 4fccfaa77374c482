// asyncband/manual_reset_event.hpp
#pragma once

#include <atomic>
#include <cassert>

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

 public:
  explicit manual_reset_event(bool initially_set = false) noexcept : set_(initially_set) {}
  manual_reset_event(const manual_reset_event&) = delete;
  manual_reset_event& operator=(const manual_reset_event&) = delete;
  /// Debug builds assert that no wait is pending.
  ~manual_reset_event() {
    assert(queue_.no_waiters_left() && "asyncband::manual_reset_event destroyed with waiters");
  }

  /// Sets the event and wakes every current waiter.
  void set() noexcept {
    if (set_.load(std::memory_order_acquire)) return;  // already set: no waiter can be queued
    queue_.wake([this](detail::wait_list& waiters, detail::wake_batch& batch) {
      set_.store(true, std::memory_order_release);
      waiters.claim_all(batch);
    });
  }

  /// Clears the event; later waits suspend until the next set().
  void reset() noexcept { set_.store(false, std::memory_order_release); }

  [[nodiscard]] bool is_set() const noexcept { return set_.load(std::memory_order_acquire); }

  /// Waits until the event is set. `co_await ev.wait();`
 private:
  class wait_node : public detail::queued_waiter<manual_reset_event> {
   public:
    using value_type = void;
    static constexpr bool transferable = false;
    using queued_waiter::queued_waiter;

    bool try_ready() noexcept { return owner().is_set(); }
    bool enqueue() noexcept {
      return owner().queue_.complete_or_enqueue(*this, [this] { return owner().is_set(); });
    }
    void take() noexcept {}
  };

  detail::wait_queue& queue() noexcept { return queue_; }

  std::atomic<bool> set_;
  detail::wait_queue queue_;
};

}  // namespace asyncband
