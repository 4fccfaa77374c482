// asyncband/runtime/task.hpp: a lazy task type that provides asyncband's scheduler hook.
//
// Optional: the primitives work from any coroutine type. This one exists so that tests,
// examples and benchmarks have a task that resumes on a thread pool or on the test scheduler.
#pragma once

#include <cassert>
#include <coroutine>
#include <exception>
#include <type_traits>
#include <utility>
#include <variant>

#include "../detail/awaitable_traits.hpp"
#include "../scheduler.hpp"

namespace asyncband::runtime {

template <class T = void>
class task;

namespace detail {

/// What every task promise shares: the awaiting coroutine to continue at the end, and the
/// scheduler its wake-ups resume on (inherited from the awaiting coroutine unless set).
class task_promise_base {
 public:
  /// asyncband's scheduler hook.
  [[nodiscard]] scheduler_ref asyncband_scheduler() const noexcept { return scheduler_; }
  void set_scheduler(scheduler_ref s) noexcept { scheduler_ = s; }
  void set_continuation(std::coroutine_handle<> c) noexcept { continuation_ = c; }

  std::suspend_always initial_suspend() noexcept { return {}; }

  struct final_awaiter {
    bool await_ready() noexcept { return false; }
    template <class Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> h) noexcept {
      return h.promise().continuation_;
    }
    void await_resume() noexcept {}
  };
  final_awaiter final_suspend() noexcept { return {}; }

 private:
  std::coroutine_handle<> continuation_ = std::noop_coroutine();
  scheduler_ref scheduler_;
};

template <class T>
class task_promise : public task_promise_base {
 public:
  task<T> get_return_object() noexcept;
  template <class U>
    requires std::is_convertible_v<U&&, T>
  void return_value(U&& v) {
    result_.template emplace<1>(std::forward<U>(v));
  }
  void unhandled_exception() noexcept { result_.template emplace<2>(std::current_exception()); }
  T take() {
    if (result_.index() == 2) std::rethrow_exception(std::get<2>(result_));
    return std::move(std::get<1>(result_));
  }

 private:
  std::variant<std::monostate, T, std::exception_ptr> result_;
};

template <>
class task_promise<void> : public task_promise_base {
 public:
  task<void> get_return_object() noexcept;
  void return_void() noexcept {}
  void unhandled_exception() noexcept { error_ = std::current_exception(); }
  void take() {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;
};

}  // namespace detail

/// A lazily started coroutine yielding T. Awaiting it starts it by symmetric transfer; it
/// inherits the awaiting coroutine's scheduler unless it has one, and continues the awaiting
/// coroutine on whichever thread it finishes. Move-only; destroying it destroys the frame.
template <class T>
class [[nodiscard]] task {
 public:
  using promise_type = detail::task_promise<T>;
  using handle_type = std::coroutine_handle<promise_type>;

  task() noexcept = default;
  explicit task(handle_type h) noexcept : handle_(h) {}
  task(task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  task& operator=(task&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  task(const task&) = delete;
  task& operator=(const task&) = delete;
  ~task() {
    if (handle_) handle_.destroy();
  }

  [[nodiscard]] bool done() const noexcept { return !handle_ || handle_.done(); }
  [[nodiscard]] handle_type handle() const noexcept { return handle_; }

  auto operator co_await() && noexcept { return awaiter{handle_}; }
  auto operator co_await() & noexcept { return awaiter{handle_}; }

 private:
  struct awaiter {
    handle_type child;
    bool await_ready() const noexcept { return !child || child.done(); }
    template <class Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> parent) noexcept {
      auto& promise = child.promise();
      promise.set_continuation(parent);
      if (promise.asyncband_scheduler().empty()) promise.set_scheduler(scheduler_of(parent));
      return child;
    }
    T await_resume() { return child.promise().take(); }
  };

  handle_type handle_{};
};

namespace detail {
template <class T>
task<T> task_promise<T>::get_return_object() noexcept {
  return task<T>(std::coroutine_handle<task_promise<T>>::from_promise(*this));
}
inline task<void> task_promise<void>::get_return_object() noexcept {
  return task<void>(std::coroutine_handle<task_promise<void>>::from_promise(*this));
}

/// A fire-and-forget root: runs a task to its end on a scheduler, then frees itself.
class detached {
 public:
  struct promise_type {
    scheduler_ref scheduler;
    [[nodiscard]] scheduler_ref asyncband_scheduler() const noexcept { return scheduler; }
    detached get_return_object() noexcept {
      return detached{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // a detached task has nobody to tell
  };
  std::coroutine_handle<promise_type> handle;
};

template <class T>
detached run_detached(task<T> t) {
  co_await std::move(t);
}
}  // namespace detail

/// Moves the awaiting coroutine onto `s` and, for asyncband tasks, makes `s` its scheduler.
class schedule_on {
 public:
  explicit schedule_on(scheduler_ref s) noexcept : schedule_on(s, s) {}
  /// Becomes scheduled by `s`, but makes the first hop through `first` (a pool's shared queue
  /// rather than the current worker's next slot).
  schedule_on(scheduler_ref s, scheduler_ref first) noexcept : scheduler_(s), first_(first) {
    assert(!s.empty() && !first.empty());
  }
  bool await_ready() const noexcept { return false; }
  template <class Promise>
  void await_suspend(std::coroutine_handle<Promise> h) const noexcept {
    if constexpr (std::is_base_of_v<detail::task_promise_base, Promise>)
      h.promise().set_scheduler(scheduler_);
    first_.schedule(h);
  }
  void await_resume() const noexcept {}

 private:
  scheduler_ref scheduler_;
  scheduler_ref first_;
};

/// Starts `t` on scheduler `s` without waiting for it; the frame frees itself at the end.
/// An exception escaping `t` terminates the program.
template <class T>
void spawn(scheduler_ref s, task<T> t) {
  auto root = detail::run_detached(std::move(t));
  root.handle.promise().scheduler = s;
  s.schedule(root.handle);
}

}  // namespace asyncband::runtime
