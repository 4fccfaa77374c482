// SPDX-License-Identifier: Apache-2.0
// asyncband/testing/atomic.hpp: testing::atomic<T>, std::atomic's interface with a scheduling
// point before every operation when used by a model thread of an explored run.
/// \file
/// asyncband::testing::atomic and asyncband::testing::atomic_thread_fence.
#pragma once

#include "asyncband/version.hpp"  // first: a build below C++20 stops there, with one message

#include <array>
#include <atomic>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>

#include "asyncband/testing/detail/execution.hpp"

namespace asyncband::testing {

// NOLINTBEGIN(bugprone-exception-escape): the noexcept operations here reach
// execution::point(), which throws the run's abort exception only at points that may throw (its
// last argument); clang-tidy cannot see that flag. A throw there would be a bug, and terminate.

namespace detail {

/// The kinds of T whose std::atomic<T> has fetch_add and fetch_sub.
template <class T>
concept atomic_arithmetic = (std::integral<T> && !std::same_as<T, bool>) || std::floating_point<T>;

/// The kinds of T whose std::atomic<T> has fetch_and, fetch_or and fetch_xor.
template <class T>
concept atomic_bitwise = std::integral<T> && !std::same_as<T, bool>;

/// std::atomic<T>::difference_type, for the T that have one.
template <class T>
struct atomic_difference {};

/// Integers and floating-point values: their own type.
template <atomic_arithmetic T>
struct atomic_difference<T> {
  using difference_type = T;  ///< the argument of fetch_add and fetch_sub
};

/// Pointers: std::ptrdiff_t.
template <class T>
struct atomic_difference<T*> {
  using difference_type = std::ptrdiff_t;  ///< the argument of fetch_add and fetch_sub
};

/// The argument type of fetch_add for T (T itself where there is no fetch_add: never used).
template <class T>
using atomic_argument = std::conditional_t<std::is_pointer_v<T>, std::ptrdiff_t, T>;

/// A value for a trace: integers, booleans, floating-point values, enumerations and pointers
/// (whether null only: addresses differ between runs); empty for other types.
template <class T>
std::string printable(const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::is_arithmetic_v<T>) {
    return std::to_string(value);
  } else if constexpr (std::is_enum_v<T>) {
    return std::to_string(static_cast<std::underlying_type_t<T>>(value));
  } else if constexpr (std::is_pointer_v<T>) {
    return value == nullptr ? "null" : "not null";
  } else {
    return {};
  }
}

/// std::atomic::wait compares value representations.
template <class T>
bool same_bytes(const T& a, const T& b) noexcept {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

}  // namespace detail

/// std::atomic<T>, with a scheduling point before every operation when a model thread of an
/// explored run (asyncband::testing::explore) performs it: the explorer may switch to another
/// model thread there, which is how it reaches the interleavings of a test body.
///
/// Contract
/// - Interface: std::atomic<T>'s, for the same T (any trivially copyable type; the arithmetic
///   members for integers, floating-point values and pointers, the bitwise ones for integers),
///   noexcept as std::atomic's members are.
/// - Outside an explored run, or on a thread that is not a model thread, it is a plain atomic:
///   each operation is the std::atomic one, with the memory order given.
/// - In a run: each operation is one indivisible step. Without options::weak_memory every
///   order acts as memory_order_seq_cst (a load returns the latest store). With it, the model
///   is x86-TSO, the standard mapping of C++ atomics to x86 (so every outcome it shows is one a
///   real x86 machine can show): a relaxed or release store enters the thread's store buffer and
///   becomes visible to the others a few of the thread's operations later, in program order; the
///   thread's own loads see it at once; read-modify-writes, seq_cst stores, seq_cst fences,
///   wait/notify, blocking and yields drain the buffer. What TSO does not show (loads reordered
///   with loads, stores with stores: ARM and POWER do) stays out of reach.
///   compare_exchange_weak does not fail spuriously. wait() blocks the model thread until a
///   notify_one()/notify_all() on this atomic finds it, and returns when the value differs
///   from `old` (a wait nobody notifies is a deadlock the explorer reports).
/// - After a run failed, a model thread that reaches an operation stops there for good (it
///   cannot unwind from a noexcept function): see asyncband::testing::explore.
template <class T>
class atomic : public detail::atomic_difference<T> {
  static_assert(std::is_trivially_copyable_v<T> && std::is_copy_constructible_v<T> &&
                    std::is_move_constructible_v<T> && std::is_copy_assignable_v<T> &&
                    std::is_move_assignable_v<T>,
                "asyncband::testing::atomic<T>: T must be trivially copyable, as for std::atomic<T>");
  using arg = detail::atomic_argument<T>;

