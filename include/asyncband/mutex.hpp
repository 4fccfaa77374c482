// SPDX-License-Identifier: Apache-2.0
// asyncband/mutex.hpp
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <cassert>
#include <chrono>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "detail/wait_functions.hpp"
#include "result.hpp"
#include "semaphore.hpp"
#include "stop_token.hpp"

namespace asyncband {

template <class T>
class mutex;

namespace detail {
struct mutex_access;
template <class Guard>
class unlocked_guard;
}  // namespace detail

template <class U>
class owned_mapped_mutex_guard;

/// Access to part of a mutex's value (from mutex_guard::map); unlocks on destruction. A condvar
/// wait on it re-locks the mutex and gives back a guard of the same part.
template <class U>
class [[nodiscard]] mapped_mutex_guard {
 public:
  /// Takes over `other`'s lock; `other` is left empty.
  mapped_mutex_guard(mapped_mutex_guard&&) noexcept = default;
  /// Unlocks what this guard held, then takes over `other`'s lock.
  mapped_mutex_guard& operator=(mapped_mutex_guard&&) noexcept = default;
  mapped_mutex_guard(const mapped_mutex_guard&) = delete;
  mapped_mutex_guard& operator=(const mapped_mutex_guard&) = delete;
  ~mapped_mutex_guard() = default;

  /// @{
  /// The part, as `*g` or `g->`. Precondition: owns_lock().
  U& operator*() const noexcept { return *value_; }
  U* operator->() const noexcept { return value_; }
  /// @}
  /// Whether the guard holds the lock (false once unlocked or moved from).
  [[nodiscard]] bool owns_lock() const noexcept { return static_cast<bool>(permit_); }
  /// Unlocks now; the guard gives no access afterwards.
  void unlock() noexcept { permit_.release(); }

  /// Narrows further: `f(U&)` returns a reference to a part of the value. If f throws, this
  /// guard still holds the lock.
  template <class F>
  auto map(F&& f) && {
    auto& part = std::forward<F>(f)(*value_);
    return mapped_mutex_guard<std::remove_reference_t<decltype(part)>>(std::move(permit_), &part);
  }

  /// Narrows further if the part is there: `f(U&)` returns a pointer into the value, or null.
  /// On a part, the lock moves to the returned guard and this one is left empty; on null, or if
  /// f throws, this guard still holds the lock. Precondition: owns_lock().
  template <class F>
  auto try_map(F&& f) {
    return detail::map_if_part(*value_, std::forward<F>(f), [this](auto* part) {
      return mapped_mutex_guard<std::remove_pointer_t<decltype(part)>>(std::move(permit_), part);
    });
  }

 private:
  template <class>
  friend class mapped_mutex_guard;
  template <class>
  friend class mutex_guard;
  template <class>
  friend class detail::unlocked_guard;
  mapped_mutex_guard(semaphore_permit&& permit, U* value) noexcept
      : value_(value), permit_(std::move(permit)) {}

  U* value_;
  // Declared last: the defaulted move assignment assigns it last, and its own assignment
  // releases the old lock last (a waiter it resumes inline may destroy this guard at once).
  semaphore_permit permit_;
};

/// Exclusive access to a mutex's value; unlocks on destruction. Move-only.
template <class T>
class [[nodiscard]] mutex_guard {
 public:
  /// Takes over `other`'s lock; `other` is left empty.
  mutex_guard(mutex_guard&& other) noexcept
      : permit_(std::move(other.permit_)), mutex_(std::exchange(other.mutex_, nullptr)) {}
  /// Unlocks what this guard held, then takes over `other`'s lock.
  mutex_guard& operator=(mutex_guard&& other) noexcept {
    if (this != &other) {
      // What this guard held is unlocked last, from a local: the unlock may resume a waiter
      // inline that destroys this guard at once (last one out).
      const mutex_guard departing(std::move(*this));
      permit_ = std::move(other.permit_);
      mutex_ = std::exchange(other.mutex_, nullptr);
    }
    return *this;
  }
  mutex_guard(const mutex_guard&) = delete;
  mutex_guard& operator=(const mutex_guard&) = delete;
  ~mutex_guard() = default;

