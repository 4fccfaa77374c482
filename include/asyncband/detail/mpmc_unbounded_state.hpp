// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/mpmc_unbounded_state.hpp: the shared state of an unbounded MPMC channel: a
// linked list of messages, and a semaphore counting the values no receive has claimed.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <new>
#include <optional>
#include <utility>

#include "../result.hpp"
#include "../semaphore.hpp"
#include "atomic.hpp"
#include "mpmc_handles.hpp"
#include "mpmc_takes.hpp"
#include "receiving_end.hpp"
#include "spin_lock.hpp"

namespace asyncband::mpmc::detail {

/// One message, allocated and constructed by its sender outside any lock. Two references: its
/// value's (dropped by the receive that moved the value out) and its link's (dropped when the
/// list's head moves past it); the last frees it, so a receive moves its value out while the
/// next receive may already have moved the head on.
template <class T>
struct message {
  explicit message(unsigned references) noexcept : refs(references) {}

  asyncband::detail::atomic<message*> next{nullptr};
  asyncband::detail::atomic<unsigned> refs;
  message* parked_next = nullptr;  // under the head's lock, while parked
  alignas(T) unsigned char storage[sizeof(T)];

  T& value() noexcept { return *std::launder(reinterpret_cast<T*>(storage)); }
  void drop() noexcept {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

/// The shared state of an unbounded MPMC channel.
///
/// Senders link their message lock-free at the tail (one exchange, then a store into the
/// predecessor: Vyukov's MPSC list), then give one unit of `items_`. A receive acquires one
/// unit of `items_` (FIFO among receives, cancellation and when_any exactly as a semaphore
/// acquisition: a unit it does not use goes to the next receive), then claims the message after
/// the head under a short spin lock, and moves the value out after unlocking. Links are
/// completed in order of the tail exchange; a claim may find the next link not stored yet (a
/// sender between its exchange and its store) while a later sender's unit is already given: it
/// waits for that store, a few instructions away.
///
/// `pending_` counts values sent (or being sent) and not yet received. A send counts itself
/// before it checks `closed_`, and close() sets `closed_` before it reads the count (both
/// seq_cst): either the send sees the channel closed and withdraws, or the value is received
/// before the receives end closed. When the channel is closed and nothing is pending, `items_`
/// is closed: its count is 0 then, and every waiting and later receive ends closed.
template <class T>
class unbounded_state : public handle_counts<unbounded_state<T>>, public value_takes<unbounded_state<T>, T> {
  using message_type = message<T>;

 public:
  using value_type = T;
  static constexpr bool multi_consumer = true;

  unbounded_state() : head_(new message_type(1)), tail_(head_) {}
  unbounded_state(const unbounded_state&) = delete;
  unbounded_state& operator=(const unbounded_state&) = delete;

  /// The last reference is gone: destroys the values nobody received.
  ~unbounded_state() {
    while (parked_ != nullptr) {
      message_type* m = std::exchange(parked_, parked_->parked_next);
      m->value().~T();
      m->drop();
    }
    message_type* m = head_->next.load(std::memory_order_acquire);
    head_->drop();
    while (m != nullptr) {
      m->value().~T();
      delete std::exchange(m, m->next.load(std::memory_order_acquire));
    }
  }

  /// A receiver handle goes; the last one disconnects the channel: later sends hand their value
  /// back, and the values nobody received are destroyed now (one being linked right now, with
  /// the state).
  void receiver_leaves() noexcept {
    if (this->last_receiver_leaves()) {
      close();
      discard_received_by_nobody();
    }
    this->drop_ref();
  }

  [[nodiscard]] bool closed() const noexcept { return closed_.load(std::memory_order_seq_cst); }

  /// Later sends hand their value back; what was accepted still drains to the receivers. A
  /// receive or a closed() wait resumed inline may destroy every handle, the caller's included:
  /// the state keeps a reference of its own until the end.
  void close() noexcept {
    this->add_ref();
    closed_.store(true, std::memory_order_seq_cst);
    if (pending_.load(std::memory_order_seq_cst) == 0) end();
    this->closed_event().set();
    this->drop_ref();
  }

  // --- sending -----------------------------------------------------------------------------------
  template <class U>
  send_result<T> send(U&& value) {
    if (closed()) return {send_status::closed, T(std::forward<U>(value))};
    auto* m = new message_type(2);
    try {
      ::new (static_cast<void*>(m->storage)) T(std::forward<U>(value));
    } catch (...) {
      delete m;
      throw;
    }
    pending_.fetch_add(1, std::memory_order_seq_cst);
    if (closed()) return give_up(m);
    message_type* const prev = tail_.exchange(m, std::memory_order_acq_rel);
    prev->next.store(m, std::memory_order_release);
    items_.template give<false>(1);
    return {};
  }

  // --- receiving ---------------------------------------------------------------------------------
  semaphore& items() noexcept { return items_; }

  /// Values sent (or being sent) and not yet received.
  [[nodiscard]] std::size_t len() const noexcept { return pending_.load(std::memory_order_acquire); }

 private:
  // --- what value_takes needs (see there) --------------------------------------------------------
  friend class value_takes<unbounded_state<T>, T>;
  using claimed_value = message_type*;

  static T& value_of(message_type* m) noexcept { return m->value(); }
  /// Its value moved out: destroys what is left of it and drops the value's reference.
  static void release(message_type* m) noexcept {
    m->value().~T();
    m->drop();
  }
  /// n values left the channel (received, destroyed, or withdrawn by their sends): if they were
  /// the last of a closed channel, receives end closed. The count is read again after the close
  /// flag: between this decrement and the close, a send may have added a value (and the close
  /// then found it pending and left the end to its receive). Found by the model test
  /// ModelMpmcUnbounded.EachValueToOneReceiver: ending on the stale 0 lost that value.
  void done_with_values(std::size_t n) noexcept {
    if (n != 0 && pending_.fetch_sub(n, std::memory_order_seq_cst) == n && drained()) end();
  }

  /// The message a unit of `items_` stands for: a parked one first, else the one after the head.
  message_type* claim_value() noexcept {
    message_type* old_head = nullptr;
    message_type* m = nullptr;
    {
      const std::lock_guard lock(head_lock_);
      if (parked_ != nullptr) return std::exchange(parked_, parked_->parked_next);
      old_head = head_;
      asyncband::detail::spin_until(
          [&] { return (m = old_head->next.load(std::memory_order_acquire)) != nullptr; });
      head_ = m;
    }
    old_head->drop();  // its link's reference: the head is past it
    return m;
  }

  /// Closed, and nothing pending: nothing left to receive, and nothing can come.
  [[nodiscard]] bool drained() const noexcept {
    return closed() && pending_.load(std::memory_order_seq_cst) == 0;
  }

  /// A receive whose move threw gives its message to the next receive.
  void park(message_type* m) noexcept {
    {
      const std::lock_guard lock(head_lock_);
      m->parked_next = parked_;
      parked_ = m;
    }
    items_.template give<false>(1);  // after the park: the receive given this unit finds it
  }

  /// The channel was closed after the send counted itself: the value comes back. The guard
  /// frees the message and withdraws the count even if moving the value out throws.
  send_result<T> give_up(message_type* m) {
    struct withdraw {
      unbounded_state* self;
      message_type* m;
      ~withdraw() {
        m->value().~T();
        delete m;
        self->done_with_values(1);
      }
    } const done{this, m};
    return {send_status::closed, std::move(m->value())};
  }

  /// Closed and nothing pending: waiting and later receives end closed.
  void end() noexcept { items_.close(&nothing_to_do, nullptr); }
  static void nothing_to_do(void* /*unused*/) noexcept {}

  /// Takes (and forgets) the unit of each value left, then destroys the value.
  void discard_received_by_nobody() noexcept {
    while (items_.try_take(1)) {
      message_type* const m = claim_value();
      release(m);
      done_with_values(1);
    }
  }

  // The receives' side.
  asyncband::detail::spin_lock head_lock_;
  message_type* head_;              // the message whose value is gone (or never was): under head_lock_
  message_type* parked_ = nullptr;  // under head_lock_
  alignas(64) asyncband::detail::atomic<message_type*> tail_;
  alignas(64) asyncband::detail::atomic<std::size_t> pending_{0};
  alignas(64) semaphore items_{asyncband::strict_fifo, 0};  // FIFO: grant_bound hands units in order
  asyncband::detail::atomic<bool> closed_{false};
};

}  // namespace asyncband::mpmc::detail
