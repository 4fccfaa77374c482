// SPDX-License-Identifier: Apache-2.0
// asyncband/block_on.hpp: the bridge from plain threads into coroutine code.
//
//   block_on(awaitable)                  // waits for it; yields what co_await yields
//   block_on(make, stop_token)           // block_on(make(stop_token))
//   block_on(make, timeout or deadline)  // make(token) with a token the deadline fires
//   block_on(make, stop_token, timeout)  // both
//
// An awaitable cannot be cancelled from outside: only what was given a stop token when it was
// made can end early, and the calling thread cannot return before the awaitable has completed
// (its awaiter lives in this call's frame). So the forms that end early take `make`, a callable
// that builds the awaitable from the stop token they pass it (`[&](asyncband::stop_token t) { return
// rx.recv(t); }`); at the deadline, the calling thread requests stop on that token itself, and
// waits for the awaitable to complete through its own cancellation. See docs/design.md,
// "block_on with a deadline or a stop token".
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <chrono>
#include <concepts>
#include <coroutine>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "detail/awaitable_traits.hpp"
#include "detail/wait_functions.hpp"
#include "detail/waiter.hpp"
#include "result.hpp"
#include "stop_token.hpp"

namespace asyncband {
namespace detail {

/// The coroutine block_on drives: starts eagerly on the calling thread, has no scheduler (so the
/// awaitable's wake-ups resume it inline on the waking thread), and releases the caller's parker
/// at its end.
class block_on_driver {
 public:
  struct promise_type {
    void (*unpark)(void*) noexcept = nullptr;
    void* parker = nullptr;
    std::exception_ptr error;