 public:
  /// The type of the value.
  using value_type = T;

  /// Whether operations never take a lock (those of std::atomic<T>).
  static constexpr bool is_always_lock_free = std::atomic<T>::is_always_lock_free;

  /// A value-initialised T.
  constexpr atomic() noexcept(std::is_nothrow_default_constructible_v<T>) : value_() {}
  /// Holds `desired`.
  constexpr atomic(T desired) noexcept : value_(desired) {}  // NOLINT(google-explicit-constructor)
  atomic(const atomic&) = delete;
  atomic& operator=(const atomic&) = delete;
  /// In a run with weak memory, drops the stores still buffered to it.
  ~atomic() {
    if (detail::execution* e = detail::current()) e->forget(this);
  }

  /// store(desired); returns desired.
  T operator=(T desired) noexcept {  // NOLINT(misc-unconventional-assign-operator)
    store(desired);
    return desired;
  }
  /// load().
  operator T() const noexcept { return load(); }  // NOLINT(google-explicit-constructor)

  /// Whether operations on this object never take a lock.
  [[nodiscard]] bool is_lock_free() const noexcept { return value_.is_lock_free(); }

  /// Stores `desired`.
  /// With weak memory, a relaxed or release store may stay in the thread's store buffer for a
  /// few of its operations (options::weak_memory); a seq_cst one drains the buffer first.
  void store(T desired, std::memory_order order = std::memory_order_seq_cst) noexcept {
    const auto shown = step("store");
    if (order != std::memory_order_seq_cst) {
      if (buffered(desired)) return;
    } else {
      drain();
    }
    value_.store(desired, order);
  }
  /// The value (with weak memory: this thread's latest buffered store to it, if any).
  [[nodiscard]] T load(std::memory_order order = std::memory_order_seq_cst) const noexcept {
    const auto shown = step("load");
    return visible(order);
  }
  /// Stores `desired`; returns the value before.
  T exchange(T desired, std::memory_order order = std::memory_order_seq_cst) noexcept {
    const auto shown = rmw_step("exchange");
    return value_.exchange(desired, order);
  }

  /// If the value equals `expected` (bytewise), stores `desired` and returns true; otherwise
  /// loads it into `expected` and returns false (never spuriously in an explored run).
  bool compare_exchange_weak(T& expected, T desired, std::memory_order success,
                             std::memory_order failure) noexcept {
    const auto shown = rmw_step("compare_exchange_weak");
    if (modelled()) return value_.compare_exchange_strong(expected, desired, success, failure);
    return value_.compare_exchange_weak(expected, desired, success, failure);
  }
  /// compare_exchange_weak with one order for both outcomes.
  bool compare_exchange_weak(T& expected, T desired,
                             std::memory_order order = std::memory_order_seq_cst) noexcept {
    const auto shown = rmw_step("compare_exchange_weak");
    if (modelled()) return value_.compare_exchange_strong(expected, desired, order);
    return value_.compare_exchange_weak(expected, desired, order);
  }
  /// If the value equals `expected` (bytewise), stores `desired` and returns true; otherwise
  /// loads it into `expected` and returns false.
  bool compare_exchange_strong(T& expected, T desired, std::memory_order success,
                               std::memory_order failure) noexcept {
    const auto shown = rmw_step("compare_exchange_strong");
    return value_.compare_exchange_strong(expected, desired, success, failure);
  }
  /// compare_exchange_strong with one order for both outcomes.
  bool compare_exchange_strong(T& expected, T desired,
                               std::memory_order order = std::memory_order_seq_cst) noexcept {
    const auto shown = rmw_step("compare_exchange_strong");
    return value_.compare_exchange_strong(expected, desired, order);
  }

