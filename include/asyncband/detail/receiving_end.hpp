// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/receiving_end.hpp: what every channel's receiver is: a move-only handle on
// the shared state, with every receive form of one wait node.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "../result.hpp"
#include "../stop_token.hpp"
#include "debug_access.hpp"
#include "wait_functions.hpp"

namespace asyncband::detail {

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
  std::atomic<bool> busy_{false};
};

/// The receiving half of a channel (oneshot, MPSC). `Wait` is the channel's receive node, built
/// from a `State*`; destroying or overwriting the handle calls `State::receiver_leaves()` once.
/// A moved-from handle throws std::logic_error from every receive.
template <class State, class Wait>
class receiving_end {
  using recv_forms = wait_forms<Wait>;
  using T = typename Wait::value_type;

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
