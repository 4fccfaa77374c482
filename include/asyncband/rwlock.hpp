// SPDX-License-Identifier: Apache-2.0
// asyncband/rwlock.hpp
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <cassert>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "detail/wait_functions.hpp"
#include "result.hpp"
#include "semaphore.hpp"
#include "stop_token.hpp"

namespace asyncband {

template <class T>
class rwlock;
template <class T>
class rwlock_write_guard;
template <class T>
class owned_rwlock_read_guard;
template <class T>
class owned_rwlock_write_guard;
namespace detail {
struct rwlock_access;
}  // namespace detail

/// Shared, read-only access to an rwlock's value, or to a part of it (map). Releases its read
/// share on destruction. Move-only.
template <class T>
class [[nodiscard]] rwlock_read_guard {
 public:
  /// Takes over `other`'s share; `other` is left empty.
  rwlock_read_guard(rwlock_read_guard&&) noexcept = default;
  /// Releases what this guard held, then takes over `other`'s share.
  rwlock_read_guard& operator=(rwlock_read_guard&&) noexcept = default;
  rwlock_read_guard(const rwlock_read_guard&) = delete;
  rwlock_read_guard& operator=(const rwlock_read_guard&) = delete;
  ~rwlock_read_guard() = default;

  /// @{
  /// The value (or part), read-only, as `*g` or `g->`. Precondition: owns_lock().
  const T& operator*() const noexcept { return *value_; }
  const T* operator->() const noexcept { return value_; }
  /// @}
  /// Whether the guard holds its share (false once unlocked or moved from).
  [[nodiscard]] bool owns_lock() const noexcept { return static_cast<bool>(permit_); }
  /// Releases the share now; the guard gives no access afterwards.
  void unlock() noexcept { permit_.release(); }

  /// A read guard of part of the value: `f(const T&)` returns a reference into it. If f throws,
  /// this guard keeps its share.
  template <class F>
  auto map(F&& f) && {
    const auto& part = std::forward<F>(f)(*value_);
    return rwlock_read_guard<std::remove_cvref_t<decltype(part)>>(std::move(permit_), &part);
  }

  /// A read guard of part of the value if the part is there: `f(const T&)` returns a pointer
  /// into the value, or null. On a part, the share moves to the returned guard and this one is
  /// left empty; on null, or if f throws, this guard keeps its share. Precondition: owns_lock().
  template <class F>
  auto try_map(F&& f) {
    return detail::map_if_part(*value_, std::forward<F>(f), [this](auto* part) {
      return rwlock_read_guard<std::remove_cv_t<std::remove_pointer_t<decltype(part)>>>(std::move(permit_),
                                                                                        part);
    });
  }

 private:
  template <class>
  friend class rwlock;
  template <class>
  friend class rwlock_read_guard;
  template <class>
  friend class rwlock_write_guard;
  rwlock_read_guard(semaphore_permit&& permit, const T* value) noexcept
      : value_(value), permit_(std::move(permit)) {}

  const T* value_;
  // Declared last: the defaulted move assignment assigns it last, and its own assignment
  // releases the old share last (a waiter it resumes inline may destroy this guard at once).
  semaphore_permit permit_;
};

/// Exclusive access to an rwlock's value, or to a part of it (map). Releases on destruction, or
/// turns into a read guard without letting a writer in between (downgrade). Move-only.
template <class T>
class [[nodiscard]] rwlock_write_guard {
 public:
  /// Takes over `other`'s lock; `other` is left empty.
  rwlock_write_guard(rwlock_write_guard&&) noexcept = default;
  /// Releases what this guard held, then takes over `other`'s lock.
  rwlock_write_guard& operator=(rwlock_write_guard&&) noexcept = default;
  rwlock_write_guard(const rwlock_write_guard&) = delete;
  rwlock_write_guard& operator=(const rwlock_write_guard&) = delete;
  ~rwlock_write_guard() = default;

