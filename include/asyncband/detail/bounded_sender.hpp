// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/bounded_sender.hpp: the sending half of a bounded channel (mpsc::sender and
// its MPMC twin): sends, their blocking twins, and reservations of capacity.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <utility>

#include "../result.hpp"
#include "../semaphore.hpp"
#include "../stop_token.hpp"
#include "bounded_permit.hpp"
#include "bounded_send.hpp"
#include "sender_handle.hpp"
#include "wait_functions.hpp"

namespace asyncband::detail {

/// The sending half of a bounded channel (mpsc::sender, mpmc::sender). Copyable: every copy
/// is a producer; the channel disconnects when the last producer (sender or owned permit) or
/// the last receiver goes.
///
/// Contract
/// - when_any: a send that lost its when_any is never granted a unit of capacity, and its value
///   comes back in the when_any's result (send_status::cancelled); the same for reserve().
/// - Order: values from one sender (one thread or coroutine sending in sequence) are received in
///   the order they were sent; sends from different producers interleave in the order in which
///   they claimed their places (one atomic step each, once it has its unit of capacity).
/// - Capacity waiters are served in FIFO order (the capacity is an asyncband::semaphore): a
///   send or reserve that waits is never overtaken by a later one or by a try_send.
/// - A send that does not deliver hands its value back: full (try_send), closed (the
///   channel was closed or the receivers are gone), cancelled, timeout. Cancellation commits while
///   the send waits for capacity; once a unit is granted the value is delivered (a unit granted
///   to a send cancelled at that moment goes to the next waiter).
/// - Synchronization: constructing a value in the channel happens-before the receive that takes it.
/// - The value is constructed in the channel from the moved value; if that move throws, the
///   exception propagates, nothing is received, and the unit of capacity returns once a
///   receive passes the empty place.
template <class State>
class bounded_sender : public sender_handle<State> {
  using state_type = State;
  using T = typename State::value_type;
  using sender_handle<State>::live;
  using sender_handle<State>::state_;

 public:
  using sender_handle<State>::sender_handle;

  /// `co_await tx.send(v)` yields send_result<T>: ok, or closed with the value.
  auto send(T value) {
    state_type* const s = live();  // before any use of the state
    return bounded_send_awaiter<State, acquire_awaiter<permit_itself, true>>(
        s, std::move(value), &s->capacity(), std::size_t{1}, permit_itself{});
  }
  /// As above; also ends cancelled (with the value) when `stop` is requested first.
  auto send(T value, asyncband::stop_token stop) {
    using acquire = wait_awaiter<semaphore_acquire<permit_itself, true>, true>;
    state_type* const s = live();
    return bounded_send_awaiter<State, acquire>(s, std::move(value), std::move(stop), &s->capacity(),
                                                std::size_t{1}, permit_itself{});
  }
  /// Sends now if there is capacity: ok, full or closed (with the value).
  send_result<T> try_send(T value) {
    state_type& s = *live();
    if (s.closed()) return {send_status::closed, std::move(value)};
    if (s.try_push(value)) return {};
    return {s.closed() ? send_status::closed : send_status::full, std::move(value)};
  }
  /// send() for a plain thread: blocks until there is capacity; ok, or closed with the value.
  send_result<T> send_blocking(T value) {
    state_type& s = *live();
    if (!s.closed() && s.try_push(value)) return {};
    return finish_bounded_send(s, capacity_forms::block(&s.capacity(), std::size_t{1}, permit_itself{}),
                               std::move(value));
  }
  /// As send_blocking(value), or until `stop` is requested (then cancelled, with the value).
  send_result<T> send_blocking(T value, asyncband::stop_token stop) {
    state_type& s = *live();
    return finish_bounded_send(
        s,
        capacity_forms::block_until_stopped(std::move(stop), &s.capacity(), std::size_t{1}, permit_itself{}),
        std::move(value));
  }
  /// As send_blocking(value), for at most `timeout` (then timeout, with the value).
  template <class Rep, class Period>
  send_result<T> send_timeout(T value, std::chrono::duration<Rep, Period> timeout) {
    state_type& s = *live();
    return finish_bounded_send(
        s, capacity_forms::block_for(timeout, &s.capacity(), std::size_t{1}, permit_itself{}),
        std::move(value));
  }

