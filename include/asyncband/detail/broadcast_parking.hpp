// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/broadcast_parking.hpp: plain threads parked on one word, for state changes
// that always release every one of them at once.
#pragma once

#include <atomic>
#include <cstdint>

#include "../scheduler.hpp"
#include "atomic.hpp"

namespace asyncband::detail {

/// The blocking twin of a wait that a state change always ends for everybody (a barrier's
/// generation, a phaser's advance, a latch reaching zero, an event set): the threads sleep on
/// one futex word rather than on one parker each. Two ways to use it: a blocked thread queues
/// its node with resume_target::broadcast (any primitive: the waker's wake_batch moves the word
/// once for all the nodes it resolved), or it queues nothing and sleeps until a state it can
/// read lock-free says it is released (a barrier's generation, a phaser's phase), and the
/// waker's batch moves the word all the same (wake_batch::release_word). The change
/// then costs the waker one notify (at most one system call) instead of one wake-up per
/// sleeper, and the sleepers are released together, in parallel, instead of one after another
/// while the waker is preempted by each one it wakes. Waits that can be cancelled or time out
/// still queue a node with its own parker: only those need to be told apart.
///
/// The eventcount pattern: a sleeper reads key(), then checks the state it waits for, then
/// sleep(key). The changer changes the state, then changed(), then notify() (outside any lock).
/// A change made after the key was read has moved the word, so sleep() returns at once; one made
/// before is seen by the check. The word wraps; only its change matters.
class broadcast_parking {
 public:
  [[nodiscard]] std::uint32_t key() const noexcept { return epoch_.load(std::memory_order_acquire); }

  /// Returns once the word differs from `key` (after a short spin, as std::atomic::wait does).
  void sleep(std::uint32_t key) const noexcept {
    if (epoch_.load(std::memory_order_acquire) != key) return;
    before_blocking();
    epoch_.wait(key, std::memory_order_acquire);
  }

  /// The sleeper's side of the pattern: returns once `released()` holds, sleeping on the word
  /// while it does not. `released()` reads the state lock-free; it is checked after each read
  /// of the key, and once more right after each wake-up, before the word is read again (a thread
  /// released through its node, block_wait_broadcast, has no more business with the primitive,
  /// which may be gone by then). `before_sleep()` runs before each sleep (the callers' test
  /// point).
  template <class Released, class BeforeSleep>
  void sleep_until(Released&& released, BeforeSleep&& before_sleep) const {
    for (;;) {
      const std::uint32_t sleep_key = key();
      if (released()) return;
      before_sleep();
      sleep(sleep_key);
      if (released()) return;
    }
  }

  /// After the state change, by whoever made it (after the change, which is a release operation
  /// or made under the primitive's lock).
  void changed() noexcept { epoch_.fetch_add(1, std::memory_order_release); }

  /// For a primitive whose threads sleep without a node and see under its lock that they must
  /// wait (a barrier's arrival, a phaser's participant or observer): the thread counts itself
  /// there, and uncounts itself once released.
  /// A change made under the lock that finds nobody counted needs no release at all (no pin,
  /// no move of the word, no notify: what an uncontended barrier generation would otherwise
  /// pay); a stale count (a released thread that has not uncounted yet) costs a needless
  /// release only (the pin, the move, the notify).
  void count_sleeper() noexcept { sleepers_.fetch_add(1, std::memory_order_relaxed); }
  void uncount_sleeper() noexcept { sleepers_.fetch_sub(1, std::memory_order_relaxed); }
  /// Under the lock the sleepers count themselves under.
  [[nodiscard]] bool has_counted_sleepers() const noexcept {
    return sleepers_.load(std::memory_order_relaxed) != 0;
  }

  /// After changed(), outside the lock: wakes every sleeper. Costs a load when nobody sleeps.
  void notify() noexcept { epoch_.notify_all(); }

 private:
  asyncband::detail::atomic<std::uint32_t> epoch_{0};
  asyncband::detail::atomic<std::uint32_t> sleepers_{0};  // see count_sleeper()
};

}  // namespace asyncband::detail