  /// @{
  /// The value (or part), as `*g` or `g->`. Precondition: owns_lock().
  T& operator*() const noexcept { return *value_; }
  T* operator->() const noexcept { return value_; }
  /// @}
  /// Whether the guard holds the lock (false once unlocked or moved from).
  [[nodiscard]] bool owns_lock() const noexcept { return static_cast<bool>(permit_); }
  /// Releases the lock now; the guard gives no access afterwards.
  void unlock() noexcept { permit_.release(); }

  /// A write guard of part of the value: `f(T&)` returns a reference into it. If f throws, this
  /// guard keeps the lock.
  template <class F>
  auto map(F&& f) && {
    auto& part = std::forward<F>(f)(*value_);
    return rwlock_write_guard<std::remove_reference_t<decltype(part)>>(std::move(permit_), &part);
  }

  /// A write guard of part of the value if the part is there: `f(T&)` returns a pointer into
  /// the value, or null. On a part, the lock moves to the returned guard and this one is left
  /// empty; on null, or if f throws, this guard keeps the lock. Precondition: owns_lock().
  template <class F>
  auto try_map(F&& f) {
    return detail::map_if_part(*value_, std::forward<F>(f), [this](auto* part) {
      return rwlock_write_guard<std::remove_pointer_t<decltype(part)>>(std::move(permit_), part);
    });
  }

  /// Keeps one read share and releases the rest at once: no writer can get in between, and
  /// readers queued behind this writer (up to the next queued writer) are let in.
  /// Precondition: owns_lock().
  rwlock_read_guard<T> downgrade() && noexcept {
    // The whole grant moves to the read guard first: the release may resume a reader inline
    // that destroys this write guard at once, so nothing of it is touched after the release.
    rwlock_read_guard<T> read(std::move(permit_), value_);
    read.permit_.release(read.permit_.count() - 1);
    return read;
  }

 private:
  template <class>
  friend class rwlock;
  template <class>
  friend class rwlock_write_guard;
  rwlock_write_guard(semaphore_permit&& permit, T* value) noexcept
      : value_(value), permit_(std::move(permit)) {}

  T* value_;
  semaphore_permit permit_;  // declared last, as in rwlock_read_guard
};

/// A read guard that also keeps its rwlock alive (shared ownership), for work that outlives
/// the scope that locked it: what `read_owned` yields. Maps to the same guard of a part (which
/// keeps the rwlock alive too). Releases its share, then drops the reference, on destruction
/// and in move assignment (detail::owning_permit). Move-only.
template <class T>
class [[nodiscard]] owned_rwlock_read_guard {
 public:
  /// Takes over `other`'s share and reference; `other` is left empty.
  owned_rwlock_read_guard(owned_rwlock_read_guard&&) noexcept = default;
  /// Releases what this guard held, drops its reference, then takes over `other`'s.
  owned_rwlock_read_guard& operator=(owned_rwlock_read_guard&&) noexcept = default;
  owned_rwlock_read_guard(const owned_rwlock_read_guard&) = delete;
  owned_rwlock_read_guard& operator=(const owned_rwlock_read_guard&) = delete;
  ~owned_rwlock_read_guard() = default;

  /// @{
  /// The value (or part), read-only, as `*g` or `g->`. Precondition: owns_lock().
  const T& operator*() const noexcept { return *value_; }
  const T* operator->() const noexcept { return value_; }
  /// @}
  /// Whether the guard holds its share (false once unlocked or moved from).
  [[nodiscard]] bool owns_lock() const noexcept { return static_cast<bool>(held_.permit()); }
  /// Releases the share now (the guard keeps its reference until destroyed).
  void unlock() noexcept { held_.permit().release(); }

  /// An owned read guard of part of the value: `f(const T&)` returns a reference into it. If f
  /// throws, this guard keeps its share.
  template <class F>
  auto map(F&& f) && {
    const auto& part = std::forward<F>(f)(*value_);
    return owned_rwlock_read_guard<std::remove_cvref_t<decltype(part)>>(std::move(held_), &part);
  }
  /// As rwlock_read_guard::try_map: on a part, the share and the reference move to the returned
  /// guard and this one is left empty.
  template <class F>
  auto try_map(F&& f) {
    return detail::map_if_part(*value_, std::forward<F>(f), [this](auto* part) {
      return owned_rwlock_read_guard<std::remove_cv_t<std::remove_pointer_t<decltype(part)>>>(
          std::move(held_), part);
    });
  }

