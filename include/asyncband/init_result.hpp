// SPDX-License-Identifier: Apache-2.0
// asyncband/init_result.hpp: what a fallible initialiser yields, and what a try_ form returns.
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <cassert>
#include <concepts>
#include <memory>
#include <type_traits>
#include <utility>
#include <variant>

namespace asyncband {

/// A value that holds either a result or an error, read through `has_value()`, `value()` and
/// `error()`: std::expected (where the standard library has it), Boost.Outcome's result, a
/// user's own type. What the initialiser of a `try_` form (once_cell::get_or_try_init,
/// once_map::try_compute, singleflight::group::try_work) yields.
template <class R>
concept expected_like = requires(R& r) {
  { r.has_value() } -> std::convertible_to<bool>;
  r.value();
  r.error();
};

/// The error type of an expected_like type.
template <expected_like R>
using error_type_of = std::remove_cvref_t<decltype(std::declval<R&>().error())>;

/// What a `try_` form returns: the value (a reference for once_cell, a copy for the maps), or
/// the error the caller's own initialiser failed with. It is itself expected_like. A failure is
/// never shared: only the caller whose initialiser failed sees its error.
template <class T, class E>
class [[nodiscard]] init_result {
  static constexpr bool holds_reference = std::is_reference_v<T>;
  using stored = std::conditional_t<holds_reference, std::remove_reference_t<T>*, T>;

 public:
  /// The value's type (a reference for once_cell).
  using value_type = T;
  /// The initialiser's error type.
  using error_type = E;

  /// A result holding a value (a reference: binds to it).
  template <class U>
    requires std::is_constructible_v<stored, U&&> || holds_reference
  static init_result with_value(U&& v) {
    if constexpr (holds_reference) {
      return init_result(std::in_place_index<0>, std::addressof(v));
    } else {
      return init_result(std::in_place_index<0>, std::forward<U>(v));
    }
  }
  /// A result holding the error `e`.
  template <class G>
  static init_result with_error(G&& e) {
    return init_result(std::in_place_index<1>, std::forward<G>(e));
  }

  /// True if the result holds the value, false if it holds the caller's error.
  [[nodiscard]] bool has_value() const noexcept { return content_.index() == 0; }
  /// has_value().
  explicit operator bool() const noexcept { return has_value(); }

  /// @{
  /// The value, as value(), `*r` or `r->`. Precondition: has_value().
  [[nodiscard]] decltype(auto) value() & noexcept { return checked(); }
  [[nodiscard]] decltype(auto) value() const& noexcept { return const_cast<init_result*>(this)->checked(); }
  [[nodiscard]] decltype(auto) value() && noexcept {
    if constexpr (holds_reference) {
      return checked();
    } else {
      return std::move(checked());
    }
  }
  [[nodiscard]] decltype(auto) operator*() & noexcept { return checked(); }
  [[nodiscard]] decltype(auto) operator*() const& noexcept {
    return const_cast<init_result*>(this)->checked();
  }
  [[nodiscard]] auto* operator->() noexcept { return std::addressof(checked()); }
  /// @}

  /// @{
  /// The error the caller's initialiser failed with. Precondition: !has_value().
  [[nodiscard]] E& error() & noexcept { return std::get<1>(content_); }
  [[nodiscard]] const E& error() const& noexcept { return std::get<1>(content_); }
  [[nodiscard]] E&& error() && noexcept { return std::move(std::get<1>(content_)); }
  /// @}

 private:
  template <std::size_t I, class... Args>
  explicit init_result(std::in_place_index_t<I> i, Args&&... args)
      : content_(i, std::forward<Args>(args)...) {}

  std::add_lvalue_reference_t<std::remove_reference_t<T>> checked() noexcept {
    assert(has_value() && "asyncband::init_result::value() on an error");
    if constexpr (holds_reference) {
      return **std::get_if<0>(&content_);
    } else {
      return *std::get_if<0>(&content_);
    }
  }

  std::variant<stored, E> content_;
};

}  // namespace asyncband
