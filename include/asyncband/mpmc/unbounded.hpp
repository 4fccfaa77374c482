// SPDX-License-Identifier: Apache-2.0
// asyncband/mpmc/unbounded.hpp: the unbounded MPMC channel: unbounded(), unbounded_sender,
// unbounded_receiver. Sends never wait; each value goes to exactly one receiver. Its parts:
// detail/mpmc_unbounded_state.hpp (the list and the values' semaphore), detail/mpmc_receiver.hpp
// (the receiving half, shared with the bounded channel), detail/unbounded_sender.hpp (the
// sending half, shared with the MPSC channel).
#pragma once

#include "../version.hpp"  // first: a build below C++20 stops there, with one message

#include <utility>

#include "../detail/bounded_sender.hpp"
#include "../detail/mpmc_receiver.hpp"
#include "../detail/mpmc_unbounded_state.hpp"
#include "../detail/unbounded_sender.hpp"

namespace asyncband::mpmc {

/// The sending half of an unbounded MPMC channel; its contract: detail::unbounded_sender. It
/// can also close() the channel, and count its senders and receivers.
template <class T>
using unbounded_sender = asyncband::detail::unbounded_sender<detail::unbounded_state<T>>;

template <class T>
class unbounded_receiver;

/// Creates an unbounded MPMC channel: sends never wait (one allocation each). At most
/// semaphore::max() (2^31 - 1) values may wait to be received at once: the values are counted by
/// a semaphore, and one more terminates the program.
template <class T>
std::pair<unbounded_sender<T>, unbounded_receiver<T>> unbounded();

/// The receiving half of an unbounded MPMC channel; its contract: detail::receiver_base.
template <class T>
class [[nodiscard]] unbounded_receiver : public detail::receiver_base<detail::unbounded_state<T>> {
  template <class U>
  friend std::pair<unbounded_sender<U>, unbounded_receiver<U>> unbounded();
  explicit unbounded_receiver(detail::unbounded_state<T>* s) noexcept
      : detail::receiver_base<detail::unbounded_state<T>>(s) {}
};

template <class T>
std::pair<unbounded_sender<T>, unbounded_receiver<T>> unbounded() {
  auto* state = new detail::unbounded_state<T>();
  return {unbounded_sender<T>(asyncband::detail::adopt_state_t{}, state), unbounded_receiver<T>(state)};
}

}  // namespace asyncband::mpmc