 private:
  template <class>
  friend class owned_rwlock_read_guard;
  template <class>
  friend class owned_rwlock_write_guard;
  friend struct detail::rwlock_access;
  using owning = detail::owning_permit<const void>;  // the rwlock, whatever its value's type
  owned_rwlock_read_guard(owning&& held, const T* value) noexcept : value_(value), held_(std::move(held)) {}

  const T* value_;
  owning held_;  // declared last: the defaulted move assignment releases the old share last
};

/// A write guard that also keeps its rwlock alive, for work that outlives the scope that
/// locked it: what `write_owned` yields. Maps to the same guard of a part, and downgrades to an
/// owned read guard without letting a writer in between. Move-only.
template <class T>
class [[nodiscard]] owned_rwlock_write_guard {
 public:
  /// Takes over `other`'s lock and reference; `other` is left empty.
  owned_rwlock_write_guard(owned_rwlock_write_guard&&) noexcept = default;
  /// Releases what this guard held, drops its reference, then takes over `other`'s.
  owned_rwlock_write_guard& operator=(owned_rwlock_write_guard&&) noexcept = default;
  owned_rwlock_write_guard(const owned_rwlock_write_guard&) = delete;
  owned_rwlock_write_guard& operator=(const owned_rwlock_write_guard&) = delete;
  ~owned_rwlock_write_guard() = default;

  /// @{
  /// The value (or part), as `*g` or `g->`. Precondition: owns_lock().
  T& operator*() const noexcept { return *value_; }
  T* operator->() const noexcept { return value_; }
  /// @}
  /// Whether the guard holds the lock (false once unlocked or moved from).
  [[nodiscard]] bool owns_lock() const noexcept { return static_cast<bool>(held_.permit()); }
  /// Releases the lock now (the guard keeps its reference until destroyed).
  void unlock() noexcept { held_.permit().release(); }

  /// An owned write guard of part of the value: `f(T&)` returns a reference into it. If f
  /// throws, this guard keeps the lock.
  template <class F>
  auto map(F&& f) && {
    auto& part = std::forward<F>(f)(*value_);
    return owned_rwlock_write_guard<std::remove_reference_t<decltype(part)>>(std::move(held_), &part);
  }
  /// As rwlock_write_guard::try_map: on a part, the lock and the reference move to the returned
  /// guard and this one is left empty.
  template <class F>
  auto try_map(F&& f) {
    return detail::map_if_part(*value_, std::forward<F>(f), [this](auto* part) {
      return owned_rwlock_write_guard<std::remove_pointer_t<decltype(part)>>(std::move(held_), part);
    });
  }

  /// Keeps one read share and releases the rest at once, as rwlock_write_guard::downgrade; the
  /// reference moves to the read guard. Precondition: owns_lock().
  owned_rwlock_read_guard<T> downgrade() && noexcept {
    // Everything moves to the read guard first: the release may resume a reader inline that
    // destroys this write guard at once.
    owned_rwlock_read_guard<T> read(std::move(held_), value_);
    semaphore_permit& shares = read.held_.permit();
    shares.release(shares.count() - 1);
    return read;
  }

 private:
  template <class>
  friend class owned_rwlock_write_guard;
  friend struct detail::rwlock_access;
  using owning = detail::owning_permit<const void>;
  owned_rwlock_write_guard(owning&& held, T* value) noexcept : value_(value), held_(std::move(held)) {}

