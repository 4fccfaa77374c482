// SPDX-License-Identifier: Apache-2.0
// asyncband/oneshot.hpp
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "detail/atomic.hpp"
#include "detail/receiving_end.hpp"
#include "detail/wait_functions.hpp"
#include "detail/wait_queue.hpp"
#include "result.hpp"
#include "stop_token.hpp"

/// A channel for one value, from one sender to one receiver: channel().
namespace asyncband::oneshot {

template <class T>
class sender;
template <class T>
class receiver;

namespace detail {

/// The one allocation of a oneshot channel: the value's storage, the receiver's wait list and a
/// word of flags. Each handle releases its reference as the very last thing it does with the
/// state, and the second one to release deletes it: a sender still waking the receiver keeps
/// the state alive even if the receiver takes the value and goes meanwhile.
template <class T>
class state {
 public:
  static constexpr std::uint8_t sending = 1;             // a send committed, its value being stored
  static constexpr std::uint8_t has_value = 2;           // the value is stored, not yet taken
  static constexpr std::uint8_t value_taken = 4;         // the receiver took it
  static constexpr std::uint8_t sender_done = 8;         // no value will come after this point
  static constexpr std::uint8_t receiver_closed = 16;    // sends now fail
  static constexpr std::uint8_t sender_released = 32;    // the sender's reference is gone
  static constexpr std::uint8_t receiver_released = 64;  // the receiver's reference is gone
  static constexpr std::uint8_t receiver_gone = 128;     // nobody will take a value any more

  state() noexcept = default;
  state(const state&) = delete;
  state& operator=(const state&) = delete;
  ~state() = default;

  [[nodiscard]] std::uint8_t bits(std::memory_order order = std::memory_order_acquire) const noexcept {
    return bits_.load(order);
  }
  std::uint8_t set(std::uint8_t b) noexcept { return bits_.fetch_or(b, std::memory_order_acq_rel); }

  /// The sender's commit: marks `sending` unless the receiver closed first (false).
  bool begin_send() noexcept {
    std::uint8_t b = bits_.load(std::memory_order_relaxed);
    do {
      if ((b & receiver_closed) != 0) return false;
    } while (
        !bits_.compare_exchange_weak(b, b | sending, std::memory_order_acq_rel, std::memory_order_relaxed));
    return true;
  }
  /// The value is stored: publishes it (and that nothing else will come). Returns the flags
  /// before: with receiver_gone set, nobody will take it, and the sender takes it back. One
  /// atomic step against the receiver's set(receiver_gone): exactly one of them owns the value.
  std::uint8_t publish() noexcept {
    return bits_.fetch_xor(sending | has_value | sender_done, std::memory_order_acq_rel);
  }
  /// Storing the value threw: the send did not happen.
  void abort_send() noexcept {
    bits_.fetch_and(static_cast<std::uint8_t>(~sending), std::memory_order_acq_rel);
  }

  template <class U>
  void store(U&& value) {
    ::new (static_cast<void*>(storage_)) T(std::forward<U>(value));
  }
  T& slot() noexcept { return *std::launder(reinterpret_cast<T*>(storage_)); }
  /// Moves the value into a receive's outcome (result<T> or try_recv_result<T>), built in place.
  /// If that move throws, the value stays stored and receivable.
  template <class Outcome>
  Outcome take() {
    return asyncband::detail::take_into<Outcome>(slot(), [this]() noexcept {
      slot().~T();
      set(value_taken);
    });
  }

  /// One receive at a time (see receiving_end).
  asyncband::detail::receive_in_progress& receiving() noexcept { return receiving_; }

  /// Resolves the receiver's waits: with the value if one was published, closed otherwise.
  /// What a receive finds: the value, nothing yet, or nothing ever (taken, the sender went
  /// without sending, or the receiver closed with no send committed).
  enum class availability : unsigned char { value, pending, none };
  [[nodiscard]] static availability availability_of(std::uint8_t b) noexcept {
    if ((b & value_taken) != 0) return availability::none;
    if ((b & has_value) != 0) return availability::value;
    if ((b & sending) != 0) return availability::pending;
    if ((b & (sender_done | receiver_closed)) != 0) return availability::none;
    return availability::pending;
  }

  /// Resolves the receiver's waits if their outcome is decided: with the value, or closed.
  void wake_receiver() noexcept {
    queue_.wake([this](asyncband::detail::wait_list& waiters, asyncband::detail::wake_batch& batch) {
      const availability a = availability_of(bits(std::memory_order_relaxed));
      if (a == availability::pending) return;
      waiters.claim_all(batch, a == availability::value ? wait_status::ok : wait_status::closed);
    });
  }