  /// Adds `operand`; returns the value before.
  T fetch_add(arg operand, std::memory_order order = std::memory_order_seq_cst) noexcept
    requires detail::atomic_arithmetic<T> || std::is_pointer_v<T>
  {
    const auto shown = rmw_step("fetch_add");
    return value_.fetch_add(operand, order);
  }
  /// Subtracts `operand`; returns the value before.
  T fetch_sub(arg operand, std::memory_order order = std::memory_order_seq_cst) noexcept
    requires detail::atomic_arithmetic<T> || std::is_pointer_v<T>
  {
    const auto shown = rmw_step("fetch_sub");
    return value_.fetch_sub(operand, order);
  }
  /// Bitwise and with `operand`; returns the value before.
  T fetch_and(T operand, std::memory_order order = std::memory_order_seq_cst) noexcept
    requires detail::atomic_bitwise<T>
  {
    const auto shown = rmw_step("fetch_and");
    return value_.fetch_and(operand, order);
  }
  /// Bitwise or with `operand`; returns the value before.
  T fetch_or(T operand, std::memory_order order = std::memory_order_seq_cst) noexcept
    requires detail::atomic_bitwise<T>
  {
    const auto shown = rmw_step("fetch_or");
    return value_.fetch_or(operand, order);
  }
  /// Bitwise exclusive or with `operand`; returns the value before.
  T fetch_xor(T operand, std::memory_order order = std::memory_order_seq_cst) noexcept
    requires detail::atomic_bitwise<T>
  {
    const auto shown = rmw_step("fetch_xor");
    return value_.fetch_xor(operand, order);
  }

  /// fetch_add(1) + 1.
  T operator++() noexcept
    requires detail::atomic_bitwise<T> || std::is_pointer_v<T>
  {
    return detail::as<T>(fetch_add(1) + 1);
  }
  /// fetch_add(1).
  T operator++(int) noexcept
    requires detail::atomic_bitwise<T> || std::is_pointer_v<T>
  {
    return fetch_add(1);
  }
  /// fetch_sub(1) - 1.
  T operator--() noexcept
    requires detail::atomic_bitwise<T> || std::is_pointer_v<T>
  {
    return detail::as<T>(fetch_sub(1) - 1);
  }
  /// fetch_sub(1).
  T operator--(int) noexcept
    requires detail::atomic_bitwise<T> || std::is_pointer_v<T>
  {
    return fetch_sub(1);
  }
  /// fetch_add(operand) + operand.
  T operator+=(arg operand) noexcept
    requires detail::atomic_arithmetic<T> || std::is_pointer_v<T>
  {
    return detail::as<T>(fetch_add(operand) + operand);
  }
  /// fetch_sub(operand) - operand.
  T operator-=(arg operand) noexcept
    requires detail::atomic_arithmetic<T> || std::is_pointer_v<T>
  {
    return detail::as<T>(fetch_sub(operand) - operand);
  }
  /// fetch_and(operand) & operand.
  T operator&=(T operand) noexcept
    requires detail::atomic_bitwise<T>
  {
    return detail::as<T>(fetch_and(operand) & operand);
  }
  /// fetch_or(operand) | operand.
  T operator|=(T operand) noexcept
    requires detail::atomic_bitwise<T>
  {
    return detail::as<T>(fetch_or(operand) | operand);
  }
  /// fetch_xor(operand) ^ operand.
  T operator^=(T operand) noexcept
    requires detail::atomic_bitwise<T>
  {
    return detail::as<T>(fetch_xor(operand) ^ operand);
  }

