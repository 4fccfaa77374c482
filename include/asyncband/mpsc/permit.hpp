// asyncband/mpsc/permit.hpp: units of a bounded channel's capacity reserved for later sends
// (permit, owned_permit) and try_reserve's outcome.
#pragma once

#include <cassert>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <utility>

#include "../detail/bounded_state.hpp"
#include "../result.hpp"
#include "../semaphore.hpp"

namespace asyncband::mpsc {

template <class T>
class sender;
template <class T>
class receiver;
template <class T>
class permit;
template <class T>
class owned_permit;

/// The outcome of try_reserve: a permit, or full / disconnected.
template <class P>
class [[nodiscard]] try_reserve_result {
 public:
  try_reserve_result(P p) : permit_(std::move(p)) {}             // NOLINT(google-explicit-constructor)
  try_reserve_result(send_status failure) : status_(failure) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] send_status status() const noexcept { return status_; }
  [[nodiscard]] bool ok() const noexcept { return status_ == send_status::ok; }
  [[nodiscard]] bool full() const noexcept { return status_ == send_status::full; }
  [[nodiscard]] bool disconnected() const noexcept { return status_ == send_status::disconnected; }
  explicit operator bool() const noexcept { return ok(); }

  /// Precondition: ok().
  [[nodiscard]] P& value() & noexcept { return *permit_; }
  [[nodiscard]] P&& value() && noexcept { return std::move(*permit_); }
  [[nodiscard]] P& operator*() & noexcept { return *permit_; }
  [[nodiscard]] P* operator->() noexcept { return &*permit_; }

 private:
  std::optional<P> permit_;
  send_status status_ = send_status::ok;
};

/// Units of capacity reserved for later sends, without a place in the order yet: other values
/// flow while it is held, and each send() takes its place when it is made. Destroying it
/// returns the unused units. Move-only; it must not outlive the sender that reserved it (use an
/// owned_permit for that). A debug build asserts ("permit outlived its sender") when a permit
/// sends or is destroyed with units after every sender is gone, and ("permit outlived its
/// channel") when the channel goes (every sender and the receiver gone) while a plain permit
/// still holds units; NDEBUG builds pay nothing for the checks.
template <class T>
class [[nodiscard]] permit {
 public:
  permit(permit&&) noexcept = default;
  permit& operator=(permit&&) noexcept = default;
  permit(const permit&) = delete;
  permit& operator=(const permit&) = delete;
  /// Its units go back; a debug build asserts that the sender that reserved them is still there.
  ~permit() {
    assert((!units_ || !state_->producers_gone()) && "asyncband::mpsc::permit outlived its sender");
  }

  /// Units left.
  [[nodiscard]] std::size_t size() const noexcept { return units_.count(); }
  explicit operator bool() const noexcept { return static_cast<bool>(units_); }

  /// Sends with one unit: ok, or disconnected with the value if the receiver is gone (the unit
  /// stays). A receiver that only closed the channel still receives it.
  /// Precondition (std::logic_error): size() > 0.
  send_result<T> send(T value) {
    if (!units_) throw std::logic_error("asyncband::mpsc::permit: no unit left");
    assert(!state_->producers_gone() && "asyncband::mpsc::permit outlived its sender");
    if (state_->receiver_gone()) return {send_status::disconnected, std::move(value)};
    state_->push(units_, std::move(value));
    return {};
  }

 private:
  friend class sender<T>;
  friend class owned_permit<T>;
  permit(detail::bounded_state<T>* s, semaphore_permit&& units) noexcept
      : state_(s), units_(std::move(units)) {}

  detail::bounded_state<T>* state_;
  semaphore_permit units_;
};

/// A permit that keeps the channel alive and counts as a producer: it may outlive every
/// sender, and the receiver sees the channel disconnected only once it is gone too.
template <class T>
class [[nodiscard]] owned_permit {
 public:
  owned_permit(owned_permit&& other) noexcept
      : permit_(std::move(other.permit_)), owner_(std::exchange(other.owner_, nullptr)) {}
  owned_permit& operator=(owned_permit&& other) noexcept {
    if (this != &other) {
      // The old units and reference go last, from a local: returning units may resume a sender
      // inline that destroys this permit at once (last one out).
      const owned_permit departing(std::move(*this));
      permit_ = std::move(other.permit_);
      owner_ = std::exchange(other.owner_, nullptr);
    }
    return *this;
  }
  owned_permit(const owned_permit&) = delete;
  owned_permit& operator=(const owned_permit&) = delete;
  ~owned_permit() {
    permit_.units_.release();  // before the reference goes: the state must outlive it
    reset();
  }

  [[nodiscard]] std::size_t size() const noexcept { return permit_.size(); }
  explicit operator bool() const noexcept { return static_cast<bool>(permit_); }
  send_result<T> send(T value) { return permit_.send(std::move(value)); }

 private:
  friend class sender<T>;
  explicit owned_permit(permit<T>&& p) noexcept : permit_(std::move(p)), owner_(permit_.state_) {
    owner_->add_producer();
  }
  void reset() noexcept {
    if (owner_ != nullptr) std::exchange(owner_, nullptr)->drop_producer();
  }

  permit<T> permit_;
  detail::bounded_state<T>* owner_;
};

}  // namespace asyncband::mpsc
