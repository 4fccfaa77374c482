// SPDX-License-Identifier: Apache-2.0
// asyncband/result.hpp: the value every cancellable or fallible wait returns.
//
// Expected outcomes (cancelled, timed out, closed, full) are values, not
// exceptions. A wait that cannot fail returns its value directly; the overloads that take a
// asyncband::stop_token or a timeout, and waits on closable primitives, return result<T>, which holds
// either the value or the status that ended the wait. Channels add send_result<T> (a send that
// did not deliver hands its value back) and try_recv_result<T>.
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <cassert>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

namespace asyncband {

/// How a wait ended.
enum class wait_status : unsigned char {
  ok,         ///< The wait completed: the condition held or the grant was received.
  cancelled,  ///< A stop request was observed before the wait completed.
  timeout,    ///< A blocking wait's deadline passed before the wait completed.
  closed,     ///< The primitive was closed while the wait was pending.
};

/// The status's name: "ok", "cancelled", "timeout" or "closed".
[[nodiscard]] constexpr const char* to_string(wait_status s) noexcept {
  switch (s) {
    case wait_status::ok:
      return "ok";
    case wait_status::cancelled:
      return "cancelled";
    case wait_status::timeout:
      return "timeout";
    case wait_status::closed:
      return "closed";
  }
  return "unknown";
}

namespace detail {
/// The status half of every result<T>: how the wait ended, and its tests.
class result_status {
 public:
  /// How the wait ended.
  [[nodiscard]] wait_status status() const noexcept { return status_; }
  /// The wait completed: status() is ok (a result<T> holds its value).
  [[nodiscard]] bool ok() const noexcept { return status_ == wait_status::ok; }
  /// A stop request ended the wait.
  [[nodiscard]] bool cancelled() const noexcept { return status_ == wait_status::cancelled; }
  /// A blocking wait's deadline passed first.
  [[nodiscard]] bool timed_out() const noexcept { return status_ == wait_status::timeout; }
  /// The primitive was closed while the wait was pending.
  [[nodiscard]] bool closed() const noexcept { return status_ == wait_status::closed; }
  /// ok().
  explicit operator bool() const noexcept { return ok(); }

 protected:
  result_status() noexcept = default;
  explicit result_status(wait_status s) noexcept : status_(s) {}

  wait_status status_ = wait_status::ok;
};
}  // namespace detail

/// Either a value of type T (status() == ok) or the status that ended the wait.
template <class T>
class [[nodiscard]] result : public detail::result_status {
 public:
  /// The value's type.
  using value_type = T;

  // NOLINTBEGIN(google-explicit-constructor): ok results convert
  /// An ok result holding `value`.
  result(T&& value) : value_(std::move(value)) {}
  /// An ok result holding a copy of `value`.
  result(const T& value) : value_(value) {}
  /// A result without a value. Precondition: `failure` is not wait_status::ok.
  result(wait_status failure) : result_status(failure) { assert(failure != wait_status::ok); }
  // NOLINTEND(google-explicit-constructor)
  /// An ok result whose value is constructed in place from `args` (a receive moves its value
  /// straight from the channel into the result: one move, nothing in between that could throw).
  template <class... Args>
  explicit result(std::in_place_t /*unused*/, Args&&... args)
      : value_(std::in_place, std::forward<Args>(args)...) {}

  /// @{
  /// The value, as value(), `*r` or `r->`. Precondition: ok().
  [[nodiscard]] T& value() & noexcept { return checked(); }
  [[nodiscard]] const T& value() const& noexcept { return const_cast<result*>(this)->checked(); }
  [[nodiscard]] T&& value() && noexcept { return std::move(checked()); }
  [[nodiscard]] T& operator*() & noexcept { return checked(); }
  [[nodiscard]] const T& operator*() const& noexcept { return const_cast<result*>(this)->checked(); }
  [[nodiscard]] T&& operator*() && noexcept { return std::move(checked()); }
  [[nodiscard]] T* operator->() noexcept { return &checked(); }
  [[nodiscard]] const T* operator->() const noexcept { return &const_cast<result*>(this)->checked(); }
  /// @}

 private:
  T& checked() noexcept {
    assert(ok() && "asyncband::result::value() on a failed result");
    return *value_;
  }

  std::optional<T> value_;
};

/// A wait that yields a reference into the primitive (a once_cell's value): the reference, or
/// the status that ended the wait. Copying it copies the reference, never the value.
template <class T>
class [[nodiscard]] result<T&> : public detail::result_status {
 public:
  /// The reference's type.
  using value_type = T&;

  // NOLINTBEGIN(google-explicit-constructor): ok results convert
  /// An ok result referring to `value`.
  result(T& value) noexcept : value_(std::addressof(value)) {}
  /// A result without a reference. Precondition: `failure` is not wait_status::ok.
  result(wait_status failure) noexcept : result_status(failure) { assert(failure != wait_status::ok); }
  // NOLINTEND(google-explicit-constructor)

