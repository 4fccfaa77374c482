// asyncband/mpsc/bounded.hpp: the bounded MPSC channel: bounded(), sender, receiver. Its
// parts, each in its own file:
//   detail/value_ring.hpp     the ring: values constructed in place, published by stamps
//   detail/bounded_state.hpp  the shared state: capacity, ring, the receiving end
//   detail/bounded_send.hpp   a send: the wait for capacity, then the publication
//   mpsc/permit.hpp           permits: capacity reserved for later sends
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <utility>

#include "../detail/bounded_send.hpp"
#include "../detail/bounded_state.hpp"
#include "../detail/channel_core.hpp"
#include "../detail/wait_functions.hpp"
#include "../result.hpp"
#include "../semaphore.hpp"
#include "permit.hpp"

namespace asyncband::mpsc {

namespace detail {
template <class T>
std::pair<sender<T>, receiver<T>> bounded_starting_at(std::size_t capacity, std::uint32_t first_index);
}  // namespace detail

/// Creates a bounded MPSC channel holding at most `capacity` values (exactly: storage rounds up
/// to a power of two, the capacity does not). Throws std::invalid_argument if capacity is 0 or
/// above semaphore::max().
template <class T>
std::pair<sender<T>, receiver<T>> bounded(std::size_t capacity);

/// The sending half of a bounded channel. Copyable: every copy is a producer; the channel
/// disconnects when the last producer (sender or owned permit) or the receiver goes.
///
/// Contract
/// - when_any: a send that lost its when_any is never granted a unit of capacity, and its value
///   comes back in the when_any's result (send_status::cancelled); the same for reserve().
/// - Order: values from one sender (one thread or coroutine sending in sequence) are received in
///   the order they were sent; sends from different producers interleave in the order in which
///   they claimed their places (one atomic step each, once it has its unit of capacity).
/// - Capacity waiters are served in FIFO order (the capacity is an asyncband::semaphore): a
///   send or reserve that waits is never overtaken by a later one or by a try_send.
/// - A send that does not deliver hands its value back: full (try_send), disconnected (the
///   receiver closed the channel or is gone), cancelled, timeout. Cancellation commits while
///   the send waits for capacity; once a unit is granted the value is delivered (a unit granted
///   to a send cancelled at that moment goes to the next waiter).
/// - Synchronization: constructing a value in the channel happens-before the receive that takes it.
/// - The value is constructed in the channel from the moved value; if that move throws, the
///   exception propagates, nothing is received, and the unit of capacity returns once the
///   receiver passes the empty place.
template <class T>
class sender {
  using state_type = detail::bounded_state<T>;