  /// The handle's last access: deletes the state if the other handle has released too.
  void release(std::uint8_t released_bit, std::uint8_t other_released_bit) noexcept {
    if ((set(released_bit) & other_released_bit) != 0) delete this;
  }

  asyncband::detail::wait_queue& queue() noexcept { return queue_; }

  /// The receiver goes (its handle's last access). One step against the sender's publish():
  /// if the value was published first it is the receiver's to destroy; if a send is still
  /// storing it, the sender sees receiver_gone and takes it back.
  void receiver_leaves() noexcept {
    const std::uint8_t before = set(receiver_closed | receiver_gone);
    if ((before & has_value) != 0 && (before & value_taken) == 0) {
      slot().~T();  // sent, never taken: destroyed exactly once, here
      set(value_taken);
    }
    release(receiver_released, sender_released);
  }

 private:
  asyncband::detail::atomic<std::uint8_t> bits_{0};
  asyncband::detail::receive_in_progress receiving_;
  alignas(T) unsigned char storage_[sizeof(T)];
  asyncband::detail::wait_queue queue_;
};

/// A receive: ready when the value is stored, or when none will ever come (closed).
template <class T>
class recv_wait : public asyncband::detail::waiter {
 public:
  using value_type = T;
  static constexpr bool transferable = false;  // the value stays in the channel until taken
  static constexpr bool fallible = true;

  /// Throws std::logic_error if another receive is in progress (one receive at a time).
  explicit recv_wait(state<T>* s) : state_(s) { s->receiving().begin(); }
  recv_wait(const recv_wait&) = delete;
  recv_wait& operator=(const recv_wait&) = delete;
  ~recv_wait() { state_->receiving().end(); }

  bool try_ready() noexcept { return ready(state_->bits()); }
  bool enqueue() noexcept {
    return state_->queue().complete_or_enqueue(*this, [this] { return ready(state_->bits()); });
  }
  bool cancel(wait_status why) noexcept { return state_->queue().cancel(*this, why); }
  /// The outcome itself, built in place: finish_wait returns it without another move.
  result<T> take() { return state_->template take<result<T>>(); }

 private:
  bool ready(std::uint8_t b) noexcept {
    switch (state<T>::availability_of(b)) {
      case state<T>::availability::value:
        return true;
      case state<T>::availability::none:
        status = wait_status::closed;
        return true;
      case state<T>::availability::pending:
        break;
    }
    return false;
  }

