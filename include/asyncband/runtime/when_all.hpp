// SPDX-License-Identifier: Apache-2.0
// asyncband/runtime/when_all.hpp: run several tasks concurrently and wait for all of them.
#pragma once

#include "../version.hpp"  // first: a build below C++20 stops there, with one message

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "../detail/atomic.hpp"
#include "../scheduler.hpp"
#include "task.hpp"

namespace asyncband::runtime {
namespace detail {

/// Counts the children still running, plus one for the parent until it has started them all;
/// whoever brings it to zero continues the parent.
struct when_all_counter {
  explicit when_all_counter(std::size_t children) : remaining(children + 1) {}
  asyncband::detail::atomic<std::size_t> remaining;
  std::coroutine_handle<> parent;
  scheduler_ref scheduler;

  [[nodiscard]] bool finish_one() noexcept { return remaining.fetch_sub(1, std::memory_order_acq_rel) == 1; }
};

/// The wrapper coroutine around one child: awaits it, stores its result, counts down.
class when_all_child {
 public:
  struct promise_type {
    when_all_counter* counter = nullptr;
    std::exception_ptr error;

    [[nodiscard]] scheduler_ref asyncband_scheduler() const noexcept { return counter->scheduler; }
    when_all_child get_return_object() noexcept {
      return when_all_child(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    auto final_suspend() noexcept {
      struct continue_parent {
        bool await_ready() noexcept { return false; }
        std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) noexcept {
          when_all_counter& c = *h.promise().counter;
          if (c.finish_one()) return c.parent;
          return std::noop_coroutine();
        }
        void await_resume() noexcept {}
      };
      return continue_parent{};
    }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { error = std::current_exception(); }
  };

  when_all_child(when_all_child&& o) noexcept : handle_(std::exchange(o.handle_, {})) {}
  when_all_child(const when_all_child&) = delete;
  when_all_child& operator=(const when_all_child&) = delete;
  when_all_child& operator=(when_all_child&&) = delete;
  ~when_all_child() {
    if (handle_) handle_.destroy();
  }

  void start(when_all_counter& c) noexcept {
    handle_.promise().counter = &c;
    c.scheduler.resume(handle_);
  }
  void rethrow_if_failed() const {
    if (handle_.promise().error) std::rethrow_exception(handle_.promise().error);
  }

 private:
  explicit when_all_child(std::coroutine_handle<promise_type> h) noexcept : handle_(h) {}
  std::coroutine_handle<promise_type> handle_;
};

template <class T>
using stored_t = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

template <class T>
when_all_child run_child(task<T> t, std::optional<stored_t<T>>& out) {
  if constexpr (std::is_void_v<T>) {
    co_await std::move(t);
    out.emplace();
  } else {
    out.emplace(co_await std::move(t));
  }
}

/// Starts every child (posted to the parent's scheduler when it has one, so they run in
/// parallel; inline one after another otherwise) and suspends the parent until all are done.
class start_children {
 public:
  start_children(std::vector<when_all_child>& children, when_all_counter& counter) noexcept
      : children_(children), counter_(counter) {}
  bool await_ready() const noexcept { return false; }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> parent) noexcept {
    counter_.parent = parent;
    counter_.scheduler = scheduler_of(parent);
    for (auto& child : children_) child.start(counter_);
    return !counter_.finish_one();  // the last child may already have finished
  }
  void await_resume() const {
    for (auto& child : children_) child.rethrow_if_failed();
  }

 private:
  std::vector<when_all_child>& children_;
  when_all_counter& counter_;
};

}  // namespace detail

/// Runs every task concurrently; yields their results in order (std::monostate for void tasks).
/// The first exception (in argument order) is rethrown after all have finished.
template <class... Ts>
task<std::tuple<detail::stored_t<Ts>...>> when_all(task<Ts>... tasks) {
  std::tuple<std::optional<detail::stored_t<Ts>>...> results;
  std::vector<detail::when_all_child> children;
  children.reserve(sizeof...(Ts));
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (children.push_back(detail::run_child(std::move(tasks), std::get<I>(results))), ...);
  }(std::index_sequence_for<Ts...>{});
  detail::when_all_counter counter(children.size());
  co_await detail::start_children(children, counter);
  co_return std::apply([](auto&... r) { return std::tuple<detail::stored_t<Ts>...>(std::move(*r)...); },
                       results);
}

/// Runs every task of the vector concurrently; yields their results in order.
template <class T>
task<std::vector<detail::stored_t<T>>> when_all(std::vector<task<T>> tasks) {
  std::vector<std::optional<detail::stored_t<T>>> results(tasks.size());
  std::vector<detail::when_all_child> children;
  children.reserve(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i)
    children.push_back(detail::run_child(std::move(tasks[i]), results[i]));
  detail::when_all_counter counter(children.size());
  co_await detail::start_children(children, counter);
  std::vector<detail::stored_t<T>> out;
  out.reserve(results.size());
  for (auto& r : results) out.push_back(std::move(*r));
  co_return out;
}

}  // namespace asyncband::runtime
