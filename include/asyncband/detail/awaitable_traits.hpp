// asyncband/detail/awaitable_traits.hpp: what `co_await x` yields, computed without awaiting.
#pragma once

#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

namespace asyncband::detail {

template <class A>
decltype(auto) get_awaiter(A&& a) {
  if constexpr (requires { std::forward<A>(a).operator co_await(); }) {
    return std::forward<A>(a).operator co_await();
  } else if constexpr (requires { operator co_await(std::forward<A>(a)); }) {
    return operator co_await(std::forward<A>(a));
  } else {
    return std::forward<A>(a);
  }
}

template <class A>
using await_result_t = decltype(get_awaiter(std::declval<A>()).await_resume());

/// Holds what an awaitable yielded, references included (`co_await` results for void are not
/// stored: callers branch on std::is_void_v).
template <class T>
class yielded {
 public:
  void set(T&& v) {
    if constexpr (std::is_reference_v<T>) {
      ptr_ = std::addressof(v);
    } else {
      value_.emplace(std::move(v));
    }
  }
  T take() {
    if constexpr (std::is_reference_v<T>) {
      return static_cast<T>(*ptr_);
    } else {
      return std::move(*value_);
    }
  }

 private:
  std::optional<std::remove_cvref_t<T>> value_;
  std::add_pointer_t<std::remove_reference_t<T>> ptr_ = nullptr;
};

}  // namespace asyncband::detail
