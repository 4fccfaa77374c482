// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/wait_functions.hpp: the five public forms of a primitive's wait, written once.
//
// A primitive `P` with a node type `P::wait_node` (constructible from `P*`) derives from
// wait_functions<P> and befriends it, and gets:
//   co_await p.wait();                 // yields wait_node::value_type
//   co_await p.wait(stop_token);       // yields result<value_type>: ok or cancelled
//   p.wait_blocking();                 // the plain-thread twin
//   p.wait_blocking(stop_token);       // result<value_type>
//   p.wait_timeout(duration);          // result<value_type>: ok or timeout
// and names its node type for other drivers of the same protocol (P::wait_node_of<>::type).
#pragma once

#include <chrono>
#include <utility>

#include "../stop_token.hpp"
#include "wait_operation.hpp"

namespace asyncband::detail {

/// now + timeout, saturated: a timeout too large for the clock (nanoseconds::max(), hours::max())
/// waits forever rather than overflowing into the past.
template <class Rep, class Period>
std::chrono::steady_clock::time_point deadline_after(std::chrono::duration<Rep, Period> timeout) {
  using clock = std::chrono::steady_clock;
  const clock::time_point now = clock::now();
  if (timeout <= timeout.zero()) return now;
  const std::chrono::duration<long double> room = clock::time_point::max() - now;
  if (std::chrono::duration<long double>(timeout) >= room) return clock::time_point::max();
  return now + std::chrono::ceil<clock::duration>(timeout);
}

/// The five forms of one waiting operation whose node takes constructor arguments (a semaphore's
/// count, a mutex's guard maker): primitives with several operations, or operations that take
/// arguments, write each public form as a one-line call of these.
template <class Node>
struct wait_forms {
  template <class... Args>
  static auto await(Args&&... args) {
    return wait_awaiter<Node, false>({}, std::forward<Args>(args)...);
  }
  template <class... Args>
  static auto await_until_stopped(asyncband::stop_token stop, Args&&... args) {
    return wait_awaiter<Node, true>(std::move(stop), std::forward<Args>(args)...);
  }
  template <class... Args>
  static auto block(Args&&... args) {
    return block_wait<Node, false>({}, {}, std::forward<Args>(args)...);
  }
  template <class... Args>
  static auto block_until_stopped(asyncband::stop_token stop, Args&&... args) {
    return block_wait<Node, true>(std::move(stop), {}, std::forward<Args>(args)...);
  }
  template <class Rep, class Period, class... Args>
  static auto block_for(std::chrono::duration<Rep, Period> timeout, Args&&... args) {
    return block_wait<Node, true>({}, deadline_after(timeout), std::forward<Args>(args)...);
  }
};

/// The wait of a primitive `Owner` (latch, barrier, the events, wait_group, once_cell...) in
/// its five forms: co_await wait(), with a stop token or not, and the blocking twins
/// wait_blocking() and wait_timeout(). What a wait yields is the primitive's.
template <class Owner>
class wait_functions {
 public:
  // Owner::wait_node is named only inside the bodies, where Owner is complete.

  /// Names the primitive's node type for code outside the primitive that must spell it (the
  /// Boost.Asio adapter's operation traits): `typename P::template wait_node_of<>::type`. A member
  /// template so that Owner is named only once complete; a class, not an alias, so that the
  /// access check happens here, in a friend of Owner.
  template <class O = Owner>
  struct wait_node_of {
    /// Owner's node type.
    using type = typename O::wait_node;
  };

  /// Waits without a way to cancel. `co_await x.wait();`
  auto wait() noexcept { return wait_awaiter<typename Owner::wait_node, false>({}, self()); }

  /// Waits until completion or until `stop` is requested; yields result<...>.
  auto wait(asyncband::stop_token stop) noexcept {
    return wait_awaiter<typename Owner::wait_node, true>(std::move(stop), self());
  }

  /// Blocks the calling thread until completion. Yields the node's value type as it is: a
  /// reference stays a reference (a once_cell's T&), not a copy. A primitive whose wake-ups
  /// release every waiter at once lets its blocked threads sleep on one word: without a node
  /// (its `block_until_released()`), or with a node whose target is that word (its
  /// `broadcast_word()`: block_wait_broadcast).
  decltype(auto) wait_blocking() {
    if constexpr (requires(Owner& o) { o.block_until_released(); }) {
      return self()->block_until_released();
    } else if constexpr (requires(Owner& o) { o.broadcast_word(); }) {
      return block_wait_broadcast<typename Owner::wait_node>(self()->broadcast_word(), self());
    } else {
      return block_wait<typename Owner::wait_node, false>({}, {}, self());
    }
  }

  /// Blocks the calling thread until completion or until `stop` is requested.
  auto wait_blocking(asyncband::stop_token stop) {
    return block_wait<typename Owner::wait_node, true>(std::move(stop), {}, self());
  }

  /// Blocks the calling thread until completion or until `timeout` has passed.
  template <class Rep, class Period>
  auto wait_timeout(std::chrono::duration<Rep, Period> timeout) {
    return block_wait<typename Owner::wait_node, true>({}, deadline_after(timeout), self());
  }

 protected:
  wait_functions() = default;

 private:
  Owner* self() noexcept { return static_cast<Owner*>(this); }
};

}  // namespace asyncband::detail
