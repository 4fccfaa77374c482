// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/mpmc_batch.hpp: an MPMC channel's batch receive (recv_many, try_recv_many):
// the units of `items_` of several values taken at once, then the values one by one.
#pragma once

#include <cstddef>
#include <utility>

#include "../semaphore.hpp"
#include "receiving_end.hpp"

namespace asyncband::mpmc::detail {

/// A batch receive's take, for either MPMC state. `first` is the unit of `items_` the receive
/// waited for (or try-acquired); `State` provides:
///   size_t claim_units(semaphore_permit&& first, size_t limit)   that unit plus those of the
///                                     values there now, up to `limit` in all (try-acquired, so
///                                     none while other receives wait: no barging); how many
///   void units_back(size_t n)         gives n unused units back to `items_`
///   claimed claim_value()             the value a unit stands for (a parked one first)
///   T& value_of(const claimed&)
///   void release(const claimed&)      its value moved out: destroys it, lets its storage go
///   void park(const claimed&)         its move threw: parks it for the next receive, with a
///                                     unit of `items_` (as a throwing recv does)
///   void done_with_values(size_t n)   after n values were taken: one return of capacity (or of
///                                     the pending count) for all of them
/// Room for every unit's value is made in `out` first: if that throws, the units go back and
/// nothing is taken. If a value's move throws, that value is parked, the units of the values not
/// claimed go back, the values before it stay appended and are done with, and the exception
/// propagates. Returns how many values were appended.
template <class State, class Buffer>
std::size_t take_batch(State& state, semaphore_permit&& first, Buffer& out, std::size_t limit) {
  const std::size_t units = state.claim_units(std::move(first), limit);
  try {
    asyncband::detail::make_room(out, units);
  } catch (...) {
    state.units_back(units);
    throw;
  }
  std::size_t taken = 0;
  try {
    for (; taken != units; ++taken) {
      const auto claimed = state.claim_value();
      try {
        out.push_back(std::move(state.value_of(claimed)));
      } catch (...) {
        state.park(claimed);
        throw;
      }
      state.release(claimed);
    }
  } catch (...) {
    state.units_back(units - taken - 1);
    state.done_with_values(taken);
    throw;
  }
  state.done_with_values(taken);
  return taken;
}

}  // namespace asyncband::mpmc::detail
