// SPDX-License-Identifier: Apache-2.0
// bench/eager_coroutine.hpp: the coroutine type that drives a measured loop from inside, for the
// benchmarks (bench_support.hpp's inline_coroutine) and the instruction counts
// (callgrind_paths.cpp's eager_loop). It starts at once and has no scheduler, so a wait that
// completes resumes nothing, and an iteration costs only the awaited operation; a wait that
// suspends is never resumed (nothing would), which done() then shows.
#pragma once

#include <coroutine>
#include <exception>
#include <utility>

namespace asyncband_bench {

class eager_coroutine {
 public:
  struct promise_type {
    eager_coroutine get_return_object() noexcept {
      return eager_coroutine(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };

  // Movable: clang 14 moves the return object out of get_return_object(), and the users below
  // are built from it.
  eager_coroutine(eager_coroutine&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  eager_coroutine(const eager_coroutine&) = delete;
  eager_coroutine& operator=(const eager_coroutine&) = delete;
  eager_coroutine& operator=(eager_coroutine&&) = delete;
  ~eager_coroutine() {
    if (handle_) handle_.destroy();
  }

  /// The loop ran to its end without ever suspending (every wait was ready).
  [[nodiscard]] bool done() const noexcept { return handle_.done(); }

 private:
  explicit eager_coroutine(std::coroutine_handle<promise_type> h) noexcept : handle_(h) {}
  std::coroutine_handle<promise_type> handle_;
};

}  // namespace asyncband_bench
