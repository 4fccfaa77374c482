// SPDX-License-Identifier: Apache-2.0
// asyncband/once_cell.hpp
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <cassert>
#include <chrono>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "detail/initializer.hpp"
#include "detail/once_gate.hpp"
#include "detail/wait_functions.hpp"
#include "init_result.hpp"
#include "result.hpp"
#include "stop_token.hpp"

namespace asyncband {

template <class T>
class once_cell;

namespace detail {

/// Reaches a once_cell's insides for the ops below, which once_map and singleflight reuse.
struct cell_access {
  template <class T>
  static once_gate& gate(once_cell<T>& c) noexcept {
    return c.gate_;
  }
  template <class T>
  static T& value(once_cell<T>& c) noexcept {
    return c.value_;
  }
  template <class T, class U>
  static void emplace(once_cell<T>& c, U&& v) {
    std::construct_at(std::addressof(c.value_), std::forward<U>(v));
  }
  /// A run's value: constructs it in the cell, tells `ref` (published()), completes the gate.
  /// If published() throws (a singleflight flight leaving its group runs Hash and Eq), the value
  /// goes again and the run fails: a cell holds a value exactly while its gate is completed.
  template <class CellRef, class U>
  static void publish(CellRef& ref, U&& v, run_grant& grant) {
    auto& cell = ref.get();
    emplace(cell, std::forward<U>(v));
    try {
      ref.published();
    } catch (...) {
      std::destroy_at(std::addressof(cell.value_));
      throw;
    }
    grant.complete();
  }
};

/// The cell of a once_cell's own calls (once_map and singleflight hold theirs through a shared
/// entry instead). `published()` runs once the value is in, before the gate completes.
template <class T>
struct plain_cell_ref {
  once_cell<T>* cell;
  [[nodiscard]] once_cell<T>& get() const noexcept { return *cell; }
  static void published() noexcept {}
};

/// get_or_init's op: the initialiser's result is the value, constructed in the cell from it.
/// Yield is T& (a once_cell) or T (the maps, which hand out copies).
template <class CellRef, class Yield, class F>
class cell_init_op {
 public:
  using yield_type = Yield;
  using initializer_type = F;

  cell_init_op(CellRef ref, F f) : ref_(std::move(ref)), f_(std::move(f)) {}

  once_gate& gate() noexcept { return cell_access::gate(ref_.get()); }
  F& initializer() noexcept { return f_; }
  template <class R>
  void accept(R&& value, run_grant& grant) {
    cell_access::publish(ref_, std::forward<R>(value), grant);
  }
  Yield finish_run() { return cell_access::value(ref_.get()); }
  Yield finish_completed() { return cell_access::value(ref_.get()); }

 private:
  CellRef ref_;
  F f_;
};

/// get_or_try_init's op: the initialiser yields an expected_like; an error is this caller's
/// alone, and leaves the cell empty (the run passes on).
template <class CellRef, class Yield, class F>
class cell_try_init_op {
  using yielded = std::remove_cvref_t<initializer_value_t<F>>;
  static_assert(
      expected_like<yielded>,
      "asyncband: a try_ initialiser must yield an expected-like value (has_value(), value(), error())");
  using error_type = error_type_of<yielded>;

 public:
  using yield_type = init_result<Yield, error_type>;
  using initializer_type = F;

  cell_try_init_op(CellRef ref, F f) : ref_(std::move(ref)), f_(std::move(f)) {}

  once_gate& gate() noexcept { return cell_access::gate(ref_.get()); }
  F& initializer() noexcept { return f_; }
  template <class R>
  void accept(R&& outcome, run_grant& grant) {
    if (!outcome.has_value()) {
      error_.emplace(std::forward<R>(outcome).error());
      return;  // the grant stays held: the caller fails it, and the run passes on
    }
    cell_access::publish(ref_, std::forward<R>(outcome).value(), grant);
  }
  yield_type finish_run() {
    if (error_) return yield_type::with_error(std::move(*error_));
    return finish_completed();
  }
  yield_type finish_completed() { return yield_type::with_value(cell_access::value(ref_.get())); }

