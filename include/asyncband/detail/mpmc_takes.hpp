// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/mpmc_takes.hpp: what an MPMC channel's state does with the units of `items_`
// its receives acquire: take one value, or a batch (recv_many); written once for the bounded and
// the unbounded channel over the few steps that differ.
#pragma once

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <optional>
#include <utility>

#include "../result.hpp"
#include "../semaphore.hpp"
#include "receiving_end.hpp"

namespace asyncband::mpmc::detail {

#ifdef ASYNCBAND_TESTING
/// Tests: called with each value a receive held and that goes back to the channel for another
/// (parked after its move threw, or given back by a receive that will not take it): the one
/// kind of value that may reach a receive after later values of its producer.
inline std::atomic<void (*)(const void* value)> on_value_reoffered_for_tests{nullptr};
#endif

/// A state whose receives claim values without units while nobody waits (the bounded one):
/// try_claim, give_back, may_claim and after_receive_queued, with its `claimed_value`.
template <class State>
concept claims_without_units = requires(State& s, typename State::claimed_value& c) {
  { s.try_claim(c) } -> std::same_as<bool>;
};

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
    return take_claimed<Outcome>(state().claim_value());
  }

  /// Moves the claimed value into `Outcome`, built in place; if that move throws, it is parked.
  template <class Outcome, class Claimed>
  Outcome take_claimed(const Claimed& claimed) {
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

  /// A batch receive's take for a state whose receives claim values without units while nobody
  /// waits (bounded): `first` is the value the receive claimed (a record, or a place), and the
  /// values it can claim now come with it (try_claim: none while other receives wait), up to
  /// `limit` in all and as many as `out` has room for after one growth made before anything is
  /// taken (for 1 + len() values: if it throws, `first` goes back and nothing is taken). Each is
  /// appended as a single take would; done_with_values(n) gives their capacity back once. If a
  /// value's move throws, that value is parked, the values before it stay appended and are done
  /// with, and the exception propagates. Returns how many values were appended.
  template <class Claimed, class Buffer>
  std::size_t take_many_claimed(Claimed c, Buffer& out, std::size_t limit) {
    const std::size_t room = std::min(limit, 1 + state().len());
    try {
      asyncband::detail::make_room(out, room);
    } catch (...) {
      state().give_back(c);
      throw;
    }
    std::size_t taken = 0;
    try {
      for (;;) {
        try {
          out.push_back(std::move(state().value_of(c)));
        } catch (...) {
          state().park(c);
          throw;
        }
        state().release(c);
        if (++taken == room || !state().try_claim(c)) break;
      }
    } catch (...) {
      state().done_with_values(taken);
      throw;
    }
    state().done_with_values(taken);
    return taken;
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
    if constexpr (claims_without_units<State>) {
      static_cast<void>(first.forget());  // the unit is its record's: it ends with the value
      return take_many_claimed(state().claim_value(), out, limit);
    }
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
    if constexpr (claims_without_units<State>) {
      typename State::claimed_value c;
      if (state().try_claim(c)) return take_claimed<try_recv_result<T>>(c);
      return nothing_now<try_recv_result<T>>();
    } else {
      return try_with<try_recv_result<T>>(
          [this](semaphore_permit&& unit) { return take<try_recv_result<T>>(std::move(unit)); });
    }
  }
  /// Up to `limit` values now, appended to `out` (ok: how many), or empty, or closed.
  template <class Buffer>
  try_recv_result<std::size_t> try_receive_many(Buffer& out, std::size_t limit) {
    if constexpr (claims_without_units<State>) {
      typename State::claimed_value c;
      if (state().try_claim(c)) return take_many_claimed(c, out, limit);
      return nothing_now<try_recv_result<std::size_t>>();
    } else {
      return try_with<try_recv_result<std::size_t>>(
          [this, &out, limit](semaphore_permit&& unit) { return take_many(std::move(unit), out, limit); });
    }
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
    return nothing_now<Outcome>();
  }
  template <class Outcome>
  Outcome nothing_now() const {
    return static_cast<const State&>(*this).drained() ? recv_status::closed : recv_status::empty;
  }
};

}  // namespace asyncband::mpmc::detail
