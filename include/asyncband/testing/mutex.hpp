// SPDX-License-Identifier: Apache-2.0
// asyncband/testing/mutex.hpp: testing::mutex, a std::mutex whose lock blocks a model thread of
// an explored run (not runnable until the mutex is unlocked).
/// \file
/// asyncband::testing::mutex.
#pragma once

#include "asyncband/version.hpp"  // first: a build below C++20 stops there, with one message

#include <cstddef>
#include <mutex>

#include "asyncband/testing/detail/execution.hpp"

namespace asyncband::testing {

// NOLINTBEGIN(bugprone-exception-escape): the noexcept operations here reach
// execution::point(), which throws the run's abort exception only at points that may throw (its
// last argument); clang-tidy cannot see that flag. A throw there would be a bug, and terminate.

/// A mutex for explored test bodies: std::mutex's interface (Lockable: std::lock_guard,
/// std::unique_lock and std::scoped_lock take it), with scheduling points.
///
/// Contract
/// - In an explored run (asyncband::testing::explore), lock(), try_lock() and unlock() are
///   scheduling points; a lock() that finds the mutex held blocks the model thread, which is
///   not runnable until an unlock(). Threads blocked in lock() form the deadlocks the explorer
///   reports, with the thread holding each mutex.
/// - Unlocking a mutex the thread does not hold is a failure (failure_kind::misuse); locking a
///   mutex the thread holds already blocks it for good (a deadlock).
/// - Outside a run (or on a thread that is not a model thread) it is a plain std::mutex. A
///   mutex is used either way, not both: create it in the body to explore it.
class mutex {
 public:
  /// An unlocked mutex.
  mutex() = default;
  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;
  ~mutex() = default;

  /// Takes the mutex, blocking (in a run: the model thread) while another thread holds it.
  void lock() {
    detail::execution* e = detail::current();
    if (e == nullptr) return plain_.lock();
    e->point("lock", "mutex", this, true);
    e->drain();  // a locked read-modify-write
    while (holder_ != detail::no_thread) e->block("to lock", "mutex", this, holder_, true);
    holder_ = detail::execution::self_id();
  }

  /// Takes the mutex if no thread holds it; true if it did.
  bool try_lock() {
    detail::execution* e = detail::current();
    if (e == nullptr) return plain_.try_lock();
    e->point("try_lock", "mutex", this, true);
    e->drain();
    if (holder_ != detail::no_thread) return false;
    holder_ = detail::execution::self_id();
    return true;
  }

  /// Releases the mutex, which this thread holds; in a run, makes the threads blocked in
  /// lock() runnable (they compete for it again).
  void unlock() noexcept {
    detail::execution* e = detail::current();
    if (e == nullptr) return plain_.unlock();
    e->point("unlock", "mutex", this, false);
    e->drain();
    if (holder_ != detail::execution::self_id()) {
      e->fail(failure_kind::misuse, "unlocks a mutex it does not hold");
      return;
    }
    holder_ = detail::no_thread;
    e->wake(this, true);
  }

 private:
  std::mutex plain_;                        // outside a run
  std::size_t holder_ = detail::no_thread;  // in a run: the model thread holding it
};

// NOLINTEND(bugprone-exception-escape)

}  // namespace asyncband::testing