  state<T>* state_;
};

}  // namespace detail

/// Creates a oneshot channel: one value, from one sender to one receiver. One allocation.
template <class T>
std::pair<sender<T>, receiver<T>> channel();

/// The sending half: sends at most one value, without waiting. Move-only; destroying it without
/// sending tells the receiver that no value will come (its waits end closed).
///
/// Contract
/// - send() commits when it finds the receiver open: the value is then delivered, unless the
///   receiver is destroyed before taking it, in which case send() hands it back
///   (send_status::closed) if it was still storing it, or the receiver's destruction
///   destroys it. A send that finds the receiver closed or gone hands the value back at once.
/// - Synchronization: storing the value happens-before the receive that takes it.
/// - send() resolves the receiver's pending wait after storing the value, outside any lock; a
///   receiver coroutine without a scheduler resumes inline inside send().
template <class T>
class [[nodiscard]] sender {
 public:
  /// Takes over `other`'s channel; `other` is left moved-from.
  sender(sender&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  /// Drops this sender's channel (as destruction does), then takes over `other`'s.
  sender& operator=(sender&& other) noexcept {
    if (this != &other) {
      const sender departing(std::move(*this));  // goes last: it may wake the receiver inline
      state_ = std::exchange(other.state_, nullptr);
    }
    return *this;
  }
  sender(const sender&) = delete;
  sender& operator=(const sender&) = delete;
  ~sender() { reset(); }

  /// Whether the handle can still send (not yet sent, not moved from).
  explicit operator bool() const noexcept { return state_ != nullptr; }

  /// True if a send would hand its value back: the receiver closed the channel or is gone.
  [[nodiscard]] bool is_closed() const noexcept {
    return state_ == nullptr || (state_->bits() & detail::state<T>::receiver_closed) != 0;
  }

  /// Sends the value; the handle is spent afterwards (also when the value comes back). If
  /// constructing the stored value throws, nothing was sent and the handle is unchanged.
  /// Precondition (std::logic_error): not spent.
  template <class U = T>
  send_result<T> send(U&& value) {
    if (state_ == nullptr) throw std::logic_error("asyncband::oneshot::sender: already sent");
    using st = detail::state<T>;
    if (!state_->begin_send()) {
      T unsent(std::forward<U>(value));
      reset();
      return {send_status::closed, std::move(unsent)};
    }
    try {
      state_->store(std::forward<U>(value));
    } catch (...) {
      state_->abort_send();
      state_->wake_receiver();  // closed meanwhile: a pending receive now knows nothing will come
      throw;
    }
    st* const s = std::exchange(state_, nullptr);
    if ((s->publish() & st::receiver_gone) != 0) {
      // The receiver went while we stored: nobody will take the value, so it comes back. The
      // guard destroys the stored value and releases the state even if moving it out throws.
      struct give_up {
        st* s;
        ~give_up() {
          s->slot().~T();
          s->release(st::sender_released, st::receiver_released);
        }
      } const done{s};
      return {send_status::closed, std::move(s->slot())};
    }
    s->wake_receiver();
    s->release(st::sender_released, st::receiver_released);
    return {};
  }

 private:
  friend std::pair<sender<T>, receiver<T>> channel<T>();
  explicit sender(detail::state<T>* s) noexcept : state_(s) {}

  void reset() noexcept {
    using st = detail::state<T>;
    st* const s = std::exchange(state_, nullptr);
    if (s == nullptr) return;
    if ((s->set(st::sender_done) & st::sender_done) == 0) s->wake_receiver();
    s->release(st::sender_released, st::receiver_released);
  }

  detail::state<T>* state_;
};

/// The receiving half. Move-only; destroying it closes the channel and destroys a value sent
/// but not taken.
///
/// Contract
/// - when_any: a receive takes the value only if it wins; a losing one leaves it in the channel.
/// - recv() yields result<T>: the value, or wait_status::closed when none will ever come (the
///   sender went without sending, the value was already taken, or the receiver closed before a
///   send committed). It is cancel-safe: a cancelled or destroyed receive takes nothing, and the
///   value waits for the next attempt.
/// - close() makes later sends fail (they hand their value back) and ends a pending receive
///   closed; a value already sent, or being sent, can still be received.
/// - One receive at a time: a receive (a recv() awaiter, from its creation to its destruction,
///   or a blocking receive) excludes any other. Another recv(), recv_blocking() or recv_timeout()
///   meanwhile throws std::logic_error and leaves the pending receive undisturbed; so does a
///   try_recv() that would take a value (the pending receive's), else it reports as usual.
///   The receiver must outlive its receives (their awaiters included).
/// - Every receive form (block_on(rx.recv()) included) moves the value exactly once, from the
///   channel into the result; if that move throws, the exception propagates and the value stays
///   in the channel, for the next receive.
template <class T>
class [[nodiscard]] receiver
    : public asyncband::detail::receiving_end<detail::state<T>, detail::recv_wait<T>> {
 public:
  // recv() yields the value or closed; recv(stop), recv_blocking, recv_timeout: receiving_end.

  /// Takes the value if it is there: ok, empty (it may still come) or closed (it never will).
  /// Throws std::logic_error if it would take the value while a receive is pending (one receive
  /// at a time: the value is the pending receive's).
  try_recv_result<T> try_recv() {
    using st = detail::state<T>;
    switch (st::availability_of(this->live()->bits())) {
      case st::availability::value:
        this->state_->receiving().check();
        return this->state_->template take<try_recv_result<T>>();
      case st::availability::none:
        return recv_status::closed;
      case st::availability::pending:
        break;
    }
    return recv_status::empty;
  }

  /// A value is waiting to be taken.
  [[nodiscard]] bool ready() const noexcept {
    if (this->state_ == nullptr) return false;
    const std::uint8_t b = this->state_->bits();
    return (b & detail::state<T>::has_value) != 0 && (b & detail::state<T>::value_taken) == 0;
  }
  /// No value will ever be received: the sender went without sending, or it was taken.
  [[nodiscard]] bool is_terminated() const noexcept {
    if (this->state_ == nullptr) return true;
    return detail::state<T>::availability_of(this->state_->bits()) == detail::state<T>::availability::none;
  }

  /// Later sends fail and hand their value back; a value already sent stays receivable.
  void close() noexcept {
    if (this->state_ == nullptr) return;
    this->state_->set(detail::state<T>::receiver_closed);
    this->state_->wake_receiver();  // a pending receive ends closed unless a send had committed
  }

 private:
  friend std::pair<sender<T>, receiver<T>> channel<T>();
  explicit receiver(detail::state<T>* s) noexcept
      : asyncband::detail::receiving_end<detail::state<T>, detail::recv_wait<T>>(s) {}
};

template <class T>
std::pair<sender<T>, receiver<T>> channel() {
  auto* s = new detail::state<T>();
  return {sender<T>(s), receiver<T>(s)};
}

}  // namespace asyncband::oneshot