    block_on_driver get_return_object() noexcept {
      return block_on_driver(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    auto final_suspend() noexcept {
      struct signal_done {
        bool await_ready() noexcept { return false; }
        // The caller destroys the frame after parking returns; nothing here runs after unpark().
        void await_suspend(std::coroutine_handle<promise_type> h) noexcept {
          h.promise().unpark(h.promise().parker);
        }
        void await_resume() noexcept {}
      };
      return signal_done{};
    }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { error = std::current_exception(); }
  };

  block_on_driver(block_on_driver&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  block_on_driver(const block_on_driver&) = delete;
  block_on_driver& operator=(const block_on_driver&) = delete;
  block_on_driver& operator=(block_on_driver&&) = delete;
  ~block_on_driver() {
    if (handle_) handle_.destroy();
  }

  /// Runs the coroutine on this thread until it first suspends, then parks until it finishes.
  void run_to_completion() {
    parker done;
    start(&parker::unpark_thunk, &done);
    done.park();
    rethrow_if_failed();
  }

  /// As run_to_completion, but if the coroutine has not finished by `deadline`, requests stop on
  /// `stop` (from this thread: a cancellation it causes may run the rest of the coroutine here)
  /// and parks until it has finished. Returns true if that request was the first on `stop`.
  template <class Clock, class Duration>
  bool run_until(const std::chrono::time_point<Clock, Duration>& deadline, asyncband::stop_source& stop) {
    timed_parker done;
    start(&timed_parker::unpark_thunk, &done);
    bool stopped_here = false;
    if (!done.park_until(deadline)) stopped_here = stop.request_stop();
    done.park();  // at once if it finished; else until the cancellation (or a wake-up) ends it
    rethrow_if_failed();
    return stopped_here;
  }

 private:
  explicit block_on_driver(std::coroutine_handle<promise_type> h) noexcept : handle_(h) {}

  void start(void (*unpark)(void*) noexcept, void* parker) noexcept {
    handle_.promise().unpark = unpark;
    handle_.promise().parker = parker;
    handle_.resume();
  }
  void rethrow_if_failed() const {
    if (handle_.promise().error) std::rethrow_exception(handle_.promise().error);
  }

  std::coroutine_handle<promise_type> handle_;
};

/// What the driver awaits: the caller's awaiter, suspension forwarded, resumption left out.
/// block_on calls the awaiter's await_resume itself, on the calling thread once the driver has
/// finished, and returns what it yields as it is: a prvalue goes to block_on's caller with no
/// move at all (a channel's receive moves its value exactly once, from the channel).
template <class Awaiter>
struct suspension_of {
  Awaiter* awaiter;
  bool await_ready() { return awaiter->await_ready(); }
  template <class Promise>
  decltype(auto) await_suspend(std::coroutine_handle<Promise> h) {
    return awaiter->await_suspend(h);
  }
  void await_resume() noexcept {}
};

template <class Awaiter>
block_on_driver drive(Awaiter& awaiter) {
  co_await suspension_of<Awaiter>{&awaiter};
}

/// A stop callback that forwards a stop request to a stop_source.
struct request_stop_on {
  asyncband::stop_source* source;
  void operator()() const noexcept { source->request_stop(); }
};

/// An outcome that reports a cancellation and can report a timeout instead, without losing
/// what it carries: result<T> and broadcast's recv_result (status only, when cancelled), and
/// send_result<T> (the unsent value, handed back).
template <class R>
    struct timeout_outcome : std::bool_constant < requires(const R& r) {
  { r.cancelled() } -> std::convertible_to<bool>;
  R(wait_status::timeout);
} > {};
template <class T>
struct timeout_outcome<send_result<T>> : std::true_type {};

template <class R>
inline constexpr bool is_result_v = false;
template <class T>
inline constexpr bool is_result_v<result<T>> = true;

/// Rewrites a cancelled outcome as a timeout. What it carries goes into the new one (a
/// send_result's unsent value: moved out and back); nothing is dropped.
template <class R>
void mark_timed_out(R& r) {
  if constexpr (is_result_v<R> && !std::is_move_assignable_v<R>) {
    // A cancelled result holds no value (its T need not be assignable): only the status changes.
    r.~R();
    ::new (static_cast<void*>(std::addressof(r))) R(wait_status::timeout);
  } else if constexpr (requires { R(send_status::timeout, std::move(r).value()); }) {
    r = R(send_status::timeout, std::move(r).value());
  } else {
    r = R(wait_status::timeout);
  }
}

/// The awaiter's outcome, a cancellation that the deadline caused rewritten as a timeout. One
/// named return value, in a function whose return type is not deduced: g++ 12 elides its copy
/// only then (a received value moves once, from the channel, as through plain block_on).
template <class Outcome, class Awaiter>
Outcome rewrite_timeout(Awaiter& awaiter, bool timed_out) {
  Outcome r = awaiter.await_resume();
  if (timed_out && r.cancelled()) mark_timed_out(r);
  return r;
}

/// What a deadline form returns: the awaiter's outcome, with a cancellation that the deadline
/// caused reported as wait_status::timeout (send_status::timeout, recv_status::timeout) where
/// the outcome type has one. Anything else is returned as it is (a prvalue, unmoved).
template <class Awaiter>
decltype(auto) deadline_outcome(Awaiter& awaiter, bool timed_out) {
  using outcome = decltype(awaiter.await_resume());
  if constexpr (!std::is_reference_v<outcome> && timeout_outcome<outcome>::value) {
    return rewrite_timeout<outcome>(awaiter, timed_out);
  } else {
    return awaiter.await_resume();
  }
}

/// A callable that block_on's cancellable forms accept: builds an awaitable from a stop token.
template <class Make>
concept awaitable_maker =
    std::invocable<Make, asyncband::stop_token> && requires(Make&& make, asyncband::stop_token t) {
      get_awaiter(std::invoke(std::forward<Make>(make), t)).await_ready();
    };

}  // namespace detail

/// Blocks the calling thread until `awaitable` completes and returns what `co_await` yields
/// (rethrowing what it threw). The awaited code runs on this thread until it first suspends;
/// after that, wake-ups resume it inline on the waking thread (or on the scheduler a task type
/// moves it to), and what it yields is taken (its awaiter's await_resume) on this thread once it
/// has completed. Never call it from a thread that a wake-up of `awaitable` depends on, such
/// as the only worker of the pool the awaitable waits for.
template <class Awaitable>
decltype(auto) block_on(Awaitable&& awaitable) {
  // The awaiter stays where it is: an awaitable that is its own awaiter is used in place (it
  // need not be movable); one with operator co_await has its awaiter made here, in this frame.
  decltype(auto) awaiter = detail::get_awaiter(static_cast<Awaitable&&>(awaitable));
  using awaiter_type = std::remove_reference_t<decltype(awaiter)>;
  detail::block_on_driver driver = detail::drive<awaiter_type>(awaiter);
  driver.run_to_completion();
  return awaiter.await_resume();
}

/// `block_on(make(stop))`: the awaitable `make` builds from `stop` ends early (cancelled) when
/// stop is requested, as far as it honours its token.
template <detail::awaitable_maker Make>
decltype(auto) block_on(Make&& make, asyncband::stop_token stop) {
  return block_on(std::invoke(std::forward<Make>(make), std::move(stop)));
}

/// Blocks until the awaitable `make(token)` completes, where `token` is stopped by `stop` or,
/// if it has not completed by `deadline`, by this thread at the deadline. Then this thread waits
/// for the awaitable to end through its own cancellation (an awaitable that ignores its token is
/// waited for in full), and returns what it yields. If the deadline's stop request was the first
/// on `token`, a cancelled outcome is reported as a timeout (wait_status::timeout,
/// send_status::timeout with the unsent value, broadcast's recv_status::timeout); other outcome
/// types are returned as they are. Whatever the awaitable completed with before the stop took
/// effect (a received value, a granted permit, a lock) is returned, never dropped, as asyncband's
/// cancellation rules guarantee.
template <detail::awaitable_maker Make, class Clock, class Duration>
decltype(auto) block_on(Make&& make, asyncband::stop_token stop,
                        const std::chrono::time_point<Clock, Duration>& deadline) {
  asyncband::stop_source source;
  const asyncband::stop_callback forward(std::move(stop), detail::request_stop_on{&source});
  auto&& awaitable = std::invoke(std::forward<Make>(make), source.get_token());
  decltype(auto) awaiter = detail::get_awaiter(std::forward<decltype(awaitable)>(awaitable));
  using awaiter_type = std::remove_reference_t<decltype(awaiter)>;
  detail::block_on_driver driver = detail::drive<awaiter_type>(awaiter);
  const bool timed_out = driver.run_until(deadline, source);
  return detail::deadline_outcome(awaiter, timed_out);
}

/// block_on(make, stop, deadline) with a deadline `timeout` from now (saturated: a timeout too
/// large for the clock waits forever).
template <detail::awaitable_maker Make, class Rep, class Period>
decltype(auto) block_on(Make&& make, asyncband::stop_token stop, std::chrono::duration<Rep, Period> timeout) {
  return block_on(std::forward<Make>(make), std::move(stop), detail::deadline_after(timeout));
}

/// block_on(make, stop, deadline) without an outside stop token.
template <detail::awaitable_maker Make, class Clock, class Duration>
decltype(auto) block_on(Make&& make, const std::chrono::time_point<Clock, Duration>& deadline) {
  return block_on(std::forward<Make>(make), asyncband::stop_token{}, deadline);
}

/// block_on(make, stop, timeout) without an outside stop token.
template <detail::awaitable_maker Make, class Rep, class Period>
decltype(auto) block_on(Make&& make, std::chrono::duration<Rep, Period> timeout) {
  return block_on(std::forward<Make>(make), asyncband::stop_token{}, detail::deadline_after(timeout));
}

}  // namespace asyncband
