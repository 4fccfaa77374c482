// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/bounded_permit.hpp: units of a bounded channel's capacity reserved for later
// sends (mpsc::permit, mpsc::owned_permit and their MPMC twins).
#pragma once

#include <cassert>
#include <cstddef>
#include <stdexcept>
#include <utility>

#include "../result.hpp"
#include "../semaphore.hpp"
#include "atomic.hpp"

namespace asyncband::detail {

template <class State>
class bounded_sender;
template <class State>
class bounded_permit;
template <class State>
class bounded_owned_permit;

/// Units of capacity reserved for later sends, without a place in the order yet: other values
/// flow while it is held, and each send() takes its place when it is made. Destroying it
/// returns the unused units. Move-only; it must not outlive the sender that reserved it (use an
/// owned permit for that). A debug build asserts ("permit outlived its sender") when a permit
/// sends or is destroyed with units after every sender is gone, and ("permit outlived its
/// channel") when the channel goes (every sender and the receiver gone) while a plain permit
/// still holds units; NDEBUG builds pay nothing for the checks.
template <class State>
class [[nodiscard]] bounded_permit {
  using T = typename State::value_type;

 public:
  /// Takes over `other`'s units; `other` is left empty.
  bounded_permit(bounded_permit&&) noexcept = default;
  /// Returns this permit's units, then takes over `other`'s.
  bounded_permit& operator=(bounded_permit&&) noexcept = default;
  bounded_permit(const bounded_permit&) = delete;
  bounded_permit& operator=(const bounded_permit&) = delete;
  /// Its units go back; a debug build asserts that the sender that reserved them is still there.
  ~bounded_permit() {
    assert((asyncband::detail::model_run_failed() || !units_ || !state_->producers_gone()) &&
           "asyncband: permit outlived its sender");
  }

  /// Units left.
  [[nodiscard]] std::size_t size() const noexcept { return units_.count(); }
  /// size() > 0.
  explicit operator bool() const noexcept { return static_cast<bool>(units_); }

  /// Sends with one unit: ok, or closed with the value if the receiver is gone (the unit
  /// stays). A receiver that only closed the channel still receives it.
  /// Precondition (std::logic_error): size() > 0.
  send_result<T> send(T value) {
    if (!units_) throw std::logic_error("asyncband: permit: no unit left");
    assert(!state_->producers_gone() && "asyncband: permit outlived its sender");
    if (state_->receiver_gone()) return {send_status::closed, std::move(value)};
    state_->push(units_, std::move(value));
    return {};
  }

 private:
  friend class bounded_sender<State>;
  friend class bounded_owned_permit<State>;
  bounded_permit(State* s, semaphore_permit&& units) noexcept : state_(s), units_(std::move(units)) {}

  State* state_;
  semaphore_permit units_;
};

/// A permit that keeps the channel alive and counts as a producer: it may outlive every
/// sender, and the receiver sees the channel closed only once it is gone too.
template <class State>
class [[nodiscard]] bounded_owned_permit {
  using T = typename State::value_type;

 public:
  /// Takes over `other`'s units and reference; `other` is left empty.
  bounded_owned_permit(bounded_owned_permit&& other) noexcept
      : permit_(std::move(other.permit_)), owner_(std::exchange(other.owner_, nullptr)) {}
  /// Returns this permit's units and drops its reference, then takes over `other`'s.
  bounded_owned_permit& operator=(bounded_owned_permit&& other) noexcept {
    if (this != &other) {
      // The old units and reference go last, from a local: returning units may resume a sender
      // inline that destroys this permit at once (last one out).
      const bounded_owned_permit departing(std::move(*this));
      permit_ = std::move(other.permit_);
      owner_ = std::exchange(other.owner_, nullptr);
    }
    return *this;
  }
  bounded_owned_permit(const bounded_owned_permit&) = delete;
  bounded_owned_permit& operator=(const bounded_owned_permit&) = delete;
  ~bounded_owned_permit() {
    permit_.units_.release();  // before the reference goes: the state must outlive it
    reset();
  }

  /// Units left.
  [[nodiscard]] std::size_t size() const noexcept { return permit_.size(); }
  /// size() > 0.
  explicit operator bool() const noexcept { return static_cast<bool>(permit_); }
  /// Sends with one unit, as bounded_permit::send. Precondition (std::logic_error): size() > 0.
  send_result<T> send(T value) { return permit_.send(std::move(value)); }

 private:
  friend class bounded_sender<State>;
  explicit bounded_owned_permit(bounded_permit<State>&& p) noexcept
      : permit_(std::move(p)), owner_(permit_.state_) {
    owner_->add_producer();
  }
  void reset() noexcept {
    if (owner_ != nullptr) std::exchange(owner_, nullptr)->drop_producer();
  }

  bounded_permit<State> permit_;
  State* owner_;
};

}  // namespace asyncband::detail