  /// `co_await tx.reserve()` yields result<bounded_permit<State>>: a unit of capacity held for a later
  /// send, or closed. The permit must not outlive this sender.
  auto reserve() { return reserve_many(1); }
  /// As reserve(); also ends cancelled when `stop` is requested first.
  auto reserve(asyncband::stop_token stop) { return reserve_many(1, std::move(stop)); }
  /// n units at once, for n later sends. Throws std::invalid_argument unless 1 <= n <= capacity().
  auto reserve_many(std::size_t n) {
    return capacity_forms_for<make_permit>::await(&live()->capacity(), checked(n), make_permit{state_});
  }
  /// As reserve_many(n); also ends cancelled when `stop` is requested first.
  auto reserve_many(std::size_t n, asyncband::stop_token stop) {
    return capacity_forms_for<make_permit>::await_until_stopped(std::move(stop), &live()->capacity(),
                                                                checked(n), make_permit{state_});
  }
  /// reserve_many(n) for a plain thread: blocks until n units are held; the permit, or closed.
  result<bounded_permit<State>> reserve_blocking(std::size_t n = 1) {
    return capacity_forms_for<make_permit>::block(&live()->capacity(), checked(n), make_permit{state_});
  }
  /// A permit now, or full / closed.
  try_reserve_result<bounded_permit<State>> try_reserve(std::size_t n = 1) {
    state_type& s = *live();
    if (s.closed()) return send_status::closed;
    std::optional<semaphore_permit> units = s.capacity().try_acquire(checked(n));
    if (!units) return s.closed() ? send_status::closed : send_status::full;
    return bounded_permit<State>(&s, std::move(*units));
  }

  /// As reserve_many(n), but the permit keeps the channel alive and counts as a producer by
  /// itself: it may outlive every sender.
  auto reserve_owned(std::size_t n = 1) {
    return capacity_forms_for<make_owned_permit>::await(&live()->capacity(), checked(n),
                                                        make_owned_permit{state_});
  }
  /// As reserve_owned(n); also ends cancelled when `stop` is requested first.
  auto reserve_owned(std::size_t n, asyncband::stop_token stop) {
    return capacity_forms_for<make_owned_permit>::await_until_stopped(std::move(stop), &live()->capacity(),
                                                                      checked(n), make_owned_permit{state_});
  }
  /// An owned permit now, or full / closed (as try_reserve).
  try_reserve_result<bounded_owned_permit<State>> try_reserve_owned(std::size_t n = 1) {
    try_reserve_result<bounded_permit<State>> p = try_reserve(n);
    if (!p) return p.status();
    return bounded_owned_permit<State>(std::move(*p));
  }

  /// The channel's bound: the most values it holds at once, as a container's capacity() and
  /// Asio's channel's (tokio calls it max_capacity()); 0 for an empty handle.
  [[nodiscard]] std::size_t capacity() const noexcept {
    return state_ == nullptr ? 0 : state_->logical_capacity();
  }
  /// capacity() under tokio's name.
  [[nodiscard]] std::size_t max_capacity() const noexcept { return capacity(); }
  /// A snapshot: the units of capacity free now, what tokio's capacity() returns. 0 while the
  /// channel is full, while any send or reserve waits (the next unit is theirs), once the
  /// channel is closed, and for an empty handle. Values sent and permits reserved both hold
  /// units.
  [[nodiscard]] std::size_t free_capacity() const noexcept {
    return state_ == nullptr ? 0 : state_->capacity().available();
  }

 private:
  struct make_permit {
    state_type* state;
    bounded_permit<State> operator()(semaphore_permit&& units) const noexcept {
      return bounded_permit<State>(state, std::move(units));
    }
  };
  struct make_owned_permit {
    state_type* state;
    bounded_owned_permit<State> operator()(semaphore_permit&& units) const noexcept {
      return bounded_owned_permit<State>(bounded_permit<State>(state, std::move(units)));
    }
  };
  template <class Make>
  using capacity_forms_for = acquire_forms<Make, true>;

  std::size_t checked(std::size_t n) const {
    if (n == 0 || n > live()->logical_capacity())
      throw std::invalid_argument("asyncband: sender::reserve: n must be in [1, capacity()]");
    return n;
  }
};

}  // namespace asyncband::detail
