// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/atomic.hpp: the atomics, the mutex and the thread yield of the library's
// internals. std::atomic<T>, std::mutex and std::this_thread::yield normally (the aliases add
// nothing: the same types, the same object code); with ASYNCBAND_MODEL defined, the schedule
// explorer's models (asyncband/testing/), each operation a scheduling point, so that explored
// tests reach the interleavings of the library's own atomics, locks and spin loops.
#pragma once

#include "asyncband/version.hpp"  // first: a build below C++20 stops there, with one message

#include <atomic>

#if defined(ASYNCBAND_MODEL)
#include "asyncband/testing/atomic.hpp"
#include "asyncband/testing/mutex.hpp"
#include "asyncband/testing/thread.hpp"

#include <thread>
#else
#include <mutex>
#include <thread>
#endif

namespace asyncband::detail {

#if defined(ASYNCBAND_MODEL)

/// A model build: spin loops try a bounded number of times, and time does not pass.
inline constexpr bool model_build = true;

/// The library's atomic: the explorer's model atomic in a model build.
template <class T>
using atomic = asyncband::testing::atomic<T>;

/// The library's fence: a scheduling point in a model build.
inline void atomic_thread_fence(std::memory_order order) noexcept {
  asyncband::testing::atomic_thread_fence(order);
}

/// This thread's explored run has failed: the explorer tears it down, and the objects it
/// destroys may still have waiters that never ended. The destructors' checks for those are off
/// then (they would abort the process before the failure is reported).
inline bool model_run_failed() noexcept {
  auto* e = asyncband::testing::detail::current();
  return e != nullptr && e->failed();
}

/// The library's mutex for sections that may wait for other threads: the explorer's model mutex.
using os_mutex = asyncband::testing::mutex;

/// A spin loop lets others run: a scheduling point where the explorer prefers another thread.
/// Never throws: after a failed run, the thread stops here for good, as at an atomic operation.
inline void yield_thread() noexcept {
  // NOLINTNEXTLINE(bugprone-exception-escape): yield_point(false) does not throw
  if (auto* e = asyncband::testing::detail::current()) return e->yield_point(false);
  std::this_thread::yield();
}

#else

/// Not a model build.
inline constexpr bool model_build = false;

/// The library's atomic: std::atomic<T> (ASYNCBAND_MODEL makes it the explorer's model atomic).
template <class T>
using atomic = std::atomic<T>;

/// The library's fence: std::atomic_thread_fence.
inline void atomic_thread_fence(std::memory_order order) noexcept {
  std::atomic_thread_fence(order);
}

/// Not a model build: no explored run to fail.
constexpr bool model_run_failed() noexcept {
  return false;
}

/// The library's mutex for sections that may wait for other threads: std::mutex.
using os_mutex = std::mutex;

/// A spin loop lets others run: std::this_thread::yield.
inline void yield_thread() noexcept {
  std::this_thread::yield();
}

#endif

}  // namespace asyncband::detail
