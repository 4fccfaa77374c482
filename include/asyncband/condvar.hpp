// SPDX-License-Identifier: Apache-2.0
// asyncband/condvar.hpp
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <cassert>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "detail/debug_access.hpp"
#include "detail/wait_operation.hpp"
#include "detail/wait_queue.hpp"
#include "mutex.hpp"
#include "result.hpp"
#include "semaphore.hpp"
#include "stop_token.hpp"

namespace asyncband {

namespace detail {
/// wait() is wait_while() with a predicate that asks to wait exactly once.
struct wait_once {};

/// What every guard taken apart for a condvar wait keeps: the value it gives access to (the
/// mutex's, or a part of it: it stays where it is while the mutex is unlocked, since the mutex's
/// value never moves) and the mutex's semaphore, to re-lock it.
template <class Value>
class unlocked_guard_base {
 public:
  using value_type = Value;
  [[nodiscard]] Value& value() const noexcept { return *value_; }
  [[nodiscard]] semaphore& lock() const noexcept { return *lock_; }

 protected:
  unlocked_guard_base(Value* value, const semaphore_permit& held) noexcept
      : value_(value), lock_(held.semaphore()) {
    assert(held && "asyncband::condvar: a wait on a guard that does not own its lock");
  }

 private:
  Value* value_;
  semaphore* lock_;
};

/// A guard taken apart for a condvar wait: `unlocked_guard<Guard>(guard)` takes everything but
/// the lock (then lock_of(guard) moves the lock out), and relocked(permit) puts a guard of the
/// same type, of the same value, back together around the re-locked mutex. Defined for the four
/// guards of a mutex.
template <class T>
class unlocked_guard<mutex_guard<T>> : public unlocked_guard_base<T> {
 public:
  explicit unlocked_guard(mutex_guard<T>& g) noexcept
      : unlocked_guard_base<T>(&*g, g.permit_), mutex_(std::exchange(g.mutex_, nullptr)) {}
  static semaphore_permit&& lock_of(mutex_guard<T>& g) noexcept { return std::move(g.permit_); }
  mutex_guard<T> relocked(semaphore_permit&& held) noexcept { return {std::move(held), mutex_}; }

 private:
  mutex<T>* mutex_;
};

/// An owned guard keeps its reference to the mutex here while the wait has it unlocked.
template <class T>
class unlocked_guard<owned_mutex_guard<T>> : public unlocked_guard_base<T> {
 public:
  explicit unlocked_guard(owned_mutex_guard<T>& g) noexcept
      : unlocked_guard_base<T>(&*g, g.held_.permit()), owner_(g.held_.take_owner()) {}
  static semaphore_permit&& lock_of(owned_mutex_guard<T>& g) noexcept { return std::move(g.held_.permit()); }
  owned_mutex_guard<T> relocked(semaphore_permit&& held) noexcept {
    return {std::move(owner_), std::move(held)};
  }

 private:
  std::shared_ptr<mutex<T>> owner_;
};

template <class U>
class unlocked_guard<mapped_mutex_guard<U>> : public unlocked_guard_base<U> {
 public:
  explicit unlocked_guard(mapped_mutex_guard<U>& g) noexcept : unlocked_guard_base<U>(g.value_, g.permit_) {}
  static semaphore_permit&& lock_of(mapped_mutex_guard<U>& g) noexcept { return std::move(g.permit_); }
  mapped_mutex_guard<U> relocked(semaphore_permit&& held) noexcept {
    return {std::move(held), &this->value()};
  }
};

template <class U>
class unlocked_guard<owned_mapped_mutex_guard<U>> : public unlocked_guard_base<U> {
 public:
  explicit unlocked_guard(owned_mapped_mutex_guard<U>& g) noexcept
      : unlocked_guard_base<U>(g.value_, g.held_.permit()), owner_(g.held_.take_owner()) {}
  static semaphore_permit&& lock_of(owned_mapped_mutex_guard<U>& g) noexcept {
    return std::move(g.held_.permit());
  }
  owned_mapped_mutex_guard<U> relocked(semaphore_permit&& held) noexcept {
    return {std::move(owner_), &this->value(), std::move(held)};
  }

