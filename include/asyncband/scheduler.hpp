// SPDX-License-Identifier: Apache-2.0
// asyncband/scheduler.hpp: the one hook through which a task type tells asyncband where its
// coroutines resume.
//
// When a primitive wakes a waiting coroutine, it asks the coroutine's promise for a scheduler:
//
//   struct promise_type {
//     asyncband::scheduler_ref asyncband_scheduler() const noexcept;   // the hook
//   };
//
// A promise that satisfies `scheduler_aware_promise` and returns a non-empty scheduler_ref has
// every wake-up posted there (so N waiters woken together run in parallel on a pool, and the
// waking call returns without running any of them). Any other promise, or an empty
// scheduler_ref, resumes the coroutine inline on the thread that wakes it.
//
// It also holds the blocking hook (set_blocking_hook), through which a scheduler hears that
// asyncband is about to block one of its threads.
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <concepts>
#include <coroutine>
#include <memory>

namespace asyncband {

/// Anything that can take a ready coroutine and run it later. schedule() must not throw and
/// must not resume the handle inline (that would run user code on the waker's stack).
template <class S>
concept scheduler = requires(S& s, std::coroutine_handle<> h) {
  { s.schedule(h) } noexcept;
};

/// A non-owning, type-erased reference to a scheduler. Empty means "resume inline".
class scheduler_ref {
 public:
  constexpr scheduler_ref() noexcept = default;

  /// A reference to `s`, which must outlive every use of it.
  template <scheduler S>
    requires(!std::same_as<S, scheduler_ref>)
  static scheduler_ref of(S& s) noexcept {
    return scheduler_ref(std::addressof(s), [](void* self, std::coroutine_handle<> h) noexcept {
      static_cast<S*>(self)->schedule(h);
    });
  }

  /// True for no scheduler (resume inline).
  [[nodiscard]] constexpr bool empty() const noexcept { return post_ == nullptr; }
  /// !empty().
  explicit constexpr operator bool() const noexcept { return !empty(); }

  /// Posts h to the scheduler; precondition: !empty().
  void schedule(std::coroutine_handle<> h) const noexcept { post_(self_, h); }

  /// Posts h when a scheduler is set; resumes it inline otherwise.
  void resume(std::coroutine_handle<> h) const noexcept {
    if (post_ != nullptr) {
      post_(self_, h);
    } else {
      h.resume();
    }
  }

  /// The same scheduler (or both empty).
  friend constexpr bool operator==(const scheduler_ref& a, const scheduler_ref& b) noexcept {
    return a.self_ == b.self_ && a.post_ == b.post_;
  }

 private:
  using post_fn = void (*)(void*, std::coroutine_handle<>) noexcept;
  constexpr scheduler_ref(void* self, post_fn post) noexcept : self_(self), post_(post) {}

  void* self_ = nullptr;
  post_fn post_ = nullptr;
};

/// A thread's "about to block" hook. asyncband calls it on a thread right before it blocks
/// that thread (block_on, every *_blocking and *_timeout wait, a phaser's wait_blocking), once
/// only another thread can end the wait. A wait that completes at once does not call it; a timed
/// one may call it twice (before it sleeps, and again once its deadline has passed). A
/// scheduler that keeps ready coroutines that only this thread will run (a per-worker LIFO slot)
/// installs it on its workers to hand them to its other threads: a blocked worker would
/// otherwise sit on a coroutine that its wait may depend on. It must not throw, block, or wait
/// on asyncband.
struct blocking_hook {
  /// Called with `context`; none when null.
  void (*fn)(void* context) noexcept = nullptr;
  /// The scheduler's per-thread state, say.
  void* context = nullptr;
};

namespace detail {
/// The calling thread's blocking hook (one per thread; none by default).
inline constinit thread_local blocking_hook this_thread_blocking_hook{};

/// The core, right before it blocks the calling thread: one thread-local load when no hook is
/// set. Waits that complete without blocking never call it.
inline void before_blocking() noexcept {
  const blocking_hook hook = this_thread_blocking_hook;
  if (hook.fn != nullptr) hook.fn(hook.context);
}
}  // namespace detail

/// Installs `hook` as the calling thread's blocking hook and returns the one it replaces, for
/// the caller to reinstall when it stops serving this thread.
inline blocking_hook set_blocking_hook(blocking_hook hook) noexcept {
  const blocking_hook previous = detail::this_thread_blocking_hook;
  detail::this_thread_blocking_hook = hook;
  return previous;
}

/// The hook: a promise whose coroutines resume on a scheduler of its choosing.
template <class P>
concept scheduler_aware_promise = requires(const P& p) {
  { p.asyncband_scheduler() } noexcept -> std::convertible_to<scheduler_ref>;
};

/// The scheduler a waiting coroutine resumes on (empty: inline on the waking thread).
template <class Promise>
[[nodiscard]] scheduler_ref scheduler_of(std::coroutine_handle<Promise> h) noexcept {
  if constexpr (scheduler_aware_promise<Promise>) {
    return h.promise().asyncband_scheduler();
  } else {
    (void)h;
    return {};
  }
}

}  // namespace asyncband