  /// @{
  /// The value, as `*g` or `g->`. Precondition: owns_lock().
  T& operator*() const noexcept { return mutex_->value_; }
  T* operator->() const noexcept { return &mutex_->value_; }
  /// @}
  /// Whether the guard holds the lock (false once unlocked or moved from).
  [[nodiscard]] bool owns_lock() const noexcept { return static_cast<bool>(permit_); }
  /// The mutex this guard locks (nullptr once moved from).
  [[nodiscard]] asyncband::mutex<T>* mutex() const noexcept { return mutex_; }

  /// Unlocks now; the guard gives no access afterwards.
  void unlock() noexcept {
    mutex_ = nullptr;
    permit_.release();  // last: a waiter it resumes inline may destroy this guard
  }

  /// A guard of part of the value: `f(T&)` returns a reference into it. If f throws, this guard
  /// still holds the lock.
  template <class F>
  auto map(F&& f) && {
    auto& part = std::forward<F>(f)(mutex_->value_);
    mutex_ = nullptr;
    return mapped_mutex_guard<std::remove_reference_t<decltype(part)>>(std::move(permit_), &part);
  }

  /// A guard of part of the value if the part is there: `f(T&)` returns a pointer into the
  /// value, or null (an optional's contents, a variant's alternative, a map's entry). On a
  /// part, the lock moves to the returned guard and this one is left empty (owns_lock() false);
  /// on null, or if f throws, this guard still holds the lock. Precondition: owns_lock().
  template <class F>
  auto try_map(F&& f) {
    return detail::map_if_part(mutex_->value_, std::forward<F>(f), [this](auto* part) {
      mutex_ = nullptr;
      return mapped_mutex_guard<std::remove_pointer_t<decltype(part)>>(std::move(permit_), part);
    });
  }

 private:
  friend class asyncband::mutex<T>;
  template <class>
  friend class detail::unlocked_guard;
  mutex_guard(semaphore_permit&& permit, asyncband::mutex<T>* m) noexcept
      : permit_(std::move(permit)), mutex_(m) {}

  semaphore_permit permit_;
  asyncband::mutex<T>* mutex_;
};

/// A guard that also keeps its mutex alive (shared ownership), for work that outlives the scope
/// that locked it (a detached task). Move-only.
template <class T>
class [[nodiscard]] owned_mutex_guard {
 public:
  /// Takes over `other`'s lock and reference; `other` is left empty.
  owned_mutex_guard(owned_mutex_guard&&) noexcept = default;
  /// What this guard held is unlocked before its reference goes (detail::owning_permit).
  owned_mutex_guard& operator=(owned_mutex_guard&&) noexcept = default;
  owned_mutex_guard(const owned_mutex_guard&) = delete;
  owned_mutex_guard& operator=(const owned_mutex_guard&) = delete;
  ~owned_mutex_guard() = default;  // unlocks, then drops the reference (maybe the last one)

  /// @{
  /// The value, as `*g` or `g->`. Precondition: owns_lock().
  T& operator*() const noexcept { return held_.owner()->value_; }
  T* operator->() const noexcept { return &held_.owner()->value_; }
  /// @}
  /// Whether the guard holds the lock (false once unlocked or moved from).
  [[nodiscard]] bool owns_lock() const noexcept { return static_cast<bool>(held_.permit()); }
  /// The mutex this guard keeps alive (null once moved from).
  [[nodiscard]] const std::shared_ptr<asyncband::mutex<T>>& mutex() const noexcept { return held_.owner(); }
  /// Unlocks now (the guard keeps its reference to the mutex until destroyed).
  void unlock() noexcept { held_.permit().release(); }

