// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/channel_core.hpp: what the MPSC channels share: references, producers, the
// receiver's wait and its wake-up protocol.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <utility>

#include "../manual_reset_event.hpp"
#include "../result.hpp"
#include "atomic.hpp"
#include "receiving_end.hpp"
#include "wait_functions.hpp"
#include "wait_queue.hpp"
#include "waiter.hpp"

namespace asyncband::mpsc::detail {

/// The part of a channel's shared state that does not depend on its storage. `Storage` (CRTP)
/// supplies, for the single receiver:
///   bool head_has_value()        a value is at the head
///   void skip_empty()            passes empty cells at the head (outside any lock)
///   size_t pass_empty_locked()   under the receiver's lock while it sleeps: passes the empty cells
///                                at its head (a sleeping receiver cannot), returns their units
///   void return_units(size_t)    after unlocking: gives those units back
///   bool value_waiting_locked()  under the receiver's lock while it sleeps: a value is at the
///                                head, past published empty cells
///   bool finished()              nothing can be published any more (read before the ring)
///   result<T> take_head()        takes the head's value (precondition: head_has_value()), moved
///                                once, into the result built in place (detail::take_into)
///   receive_in_progress& receiving()  the receiver's word for "a receive is in progress", on a
///                                line of the receiver's (each receive writes it twice)
///   bool announce_sleep()        under the receiver's lock, after `receiver_sleeping_` is set:
///                                true if a value may be at the head or on its way (see below)
///   void await_outstanding_write()  after announce_sleep() said so: waits (briefly) for a write
///                                in progress that it found, if any
///
/// The receiver's sleep and a publisher's wake-up form a Dekker pair: the receiver announces
/// `receiver_sleeping_`, then looks for a value; a publisher publishes, then looks at
/// `receiver_sleeping_`. One of them sees the other, so a published value is never slept
/// through. Two ways to pair them:
/// - fences on both sides (the unbounded channel: announce_sleep() checks the head after the
///   receiver's fence, and a send calls after_publish(), which fences);
/// - the claim counter (the bounded channel): every value claims its place with an atomic
///   read-modify-write on one counter before it is written, and announce_sleep() makes one on
///   the same counter. A claim ordered after the announcement sees `receiver_sleeping_` and
///   wakes it (after_claimed_publish(), no fence); one ordered before is outstanding, so the
///   announcement reports it, and the receiver waits for that value's publication, which is
///   a move construction away, instead of sleeping.
/// The receiver's lock orders the rest (registration, claim, cancellation), and a producer reads
/// the receiver's cursor only under it, while the receiver sleeps.
template <class Storage>
class channel_core {
 public:
  using waiter_type = asyncband::detail::waiter;

  channel_core() = default;
  channel_core(const channel_core&) = delete;
  channel_core& operator=(const channel_core&) = delete;

  // --- references ------------------------------------------------------------------------------
  void add_producer() noexcept {
    refs_.fetch_add(1, std::memory_order_relaxed);
    producers_.fetch_add(1, std::memory_order_relaxed);
  }
  /// A sender (or an owned permit) goes. The last producer tells a sleeping receiver, while it
  /// still holds its reference, so the state outlives the wake-up.
  void drop_producer() noexcept {
    if (producers_.fetch_sub(1, std::memory_order_seq_cst) == 1) wake_receiver(true);
    drop_ref();
  }
  /// A reference of the state's own, for a call whose wake-ups may destroy every handle (the
  /// caller's included) before it is done with the state.
  void add_ref() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void drop_ref() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete &storage();
  }
  [[nodiscard]] bool producers_gone() const noexcept {
    return producers_.load(std::memory_order_seq_cst) == 0;
  }

  [[nodiscard]] bool closed() const noexcept { return closed_.load(std::memory_order_seq_cst); }
  [[nodiscard]] bool receiver_gone() const noexcept { return receiver_gone_.load(std::memory_order_acquire); }

  // --- the receiver's wait -----------------------------------------------------------------------
  /// Lock-free: ready if a value is there, or if nothing can come any more (`status` closed).
  bool receive_ready(wait_status& status) noexcept {
    storage().skip_empty();
    if (storage().head_has_value()) return true;
    if (!storage().finished()) return false;
    storage().skip_empty();
    if (storage().head_has_value()) return true;
    status = wait_status::closed;
    return true;
  }

  /// A read-only guess that receive_ready() would hold: a value at the head, or the end.
  bool receive_may_be_ready() noexcept { return storage().head_has_value() || storage().finished(); }

