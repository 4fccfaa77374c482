// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/wait_queue.hpp: a primitive's lock and its FIFO of waiters, with the three
// things every primitive does with them: queue a waiter unless it can complete, cancel a queued
// waiter, and wake waiters (claim under the lock, resolve after it).
#pragma once

#include <atomic>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

#include "atomic.hpp"
#include "spin_lock.hpp"
#include "waiter.hpp"

namespace asyncband::detail {

/// The claim of a wake-up that completes every queued waiter with outcome `status`.
inline auto claim_every_waiter(wait_status status) noexcept {
  return [status](wait_list& waiters, wake_batch& batch) { waiters.claim_all(batch, status); };
}

/// What a wake-up returns for a claim: the claim's result, or true for a void claim.
template <class Claim>
using wake_result_t = std::conditional_t<std::is_void_v<std::invoke_result_t<Claim, wait_list&, wake_batch&>>,
                                         bool, std::invoke_result_t<Claim, wait_list&, wake_batch&>>;

class wait_queue {
 public:
  wait_queue() = default;
  wait_queue(const wait_queue&) = delete;
  wait_queue& operator=(const wait_queue&) = delete;

  /// A waiter that saw its wait complete may destroy the primitive at once, even while the call
  /// that completed it is still unlocking (the "last one out destroys it" pattern std::latch
  /// allows). So a waker pins the queue before the change that lets a waiter complete, and
  /// unpins as its last access; destruction waits out pinned wakers, which are a few
  /// instructions from their end.
  ~wait_queue() {
    at_test_point(test_point::destroying);
    while (pins_.load(std::memory_order_acquire) != 0) yield_thread();
  }

  /// For an owner's destructor, inside assert() only (so release builds pay nothing): false if
  /// a waiter is still queued, a misuse whose waiter would resume into freed memory, or never.
  /// A waker still pinned may be about to claim the last waiters, and may hold the lock (one
  /// that saw its wait complete may destroy the primitive before that claim, "last one out"):
  /// then the queue passes without taking the lock, which the destructor must not wait for.
  [[nodiscard]] bool no_waiters_left() noexcept {
    if (model_run_failed()) return true;  // a failed explored run's teardown: see there
    if (pins_.load(std::memory_order_acquire) != 0) return true;
    const std::lock_guard lock(mutex_);
    return waiters_.empty();
  }

  /// Before a state change that may let a waiter complete lock-free (the change itself must be
  /// a release operation, so a waiter that sees it also sees the pin).
  void pin() noexcept { pins_.fetch_add(1, std::memory_order_relaxed); }
  /// The waker's last access to the primitive.
  void unpin() noexcept { pins_.fetch_sub(1, std::memory_order_release); }

  /// Under the lock: if `ready()` (which may consume a grant) is true, completes without
  /// queueing and returns true; otherwise links `w` at the back and returns false. A `ready`
  /// taking (wait_list&, wake_batch&) may also claim other waiters: they are resolved after the
  /// lock is released (a barrier's last arrival completes itself and wakes its generation).
  template <class Ready>
  bool complete_or_enqueue(waiter& w, Ready&& ready) noexcept {
    if constexpr (std::is_invocable_v<Ready, wait_list&, wake_batch&>) {
      return complete_under_lock([&w, &ready](wait_list& waiters, wake_batch& batch) {
        if (std::forward<Ready>(ready)(waiters, batch)) return true;
        waiters.push_back(w);
        return false;
      });
    } else {
      const std::lock_guard lock(mutex_);
      if (std::forward<Ready>(ready)()) return true;
      waiters_.push_back(w);
      return false;
    }
  }

  /// As complete_or_enqueue(w, ready) for a plain `ready()`, linking `w` at the front: a waiter
  /// that was taken out of the head to retry and goes back there (a lock's bounded barging).
  template <class Ready>
  bool complete_or_requeue_front(waiter& w, Ready&& ready) noexcept {
    const std::lock_guard lock(mutex_);
    if (std::forward<Ready>(ready)()) return true;
    waiters_.push_front(w);
    return false;
  }

  /// Under the lock: runs `complete(waiters, batch)`, which may claim waiters, and resolves
  /// them after unlocking. Returns what `complete` returned. For a fast path that completes a
  /// wait without queueing anything (a barrier's last arrival).
  template <class Complete>
  bool complete_under_lock(Complete&& complete) noexcept {
    return locked_step(std::forward<Complete>(complete));
  }

  /// Runs `step(waiters, batch)` under the lock and returns what it returned; then, unlocked,
  /// releases the threads on a broadcast word if the step claimed any or asked for it
  /// (wake_batch::release_word), and resolves what it claimed. A thread released from the word
  /// may destroy the primitive as soon as it sees its release, before the notify: the queue
  /// stays pinned until the notify is done, pinned here under the lock for claimed nodes (they
  /// see their release only once resolved, after the lock), and by the step itself, before its
  /// change, for threads that read the changed state without the lock (release_word).
  template <class Step>
  auto locked_step(Step&& step) noexcept {
    wake_batch batch;
    bool pinned = false;
    auto outcome = [&] {
      const std::lock_guard lock(mutex_);
      auto r = std::forward<Step>(step)(waiters_, batch);
      if (batch.has_broadcast()) {
        if (!batch.owner_pinned()) pin();  // else the step pinned before its change
        pinned = true;
      }
      return r;
    }();
    if (pinned) {
      at_test_point(test_point::woken);
      batch.release_broadcast();
      unpin();  // the last access to the primitive
    }
    batch.resolve_all();
    return outcome;
  }

