// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/awaitable_traits.hpp: what `co_await x` yields, computed without awaiting.
#pragma once

#include <utility>

namespace asyncband::detail {

/// The awaiter `co_await a` would use (without an await_transform): what operator co_await
/// returns, or `a` itself (as a reference: an awaiter need not be movable).
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

/// What `co_await a` yields.
template <class A>
using await_result_t = decltype(get_awaiter(std::declval<A>()).await_resume());

}  // namespace asyncband::detail
