// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/mpmc_receiver.hpp: the receiving half of an MPMC channel: a receive is an
// acquisition of one unit of the channel's `items_` semaphore, then the take of the value it
// stands for.
#pragma once

#include <cstddef>
#include <utility>

#include "../result.hpp"
#include "../semaphore.hpp"
#include "mpmc_takes.hpp"
#include "receiving_end.hpp"
#include "semaphore_wait.hpp"

namespace asyncband::mpmc::detail {

/// What a receive of `State` holds when it has a value without taking a unit of `items_` from
/// the count: the value it claimed itself (try_claim), or the one a delivery bound to it while
/// it waited; nothing for a state whose receives always go through units.
template <class State>
struct fast_claim {
  /// Whether it holds one.
  bool claimed = false;
};
template <class State>
  requires claims_without_units<State>
struct fast_claim<State> {
  typename State::claimed_value value;  // not value-initialized: a copied T's room stays as is
  bool claimed = false;
};

/// What every receive node of an MPMC channel shares: an acquisition of one unit of the
/// channel's `items_` semaphore (so it queues, is cancelled and loses a when_any as an
/// acquisition does; a unit it does not use goes to the next receive), and, for a bounded
/// channel, a value it holds without a unit from the count: claimed itself, without waiting
/// (try_claim), or bound to it by a delivery while it was queued (see
/// mpmc::detail::bounded_state). A receive that queues looks once more whether a value was
/// published meanwhile (after_receive_queued).
template <class State>
class receive_waiter : public asyncband::detail::semaphore_waiter {
 public:
  /// The claim a delivery fills for this queued receive, with the unit it was just granted
  /// (under `items_`' lock: the receive resumes after it).
  auto& bind() noexcept {
    claim_.claimed = true;
    return claim_.value;
  }
  /// Its spin yields on a small bounded channel only (detail::receive_spins_by_yielding), not
  /// at every capacity as other acquisitions of a semaphore do.
  bool backs_off_by_yielding() const noexcept {
    return asyncband::detail::receive_spins_by_yielding(*state_);
  }

 protected:
  receive_waiter(State* s, std::size_t n) noexcept : semaphore_waiter(&s->items(), n), state_(s) {}

  bool claim_or_take() noexcept {
    if constexpr (claims_without_units<State>) {
      return claim_.claimed = state_->try_claim(claim_.value);
    } else {
      return semaphore_waiter::try_ready();
    }
  }
  bool may_claim() noexcept {
    if constexpr (claims_without_units<State>) {
      return state_->may_claim();
    } else {
      return semaphore_waiter::may_be_ready();
    }
  }
  /// semaphore_waiter::enqueue(), then, for a bounded channel, its re-check once queued. The
  /// node is published then and may be resumed and destroyed at once, with every handle: only
  /// the state is touched after, under a reference of its own.
  bool enqueue_and_look_again() noexcept {
    if constexpr (claims_without_units<State>) {
      State* s = state_;
      s->add_ref();
      const bool done = semaphore_waiter::enqueue();
      if (!done) s->after_receive_queued();
      s->drop_ref();
      return done;
    } else {
      return semaphore_waiter::enqueue();
    }
  }
  /// A completed receive that will not take its value: the value goes back (for a bound or
  /// claimed one: see bounded_state::give_back), or the unit goes to the next receive.
  void give_back_claim() noexcept {
    if constexpr (claims_without_units<State>) {
      if (claim_.claimed) return state_->give_back(claim_.value);
    }
    semaphore_waiter::give_back();
  }
  [[nodiscard]] bool holds_claim() const noexcept { return claim_.claimed; }
  [[nodiscard]] const auto& claim() const noexcept { return claim_.value; }

  State* state_;

 private:
  fast_claim<State> claim_;
};

/// A receive: one unit of `items_` (or a value held without one: receive_waiter), then the take
/// of the value, moved once into the outcome.
template <class State>
class recv_wait : public receive_waiter<State> {
  using base = receive_waiter<State>;

 public:
  using value_type = typename State::value_type;
  using outcome_type = result<value_type>;
  static constexpr bool fallible = true;

  explicit recv_wait(State* s) noexcept : base(s, 1) {}

  bool try_ready() noexcept { return this->claim_or_take(); }
  bool may_be_ready() noexcept { return this->may_claim(); }
  bool enqueue() noexcept { return this->enqueue_and_look_again(); }
  void give_back() noexcept { this->give_back_claim(); }

  outcome_type take() {
    if constexpr (claims_without_units<State>) {
      if (this->holds_claim()) return this->state_->template take_claimed<outcome_type>(this->claim());
    }
    return this->state_->template take<outcome_type>(this->take_permit());
  }
};

/// A batch receive (recv_many): a receive's unit (or value held without one), then the take of
/// up to `limit` values into a `Buffer` (std::vector<T, A>): that one and those it can take
/// with it (value_takes::take_many); yields how many. Limit 0: acquires nothing, ready at once,
/// yields 0.
template <class State, class Buffer>
class recv_many_wait : public receive_waiter<State> {
  using base = receive_waiter<State>;

 public:
  using value_type = std::size_t;
  using outcome_type = result<std::size_t>;
  static constexpr bool fallible = true;

  recv_many_wait(State* s, Buffer& buffer, std::size_t limit) noexcept
      : base(s, limit == 0 ? 0 : 1), buffer_(&buffer), limit_(limit) {}

  bool try_ready() noexcept { return limit_ == 0 || this->claim_or_take(); }
  bool may_be_ready() noexcept { return limit_ == 0 || this->may_claim(); }
  bool enqueue() noexcept { return this->enqueue_and_look_again(); }
  void give_back() noexcept { this->give_back_claim(); }