  /// An owned guard of part of the value, which keeps the mutex alive as this one does: `f(T&)`
  /// returns a reference into it. If f throws, this guard still holds the lock.
  template <class F>
  auto map(F&& f) && {
    auto& part = std::forward<F>(f)(held_.owner()->value_);
    return mapped<std::remove_reference_t<decltype(part)>>(&part);
  }
  /// As mutex_guard::try_map: `f(T&)` returns a pointer into the value, or null; on a part the
  /// lock and the reference move to the returned guard and this one is left empty.
  template <class F>
  auto try_map(F&& f) {
    return detail::map_if_part(held_.owner()->value_, std::forward<F>(f),
                               [this](auto* part) { return this->mapped(part); });
  }

 private:
  friend struct detail::mutex_access;
  template <class>
  friend class detail::unlocked_guard;
  owned_mutex_guard(std::shared_ptr<asyncband::mutex<T>> m, semaphore_permit&& permit) noexcept
      : held_(std::move(m), std::move(permit)) {}

  /// The lock and the reference, moved into a guard of `part`.
  template <class U>
  owned_mapped_mutex_guard<U> mapped(U* part) noexcept {
    std::shared_ptr<const void> owner = held_.take_owner();
    return owned_mapped_mutex_guard<U>(std::move(owner), part, std::move(held_.permit()));
  }

  detail::owning_permit<asyncband::mutex<T>> held_;
};

/// Access to part of a mutex's value that also keeps the mutex alive (from
/// owned_mutex_guard::map); unlocks on destruction, then drops its reference, and so does move
/// assignment for what it held (detail::owning_permit). Move-only.
template <class U>
class [[nodiscard]] owned_mapped_mutex_guard {
 public:
  /// Takes over `other`'s lock and reference; `other` is left empty.
  owned_mapped_mutex_guard(owned_mapped_mutex_guard&&) noexcept = default;
  /// Unlocks what this guard held, drops its reference, then takes over `other`'s.
  owned_mapped_mutex_guard& operator=(owned_mapped_mutex_guard&&) noexcept = default;
  owned_mapped_mutex_guard(const owned_mapped_mutex_guard&) = delete;
  owned_mapped_mutex_guard& operator=(const owned_mapped_mutex_guard&) = delete;
  ~owned_mapped_mutex_guard() = default;

  /// @{
  /// The part, as `*g` or `g->`. Precondition: owns_lock().
  U& operator*() const noexcept { return *value_; }
  U* operator->() const noexcept { return value_; }
  /// @}
  /// Whether the guard holds the lock (false once unlocked or moved from).
  [[nodiscard]] bool owns_lock() const noexcept { return static_cast<bool>(held_.permit()); }
  /// Unlocks now (the guard keeps its reference to the mutex until destroyed).
  void unlock() noexcept { held_.permit().release(); }

  /// Narrows further: `f(U&)` returns a reference to a part. If f throws, this guard still holds
  /// the lock.
  template <class F>
  auto map(F&& f) && {
    auto& part = std::forward<F>(f)(*value_);
    return owned_mapped_mutex_guard<std::remove_reference_t<decltype(part)>>(std::move(held_), &part);
  }
  /// As mutex_guard::try_map, for a part of this part.
  template <class F>
  auto try_map(F&& f) {
    return detail::map_if_part(*value_, std::forward<F>(f), [this](auto* part) {
      return owned_mapped_mutex_guard<std::remove_pointer_t<decltype(part)>>(std::move(held_), part);
    });
  }

 private:
  template <class>
  friend class owned_mapped_mutex_guard;
  template <class>
  friend class owned_mutex_guard;
  template <class>
  friend class detail::unlocked_guard;
  using owning = detail::owning_permit<const void>;  // the mutex, whatever its T
  owned_mapped_mutex_guard(std::shared_ptr<const void> owner, U* value, semaphore_permit&& permit) noexcept
      : value_(value), held_(std::move(owner), std::move(permit)) {}
  owned_mapped_mutex_guard(owning&& held, U* value) noexcept : value_(value), held_(std::move(held)) {}