 private:
  std::shared_ptr<const void> owner_;
};

/// Whether `Guard` is one of a mutex's guards (the four unlocked_guard takes apart).
template <class Guard>
inline constexpr bool is_mutex_guard = false;
template <class T>
inline constexpr bool is_mutex_guard<mutex_guard<T>> = true;
template <class T>
inline constexpr bool is_mutex_guard<owned_mutex_guard<T>> = true;
template <class U>
inline constexpr bool is_mutex_guard<mapped_mutex_guard<U>> = true;
template <class U>
inline constexpr bool is_mutex_guard<owned_mapped_mutex_guard<U>> = true;

/// A guard a condvar can wait on: mutex_guard, owned_mutex_guard, mapped_mutex_guard,
/// owned_mapped_mutex_guard.
template <class Guard>
concept condvar_guard = is_mutex_guard<Guard>;
}  // namespace detail

/// A condition variable for asyncband::mutex.
///
/// Contract
/// - Guards: every wait takes any guard of a mutex (mutex_guard, owned_mutex_guard,
///   mapped_mutex_guard, owned_mapped_mutex_guard) and gives back the same type, re-locked, of
///   the same value: a mapped guard's part is the same object (the mutex's value does not move
///   while unlocked; if another holder destroys that part meanwhile, the guard given back, and
///   the predicate, refer to nothing: map again after the wait instead), an owned guard keeps
///   the mutex alive throughout. The predicate of wait_while gets what the guard gives access
///   to (the part, for a mapped guard).
/// - A wait registers itself with the condvar before it unlocks the mutex, so a notification
///   made after the waiter's last check under the mutex is never lost. Then it waits for a
///   notification, and then re-locks the mutex (an acquisition like any other: a plain
///   thread's re-lock without a stop token retries under the mutex's bounded barging).
/// - notify_one() wakes the oldest registered waiter; notify_all() every registered waiter;
///   with nobody registered they do nothing (a notification is not stored). The notifier need
///   not hold the mutex.
/// - Synchronization: a notify_one()/notify_all() call happens-before the return of a wait it
///   woke; the mutex orders everything else.
/// - Cancellation (stop token), at either stage: the wait returns cancelled and does NOT hold
///   the mutex. A notify_one() already delivered to it is passed to the oldest waiter still
///   registered *before that notify_one()*, if any (else it is dropped, as a notification with
///   nobody to wake is), also when the stop comes while it re-locks; a mutex hand-off it had
///   received passes on. Destroying a suspended waiting coroutine does the same.
/// - wait_while(guard, keep_waiting): returns at once if keep_waiting(value) is false; otherwise
///   waits, and re-checks after each wake-up with the mutex held, until it is false. The first
///   check runs in the awaiting coroutine; later ones run on the thread that completed the
///   re-lock (the unlocker's, or the notifier's when the mutex was free), after every internal
///   lock is released: keep it a cheap check. If it throws, the wait
///   rethrows in the coroutine and the mutex is unlocked.
/// - Spurious wake-ups do not happen: a plain wait returns after a notification made after it
///   registered (or a cancellation) only; a passed-on notify_one never reaches a waiter that
///   registered after the original notify_one().
/// - The condvar must outlive its pending waits.
class condvar {
  class notify_node;
  friend class detail::queued_waiter<condvar>;
  friend struct asyncband::detail::debug_access;
  template <class Guard, bool Cancellable, class Predicate>
  class waiting;
  template <class Guard, bool Cancellable, class Predicate>
  friend class waiting;

  using relock_node = detail::semaphore_acquire<detail::permit_itself>;

 public:
  condvar() noexcept = default;
  condvar(const condvar&) = delete;
  condvar& operator=(const condvar&) = delete;
  /// Debug builds assert that no wait is registered (one re-locking waits on the mutex).
  ~condvar() { assert(queue_.no_waiters_left() && "asyncband::condvar destroyed with waiters"); }

  /// Wakes the oldest registered waiter, if any.
  void notify_one() noexcept { hand_notify_one(now); }

  /// Wakes every registered waiter.
  void notify_all() noexcept { queue_.wake_all(); }