  outcome_type take() {
    if (limit_ == 0) return std::size_t{0};
    if constexpr (claims_without_units<State>) {
      if (this->holds_claim()) return this->state_->take_many_claimed(this->claim(), *buffer_, limit_);
    }
    return this->state_->take_many(this->take_permit(), *buffer_, limit_);
  }

 private:
  Buffer* buffer_;
  std::size_t limit_;
};

/// The batch receive node of the MPMC channel `State`, as a template of the buffer type
/// (receiving_end's ManyWait).
template <class State>
struct batch_of {
  template <class Buffer>
  using wait = recv_many_wait<State, Buffer>;
};

/// The receiving half of an MPMC channel (mpmc::receiver, mpmc::unbounded_receiver). Copyable: every copy is
/// a receiver, and each value goes to exactly one receive of one of them. When the last receiver goes, the
/// channel is closed: later sends hand their value back, senders waiting for capacity end closed,
/// and the values nobody received are destroyed.
///
/// Contract
/// - Fairness: receives that wait are served in FIFO order, across every copy of the receiver;
///   a try_recv or a new receive never takes a value while a receive waits.
/// - Synchronization: a value's construction in the channel happens-before the receive that
///   takes it.
/// - Cancellation commits until the receive resumes. A receive cancelled (stop token, its frame
///   destroyed, a lost when_any, a timeout) takes nothing: if it had been woken for a value, the
///   value goes to the next waiting receive, or stays in the channel. No value is lost or
///   received twice.
/// - recv() yields result<T>: a value, or wait_status::closed once nothing can come any more
///   (the channel is closed or every producer is gone, and no permit or accepted send is
///   outstanding) and every accepted value has been received.
/// - close() (on either half): no new sends or reservations; what was accepted, and the sends
///   of permits held at the time, still drain to the receivers.
/// - Every receive form moves the value exactly once, from the channel into the result. If that
///   move throws, the exception propagates and the value stays in the channel, for the next
///   receive (ahead of the others).
/// - recv_many(buffer, limit) (and try_recv_many, the blocking twins, recv_many_timeout) is one
///   receive in the FIFO order above, which then also takes, up to `limit` in all, the values no
///   other receive waits for, appending them to `buffer` in one step (one wake-up; bounded: one
///   return of their capacity). `limit` 0 yields 0 at once. If a value's move throws, the values
///   before it stay appended, it stays in the channel (ahead of the others), the rest of the batch
///   goes to the next receives, and the exception propagates.
/// - Several receives may be in progress at once, from any copies, threads or coroutines. Each
///   receiver must outlive its own receives (their awaiters included).
/// - A receive never waits for a send's constructor of the value: it takes only values whose
///   construction in the channel is complete (a receive from inside one, through code it resumed
///   inline, waits for that value like any other receive). The one exception, on the bounded
///   channel: for a trivially copyable T, a receive may claim a place whose value another thread
///   is copying in and wait for that copy to finish.
/// - Order, of the bounded channel: each receive sees one producer's values in the order they
///   were sent, apart from a value that went back to the channel after a receive held it (its
///   move threw; or the receive was woken for it and then cancelled, or lost its when_any), which
///   goes to the next receive, after later values may have been taken.
template <class State>
class receiver_base
    : public asyncband::detail::receiving_end<State, recv_wait<State>, batch_of<State>::template wait> {
  using base = asyncband::detail::receiving_end<State, recv_wait<State>, batch_of<State>::template wait>;
  using T = typename State::value_type;

 public:
  /// Takes over `other`'s place among the receivers; `other` is left moved-from.
  receiver_base(receiver_base&&) noexcept = default;
  /// Leaves the channel this receiver received from, then takes over `other`'s place.
  receiver_base& operator=(receiver_base&&) noexcept = default;
  /// Another receiver of the same channel (a moved-from receiver copies as moved-from).
  receiver_base(const receiver_base& other) noexcept : base(adopt(other.state_)) {}
  /// Leaves the channel this receiver received from, then joins `other`'s.
  receiver_base& operator=(const receiver_base& other) noexcept {
    if (this != &other) *this = receiver_base(other);
    return *this;
  }
  ~receiver_base() = default;

  /// A value now: ok, empty, or closed (nothing left, and nothing can come).
  try_recv_result<T> try_recv() { return this->live()->try_take(); }
  /// Closes the channel: no new sends; what was accepted still drains.
  void close() noexcept {
    if (this->state_ != nullptr) this->state_->close();
  }
  /// The channel is closed (or every sender is gone).
  [[nodiscard]] bool is_closed() const noexcept { return this->state_ == nullptr || this->state_->closed(); }
  /// Values accepted and not yet received (including sends still being written).
  [[nodiscard]] std::size_t len() const noexcept { return this->state_ == nullptr ? 0 : this->state_->len(); }
  /// len() == 0.
  [[nodiscard]] bool empty() const noexcept { return len() == 0; }
  /// The senders (and owned permits) of the channel now.
  [[nodiscard]] std::size_t sender_count() const noexcept {
    return this->state_ == nullptr ? 0 : this->state_->sender_count();
  }
  /// The receivers of the channel now.
  [[nodiscard]] std::size_t receiver_count() const noexcept {
    return this->state_ == nullptr ? 0 : this->state_->receiver_count();
  }

 protected:
  /// Adopts the reference its factory counted.
  explicit receiver_base(State* s) noexcept : base(s) {}

 private:
  static State* adopt(State* s) noexcept {
    if (s != nullptr) s->add_receiver();
    return s;
  }
};

}  // namespace asyncband::mpmc::detail
