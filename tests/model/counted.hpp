// SPDX-License-Identifier: Apache-2.0
// tests/model/counted.hpp: a value that counts its live copies in a model atomic, so that a
// channel test can check that every value sent is destroyed exactly once (received, handed
// back, or destroyed with the channel): a leak or a double destruction leaves the count off 0.
#pragma once

#include <utility>

#include <asyncband/testing/atomic.hpp>

namespace model {

/// An int payload; each constructed (not moved-from) object adds one to `*live` until destroyed.
class counted {
 public:
  counted(int v, asyncband::testing::atomic<int>* live) noexcept : value_(v), live_(live) {
    live_->fetch_add(1);
  }
  counted(counted&& other) noexcept : value_(other.value_), live_(std::exchange(other.live_, nullptr)) {}
  counted& operator=(counted&& other) noexcept {
    if (this != &other) {
      drop();
      value_ = other.value_;
      live_ = std::exchange(other.live_, nullptr);
    }
    return *this;
  }
  counted(const counted&) = delete;
  counted& operator=(const counted&) = delete;
  ~counted() { drop(); }

  [[nodiscard]] int value() const noexcept { return value_; }

 private:
  void drop() noexcept {
    if (live_ != nullptr) std::exchange(live_, nullptr)->fetch_sub(1);
  }
  int value_;
  asyncband::testing::atomic<int>* live_;
};

}  // namespace model
