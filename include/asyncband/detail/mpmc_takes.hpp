// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/mpmc_takes.hpp: what an MPMC channel's state does with the units of `items_`
// its receives acquire: take one value, or a batch (recv_many); written once for the bounded and
// the unbounded channel over the few steps that differ.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <utility>

#include "../result.hpp"
#include "../semaphore.hpp"
#include "receiving_end.hpp"

namespace asyncband::mpmc::detail {

/// The takes of an MPMC channel's state (CRTP: `State` derives from it and befriends it). A unit
/// of `items_` stands for one value no receive has claimed; `State` provides, for these only:
///   semaphore& items()                the values' semaphore
///   bool drained()                    closed, and nothing left to receive or to come
///   claimed claim_value()             the value a unit stands for (a parked one first), claimed
///   T& value_of(const claimed&)
///   void release(const claimed&)      its value moved out: destroys it, lets its storage go
///   void park(const claimed&)         its move threw: parks it for the next receive, with a
///                                     unit of `items_`, ahead of newer values
///   void done_with_values(size_t n)   after n values were taken: one return of capacity (or of
///                                     the pending count) for all of them
template <class State, class T>
class value_takes {
 public:
  /// With a unit of `items_` (which this consumes): moves the value it stands for into
  /// `Outcome`, built in place. If that move throws, the value is parked for the next receive,
  /// a unit for it goes back to `items_`, and the exception propagates.
  template <class Outcome>
  Outcome take(semaphore_permit&& unit) {
    static_cast<void>(unit.forget());  // the unit is the value's: it ends with the value
    const auto claimed = state().claim_value();
    try {
      return asyncband::detail::take_into<Outcome>(state().value_of(claimed), [this, &claimed]() noexcept {
        state().release(claimed);
        state().done_with_values(1);
      });
    } catch (...) {
      state().park(claimed);
      throw;
    }
  }

  /// A batch receive's take. `first` is the unit the receive waited for (or try-acquired); the
  /// units of the values there now come with it, up to `limit` in all (try-acquired, so none
  /// while other receives wait: no barging). Room for every unit's value is made in `out` first:
  /// if that throws, the units go back and nothing is taken. Then each value in turn is claimed
  /// and appended as a single take would, and done_with_values(n) gives their capacity back
  /// once. If a value's move throws, that value is parked, the units of the values not claimed
  /// go back, the values before it stay appended and are done with, and the exception
  /// propagates. Returns how many values were appended.
  template <class Buffer>
  std::size_t take_many(semaphore_permit&& first, Buffer& out, std::size_t limit) {
    semaphore& items = state().items();
    const std::size_t held = first.forget();
    const std::size_t units = held + items.try_take_some(std::min(limit, semaphore::max()) - held);
    try {
      asyncband::detail::make_room(out, units);
    } catch (...) {
      items.template give<false>(units);
      throw;
    }
    std::size_t taken = 0;
    try {
      for (; taken != units; ++taken) {
        const auto claimed = state().claim_value();
        try {
          out.push_back(std::move(state().value_of(claimed)));
        } catch (...) {
          state().park(claimed);
          throw;
        }
        state().release(claimed);
      }
    } catch (...) {
      items.template give<false>(units - taken - 1);
      state().done_with_values(taken);
      throw;
    }
    state().done_with_values(taken);
    return taken;
  }

  /// A value now (ok), or empty, or closed (and nothing left to receive).
  try_recv_result<T> try_take() {
    return try_with<try_recv_result<T>>(
        [this](semaphore_permit&& unit) { return take<try_recv_result<T>>(std::move(unit)); });
  }
  /// Up to `limit` values now, appended to `out` (ok: how many), or empty, or closed.
  template <class Buffer>
  try_recv_result<std::size_t> try_receive_many(Buffer& out, std::size_t limit) {
    return try_with<try_recv_result<std::size_t>>(
        [this, &out, limit](semaphore_permit&& unit) { return take_many(std::move(unit), out, limit); });
  }

 protected:
  value_takes() = default;
  ~value_takes() = default;

 private:
  State& state() noexcept { return static_cast<State&>(*this); }

  /// `take(unit)` with a unit of `items_` if one is there (nobody waiting for it), else empty or
  /// closed.
  template <class Outcome, class Take>
  Outcome try_with(Take take) {
    if (std::optional<semaphore_permit> unit = state().items().try_acquire(1)) return take(std::move(*unit));
    return state().drained() ? recv_status::closed : recv_status::empty;
  }
};

}  // namespace asyncband::mpmc::detail
