// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/receiving_end.hpp: what every channel's receiver is: a move-only handle on
// the shared state, with every receive form of one wait node.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "../result.hpp"
#include "../stop_token.hpp"
#include "atomic.hpp"
#include "debug_access.hpp"
#include "wait_functions.hpp"

namespace asyncband::detail {

/// The largest capacity of a bounded channel whose blocking receives back off by yielding
/// (spin_backoff::yield). A receiver that yields gives its core to a runnable sender, which
/// runs until it blocks on capacity or its time slice ends: on a small channel that is soon,
/// and the receiver comes back to a batch of values; on a large one the sender keeps the core
/// for a whole slice while the receiver does not drain. Measured on the thread benchmarks
/// (2 cores, 2026-12-04, yield against pause, docs/design.md): MPSC capacity 64 with 4 and 8
/// producers 1.6-2.3x faster, 256 1.8-2.0x, 1024 the same within the noise, 4096 1.1-1.3x
/// slower with 4 and more threads. Senders (capacity waits) yield at every capacity: with the
/// senders alone yielding, no channel case got slower.
inline constexpr std::size_t yielding_receive_capacity = 1024;

/// Whether a blocking receive on a channel's shared `state` backs off by yielding: a bounded
/// channel of at most yielding_receive_capacity; never an unbounded one, whose senders never
/// block. A state is bounded if it has logical_capacity() (both bounded states have it, public
/// and const; neither unbounded state does: the tests check each).
template <class State>
bool receive_spins_by_yielding(const State& state) noexcept {
  if constexpr (requires { state.logical_capacity(); }) {
    return state.logical_capacity() <= yielding_receive_capacity;
  } else {
    return false;
  }
}

/// Moves the value at `source` (a channel's cell) straight into the outcome of a receive
/// (result<T> or try_recv_result<T>), constructed in place and returned as a prvalue, so that
/// the caller's chain of returns elides every further move. Only once that one move succeeded
/// does `release()` run (destroying the moved-from value and freeing the cell): if the move
/// throws, the value stays where it is, for the next receive.
template <class Outcome, class T, class Release>
Outcome take_into(T& source, Release release) {
  // Runs after the return value is constructed; skipped if that construction threw.
  struct release_on_success {
    Release& release;
    int unwinding;
    ~release_on_success() {
      if (std::is_nothrow_move_constructible_v<T> || std::uncaught_exceptions() == unwinding) release();
    }
  } const guard{release, std::is_nothrow_move_constructible_v<T> ? 0 : std::uncaught_exceptions()};
  return Outcome(std::in_place, std::move(source));
}

/// Before a batch receive takes anything: room in `buffer` for `n` more values, so that each
/// append only move-constructs its value (a reallocation in the middle of a batch could throw
/// after values left the channel, or move the values already appended with a throwing move).
/// Grows geometrically, as push_back does: a caller appending batch after batch without clearing
/// pays amortized O(1) per value. If this throws, nothing has left the channel.
template <class Vector>
void make_room(Vector& buffer, std::size_t n) {
  const std::size_t size = buffer.size();
  if (buffer.capacity() - size >= n) return;
  const std::size_t doubled =
      buffer.capacity() > buffer.max_size() / 2 ? buffer.max_size() : 2 * buffer.capacity();
  buffer.reserve(std::max(size + n, doubled));
}

/// The receiver's word saying that one of its receives is in progress: a receive node holds it
/// from its construction (in recv(), recv_blocking()...) to its destruction. Another receive
/// meanwhile (a second recv from another coroutine or thread, or a try_recv that would take a
/// value) is a misuse: one receive at a time. Left alone it would take the value the pending
/// receive was woken for, or be woken with it too, or sleep for good; so it throws
/// std::logic_error before touching the channel, and the pending receive goes on undisturbed. Relaxed: a
/// receiver passed from one thread to another is passed with a happens-before; concurrent misuse from two
/// threads is caught as soon as the hardware shows it, without a locked instruction per receive.
class receive_in_progress {
 public:
  /// A receive starts. Throws std::logic_error if one is pending.
  void begin() {
    check();
    busy_.store(true, std::memory_order_relaxed);
  }
  /// The receive (its node) is over.
  void end() noexcept { busy_.store(false, std::memory_order_relaxed); }
  /// A receive that does not wait (try_recv), about to take a value: throws std::logic_error if
  /// a receive is pending.
  void check() const {
    if (busy_.load(std::memory_order_relaxed)) [[unlikely]]
      throw std::logic_error(
          "asyncband receiver: another receive while one is pending (one receive at a time)");
  }

 private:
  asyncband::detail::atomic<bool> busy_{false};
};

/// The `ManyWait` of a receiving end without batch receives (the oneshot's): never defined.
template <class Buffer>
class no_batch_receive;

/// The receiving half of a channel (oneshot, MPSC, MPMC). `Wait` is the channel's receive node,
/// built from a `State*`; `ManyWait<Buffer>` its batch receive node, built from a `State*`, a
/// `Buffer&` and a limit, whose take() appends to the buffer and yields how many it appended
/// (`State::try_receive_many(buffer, limit)` is the try form). Destroying or overwriting the
/// handle calls `State::receiver_leaves()` once. A moved-from handle throws std::logic_error
/// from every receive.
template <class State, class Wait, template <class> class ManyWait = no_batch_receive>
class receiving_end {
  using recv_forms = wait_forms<Wait>;
  using T = typename Wait::value_type;
  template <class Buffer>
  using many_forms = wait_forms<ManyWait<Buffer>>;
  static constexpr bool batches = !std::is_same_v<ManyWait<std::vector<T>>, no_batch_receive<std::vector<T>>>;

