// asyncband/result.hpp: the value every cancellable or fallible wait returns.
//
// Expected outcomes (cancelled, timed out, closed) are values, not exceptions. A wait that
// cannot fail returns its value directly; the overloads that take a std::stop_token or a
// timeout return result<T>, which holds either the value or the status that ended the wait.
#pragma once

#include <cassert>
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

/// Either a value of type T (status() == ok) or the status that ended the wait.
template <class T>
class [[nodiscard]] result {
 public:
  using value_type = T;

  result(T value) : value_(std::move(value)) {}     // NOLINT(google-explicit-constructor): ok results convert
  result(wait_status failure) : status_(failure) {  // NOLINT(google-explicit-constructor)
    assert(failure != wait_status::ok);
  }

  [[nodiscard]] wait_status status() const noexcept { return status_; }
  [[nodiscard]] bool ok() const noexcept { return status_ == wait_status::ok; }
  [[nodiscard]] bool cancelled() const noexcept { return status_ == wait_status::cancelled; }
  [[nodiscard]] bool timed_out() const noexcept { return status_ == wait_status::timeout; }
  [[nodiscard]] bool closed() const noexcept { return status_ == wait_status::closed; }
  explicit operator bool() const noexcept { return ok(); }

  /// Precondition: ok().
  [[nodiscard]] T& value() & noexcept { return checked(); }
  [[nodiscard]] const T& value() const& noexcept { return const_cast<result*>(this)->checked(); }
  [[nodiscard]] T&& value() && noexcept { return std::move(checked()); }
  [[nodiscard]] T& operator*() & noexcept { return checked(); }
  [[nodiscard]] const T& operator*() const& noexcept { return const_cast<result*>(this)->checked(); }
  [[nodiscard]] T* operator->() noexcept { return &checked(); }
  [[nodiscard]] const T* operator->() const noexcept { return &const_cast<result*>(this)->checked(); }

 private:
  T& checked() noexcept {
    assert(ok() && "asyncband::result::value() on a failed result");
    return *value_;
  }

  std::optional<T> value_;
  wait_status status_ = wait_status::ok;
};

/// A wait with no value: only the status.
template <>
class [[nodiscard]] result<void> {
 public:
  using value_type = void;

  result() noexcept = default;
  result(wait_status s) noexcept : status_(s) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] wait_status status() const noexcept { return status_; }
  [[nodiscard]] bool ok() const noexcept { return status_ == wait_status::ok; }
  [[nodiscard]] bool cancelled() const noexcept { return status_ == wait_status::cancelled; }
  [[nodiscard]] bool timed_out() const noexcept { return status_ == wait_status::timeout; }
  [[nodiscard]] bool closed() const noexcept { return status_ == wait_status::closed; }
  explicit operator bool() const noexcept { return ok(); }

  friend bool operator==(result a, wait_status b) noexcept { return a.status_ == b; }

 private:
  wait_status status_ = wait_status::ok;
};

}  // namespace asyncband