  /// Registers the receiver's wait unless a value (or the end) is there after all.
  bool enqueue_receiver(waiter_type& w) noexcept {
    for (;;) {
      {
        const std::lock_guard lock(rx_queue_.mutex());
        receiver_sleeping_.store(true, std::memory_order_relaxed);
        asyncband::detail::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with a departing producer
        // Before the ring: a producer publishes before it leaves, so when `finished` holds, the
        // announcement below reports every value still to receive.
        const bool nothing_more = storage().finished();
        if (!storage().announce_sleep()) {
          if (!nothing_more) {
            rx_queue_.waiters().push_back(w);
            return false;
          }
          receiver_sleeping_.store(false, std::memory_order_relaxed);
          w.status = wait_status::closed;
          return true;
        }
        receiver_sleeping_.store(false, std::memory_order_relaxed);
      }
      storage().await_outstanding_write();  // outside the lock, as is passing empty cells, which
      storage().skip_empty();               // may resume senders
      if (storage().head_has_value()) return true;
    }
  }

  bool cancel_receiver(waiter_type& w, wait_status why) noexcept {
    return rx_queue_.cancel(w, why, [this](const asyncband::detail::wait_list& /*unused*/) {
      receiver_sleeping_.store(false, std::memory_order_relaxed);
    });
  }

 protected:
  ~channel_core() = default;

  /// After a publication (or anything that may end the receiver's wait): wakes it if it sleeps.
  void after_publish() noexcept {
    asyncband::detail::atomic_thread_fence(std::memory_order_seq_cst);
    after_claimed_publish();
  }
  /// After the publication of a value that claimed its place on the claim counter (acquire):
  /// no fence needed, the claim already ordered this read after any announced sleep.
  void after_claimed_publish() noexcept {
    if (receiver_sleeping_.load(std::memory_order_relaxed)) wake_receiver(false);
  }
  /// After a change that may mean nothing more can come (a permit back after close).
  void after_possible_end() noexcept {
    asyncband::detail::atomic_thread_fence(std::memory_order_seq_cst);
    if (receiver_sleeping_.load(std::memory_order_relaxed)) wake_receiver(true);
  }

  /// Wakes a sleeping receiver if it has something to do: a value at its head, or (`ending`)
  /// nothing more to wait for. Every caller holds a reference to the state (a sender's or the
  /// receiver's, a permit's sender's, or one of the state's own: close() and drop_producer() keep
  /// theirs until after this) while the queue is locked, and resolving touches only the nodes:
  /// the queue is woken without a pin. (A cancellation of the receive locks the queue without a
  /// reference of its own; the receiver cannot go before it returns: see bounded_state.)
  void wake_receiver(bool ending) noexcept {
    std::size_t passed = 0;
    rx_queue_.wake_kept_alive(
        [this, ending, &passed](asyncband::detail::wait_list& waiters, asyncband::detail::wake_batch& batch) {
          if (!receiver_sleeping_.load(std::memory_order_relaxed)) return;
          // The receiver's cursor is ours while it sleeps: an empty cell at its head would keep
          // its unit (and the receiver asleep) for good, since no value may ever follow it.
          passed = storage().pass_empty_locked();
          // The passed cells' units go back after the resolution below, and a receiver resumed
          // inline may destroy its handle and the caller's (the last references): keep the state.
          if (passed != 0) refs_.fetch_add(1, std::memory_order_relaxed);
          if (storage().value_waiting_locked()) {
            receiver_sleeping_.store(false, std::memory_order_relaxed);
            waiters.claim_all(batch);
          } else if (ending && storage().finished()) {
            receiver_sleeping_.store(false, std::memory_order_relaxed);
            waiters.claim_all(batch, wait_status::closed);
          }
        });
    // May end a closed channel: wakes again. Then the reference taken above goes, last.
    if (passed != 0) {
      storage().return_units(passed);
      drop_ref();
    }
  }

  void mark_closed() noexcept { closed_.store(true, std::memory_order_seq_cst); }
  void mark_receiver_gone() noexcept { receiver_gone_.store(true, std::memory_order_release); }

 public:
  /// Set once the channel is closed (the senders' closed() waits).
  manual_reset_event& closed_event() noexcept { return closed_event_; }

 protected:
  /// After mark_closed(), outside every lock, with a reference held: wakes the senders'
  /// closed() waits (one resumed inline may destroy every handle; the reference keeps the
  /// state).
  void announce_closed() noexcept { closed_event_.set(); }

