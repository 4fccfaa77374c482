// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/sender_handle.hpp: what every multi-producer sending half is (the bounded and
// unbounded senders of the MPSC and MPMC channels): a copyable handle on the shared state.
#pragma once

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <utility>

#include "../result.hpp"
#include "../stop_token.hpp"
#include "debug_access.hpp"

namespace asyncband::detail {

/// Tag of the constructor by which a channel's factory hands a handle its first reference.
struct adopt_state_t {
  explicit adopt_state_t() = default;
};

/// A copyable handle on a channel's state: every copy is a producer (State::add_producer /
/// drop_producer). A moved-from handle holds nothing: its copies are moved-from too, and every
/// send through it throws std::logic_error.
template <class State>
class sender_handle {
 public:
  /// Adopts a reference to `s` that its factory counted (internal).
  sender_handle(adopt_state_t /*unused*/, State* s) noexcept : state_(s) {}
  /// Another sender of the same channel (a moved-from sender copies as moved-from).
  sender_handle(const sender_handle& other) noexcept : state_(other.state_) {
    if (state_ != nullptr) state_->add_producer();
  }
  /// Takes over `other`'s place among the producers; `other` is left moved-from.
  sender_handle(sender_handle&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  /// Leaves this sender's channel (as destruction does), then joins `other`'s.
  sender_handle& operator=(const sender_handle& other) noexcept {
    if (this != &other) *this = sender_handle(other);
    return *this;
  }
  /// Leaves this sender's channel (as destruction does), then takes over `other`'s place.
  sender_handle& operator=(sender_handle&& other) noexcept {
    if (this != &other) {
      const sender_handle departing(std::move(*this));  // goes last: it may wake receivers inline
      state_ = std::exchange(other.state_, nullptr);
    }
    return *this;
  }
  ~sender_handle() {
    if (state_ != nullptr) std::exchange(state_, nullptr)->drop_producer();
  }

  /// The channel is closed, or the receivers are gone: sends hand their value back.
  [[nodiscard]] bool is_closed() const noexcept { return state_ == nullptr || state_->closed(); }

  /// Closes the channel (MPMC): no new sends (or reservations), senders waiting for capacity end
  /// closed; what was accepted still drains to the receivers.
  void close() noexcept
    requires State::multi_consumer
  {
    if (state_ != nullptr) state_->close();
  }
  /// Waits until the channel is closed: every receiver gone, or close() (on the receiver; on
  /// either half of an MPMC channel); sends hand their value back from then on (tokio's
  /// `Sender::closed`). Completes at once on a closed channel. The sender must outlive the
  /// wait. `co_await tx.closed();`
  auto closed() { return live()->closed_event().wait(); }
  /// As closed(), or until `stop` is requested; yields result<void>: ok or cancelled.
  auto closed(asyncband::stop_token stop) { return live()->closed_event().wait(std::move(stop)); }
  /// closed() for a plain thread: blocks until the channel is closed.
  void closed_blocking() { live()->closed_event().wait_blocking(); }
  /// As closed_blocking(), or until `stop` is requested: ok or cancelled.
  result<void> closed_blocking(asyncband::stop_token stop) {
    return live()->closed_event().wait_blocking(std::move(stop));
  }
  /// As closed_blocking(), for at most `timeout`: ok or timeout.
  template <class Rep, class Period>
  result<void> closed_timeout(std::chrono::duration<Rep, Period> timeout) {
    return live()->closed_event().wait_timeout(timeout);
  }
  /// The senders (and owned permits) of the channel now (MPMC; 0 for a moved-from sender).
  [[nodiscard]] std::size_t sender_count() const noexcept
    requires State::multi_consumer
  {
    return state_ == nullptr ? 0 : state_->sender_count();
  }
  /// The receivers of the channel now (MPMC; 0 for a moved-from sender).
  [[nodiscard]] std::size_t receiver_count() const noexcept
    requires State::multi_consumer
  {
    return state_ == nullptr ? 0 : state_->receiver_count();
  }

 protected:
  friend struct debug_access;
  /// The state; throws std::logic_error for a moved-from handle.
  State* live() const {
    if (state_ == nullptr) throw std::logic_error("asyncband sender: moved from");
    return state_;
  }

  State* state_;
};

}  // namespace asyncband::detail
