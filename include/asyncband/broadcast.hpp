// SPDX-License-Identifier: Apache-2.0
// asyncband/broadcast.hpp: fan-out channels. Every receiver sees every message, in send order.
//
//   auto [tx, rx] = asyncband::broadcast::overflow<quote>(1024);  // senders never wait; a slow
//                                                                  // receiver lags
//   auto [tx, rx] = asyncband::broadcast::bounded<quote>(1024);    // lossless: senders wait for
//                                                                  // the slowest receiver
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "broadcast/recv_result.hpp"
#include "detail/debug_access.hpp"
#include "detail/fanout_ring.hpp"
#include "detail/select_send.hpp"
#include "detail/wait_functions.hpp"
#include "result.hpp"
#include "semaphore.hpp"
#include "stop_token.hpp"

/// Fan-out channels: every receiver gets every message, in send order. overflow() (sends never
/// wait; a receiver too far behind lags) and bounded() (lossless: sends wait for the slowest).
namespace asyncband::broadcast {

/// What a receiver that falls `capacity` behind does to senders.
enum class mode : unsigned char {
  overflow,  ///< Nothing: the oldest message is overwritten and the receiver reports lagged(n).
  bounded,   ///< Senders wait until the slowest receiver has read the oldest message: lossless.
};

template <class T, mode M>
class sender;
template <class T, mode M>
class receiver;

/// The sending half of an overflow channel (see sender).
template <class T>
using overflow_sender = sender<T, mode::overflow>;
/// The receiving half of an overflow channel (see receiver).
template <class T>
using overflow_receiver = receiver<T, mode::overflow>;
/// The sending half of a bounded (lossless) channel (see sender).
template <class T>
using bounded_sender = sender<T, mode::bounded>;
/// The receiving half of a bounded (lossless) channel (see receiver).
template <class T>
using bounded_receiver = receiver<T, mode::bounded>;

namespace detail {

template <class T, mode M>
using ring_of = ring<T, M == mode::bounded>;

/// Creates a channel whose first message has position `first` (tests start near 2^64).
template <class T, mode M>
std::pair<sender<T, M>, receiver<T, M>> make_channel(std::size_t capacity, position first) {
  auto* r = new ring_of<T, M>(capacity, first);
  sender<T, M> tx(r);  // owns the ring's first reference from here on
  receiver<T, M> rx = tx.subscribe();
  return {std::move(tx), std::move(rx)};
}

/// The capacity acquisitions of a bounded channel: fallible (ends closed).
using capacity_forms = asyncband::detail::acquire_forms<asyncband::detail::permit_itself, true>;

/// After the capacity wait: publishes with the unit, or hands the value back. The ring is looked
/// at only with a unit in hand: a send that failed may have been woken by the close of the last
/// handle, and the ring may be gone.
template <class T>
send_result<T> finish_send(ring<T, true>* r, result<semaphore_permit>&& unit,
                           std::type_identity_t<T>&& value) {
  if (!unit.ok()) {
    return {unit.cancelled() ? send_status::cancelled
                             : (unit.timed_out() ? send_status::timeout : send_status::closed),
            std::move(value)};
  }
  return r->send_with_unit(std::move(*unit), std::move(value));
}

/// A bounded send in a coroutine: takes a unit of capacity (waiting if the slowest receiver is
/// `capacity` behind), then publishes. The value waits in the awaiter and comes back if the send
/// does not deliver.
template <class T, class Acquire>
class [[nodiscard("co_await it: the value is not sent until the send is awaited")]] send_awaiter {
 public:
  template <class... Args>
  send_awaiter(ring<T, true>* r, T&& value, Args&&... acquisition)
      : ring_(r), value_(std::move(value)), acquire_(std::forward<Args>(acquisition)...) {}
  send_awaiter(const send_awaiter&) = delete;
  send_awaiter& operator=(const send_awaiter&) = delete;

  /// Throws std::logic_error if this awaiter suspended before (awaited twice).
  bool await_ready() {
    if (suspended_) [[unlikely]]
      asyncband::detail::throw_awaited_again();
    return acquire_.await_ready();
  }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    suspended_ = true;  // before the publication: nothing touches the awaiter after it
    return acquire_.await_suspend(h);
  }
  send_result<T> await_resume() { return finish_send(ring_, acquire_.await_resume(), std::move(value_)); }

 private:
  friend struct asyncband::detail::send_select_access<send_awaiter>;
  /// Sent, or awaited (or selected) before.
  [[nodiscard]] bool spent() const noexcept { return suspended_; }

  ring<T, true>* ring_;
  T value_;
  Acquire acquire_;
  bool suspended_ = false;
};

}  // namespace detail

