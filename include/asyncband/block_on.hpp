// asyncband/block_on.hpp: the bridge from plain threads into coroutine code.
#pragma once

#include <coroutine>
#include <exception>
#include <type_traits>
#include <utility>

#include "detail/awaitable_traits.hpp"
#include "detail/waiter.hpp"

namespace asyncband {
namespace detail {

/// The coroutine block_on drives: starts eagerly on the calling thread, has no scheduler (so the
/// awaitable's wake-ups resume it inline on the waking thread), and unparks the caller at its end.
class block_on_driver {
 public:
  struct promise_type {
    parker* done = nullptr;
    std::exception_ptr error;

    block_on_driver get_return_object() noexcept {
      return block_on_driver(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    auto final_suspend() noexcept {
      struct signal_done {
        bool await_ready() noexcept { return false; }
        // The caller destroys the frame after park() returns; nothing here runs after unpark().
        void await_suspend(std::coroutine_handle<promise_type> h) noexcept { h.promise().done->unpark(); }
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
    handle_.promise().done = &done;
    handle_.resume();
    done.park();
    if (handle_.promise().error) std::rethrow_exception(handle_.promise().error);
  }

 private:
  explicit block_on_driver(std::coroutine_handle<promise_type> h) noexcept : handle_(h) {}
  std::coroutine_handle<promise_type> handle_;
};

// An awaiter is awaited in place, as a named lvalue (awaiters need not be movable, and g++ 12
// copies a glvalue awaiter returned from a call); anything else is forwarded, so that
// rvalue-only `operator co_await` overloads apply.
template <class Awaitable>
inline constexpr bool is_awaiter = requires(Awaitable& a) { a.await_ready(); };

template <class Awaitable, class T>
block_on_driver drive(Awaitable& awaitable, yielded<T>& out) {
  if constexpr (is_awaiter<Awaitable>) {
    out.set(co_await awaitable);
  } else {
    out.set(co_await static_cast<Awaitable&&>(awaitable));
  }
}

template <class Awaitable>
block_on_driver drive_void(Awaitable& awaitable) {
  if constexpr (is_awaiter<Awaitable>) {
    co_await awaitable;
  } else {
    co_await static_cast<Awaitable&&>(awaitable);
  }
}

}  // namespace detail

/// Blocks the calling thread until `awaitable` completes and returns what `co_await` yields
/// (rethrowing what it threw). The awaited code runs on this thread until it first suspends;
/// after that, wake-ups resume it inline on the waking thread (or on the scheduler a task type
/// moves it to). Never call it from a thread that a wake-up of `awaitable` depends on, such
/// as the only worker of the pool the awaitable waits for.
template <class Awaitable>
decltype(auto) block_on(Awaitable&& awaitable) {
  using T = detail::await_result_t<Awaitable>;
  if constexpr (std::is_void_v<T>) {
    detail::drive_void<Awaitable>(awaitable).run_to_completion();
  } else {
    detail::yielded<T> out;
    detail::drive<Awaitable, T>(awaitable, out).run_to_completion();
    return out.take();
  }
}

}  // namespace asyncband
