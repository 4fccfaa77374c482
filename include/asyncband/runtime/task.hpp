// SPDX-License-Identifier: Apache-2.0
// asyncband/runtime/task.hpp: a lazy task type that provides asyncband's scheduler hook.
//
// Optional: the primitives work from any coroutine type. This one exists so that tests,
// examples and benchmarks have a task that resumes on a thread pool or on the test scheduler.
#pragma once

#include "../version.hpp"  // first: a build below C++20 stops there, with one message

#include <atomic>
#include <cassert>
#include <concepts>
#include <coroutine>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "../detail/atomic.hpp"
#include "../detail/awaitable_traits.hpp"
#include "../manual_reset_event.hpp"
#include "../scheduler.hpp"
#include "../stop_token.hpp"

/// The optional runtime (the primitives do not need it): task, spawn() and join_handle,
/// thread_pool, when_all(), and the deterministic test_scheduler for race tests.
namespace asyncband::runtime {

template <class T = void>
class task;
template <class T = void>
class join_handle;

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
  /// The coroutine promise (what makes a function returning task<T> a coroutine).
  using promise_type = detail::task_promise<T>;
  /// The coroutine handle the task owns.
  using handle_type = std::coroutine_handle<promise_type>;

  /// Holds no coroutine (done()).
  task() noexcept = default;
  /// Takes ownership of the coroutine `h` (the promise makes it).
  explicit task(handle_type h) noexcept : handle_(h) {}
  /// Takes over `other`'s coroutine; `other` holds none.
  task(task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  /// Destroys the coroutine held (its frame), then takes over `other`'s.
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

  /// True if the coroutine has finished, or there is none.
  [[nodiscard]] bool done() const noexcept { return !handle_ || handle_.done(); }
  /// The coroutine, still owned by the task.
  [[nodiscard]] handle_type handle() const noexcept { return handle_; }

  /// @{
  /// `co_await t` starts the task (if not started) and yields its value, or rethrows its
  /// exception; the awaiting coroutine continues on whichever thread the task finishes.
  auto operator co_await() && noexcept { return awaiter{handle_}; }
  auto operator co_await() & noexcept { return awaiter{handle_}; }
  /// @}

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
    void unhandled_exception() noexcept { std::terminate(); }  // an on_error that threw: nobody left to tell
  };
  std::coroutine_handle<promise_type> handle;
};

/// The root of spawn(s, t, on_error): what escapes `t` goes to `on_error`.
template <class T, class OnError>
detached run_reporting(task<T> t, OnError on_error) {
  try {
    if constexpr (std::is_void_v<T>) {
      co_await std::move(t);
    } else {
      (void)co_await std::move(t);
    }
  } catch (...) {
    on_error(std::current_exception());
  }
}

template <class T>
class spawned_promise;

/// The root of spawn(s, t): runs `t` and keeps its outcome for the join_handle.
template <class T>
struct spawned {
  using promise_type = spawned_promise<T>;
  std::coroutine_handle<promise_type> handle;
};

/// Where a spawned root keeps its task's value: return_value into `value`; nothing for a void
/// task (return_void).
template <class T>
struct spawned_return {
  std::optional<T> value;
  template <class U>
    requires std::is_convertible_v<U&&, T>
  void return_value(U&& v) {
    value.emplace(std::forward<U>(v));
  }
};
template <>
struct spawned_return<void> {
  void return_void() noexcept {}
};

/// The frame of a spawned task, owned twice: by the running root until its final suspension and
/// by the join_handle until it is dropped or detached. The last owner frees it.
template <class T>
class spawned_promise : public spawned_return<T> {
  using handle_type = std::coroutine_handle<spawned_promise>;

 public:
  scheduler_ref scheduler;
  /// Set once the outcome (the value, or `error`) is final; join_handle waits on it.
  manual_reset_event finished;
  /// What escaped the task, if anything.
  std::exception_ptr error;
  /// Whether a join took the outcome; written before the handle lets go of the frame.
  bool taken = false;

  [[nodiscard]] scheduler_ref asyncband_scheduler() const noexcept { return scheduler; }
  spawned<T> get_return_object() noexcept { return {handle_type::from_promise(*this)}; }
  std::suspend_always initial_suspend() noexcept { return {}; }
  auto final_suspend() noexcept {
    struct finish {
      bool await_ready() noexcept { return false; }
      void await_suspend(handle_type h) noexcept { spawned_promise::finish(h); }
      void await_resume() noexcept {}
    };
    return finish{};
  }
  void unhandled_exception() noexcept { error = std::current_exception(); }

  /// One owner lets go; the last one frees the frame. An exception that nobody took by then can
  /// no longer be observed: it terminates, as an exception escaping a std::thread does.
  static void release(handle_type h) noexcept {
    spawned_promise& p = h.promise();
    if (p.owners_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (p.error && !p.taken) std::terminate();
    h.destroy();
  }

  /// The outcome, once `finished` is set: the value, or the exception rethrown. Taken once.
  T take() {
    assert(!taken && "asyncband::runtime::join_handle: the outcome was taken already");
    taken = true;
    if (error) std::rethrow_exception(error);
    if constexpr (!std::is_void_v<T>) return std::move(*this->value);
  }

 private:
  /// The root's end: publishes the outcome (waking joiners, possibly inline here), then lets go.
  /// Out of line, and nothing after release(): the frame may be gone.
  [[gnu::noinline]] static void finish(handle_type h) noexcept {
    h.promise().finished.set();
    release(h);
  }

  asyncband::detail::atomic<unsigned char> owners_{2};
};

template <class T>
spawned<T> run_spawned(task<T> t) {
  co_return co_await std::move(t);
}
inline spawned<void> run_spawned(task<void> t) {
  co_await std::move(t);
}

}  // namespace detail

