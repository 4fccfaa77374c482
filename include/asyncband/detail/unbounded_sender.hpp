// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/unbounded_sender.hpp: the sending half of an unbounded channel
// (mpsc::unbounded_sender and its MPMC twin).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <utility>

#include "../result.hpp"
#include "sender_handle.hpp"

namespace asyncband::detail {

/// The sending half of an unbounded channel (mpsc::unbounded_sender, mpmc::unbounded_sender).
/// Copyable: every copy is a producer; the channel disconnects when the last sender or the last
/// receiver goes.
///
/// Contract
/// - send() never waits: it allocates the message (one allocation, outside any lock),
///   constructs the value there and links it. It hands the value back (closed) if the
///   channel is closed or the receivers are gone; a send that reports ok is received, or
///   destroyed with the channel if the receivers go first.
/// - Order: values from one sender are received in the order sent; sends from different
///   producers interleave in the order they link.
/// - Synchronization: constructing a value happens-before the receive that takes it.
/// - If constructing the value throws, nothing is sent and the exception propagates.
template <class State>
class unbounded_sender : public sender_handle<State> {
  using T = typename State::value_type;

 public:
  using sender_handle<State>::sender_handle;

  /// ok, or closed with the value.
  send_result<T> send(T value) { return this->live()->send(std::move(value)); }
};

}  // namespace asyncband::detail
