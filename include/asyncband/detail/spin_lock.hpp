// asyncband/detail/spin_lock.hpp: the lock that guards a primitive's wait list.
#pragma once

#include <atomic>
#include <thread>

namespace asyncband::detail {

/// Waits for `done()`, which another thread makes true within a few instructions: spins with
/// the CPU's pause hint, then yields the thread, so a preempted thread still gets to run.
template <class Done>
void spin_until(Done&& done) noexcept(noexcept(done())) {
  for (unsigned spins = 0; !done(); ++spins) {
    if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

/// A test-and-test-and-set lock for critical sections of a few dozen instructions: list surgery
/// and counters; nothing under it blocks, allocates or runs user code. Uncontended, lock is one
/// exchange and unlock one plain store (std::mutex: two read-modify-writes and two calls into
/// libc). Contended, it spins briefly with the CPU's pause hint, then yields the thread, so a
/// holder preempted on an oversubscribed machine still gets to run.
class spin_lock {
 public:
  spin_lock() noexcept = default;
  spin_lock(const spin_lock&) = delete;
  spin_lock& operator=(const spin_lock&) = delete;

  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      spin_until([this] { return !locked_.load(std::memory_order_relaxed); });
    }
  }
  [[nodiscard]] bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace asyncband::detail
