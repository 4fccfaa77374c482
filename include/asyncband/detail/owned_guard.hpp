// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/owned_guard.hpp: what every owned guard and owned permit is made of (a
// permit plus the reference that keeps its primitive alive), and try_map's common part.
#pragma once

#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

// No asyncband include: semaphore_wait.hpp includes this, and this must be complete whichever
// of the semaphore's headers a translation unit reads first.
namespace asyncband {
class semaphore_permit;
}  // namespace asyncband

namespace asyncband::detail {

/// Permits plus a reference to their owner (a semaphore, a mutex, an rwlock), returned in that
/// order: the permits first, then the reference, which may be the last one. The destructor
/// does so by declaration order; move assignment returns the old permits from a local that
/// also keeps the old owner alive until then (last one out: the return may resume a waiter
/// inline that destroys the object holding this at once).
template <class Owner, class Permit = semaphore_permit>
class owning_permit {
 public:
  owning_permit() noexcept = default;
  owning_permit(std::shared_ptr<Owner> owner, Permit&& permit) noexcept
      : owner_(std::move(owner)), permit_(std::move(permit)) {}
  owning_permit(owning_permit&&) noexcept = default;
  owning_permit& operator=(owning_permit&& other) noexcept {
    if (this != &other) {
      const owning_permit departing(std::move(*this));
      owner_ = std::move(other.owner_);
      permit_ = std::move(other.permit_);
    }
    return *this;
  }
  owning_permit(const owning_permit&) = delete;
  owning_permit& operator=(const owning_permit&) = delete;
  ~owning_permit() = default;  // permit_ (declared last) goes first

  [[nodiscard]] const std::shared_ptr<Owner>& owner() const noexcept { return owner_; }
  [[nodiscard]] Permit& permit() noexcept { return permit_; }
  [[nodiscard]] const Permit& permit() const noexcept { return permit_; }
  /// Moves the reference out (to the guard of a part) along with nothing else.
  std::shared_ptr<Owner> take_owner() noexcept { return std::move(owner_); }
  /// Takes `owner` as the reference (an empty permit adopting another owner's permits).
  void adopt(std::shared_ptr<Owner> owner) noexcept { owner_ = std::move(owner); }

 private:
  std::shared_ptr<Owner> owner_;
  Permit permit_;
};

/// try_map's common part: `f(value)` returns a pointer into the value, or null for "no such
/// part"; on a part, `make(part)` builds the guard of it. A null or a throwing f leaves
/// everything as it was.
template <class Value, class F, class Make>
auto map_if_part(Value& value, F&& f, Make&& make) {
  using part_pointer = std::invoke_result_t<F&&, Value&>;
  static_assert(std::is_pointer_v<part_pointer>, "try_map: f returns a pointer (null: no part)");
  std::optional<std::invoke_result_t<Make&, part_pointer>> mapped;
  if (const part_pointer part = std::forward<F>(f)(value)) mapped.emplace(make(part));
  return mapped;
}

}  // namespace asyncband::detail
