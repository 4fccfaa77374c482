// SPDX-License-Identifier: Apache-2.0
// What the primitive tests share to drive waits on the test scheduler: the names every test file
// uses, a probe that records how a waiting coroutine ran, the plain and cancellable waiter
// coroutines that fill it, and starting an owned task on a test_scheduler.
#pragma once

#include <asyncband/detail/awaitable_traits.hpp>
#include <asyncband/detail/waiter.hpp>
#include <asyncband/result.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <asyncband/stop_token.hpp>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace asyncband_test {

using asyncband::wait_status;
using asyncband::detail::test_point;
using asyncband::runtime::task;
using asyncband::runtime::test_scheduler;
using namespace std::chrono_literals;

/// What a waiting coroutine reports: whether it started, how many times it ran past its wait
/// (must never exceed one), and how the wait ended. With `order` set, it appends `id` there when
/// it resumes, to record the completion order.
///
/// A test that wants more (what the primitive looked like after the wait, the wait's value)
/// derives from it and hides after_wait(primitive) / after_wait(primitive, value); the waiters
/// call the first after every wait and the second, instead, after a wait that produced a value.
struct probe {
  int id = 0;
  int started = 0;
  int resumed = 0;
  std::optional<wait_status> status;
  std::vector<int>* order = nullptr;

  void finish(wait_status st) {
    ++resumed;
    status = st;
    if (order != nullptr) order->push_back(id);
  }
  template <class... Observed>
  void after_wait(Observed&&... /*unused*/) noexcept {}
};

namespace detail {

template <class Probe, class Primitive, class Result>
void record_result(Probe& p, Primitive& primitive, Result& r) {
  p.finish(r.status());
  if constexpr (std::is_void_v<typename Result::value_type>) {
    p.after_wait(primitive);
  } else if (r.ok()) {
    p.after_wait(primitive, *r);
  } else {
    p.after_wait(primitive);
  }
}

}  // namespace detail

/// Waits once with `primitive.wait()` (no stop token) and records it in `p`.
template <class Primitive, class Probe>
task<void> plain_waiter(Primitive& primitive, Probe& p) {
  ++p.started;
  using value_type = asyncband::detail::await_result_t<decltype(primitive.wait())>;
  if constexpr (std::is_void_v<value_type>) {
    co_await primitive.wait();
    p.finish(wait_status::ok);
    p.after_wait(primitive);
  } else {
    const value_type value = co_await primitive.wait();
    p.finish(wait_status::ok);
    p.after_wait(primitive, value);
  }
}

/// Waits once with `primitive.wait(token)` and records it in `p`.
template <class Primitive, class Probe>
task<void> stoppable_waiter(Primitive& primitive, asyncband::stop_token token, Probe& p) {
  ++p.started;
  auto r = co_await primitive.wait(std::move(token));
  detail::record_result(p, primitive, r);
}

/// Spawns a waiter on `s` for each of `probes`, in order: plain at even positions, cancellable
/// with `token` at odd ones.
template <class Primitive, class Probes>
void spawn_alternating_waiters(test_scheduler& s, Primitive& primitive, Probes& probes,
                               const asyncband::stop_token& token) {
  std::size_t i = 0;
  for (auto& p : probes) {
    if (i++ % 2 == 0) {
      s.spawn(plain_waiter(primitive, p));
    } else {
      s.spawn(stoppable_waiter(primitive, token, p));
    }
  }
}

/// Queues an owned task to start on `s`. Unlike spawn(), which detaches, the test keeps the
/// frame: destroying the task destroys the coroutine wherever it is suspended.
template <class T>
void start_on(test_scheduler& s, task<T>& t) {
  t.handle().promise().set_scheduler(s.ref());
  s.schedule(t.handle());
}

/// Runs an owned task inline on this thread (e.g. inside an at() action), with `s` as the
/// scheduler its wake-ups are posted to.
template <class T>
void run_inline(test_scheduler& s, task<T>& t) {
  t.handle().promise().set_scheduler(s.ref());
  t.handle().resume();
}

/// A coroutine type with no scheduler hook: its waits resume inline on the resolving thread.
struct bare_coroutine {
  struct promise_type {
    bare_coroutine get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

}  // namespace asyncband_test