/// Moves the awaiting coroutine onto `s` and, for asyncband tasks, makes `s` its scheduler.
class schedule_on {
 public:
  /// `co_await schedule_on(s)` continues on `s`.
  explicit schedule_on(scheduler_ref s) noexcept : schedule_on(s, s) {}
  /// Becomes scheduled by `s`, but makes the first hop through `first` (a pool's shared queue
  /// rather than the current worker's next slot).
  schedule_on(scheduler_ref s, scheduler_ref first) noexcept : scheduler_(s), first_(first) {
    assert(!s.empty() && !first.empty());
  }
  /// Awaiter protocol: always suspends.
  bool await_ready() const noexcept { return false; }
  /// Awaiter protocol: hands `h` to the scheduler (first through `first`).
  template <class Promise>
  void await_suspend(std::coroutine_handle<Promise> h) const noexcept {
    if constexpr (std::is_base_of_v<detail::task_promise_base, Promise>)
      h.promise().set_scheduler(scheduler_);
    first_.schedule(h);
  }
  /// Awaiter protocol: nothing to yield.
  void await_resume() const noexcept {}

 private:
  scheduler_ref scheduler_;
  scheduler_ref first_;
};

/// The handle of a spawned task: await it or join() it for the task's result (its exception
/// rethrown), or drop or detach() it to let the task run on its own.
///
/// An exception escaping a task that nobody joins (the handle was dropped or detached before it
/// was taken) terminates the program, as one escaping a std::thread does: join the handle, or
/// spawn with an on_error callback, to observe it. Move-only; awaited or joined once. Every
/// member but the move operations and detach() requires a handle that holds a task.
template <class T>
class join_handle {
  using promise_type = detail::spawned_promise<T>;
  using handle_type = std::coroutine_handle<promise_type>;

 public:
  /// Holds no task.
  join_handle() noexcept = default;
  /// Adopts one owner's share of a spawned root (spawn makes it).
  explicit join_handle(handle_type root) noexcept : root_(root) {}
  /// Takes over `other`'s task; `other` holds none.
  join_handle(join_handle&& other) noexcept : root_(std::exchange(other.root_, {})) {}
  /// Detaches the task this handle held.
  join_handle& operator=(join_handle&& other) noexcept {
    if (this != &other) {
      const join_handle previous(std::move(*this));  // goes last
      root_ = std::exchange(other.root_, {});
    }
    return *this;
  }
  join_handle(const join_handle&) = delete;
  join_handle& operator=(const join_handle&) = delete;
  ~join_handle() { detach(); }

  /// Lets the task run on its own; the handle holds nothing after.
  void detach() noexcept {
    if (root_) promise_type::release(std::exchange(root_, {}));
  }

  /// Whether it holds a task (false once moved from or detached).
  [[nodiscard]] bool joinable() const noexcept { return static_cast<bool>(root_); }
  /// Whether the task has finished (its result can be taken without waiting).
  [[nodiscard]] bool done() const noexcept { return root_.promise().finished.is_set(); }

  /// `co_await h` waits for the task and yields its result (rethrows its exception).
  auto operator co_await() & noexcept {
    return join_awaiter{root_.promise().finished.wait(), &root_.promise()};
  }
  /// As above.
  auto operator co_await() && noexcept {
    return join_awaiter{root_.promise().finished.wait(), &root_.promise()};
  }

  /// `co_await h.wait(stop)` waits for the task to finish without taking its result: ok, or
  /// cancelled if `stop` is requested first. After ok, awaiting or joining does not wait.
  auto wait(asyncband::stop_token stop) noexcept { return root_.promise().finished.wait(std::move(stop)); }

  /// Blocks the calling thread until the task finishes; returns its result (rethrows its
  /// exception). Not from a thread the task needs (the only worker of its pool).
  T join() {
    root_.promise().finished.wait_blocking();
    return root_.promise().take();
  }

 private:
  struct join_awaiter {
    decltype(std::declval<manual_reset_event&>().wait()) finished;
    promise_type* promise;
    bool await_ready() noexcept { return finished.await_ready(); }
    template <class Promise>
    decltype(auto) await_suspend(std::coroutine_handle<Promise> h) {
      return finished.await_suspend(h);
    }
    T await_resume() {
      finished.await_resume();
      return promise->take();
    }
  };

  handle_type root_{};
};

/// Starts `t` on scheduler `s` and returns its join_handle. Dropping the handle detaches the
/// task (its frame frees itself at its end); an exception escaping it then terminates.
template <class T>
join_handle<T> spawn(scheduler_ref s, task<T> t) {
  auto root = detail::run_spawned(std::move(t));
  root.handle.promise().scheduler = s;
  join_handle<T> handle(root.handle);  // before it starts: it may finish at once elsewhere
  s.schedule(root.handle);
  return handle;
}

/// Starts `t` on scheduler `s` without a handle; an exception escaping it is passed to
/// `on_error(std::exception_ptr)` on the thread where the task ended. `on_error` must not throw
/// (an exception from it terminates).
template <class T, class OnError>
  requires std::invocable<OnError&, std::exception_ptr>
void spawn(scheduler_ref s, task<T> t, OnError on_error) {
  auto root = detail::run_reporting(std::move(t), std::move(on_error));
  root.handle.promise().scheduler = s;
  s.schedule(root.handle);
}

}  // namespace asyncband::runtime