  /// @{
  /// The value referred to, as value(), `*r` or `r->`. Precondition: ok().
  [[nodiscard]] T& value() const noexcept { return checked(); }
  [[nodiscard]] T& operator*() const noexcept { return checked(); }
  [[nodiscard]] T* operator->() const noexcept { return &checked(); }
  /// @}

 private:
  T& checked() const noexcept {
    assert(ok() && "asyncband::result::value() on a failed result");
    return *value_;
  }

  T* value_ = nullptr;
};

/// A wait with no value: only the status.
template <>
class [[nodiscard]] result<void> : public detail::result_status {
 public:
  /// No value.
  using value_type = void;

  /// An ok result.
  result() noexcept = default;
  /// A result with status `s`.
  result(wait_status s) noexcept : result_status(s) {}  // NOLINT(google-explicit-constructor)

  /// `r == wait_status::ok`: compares the status.
  friend bool operator==(result a, wait_status b) noexcept { return a.status() == b; }
};

/// How a send ended. A send that did not deliver hands its value back (send_result::value()).
enum class send_status : unsigned char {
  ok,         ///< The value was accepted by the channel.
  full,       ///< try_send only: no capacity now.
  closed,     ///< The channel is closed (by close(), or every receiver is gone): the value will never
              ///< be received.
  cancelled,  ///< A stop request was observed before the send was accepted.
  timeout,    ///< A blocking send's deadline passed before it was accepted.
  /// The name before 0.2: the "other side is gone" condition is `closed` in every form now.
  disconnected [[deprecated("renamed send_status::closed")]] = closed,
};

/// The status's name: "ok", "full", "closed", "cancelled" or "timeout".
[[nodiscard]] constexpr const char* to_string(send_status s) noexcept {
  switch (s) {
    case send_status::ok:
      return "ok";
    case send_status::full:
      return "full";
    case send_status::closed:
      return "closed";
    case send_status::cancelled:
      return "cancelled";
    case send_status::timeout:
      return "timeout";
  }
  return "unknown";
}

/// The outcome of a send: ok, or the status that stopped it together with the unsent value.
/// The value lives in a union rather than a std::optional: g++ 12 at -O2 reports a false
/// -Wmaybe-uninitialized for the empty optional of an ok result returned from an outlined send.
template <class T>
class [[nodiscard]] send_result {
 public:
  // User-provided: with a non-trivial T in the union, a defaulted one would be deleted.
  /// A delivered send (ok).
  send_result() noexcept {}  // ok  NOLINT(modernize-use-equals-default)
  /// A send that did not deliver, holding its value. Precondition: `failure` is not ok.
  send_result(send_status failure, T&& unsent) : status_(failure) {
    assert(failure != send_status::ok);
    ::new (static_cast<void*>(&value_)) T(std::move(unsent));
  }
  /// Moves the status and the value, if any (`other` keeps a moved-from value).
  send_result(send_result&& other) noexcept(std::is_nothrow_move_constructible_v<T>)
      : status_(other.status_) {
    if (!ok()) ::new (static_cast<void*>(&value_)) T(std::move(other.value_));
  }
  /// Destroys the value held, if any, then moves `other`'s status and value.
  send_result& operator=(send_result&& other) noexcept(std::is_nothrow_move_constructible_v<T>) {
    if (this != &other) {
      reset();
      if (!other.ok()) ::new (static_cast<void*>(&value_)) T(std::move(other.value_));
      status_ = other.status_;
    }
    return *this;
  }
  send_result(const send_result&) = delete;
  send_result& operator=(const send_result&) = delete;
  ~send_result() { reset(); }

  /// How the send ended.
  [[nodiscard]] send_status status() const noexcept { return status_; }
  /// The value was accepted.
  [[nodiscard]] bool ok() const noexcept { return status_ == send_status::ok; }
  /// try_send only: no capacity now.
  [[nodiscard]] bool full() const noexcept { return status_ == send_status::full; }
  /// The receivers are gone or the channel is closed: the value will never be received.
  [[nodiscard]] bool closed() const noexcept { return status_ == send_status::closed; }
  /// The name before 0.2 of closed().
  [[nodiscard, deprecated("renamed closed()")]] bool disconnected() const noexcept { return closed(); }
  /// A stop request ended the send first.
  [[nodiscard]] bool cancelled() const noexcept { return status_ == send_status::cancelled; }
  /// A blocking send's deadline passed first.
  [[nodiscard]] bool timed_out() const noexcept { return status_ == send_status::timeout; }
  /// ok().
  explicit operator bool() const noexcept { return ok(); }

  /// @{
  /// The value handed back. Precondition: !ok().
  [[nodiscard]] T& value() & noexcept { return checked(); }
  [[nodiscard]] T&& value() && noexcept { return std::move(checked()); }
  /// @}

 private:
  T& checked() noexcept {
    assert(!ok() && "asyncband::send_result::value() on a delivered send");
    return value_;
  }
  void reset() noexcept {
    if (!ok()) value_.~T();
    status_ = send_status::ok;
  }