  /// `guard = co_await cv.wait(std::move(guard));` Precondition: guard.owns_lock(). `Guard` is
  /// any guard of a mutex; the wait yields the same type.
  template <detail::condvar_guard Guard>
  auto wait(Guard guard) {
    return waiting<Guard, false, detail::wait_once>(*this, std::move(guard), {}, {});
  }
  /// Yields result<Guard>: ok (mutex held), or cancelled (mutex not held).
  template <detail::condvar_guard Guard>
  auto wait(Guard guard, asyncband::stop_token stop) {
    return waiting<Guard, true, detail::wait_once>(*this, std::move(guard), {}, std::move(stop));
  }
  /// Waits while `keep_waiting(value)` is true (the guard's value: a mapped guard's part); yields
  /// the guard.
  template <detail::condvar_guard Guard, class Predicate>
  auto wait_while(Guard guard, Predicate keep_waiting) {
    return waiting<Guard, false, Predicate>(*this, std::move(guard), std::move(keep_waiting), {});
  }
  /// Yields result<Guard>: ok (mutex held, keep_waiting false), or cancelled.
  template <detail::condvar_guard Guard, class Predicate>
  auto wait_while(Guard guard, Predicate keep_waiting, asyncband::stop_token stop) {
    return waiting<Guard, true, Predicate>(*this, std::move(guard), std::move(keep_waiting), std::move(stop));
  }

  /// wait(guard) for a plain thread: unlocks, blocks until notified, relocks; yields the guard
  /// (the same type). Precondition: guard.owns_lock().
  template <detail::condvar_guard Guard>
  Guard wait_blocking(Guard guard) {
    return block<false>(std::move(guard), detail::wait_once{}, {});
  }
  /// As wait_blocking(guard), or until `stop` is requested: ok (mutex held), or cancelled (mutex
  /// not held).
  template <detail::condvar_guard Guard>
  result<Guard> wait_blocking(Guard guard, asyncband::stop_token stop) {
    return block<true>(std::move(guard), detail::wait_once{}, std::move(stop));
  }
  /// wait_while(guard, keep_waiting) for a plain thread; yields the guard.
  template <detail::condvar_guard Guard, class Predicate>
  Guard wait_while_blocking(Guard guard, Predicate keep_waiting) {
    return block<false>(std::move(guard), std::move(keep_waiting), {});
  }
  /// As wait_while_blocking(guard, keep_waiting), or until `stop` is requested: ok (mutex held,
  /// keep_waiting false), or cancelled (mutex not held).
  template <detail::condvar_guard Guard, class Predicate>
  result<Guard> wait_while_blocking(Guard guard, Predicate keep_waiting, asyncband::stop_token stop) {
    return block<true>(std::move(guard), std::move(keep_waiting), std::move(stop));
  }

 private:
  /// A registration waiting for a notification. A notify_one is a grant: delivered to a waiter
  /// that will not use it (cancelled, destroyed), it goes to the next waiter registered before
  /// that notify_one, if any. A notify_all woke everybody registered then; passing it on would
  /// wake somebody registered after it.
  class notify_node : public detail::queued_waiter<condvar> {
   public:
    using value_type = void;
    static constexpr bool transferable = true;
    using queued_waiter::queued_waiter;

    static bool try_ready() noexcept { return false; }
    bool enqueue() noexcept {
      return owner().queue_.complete_or_enqueue(*this, [this] {
        registration = ++owner().registrations_;
        return false;
      });
    }
    void take() noexcept {}
    void give_back() noexcept { owner().pass_on(notify_bound); }

    // Both under the condvar's lock: the registration's number (set by enqueue), and, written
    // by a notify_one that claims this waiter, that notify_one's bound: the registrations made
    // before it. 0 for a notify_all (registrations are numbered from 1), which is not passed on.
    std::uint64_t registration = 0;
    std::uint64_t notify_bound = 0;
  };

  detail::wait_queue& queue() noexcept { return queue_; }

  /// hand_notify_one's bound for a new notify_one: every registration so far.
  static constexpr std::uint64_t now = 0;

  /// A notify_one for the waiters registered before `bound` (`now`: all of them): claims the
  /// oldest if it registered before, and records the bound in it, for a pass-on. Registrations
  /// are numbered in queue order, so if the oldest registered later, all did: nobody is owed it.
  void hand_notify_one(std::uint64_t bound) noexcept {
    queue_.wake([this, bound](detail::wait_list& waiters, detail::wake_batch& batch) {
      if (waiters.empty()) return;
      auto& oldest = static_cast<notify_node&>(*waiters.front());
      const std::uint64_t limit = bound == now ? registrations_ + 1 : bound;
      if (oldest.registration >= limit) return;
      oldest.notify_bound = limit;
      waiters.claim_front(batch);
    });
  }

  /// A waiter that consumed a notify_one (bound != 0) and will not return with it passes it on,
  /// to a waiter registered before that notify_one only: to one registered after, it would be a
  /// spurious wake-up.
  void pass_on(std::uint64_t notify_bound) noexcept {
    if (notify_bound != 0) hand_notify_one(notify_bound);
  }

