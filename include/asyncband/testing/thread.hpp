// SPDX-License-Identifier: Apache-2.0
// asyncband/testing/thread.hpp: model threads of an explored run (testing::thread), and what a
// test body does in them: testing::yield() and testing::check().
/// \file
/// asyncband::testing::thread, asyncband::testing::yield and asyncband::testing::check.
#pragma once

#include "asyncband/version.hpp"  // first: a build below C++20 stops there, with one message

#include <concepts>
#include <cstddef>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>

#include "asyncband/testing/detail/execution.hpp"

namespace asyncband::testing {

/// A thread of an explored test body, with std::thread's interface (constructed from a
/// callable and its arguments, joined once).
///
/// Contract
/// - Created by a model thread of an explored run (asyncband::testing::explore), it is a model
///   thread of that run: only one model thread runs at a time, and the explorer chooses which
///   at every scheduling point. Its creation (it may run at once), its end and join() are
///   scheduling points; join() blocks the model thread until the thread has finished.
/// - An exception escaping the function fails the run (failure_kind::exception).
/// - Destroyed while joinable, it fails the run (failure_kind::misuse: std::thread would call
///   std::terminate), unless the run has failed already.
/// - Created elsewhere, it is a plain std::thread.
class thread {
 public:
  /// No thread.
  thread() noexcept = default;

  /// Runs `f(args...)` (copies of them, as std::thread makes) in a new thread: a model thread
  /// when the caller is one.
  template <class F, class... Args>
    requires(!std::same_as<std::remove_cvref_t<F>, thread> &&
             std::invocable<std::decay_t<F>, std::decay_t<Args>...>)
  explicit thread(F&& f, Args&&... args) {
    auto call = [fn = std::forward<F>(f), ... as = std::forward<Args>(args)]() mutable {
      std::invoke(std::move(fn), std::move(as)...);
    };
    if (detail::execution* e = detail::current()) {
      exec_ = e;
      id_ = e->spawn(detail::make_body(std::move(call)));
    } else {
      plain_ = std::thread(std::move(call));
    }
  }

  thread(const thread&) = delete;
  thread& operator=(const thread&) = delete;

  /// Takes over `other`'s thread; `other` has none after.
  thread(thread&& other) noexcept
      : plain_(std::move(other.plain_)),
        exec_(std::exchange(other.exec_, nullptr)),
        id_(std::exchange(other.id_, detail::no_thread)) {}

  /// Takes over `other`'s thread; this one must not be joinable (as for std::thread).
  thread& operator=(thread&& other) noexcept {
    if (this != &other) {
      if (joinable()) joinable_destroyed();
      plain_ = std::move(other.plain_);
      exec_ = std::exchange(other.exec_, nullptr);
      id_ = std::exchange(other.id_, detail::no_thread);
    }
    return *this;
  }

  /// Joinable: see the class contract.
  ~thread() {
    if (joinable()) joinable_destroyed();
  }

  /// Whether there is a thread not joined yet.
  [[nodiscard]] bool joinable() const noexcept { return id_ != detail::no_thread || plain_.joinable(); }

  /// Waits until the thread has finished.
  void join() {
    if (id_ == detail::no_thread) return plain_.join();
    if (detail::current() != exec_) {
      throw std::logic_error("asyncband::testing::thread::join: not joined by a model thread of its run");
    }
    const std::size_t id = std::exchange(id_, detail::no_thread);
    exec_->join(id);
  }

  /// The model thread's number in its run (0 is the body's thread; then in creation order),
  /// or detail::no_thread for a plain thread or none.
  [[nodiscard]] std::size_t model_id() const noexcept { return id_; }

 private:
  void joinable_destroyed() noexcept {
    if (id_ == detail::no_thread || detail::current() != exec_) {
      std::terminate();  // a plain std::thread would
    }
    if (std::uncaught_exceptions() == 0 && !exec_->failed()) {
      exec_->fail(failure_kind::misuse, "thread " + std::to_string(id_) +
                                            " destroyed while joinable (std::thread would call "
                                            "std::terminate): join it");
    }
    id_ = detail::no_thread;
  }

  std::thread plain_;                   // outside a run
  detail::execution* exec_ = nullptr;   // in a run: the run
  std::size_t id_ = detail::no_thread;  // in a run: the model thread
};

/// A scheduling point where the calling model thread lets others run: the strategies prefer
/// another thread here, and switching is no preemption. A spin loop in an explored body must
/// call it (a loop without scheduling points runs into options::max_steps, or forever without
/// any operation on a model primitive). Outside a run: std::this_thread::yield().
inline void yield() {
  if (detail::execution* e = detail::current()) return e->yield_point();
  std::this_thread::yield();
}

/// An assertion of an explored body: when `condition` is false in a model thread, the run fails
/// (failure_kind::check, with `message` and the caller's file and line) and the thread ends.
/// Outside a run, it throws std::logic_error with the same text. (`file` and `line` are the
/// caller's: std::source_location is not in clang 14 with libstdc++.)
inline void check(bool condition, std::string_view message, const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
  if (condition) return;
  std::string text(message);
  text += " (";
  text += file;
  text += ":";
  text += std::to_string(line);
  text += ")";
  if (detail::execution* e = detail::current()) return e->check_failed(text);
  throw std::logic_error("asyncband::testing::check failed: " + text);
}

}  // namespace asyncband::testing
