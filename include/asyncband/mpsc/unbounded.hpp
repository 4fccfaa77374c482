// SPDX-License-Identifier: Apache-2.0
// asyncband/mpsc/unbounded.hpp
#pragma once

#include "../version.hpp"  // first: a build below C++20 stops there, with one message

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <new>
#include <stdexcept>
#include <utility>

#include "../detail/atomic.hpp"
#include "../detail/channel_core.hpp"
#include "../detail/unbounded_sender.hpp"
#include "../detail/wait_functions.hpp"
#include "../result.hpp"
#include "../stop_token.hpp"

namespace asyncband::mpsc {

namespace detail {
template <class T>
class unbounded_state;
}  // namespace detail

/// The sending half of an unbounded MPSC channel; its contract: detail::unbounded_sender.
template <class T>
using unbounded_sender = asyncband::detail::unbounded_sender<detail::unbounded_state<T>>;
template <class T>
class unbounded_receiver;

namespace detail {

/// One message: allocated and constructed by its sender, outside any lock, then linked.
template <class T>
struct node {
  asyncband::detail::atomic<node*> next{nullptr};
  alignas(T) unsigned char storage[sizeof(T)];

  T& value() noexcept { return *std::launder(reinterpret_cast<T*>(storage)); }
};

/// The shared state of an unbounded channel: an intrusive MPSC list (Vyukov's). A sender links
/// its node with one exchange on `tail_` and one store into its predecessor; the receiver
/// follows `next` from its head, which is always a node whose value is gone (the stub). Only
/// the receiver frees nodes, and only a head it has moved past, whose `next` it has read: the
/// sender that linked after it is done with it.
///
/// `pending_` counts values sent (or being sent) and not yet received. A send counts itself
/// before it checks `closed`, and close() sets `closed` before the receiver reads the count
/// (both seq_cst): either the send sees the channel closed and withdraws, or the receiver waits
/// for its value. So a send that reports ok is always received (or destroyed with the channel).
template <class T>
class unbounded_state : public channel_core<unbounded_state<T>> {
 public:
  using value_type = T;
  static constexpr bool multi_consumer = false;

  unbounded_state() noexcept : head_(&stub_), tail_(&stub_) {}
  unbounded_state(const unbounded_state&) = delete;
  unbounded_state& operator=(const unbounded_state&) = delete;
  ~unbounded_state() {
    discard_all();
    if (head_ != &stub_) delete head_;
  }

  template <class U>
  send_result<T> send(U&& value) {
    if (this->closed()) return {send_status::closed, T(std::forward<U>(value))};
    auto* n = new node<T>;
    try {
      ::new (static_cast<void*>(n->storage)) T(std::forward<U>(value));
    } catch (...) {
      delete n;
      throw;
    }
    pending_.fetch_add(1, std::memory_order_seq_cst);
    if (this->closed()) {
      // Closed meanwhile: the value comes back. The guard frees the node and withdraws the
      // count even if moving the value out throws.
      struct give_up {
        unbounded_state* self;
        node<T>* n;
        ~give_up() {
          n->value().~T();
          delete n;
          self->withdraw();
        }
      } const done{this, n};
      return {send_status::closed, std::move(n->value())};
    }
    node<T>* const prev = tail_.exchange(n, std::memory_order_acq_rel);
    prev->next.store(n, std::memory_order_release);
    this->after_publish();
    return {};
  }