  T* value_;
  owning held_;  // declared last, as in owned_rwlock_read_guard
};

/// A reader-writer lock that owns the value it protects: any number of readers (up to
/// max_readers()) or one writer.
///
/// Contract
/// - Synchronization: a writer's unlock happens-before every later lock (read or write) that
///   completes; a reader's unlock happens-before the next write lock that completes.
/// - Fairness: one FIFO queue for readers and writers, with bounded barging (the default) or
///   strict FIFO hand-off (`rwlock<T> l(asyncband::strict_fifo, value)`). Built on
///   asyncband::semaphore with max_readers() permits: a read takes one, a write all.
///   - Bounded barging: any lock takes the rwlock when it is available at that moment (a read
///     while no writer holds it, a write while nobody holds anything), queued waiters or not.
///     A release that makes the head's request available sends a lock of every share that
///     can retry to retry, as the mutex does (a newcomer may beat it; a retry that loses goes
///     back to the front): `co_await write()` on a scheduler, and a plain thread's untimed
///     `write_blocking()` or `write_owned_blocking()` without a stop token (with
///     max_readers() == 1, reads too). It hands every other waiter its shares directly
///     (other reads, owned coroutine writes, locks with a stop token or a timeout, when_any
///     branches, coroutines without a scheduler): as many consecutive front waiters as the
///     released shares cover, so the readers queued behind a writer are let in together.
///   - The bound: every release made while anybody waits is a pass, counted from zero again
///     whenever the oldest waiter gets its lock or nobody waits. The `max_passes`-th makes the
///     rwlock starve (for a parked thread, only once it has waited
///     semaphore::thread_max_wait): no lock barges any more (`try_read`, `try_write` fail; new
///     locks queue), and releases hand their shares to the front of the queue in FIFO order
///     until the oldest waiter holds its lock. A writer behind a stream of overlapping readers
///     is so passed at most `max_passes` releases, plus those of the readers holding shares
///     when the rwlock starves.
///   - Strict FIFO: once anybody waits, later locks (including `try_read`) queue behind it,
///     so writers cannot starve; the readers queued behind a writer are let in together.
/// - when_any: a read or write lock that lost its when_any is never granted the rwlock.
/// - Cancellation commits until the waiter resumes: a cancelled lock never holds the rwlock,
///   and what it had been handed passes to the next waiters.
/// - Uncontended read and write locks and unlocks are one CAS each.
/// - Not recursive: a reader taking a second read share may wait forever behind a writer (with
///   barging, once the rwlock starves).
/// - Destroying a coroutine while its write lock's retry is posted to its scheduler is
///   undefined, as while its resumption is (debug builds assert).
/// - The rwlock must outlive its guards and pending locks (owned guards, from `read_owned` and
///   `write_owned` on a std::shared_ptr, keep it alive).
template <class T>
class rwlock {
  friend struct detail::rwlock_access;
  friend struct asyncband::detail::debug_access;
  template <class Guard, class Value>
  struct make_guard {
    Value* value;
    Guard operator()(semaphore_permit&& permit) const noexcept { return {std::move(permit), value}; }
  };
  using make_read = make_guard<rwlock_read_guard<T>, const T>;
  using make_write = make_guard<rwlock_write_guard<T>, T>;
  using read_forms = detail::acquire_forms<make_read>;
  using write_forms = detail::acquire_forms<make_write>;
  /// The plain co_await forms' one-pointer awaiter sources (see detail::source_awaiter).
  template <bool Write>
  struct side_source {
    rwlock* owner = nullptr;
    explicit operator bool() const noexcept { return owner != nullptr; }
    [[nodiscard]] semaphore& semaphore_ref() const noexcept { return owner->semaphore_; }
    [[nodiscard]] std::size_t count() const noexcept { return Write ? owner->max_readers_ : 1; }
    static constexpr bool retries = Write;  // a writer waits through a retry when the rwlock barges
    [[nodiscard]] auto maker() const noexcept {
      if constexpr (Write) {
        return make_write{&owner->value_};
      } else {
        return make_read{&owner->value_};
      }
    }
  };

 public:
  /// The default maximum number of concurrent readers.
  static constexpr std::size_t default_max_readers = std::size_t{1} << 28;

