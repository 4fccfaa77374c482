// SPDX-License-Identifier: Apache-2.0
// asyncband/wait_group.hpp
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <atomic>
#include <cassert>
#include <cstddef>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "detail/atomic.hpp"
#include "detail/debug_access.hpp"
#include "detail/wait_functions.hpp"
#include "detail/wait_queue.hpp"

namespace asyncband {

namespace detail {
struct wait_group_test_access;  // defined by the test suite only: reaches max() without 2^63 handles
}  // namespace detail

/// A group of members whose wait completes when no member is left (Go's WaitGroup, in the
/// handle form of Asyncband's and crossbeam's): each wait_group object is a handle, copying a
/// member adds a member, destroying a member removes one.
///
///   asyncband::wait_group wg;                 // a new group, this handle its one member
///   for (...) spawn(work(wg));                // each copy is a member until it is destroyed
///   co_await wg.wait();                       // leaves the group, waits until it is empty
///
/// Contract
/// - wait() first gives up this handle's membership (if it still has one), then waits until
///   the member count is zero. Every wait form leaves at the call, before any suspension, and
///   a cancelled wait does not rejoin.
/// - Synchronization: everything a member did before it was destroyed (or left) happens-before
///   the completion of a wait that observes the count at zero.
/// - Waking: the member that leaves last wakes every waiter, after releasing the group's lock.
///   A copy made after the count reached zero starts a new round for later waits: the count
///   moves to and from zero only under the group's lock, so a wait of the new round is never
///   released by the previous round's last departure.
/// - Errors: a copy that would exceed max() members throws std::overflow_error and changes
///   nothing.
/// - when_any: the wait leaves the group when it starts, even if it then loses.
/// - Cancellation: wait(stop_token) commits to cancelled if the stop request is observed before
///   the last member's departure claims the waiter.
/// - A moved-from handle has no group: it is not a member, and waiting on it is undefined.
/// - Handles may be used from any thread; one handle is not to be used by two threads at once.
///   The shared state lives as long as any handle (members and former members).
class wait_group : public detail::wait_functions<wait_group> {
  class wait_node;
  struct state;
  friend class detail::wait_functions<wait_group>;
  friend struct detail::wait_group_test_access;
  friend struct asyncband::detail::debug_access;

 public:
  /// The most members a group has at once (a copy beyond throws std::overflow_error).
  [[nodiscard]] static constexpr std::size_t max() noexcept {
    return std::numeric_limits<std::size_t>::max() / 2;
  }

  /// A new group with this handle as its only member.
  wait_group() : state_(std::make_shared<state>()) {}

  /// Adds a member to the same group.
  wait_group(const wait_group& other) : state_(other.state_) { join(); }

  /// Transfers `other`'s membership (and group) to the new handle.
  wait_group(wait_group&& other) noexcept
      : state_(std::move(other.state_)), member_(std::exchange(other.member_, false)) {}

  /// Leaves this handle's group (as destruction does), then joins `other`'s as a new member.
  wait_group& operator=(const wait_group& other) {
    if (this != &other) *this = wait_group(other);
    return *this;
  }
  /// Leaves this handle's group (as destruction does), then takes over `other`'s membership.
  wait_group& operator=(wait_group&& other) noexcept {
    if (this != &other) {
      // The old membership leaves last, when `old` goes: its departure may resume a waiter
      // inline that destroys this handle, so nothing may write the handle after it.
      wait_group old(std::move(*this));
      state_ = std::move(other.state_);
      member_ = std::exchange(other.member_, false);
    }
    return *this;
  }

  ~wait_group() { leave(); }

  /// Gives up this handle's membership; does nothing if it has none.
  void leave() noexcept { (void)depart(); }

  /// True while this handle counts as a member.
  [[nodiscard]] bool is_member() const noexcept { return member_; }

  /// The number of members now (a snapshot).
  [[nodiscard]] std::size_t members() const noexcept {
    return state_ ? state_->members.load(std::memory_order_acquire) : 0;
  }

  // The wait forms (inherited) leave first, when the wait is made; see the class contract.

 private:
  struct state {
    state() = default;
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    /// Debug builds assert that no wait is pending (the last handle is gone).
    ~state() { assert(queue.no_waiters_left() && "asyncband::wait_group destroyed with waiters"); }

    asyncband::detail::atomic<std::size_t> members{1};
    detail::wait_queue queue;
  };

  class wait_node : public detail::waiter {
   public:
    using value_type = void;
    static constexpr bool transferable = false;
    /// Leaves the group first. If that departure was the last, the wait is complete without
    /// looking at the group again: the departure may have resumed a waiter inline that destroyed
    /// this handle (and with it, perhaps, the group).
    explicit wait_node(wait_group* group) noexcept : state_(group->state_.get()) {
      assert(state_ != nullptr && "asyncband::wait_group: wait on a moved-from handle");
      if (group->depart()) state_ = nullptr;
    }

    bool try_ready() noexcept { return state_ == nullptr || empty(); }
    bool enqueue() noexcept {
      return state_->queue.complete_or_enqueue(*this, [this] { return empty(); });
    }
    /// A wait completed by its own departure (state_ null) is never queued: nothing to cancel.
    bool cancel(wait_status why) noexcept { return state_ != nullptr && state_->queue.cancel(*this, why); }
    void take() noexcept {}

   private:
    bool empty() const noexcept { return state_->members.load(std::memory_order_acquire) == 0; }
    state* state_;
  };

  /// Gives up this handle's membership; true if it was the last member's (the count reached
  /// zero and every waiter was woken). After a true return this handle may be gone: a waiter
  /// resumed inline may have destroyed it, so callers touch nothing of it afterwards.
  bool depart() noexcept {
    if (!member_) return false;
    member_ = false;
    auto& members = state_->members;
    std::size_t current = members.load(std::memory_order_relaxed);
    while (current > 1) {  // not the last member: lock-free
      if (members.compare_exchange_weak(current, current - 1, std::memory_order_acq_rel)) return false;
    }
    // Possibly the last: the move to zero and the wake-up happen under one hold of the lock, so
    // a new round started meanwhile (a copy, then a wait) is never released by this round.
    return state_->queue.wake([&members](detail::wait_list& waiters, detail::wake_batch& batch) {
      if (members.fetch_sub(1, std::memory_order_acq_rel) != 1) return false;
      waiters.claim_all(batch);
      return true;
    });
  }

  void join() {
    if (!state_) {  // a copy of a moved-from handle is empty too
      member_ = false;
      return;
    }
    auto& members = state_->members;
    std::size_t current = members.load(std::memory_order_relaxed);
    do {
      if (current >= max()) throw std::overflow_error("asyncband::wait_group: too many members");
      if (current == 0) {  // starting a new round: leave from and to zero only under the lock
        const std::lock_guard lock(state_->queue.mutex());
        members.fetch_add(1, std::memory_order_relaxed);
        break;
      }
    } while (!members.compare_exchange_weak(current, current + 1, std::memory_order_relaxed));
    member_ = true;
  }

  std::shared_ptr<state> state_;
  bool member_ = true;
};

}  // namespace asyncband
