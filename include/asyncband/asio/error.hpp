// SPDX-License-Identifier: Apache-2.0
// asyncband/asio/error.hpp: the error codes of asyncband operations completed through Boost.Asio
// (optional; needs Boost 1.81 or later, headers only).
//
// Asio's convention is a first argument boost::system::error_code. The asyncband outcomes map to:
//
//   cancelled (a stop token, an Asio cancellation)  boost::asio::error::operation_aborted itself
//   timeout                                          asyncband::asio::error::timeout
//   closed (a channel drained and closed, a send     asyncband::asio::error::closed
//     whose receivers are gone, a closed phaser,
//     semaphore or watch)
//   lagged (a broadcast overflow receiver)           asyncband::asio::error::lagged
//
// Cancellation is reported with Asio's own code, not one of ours, because Boost.System compares
// two error_codes by category and value only: `ec == boost::asio::error::operation_aborted`, the
// idiom every Asio program uses, holds only for that very code. `make_error_code(error::cancelled)`
// returns it too, so `ec == asyncband::asio::error::cancelled` holds as well, and the condition
// `ec == boost::system::errc::operation_canceled` (or std::errc) matches it as for any Asio
// cancellation. The other codes are in the "asyncband" category; timeout is also equivalent to
// the condition errc::timed_out.
#pragma once

#include "../version.hpp"  // first: a build below C++20 stops there, with one message

#include <boost/asio/error.hpp>
#include <boost/system/error_category.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/error_condition.hpp>
#include <string>
#include <type_traits>

#include "../broadcast/recv_result.hpp"
#include "../result.hpp"

/// The errors of operations completed through Asio, and their boost::system::error_code.
namespace asyncband::asio::error {

/// What an asyncband operation completed through Asio can fail with (a plain enum in a
/// namespace, as Asio's own `boost::asio::error::basic_errors`).
enum errors : int {
  /// Cancelled; make_error_code() turns it into boost::asio::error::operation_aborted.
  cancelled = 1,
  /// A deadline passed first.
  timeout = 2,
  /// The primitive was closed: a channel with nothing left to receive, a send whose receivers
  /// are gone or closed the channel (the value comes back), a closed phaser, watch or semaphore.
  closed = 3,
  // 4 was `disconnected` before 0.2; it is not reused.
  /// A broadcast overflow receiver missed messages (the value form says how many).
  lagged = 5,
  /// The name before 0.2: a send whose receiver is gone is `closed` now, as every other form.
  disconnected [[deprecated("renamed closed")]] = closed,
};

namespace detail {

class category_impl final : public boost::system::error_category {
 public:
  // A fixed identifier: categories compare equal across shared libraries that each have a copy.
  constexpr category_impl() noexcept : error_category(0x6173796e6362616eULL) {}

  [[nodiscard]] const char* name() const noexcept override { return "asyncband"; }

  [[nodiscard]] std::string message(int ev) const override {
    switch (ev) {
      case cancelled:
        return "operation cancelled";
      case timeout:
        return "operation timed out";
      case closed:
        return "closed";
      case lagged:
        return "lagged: the receiver missed messages";
      default:
        return "unknown asyncband error";
    }
  }

  [[nodiscard]] boost::system::error_condition default_error_condition(int ev) const noexcept override {
    switch (ev) {
      case cancelled:
        return boost::system::errc::make_error_condition(boost::system::errc::operation_canceled);
      case timeout:
        return boost::system::errc::make_error_condition(boost::system::errc::timed_out);
      default:
        return {ev, *this};
    }
  }
};

}  // namespace detail

/// The "asyncband" error category (every code but cancelled, which is Asio's own).
inline const boost::system::error_category& category() noexcept {
  static constexpr detail::category_impl instance;
  return instance;
}

/// The error_code of `e`: boost::asio::error::operation_aborted for cancelled, else the code in
/// the asyncband category.
inline boost::system::error_code make_error_code(errors e) noexcept {
  if (e == cancelled) return boost::asio::error::operation_aborted;
  return {static_cast<int>(e), category()};
}

/// The error_code of a wait's status: success for ok.
inline boost::system::error_code to_error_code(wait_status s) noexcept {
  switch (s) {
    case wait_status::ok:
      return {};
    case wait_status::cancelled:
      return make_error_code(cancelled);
    case wait_status::timeout:
      return make_error_code(timeout);
    case wait_status::closed:
      return make_error_code(closed);
  }
  return make_error_code(closed);
}

/// The error_code of a send's status: success for ok (full never reaches Asio: a send waits).
inline boost::system::error_code to_error_code(send_status s) noexcept {
  switch (s) {
    case send_status::ok:
      return {};
    case send_status::cancelled:
      return make_error_code(cancelled);
    case send_status::timeout:
      return make_error_code(timeout);
    case send_status::closed:
    case send_status::full:
      return make_error_code(closed);
  }
  return make_error_code(closed);
}

/// The error_code of a broadcast receive's status: success for ok.
inline boost::system::error_code to_error_code(broadcast::recv_status s) noexcept {
  switch (s) {
    case broadcast::recv_status::ok:
      return {};
    case broadcast::recv_status::lagged:
      return make_error_code(lagged);
    case broadcast::recv_status::cancelled:
      return make_error_code(cancelled);
    case broadcast::recv_status::timeout:
      return make_error_code(timeout);
    case broadcast::recv_status::empty:
    case broadcast::recv_status::closed:
      return make_error_code(closed);
  }
  return make_error_code(closed);
}

}  // namespace asyncband::asio::error

namespace boost::system {
/// Lets `ec == asyncband::asio::error::closed` compare through make_error_code.
template <>
struct is_error_code_enum<asyncband::asio::error::errors> : std::true_type {};
}  // namespace boost::system