 private:
  Storage& storage() noexcept { return static_cast<Storage&>(*this); }

  alignas(64) asyncband::detail::atomic<std::size_t> refs_{2};  // producers + the receiver
  asyncband::detail::atomic<std::size_t> producers_{1};         // senders + owned permits
  asyncband::detail::atomic<bool> closed_{false};
  asyncband::detail::atomic<bool> receiver_gone_{false};
  asyncband::detail::atomic<bool> receiver_sleeping_{false};
  asyncband::detail::wait_queue rx_queue_;
  manual_reset_event closed_event_;
};

/// A receive: ready when a value is at the head, or when none can come any more (closed).
/// Cancel-safe: the value stays in the channel until take() moves it out.
template <class State, class T>
class recv_wait : public asyncband::detail::waiter {
 public:
  using value_type = T;
  static constexpr bool transferable = false;
  static constexpr bool fallible = true;

  /// Throws std::logic_error if another receive is in progress (one receive at a time).
  explicit recv_wait(State* s) : state_(s) { s->receiving().begin(); }
  recv_wait(const recv_wait&) = delete;
  recv_wait& operator=(const recv_wait&) = delete;
  ~recv_wait() { state_->receiving().end(); }

  bool try_ready() noexcept { return state_->receive_ready(status); }
  /// A blocking receive spins on it before it parks: the senders are usually running.
  bool may_be_ready() noexcept { return state_->receive_may_be_ready(); }
  /// Its spin yields on a small bounded channel only (detail::receive_spins_by_yielding).
  bool backs_off_by_yielding() const noexcept {
    return asyncband::detail::receive_spins_by_yielding(*state_);
  }
  bool enqueue() noexcept { return state_->enqueue_receiver(*this); }
  bool cancel(wait_status why) noexcept { return state_->cancel_receiver(*this, why); }
  /// The outcome itself, built in place from the head's cell: finish_wait returns it as is.
  result<T> take() { return state_->take_head(); }

 protected:
  [[nodiscard]] State* state() const noexcept { return state_; }

 private:
  State* state_;
};

/// A batch receive (recv_many): waits as a receive does, then appends to a `Buffer` (a
/// std::vector<T, A>) up to `limit` of the values at the head, and yields how many. Limit 0:
/// ready at once, yields 0 without touching the channel.
template <class State, class T, class Buffer>
class recv_many_wait : public recv_wait<State, T> {
 public:
  using value_type = std::size_t;

  /// Throws std::logic_error if another receive is in progress (one receive at a time).
  recv_many_wait(State* s, Buffer& buffer, std::size_t limit)
      : recv_wait<State, T>(s), buffer_(&buffer), limit_(limit) {}

  bool try_ready() noexcept { return limit_ == 0 || recv_wait<State, T>::try_ready(); }
  result<std::size_t> take() {
    if (limit_ == 0) return std::size_t{0};
    return this->state()->take_head_many(*buffer_, limit_);
  }

 private:
  Buffer* buffer_;
  std::size_t limit_;
};

/// The batch receive node of the MPSC channel `State`, as a template of the buffer type
/// (receiving_end's ManyWait).
template <class State, class T>
struct batch_of {
  template <class Buffer>
  using wait = recv_many_wait<State, T, Buffer>;
};

/// What both MPSC receivers are: a receiving end (every receive form, batches included;
/// destroying it disconnects the channel, State::receiver_leaves) with try_recv, close and len.
template <class State, class T>
class receiver_handle
    : public asyncband::detail::receiving_end<State, recv_wait<State, T>, batch_of<State, T>::template wait> {
 public:
  /// A value now: ok, empty, or closed.
  /// Throws std::logic_error if it would take a value while a receive is pending (one receive
  /// at a time: that value is the pending receive's).
  try_recv_result<T> try_recv() { return this->live()->try_pop(); }

  /// No new sends; what was accepted still drains.
  void close() noexcept {
    if (this->state_ != nullptr) this->state_->close();
  }

  /// Values accepted and not yet received (including sends still being written).
  [[nodiscard]] std::size_t len() const noexcept { return this->state_ == nullptr ? 0 : this->state_->len(); }
  /// len() == 0.
  [[nodiscard]] bool empty() const noexcept { return len() == 0; }

 protected:
  explicit receiver_handle(State* s) noexcept
      : asyncband::detail::receiving_end<State, recv_wait<State, T>, batch_of<State, T>::template wait>(s) {}
};

}  // namespace asyncband::mpsc::detail
