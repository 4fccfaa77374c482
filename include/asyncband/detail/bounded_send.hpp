// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/bounded_send.hpp: a send on a bounded channel (MPSC or MPMC): the unit of
// capacity it waits for, then its publication; the value comes back if it does not deliver.
#pragma once

#include <coroutine>
#include <type_traits>
#include <utility>

#include "../result.hpp"
#include "../semaphore.hpp"
#include "select_send.hpp"
#include "wait_functions.hpp"

namespace asyncband::detail {

/// The capacity acquisitions of a channel: fallible (ends closed).
using capacity_forms = acquire_forms<permit_itself, true>;

/// A send in a coroutine: takes a unit of capacity (awaiting it if the channel is full), then
/// publishes. The value waits in the awaiter, and comes back if the send fails. `State` is a
/// bounded channel's state: value_type, capacity(), closed(), receiver_gone(), try_push(T&)
/// (a unit and a place in one CAS, moving from the value only then), push(units, T&&).
template <class State, class Acquire>
class [[nodiscard("co_await it: the value is not sent until the send is awaited")]] bounded_send_awaiter {
  using T = typename State::value_type;

 public:
  template <class... Args>
  bounded_send_awaiter(State* s, T&& value, Args&&... acquisition)
      : state_(s), value_(std::move(value)), acquire_(std::forward<Args>(acquisition)...) {}
  bounded_send_awaiter(const bounded_send_awaiter&) = delete;
  bounded_send_awaiter& operator=(const bounded_send_awaiter&) = delete;

  /// With capacity at hand and no stop token, the value goes into the ring right here (unit and
  /// place in one CAS). A stop token is looked at first, so that form takes the general path.
  /// Throws std::logic_error if this awaiter sent or suspended before (awaited twice: its value
  /// is gone); both flags are known false where the awaiter was just built, so the test folds.
  bool await_ready() {
    if (sent_ || suspended_) [[unlikely]]
      throw_awaited_again();
    if constexpr (sends_when_ready) {
      sent_ = !state_->closed() && state_->try_push(value_);
      return sent_;  // else the acquisition's own lock-free attempt would fail the same way
    } else {
      return acquire_.await_ready();
    }
  }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    suspended_ = true;  // before the publication: nothing touches the awaiter after it
    return acquire_.await_suspend(h);
  }
  send_result<T> await_resume() {
    if (sent_) return {};
    return finish_bounded_send(*state_, acquire_.await_resume(), std::move(value_));
  }

 private:
  static constexpr bool sends_when_ready = std::is_same_v<Acquire, acquire_awaiter<permit_itself, true>>;

  friend struct send_select_access<bounded_send_awaiter>;
  /// Sent, or awaited (or selected) before.
  [[nodiscard]] bool spent() const noexcept { return sent_ || suspended_; }

  State* state_;
  T value_;
  Acquire acquire_;
  bool sent_ = false;
  bool suspended_ = false;
};

/// After the capacity wait: publishes with the unit, or hands the value back.
template <class State>
send_result<typename State::value_type> finish_bounded_send(State& s, result<semaphore_permit>&& unit,
                                                            typename State::value_type&& value) {
  if (!unit.ok()) {
    return {unit.cancelled() ? send_status::cancelled
                             : (unit.timed_out() ? send_status::timeout : send_status::closed),
            std::move(value)};
  }
  if (s.receiver_gone()) return {send_status::closed, std::move(value)};
  s.push(*unit, std::move(value));
  return {};
}

/// A bounded channel's send is a when_any branch.
template <class State, class Acquire>
struct select_access<bounded_send_awaiter<State, Acquire>>
    : send_select_access<bounded_send_awaiter<State, Acquire>> {};
}  // namespace asyncband::detail