  /// Asks the predicate whether to (go on) waiting. A plain wait waits exactly once.
  template <class T, class Predicate>
  static bool keep_waiting(Predicate& predicate, T& value, bool woken) {
    if constexpr (std::is_same_v<Predicate, detail::wait_once>) {
      return !woken;
    } else {
      return static_cast<bool>(predicate(value));
    }
  }

  /// Ends the notification stage: true if notified (and not cancelled since).
  template <bool Cancellable>
  static bool notified(detail::pending_wait<notify_node, Cancellable>& w) {
    if constexpr (Cancellable) {
      return w.finish().ok();
    } else {
      w.finish();
      return true;
    }
  }

  template <bool Cancellable, class Guard>
  using yield_t = std::conditional_t<Cancellable, result<Guard>, Guard>;

  /// Only a cancellable wait ends cancelled; the plain one's stop token never stops.
  template <bool Cancellable, class Guard>
  static yield_t<Cancellable, Guard> cancelled() noexcept {
    if constexpr (Cancellable) {
      return wait_status::cancelled;
    } else {
      std::terminate();
    }
  }

  template <bool Cancellable, class Guard, class Predicate>
  yield_t<Cancellable, Guard> block(Guard guard, Predicate predicate, asyncband::stop_token stop);

  // mutable: debug.hpp counts the waiters of a const one
  mutable detail::wait_queue queue_;
  std::uint64_t registrations_ = 0;  // guarded by queue_.mutex(); 2^64 never wraps in practice
};

/// The awaiter of a condvar wait: two waits in a row (the notification, then the mutex), driven
/// from callbacks so that the coroutine suspends once. Lives in the awaiting frame.
template <class Guard, bool Cancellable, class Predicate>
class [[nodiscard("co_await it: a wait does nothing until it is awaited")]] condvar::waiting
    : public detail::staged_awaiter_base<Cancellable> {
  friend struct detail::staged_access;
  using notified_wait = detail::pending_wait<notify_node, Cancellable>;
  using relock_wait = detail::pending_wait<relock_node, Cancellable>;
  using yield_type = yield_t<Cancellable, Guard>;
  using parts = detail::unlocked_guard<Guard>;

 public:
  waiting(condvar& cv, Guard&& guard, Predicate predicate, asyncband::stop_token stop)
      : condvar_(&cv),
        guard_(guard),
        held_(parts::lock_of(guard)),
        predicate_(std::move(predicate)),
        stop_(std::move(stop)) {}
  waiting(const waiting&) = delete;
  waiting& operator=(const waiting&) = delete;

  /// A frame destroyed while re-locking passes its notification on, as a cancellation would.
  ~waiting() {
    if (!relock_ || !relock_->pending()) return;
    relock_.reset();  // unlinks, passing on a hand-off it had received
    condvar_->pass_on(notify_bound_);
  }

  /// Throws std::logic_error if this awaiter suspended before, before the predicate reads the
  /// value (the mutex is no longer held then).
  bool await_ready() {
    if (notified_) [[unlikely]]
      detail::throw_awaited_again();
    if (!keep_waiting(predicate_, guard_.value(), false)) return true;  // holds already
    if (!stop_.stop_requested()) return false;
    outcome_ = wait_status::cancelled;
    return true;
  }

  /// Throws std::logic_error if this awaiter suspended before (it registered: notified_ is set).
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    if (notified_) [[unlikely]]
      detail::throw_awaited_again();
    return start(detail::resume_target(h, scheduler_of(h)));
  }

  yield_type await_resume() {
    if (error_) std::rethrow_exception(error_);
    if constexpr (Cancellable) {
      if (outcome_ != wait_status::ok) {
        held_.release();
        return outcome_;
      }
    }
    return guard_.relocked(std::move(held_));
  }

 private:
  /// Registers; `target` continues the waiter once a step ends the wait (staged_access::start).
  bool start(detail::resume_target target) noexcept {
    self_ = target;
    return wait_for_notification();
  }

  /// After an ok outcome was taken and its guard dropped, for a driver that reports the wait
  /// cancelled instead: the notify_one it consumed goes on, as for a cancellation.
  void give_back() noexcept { condvar_->pass_on(notify_bound_); }

  /// The node of the stage in progress or last ended (staged_access::current_node).
  detail::waiter* current_node() noexcept {
    if (relock_) return &relock_->node();
    if (notified_) return &notified_->node();
    return nullptr;
  }

