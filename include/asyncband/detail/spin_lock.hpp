// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/spin_lock.hpp: spinning (a brief retry before a thread parks, a wait of a few
// instructions) and the lock that guards a primitive's wait list.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "atomic.hpp"

namespace asyncband::detail {

/// The CPU's hint that this thread spins (lets the sibling hyperthread run, saves power). In a
/// model build, a yield to the explorer: a spin loop is a wait for another thread.
inline void cpu_relax() noexcept {
#if defined(ASYNCBAND_MODEL)
  yield_thread();
#elif defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// `n` pause hints.
inline void cpu_relax_times(unsigned n) noexcept {
  for (unsigned i = 0; i != n; ++i) cpu_relax();
}

/// About what parking a thread and waking it again costs (two futex calls and a context switch
/// on Linux; more on a virtual machine): how long spin_briefly tries before a thread parks.
/// Measured on the thread benchmarks (2 cores): 2-4 us halves the 1x1 channel times and is
/// neutral from 4 threads per side up; 10 us starts to cost the oversubscribed cases.
inline constexpr std::chrono::nanoseconds parking_cost{4000};

/// How spin_briefly() waits between its tries.
enum class spin_backoff : std::uint8_t {
  /// The CPU's pause hint, doubling up to 16 pauses: for a wait on another thread that is a few
  /// instructions from done (a channel's other side in its loop).
  pause,
  /// Two short pause rounds (1 pause, then 2), then a yield of the thread before each try: for
  /// a lock whose holder unlocks and locks again at once, and for a wait on a thread that needs
  /// the core (a sender's for capacity, a receive on a small channel: see
  /// yielding_receive_capacity). The yield, a system call of 0.2-1 us,
  /// keeps the spinner off the lock's cache line while the holder runs a stretch of critical
  /// sections on its own core; a spinner that takes the lock at each unlock moves the line on
  /// every acquisition. Measured on `mutex/contended_threads_K` (2 cores): 2.3-2.6x the pause
  /// spin's throughput at K = 2, 1.4-1.8x at 4, 1.15-1.35x at 8, ahead of std::mutex at each.
  yield,
};

/// Retries `ready()` for about the time that parking a thread and waking it again takes (a few
/// microseconds), backing off between tries as `Backoff` says; true as soon as it holds.
/// The clock is read once per eight tries: steady_clock::now() costs about as much as a pause
/// try. The yield spin keeps that cadence, so it may overrun the budget by up to eight yields
/// (a few microseconds; a yield that takes a whole time slice gave the core to a runnable
/// thread, as parking would): reading the clock before every yielding try parked sooner and
/// measured 0.93-1.13x std::mutex's time at K = 2, against 0.87-0.89x (2026-12-04).
/// In a model build (time does not pass there), two tries, without yielding: the operations in
/// `ready()` are scheduling points already, and a yield would make the explorer run the other
/// threads first, so that the spin nearly always succeeds and the park is seldom explored.
template <spin_backoff Backoff = spin_backoff::pause, class Ready>
bool spin_briefly(Ready&& ready) noexcept(noexcept(ready())) {
  if constexpr (model_build) {
    for (int attempt = 0; attempt != 2; ++attempt) {
      if (ready()) return true;
    }
    return false;
  }
  using clock = std::chrono::steady_clock;
  const clock::time_point give_up = clock::now() + parking_cost;
  for (unsigned round = 0;; ++round) {
    if constexpr (Backoff == spin_backoff::yield) {
      if (round >= 2) {
        yield_thread();
      } else {
        cpu_relax_times(1U << round);
      }
    } else {
      cpu_relax_times(1U << std::min(round, 4U));
    }
    if (ready()) return true;
    if ((round & 7U) == 7U && clock::now() >= give_up) return false;
  }
}

/// spin_briefly() with the yield backoff if `yielding`, else with the pause hint: for a caller
/// whose choice is known only at run time (the wait's node decides, see spin_before_parking).
template <class Ready>
bool spin_briefly(bool yielding, Ready&& ready) noexcept(noexcept(ready())) {
  return yielding ? spin_briefly<spin_backoff::yield>(ready) : spin_briefly<spin_backoff::pause>(ready);
}

/// Waits for `done()`, which another thread makes true within a few instructions: spins with
/// the CPU's pause hint, then yields the thread, so a preempted thread still gets to run.
template <class Done>
void spin_until(Done&& done) noexcept(noexcept(done())) {
  for (unsigned spins = 0; !done(); ++spins) {
    if (spins < 64 && !model_build) {
      cpu_relax();
    } else {
      yield_thread();
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
  asyncband::detail::atomic<bool> locked_{false};
};

}  // namespace asyncband::detail