 public:
  /// Takes over `other`'s channel; `other` is left moved-from (its receives throw).
  receiving_end(receiving_end&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  /// Leaves the channel this handle received from (as destruction does), then takes over
  /// `other`'s.
  receiving_end& operator=(receiving_end&& other) noexcept {
    if (this != &other) {
      // The old receiver leaves last: leaving may wake senders inline, and one of them may
      // destroy this handle at once (last one out).
      State* const leaving = std::exchange(state_, std::exchange(other.state_, nullptr));
      if (leaving != nullptr) leaving->receiver_leaves();
    }
    return *this;
  }
  receiving_end(const receiving_end&) = delete;
  receiving_end& operator=(const receiving_end&) = delete;

  /// `co_await rx.recv()` yields result<T>: a value, or closed.
  [[nodiscard]] auto recv() { return recv_forms::await(live()); }
  /// As above; also ends cancelled when `stop` is requested first.
  [[nodiscard]] auto recv(asyncband::stop_token stop) {
    return recv_forms::await_until_stopped(std::move(stop), live());
  }
  /// recv() for a plain thread: blocks until a value arrives, or closed.
  result<T> recv_blocking() { return recv_forms::block(live()); }
  /// As recv_blocking(), or until `stop` is requested (then cancelled).
  result<T> recv_blocking(asyncband::stop_token stop) {
    return recv_forms::block_until_stopped(std::move(stop), live());
  }
  /// As recv_blocking(), for at most `timeout` (then timeout).
  template <class Rep, class Period>
  result<T> recv_timeout(std::chrono::duration<Rep, Period> timeout) {
    return recv_forms::block_for(timeout, live());
  }

  /// `co_await rx.recv_many(buffer, limit)` yields result<std::size_t>: waits as recv() does
  /// for one value, then appends to `buffer` up to `limit` values that are in the channel now
  /// (at least one), in order, and yields how many; or closed (nothing appended). One wake-up
  /// and, on a bounded channel, one return of capacity for the whole batch. `limit` 0 yields 0
  /// at once without looking at the channel (tokio's rule). The buffer is grown (geometrically)
  /// before any value is taken, so only the values' own moves can throw then: the values
  /// appended before a throwing move stay appended (their capacity comes back), the value
  /// whose move threw stays in the channel as after a throwing recv(), and the exception
  /// propagates. `buffer` must outlive the receive.
  template <class Alloc>
    requires batches
  [[nodiscard]] auto recv_many(std::vector<T, Alloc>& buffer, std::size_t limit) {
    return many_forms<std::vector<T, Alloc>>::await(live(), buffer, limit);
  }
  /// As above; also ends cancelled (nothing appended) when `stop` is requested first.
  template <class Alloc>
    requires batches
  [[nodiscard]] auto recv_many(std::vector<T, Alloc>& buffer, std::size_t limit, asyncband::stop_token stop) {
    return many_forms<std::vector<T, Alloc>>::await_until_stopped(std::move(stop), live(), buffer, limit);
  }
  /// recv_many() for a plain thread: blocks until a value arrives (then takes the batch), or
  /// closed.
  template <class Alloc>
    requires batches
  result<std::size_t> recv_many_blocking(std::vector<T, Alloc>& buffer, std::size_t limit) {
    return many_forms<std::vector<T, Alloc>>::block(live(), buffer, limit);
  }
  /// As recv_many_blocking(buffer, limit), or until `stop` is requested (then cancelled).
  template <class Alloc>
    requires batches
  result<std::size_t> recv_many_blocking(std::vector<T, Alloc>& buffer, std::size_t limit,
                                         asyncband::stop_token stop) {
    return many_forms<std::vector<T, Alloc>>::block_until_stopped(std::move(stop), live(), buffer, limit);
  }
  /// As recv_many_blocking(buffer, limit), for at most `timeout` (then timeout).
  template <class Alloc, class Rep, class Period>
    requires batches
  result<std::size_t> recv_many_timeout(std::vector<T, Alloc>& buffer, std::size_t limit,
                                        std::chrono::duration<Rep, Period> timeout) {
    return many_forms<std::vector<T, Alloc>>::block_for(timeout, live(), buffer, limit);
  }
  /// recv_many without waiting: appends up to `limit` values that are there now and yields ok
  /// with how many (at least one), or empty, or closed (nothing appended). `limit` 0:
  /// ok with 0 at once. Throws as recv_many does, and wherever try_recv() throws.
  template <class Alloc>
    requires batches
  try_recv_result<std::size_t> try_recv_many(std::vector<T, Alloc>& buffer, std::size_t limit) {
    State* const s = live();
    if (limit == 0) return std::size_t{0};
    return s->try_receive_many(buffer, limit);
  }

 protected:
  friend struct debug_access;
  explicit receiving_end(State* s) noexcept : state_(s) {}
  ~receiving_end() { reset(); }

  State* live() const {
    if (state_ == nullptr) throw std::logic_error("asyncband receiver: moved from");
    return state_;
  }
  State* state_;

 private:
  void reset() noexcept {
    if (state_ != nullptr) std::exchange(state_, nullptr)->receiver_leaves();
  }
};

}  // namespace asyncband::detail