  U* value_;
  owning held_;  // declared last: the defaulted move assignment returns the old lock last
};

/// A mutual-exclusion lock that owns the value it protects (as tokio's and Asyncband's Mutex):
/// the value is reachable only through a guard. `mutex<>` protects nothing (std::monostate).
///
/// Contract
/// - Synchronization: everything a guard's holder did before unlocking happens-before
///   everything the next holder does after its lock completes.
/// - Fairness: FIFO among waiters, with bounded barging (the default), or strict FIFO hand-off
///   (`mutex<T> m(asyncband::strict_fifo, value)`).
///   - Bounded barging: an unlock with waiters frees the lock and sends the oldest waiter to
///     retry; whoever locks first takes it (a running coroutine's `lock`, `try_lock`, a
///     thread), and a retry that finds it taken goes back to the front of the queue. The unlocks
///     are counted, and every `max_passes`-th one hands the lock to the oldest waiter (or its
///     retry in flight) instead of freeing it, if anybody waits; so no coroutine is passed more
///     than `max_passes` times once it is the oldest.
///   - Who retries: `co_await lock()` from a coroutine with a scheduler (the retry is posted to
///     that scheduler, never run on the unlocker's stack), and a plain thread's untimed lock
///     without a stop token (`lock_blocking()`, `lock_owned_blocking()`, a condvar's
///     `wait_blocking` re-lock), which retries on its own thread once unparked. Waking a parked
///     thread takes microseconds, during which a lock kept for it stalls every locker, so a
///     thread is bounded in time instead: a `max_passes`-th unlock hands it the lock only once it
///     has waited `thread_max_wait` (1 ms), and passes it otherwise.
///   - Waiters that cannot retry, because nothing can run a retry for them or they may be
///     committed elsewhere, are handed the lock directly when they are the oldest, never free in
///     between: locks with a stop token or a timeout (`lock_timeout`), `when_any` branches,
///     coroutines' owned locks and condvar re-locks, and coroutines without a scheduler.
///   - Strict FIFO: an unlock with waiters hands the lock to the oldest waiter directly (it is
///     never free in between); `try_lock` and a new `lock` never barge past a waiter.
///   - Either way a waiter resumes on its own scheduler, after the unlocking call has released
///     every internal lock; the unlocker never runs the next holder on its stack unless that
///     holder has no scheduler (then it resumes inline, as with every asyncband wait).
/// - when_any: a lock that lost its when_any is never handed the mutex; unlock commits the oldest
///   waiter before the hand-off and passes over one that lost.
/// - Cancellation commits until the waiter resumes: a cancelled lock never holds the mutex; if
///   it had been handed the mutex already, the mutex passes to the next waiter (or is unlocked).
/// - Uncontended lock and unlock are one read and one CAS each, no internal lock (strict FIFO:
///   one CAS each).
/// - Not recursive: locking a mutex one already holds waits forever.
/// - The mutex must outlive its guards and pending locks (owned guards keep it alive). A
///   locking coroutine may be destroyed while its lock is queued (the lock is withdrawn), not
///   while its resumption or its retry is posted to its scheduler (debug builds assert).
template <class T = std::monostate>
class mutex {
  friend class mutex_guard<T>;
  friend class owned_mutex_guard<T>;
  friend struct detail::mutex_access;
  friend struct asyncband::detail::debug_access;

  struct make_guard {
    mutex* owner;
    mutex_guard<T> operator()(semaphore_permit&& permit) const noexcept { return {std::move(permit), owner}; }
  };
  using lock_forms = detail::acquire_forms<make_guard>;
  /// The plain co_await lock's one-pointer awaiter source (see detail::source_awaiter).
  struct lock_source {
    mutex* owner = nullptr;
    explicit operator bool() const noexcept { return owner != nullptr; }
    [[nodiscard]] semaphore& semaphore_ref() const noexcept { return owner->semaphore_; }
    [[nodiscard]] static std::size_t count() noexcept { return 1; }
    [[nodiscard]] make_guard maker() const noexcept { return {owner}; }
    static constexpr bool retries = true;  // waits through a retry when the mutex barges
  };