/// Creates an overflow broadcast channel holding the last `capacity` messages: sends never
/// wait; a receiver that falls `capacity` behind loses the oldest messages and is told how many.
/// Throws std::invalid_argument if capacity is 0 or above 2^31 - 1.
template <class T>
std::pair<overflow_sender<T>, overflow_receiver<T>> overflow(std::size_t capacity) {
  return detail::make_channel<T, mode::overflow>(capacity, 0);
}

/// Creates a lossless broadcast channel: a send waits while the slowest receiver has
/// `capacity` messages unread. Throws std::invalid_argument if capacity is 0 or above 2^31 - 1.
template <class T>
std::pair<bounded_sender<T>, bounded_receiver<T>> bounded(std::size_t capacity) {
  return detail::make_channel<T, mode::bounded>(capacity, 0);
}

/// The sending half of a broadcast channel. Copyable: every copy is a sender; the channel
/// closes when the last sender goes (or one calls close()).
///
/// Contract
/// - when_any: a bounded send that lost its when_any is never granted a unit, and its value comes
///   back in the when_any's result (send_status::cancelled).
/// - Every message goes to every receiver subscribed when it was sent (a subscription and a send
///   are ordered by one short lock: a receiver subscribed during a send either gets that message
///   or starts after it, never half). Receivers see the messages in the order their sends
///   claimed positions; messages from one sender arrive in the order it sent them.
/// - Synchronization: a send happens-before every receive that returns its message.
/// - overflow: send() never waits for a receiver to read. It claims the next position (a few
///   instructions under a lock that no user code runs under), moves the value into the
///   position's slot, overwriting the oldest message, and publishes it with one release store.
///   Before overwriting it waits, for the length of a copy, for receivers copying the old message
///   right then, and for a send of the same slot `capacity` positions earlier still writing. It
///   hands the value back (closed) if the channel is closed or has no receiver.
/// - bounded: nothing is ever overwritten. A send takes one unit of capacity (`capacity` in all)
///   and the last receiver to read its message gives it back; a send waits while none is free,
///   that is while the slowest subscribed receiver is `capacity` messages behind. Waiting senders
///   are served in FIFO order (the units are an asyncband::semaphore); a try_send never overtakes
///   them. A receiver that goes (destroyed, or moved over) stops holding senders back at once.
///   Cancellation commits while the send waits; once a unit is granted the message is delivered
///   (a unit granted to a send cancelled at that instant goes to the next waiter). A send that
///   does not deliver hands its value back: full (try_send), closed (close(), or no
///   receiver), cancelled, timeout.
/// - T must be copy-constructible (each receiver gets a copy) and nothrow-move-constructible (a
///   claimed position must be published; wrap other types in a std::shared_ptr). T's copy and
///   move constructors must not use the same channel (a send waits for the copies of the slot
///   it overwrites, and a receiver leaving waits for the writes in flight).
/// - A bounded send woken because the last handle closed the channel ends closed without
///   touching the channel, which may be gone by then.
/// - Waiting senders resume on their own scheduler when their task type has one, else inline on
///   the thread of the receive that freed the capacity.
template <class T, mode M>
class sender {
  using ring_type = detail::ring_of<T, M>;
  static constexpr bool lossless = M == mode::bounded;

 public:
  /// Another sender of the same channel (a moved-from sender copies as moved-from).
  sender(const sender& other) noexcept : ring_(other.ring_) {
    if (ring_ != nullptr) ring_->add_sender();  // a copy of a moved-from sender is moved-from
  }
  /// Takes over `other`'s place among the senders; `other` is left moved-from.
  sender(sender&& other) noexcept : ring_(std::exchange(other.ring_, nullptr)) {}
  /// Leaves this sender's channel (as destruction does), then joins `other`'s.
  sender& operator=(const sender& other) noexcept {
    if (this != &other) *this = sender(other);
    return *this;
  }
  /// Leaves this sender's channel (as destruction does), then takes over `other`'s place.
  sender& operator=(sender&& other) noexcept {
    if (this != &other) {
      const sender departing(std::move(*this));  // goes last: closing may wake receivers inline
      ring_ = std::exchange(other.ring_, nullptr);
    }
    return *this;
  }
  ~sender() {
    if (ring_ != nullptr) std::exchange(ring_, nullptr)->drop_sender();
  }

  /// overflow: sends now, overwriting the oldest message if the ring is full: ok, or
  /// closed (close(), or no receiver) with the value.
  send_result<T> send(T value)
    requires(!lossless)
  {
    return live()->send_overwriting(std::move(value));
  }