  /// Unlinks `w` with outcome `why` if it is still queued (true); false if a waker claimed it.
  bool cancel(waiter& w, wait_status why) noexcept {
    return cancel(w, why, [](const wait_list&) noexcept {});
  }

  /// As above, and runs `after(waiters)` under the lock when it unlinked (for a primitive whose
  /// atomic state summarizes its queue, such as "somebody waits").
  template <class After>
  bool cancel(waiter& w, wait_status why, After&& after) noexcept {
    const std::lock_guard lock(mutex_);
    if (!waiters_.unlink_if_linked(w, why)) return false;
    std::forward<After>(after)(std::as_const(waiters_));
    return true;
  }

  /// Runs `claim(waiters, batch)` under the lock, then resolves what it claimed after unlocking.
  /// Returns what `claim` returned (true for a void `claim`). The queue is pinned throughout the
  /// locked part, so a waiter completed by `claim` may destroy the primitive as soon as it sees it.
  template <class Claim>
  auto wake(Claim&& claim, test_point after_unlock = test_point::claimed_for_wake) noexcept {
    pin();
    return wake_adopting_pin(std::forward<Claim>(claim), after_unlock);
  }

  /// As wake(), for a caller that pinned the queue itself before a lock-free change (a latch's
  /// final decrement): the caller's pin is dropped here, before anything is resolved. A waker
  /// must hold no pin of its own while it resolves, since a waiter resumed inline may destroy the
  /// primitive, and its destructor would wait for that pin forever, further up the same stack.
  template <class Claim>
  auto wake_adopting_pin(Claim&& claim, test_point after_unlock = test_point::claimed_for_wake) noexcept {
    return wake_then(std::forward<Claim>(claim), after_unlock, [this]() noexcept { unpin(); });
  }

  /// As wake(), for a waker that holds a reference keeping the primitive alive until it returns
  /// (a channel's handle, or a reference of the state's own): nobody can destroy the queue while
  /// it is inside, so it takes no pin (two read-modify-writes fewer per wake-up).
  template <class Claim>
  auto wake_kept_alive(Claim&& claim, test_point after_unlock = test_point::claimed_for_wake) noexcept {
    return wake_then(std::forward<Claim>(claim), after_unlock, []() noexcept {});
  }

  /// Wakes every queued waiter with outcome `status`.
  void wake_all(wait_status status = wait_status::ok) noexcept { wake(claim_every_waiter(status)); }

  /// wake_all() for a caller that already pinned the queue (see wake_adopting_pin).
  void wake_all_adopting_pin(wait_status status = wait_status::ok) noexcept {
    wake_adopting_pin(claim_every_waiter(status));
  }

  [[nodiscard]] spin_lock& mutex() noexcept { return mutex_; }
  [[nodiscard]] wait_list& waiters() noexcept { return waiters_; }  // only under mutex()

 private:
  /// The wake-ups' common part: `claim` under the lock, then `unlocked()` (the last access to
  /// the primitive), then the resolution of what was claimed.
  template <class Claim, class Unlocked>
  wake_result_t<Claim> wake_then(Claim&& claim, test_point after_unlock, Unlocked unlocked) noexcept {
    const auto run = [&claim](wait_list& waiters, wake_batch& batch) {
      if constexpr (std::is_void_v<std::invoke_result_t<Claim, wait_list&, wake_batch&>>) {
        std::forward<Claim>(claim)(waiters, batch);
        return true;
      } else {
        return std::forward<Claim>(claim)(waiters, batch);
      }
    };
    wake_batch batch;
    auto claimed = [&] {
      const std::lock_guard lock(mutex_);
      auto r = run(waiters_, batch);
      at_test_point(test_point::woken);
      return r;
    }();
    batch.release_broadcast();  // one notify for the threads on the broadcast word, pinned or kept alive
    unlocked();  // the last access to the primitive: resolving the batch touches only the nodes
    if (after_unlock != test_point::claimed_for_wake && !batch.empty()) at_test_point(after_unlock);
    batch.resolve_all();
    return claimed;
  }

  spin_lock mutex_;
  wait_list waiters_;
  asyncband::detail::atomic<unsigned> pins_{0};
};

/// Base of a node whose primitive keeps its waiters in a wait_queue reachable as `owner->queue()`.
/// Supplies the common cancellation; the primitive's node adds try_ready, enqueue and take.
template <class Owner>
class queued_waiter : public waiter {
 public:
  explicit queued_waiter(Owner* owner) noexcept : owner_(owner) {}

  bool cancel(wait_status why) noexcept { return owner_->queue().cancel(*this, why); }

 protected:
  [[nodiscard]] Owner& owner() const noexcept { return *owner_; }

 private:
  Owner* owner_;
};

}  // namespace asyncband::detail