  /// Returns once the value differs from `old` (bytewise); in an explored run, blocks the
  /// model thread until a notification finds it.
  void wait(T old, std::memory_order order = std::memory_order_seq_cst) const noexcept {
    if (detail::execution* e = detail::current()) {
      e->point("wait", "atomic", this, false);
      e->drain();
      while (detail::same_bytes(value_.load(std::memory_order_relaxed), old)) {
        e->block("in wait() on", "atomic", this, detail::no_thread, false);
      }
      return;
    }
    value_.wait(old, order);
  }
  /// Wakes one thread blocked in wait() on this atomic (the first blocked in an explored run).
  void notify_one() noexcept {
    if (detail::execution* e = detail::current()) {
      e->point("notify_one", "atomic", this, false);
      e->drain();
      return e->wake(this, false);
    }
    value_.notify_one();
  }
  /// Wakes every thread blocked in wait() on this atomic.
  void notify_all() noexcept {
    if (detail::execution* e = detail::current()) {
      e->point("notify_all", "atomic", this, false);
      e->drain();
      return e->wake(this, true);
    }
    value_.notify_all();
  }

 private:
  // In a run, shows the value the operation leaves in the trace of a failure (when destroyed,
  // after the operation).
  class value_shown {
   public:
    explicit value_shown(const atomic* a) noexcept : a_(a) {}
    value_shown(const value_shown&) = delete;
    value_shown& operator=(const value_shown&) = delete;
    ~value_shown() {
      if (detail::execution* e = detail::current())
        e->show_value(detail::printable(a_->visible(std::memory_order_relaxed)));
    }

   private:
    const atomic* a_;
  };

  // The scheduling point before operation `op`.
  [[nodiscard]] value_shown step(const char* op) const noexcept {
    detail::nothrow_point(op, "atomic", this);
    return value_shown(this);
  }
  // The scheduling point before read-modify-write `op`, which drains the thread's store buffer
  // (as a locked instruction does).
  [[nodiscard]] value_shown rmw_step(const char* op) const noexcept {
    detail::nothrow_point(op, "atomic", this);
    drain();
    return value_shown(this);
  }
  static void drain() noexcept {
    if (detail::execution* e = detail::current()) e->drain();
  }
  // In a run: puts the store in the thread's store buffer if the strategy delays it.
  bool buffered(const T& desired) noexcept {
    detail::execution* e = detail::current();
    return e != nullptr && e->buffer_store(this, &apply_buffered, &desired, sizeof(T));
  }
  static T from_bytes(const unsigned char* bytes) noexcept {
    std::array<unsigned char, sizeof(T)> a{};
    std::memcpy(a.data(), bytes, sizeof(T));
    return std::bit_cast<T>(a);
  }
  static void apply_buffered(void* self, const unsigned char* bytes) noexcept {
    static_cast<atomic*>(self)->value_.store(from_bytes(bytes), std::memory_order_relaxed);
  }
  // What this thread sees: its own latest buffered store, else the value.
  T visible(std::memory_order order) const noexcept {
    if (detail::execution* e = detail::current()) {
      std::array<unsigned char, sizeof(T)> bytes{};
      if (e->forward(this, bytes.data(), sizeof(T))) return from_bytes(bytes.data());
    }
    return value_.load(order);
  }
  [[nodiscard]] static bool modelled() noexcept { return detail::current() != nullptr; }

  std::atomic<T> value_;
};

/// std::atomic_thread_fence(order), a scheduling point in an explored run. A seq_cst fence
/// drains the thread's store buffer (options::weak_memory: the only reordering modelled is a
/// store's with later loads, which only a seq_cst fence or operation forbids).
inline void atomic_thread_fence(std::memory_order order) noexcept {
  detail::nothrow_point("fence", "fence", nullptr);
  if (order == std::memory_order_seq_cst) {
    if (detail::execution* e = detail::current()) e->drain();
  }
  std::atomic_thread_fence(order);
}

// NOLINTEND(bugprone-exception-escape)

}  // namespace asyncband::testing