  /// bounded: `co_await tx.send(v)` yields send_result<T>: ok, or closed with the value.
  auto send(T value)
    requires lossless
  {
    ring_type* const r = live();
    return detail::send_awaiter<T,
                                asyncband::detail::acquire_awaiter<asyncband::detail::permit_itself, true>>(
        r, std::move(value), &r->units(), std::size_t{1}, asyncband::detail::permit_itself{});
  }
  /// bounded: as above; also ends cancelled (with the value) when `stop` is requested first.
  auto send(T value, asyncband::stop_token stop)
    requires lossless
  {
    using acquire = asyncband::detail::wait_awaiter<
        asyncband::detail::semaphore_acquire<asyncband::detail::permit_itself, true>, true>;
    ring_type* const r = live();
    return detail::send_awaiter<T, acquire>(r, std::move(value), std::move(stop), &r->units(), std::size_t{1},
                                            asyncband::detail::permit_itself{});
  }
  /// bounded: sends now if the slowest receiver leaves room: ok, full or closed (with the value).
  send_result<T> try_send(T value)
    requires lossless
  {
    ring_type& r = *live();
    if (r.is_closed()) return {send_status::closed, std::move(value)};
    std::optional<semaphore_permit> unit = r.units().try_acquire(1);
    if (!unit) return {r.is_closed() ? send_status::closed : send_status::full, std::move(value)};
    return r.send_with_unit(std::move(*unit), std::move(value));
  }
  /// bounded: the blocking twins of send.
  send_result<T> send_blocking(T value)
    requires lossless
  {
    ring_type& r = *live();
    return detail::finish_send(
        &r, detail::capacity_forms::block(&r.units(), std::size_t{1}, asyncband::detail::permit_itself{}),
        std::move(value));
  }
  /// bounded: blocks until sent, or until `stop` is requested (cancelled, with the value).
  send_result<T> send_blocking(T value, asyncband::stop_token stop)
    requires lossless
  {
    ring_type& r = *live();
    return detail::finish_send(
        &r,
        detail::capacity_forms::block_until_stopped(std::move(stop), &r.units(), std::size_t{1},
                                                    asyncband::detail::permit_itself{}),
        std::move(value));
  }
  /// bounded: blocks until sent, or until `timeout` has passed (timeout, with the value).
  template <class Rep, class Period>
  send_result<T> send_timeout(T value, std::chrono::duration<Rep, Period> timeout)
    requires lossless
  {
    ring_type& r = *live();
    return detail::finish_send(&r,
                               detail::capacity_forms::block_for(timeout, &r.units(), std::size_t{1},
                                                                 asyncband::detail::permit_itself{}),
                               std::move(value));
  }

  /// A new receiver that gets every message sent after this call.
  [[nodiscard]] receiver<T, M> subscribe() const { return receiver<T, M>(live(), live()->subscribe()); }

  /// No more sends (they hand their value back, closed); receivers still get every
  /// message sent before, then end closed. Waiting senders end closed with their values.
  void close() noexcept {
    if (ring_ != nullptr) ring_->close();
  }
  /// Closed (by close(), or a moved-from sender).
  [[nodiscard]] bool is_closed() const noexcept { return ring_ == nullptr || ring_->is_closed(); }

  /// Receivers subscribed now.
  [[nodiscard]] std::size_t receiver_count() const noexcept {
    return ring_ == nullptr ? 0 : ring_->receiver_count();
  }
  /// Messages held that some receiver has not read yet (O(capacity): for diagnostics).
  [[nodiscard]] std::size_t len() const noexcept { return ring_ == nullptr ? 0 : ring_->held(); }
  /// The channel's capacity.
  [[nodiscard]] std::size_t capacity() const noexcept { return ring_ == nullptr ? 0 : ring_->capacity(); }

 private:
  friend std::pair<sender, receiver<T, M>> detail::make_channel<T, M>(std::size_t, detail::position);
  explicit sender(ring_type* r) noexcept : ring_(r) {}

  ring_type* live() const {
    if (ring_ == nullptr) throw std::logic_error("asyncband::broadcast::sender: moved from");
    return ring_;
  }

  ring_type* ring_;
};

/// The receiving half of a broadcast channel: a subscription. Move-only; resubscribe() makes
/// another one. Destroying it unsubscribes.
///
/// Contract
/// - when_any: a receive moves its cursor only if it wins; a losing one keeps its place.
/// - recv() yields recv_result<T>: the next message (a copy; see below), lagged(n) (overflow
///   only: the receiver fell `capacity` behind and the n oldest messages it had not read were
///   overwritten; its next receive returns the oldest message still held), or closed once the
///   channel is closed (every sender gone, or close()) and every message sent before has been
///   received. The lag counts add up: messages received plus every missed() equal the messages
///   sent since the subscription.
/// - Reads take no lock: a receive that finds its message published copies it from the ring.
///   Only a receive that must wait takes the receivers' lock, to queue itself.
/// - Copies: each receiver copies the message, except the last receiver counted for it, which
///   moves it out of the ring (one copy fewer). A receiver cannot tell whether it was the last
///   (one whose copy throws leaves the message in place and its position unchanged).
/// - Cancel-safe: a receive cancelled (stop token, destroyed frame) takes nothing; a receive
///   woken for a message and then cancelled still returns it, and one destroyed before it
///   resumed leaves the position unread, so the next receive returns that message.
/// - One receive at a time per receiver: another receive while one is pending throws
///   std::logic_error (as does a try_recv then). The receiver must outlive its receives.
/// - A waiting receive resumes on its own scheduler when its task type has one, else inline on
///   the sending thread; one send wakes every waiting receiver, each on its own scheduler.
/// - bounded: until this receiver has read a message, that message's unit of capacity is held;
///   destroying the receiver passes every message it had not read.
template <class T, mode M>
class [[nodiscard]] receiver {
  using ring_type = detail::ring_of<T, M>;
  using state_type = detail::receiver_state<ring_type>;
  using node_type = detail::recv_wait<T, M == mode::bounded>;
  using recv_forms = asyncband::detail::wait_forms<node_type>;

