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
///   Hash and Eq must not throw for a key already in the group: a caller's departure looks its
///   flight up from a destructor (a throw while a flight lands only fails that run).
/// - The group must outlive every pending call, but a caller whose wait completed may destroy
///   it at once, even while the calls that woke it are still returning: those reach the group's
///   shared state through their own reference, never the group. The group allocates that state
///   once; a call allocates only when it starts a flight or runs its f.
template <class K, class V, class Hash = std::hash<K>, class Eq = std::equal_to<K>>
class group {
  friend struct asyncband::detail::once_ops;
  struct flight {
    explicit flight(const K& k) : key(k) {}
    K key;
    once_cell<V> cell;
    std::size_t callers = 0;  // guarded by the group's lock
  };

  class state;

  /// A caller's membership of a flight (detail::cell_init_op's CellRef): leaving last removes a
  /// flight that never landed (every run failed, nobody waits), so no key is left behind.
  /// It holds the group's state, not the group: a caller may leave after its call woke others
  /// (a failed run passed on, a late cancellation, a frame destroyed mid-run) or after the
  /// landing woke it, and a caller woken so may destroy the group at once ("last one out").
  class ticket {
   public:
    ticket(std::shared_ptr<state> owner, std::shared_ptr<flight> joined) noexcept
        : state_(std::move(owner)), flight_(std::move(joined)) {}
    ticket(ticket&& other) noexcept = default;
    ticket& operator=(ticket&&) = delete;
    ticket(const ticket&) = delete;
    ticket& operator=(const ticket&) = delete;
    ~ticket() {
      if (state_ != nullptr) state_->leave(*flight_);
    }

    [[nodiscard]] once_cell<V>& get() const noexcept { return flight_->cell; }
    /// The leader's result is in: the flight leaves the group before anyone is woken, and the
    /// leader is done with the group (a follower it wakes may destroy the group at once).
    void published() { std::exchange(state_, nullptr)->land(*flight_); }

   private:
    std::shared_ptr<state> state_;
    std::shared_ptr<flight> flight_;
  };

  /// The group's flights and their lock, shared by the group and every ticket.
  class state {
   public:
    /// Joins the key's flight, or starts one. The flight is made outside the lock, and only when
    /// none is in progress.
    static ticket join(const std::shared_ptr<state>& self, const K& key) {
      {
        const std::lock_guard lock(self->mutex_);
        if (const auto it = self->flights_.find(key); it != self->flights_.end()) {
          ++it->second->callers;
          return ticket(self, it->second);
        }
      }
      return join_with(self, key, std::make_shared<flight>(key));
    }

    bool forget(const K& key) {
      std::shared_ptr<flight> gone;  // released after the lock
      const std::lock_guard lock(mutex_);
      const auto it = flights_.find(key);
      if (it == flights_.end()) return false;
      gone = std::move(it->second);
      flights_.erase(it);
      return true;
    }

    [[nodiscard]] std::size_t size() const {
      const std::lock_guard lock(mutex_);
      return flights_.size();
    }

    /// The flight's result is in: it leaves the group (if forget() has not taken it out already).
    void land(flight& f) {
      std::shared_ptr<flight> gone;
      const std::lock_guard lock(mutex_);
      unlink(f, gone);
    }

    /// A caller is done with its flight; the last one out removes a flight that never landed.
    void leave(flight& f) {
      std::shared_ptr<flight> gone;
      const std::lock_guard lock(mutex_);
      if (--f.callers == 0) unlink(f, gone);
    }

   private:
    /// Inserts `made` unless another caller's flight for the key got in first (then joins that).
    static ticket join_with(const std::shared_ptr<state>& self, const K& key, std::shared_ptr<flight> made) {
      std::shared_ptr<flight> unused;  // released after the lock
      const std::lock_guard lock(self->mutex_);
      auto [it, inserted] = self->flights_.try_emplace(key, nullptr);
      if (inserted) {
        it->second = std::move(made);
      } else {
        unused = std::move(made);
      }
      ++it->second->callers;
      return ticket(self, it->second);
    }

    /// Under the lock: removes `f` from the group if the key still maps to it.
    void unlink(flight& f, std::shared_ptr<flight>& gone) {
      const auto it = flights_.find(f.key);
      if (it == flights_.end() || it->second.get() != &f) return;
      gone = std::move(it->second);
      flights_.erase(it);
    }

    mutable std::mutex mutex_;
    std::unordered_map<K, std::shared_ptr<flight>, Hash, Eq> flights_;
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
  bool forget(const K& key) { return state_->forget(key); }

  /// The number of keys with a flight in progress (a snapshot).
  [[nodiscard]] std::size_t size() const { return state_->size(); }

 private:
  ticket join(const K& key) { return state::join(state_, key); }
  std::shared_ptr<state> state_ = std::make_shared<state>();
};

}  // namespace asyncband::singleflight