  /// An rwlock protecting a value-initialized T, for up to default_max_readers readers at once.
  rwlock() : rwlock(std::in_place, default_max_readers) {}
  /// An rwlock protecting `value`, for up to `max_readers` readers at once (1 to
  /// semaphore::max(); std::invalid_argument otherwise), with bounded barging.
  explicit rwlock(T value, std::size_t max_readers = default_max_readers)
      : max_readers_(checked(max_readers)),
        semaphore_(max_readers_, detail::shared_barging_t{}),
        value_(std::move(value)) {}
  /// Constructs the value in place from args (for values that cannot move, such as atomics).
  template <class... Args>
  rwlock(std::in_place_t /*unused*/, std::size_t max_readers, Args&&... args)
      : max_readers_(checked(max_readers)),
        semaphore_(max_readers_, detail::shared_barging_t{}),
        value_(std::forward<Args>(args)...) {}
  /// An rwlock with strict FIFO hand-off instead of bounded barging (see the contract):
  /// `rwlock<int> l(asyncband::strict_fifo, 0);`.
  rwlock(strict_fifo_t /*unused*/, T value, std::size_t max_readers = default_max_readers)
      : max_readers_(checked(max_readers)), semaphore_(strict_fifo, max_readers_), value_(std::move(value)) {}
  rwlock(const rwlock&) = delete;
  rwlock& operator=(const rwlock&) = delete;
  /// Debug builds assert that no read or write lock is pending.
  ~rwlock() { assert(semaphore_.no_waiters_left() && "asyncband::rwlock destroyed with waiters"); }

  /// The bound of the barging: how many releases made while anybody waits may pass the oldest
  /// waiter before the rwlock starves (see the contract).
  static constexpr std::size_t max_passes = semaphore::max_passes;

  /// The most readers that can hold the lock at once.
  [[nodiscard]] std::size_t max_readers() const noexcept { return max_readers_; }

  /// A snapshot: true while a writer holds the lock or readers hold shares; with strict FIFO
  /// also while anybody waits (with barging the lock may be free while a retry is posted).
  [[nodiscard]] bool is_locked() const noexcept { return semaphore_.available() != max_readers_; }

  /// The value, without locking, for a caller that has the rwlock to itself: before it is
  /// shared, or after every task that used it has finished. Precondition: no guard of it
  /// exists and no lock is pending (debug builds assert that it is unlocked).
  [[nodiscard]] T& get_mut() noexcept {
    assert(!is_locked() && "asyncband::rwlock::get_mut while locked or waited for");
    return value_;
  }
  /// Moves the value out, for a caller that has the rwlock to itself (as get_mut); the rwlock
  /// keeps the moved-from value. `std::move(l).into_inner()`.
  [[nodiscard]] T into_inner() && noexcept(std::is_nothrow_move_constructible_v<T>) {
    assert(!is_locked() && "asyncband::rwlock::into_inner while locked or waited for");
    return std::move(value_);
  }

  /// `co_await l.read()` yields an rwlock_read_guard<T>.
  auto read() noexcept { return detail::source_awaiter<side_source<false>>(side_source<false>{this}); }
  /// Yields result<rwlock_read_guard<T>>: ok, or cancelled.
  auto read(asyncband::stop_token stop) noexcept {
    return read_forms::await_until_stopped(std::move(stop), &semaphore_, std::size_t{1}, make_read{&value_});
  }
  /// read() for a plain thread: blocks until a read share is held.
  rwlock_read_guard<T> read_blocking() {
    return read_forms::block(&semaphore_, std::size_t{1}, make_read{&value_});
  }
  /// As read_blocking(), or until `stop` is requested: the guard, or cancelled.
  result<rwlock_read_guard<T>> read_blocking(asyncband::stop_token stop) {
    return read_forms::block_until_stopped(std::move(stop), &semaphore_, std::size_t{1}, make_read{&value_});
  }
  /// As read_blocking(), for at most `timeout`: the guard, or timeout.
  template <class Rep, class Period>
  result<rwlock_read_guard<T>> read_timeout(std::chrono::duration<Rep, Period> timeout) {
    return read_forms::block_for(timeout, &semaphore_, std::size_t{1}, make_read{&value_});
  }
  /// A read share now, or nothing: nothing while a writer holds the lock, or while the rwlock
  /// starves (bounded barging) or anybody waits (strict FIFO).
  [[nodiscard]] std::optional<rwlock_read_guard<T>> try_read() { return try_lock(1, make_read{&value_}); }

