// SPDX-License-Identifier: Apache-2.0
// asyncband/singleflight.hpp
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <utility>

#include "detail/keyed_cells.hpp"
#include "once_cell.hpp"
#include "stop_token.hpp"

/// Coalescing of concurrent calls per key into one run, nothing cached: group.
namespace asyncband::singleflight {

/// Coalesces concurrent calls for the same key into one execution whose result they all get
/// (Go's singleflight.Group, Asyncband's singleflight), for coroutines.
///
///   asyncband::singleflight::group<std::string, page> pages;
///   page p = co_await pages.work(url, [&]() -> task<page> { co_return co_await fetch(url); });
///
/// Contract
/// - A flight is one key's execution in progress. work(key, f) joins the key's flight, or
///   starts one and runs its own f as the leader; every caller of the flight yields a copy of
///   its result. Nothing is kept afterwards: the flight leaves the group as soon as its result
///   is in, before anyone is woken, so a call that starts after that runs again.
/// - Leader failure: if the leader's f throws, or its coroutine is destroyed mid-run, or (the
///   try_ forms) yields an error, the failure reaches the leader only. The oldest waiting
///   follower becomes the leader and runs its own f; the others keep waiting for that run.
///   Never two runs of one flight at a time, never none while a follower waits.
/// - Cancellation: a follower's stop token ends only its own wait (cancelled); a run handed to
///   a follower whose stop was requested passes on. A leader's f is never interrupted: it
///   receives the stop token if it takes one and decides its own outcome.
/// - forget(key): the next call for the key starts a new flight, even while one is in progress
///   (whose callers still get its result).
/// - Synchronization: the result's construction happens-before every call that returns it.
/// - Waking: the leader's completion wakes every follower, each on its own scheduler, outside
///   every lock. The group's lock is held only to find, join, insert or remove a flight;
///   Hash, Eq and K's copy and destruction run under it and must not call into the group.
///   Hash and Eq must not throw for a key already in the group: a caller's departure looks its
///   flight up from a destructor (a throw while a flight lands only fails that run).
/// - The group must outlive every pending call, but a caller whose wait completed may destroy
///   it at once, even while the calls that woke it are still returning: those reach the group's
///   shared state through their own reference, never the group. The group allocates that state
///   once; a call allocates only when it starts a flight or runs its f.
template <class K, class V, class Hash = std::hash<K>, class Eq = std::equal_to<K>>
class group {
  friend struct asyncband::detail::once_ops;
  using table = detail::keyed_cells<K, V, Hash, Eq, detail::on_landing::unlink>;
  using ticket = typename table::ticket;
  template <class F>
  using work_forms = detail::once_forms<detail::cell_init_op<ticket, V, F>>;
  template <class F>
  using try_work_forms = detail::once_forms<detail::cell_try_init_op<ticket, V, F>>;

 public:
  group() = default;
  group(const group&) = delete;
  group& operator=(const group&) = delete;
  ~group() = default;

  /// `co_await g.work(key, f)` yields the flight's result (a copy).
  template <class F>
  auto work(const K& key, F f) {
    return work_forms<F>::await(join(key), std::move(f));
  }
  /// Yields result<V>: the result, or cancelled.
  template <class F>
  auto work(const K& key, F f, asyncband::stop_token stop) {
    return work_forms<F>::await_until_stopped(std::move(stop), join(key), std::move(f));
  }
  /// The plain-thread twin.
  template <class F>
  V work_blocking(const K& key, F f) {
    return work_forms<F>::block(join(key), std::move(f));
  }
  /// The plain-thread twin, until `stop` is requested.
  template <class F>
  result<V> work_blocking(const K& key, F f, asyncband::stop_token stop) {
    return work_forms<F>::block_until_stopped(std::move(stop), join(key), std::move(f));
  }
  /// The plain-thread twin, waiting at most `timeout` (a run, once started, is not bounded).
  template <class F, class Rep, class Period>
  result<V> work_timeout(const K& key, F f, std::chrono::duration<Rep, Period> timeout) {
    return work_forms<F>::block_for(timeout, join(key), std::move(f));
  }

  /// `co_await g.try_work(key, f)`: f yields an expected_like; yields init_result<V, E>, the
  /// flight's result or the error this caller's own f yielded.
  template <class F>
  auto try_work(const K& key, F f) {
    return try_work_forms<F>::await(join(key), std::move(f));
  }
  /// Yields result<init_result<V, E>>: cancelled, or as above.
  template <class F>
  auto try_work(const K& key, F f, asyncband::stop_token stop) {
    return try_work_forms<F>::await_until_stopped(std::move(stop), join(key), std::move(f));
  }
  /// The plain-thread twin.
  template <class F>
  auto try_work_blocking(const K& key, F f) {
    return try_work_forms<F>::block(join(key), std::move(f));
  }
  /// The plain-thread twin, until `stop` is requested.
  template <class F>
  auto try_work_blocking(const K& key, F f, asyncband::stop_token stop) {
    return try_work_forms<F>::block_until_stopped(std::move(stop), join(key), std::move(f));
  }
  /// The plain-thread twin, waiting at most `timeout`.
  template <class F, class Rep, class Period>
  auto try_work_timeout(const K& key, F f, std::chrono::duration<Rep, Period> timeout) {
    return try_work_forms<F>::block_for(timeout, join(key), std::move(f));
  }

  /// The next call for `key` starts a new flight; true if one was in progress.
  bool forget(const K& key) { return table_->erase(key); }

  /// The number of keys with a flight in progress (a snapshot).
  [[nodiscard]] std::size_t size() const { return table_->size(); }

 private:
  ticket join(const K& key) { return table::join(table_, key); }

  std::shared_ptr<table> table_ = std::make_shared<table>();
};

}  // namespace asyncband::singleflight
