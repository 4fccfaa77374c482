// SPDX-License-Identifier: Apache-2.0
// asyncband/broadcast/recv_result.hpp: what a broadcast receive yields.
#pragma once

#include "../version.hpp"  // first: a build below C++20 stops there, with one message

#include <cassert>
#include <cstdint>
#include <optional>
#include <utility>

#include "../result.hpp"

namespace asyncband::broadcast {

/// How a broadcast receive ended.
enum class recv_status : unsigned char {
  ok,         ///< A message was received.
  empty,      ///< try_recv only: no message now; senders remain.
  lagged,     ///< The receiver fell `capacity` behind (overflow channel): missed() messages were
              ///< overwritten before it read them; its next receive returns the oldest still held.
  closed,     ///< Every sender is gone (or one closed the channel) and the receiver has drained.
  cancelled,  ///< A stop request was observed before a message arrived.
  timeout,    ///< A blocking receive's deadline passed before a message arrived.
};

/// The status's name: "ok", "empty", "lagged", "closed", "cancelled" or "timeout".
[[nodiscard]] constexpr const char* to_string(recv_status s) noexcept {
  switch (s) {
    case recv_status::ok:
      return "ok";
    case recv_status::empty:
      return "empty";
    case recv_status::lagged:
      return "lagged";
    case recv_status::closed:
      return "closed";
    case recv_status::cancelled:
      return "cancelled";
    case recv_status::timeout:
      return "timeout";
  }
  return "unknown";
}

/// The outcome of every broadcast receive (recv, its blocking twins, try_recv): a message, or
/// why there was none. A lagged outcome carries how many messages the receiver missed.
template <class T>
class [[nodiscard]] recv_result {
 public:
  /// The message's type.
  using value_type = T;

  /// A message, constructed in place (a receive copies or moves it straight from the ring).
  template <class... Args>
  explicit recv_result(std::in_place_t /*unused*/, Args&&... args)
      : value_(std::in_place, std::forward<Args>(args)...) {}
  // NOLINTBEGIN(google-explicit-constructor): failures convert
  /// empty or closed (not ok, not lagged: use lagged_by()).
  recv_result(recv_status failure) noexcept : status_(failure) {
    assert(failure != recv_status::ok && failure != recv_status::lagged);
  }
  /// How a wait ended without a message: cancelled, timeout or closed.
  recv_result(wait_status failure) noexcept : status_(from_wait(failure)) {}
  // NOLINTEND(google-explicit-constructor)

  /// The receiver missed `n` messages (n > 0).
  [[nodiscard]] static recv_result lagged_by(std::uint64_t n) noexcept {
    recv_result r(recv_status::empty);
    r.status_ = recv_status::lagged;
    r.missed_ = n;
    return r;
  }

  /// How the receive ended.
  [[nodiscard]] recv_status status() const noexcept { return status_; }
  /// A message was received.
  [[nodiscard]] bool ok() const noexcept { return status_ == recv_status::ok; }
  /// try_recv only: no message now; senders remain.
  [[nodiscard]] bool empty() const noexcept { return status_ == recv_status::empty; }
  /// The receiver fell behind and lost missed() messages (overflow channel).
  [[nodiscard]] bool lagged() const noexcept { return status_ == recv_status::lagged; }
  /// Every sender is gone (or one closed the channel) and the receiver has drained.
  [[nodiscard]] bool closed() const noexcept { return status_ == recv_status::closed; }
  /// A stop request ended the receive first.
  [[nodiscard]] bool cancelled() const noexcept { return status_ == recv_status::cancelled; }
  /// A blocking receive's deadline passed first.
  [[nodiscard]] bool timed_out() const noexcept { return status_ == recv_status::timeout; }
  /// ok().
  explicit operator bool() const noexcept { return ok(); }

  /// How many messages a lagged receive skipped (0 unless lagged()).
  [[nodiscard]] std::uint64_t missed() const noexcept { return missed_; }

  /// @{
  /// The message, as value(), `*r` or `r->`. Precondition: ok().
  [[nodiscard]] T& value() & noexcept { return checked(); }
  [[nodiscard]] const T& value() const& noexcept { return const_cast<recv_result*>(this)->checked(); }
  [[nodiscard]] T&& value() && noexcept { return std::move(checked()); }
  [[nodiscard]] T& operator*() & noexcept { return checked(); }
  [[nodiscard]] T&& operator*() && noexcept { return std::move(checked()); }
  [[nodiscard]] T* operator->() noexcept { return &checked(); }
  /// @}

 private:
  static recv_status from_wait(wait_status s) noexcept {
    assert(s != wait_status::ok);
    switch (s) {
      case wait_status::cancelled:
        return recv_status::cancelled;
      case wait_status::timeout:
        return recv_status::timeout;
      default:
        return recv_status::closed;
    }
  }
  T& checked() noexcept {
    assert(ok() && "asyncband::broadcast::recv_result::value() without a message");
    return *value_;
  }

  std::optional<T> value_;
  std::uint64_t missed_ = 0;
  recv_status status_ = recv_status::ok;
};

}  // namespace asyncband::broadcast