  // --- the receiver's side (see channel_core) --------------------------------------------------
  [[nodiscard]] bool head_published() const noexcept { return next_of_head() != nullptr; }
  [[nodiscard]] bool head_has_value() const noexcept { return head_published(); }
  static void skip_empty() noexcept {}
  [[nodiscard]] bool value_waiting_locked() const noexcept { return head_published(); }
  /// After the receiver's fence: a send fences after linking, so one of the two sees the other.
  [[nodiscard]] bool announce_sleep() const noexcept { return head_published(); }
  static void await_outstanding_write() noexcept {}              // announce_sleep() saw it published
  static std::size_t pass_empty_locked() noexcept { return 0; }  // no empty cells here
  static void return_units(std::size_t /*unused*/) noexcept {}
  [[nodiscard]] bool finished() const noexcept {
    if (this->producers_gone()) return true;
    return this->closed() && pending_.load(std::memory_order_seq_cst) == 0;
  }
  result<T> take_head() {
    if (!head_has_value()) return wait_status::closed;  // defensive: an ok wake-up guarantees one
    return pop<result<T>>();
  }
  /// The same for a batch receive: up to `limit` values appended to `out`.
  template <class Buffer>
  result<std::size_t> take_head_many(Buffer& out, std::size_t limit) {
    if (!head_has_value()) return wait_status::closed;  // defensive, as above
    return pop_many(out, limit);
  }

  /// Precondition: head_has_value(). Moves the value once, into `Outcome` built in place, and
  /// only then frees its node: if that move throws, the value stays where it is, for the next
  /// receive.
  template <class Outcome>
  Outcome pop() {
    node<T>* const next = next_of_head();
    return asyncband::detail::take_into<Outcome>(next->value(), [this, next]() noexcept {
      next->value().~T();
      move_head_to(next);
    });
  }

  /// Precondition: head_has_value(). Moves up to `limit` of the values linked from the head on
  /// into `out` (appended, in order), freeing each node once its value is out; the count of
  /// values pending drops once for the batch. Room is made first (if that throws, nothing is
  /// taken). If a move throws, the values before it stay appended, the value stays at the head,
  /// and the exception propagates.
  template <class Buffer>
  std::size_t pop_many(Buffer& out, std::size_t limit) {
    const std::size_t n = std::min(limit, len());  // values pending: at least those linked
    asyncband::detail::make_room(out, n);
    std::size_t taken = 0;
    try {
      for (node<T>* next = next_of_head(); taken != n && next != nullptr; next = next_of_head(), ++taken) {
        out.push_back(std::move(next->value()));
        next->value().~T();
        advance_head_to(next);
      }
    } catch (...) {
      received(taken);
      throw;
    }
    received(taken);
    return taken;
  }

  try_recv_result<T> try_pop() {
    return try_receive<try_recv_result<T>>([this] { return checked_pop(); });
  }
  /// try_recv_many: ok with how many values were appended (up to `limit`), empty, or
  /// closed. Throws std::logic_error if it would take a value while a receive is pending.
  template <class Buffer>
  try_recv_result<std::size_t> try_receive_many(Buffer& out, std::size_t limit) {
    return try_receive<try_recv_result<std::size_t>>([this, &out, limit] {
      receiving_.check();
      return pop_many(out, limit);
    });
  }

  asyncband::detail::receive_in_progress& receiving() noexcept { return receiving_; }

  [[nodiscard]] std::size_t len() const noexcept { return pending_.load(std::memory_order_acquire); }

  void close() noexcept {
    this->add_ref();  // a sender woken inline below may destroy every handle
    this->mark_closed();
    this->after_possible_end();
    this->announce_closed();
    this->drop_ref();
  }

  /// The receiver goes: later sends hand their value back; values nobody received are
  /// destroyed now (one being linked right now, when the last reference goes).
  void receiver_leaves() noexcept {
    this->mark_receiver_gone();
    this->mark_closed();
    discard_all();
    this->announce_closed();  // the receiver's reference still holds the state
    this->drop_ref();
  }

 private:
  /// try_recv's take: not while a receive is pending (the value is that receive's).
  try_recv_result<T> checked_pop() {
    receiving_.check();
    return pop<try_recv_result<T>>();
  }

  /// A try form: `take()` if a value is at the head, else empty or closed.
  template <class Outcome, class Take>
  Outcome try_receive(Take take) {
    if (head_has_value()) return take();
    if (!finished()) return recv_status::empty;
    if (head_has_value()) return take();
    return recv_status::closed;
  }

