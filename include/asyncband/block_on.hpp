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

}  // namespace asyncband
