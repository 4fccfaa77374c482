// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/atomic.hpp: the atomic type of the library's internals. std::atomic<T>
// normally (the alias adds nothing: the same type, the same object code); with ASYNCBAND_MODEL
// defined, asyncband::testing::atomic<T>, whose every operation is a scheduling point of the
// schedule explorer (asyncband/testing/explore.hpp), so that explored tests reach the
// interleavings of the library's own atomics.
#pragma once

#include "asyncband/version.hpp"  // first: a build below C++20 stops there, with one message

#include <atomic>

#if defined(ASYNCBAND_MODEL)
#include "asyncband/testing/atomic.hpp"
#endif

namespace asyncband::detail {

#if defined(ASYNCBAND_MODEL)

/// The library's atomic: the explorer's model atomic in a model build.
template <class T>
using atomic = asyncband::testing::atomic<T>;

/// The library's fence: a scheduling point in a model build.
inline void atomic_thread_fence(std::memory_order order) noexcept {
  asyncband::testing::atomic_thread_fence(order);
}

#else

/// The library's atomic: std::atomic<T> (ASYNCBAND_MODEL makes it the explorer's model atomic).
template <class T>
using atomic = std::atomic<T>;

/// The library's fence: std::atomic_thread_fence.
inline void atomic_thread_fence(std::memory_order order) noexcept {
  std::atomic_thread_fence(order);
}

#endif

}  // namespace asyncband::detail