 public:
  sender(const sender& other) noexcept : state_(other.state_) {
    if (state_ != nullptr) state_->add_producer();  // a copy of a moved-from sender is moved-from
  }
  sender(sender&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  sender& operator=(const sender& other) noexcept {
    if (this != &other) *this = sender(other);
    return *this;
  }
  sender& operator=(sender&& other) noexcept {
    if (this != &other) {
      const sender departing(std::move(*this));  // goes last: it may wake the receiver inline
      state_ = std::exchange(other.state_, nullptr);
    }
    return *this;
  }
  ~sender() { reset(); }

  /// `co_await tx.send(v)` yields send_result<T>: ok, or disconnected with the value.
  auto send(T value) {
    state_type* const s = live();  // before any use of the state
    return detail::send_awaiter<T,
                                asyncband::detail::acquire_awaiter<asyncband::detail::permit_itself, true>>(
        s, std::move(value), &s->capacity(), 1, asyncband::detail::permit_itself{});
  }
  /// As above; also ends cancelled (with the value) when `stop` is requested first.
  auto send(T value, std::stop_token stop) {
    using acquire = asyncband::detail::wait_awaiter<
        asyncband::detail::semaphore_acquire<asyncband::detail::permit_itself, true>, true>;
    state_type* const s = live();
    return detail::send_awaiter<T, acquire>(s, std::move(value), std::move(stop), &s->capacity(), 1,
                                            asyncband::detail::permit_itself{});
  }
  /// Sends now if there is capacity: ok, full or disconnected (with the value).
  send_result<T> try_send(T value) {
    state_type& s = *live();
    if (s.closed()) return {send_status::disconnected, std::move(value)};
    if (s.try_push(value)) return {};
    return {s.closed() ? send_status::disconnected : send_status::full, std::move(value)};
  }
  /// The blocking twins of send.
  send_result<T> send_blocking(T value) {
    state_type& s = *live();
    if (!s.closed() && s.try_push(value)) return {};
    return detail::finish_send(
        s, detail::capacity_forms::block(&s.capacity(), 1, asyncband::detail::permit_itself{}),
        std::move(value));
  }
  send_result<T> send_blocking(T value, std::stop_token stop) {
    state_type& s = *live();
    return detail::finish_send(s,
                               detail::capacity_forms::block_until_stopped(
                                   std::move(stop), &s.capacity(), 1, asyncband::detail::permit_itself{}),
                               std::move(value));
  }
  template <class Rep, class Period>
  send_result<T> send_timeout(T value, std::chrono::duration<Rep, Period> timeout) {
    state_type& s = *live();
    return detail::finish_send(
        s, detail::capacity_forms::block_for(timeout, &s.capacity(), 1, asyncband::detail::permit_itself{}),
        std::move(value));
  }

  /// `co_await tx.reserve()` yields result<permit<T>>: a unit of capacity held for a later
  /// send, or closed (disconnected). The permit must not outlive this sender.
  auto reserve() { return reserve_many(1); }
  auto reserve(std::stop_token stop) { return reserve_many(1, std::move(stop)); }
  /// n units at once (n <= capacity()), for n later sends.
  auto reserve_many(std::size_t n) {
    return capacity_forms_for<make_permit>::await(&live()->capacity(), checked(n), make_permit{state_});
  }
  auto reserve_many(std::size_t n, std::stop_token stop) {
    return capacity_forms_for<make_permit>::await_until_stopped(std::move(stop), &live()->capacity(),
                                                                checked(n), make_permit{state_});
  }
  result<permit<T>> reserve_blocking(std::size_t n = 1) {
    return capacity_forms_for<make_permit>::block(&live()->capacity(), checked(n), make_permit{state_});
  }
  /// A permit now, or full / disconnected.
  try_reserve_result<permit<T>> try_reserve(std::size_t n = 1) {
    state_type& s = *live();
    if (s.closed()) return send_status::disconnected;
    std::optional<semaphore_permit> units = s.capacity().try_acquire(checked(n));
    if (!units) return s.closed() ? send_status::disconnected : send_status::full;
    return permit<T>(&s, std::move(*units));
  }

  /// As reserve(), but the permit keeps the channel alive and counts as a producer by itself.
  auto reserve_owned(std::size_t n = 1) {
    return capacity_forms_for<make_owned_permit>::await(&live()->capacity(), checked(n),
                                                        make_owned_permit{state_});
  }
  auto reserve_owned(std::size_t n, std::stop_token stop) {
    return capacity_forms_for<make_owned_permit>::await_until_stopped(std::move(stop), &live()->capacity(),
                                                                      checked(n), make_owned_permit{state_});
  }
  try_reserve_result<owned_permit<T>> try_reserve_owned(std::size_t n = 1) {
    try_reserve_result<permit<T>> p = try_reserve(n);
    if (!p) return p.status();
    return owned_permit<T>(std::move(*p));
  }

  /// The receiver closed the channel or is gone: sends hand their value back.
  [[nodiscard]] bool is_closed() const noexcept { return state_ == nullptr || state_->closed(); }
  [[nodiscard]] std::size_t capacity() const noexcept {
    return state_ == nullptr ? 0 : state_->logical_capacity();
  }

 private:
  template <class U>
  friend std::pair<sender<U>, receiver<U>> detail::bounded_starting_at(std::size_t, std::uint32_t);
  template <class>
  friend class owned_permit;
  explicit sender(state_type* s) noexcept : state_(s) {}

  struct make_permit {
    state_type* state;
    permit<T> operator()(semaphore_permit&& units) const noexcept {
      return permit<T>(state, std::move(units));
    }
  };
  struct make_owned_permit {
    state_type* state;
    owned_permit<T> operator()(semaphore_permit&& units) const noexcept {
      return owned_permit<T>(permit<T>(state, std::move(units)));
    }
  };
  template <class Make>
  using capacity_forms_for = asyncband::detail::acquire_forms<Make, true>;

  state_type* live() const {
    if (state_ == nullptr) throw std::logic_error("asyncband::mpsc::sender: moved from");
    return state_;
  }
  std::size_t checked(std::size_t n) const {
    if (n == 0 || n > live()->logical_capacity())
      throw std::invalid_argument("asyncband::mpsc::sender::reserve: n must be in [1, capacity()]");
    return n;
  }
  void reset() noexcept {
    if (state_ != nullptr) std::exchange(state_, nullptr)->drop_producer();
  }

  state_type* state_;
};

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
/// - close(): no new sends or reservations (they report disconnected; senders waiting for
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
/// - A receive whose next value is being constructed by another thread waits for that move
///   construction (spinning, then yielding; a stop request or deadline is looked at after it)
///   rather than sleeping: this saves every send a fence. So T's move constructor must not
///   wait for anything the receiver's thread or executor does, nor switch stackful fibers. A
///   receive resumed inline from inside a move constructor running on its own thread is
///   recognised and sleeps instead.
template <class T>
class [[nodiscard]] receiver : public detail::receiver_handle<detail::bounded_state<T>, T> {
 public:
  [[nodiscard]] std::size_t capacity() const noexcept {
    return this->state_ == nullptr ? 0 : this->state_->logical_capacity();
  }

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
  return {sender<T>(state), receiver<T>(state)};
}
}  // namespace detail

template <class T>
std::pair<sender<T>, receiver<T>> bounded(std::size_t capacity) {
  return detail::bounded_starting_at<T>(capacity, 0);
}

}  // namespace asyncband::mpsc
