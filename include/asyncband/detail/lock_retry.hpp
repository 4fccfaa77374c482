// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/lock_retry.hpp: the retry of a queued lock under bounded barging.
//
// A mutex with bounded barging frees the lock on unlock even when somebody waits, and takes the
// head of its queue out to try again (docs/design.md, "Contended coroutine locks"). The head's
// coroutine cannot do that itself: once resumed, `await_resume` cannot suspend again. So the
// wait's continuation is not the waiting coroutine but a small retry coroutine, whose frame
// lives in the lock's awaiter (no allocation). The unlock posts the retry to the waiter's
// scheduler; there it takes the lock if it is free, and otherwise goes back to the front of the
// queue and suspends; once it holds the lock it continues the waiting coroutine by symmetric
// transfer, on that scheduler's thread already. A head handed the lock directly (the pass
// bound reached) continues the same way without trying. A plain thread's untimed lock_blocking()
// runs the same turns itself, parked in between (park_retrying).
#pragma once

#include <atomic>
#include <cassert>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <utility>

#include "../scheduler.hpp"
#include "waiter.hpp"

namespace asyncband::detail {

/// The clock of a parked thread's bound under bounded barging (semaphore::thread_max_wait). A
/// test build can move it forward (advance_for_tests), so that tests reach the bound without
/// sleeping.
struct lock_clock {
  using time_point = std::chrono::steady_clock::time_point;
  static time_point now() noexcept {
#ifdef ASYNCBAND_TESTING
    return std::chrono::steady_clock::now() +
           std::chrono::nanoseconds(advance().load(std::memory_order_relaxed));
#else
    return std::chrono::steady_clock::now();
#endif
  }
#ifdef ASYNCBAND_TESTING
  static void advance_for_tests(std::chrono::nanoseconds by) noexcept {
    advance().fetch_add(by.count(), std::memory_order_relaxed);
  }

 private:
  static std::atomic<std::int64_t>& advance() noexcept {
    static std::atomic<std::int64_t> by{0};
    return by;
  }
#endif
};

/// The room a lock's awaiter keeps for its retry's frame: the promise (one handle), the
/// coroutine's parameters (two references and a scheduler_ref), the awaiter of its one
/// co_await, and what g++ 12 and clang 14 add (resume and destroy pointers, the suspend index),
/// with room to spare. A frame that does not fit is allocated instead, and debug builds assert
/// (every test of a contended lock checks that ours fit).
inline constexpr std::size_t lock_retry_frame_budget = 8 * sizeof(void*) + 2 * sizeof(scheduler_ref) + 64;

/// Raw room for the retry's frame, inside the lock's awaiter.
struct lock_retry_room {
  alignas(__STDCPP_DEFAULT_NEW_ALIGNMENT__) unsigned char bytes[lock_retry_frame_budget];
};

class lock_retry_promise;

/// The retry coroutine's handle, as its body returns it.
struct lock_retry_coroutine {
  using promise_type = lock_retry_promise;
  std::coroutine_handle<lock_retry_promise> handle;
};

/// Continues the waiting coroutine, by symmetric transfer, once the retry holds the lock.
struct continue_locker {
  bool await_ready() const noexcept { return false; }
  template <class Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> retry) const noexcept {
    return retry.promise().waiter();
  }
  void await_resume() const noexcept {}
};

/// The retry's promise: the coroutine to continue once the lock is held.
class lock_retry_promise {
 public:
  /// The frame goes into `room` when it fits (it does for g++ 12 and clang 14).
  template <class... Args>
  static void* operator new(std::size_t size, lock_retry_room& room, const Args&... /*unused*/) {
    assert(size <= lock_retry_frame_budget && "asyncband: the lock retry's frame does not fit its room");
    return size <= lock_retry_frame_budget ? static_cast<void*>(room.bytes) : ::operator new(size);
  }
  /// Receives the size operator new received: only a frame that did not fit was allocated.
  static void operator delete(void* frame, std::size_t size) noexcept {
    if (size > lock_retry_frame_budget) ::operator delete(frame);
  }

  lock_retry_coroutine get_return_object() noexcept {
    return {std::coroutine_handle<lock_retry_promise>::from_promise(*this)};
  }
  /// Started by the first resolution of the wait (posted to the waiter's scheduler).
  std::suspend_always initial_suspend() const noexcept { return {}; }
  continue_locker final_suspend() const noexcept { return {}; }
  void return_void() const noexcept {}
  /// Nothing in the body throws.
  [[noreturn]] void unhandled_exception() const noexcept { std::terminate(); }

  void set_waiter(std::coroutine_handle<> waiter) noexcept { waiter_ = waiter; }
  [[nodiscard]] std::coroutine_handle<> waiter() const noexcept { return waiter_; }

 private:
  std::coroutine_handle<> waiter_;
};

/// The retry's turn, for a node (detail::semaphore_waiter) whose resolution took it out of the
/// queue to try again: while it must retry, it takes the lock lock-free if it is free, or goes
/// back to the front of the queue. Returns true if the node is pending again (resuming `target`
/// once resolved; nothing may touch the wait after that), false once it holds the lock. Out of
/// line, so that nothing after the publication is merged into a coroutine body (clang 14: LLVM
/// 56301/65054).
template <class Node>
[[gnu::noinline]] bool retry_until_pending(Node& node, resume_target target) noexcept {
  while (node.must_retry()) {
    if (node.retry_take()) return false;
    if (node.requeue(target)) return true;
  }
  return false;
}

/// A plain thread's lock wait under bounded barging: the thread runs the retry itself, parked
/// between turns. `publish(target)` publishes the wait (true: pending). Each resolution hands it
/// the lock or takes it out of the queue to try again: it then takes the lock if it is free, or
/// goes back to the front of the queue and parks again. Returns once it holds the lock. A late
/// notify of an earlier turn's parker may wake a later one: park() then sleeps again.
template <class Node, class Publish>
void park_retrying(Node& node, Publish&& publish) noexcept {
  node.set_retries_parked(lock_clock::now());
  {
    parker park;
    if (std::forward<Publish>(publish)(resume_target(&parker::unpark_thunk, &park))) park.park();
  }
  for (;;) {
    parker park;
    if (!retry_until_pending(node, resume_target(&parker::unpark_thunk, &park))) return;
    park.park();
  }
}

/// The awaiter of the retry's one suspension point.
template <class Node>
struct retry_turn {
  Node* node;
  scheduler_ref scheduler;
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> self) const noexcept {
    return retry_until_pending(*node, resume_target(self, scheduler));
  }
  void await_resume() const noexcept {}
};

// g++ 12 without optimisation warns that the frame's operator delete does not match its
// operator new: it does (see resume_on.hpp's run_post_hop).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
/// The retry: resumed on the waiter's scheduler by each resolution of `node`, it retries until
/// it holds the lock (or was handed it), then continues the waiting coroutine.
template <class Node>
lock_retry_coroutine run_lock_retry(lock_retry_room& /*room*/, Node& node, scheduler_ref scheduler) {
  do {
    co_await retry_turn<Node>{&node, scheduler};
  } while (node.must_retry());
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace asyncband::detail