  /// `co_await l.write()` yields an rwlock_write_guard<T>.
  auto write() noexcept { return detail::source_awaiter<side_source<true>>(side_source<true>{this}); }
  /// Yields result<rwlock_write_guard<T>>: ok, or cancelled.
  auto write(asyncband::stop_token stop) noexcept {
    return write_forms::await_until_stopped(std::move(stop), &semaphore_, max_readers_, make_write{&value_});
  }
  /// write() for a plain thread: blocks until the write lock is held.
  rwlock_write_guard<T> write_blocking() {
    return write_forms::block(&semaphore_, max_readers_, make_write{&value_});
  }
  /// As write_blocking(), or until `stop` is requested: the guard, or cancelled.
  result<rwlock_write_guard<T>> write_blocking(asyncband::stop_token stop) {
    return write_forms::block_until_stopped(std::move(stop), &semaphore_, max_readers_, make_write{&value_});
  }
  /// As write_blocking(), for at most `timeout`: the guard, or timeout.
  template <class Rep, class Period>
  result<rwlock_write_guard<T>> write_timeout(std::chrono::duration<Rep, Period> timeout) {
    return write_forms::block_for(timeout, &semaphore_, max_readers_, make_write{&value_});
  }
  /// The write lock now, or nothing (also nothing while the rwlock starves, or, with strict
  /// FIFO, while anybody waits).
  [[nodiscard]] std::optional<rwlock_write_guard<T>> try_write() {
    return try_lock(max_readers_, make_write{&value_});
  }

 private:
  static std::size_t checked(std::size_t max_readers) {
    if (max_readers == 0 || max_readers > semaphore::max())
      throw std::invalid_argument("asyncband::rwlock: max_readers must be in [1, semaphore::max()]");
    return max_readers;
  }

  template <class Make>
  auto try_lock(std::size_t shares, Make make)
      -> std::optional<std::invoke_result_t<Make&, semaphore_permit&&>> {
    auto permit = semaphore_.try_acquire(shares);
    if (!permit) return std::nullopt;
    return make(std::move(*permit));
  }

  std::size_t max_readers_;
  semaphore semaphore_;
  T value_;
};

namespace detail {

/// The owned-guard functions reach an rwlock's semaphore and value through here.
struct rwlock_access {
  template <class Guard, class T>
  struct make_owned {
    std::shared_ptr<rwlock<T>> owner;
    Guard operator()(semaphore_permit&& permit) noexcept {
      T* value = &owner->value_;
      return Guard(detail::owning_permit<const void>(std::move(owner), std::move(permit)), value);
    }
  };
  template <class T>
  using make_owned_read = make_owned<owned_rwlock_read_guard<T>, T>;
  template <class T>
  using make_owned_write = make_owned<owned_rwlock_write_guard<T>, T>;

  template <class T>
  static semaphore* semaphore_of(rwlock<T>& l) noexcept {
    return &l.semaphore_;
  }
  /// Shares a read (1) or write (max_readers) lock takes.
  template <class T, bool Write>
  static std::size_t shares(const rwlock<T>& l) noexcept {
    return Write ? l.max_readers_ : std::size_t{1};
  }
  template <class T, bool Write>
  using maker = std::conditional_t<Write, make_owned_write<T>, make_owned_read<T>>;
  template <class T, bool Write>
  using forms = acquire_forms<maker<T, Write>>;

