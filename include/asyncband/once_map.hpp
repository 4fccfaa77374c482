// SPDX-License-Identifier: Apache-2.0
// asyncband/once_map.hpp
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "detail/keyed_cells.hpp"
#include "once_cell.hpp"
#include "stop_token.hpp"

namespace asyncband {

/// A per-key once-computation cache: each key's value is computed once, by an asynchronous
/// initialiser, and kept (Asyncband's OnceMap).
///
///   asyncband::once_map<std::string, user> users;
///   user u = co_await users.compute(id, [&]() -> task<user> { co_return co_await db.load(id); });
///
/// Contract
/// - Each key has an entry: a once_cell<V> (see its contract: one run at a time, a failed run
///   passes to the oldest waiting caller, cancellation passes on a run it was granted). Different
///   keys never wait on each other: the map's own lock is held only to find or insert an entry,
///   never while an initialiser runs or a waiter resumes.
/// - Values are returned by copy. An entry can be discarded or removed while callers still
///   read it, so a reference could dangle; for a large or shared V, use
///   `once_map<K, std::shared_ptr<const V>>` and copy the pointer.
/// - compute(key, f) yields the key's value, running f if the entry is empty and nobody is
///   computing it. try_compute(key, f): f yields an expected_like; an error caches nothing and
///   reaches that caller only (the next waiter runs its own f).
/// - discard(key) drops the key's entry, finished or in flight: the next compute runs again.
///   Calls already waiting on the dropped entry still complete with its value (or run their
///   own f on it if its run fails). remove(key) does the same and returns the value, if any.
/// - Synchronization: a value's construction happens-before every call that returns it.
/// - An entry whose every call failed or was cancelled is removed when its last caller leaves:
///   failing keys leave nothing behind.
/// - A caller woken by a run may destroy the map at once (last one out): calls reach the map's
///   shared table through their own reference, never the map. Otherwise the map must outlive
///   its calls. The map allocates its table once.
/// - Hash, Eq, and K's copy and destruction run under the map's lock (as in any locked map):
///   they must not call into the map, and Hash and Eq must not throw for a key in the map (a
///   caller's departure looks its entry up from a destructor). Nothing else of the user's does.
/// - Allocation: a call allocates only when it inserts a key's entry or runs its initialiser.
template <class K, class V, class Hash = std::hash<K>, class Eq = std::equal_to<K>>
class once_map {
  friend struct detail::once_ops;
  using table = detail::keyed_cells<K, V, Hash, Eq, detail::on_landing::keep>;
  using ticket = typename table::ticket;
  template <class F>
  using compute_forms = detail::once_forms<detail::cell_init_op<ticket, V, F>>;
  template <class F>
  using try_compute_forms = detail::once_forms<detail::cell_try_init_op<ticket, V, F>>;

 public:
  once_map() = default;
  once_map(const once_map&) = delete;
  once_map& operator=(const once_map&) = delete;
  ~once_map() = default;

  /// `co_await m.compute(key, f)` yields the key's value (a copy).
  template <class F>
  auto compute(const K& key, F f) {
    return compute_forms<F>::await(join(key), std::move(f));
  }
  /// Yields result<V>: the value, or cancelled.
  template <class F>
  auto compute(const K& key, F f, asyncband::stop_token stop) {
    return compute_forms<F>::await_until_stopped(std::move(stop), join(key), std::move(f));
  }
  /// The plain-thread twin.
  template <class F>
  V compute_blocking(const K& key, F f) {
    return compute_forms<F>::block(join(key), std::move(f));
  }
  /// The plain-thread twin, until `stop` is requested.
  template <class F>
  result<V> compute_blocking(const K& key, F f, asyncband::stop_token stop) {
    return compute_forms<F>::block_until_stopped(std::move(stop), join(key), std::move(f));
  }
  /// The plain-thread twin, waiting at most `timeout` (a run, once started, is not bounded).
  template <class F, class Rep, class Period>
  result<V> compute_timeout(const K& key, F f, std::chrono::duration<Rep, Period> timeout) {
    return compute_forms<F>::block_for(timeout, join(key), std::move(f));
  }

  /// `co_await m.try_compute(key, f)` yields init_result<V, E>: the value, or the error this
  /// caller's own f yielded (nothing is cached then).
  template <class F>
  auto try_compute(const K& key, F f) {
    return try_compute_forms<F>::await(join(key), std::move(f));
  }
  /// Yields result<init_result<V, E>>: cancelled, or as above.
  template <class F>
  auto try_compute(const K& key, F f, asyncband::stop_token stop) {
    return try_compute_forms<F>::await_until_stopped(std::move(stop), join(key), std::move(f));
  }
  /// The plain-thread twin.
  template <class F>
  auto try_compute_blocking(const K& key, F f) {
    return try_compute_forms<F>::block(join(key), std::move(f));
  }
  /// The plain-thread twin, until `stop` is requested.
  template <class F>
  auto try_compute_blocking(const K& key, F f, asyncband::stop_token stop) {
    return try_compute_forms<F>::block_until_stopped(std::move(stop), join(key), std::move(f));
  }
  /// The plain-thread twin, waiting at most `timeout`.
  template <class F, class Rep, class Period>
  auto try_compute_timeout(const K& key, F f, std::chrono::duration<Rep, Period> timeout) {
    return try_compute_forms<F>::block_for(timeout, join(key), std::move(f));
  }

  /// The key's value if it is computed (a copy); never waits.
  [[nodiscard]] std::optional<V> get(const K& key) const { return table_->get(key); }

  /// Drops the key's entry, computed or in flight; true if there was one.
  bool discard(const K& key) { return table_->erase(key); }

  /// Drops the key's entry and returns its value if it was computed (a copy: callers may
  /// still be reading it).
  std::optional<V> remove(const K& key) { return table_->remove(key); }

  /// The number of entries (computed, or with a call in progress).
  [[nodiscard]] std::size_t size() const { return table_->size(); }

 private:
  ticket join(const K& key) { return table::join(table_, key); }

  std::shared_ptr<table> table_ = std::make_shared<table>();
};

}  // namespace asyncband