 private:
  CellRef ref_;
  F f_;
  std::optional<error_type> error_;
};

}  // namespace detail

/// A cell written once, by an asynchronous initialiser (tokio's and Asyncband's OnceCell).
///
///   asyncband::once_cell<config> cfg;
///   const config& c = co_await cfg.get_or_init([]() -> task<config> { co_return co_await load(); });
///
/// Contract
/// - get() is lock-free (one acquire load): the value, or nullptr while the cell is empty.
/// - get_or_init(f) yields a reference to the value, running the caller's own `f` if the cell
///   is empty and nobody else is initialising it. `f` is called as once::call_once calls it
///   (with the stop token if it takes one; any awaitable, or a plain function) and yields the
///   value (or something T is constructible from). At most one initialiser runs at a time; if
///   it fails (throws, or its coroutine is destroyed), the cell stays empty, the exception
///   reaches that caller only, and the oldest waiting caller runs its own `f` next.
/// - get_or_try_init(f): `f` yields an expected_like value; an error, like an exception, leaves
///   the cell empty and reaches that caller only (as an init_result holding it), and the next
///   waiter runs its own `f`.
/// - The value is constructed once, in the cell, and never moved afterwards: references and
///   pointers to it stay valid until take(), into_inner() or the cell's destruction.
/// - Synchronization: the value's construction happens-before every get() that returns it and
///   every wait that completes with it. The cell synchronizes initialisation only: reading and
///   writing the value afterwards is the user's business (as with a const object shared by
///   threads, reads are safe).
/// - Cancellation, waking, timeouts and destruction: as asyncband::once (a cancelled wait
///   passes on a run it was granted; a running `f` is never interrupted).
/// - set(v) and try_insert(v) never wait: while another caller is initialising, they hand the
///   value back.
/// - take() and into_inner() are for an owner with exclusive access (no call in progress).
/// - A caller woken by the completion may destroy the cell at once (last one out); the
///   reference the running caller then gets back refers to the destroyed value (as would any
///   reference into a destroyed object): only a program that knows the cell outlives it reads it.
template <class T>
class once_cell : public detail::wait_functions<once_cell<T>> {
  static_assert(!std::is_reference_v<T> && std::is_destructible_v<T>,
                "asyncband::once_cell holds an object type");
  class wait_node;
  friend class detail::wait_functions<once_cell>;
  friend struct detail::cell_access;
  friend struct detail::once_ops;
  friend struct asyncband::detail::debug_access;
  template <class F>
  using init_forms = detail::once_forms<detail::cell_init_op<detail::plain_cell_ref<T>, T&, F>>;
  template <class F>
  using try_init_forms = detail::once_forms<detail::cell_try_init_op<detail::plain_cell_ref<T>, T&, F>>;

 public:
  /// What try_insert returns.
  struct insert_result {
    /// The value in the cell afterwards; nullptr if another caller is still initialising it.
    T* value;
    /// The value handed back when it was not inserted.
    std::optional<T> rejected;
    /// The value was inserted (nothing was handed back).
    [[nodiscard]] bool inserted() const noexcept { return !rejected.has_value(); }
  };

  /// An empty cell.
  once_cell() noexcept {}  // NOLINT(modernize-use-equals-default): the union member stays unconstructed
  /// A cell holding `value` from the start.
  explicit once_cell(T value) : value_(std::move(value)), gate_(true) {}
  /// A cell holding a value constructed from `args`.
  template <class... Args>
  explicit once_cell(std::in_place_t /*unused*/, Args&&... args)
      : value_(std::forward<Args>(args)...), gate_(true) {}
  once_cell(const once_cell&) = delete;
  once_cell& operator=(const once_cell&) = delete;
  /// Debug builds assert that no call is pending.
  ~once_cell() {
    assert((detail::model_run_failed() || (gate_.no_waiters_left() && !gate_.is_running())) &&
           "asyncband::once_cell destroyed with pending calls");
    if (gate_.is_completed()) value_.~T();
  }

  /// The value, or nullptr while empty. One acquire load.
  [[nodiscard]] T* get() noexcept { return gate_.is_completed() ? std::addressof(value_) : nullptr; }
  /// The value, or nullptr while empty. One acquire load.
  [[nodiscard]] const T* get() const noexcept {
    return gate_.is_completed() ? std::addressof(value_) : nullptr;
  }
  /// Whether the cell holds its value.
  [[nodiscard]] bool is_initialized() const noexcept { return gate_.is_completed(); }