  // Each step returns true if the wait is pending (a resolver will continue it), false if it
  // is over and the coroutine should continue now. Nothing touches the frame after a step that
  // returned true.

  /// Registers with the condvar, then unlocks the mutex (the permit is moved to the stack first,
  /// since the frame may be running elsewhere once the registration is published).
  [[gnu::noinline]] bool wait_for_notification() noexcept {
    notified_wait& w = notified_.emplace(stop_, condvar_);
    if (w.try_complete()) return finish(wait_status::cancelled);
    // Unlocked once registered and before anything can resume the wait: so the wait cannot
    // end (and its owner destroy the mutex) while this thread still holds the lock.
    const bool pending = w.publish(detail::resume_target::continuation(&on_notified, this),
                                   [this]() noexcept { held_.release(); });
    return pending || after_notification();
  }

  bool after_notification() noexcept {
    notify_bound_ = notified_->node().notify_bound;
    if (!notified(*notified_)) return finish(wait_status::cancelled);
    relock_wait& w = relock_.emplace(stop_, &guard_.lock(), std::size_t{1}, detail::permit_itself{});
    if (!w.try_complete() && w.publish(detail::resume_target::continuation(&on_relocked, this))) return true;
    return after_relock();
  }

  bool after_relock() noexcept {
    auto relocked = relock_->finish();
    relock_.reset();
    if constexpr (Cancellable) {
      if (!relocked.ok()) {
        condvar_->pass_on(notify_bound_);  // the notification this wait consumed goes on
        return finish(wait_status::cancelled);
      }
      held_ = std::move(*relocked);
    } else {
      held_ = std::move(relocked);
    }
    try {
      if (!keep_waiting(predicate_, guard_.value(), true)) return finish(wait_status::ok);
    } catch (...) {
      error_ = std::current_exception();
      return finish(wait_status::ok);
    }
    const detail::wake_batch::defer_nested loop_not_recursion;
    return wait_for_notification();
  }

  bool finish(wait_status outcome) noexcept {
    outcome_ = outcome;
    return false;
  }

  static void on_notified(void* self) noexcept { continue_with(self, &waiting::after_notification); }
  static void on_relocked(void* self) noexcept { continue_with(self, &waiting::after_relock); }
  static void continue_with(void* self, bool (waiting::*step)() noexcept) noexcept {
    auto* w = static_cast<waiting*>(self);
    const detail::resume_target coroutine = w->self_;
    if (!(w->*step)()) coroutine.run();
  }

  condvar* condvar_;
  parts guard_;  // before everything that may touch the mutex: an owned guard's reference goes last
  semaphore_permit held_;
  Predicate predicate_;
  asyncband::stop_token stop_;
  detail::resume_target self_;
  std::optional<notified_wait> notified_;
  std::optional<relock_wait> relock_;
  wait_status outcome_ = wait_status::ok;
  std::uint64_t notify_bound_ = 0;
  std::exception_ptr error_;
};

template <bool Cancellable, class Guard, class Predicate>
condvar::yield_t<Cancellable, Guard> condvar::block(Guard guard, Predicate predicate,
                                                    asyncband::stop_token stop) {
  detail::unlocked_guard<Guard> parts(guard);
  semaphore_permit held = detail::unlocked_guard<Guard>::lock_of(guard);
  std::uint64_t notify_bound = 0;
  for (bool woken = false; keep_waiting(predicate, parts.value(), woken); woken = true) {
    {
      detail::pending_wait<notify_node, Cancellable> notified(stop, this);
      if (notified.try_complete()) return cancelled<Cancellable, Guard>();
      detail::parker park;
      const bool pending = notified.publish(detail::resume_target(&detail::parker::unpark_thunk, &park),
                                            [&held]() noexcept { held.release(); });
      if (pending) park.park();
      notify_bound = notified.node().notify_bound;
      if (!condvar::notified(notified)) return cancelled<Cancellable, Guard>();
    }
    auto relocked = detail::block_wait<relock_node, Cancellable>(stop, {}, &parts.lock(), std::size_t{1},
                                                                 detail::permit_itself{});
    if constexpr (Cancellable) {
      if (!relocked.ok()) {
        pass_on(notify_bound);
        return cancelled<Cancellable, Guard>();
      }
      held = std::move(*relocked);
    } else {
      held = std::move(relocked);
    }
  }
  return parts.relocked(std::move(held));
}

}  // namespace asyncband