  [[nodiscard]] node<T>* next_of_head() const noexcept { return head_->next.load(std::memory_order_acquire); }

  void move_head_to(node<T>* next) noexcept {
    advance_head_to(next);
    received(1);
  }
  /// The head moves to `next`, whose value is gone; the old head is freed.
  void advance_head_to(node<T>* next) noexcept {
    node<T>* const old = std::exchange(head_, next);
    if (old != &stub_) delete old;
  }
  /// `n` values left the channel (received or destroyed).
  void received(std::size_t n) noexcept {
    if (n != 0) pending_.fetch_sub(n, std::memory_order_acq_rel);
  }

  /// A send that counted itself found the channel closed: if it was the last one the closed
  /// receiver waited for, the receiver learns that nothing more can come.
  void withdraw() noexcept {
    pending_.fetch_sub(1, std::memory_order_seq_cst);
    this->after_possible_end();
  }

  void discard_all() noexcept {
    while (node<T>* next = next_of_head()) {
      next->value().~T();
      move_head_to(next);
    }
  }

  node<T> stub_;
  node<T>* head_;                                     // the receiver's
  asyncband::detail::receive_in_progress receiving_;  // the receiver's
  alignas(64) asyncband::detail::atomic<node<T>*> tail_;
  alignas(64) asyncband::detail::atomic<std::size_t> pending_{0};
};

}  // namespace detail

/// Creates an unbounded MPSC channel: sends never wait.
template <class T>
std::pair<unbounded_sender<T>, unbounded_receiver<T>> unbounded() {
  auto* state = new detail::unbounded_state<T>();
  return {unbounded_sender<T>(asyncband::detail::adopt_state_t{}, state), unbounded_receiver<T>(state)};
}

/// The receiving half of an unbounded channel. Move-only; destroying it disconnects the channel
/// and destroys the values nobody received.
///
/// Contract
/// - when_any: a receive takes its value only if it wins; a losing one leaves the value at the
///   head, for the next receive.
/// - recv() yields result<T>: a value, or wait_status::closed once every sender is gone (or the
///   channel is closed) and every accepted value has been received. Cancel-safe: a cancelled
///   or destroyed receive takes nothing.
/// - close(): later sends hand their value back; values already accepted are still received.
/// - One receive at a time: a receive (a recv() awaiter, from its creation to its destruction,
///   or a blocking receive) excludes any other. Another recv(), recv_blocking() or recv_timeout()
///   meanwhile throws std::logic_error and leaves the pending receive undisturbed; so does a
///   try_recv() that would take a value (the pending receive's), else it reports as usual.
///   The receiver must outlive its receives (their awaiters included).
/// - Every receive form (block_on(rx.recv()) included) moves the value exactly once, from the
///   channel into the result; if that move throws, the exception propagates and the value stays
///   in the channel, for the next receive.
/// - recv_many(buffer, limit) (and try_recv_many, the blocking twins, recv_many_timeout) waits as
///   recv() does, then appends up to `limit` of the values there to `buffer` in one step: one
///   wake-up. It is a receive (one at a time, as above).
///   `limit` 0 yields 0 at once. If a value's move throws, the values before it stay appended,
///   it stays at the head, and the exception propagates (detail::receiving_end::recv_many).
template <class T>
class [[nodiscard]] unbounded_receiver : public detail::receiver_handle<detail::unbounded_state<T>, T> {
  // Every receive form comes from receiver_handle.
  template <class U>
  friend std::pair<unbounded_sender<U>, unbounded_receiver<U>> unbounded();
  explicit unbounded_receiver(detail::unbounded_state<T>* s) noexcept
      : detail::receiver_handle<detail::unbounded_state<T>, T>(s) {}
};

}  // namespace asyncband::mpsc
