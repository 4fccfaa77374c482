// asyncband/singleflight.hpp
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <unordered_map>
#include <utility>

#include "once_cell.hpp"

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
/// - Last one out: a caller resumed by another call (the leader's result, or a failed run handed
///   on to it) may destroy the group at once: each call shares the group's table of flights, so
///   the call that handed a run on still leaves its flight safely afterwards.
/// - The group must outlive every pending call otherwise. A call allocates only when it starts a
///   flight or runs its f.
template <class K, class V, class Hash = std::hash<K>, class Eq = std::equal_to<K>>
class group {
  struct flight {
    explicit flight(const K& k) : key(k) {}
    K key;
    once_cell<V> cell;
    std::size_t callers = 0;  // guarded by the table's lock
  };

  /// The flights by key and their lock, shared by the group and every call's ticket: a caller
  /// whose run failed leaves its flight after handing the run on, and the caller it handed it
  /// to may have finished and destroyed the group by then.
  struct table {
    std::mutex mutex;
    std::unordered_map<K, std::shared_ptr<flight>, Hash, Eq> flights;

    /// The flight's result is in: it leaves the table (if forget() has not taken it out already).
    void land(flight& f) {
      std::shared_ptr<flight> gone;  // released after the lock
      const std::lock_guard lock(mutex);
      unlink(f, gone);
    }

    /// A caller is done with its flight; the last one out removes a flight that never landed.
    void leave(flight& f) {
      std::shared_ptr<flight> gone;
      const std::lock_guard lock(mutex);
      if (--f.callers == 0) unlink(f, gone);
    }

    /// Under the lock: removes `f` if its key still maps to it.
    void unlink(flight& f, std::shared_ptr<flight>& gone) {
      const auto it = flights.find(f.key);
      if (it == flights.end() || it->second.get() != &f) return;
      gone = std::move(it->second);
      flights.erase(it);
    }
  };

  /// A caller's membership of a flight (detail::cell_init_op's CellRef): leaving last removes a
  /// flight that never landed (every run failed, nobody waits), so no key is left behind.
  class ticket {
   public:
    ticket(std::shared_ptr<table> owner, std::shared_ptr<flight> joined) noexcept
        : table_(std::move(owner)), flight_(std::move(joined)) {}
    ticket(ticket&& other) noexcept : table_(std::move(other.table_)), flight_(std::move(other.flight_)) {}
    ticket& operator=(ticket&&) = delete;
    ticket(const ticket&) = delete;
    ticket& operator=(const ticket&) = delete;
    ~ticket() {
      if (table_ != nullptr) table_->leave(*flight_);
    }

    [[nodiscard]] once_cell<V>& get() const noexcept { return flight_->cell; }
    /// The leader's result is in: the flight leaves the group before anyone is woken, and the
    /// leader is done with the group (a follower it wakes may destroy the group at once).
    void published() { std::exchange(table_, nullptr)->land(*flight_); }

   private:
    std::shared_ptr<table> table_;
    std::shared_ptr<flight> flight_;
  };
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
  auto work(const K& key, F f, std::stop_token stop) {
    return work_forms<F>::await_until_stopped(std::move(stop), join(key), std::move(f));
  }
  /// The plain-thread twin.
  template <class F>
  V work_blocking(const K& key, F f) {
    return work_forms<F>::block(join(key), std::move(f));
  }
  /// The plain-thread twin, until `stop` is requested.
  template <class F>
  result<V> work_blocking(const K& key, F f, std::stop_token stop) {
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
  auto try_work(const K& key, F f, std::stop_token stop) {
    return try_work_forms<F>::await_until_stopped(std::move(stop), join(key), std::move(f));
  }
  /// The plain-thread twin.
  template <class F>
  auto try_work_blocking(const K& key, F f) {
    return try_work_forms<F>::block(join(key), std::move(f));
  }
  /// The plain-thread twin, until `stop` is requested.
  template <class F>
  auto try_work_blocking(const K& key, F f, std::stop_token stop) {
    return try_work_forms<F>::block_until_stopped(std::move(stop), join(key), std::move(f));
  }
  /// The plain-thread twin, waiting at most `timeout`.
  template <class F, class Rep, class Period>
  auto try_work_timeout(const K& key, F f, std::chrono::duration<Rep, Period> timeout) {
    return try_work_forms<F>::block_for(timeout, join(key), std::move(f));
  }

  /// The next call for `key` starts a new flight; true if one was in progress.
  bool forget(const K& key) {
    std::shared_ptr<flight> gone;  // released after the lock
    const std::lock_guard lock(table_->mutex);
    const auto it = table_->flights.find(key);
    if (it == table_->flights.end()) return false;
    gone = std::move(it->second);
    table_->flights.erase(it);
    return true;
  }

  /// The number of keys with a flight in progress (a snapshot).
  [[nodiscard]] std::size_t size() const {
    const std::lock_guard lock(table_->mutex);
    return table_->flights.size();
  }

 private:
  /// Joins the key's flight, or starts one. The flight is made outside the lock, and only when
  /// none is in progress.
  ticket join(const K& key) {
    {
      const std::lock_guard lock(table_->mutex);
      if (const auto it = table_->flights.find(key); it != table_->flights.end()) {
        ++it->second->callers;
        return ticket(table_, it->second);
      }
    }
    return join_with(key, std::make_shared<flight>(key));
  }

  /// Inserts `made` unless another caller's flight for the key got in first (then joins that).
  ticket join_with(const K& key, std::shared_ptr<flight> made) {
    std::shared_ptr<flight> unused;  // released after the lock
    const std::lock_guard lock(table_->mutex);
    auto [it, inserted] = table_->flights.try_emplace(key, nullptr);
    if (inserted) {
      it->second = std::move(made);
    } else {
      unused = std::move(made);
    }
    ++it->second->callers;
    return ticket(table_, it->second);
  }

  std::shared_ptr<table> table_ = std::make_shared<table>();
};

}  // namespace asyncband::singleflight