  /// `co_await c.get_or_init(f)` yields T&: the value, from this caller's f or another's.
  template <class F>
  auto get_or_init(F f) {
    return init_forms<F>::await(ref(), std::move(f));
  }
  /// Yields result<T&>: the value, or cancelled.
  template <class F>
  auto get_or_init(F f, asyncband::stop_token stop) {
    return init_forms<F>::await_until_stopped(std::move(stop), ref(), std::move(f));
  }
  /// The plain-thread twin.
  template <class F>
  T& get_or_init_blocking(F f) {
    return init_forms<F>::block(ref(), std::move(f));
  }
  /// The plain-thread twin, until `stop` is requested.
  template <class F>
  result<T&> get_or_init_blocking(F f, asyncband::stop_token stop) {
    return init_forms<F>::block_until_stopped(std::move(stop), ref(), std::move(f));
  }
  /// The plain-thread twin, waiting at most `timeout` (a run, once started, is not bounded).
  template <class F, class Rep, class Period>
  result<T&> get_or_init_timeout(F f, std::chrono::duration<Rep, Period> timeout) {
    return init_forms<F>::block_for(timeout, ref(), std::move(f));
  }

  /// `co_await c.get_or_try_init(f)` yields init_result<T&, E>: the value, or the error this
  /// caller's own f yielded.
  template <class F>
  auto get_or_try_init(F f) {
    return try_init_forms<F>::await(ref(), std::move(f));
  }
  /// Yields result<init_result<T&, E>>: cancelled, or as above.
  template <class F>
  auto get_or_try_init(F f, asyncband::stop_token stop) {
    return try_init_forms<F>::await_until_stopped(std::move(stop), ref(), std::move(f));
  }
  /// The plain-thread twin.
  template <class F>
  auto get_or_try_init_blocking(F f) {
    return try_init_forms<F>::block(ref(), std::move(f));
  }
  /// The plain-thread twin, until `stop` is requested.
  template <class F>
  auto get_or_try_init_blocking(F f, asyncband::stop_token stop) {
    return try_init_forms<F>::block_until_stopped(std::move(stop), ref(), std::move(f));
  }
  /// The plain-thread twin, waiting at most `timeout`.
  template <class F, class Rep, class Period>
  auto get_or_try_init_timeout(F f, std::chrono::duration<Rep, Period> timeout) {
    return try_init_forms<F>::block_for(timeout, ref(), std::move(f));
  }

  // wait(), wait(stop), wait_blocking(), wait_blocking(stop), wait_timeout(d) (inherited):
  // wait until the cell holds its value and yield T& (result<T&>), never running anything.

  /// Stores `value` if the cell is empty and nobody is initialising it; returns the value
  /// handed back otherwise (empty when it was stored). Never waits.
  [[nodiscard]] std::optional<T> set(T value) {
    insert_result r = try_insert(std::move(value));
    return std::move(r.rejected);
  }

  /// As set(), and reports where the cell's value is (Rust's OnceCell::try_insert).
  [[nodiscard]] insert_result try_insert(T value) {
    if (!gate_.try_begin()) return {get(), std::optional<T>(std::move(value))};
    detail::run_grant grant(gate_);  // a throwing move fails it: the cell stays empty
    std::construct_at(std::addressof(value_), std::move(value));
    T* const stored = std::addressof(value_);  // before completing: a waiter may destroy the cell
    grant.complete();
    return {stored, std::nullopt};
  }

  /// Moves the value out and leaves the cell empty. Exclusive access only (no call pending).
  [[nodiscard]] std::optional<T> take() {
    if (!gate_.is_completed()) return std::nullopt;
    std::optional<T> out(std::move(value_));
    value_.~T();
    gate_.reset_exclusive();
    return out;
  }
  /// take(), for a cell about to go.
  [[nodiscard]] std::optional<T> into_inner() && { return take(); }

 private:
  class wait_node : public detail::once_gate::observer_node {
   public:
    using value_type = T&;
    explicit wait_node(once_cell* owner) noexcept : observer_node(&owner->gate_), owner_(owner) {}
    [[nodiscard]] T& take() const noexcept { return owner_->value_; }

   private:
    once_cell* owner_;
  };

  detail::plain_cell_ref<T> ref() noexcept { return {this}; }

  union {
    T value_;  // alive exactly while the gate is completed
  };
  detail::once_gate gate_;
};

}  // namespace asyncband