 public:
  /// Takes over `other`'s subscription and position; `other` is left moved-from.
  receiver(receiver&& other) noexcept : rx_{std::exchange(other.rx_.ring, nullptr), other.rx_.at, {}} {}
  /// Unsubscribes this receiver (as destruction does), then takes over `other`'s subscription.
  receiver& operator=(receiver&& other) noexcept {
    if (this != &other) {
      const receiver departing(std::move(*this));  // unsubscribes last: it may resume senders inline
      rx_.ring = std::exchange(other.rx_.ring, nullptr);
      rx_.at = other.rx_.at;
    }
    return *this;
  }
  receiver(const receiver&) = delete;
  receiver& operator=(const receiver&) = delete;
  ~receiver() {
    if (rx_.ring != nullptr) std::exchange(rx_.ring, nullptr)->unsubscribe(rx_.at);
  }

  /// `co_await rx.recv()` yields recv_result<T>: a message, lagged(n), or closed.
  [[nodiscard]] auto recv() { return recv_forms::await(live()); }
  /// As above; also ends cancelled when `stop` is requested first.
  [[nodiscard]] auto recv(asyncband::stop_token stop) {
    return recv_forms::await_until_stopped(std::move(stop), live());
  }
  /// The blocking twins of recv().
  recv_result<T> recv_blocking() { return recv_forms::block(live()); }
  /// Blocks until a message (or lag, or closed), or until `stop` is requested (cancelled).
  recv_result<T> recv_blocking(asyncband::stop_token stop) {
    return recv_forms::block_until_stopped(std::move(stop), live());
  }
  /// Blocks until a message (or lag, or closed), or until `timeout` has passed (timeout).
  template <class Rep, class Period>
  recv_result<T> recv_timeout(std::chrono::duration<Rep, Period> timeout) {
    return recv_forms::block_for(timeout, live());
  }

  /// A message now: ok, empty, lagged(n) or closed. Throws std::logic_error while a receive is pending.
  recv_result<T> try_recv() {
    state_type* const rx = live();
    rx->receiving.check();
    return rx->ring->read(rx->at);
  }

  /// A new receiver of the same channel, starting at the next message sent (not at this one's
  /// position).
  [[nodiscard]] receiver resubscribe() const { return receiver(live()->ring, live()->ring->subscribe()); }

  /// Messages sent that this receiver has not read (sends still being written included; above
  /// capacity() means it lagged).
  [[nodiscard]] std::uint64_t len() const noexcept { return rx_.ring == nullptr ? 0 : rx_.ring->len(rx_.at); }
  /// Nothing to read now.
  [[nodiscard]] bool empty() const noexcept { return len() == 0; }
  /// Receivers subscribed now, this one included.
  [[nodiscard]] std::size_t receiver_count() const noexcept {
    return rx_.ring == nullptr ? 0 : rx_.ring->receiver_count();
  }
  /// The channel's capacity.
  [[nodiscard]] std::size_t capacity() const noexcept {
    return rx_.ring == nullptr ? 0 : rx_.ring->capacity();
  }

 private:
  friend class sender<T, M>;
  friend struct asyncband::detail::debug_access;
  receiver(ring_type* r, detail::cursor at) noexcept : rx_{r, at, {}} {}

  state_type* live() {
    if (rx_.ring == nullptr) throw std::logic_error("asyncband::broadcast::receiver: moved from");
    return &rx_;
  }
  const state_type* live() const {
    if (rx_.ring == nullptr) throw std::logic_error("asyncband::broadcast::receiver: moved from");
    return &rx_;
  }

  state_type rx_;
};

}  // namespace asyncband::broadcast

namespace asyncband::detail {
/// A bounded broadcast send is a when_any branch.
template <class T, class Acquire>
struct select_access<broadcast::detail::send_awaiter<T, Acquire>>
    : asyncband::detail::send_select_access<broadcast::detail::send_awaiter<T, Acquire>> {};
}  // namespace asyncband::detail