  template <bool Write, class T>
  static auto await(std::shared_ptr<rwlock<T>> l) {
    rwlock<T>& raw = *l;
    return forms<T, Write>::await(semaphore_of(raw), shares<T, Write>(raw), maker<T, Write>{std::move(l)});
  }
  template <bool Write, class T>
  static auto await(std::shared_ptr<rwlock<T>> l, asyncband::stop_token stop) {
    rwlock<T>& raw = *l;
    return forms<T, Write>::await_until_stopped(std::move(stop), semaphore_of(raw), shares<T, Write>(raw),
                                                maker<T, Write>{std::move(l)});
  }
  template <bool Write, class T>
  static auto block(std::shared_ptr<rwlock<T>> l) {
    rwlock<T>& raw = *l;
    return forms<T, Write>::block(semaphore_of(raw), shares<T, Write>(raw), maker<T, Write>{std::move(l)});
  }
  template <bool Write, class T>
  static auto block(std::shared_ptr<rwlock<T>> l, asyncband::stop_token stop) {
    rwlock<T>& raw = *l;
    return forms<T, Write>::block_until_stopped(std::move(stop), semaphore_of(raw), shares<T, Write>(raw),
                                                maker<T, Write>{std::move(l)});
  }
  template <bool Write, class T>
  static auto try_lock(std::shared_ptr<rwlock<T>> l)
      -> std::optional<std::invoke_result_t<maker<T, Write>&, semaphore_permit&&>> {
    auto permit = l->semaphore_.try_acquire(shares<T, Write>(*l));
    if (!permit) return std::nullopt;
    return maker<T, Write>{std::move(l)}(std::move(*permit));
  }
};

}  // namespace detail

/// `co_await read_owned(l)` yields an owned_rwlock_read_guard<T> that keeps `*l` alive. The
/// rwlock's FIFO, when_any and cancellation contract holds. Precondition: l is not null.
template <class T>
auto read_owned(std::shared_ptr<rwlock<T>> l) {
  return detail::rwlock_access::await<false>(std::move(l));
}
/// Yields result<owned_rwlock_read_guard<T>>: ok, or cancelled.
template <class T>
auto read_owned(std::shared_ptr<rwlock<T>> l, asyncband::stop_token stop) {
  return detail::rwlock_access::await<false>(std::move(l), std::move(stop));
}
/// read_owned() for a plain thread: blocks until a share of `*l` is held. Precondition: l is
/// not null.
template <class T>
owned_rwlock_read_guard<T> read_owned_blocking(std::shared_ptr<rwlock<T>> l) {
  return detail::rwlock_access::block<false>(std::move(l));
}
/// As read_owned_blocking(l), or until `stop` is requested: the guard, or cancelled.
template <class T>
result<owned_rwlock_read_guard<T>> read_owned_blocking(std::shared_ptr<rwlock<T>> l,
                                                       asyncband::stop_token stop) {
  return detail::rwlock_access::block<false>(std::move(l), std::move(stop));
}
/// A read share now that keeps `*l` alive, or nothing (as rwlock::try_read).
template <class T>
[[nodiscard]] std::optional<owned_rwlock_read_guard<T>> try_read_owned(std::shared_ptr<rwlock<T>> l) {
  return detail::rwlock_access::try_lock<false>(std::move(l));
}

/// `co_await write_owned(l)` yields an owned_rwlock_write_guard<T> that keeps `*l` alive.
/// Precondition: l is not null.
template <class T>
auto write_owned(std::shared_ptr<rwlock<T>> l) {
  return detail::rwlock_access::await<true>(std::move(l));
}
/// Yields result<owned_rwlock_write_guard<T>>: ok, or cancelled.
template <class T>
auto write_owned(std::shared_ptr<rwlock<T>> l, asyncband::stop_token stop) {
  return detail::rwlock_access::await<true>(std::move(l), std::move(stop));
}
/// write_owned() for a plain thread: blocks until `*l` is write-locked. Precondition: l is
/// not null.
template <class T>
owned_rwlock_write_guard<T> write_owned_blocking(std::shared_ptr<rwlock<T>> l) {
  return detail::rwlock_access::block<true>(std::move(l));
}
/// As write_owned_blocking(l), or until `stop` is requested: the guard, or cancelled.
template <class T>
result<owned_rwlock_write_guard<T>> write_owned_blocking(std::shared_ptr<rwlock<T>> l,
                                                         asyncband::stop_token stop) {
  return detail::rwlock_access::block<true>(std::move(l), std::move(stop));
}
/// The write lock now that keeps `*l` alive, or nothing (as rwlock::try_write).
template <class T>
[[nodiscard]] std::optional<owned_rwlock_write_guard<T>> try_write_owned(std::shared_ptr<rwlock<T>> l) {
  return detail::rwlock_access::try_lock<true>(std::move(l));
}

}  // namespace asyncband
