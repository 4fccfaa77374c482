// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/mpmc_handles.hpp: the handle counts and the lifetime of an MPMC channel's
// state, shared by the bounded and the unbounded channel.
#pragma once

#include <atomic>
#include <cstddef>

#include "../manual_reset_event.hpp"
#include "atomic.hpp"

namespace asyncband::mpmc::detail {

/// Counts the handles of an MPMC channel and owns its state's lifetime. `State` derives from
/// it (CRTP) and provides close(), which the last producer calls; the last drop_ref() deletes
/// the State. refs_ counts the producers, the receivers, and the calls in progress that must
/// outlive a wake-up they cause (a sender woken inline may drop every handle at once).
template <class State>
class handle_counts {
 public:
  handle_counts(const handle_counts&) = delete;
  handle_counts& operator=(const handle_counts&) = delete;

  void add_producer() noexcept {
    refs_.fetch_add(1, std::memory_order_relaxed);
    producers_.fetch_add(1, std::memory_order_relaxed);
  }
  /// The last producer (sender or owned permit) closes the channel: what was sent still drains.
  void drop_producer() noexcept {
    if (producers_.fetch_sub(1, std::memory_order_acq_rel) == 1) self().close();
    drop_ref();
  }
  void add_receiver() noexcept {
    refs_.fetch_add(1, std::memory_order_relaxed);
    receivers_.fetch_add(1, std::memory_order_relaxed);
  }
  void add_ref() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void drop_ref() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy();
  }

  [[nodiscard]] bool producers_gone() const noexcept {
    return producers_.load(std::memory_order_acquire) == 0;
  }
  /// Every receiver is gone (the count never rises from 0: a receiver is made only from another).
  [[nodiscard]] bool receiver_gone() const noexcept {
    return receivers_.load(std::memory_order_acquire) == 0;
  }
  [[nodiscard]] std::size_t sender_count() const noexcept {
    return producers_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::size_t receiver_count() const noexcept {
    return receivers_.load(std::memory_order_relaxed);
  }
  /// Set once the channel is closed (the senders' closed() waits).
  manual_reset_event& closed_event() noexcept { return closed_event_; }

 protected:
  handle_counts() = default;
  ~handle_counts() = default;

  /// A receiver handle goes: true for the last one (from then on receiver_gone(), and later
  /// sends hand their value back). The caller's reference is still held.
  [[nodiscard]] bool last_receiver_leaves() noexcept {
    return receivers_.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }

 private:
  State& self() noexcept { return static_cast<State&>(*this); }
  /// Out of line: where a call that keeps a reference of its own (close()) is inlined into one
  /// that goes on using the state, g++ 12 cannot see that the count stays above 0, and warns of
  /// a use after free (-Wuse-after-free) that cannot happen.
  [[gnu::noinline]] void destroy() noexcept { delete &self(); }

  // Written when handles come and go: on a line of their own.
  alignas(64) asyncband::detail::atomic<std::size_t> refs_{2};  // producers + receivers + calls in progress
  asyncband::detail::atomic<std::size_t> producers_{1};         // senders + owned permits
  asyncband::detail::atomic<std::size_t> receivers_{1};
  manual_reset_event closed_event_;
};

}  // namespace asyncband::mpmc::detail
