// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/semaphore_permit.hpp: asyncband::semaphore_permit, what an acquisition
// yields. semaphore.hpp includes it, and defines its out-of-line members.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <utility>

namespace asyncband {

class semaphore;

namespace detail {
class semaphore_waiter;
template <class Make, bool Fallible, bool Retries>
class acquire_awaiter;
template <class Source>
class source_awaiter;
}  // namespace detail

/// Permits taken from a semaphore; destroying the permit returns them. Move-only.
///
/// An empty permit (default-constructed, moved-from, forgotten) returns nothing. A permit may
/// outlive the scope that acquired it, but not its semaphore.
class [[nodiscard]] semaphore_permit {
 public:
  /// An empty permit: holds nothing.
  semaphore_permit() noexcept = default;
  /// Takes over `other`'s permits; `other` is left empty.
  semaphore_permit(semaphore_permit&& other) noexcept
      : semaphore_(std::exchange(other.semaphore_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  /// Returns the permits held, then takes over `other`'s.
  semaphore_permit& operator=(semaphore_permit&& other) noexcept {
    if (this != &other) {
      // The old permits are released last, from a local: the release may resume a waiter inline
      // that destroys this permit at once (last one out).
      const semaphore_permit departing(std::move(*this));
      semaphore_ = std::exchange(other.semaphore_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  semaphore_permit(const semaphore_permit&) = delete;
  semaphore_permit& operator=(const semaphore_permit&) = delete;
  /// Unlike release(), clears nothing: a store right before the release's atomic
  /// read-modify-write would delay it, and nobody may look at a permit being destroyed.
  ~semaphore_permit() {
    if (count_ != 0) release_to_semaphore(count_);
  }

  /// How many permits this holds.
  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  /// The semaphore the permits came from (nullptr for a permit that never held any).
  [[nodiscard]] asyncband::semaphore* semaphore() const noexcept { return semaphore_; }
  /// count() > 0.
  explicit operator bool() const noexcept { return count_ != 0; }

  /// Returns the permits to the semaphore now (the destructor then has nothing to do).
  inline void release() noexcept;
  /// Returns n of the permits now and keeps the rest (all of them if n >= count()).
  inline void release(std::size_t n) noexcept;

  /// Gives up the permits without returning them: the semaphore has that many fewer for good.
  /// Returns how many were forgotten.
  std::size_t forget() noexcept { return std::exchange(count_, 0); }

  /// Moves `n` of this permit's permits into a new permit of the same semaphore.
  /// Throws std::invalid_argument if this holds fewer than `n`.
  semaphore_permit split(std::size_t n) {
    if (n > count_) throw std::invalid_argument("asyncband::semaphore_permit::split: more than it holds");
    count_ -= n;
    return {semaphore_, n};
  }

  /// Takes over `other`'s permits. Throws std::invalid_argument (and changes nothing) if they
  /// come from another semaphore: returning them here would corrupt both counts; throws
  /// std::overflow_error if the sum would exceed semaphore::max().
  inline void merge(semaphore_permit&& other);

 private:
  friend class asyncband::semaphore;
  friend class detail::semaphore_waiter;
  template <class Make, bool Fallible, bool Retries>
  friend class detail::acquire_awaiter;
  template <class Source>
  friend class detail::source_awaiter;
  semaphore_permit(asyncband::semaphore* owner, std::size_t n) noexcept : semaphore_(owner), count_(n) {}
  inline void release_to_semaphore(std::size_t n) const noexcept;

  asyncband::semaphore* semaphore_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace asyncband

// Its out-of-line members (defined there) need the complete semaphore.
#include "../semaphore.hpp"
