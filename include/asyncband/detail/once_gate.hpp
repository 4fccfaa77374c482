// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/once_gate.hpp: the state machine of every "one runs, the others wait"
// primitive (once, once_cell, once_map, singleflight).
//
// A gate is idle, running (one caller holds the run) or completed. Two kinds of waiter queue
// on it, in one FIFO: runners (a call_once, a get_or_init: they will run their own initialiser
// if the run comes to them) and observers (a wait(): completion only). A run that succeeds
// completes the gate and wakes everybody. A run that fails (its initialiser threw or yielded an
// error, or its caller was cancelled or destroyed) hands the run to the oldest queued runner,
// which is resolved with the grant "run"; observers stay queued. With no runner queued, the gate
// goes back to idle. So there is never more than one run at a time, and never none while a
// runner waits. The grant is transferable: a runner cancelled after it was handed the run, or
// destroyed before it started, passes it on in turn (wait_operation.hpp, give_back).
#pragma once

#include <atomic>
#include <cassert>
#include <cstdint>
#include <utility>

#include "atomic.hpp"
#include "debug_access.hpp"
#include "wait_queue.hpp"

namespace asyncband::detail {

/// What a completed wait on a gate was granted.
enum class gate_turn : unsigned char {
  completed,  ///< the gate completed: the value (if any) is there
  run,        ///< this caller holds the run: it runs its initialiser now
};

class once_gate {
 public:
  once_gate() = default;
  /// A gate that starts completed (a once_cell constructed with a value).
  explicit once_gate(bool completed) noexcept : state_(completed ? done : idle) {}
  once_gate(const once_gate&) = delete;
  once_gate& operator=(const once_gate&) = delete;
  ~once_gate() = default;

  /// One acquire load: true once a run succeeded (everything the run did is visible).
  [[nodiscard]] bool is_completed() const noexcept { return state_.load(std::memory_order_acquire) == done; }
  /// A snapshot: true while somebody holds the run.
  [[nodiscard]] bool is_running() const noexcept { return state_.load(std::memory_order_acquire) == running; }

  /// Takes the run without waiting, if nobody holds it and the gate has not completed (a
  /// once_cell's set()). Lock-free: every move to running is this CAS, so it never races a
  /// runner being admitted under the lock.
  [[nodiscard]] bool try_begin() noexcept {
    std::uint8_t expected = idle;
    return state_.compare_exchange_strong(expected, running, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  /// The run succeeded: completes the gate and wakes every waiter. Called as the run's last
  /// access to the gate (a waiter resumed inline may destroy it).
  void complete() noexcept {
    queue_.wake([this](wait_list& waiters, wake_batch& batch) {
      state_.store(done, std::memory_order_release);
      for (waiter* w = waiters.front(); w != nullptr; w = w->next)
        static_cast<node*>(w)->turn = gate_turn::completed;
      waiters.claim_all(batch);
    });
  }

  /// The run failed: hands it to the oldest queued runner, or makes the gate idle again.
  void fail() noexcept {
    queue_.wake([this](wait_list& waiters, wake_batch& batch) {
      for (waiter* w = waiters.front(); w != nullptr; w = w->next) {
        auto* const n = static_cast<node*>(w);
        if (!n->may_run) continue;
        waiters.remove(*n);
        n->status = wait_status::ok;
        n->turn = gate_turn::run;
        batch.add(*n);
        return;
      }
      state_.store(idle, std::memory_order_release);
    });
  }

  /// For an owner with exclusive access (no call in progress): back to idle, as never run.
  void reset_exclusive() noexcept { state_.store(idle, std::memory_order_relaxed); }

  /// Debug check for an owner's destructor (see wait_queue::no_waiters_left).
  [[nodiscard]] bool no_waiters_left() noexcept { return queue_.no_waiters_left(); }

  /// One waiting call. A runner (`may_run`) yields the turn it was granted; an observer only
  /// waits for completion. Transferable: a run granted to a waiter that will not use it passes on.
  class node : public waiter {
   public:
    using value_type = gate_turn;
    static constexpr bool transferable = true;

    node(once_gate* gate, bool runner) noexcept : may_run(runner), gate_(gate) {}

    bool try_ready() noexcept {
      if (!gate_->is_completed()) return false;
      turn = gate_turn::completed;
      return true;
    }
    bool enqueue() noexcept {
      return gate_->queue_.complete_or_enqueue(*this, [this] { return gate_->admit(*this); });
    }
    bool cancel(wait_status why) noexcept { return gate_->queue_.cancel(*this, why); }
    gate_turn take() const noexcept { return turn; }
    /// Passes on a run it was granted. False if it was granted none: a completion is a broadcast,
    /// and a stop requested after it claimed the waiter does not turn it into cancelled.
    bool give_back() noexcept {
      if (turn != gate_turn::run) return false;
      gate_->fail();
      return true;
    }

    const bool may_run;
    gate_turn turn = gate_turn::completed;  // written by whoever completes the wait

   private:
    once_gate* gate_;
  };

  /// A runner constructible from the gate alone: what a bridge's wait on the gate queues (the
  /// Boost.Asio forms of call_once and friends: asyncband/asio.hpp).
  class runner_node : public node {
   public:
    explicit runner_node(once_gate* gate) noexcept : node(gate, true) {}
  };
  /// Names runner_node for the bridges (the convention of detail::wait_functions).
  template <class = void>
  struct wait_node_of {
    using type = runner_node;
  };

  /// A node for wait(): completion only, nothing granted, nothing to pass on.
  class observer_node : public node {
   public:
    using value_type = void;
    static constexpr bool transferable = false;
    explicit observer_node(once_gate* gate) noexcept : node(gate, false) {}
    static void take() noexcept {}
  };

 private:
  static constexpr std::uint8_t idle = 0;
  static constexpr std::uint8_t running = 1;
  static constexpr std::uint8_t done = 2;

  /// Under the lock: completes `n` at once if the gate completed, or (a runner) if the run is free.
  bool admit(node& n) noexcept {
    if (is_completed()) {
      n.turn = gate_turn::completed;
      return true;
    }
    if (n.may_run && try_begin()) {
      n.turn = gate_turn::run;
      return true;
    }
    return false;
  }

  friend struct debug_access;

  asyncband::detail::atomic<std::uint8_t> state_{idle};
  // mutable: debug.hpp counts the waiters of a const owner
  mutable wait_queue queue_;
};

/// Ownership of a gate's run: completes it (success) or, if still held when destroyed or told
/// so, fails it (the run passes on). Move-only.
class run_grant {
 public:
  run_grant() noexcept = default;
  explicit run_grant(once_gate& gate) noexcept : gate_(&gate) {}
  run_grant(run_grant&& other) noexcept : gate_(std::exchange(other.gate_, nullptr)) {}
  run_grant& operator=(run_grant&& other) noexcept {
    if (this != &other) {
      fail();
      gate_ = std::exchange(other.gate_, nullptr);
    }
    return *this;
  }
  run_grant(const run_grant&) = delete;
  run_grant& operator=(const run_grant&) = delete;
  ~run_grant() { fail(); }

  explicit operator bool() const noexcept { return gate_ != nullptr; }

  /// Success: completes the gate (its last access to it).
  void complete() noexcept {
    assert(gate_ != nullptr);
    std::exchange(gate_, nullptr)->complete();
  }
  /// Failure (no effect if not held): the run passes on.
  void fail() noexcept {
    if (gate_ != nullptr) std::exchange(gate_, nullptr)->fail();
  }

 private:
  once_gate* gate_ = nullptr;
};

}  // namespace asyncband::detail
