// SPDX-License-Identifier: Apache-2.0
// asyncband/once.hpp
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <cassert>
#include <chrono>
#include <utility>

#include "detail/initializer.hpp"
#include "detail/once_gate.hpp"
#include "detail/wait_functions.hpp"
#include "result.hpp"
#include "stop_token.hpp"

namespace asyncband {

namespace detail {
/// once::call_once's op: the initialiser's own result, if any, is dropped.
template <class F>
class call_once_op {
 public:
  using yield_type = void;
  using initializer_type = F;

  call_once_op(once_gate* gate, F f) : gate_(gate), f_(std::move(f)) {}

  once_gate& gate() noexcept { return *gate_; }
  F& initializer() noexcept { return f_; }
  static void accept(run_grant& grant) noexcept { grant.complete(); }
  template <class R>
  static void accept(R&& /*yielded*/, run_grant& grant) noexcept {
    grant.complete();
  }
  static void finish_run() noexcept {}
  static void finish_completed() noexcept {}

 private:
  once_gate* gate_;
  F f_;
};
}  // namespace detail

/// Runs an asynchronous initialiser at most once to success (Rust's `Once`, for coroutines).
///
///   asyncband::once started;
///   co_await started.call_once([&]() -> task<> { co_await connect(); });
///
/// Contract
/// - call_once(f) returns once the once is completed: by this caller's f, or by another's.
///   `f` is any callable returning an awaitable (an asyncband task, a hand-written awaiter,
///   anything a coroutine without an await_transform can co_await), or a plain function. It is
///   called with the call's asyncband::stop_token if it takes one. It lives in the awaiting frame
///   until its run ends, so a coroutine lambda's captures stay valid throughout. With g++ 12,
///   name a lambda capturing a non-trivial value (a std::string) before the co_await: g++ 12
///   destroys such a temporary twice when it is written inside the co_await expression.
/// - At most one run at a time. Concurrent callers wait (FIFO) for the running call.
/// - Failure: if the running call fails (its f throws, or its awaiting coroutine is destroyed
///   mid-run), the once stays incomplete, the failure reaches that caller only (the exception is
///   rethrown to it), and the oldest waiting caller runs its own f next: never two at a time,
///   never none while a caller waits. A runner created this way starts on its caller's
///   scheduler. Once incomplete with nobody waiting, the next call runs.
/// - Synchronization: everything the successful run did happens-before every call_once() and
///   wait() that returns because the once completed, and every is_completed() that sees true.
/// - Cancellation: call_once(f, stop) commits to cancelled if the stop is observed while it
///   waits, and also if the run came to it after the stop was requested (the run then passes
///   on: nothing is lost). A running f is not interrupted: it receives the token if it takes
///   one, and its own outcome decides (an exception is rethrown, never turned into cancelled).
///   A timeout (the _timeout forms) bounds the wait, never a run.
/// - Waking: a completion wakes every waiter, each on its own scheduler (or inline on the
///   completing thread for coroutines without one), after releasing the internal lock. A call
///   that only waits allocates nothing; a call that runs allocates its run's coroutine frame.
/// - The once must outlive every pending call. A waiter resumed by the completion may destroy
///   it at once (the completing run touches nothing of it afterwards).
class once : public detail::wait_functions<once> {
  struct wait_node;
  friend class detail::wait_functions<once>;
  friend struct detail::once_ops;
  friend struct asyncband::detail::debug_access;
  template <class F>
  using call_forms = detail::once_forms<detail::call_once_op<F>>;

 public:
  once() = default;
  once(const once&) = delete;
  once& operator=(const once&) = delete;
  /// Debug builds assert that no call is pending (none waiting, none running).
  ~once() {
    assert((detail::model_run_failed() || (gate_.no_waiters_left() && !gate_.is_running())) &&
           "asyncband::once destroyed with pending calls");
  }

  /// One acquire load: true once a call succeeded.
  [[nodiscard]] bool is_completed() const noexcept { return gate_.is_completed(); }

  /// `co_await o.call_once(f)`: runs f unless the once is completed (see the class contract).
  template <class F>
  auto call_once(F f) {
    return call_forms<F>::await(&gate_, std::move(f));
  }
  /// As call_once(f); yields result<void>: ok, or cancelled.
  template <class F>
  auto call_once(F f, asyncband::stop_token stop) {
    return call_forms<F>::await_until_stopped(std::move(stop), &gate_, std::move(f));
  }
  /// The plain-thread twin: waits by blocking; runs an awaitable f through block_on.
  template <class F>
  void call_once_blocking(F f) {
    call_forms<F>::block(&gate_, std::move(f));
  }
  /// As call_once_blocking(f), until `stop` is requested.
  template <class F>
  result<void> call_once_blocking(F f, asyncband::stop_token stop) {
    return call_forms<F>::block_until_stopped(std::move(stop), &gate_, std::move(f));
  }
  /// As call_once_blocking(f), waiting at most `timeout` (a run, once started, is not bounded).
  template <class F, class Rep, class Period>
  result<void> call_once_timeout(F f, std::chrono::duration<Rep, Period> timeout) {
    return call_forms<F>::block_for(timeout, &gate_, std::move(f));
  }

  // wait(), wait(stop), wait_blocking(), wait_blocking(stop), wait_timeout(d) (inherited):
  // wait for completion without ever running anything; a failed run does not end them.

 private:
  struct wait_node : detail::once_gate::observer_node {
    explicit wait_node(once* owner) noexcept : observer_node(&owner->gate_) {}
  };

  detail::once_gate gate_;
};

}  // namespace asyncband
