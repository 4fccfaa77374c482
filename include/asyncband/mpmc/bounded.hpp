// SPDX-License-Identifier: Apache-2.0
// asyncband/mpmc/bounded.hpp: the bounded MPMC channel: bounded(), sender, receiver. Each value
// goes to exactly one receiver. Its parts: detail/mpmc_bounded_state.hpp (the state: ring,
// capacity, the values' semaphore); the sending half and the permits are the bounded MPSC
// channel's (detail/bounded_sender.hpp, detail/bounded_permit.hpp).
#pragma once

#include "../version.hpp"  // first: a build below C++20 stops there, with one message

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>

#include "../detail/bounded_permit.hpp"
#include "../detail/bounded_sender.hpp"
#include "../detail/mpmc_bounded_state.hpp"
#include "../detail/mpmc_receiver.hpp"
#include "../detail/receiving_end.hpp"
#include "../detail/semaphore_wait.hpp"
#include "../result.hpp"
#include "../semaphore.hpp"

/// Multi-producer, multi-consumer channels (work queues): copyable senders and receivers, each
/// value to exactly one receive. bounded() and unbounded().
namespace asyncband::mpmc {

/// The sending half of a bounded MPMC channel; its contract: detail::bounded_sender. It can
/// also close() the channel, and count its senders and receivers.
template <class T>
using sender = asyncband::detail::bounded_sender<detail::bounded_state<T>>;
/// Units of a bounded MPMC channel's capacity reserved for later sends (detail::bounded_permit).
template <class T>
using permit = asyncband::detail::bounded_permit<detail::bounded_state<T>>;
/// A permit that keeps the channel alive (detail::bounded_owned_permit).
template <class T>
using owned_permit = asyncband::detail::bounded_owned_permit<detail::bounded_state<T>>;

template <class T>
class receiver;

namespace detail {

template <class T>
std::pair<sender<T>, receiver<T>> bounded_starting_at(std::size_t capacity, std::uint32_t first_index);

}  // namespace detail

/// Creates a bounded MPMC channel holding at most `capacity` values (exactly: storage rounds up
/// to a power of two, the capacity does not). Throws std::invalid_argument if capacity is 0 or
/// above semaphore::max().
template <class T>
std::pair<sender<T>, receiver<T>> bounded(std::size_t capacity);

/// The receiving half of a bounded MPMC channel; its contract: detail::receiver_base, and for
/// the ring:
/// - A value whose move throws on receipt is parked for the next receive (ahead of the others),
///   keeping its unit of capacity; it stays where it is, and its cell of the ring goes on to
///   storage allocated then (once per park, never on the normal path), so no send or receive
///   waits for it to be taken. If that allocation fails, the value holds its cell instead: if
///   receives on other threads overtook the one that threw (claimed later values meanwhile), a
///   send that comes round the ring to that cell then waits (spinning, then yielding) until a
///   receive takes the value, and so does a receive of that send's place.
/// - A send whose construction of the value throws leaves an empty place, passed at once if it
///   is next in line, else by the receive that takes the value before it: its unit of capacity
///   comes back without any value following it.
template <class T>
class [[nodiscard]] receiver : public detail::receiver_base<detail::bounded_state<T>> {
 public:
  /// The channel's bound (the senders' capacity(); tokio's max_capacity()); 0 for an empty
  /// handle.
  [[nodiscard]] std::size_t capacity() const noexcept {
    return this->state_ == nullptr ? 0 : this->state_->logical_capacity();
  }
  /// capacity() under tokio's name.
  [[nodiscard]] std::size_t max_capacity() const noexcept { return capacity(); }

 private:
  template <class U>
  friend std::pair<sender<U>, receiver<U>> detail::bounded_starting_at(std::size_t, std::uint32_t);
  explicit receiver(detail::bounded_state<T>* s) noexcept
      : detail::receiver_base<detail::bounded_state<T>>(s) {}
};

namespace detail {
/// For tests of counter wrap-around: a channel whose indexes start at `first_index`.
template <class T>
std::pair<sender<T>, receiver<T>> bounded_starting_at(std::size_t capacity, std::uint32_t first_index) {
  if (capacity == 0 || capacity > semaphore::max())
    throw std::invalid_argument("asyncband::mpmc::bounded: capacity must be in [1, semaphore::max()]");
  auto* state = new bounded_state<T>(capacity, first_index);
  return {sender<T>(asyncband::detail::adopt_state_t{}, state), receiver<T>(state)};
}
}  // namespace detail

template <class T>
std::pair<sender<T>, receiver<T>> bounded(std::size_t capacity) {
  return detail::bounded_starting_at<T>(capacity, 0);
}

}  // namespace asyncband::mpmc
