// asyncband/once_map.hpp
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <unordered_map>
#include <utility>

#include "once_cell.hpp"

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
/// - The map must outlive every pending call (each call keeps its entry alive by itself).
/// - Hash, Eq, and K's copy and destruction run under the map's lock (as in any locked map):
///   they must not call into the map. Nothing else of the user's does.
/// - Allocation: a call allocates only when it inserts a key's entry or runs its initialiser.
template <class K, class V, class Hash = std::hash<K>, class Eq = std::equal_to<K>>
class once_map {
  friend struct detail::once_ops;
  struct entry {
    once_cell<V> cell;
  };
  /// A call's hold on its entry (detail::cell_init_op's CellRef).
  struct entry_ref {
    std::shared_ptr<entry> held;
    [[nodiscard]] once_cell<V>& get() const noexcept { return held->cell; }
    static void published() noexcept {}
  };
  template <class F>
  using compute_forms = detail::once_forms<detail::cell_init_op<entry_ref, V, F>>;
  template <class F>
  using try_compute_forms = detail::once_forms<detail::cell_try_init_op<entry_ref, V, F>>;

 public:
  once_map() = default;
  once_map(const once_map&) = delete;
  once_map& operator=(const once_map&) = delete;
  ~once_map() = default;

  /// `co_await m.compute(key, f)` yields the key's value (a copy).
  template <class F>
  auto compute(const K& key, F f) {
    return compute_forms<F>::await(entry_for(key), std::move(f));
  }
  /// Yields result<V>: the value, or cancelled.
  template <class F>
  auto compute(const K& key, F f, std::stop_token stop) {
    return compute_forms<F>::await_until_stopped(std::move(stop), entry_for(key), std::move(f));
  }
  /// The plain-thread twin.
  template <class F>
  V compute_blocking(const K& key, F f) {
    return compute_forms<F>::block(entry_for(key), std::move(f));
  }
  /// The plain-thread twin, until `stop` is requested.
  template <class F>
  result<V> compute_blocking(const K& key, F f, std::stop_token stop) {
    return compute_forms<F>::block_until_stopped(std::move(stop), entry_for(key), std::move(f));
  }
  /// The plain-thread twin, waiting at most `timeout` (a run, once started, is not bounded).
  template <class F, class Rep, class Period>
  result<V> compute_timeout(const K& key, F f, std::chrono::duration<Rep, Period> timeout) {
    return compute_forms<F>::block_for(timeout, entry_for(key), std::move(f));
  }

  /// `co_await m.try_compute(key, f)` yields init_result<V, E>: the value, or the error this
  /// caller's own f yielded (nothing is cached then).
  template <class F>
  auto try_compute(const K& key, F f) {
    return try_compute_forms<F>::await(entry_for(key), std::move(f));
  }
  /// Yields result<init_result<V, E>>: cancelled, or as above.
  template <class F>
  auto try_compute(const K& key, F f, std::stop_token stop) {
    return try_compute_forms<F>::await_until_stopped(std::move(stop), entry_for(key), std::move(f));
  }
  /// The plain-thread twin.
  template <class F>
  auto try_compute_blocking(const K& key, F f) {
    return try_compute_forms<F>::block(entry_for(key), std::move(f));
  }
  /// The plain-thread twin, until `stop` is requested.
  template <class F>
  auto try_compute_blocking(const K& key, F f, std::stop_token stop) {
    return try_compute_forms<F>::block_until_stopped(std::move(stop), entry_for(key), std::move(f));
  }
  /// The plain-thread twin, waiting at most `timeout`.
  template <class F, class Rep, class Period>
  auto try_compute_timeout(const K& key, F f, std::chrono::duration<Rep, Period> timeout) {
    return try_compute_forms<F>::block_for(timeout, entry_for(key), std::move(f));
  }

  /// The key's value if it is computed (a copy); never waits.
  [[nodiscard]] std::optional<V> get(const K& key) const {
    const std::shared_ptr<entry> e = find(key);
    if (e == nullptr) return std::nullopt;
    const V* value = e->cell.get();
    return value == nullptr ? std::nullopt : std::optional<V>(*value);
  }

  /// Drops the key's entry, computed or in flight; true if there was one.
  bool discard(const K& key) { return take_entry(key) != nullptr; }

  /// Drops the key's entry and returns its value if it was computed (a copy: callers may
  /// still be reading it).
  std::optional<V> remove(const K& key) {
    const std::shared_ptr<entry> e = take_entry(key);
    if (e == nullptr) return std::nullopt;
    const V* value = e->cell.get();
    return value == nullptr ? std::nullopt : std::optional<V>(*value);
  }

  /// The number of entries (computed or not).
  [[nodiscard]] std::size_t size() const {
    const std::lock_guard lock(mutex_);
    return entries_.size();
  }

 private:
  /// The key's entry, inserted if missing. The entry is made outside the lock and only when
  /// missing, so a lookup of an existing key allocates nothing.
  entry_ref entry_for(const K& key) {
    if (std::shared_ptr<entry> e = find(key)) return {std::move(e)};
    auto made = std::make_shared<entry>();
    const std::lock_guard lock(mutex_);
    return {entries_.try_emplace(key, std::move(made)).first->second};
  }

  std::shared_ptr<entry> find(const K& key) const {
    const std::lock_guard lock(mutex_);
    const auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : it->second;
  }

  /// Unlinks the key's entry under the lock; the caller lets go of it after the lock.
  std::shared_ptr<entry> take_entry(const K& key) {
    const std::lock_guard lock(mutex_);
    const auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    std::shared_ptr<entry> e = std::move(it->second);
    entries_.erase(it);
    return e;
  }

  mutable std::mutex mutex_;
  std::unordered_map<K, std::shared_ptr<entry>, Hash, Eq> entries_;
};

}  // namespace asyncband
