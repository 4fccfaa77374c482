// SPDX-License-Identifier: Apache-2.0
// asyncband/mpsc/bounded.hpp: the bounded MPSC channel: bounded(), sender, receiver. Its
// parts, each in its own file (shared with the other bounded channels where they can be):
//   detail/value_ring.hpp      the ring: values constructed in place, published by stamps
//   detail/bounded_state.hpp   the shared state: capacity, ring, the receiving end
//   detail/bounded_send.hpp    a send: the wait for capacity, then the publication
//   detail/bounded_sender.hpp  the sending half: sends, blocking twins, reservations
//   detail/bounded_permit.hpp  permits: capacity reserved for later sends
#pragma once

#include "../version.hpp"  // first: a build below C++20 stops there, with one message

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>

#include "../detail/bounded_permit.hpp"
#include "../detail/bounded_sender.hpp"
#include "../detail/bounded_state.hpp"
#include "../detail/channel_core.hpp"
#include "../result.hpp"
#include "../semaphore.hpp"

/// Multi-producer, single-consumer channels: bounded() (exact capacity, FIFO capacity waiters,
/// permits) and unbounded() (sends never wait).
namespace asyncband::mpsc {

/// The sending half of a bounded MPSC channel; its contract: detail::bounded_sender.
template <class T>
using sender = asyncband::detail::bounded_sender<detail::bounded_state<T>>;
/// Units of a bounded MPSC channel's capacity reserved for later sends (detail::bounded_permit).
template <class T>
using permit = asyncband::detail::bounded_permit<detail::bounded_state<T>>;
/// A permit that keeps the channel alive (detail::bounded_owned_permit).
template <class T>
using owned_permit = asyncband::detail::bounded_owned_permit<detail::bounded_state<T>>;
using asyncband::try_reserve_result;

template <class T>
class receiver;

namespace detail {
template <class T>
std::pair<sender<T>, receiver<T>> bounded_starting_at(std::size_t capacity, std::uint32_t first_index);
}  // namespace detail

/// Creates a bounded MPSC channel holding at most `capacity` values (exactly: storage rounds up
/// to a power of two, the capacity does not). Throws std::invalid_argument if capacity is 0 or
/// above semaphore::max().
template <class T>
std::pair<sender<T>, receiver<T>> bounded(std::size_t capacity);

/// The receiving half of a bounded channel. Move-only; destroying it disconnects the channel
/// (later sends hand their value back) and destroys the values nobody received.
///
/// Contract
/// - when_any: a receive takes its value only if it wins; a losing one leaves the value at the
///   head, for the next receive.
/// - recv() yields result<T>: a value, or wait_status::closed once nothing can come any more
///   (every producer is gone, or the channel is closed and no permit or accepted send is
///   outstanding) and every accepted value has been received. It is cancel-safe: a cancelled
///   or destroyed receive takes nothing.
/// - close(): no new sends or reservations (they report closed; senders waiting for
///   capacity are woken with it); values already accepted, and sends of permits held at the
///   time, are still received.
/// - One receive at a time: a receive (a recv() awaiter, from its creation to its destruction,
///   or a blocking receive) excludes any other. Another recv(), recv_blocking() or recv_timeout()
///   meanwhile throws std::logic_error and leaves the pending receive undisturbed; so does any
///   try_recv() (while the receive sleeps, senders move the cursor past empty cells).
///   The receiver must outlive its receives (their awaiters included).
/// - Every receive form (block_on(rx.recv()) included) moves the value exactly once, from the
///   channel into the result; if that move throws, the exception propagates and the value stays
///   in the channel, for the next receive.
/// - recv_many(buffer, limit) (and try_recv_many, the blocking twins, recv_many_timeout) waits as
///   recv() does, then appends up to `limit` of the values there to `buffer` in one step: one
///   wake-up and one return of their capacity. It is a receive (one at a time, as above).
///   `limit` 0 yields 0 at once. If a value's move throws, the values before it stay appended,
///   it stays at the head, and the exception propagates (detail::receiving_end::recv_many).
/// - A receive whose next value is being constructed by another thread waits for that move
///   construction (spinning, then yielding; a stop request or deadline is looked at after it)
///   rather than sleeping: this saves every send a fence. So T's move constructor must not
///   wait for anything the receiver's thread or executor does, nor switch stackful fibers. A
///   receive resumed inline from inside a move constructor running on its own thread is
///   recognised and sleeps instead.
template <class T>
class [[nodiscard]] receiver : public detail::receiver_handle<detail::bounded_state<T>, T> {
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
      : detail::receiver_handle<detail::bounded_state<T>, T>(s) {}
};

namespace detail {
/// For tests of counter wrap-around: a channel whose indexes start at `first_index`.
template <class T>
std::pair<sender<T>, receiver<T>> bounded_starting_at(std::size_t capacity, std::uint32_t first_index) {
  if (capacity == 0 || capacity > semaphore::max())
    throw std::invalid_argument("asyncband::mpsc::bounded: capacity must be in [1, semaphore::max()]");
  auto* state = new bounded_state<T>(capacity, first_index);
  return {sender<T>(asyncband::detail::adopt_state_t{}, state), receiver<T>(state)};
}
}  // namespace detail

template <class T>
std::pair<sender<T>, receiver<T>> bounded(std::size_t capacity) {
  return detail::bounded_starting_at<T>(capacity, 0);
}

}  // namespace asyncband::mpsc
