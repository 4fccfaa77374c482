// asyncband/detail/unbounded_sender.hpp: the sending half of an unbounded channel
// (mpsc::unbounded_sender and its MPMC twin).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <utility>

#include "../result.hpp"
#include "bounded_sender.hpp"  // adopt_state_t

namespace asyncband::detail {

/// The sending half of an unbounded channel (mpsc::unbounded_sender, mpmc::unbounded_sender).
/// Copyable: every copy is a producer; the channel disconnects when the last sender or the last
/// receiver goes.
///
/// Contract
/// - send() never waits: it allocates the message (one allocation, outside any lock),
///   constructs the value there and links it. It hands the value back (disconnected) if the
///   channel is closed or the receivers are gone; a send that reports ok is received, or
///   destroyed with the channel if the receivers go first.
/// - Order: values from one sender are received in the order sent; sends from different
///   producers interleave in the order they link.
/// - Synchronization: constructing a value happens-before the receive that takes it.
/// - If constructing the value throws, nothing is sent and the exception propagates.
template <class State>
class unbounded_sender {
  using state_type = State;
  using T = typename State::value_type;

 public:
  /// Adopts a reference to `s` that its factory counted (internal).
  unbounded_sender(adopt_state_t /*unused*/, State* s) noexcept : state_(s) {}
  unbounded_sender(const unbounded_sender& other) noexcept : state_(other.state_) {
    if (state_ != nullptr) state_->add_producer();  // a copy of a moved-from sender is moved-from
  }
  unbounded_sender(unbounded_sender&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  unbounded_sender& operator=(const unbounded_sender& other) noexcept {
    if (this != &other) *this = unbounded_sender(other);
    return *this;
  }
  unbounded_sender& operator=(unbounded_sender&& other) noexcept {
    if (this != &other) {
      const unbounded_sender departing(std::move(*this));  // goes last: it may wake the receiver inline
      state_ = std::exchange(other.state_, nullptr);
    }
    return *this;
  }
  ~unbounded_sender() { reset(); }

  /// ok, or disconnected with the value.
  send_result<T> send(T value) { return live()->send(std::move(value)); }

  /// The channel is closed, or the receivers are gone.
  [[nodiscard]] bool is_closed() const noexcept { return state_ == nullptr || state_->closed(); }

  /// Closes the channel (MPMC): later sends hand their value back; what was accepted still
  /// drains to the receivers.
  void close() noexcept
    requires State::multi_consumer
  {
    if (state_ != nullptr) state_->close();
  }
  /// The senders of the channel now (MPMC; 0 for a moved-from sender).
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

 private:
  state_type* live() const {
    if (state_ == nullptr) throw std::logic_error("asyncband: unbounded_sender: moved from");
    return state_;
  }
  void reset() noexcept {
    if (state_ != nullptr) std::exchange(state_, nullptr)->drop_producer();
  }

  state_type* state_;
};

}  // namespace asyncband::detail