 public:
  /// A mutex protecting a value-initialized T, with bounded barging.
  mutex() = default;
  /// A mutex protecting `value`, with bounded barging.
  explicit mutex(T value) noexcept(std::is_nothrow_move_constructible_v<T>) : value_(std::move(value)) {}
  /// A mutex protecting a T constructed in place from `args`, with bounded barging.
  template <class... Args>
  explicit mutex(std::in_place_t /*unused*/, Args&&... args) : value_(std::forward<Args>(args)...) {}
  /// A mutex with strict FIFO hand-off instead of bounded barging, protecting `value` (see the
  /// contract): `mutex<int> m(asyncband::strict_fifo, 0);`.
  explicit mutex(strict_fifo_t /*unused*/, T value = T()) noexcept(std::is_nothrow_move_constructible_v<T>)
      : semaphore_(strict_fifo, 1), value_(std::move(value)) {}
  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;
  /// Debug builds assert that no lock is pending (before the semaphore's check, to name the mutex).
  ~mutex() { assert(semaphore_.no_waiters_left() && "asyncband::mutex destroyed with waiters"); }

  /// `co_await m.lock()` yields a mutex_guard<T>.
  auto lock() noexcept { return detail::source_awaiter<lock_source>(lock_source{this}); }
  /// Yields result<mutex_guard<T>>: ok, or cancelled (then the mutex is not held).
  auto lock(asyncband::stop_token stop) noexcept {
    return lock_forms::await_until_stopped(std::move(stop), &semaphore_, std::size_t{1}, make_guard{this});
  }
  /// lock() for a plain thread: blocks until the mutex is held.
  mutex_guard<T> lock_blocking() { return lock_forms::block(&semaphore_, std::size_t{1}, make_guard{this}); }
  /// As lock_blocking(), or until `stop` is requested: the guard, or cancelled.
  result<mutex_guard<T>> lock_blocking(asyncband::stop_token stop) {
    return lock_forms::block_until_stopped(std::move(stop), &semaphore_, std::size_t{1}, make_guard{this});
  }
  /// As lock_blocking(), for at most `timeout`: the guard, or timeout.
  template <class Rep, class Period>
  result<mutex_guard<T>> lock_timeout(std::chrono::duration<Rep, Period> timeout) {
    return lock_forms::block_for(timeout, &semaphore_, std::size_t{1}, make_guard{this});
  }

  /// The lock now, or nothing. Under strict FIFO also nothing while anybody waits; under bounded
  /// barging it takes the lock whenever it is free, as a new `lock` would.
  [[nodiscard]] std::optional<mutex_guard<T>> try_lock() {
    auto permit = semaphore_.try_acquire(1);
    if (!permit) return std::nullopt;
    return mutex_guard<T>(std::move(*permit), this);
  }

  /// The bound of the barging: how many unlocks in a row may pass the waiter at the head of the
  /// queue (or its retry in flight) before one hands it the lock instead of freeing it.
  static constexpr std::size_t max_passes = semaphore::max_passes;
  /// The bound of the barging for a plain thread's retry: how long it may have waited before a
  /// `max_passes`-th unlock hands it the lock instead of passing it again.
  static constexpr std::chrono::microseconds thread_max_wait = semaphore::thread_max_wait;

  /// A snapshot: true while somebody holds the mutex.
  [[nodiscard]] bool is_locked() const noexcept { return semaphore_.available() == 0; }