  send_status status_ = send_status::ok;
  union {
    T value_;  // engaged unless ok()
  };
};

/// How a try_recv ended.
enum class recv_status : unsigned char {
  ok,      ///< A value was received.
  empty,   ///< Nothing to receive now; senders remain.
  closed,  ///< Nothing to receive, ever: the channel is closed (by close(), or every sender is gone)
           ///< and drained.
  /// The name before 0.2: the "other side is gone" condition is `closed` in every form now.
  disconnected [[deprecated("renamed recv_status::closed")]] = closed,
};

/// The enumerator's name: "ok", "empty" or "closed".
[[nodiscard]] constexpr const char* to_string(recv_status s) noexcept {
  switch (s) {
    case recv_status::ok:
      return "ok";
    case recv_status::empty:
      return "empty";
    case recv_status::closed:
      return "closed";
  }
  return "unknown";
}

/// The outcome of a try_recv: the value, or why there was none.
template <class T>
class [[nodiscard]] try_recv_result {
 public:
  // NOLINTBEGIN(google-explicit-constructor)
  /// A result holding `value`.
  try_recv_result(T&& value) : value_(std::move(value)) {}
  /// A result holding a copy of `value`.
  try_recv_result(const T& value) : value_(value) {}
  /// A result without a value. Precondition: `failure` is not recv_status::ok.
  try_recv_result(recv_status failure) : status_(failure) { assert(failure != recv_status::ok); }
  // NOLINTEND(google-explicit-constructor)
  /// A value constructed in place from `args` (see result).
  template <class... Args>
  explicit try_recv_result(std::in_place_t /*unused*/, Args&&... args)
      : value_(std::in_place, std::forward<Args>(args)...) {}

  /// How the try_recv ended.
  [[nodiscard]] recv_status status() const noexcept { return status_; }
  /// A value was received.
  [[nodiscard]] bool ok() const noexcept { return status_ == recv_status::ok; }
  /// Nothing to receive now; senders remain.
  [[nodiscard]] bool empty() const noexcept { return status_ == recv_status::empty; }
  /// Nothing to receive, ever: every sender is gone (or the channel is closed) and it is drained.
  [[nodiscard]] bool closed() const noexcept { return status_ == recv_status::closed; }
  /// The name before 0.2 of closed().
  [[nodiscard, deprecated("renamed closed()")]] bool disconnected() const noexcept { return closed(); }
  /// ok().
  explicit operator bool() const noexcept { return ok(); }

  /// @{
  /// The value received, as value(), `*r` or `r->`. Precondition: ok().
  [[nodiscard]] T& value() & noexcept { return checked(); }
  [[nodiscard]] T&& value() && noexcept { return std::move(checked()); }
  [[nodiscard]] T& operator*() & noexcept { return checked(); }
  [[nodiscard]] T&& operator*() && noexcept { return std::move(checked()); }
  [[nodiscard]] T* operator->() noexcept { return &checked(); }
  /// @}

 private:
  T& checked() noexcept {
    assert(ok() && "asyncband::try_recv_result::value() without a value");
    return *value_;
  }

  std::optional<T> value_;
  recv_status status_ = recv_status::ok;
};

/// The outcome of a bounded channel's try_reserve: a permit, or full / closed.
template <class P>
class [[nodiscard]] try_reserve_result {
 public:
  /// @{
  /// A result holding the permit `p`, or one without a permit: `failure` is full or closed.
  try_reserve_result(P p) : permit_(std::move(p)) {}             // NOLINT(google-explicit-constructor)
  try_reserve_result(send_status failure) : status_(failure) {}  // NOLINT(google-explicit-constructor)
  /// @}

  /// How the try_reserve ended: ok, full or closed.
  [[nodiscard]] send_status status() const noexcept { return status_; }
  /// A permit was reserved.
  [[nodiscard]] bool ok() const noexcept { return status_ == send_status::ok; }
  /// No capacity now.
  [[nodiscard]] bool full() const noexcept { return status_ == send_status::full; }
  /// The receivers are gone or the channel is closed.
  [[nodiscard]] bool closed() const noexcept { return status_ == send_status::closed; }
  /// The name before 0.2 of closed().
  [[nodiscard, deprecated("renamed closed()")]] bool disconnected() const noexcept { return closed(); }
  /// ok().
  explicit operator bool() const noexcept { return ok(); }

  /// @{
  /// The permit, as value(), `*r` or `r->`. Precondition: ok().
  [[nodiscard]] P& value() & noexcept { return *permit_; }
  [[nodiscard]] P&& value() && noexcept { return std::move(*permit_); }
  [[nodiscard]] P& operator*() & noexcept { return *permit_; }
  [[nodiscard]] P* operator->() noexcept { return &*permit_; }
  /// @}

 private:
  std::optional<P> permit_;
  send_status status_ = send_status::ok;
};

}  // namespace asyncband