  /// The value, without locking, for a caller that has the mutex to itself: before it is
  /// shared, or after every task that used it has finished. Precondition: no guard of it
  /// exists and no lock is pending (debug builds assert that it is unlocked).
  [[nodiscard]] T& get_mut() noexcept {
    assert(!is_locked() && "asyncband::mutex::get_mut while locked or waited for");
    return value_;
  }
  /// Moves the value out, for a caller that has the mutex to itself (as get_mut); the mutex
  /// keeps the moved-from value. `std::move(m).into_inner()`.
  [[nodiscard]] T into_inner() && noexcept(std::is_nothrow_move_constructible_v<T>) {
    assert(!is_locked() && "asyncband::mutex::into_inner while locked or waited for");
    return std::move(value_);
  }

 private:
  semaphore semaphore_{detail::barging_t{}};
  T value_{};
};

namespace detail {

/// The owned-guard functions reach a mutex's semaphore through here.
struct mutex_access {
  template <class T>
  static semaphore& semaphore_of(mutex<T>& m) noexcept {
    return m.semaphore_;
  }

  template <class T>
  struct make_owned_guard {
    std::shared_ptr<mutex<T>> owner;
    owned_mutex_guard<T> operator()(semaphore_permit&& permit) noexcept {
      return {std::move(owner), std::move(permit)};
    }
  };
  template <class T>
  using owned_forms = acquire_forms<make_owned_guard<T>>;

  template <class T>
  static std::optional<owned_mutex_guard<T>> try_lock_owned(std::shared_ptr<mutex<T>> m) {
    auto permit = m->semaphore_.try_acquire(1);
    if (!permit) return std::nullopt;
    return owned_mutex_guard<T>(std::move(m), std::move(*permit));
  }
};

}  // namespace detail

/// `co_await lock_owned(m)` yields an owned_mutex_guard<T> that keeps `*m` alive.
/// Precondition: m is not null.
template <class T>
auto lock_owned(std::shared_ptr<mutex<T>> m) noexcept {
  semaphore* s = &detail::mutex_access::semaphore_of(*m);
  return detail::mutex_access::owned_forms<T>::await(s, std::size_t{1},
                                                     detail::mutex_access::make_owned_guard<T>{std::move(m)});
}
/// Yields result<owned_mutex_guard<T>>: ok, or cancelled.
template <class T>
auto lock_owned(std::shared_ptr<mutex<T>> m, asyncband::stop_token stop) noexcept {
  semaphore* s = &detail::mutex_access::semaphore_of(*m);
  return detail::mutex_access::owned_forms<T>::await_until_stopped(
      std::move(stop), s, std::size_t{1}, detail::mutex_access::make_owned_guard<T>{std::move(m)});
}
/// lock_owned() for a plain thread: blocks until `*m` is held. Precondition: m is not null.
template <class T>
owned_mutex_guard<T> lock_owned_blocking(std::shared_ptr<mutex<T>> m) {
  semaphore* s = &detail::mutex_access::semaphore_of(*m);
  return detail::mutex_access::owned_forms<T>::block(s, std::size_t{1},
                                                     detail::mutex_access::make_owned_guard<T>{std::move(m)});
}
/// As lock_owned_blocking(m), or until `stop` is requested: the guard, or cancelled.
template <class T>
result<owned_mutex_guard<T>> lock_owned_blocking(std::shared_ptr<mutex<T>> m, asyncband::stop_token stop) {
  semaphore* s = &detail::mutex_access::semaphore_of(*m);
  return detail::mutex_access::owned_forms<T>::block_until_stopped(
      std::move(stop), s, std::size_t{1}, detail::mutex_access::make_owned_guard<T>{std::move(m)});
}
/// An owned guard now, or nothing, as mutex::try_lock.
template <class T>
[[nodiscard]] std::optional<owned_mutex_guard<T>> try_lock_owned(std::shared_ptr<mutex<T>> m) {
  return detail::mutex_access::try_lock_owned(std::move(m));
}

}  // namespace asyncband
