// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/mpmc_bounded_state.hpp: the shared state of a bounded MPMC channel: the ring
// and two semaphores, one for the capacity (senders wait on it) and one for the values
// (receivers wait on it).
#pragma once

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "../result.hpp"
#include "../semaphore.hpp"
#include "atomic.hpp"
#include "mpmc_handles.hpp"
#include "mpmc_takes.hpp"
#include "receiving_end.hpp"
#include "spin_lock.hpp"
#include "value_ring.hpp"
#include "waiter.hpp"

namespace asyncband::mpmc::detail {

#ifdef ASYNCBAND_TESTING
/// Tests: parks on this thread find no storage to relocate a cell to (as if allocation failed).
inline thread_local bool refuse_relocation_for_tests = false;
#endif

using place = asyncband::detail::ring_place;

/// A value a receive claimed but could not take (its move threw), waiting for a later receive.
/// Normally its cell went on to fresh storage and the value stays where it was, in storage the
/// record owns (`block`; nullptr: the cell's own, the ring's). If that storage could not be
/// allocated, the value holds its cell (`in_cell`, at place `p`) until a receive takes it.
template <class T>
struct parked_value {
  T* value = nullptr;
  asyncband::detail::value_block<T>* block = nullptr;
  place p = 0;
  bool in_cell = false;
};

/// The parked values: each goes to a later receive before any new place. At most `capacity` of
/// them (each keeps its unit of capacity), so the storage for the records is reserved once, with
/// the channel. It also counts the values parked in their cells that are not handed on yet (those
/// a receive popped and is taking again included), under the same lock, so that the passing of
/// empty places can wait for them.
template <class T>
class parked_places {
 public:
  explicit parked_places(std::size_t capacity) : parked_(new parked_value<T>[capacity]) {}

  /// Parks v. `again`: v was popped (its cell, if it holds one, is counted already).
  void push(const parked_value<T>& v, bool again) noexcept {
    const std::lock_guard lock(lock_);
    parked_[count_] = v;
    count_.store(count_ + 1, std::memory_order_relaxed);
    if (!again && v.in_cell) ++held_;
  }
  /// The value of a popped record that held its cell was taken, and the cell handed on.
  void taken_from_cell() noexcept {
    const std::lock_guard lock(lock_);
    --held_;
  }
  /// Some parked value holds its cell, not handed on yet. Under the lock, so ordered with push()
  /// and taken_from_cell(): see bounded_state::pass_empty_places.
  [[nodiscard]] bool any_held() noexcept {
    const std::lock_guard lock(lock_);
    return held_ != 0;
  }
  /// Takes the latest parked value, if any. One relaxed load when none is (the usual case): a
  /// receive whose unit came from a park() sees it, since the park happened before its unit
  /// was given (see bounded_state::take).
  bool pop(parked_value<T>& v) noexcept {
    if (count_.load(std::memory_order_relaxed) == 0) return false;
    const std::lock_guard lock(lock_);
    const std::size_t n = count_.load(std::memory_order_relaxed);
    if (n == 0) return false;
    v = parked_[n - 1];
    count_.store(n - 1, std::memory_order_relaxed);
    return true;
  }
  [[nodiscard]] std::size_t size() const noexcept { return count_.load(std::memory_order_relaxed); }
  /// The parked values, when nobody else is left (the channel's destruction).
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i != count_.load(std::memory_order_relaxed); ++i) f(parked_[i]);
  }

 private:
  asyncband::detail::spin_lock lock_;
  asyncband::detail::atomic<std::size_t> count_{0};  // written under the lock
  std::size_t held_ = 0;                             // under the lock
  std::unique_ptr<parked_value<T>[]> parked_;
};

/// The shared state of a bounded MPMC channel.
///
/// Two semaphores count what the ring holds: `capacity_` the free units (a send takes one, and
/// with it, from the same word, its place: the send ticket), `items_` the published values no
/// receive has claimed (a send gives one after publishing; a receive takes one). A receive that
/// holds a unit of `items_` claims a place with the receive ticket (the ticket bits of `items_`),
/// waits for that place's publication, moves the value out, hands the cell on and returns the
/// unit of capacity. So receivers wait, queue FIFO, are cancelled and lose when_any exactly as
/// semaphore acquisitions do, and a unit granted to a receive that does not use it (cancelled,
/// destroyed, a losing branch) goes to the next receive: the value it stands for never moved.
///
/// Why a receive's place is always claimed by a send: every place before it went to a receive
/// that held a unit (each backed by one published value) or was empty (a send whose
/// construction threw: no unit for it). Published values are at least the units granted, so a
/// published value lies at or after the receive's place, and sends claim places in order. The
/// receive waits at most for that send's move construction, never for a send not yet made.
///
/// An empty place (a send whose construction threw) has no unit of `items_`, so no receive
/// claims it for itself: the send that empties it passes it if it is next in line already, else
/// the receive that takes the value before it does, once that value is out (pass_empty_places),
/// so that its unit of capacity comes back even when no value follows it.
///
/// Receives hand cells on out of order, so a send that comes round the ring to a cell whose
/// previous value a receive claimed but has not finished moving waits for it (a few
/// instructions), as in every ring with per-cell stamps. A value whose move threw does not hold
/// its cell: it stays where it is and the cell goes on to fresh storage (park), so that no send
/// waits for a receive to take it, and no receive for such a send. Only if that storage cannot
/// be allocated does the value hold its cell until a receive takes it.
template <class T>
class bounded_state : public handle_counts<bounded_state<T>>, public value_takes<bounded_state<T>, T> {
 public:
  using value_type = T;
  static constexpr bool multi_consumer = true;

  bounded_state(std::size_t capacity, place first_index)
      : logical_capacity_(capacity),
        ring_(capacity, first_index),
        parked_(capacity),
        capacity_(capacity, asyncband::detail::varying_count_t{}, first_index),
        items_(0, asyncband::detail::varying_count_t{}, first_index) {}
  bounded_state(const bounded_state&) = delete;
  bounded_state& operator=(const bounded_state&) = delete;

  /// The last reference is gone: every send finished. Values never received are destroyed here.
  ~bounded_state() {
    const place sent = capacity_.next_ticket();
    const place claimed = items_.next_ticket();
    [[maybe_unused]] const place unclaimed = sent - claimed;  // places wrap: unsigned arithmetic
    assert((asyncband::detail::model_run_failed() ||
            capacity_.closed_count() + unclaimed + parked_.size() == logical_capacity_) &&
           "asyncband: permit outlived its channel: every sender and receiver are gone while a permit still "
           "holds units of capacity (keep a sender alive while it is held, or use an owned permit)");
    ring_.destroy_values(claimed, sent);
    parked_.for_each([](const parked_value<T>& v) {
      v.value->~T();
      delete v.block;
    });
  }

  /// A receiver handle goes; the last one disconnects the channel: later sends hand their value
  /// back, and the values nobody received are destroyed now (those still being written, when
  /// the last reference goes).
  void receiver_leaves() noexcept {
    if (this->last_receiver_leaves()) {
      this->add_ref();  // destroying values and closing may resume senders that drop every handle
      close();
      discard_received_by_nobody();
      this->drop_ref();
    }
    this->drop_ref();
  }

  [[nodiscard]] bool closed() const noexcept { return closed_.load(std::memory_order_seq_cst); }

  /// No new sends or reservations; queued senders end closed; permits held may still
  /// send; what was accepted still drains to the receivers, and then every receive ends closed.
  /// A sender woken inline may destroy every handle, the caller's included: the state keeps a
  /// reference of its own until the end.
  void close() noexcept {
    this->add_ref();
    closed_.store(true, std::memory_order_seq_cst);
    capacity_.close(&on_unit_back, this);
    end_if_drained();
    this->closed_event().set();
    this->drop_ref();
  }

  // --- sending -----------------------------------------------------------------------------------
  semaphore& capacity() noexcept { return capacity_; }
  [[nodiscard]] std::size_t logical_capacity() const noexcept { return logical_capacity_; }

  /// Sends `value` with one unit of capacity, which passes to the message (the receive that
  /// takes it returns it). If constructing the value throws, the cell is published empty,
  /// holding the unit until a receive passes it, and the exception propagates.
  template <class U>
  void push(semaphore_permit& units, U&& value) {
    units.split(1).forget();
    write_at(capacity_.take_ticket(), std::forward<U>(value));
  }
  /// Sends `value` (moved from only then) if a unit is available and nobody waits for one: the
  /// unit and the place in one CAS. Closed or full: false.
  bool try_push(T& value) {
    place i = 0;
    if (!capacity_.try_take_with_ticket(i)) return false;
    write_at(i, std::move(value));
    return true;
  }

  // --- receiving ---------------------------------------------------------------------------------
  semaphore& items() noexcept { return items_; }

  /// Values accepted and not yet received (including sends still being written, and the places
  /// of sends whose construction threw that are not passed yet: each holds a unit of capacity).
  [[nodiscard]] std::size_t len() const noexcept {
    const place queued = capacity_.next_ticket() - items_.next_ticket();  // places wrap
    return queued + parked_.size();
  }

 private:
  // --- what value_takes needs (see there) --------------------------------------------------------
  friend class value_takes<bounded_state<T>, T>;

  /// The value a unit of `items_` stands for, claimed: a parked one, or the one at its place
  /// (held in its cell: `in_cell`, at `p`).
  struct claimed_value {
    parked_value<T> v;
    bool parked = false;
  };

  /// A parked value first (ahead of newer places), else the next place's.
  claimed_value claim_value() noexcept {
    claimed_value c;
    if (parked_.pop(c.v)) {
      c.parked = true;
    } else {
      const place p = claim();
      c.v = {&ring_.at(p).value(), nullptr, p, true};
    }
    return c;
  }
  static T& value_of(const claimed_value& c) noexcept { return *c.v.value; }

  /// Its value moved out: destroys what is left of it, frees the storage it was parked in, and
  /// hands its cell on if it held one.
  void release(const claimed_value& c) noexcept {
    c.v.value->~T();
    delete c.v.block;
    if (c.v.in_cell) {
      ring_.hand_on(c.v.p);
      if (c.parked) parked_.taken_from_cell();
    }
  }

  /// Its move threw: parked (again) for the next receive, with a unit of `items_`.
  void park(const claimed_value& c) noexcept {
    if (!c.parked) return park(c.v.p, *c.v.value);
    parked_.push(c.v, true);
    items_.template give<false>(1);  // after the park: the receive given this unit finds it
  }

  /// n values were taken and their cells handed on: passes the empty places they held up, then
  /// returns their units of capacity, in one give.
  void done_with_values(std::size_t n) noexcept {
    if (empties_.load(std::memory_order_relaxed) != 0) pass_empty_places();
    // Last: it may resume a send inline. (So may the units of the empty places passed above; the
    // caller holds a handle, so the state outlives what they resume.)
    capacity_.template give<false>(n);
  }

  /// Closed, and every unit of capacity is back: every accepted value was received, and no
  /// permit or send in flight can publish any more.
  [[nodiscard]] bool drained() const noexcept {
    return closed() && capacity_.closed_count() == logical_capacity_;
  }

  /// After close, and after every unit of capacity that comes back later: once drained, the
  /// receives waiting (for nothing: `items_` is at 0 then) and every later one end closed.
  void end_if_drained() noexcept {
    if (drained()) items_.close(&nothing_to_do, nullptr);
  }
  static void on_unit_back(void* self) noexcept { static_cast<bounded_state*>(self)->end_if_drained(); }
  static void nothing_to_do(void* /*unused*/) noexcept {}

  /// A value gives its unit of `items_` once published. An empty place (the construction threw)
  /// is counted before its publication, so that empties_ never undercounts the empty places
  /// not yet passed, and passed at once if it is next in line.
  template <class U>
  void write_at(place i, U&& value) {
    ring_.write_at(
        i, std::forward<U>(value),
        [this](bool with_value) noexcept {
          if (with_value) {
            items_.template give<false>(1);
          } else {
            pass_empty_places();
          }
        },
        [this]() noexcept { empties_.fetch_add(1, std::memory_order_relaxed); });
  }

  /// The place of the value a unit of `items_` stands for when none is parked: the next
  /// receive ticket, passing empty cells (their units of capacity go back).
  place claim() noexcept {
    for (;;) {
      const place p = items_.take_ticket();
      await_publication(p);
      if (!ring_.empty_at(p)) return p;
      hand_on_empty(p);
    }
  }

  /// Passes the empty places at the front of the receive order (no unit of `items_` stands for
  /// them, so no receive would), returning their units of capacity. Run by the send that
  /// publishes an empty place, and by each receive, once it has taken its value, if empty
  /// places are not yet passed: one of the two sees the other. Both change the receive ticket
  /// with a read-modify-write of the items_ word (the send's announce_at_ticket, the receive's
  /// claim), so one comes first: if the send's, the claim acquires its publication and the
  /// count in empties_ made before it; if the claim's, the send reads the ticket it left, at the
  /// empty place. A place that somebody claims meanwhile fails the ticket's compare-and-swap and
  /// is not touched.
  ///
  /// Passing places frees units of capacity, so sends may come round the ring sooner. A receive
  /// passes them only once its own value is out and its cell handed on (if the move throws, the
  /// value is parked instead), and nobody passes them while a value parked in its cell (no
  /// storage to move the cell to) holds it: the receive that takes it does, afterwards. The lock
  /// of parked_places orders the check here with that receive's. That guard keeps one thread from
  /// coming round to such a cell through passed places; capacity also comes back through the
  /// units of values received meanwhile, so it is a mitigation of the fallback, not an invariant.
  void pass_empty_places() noexcept {
    for (;;) {
      if (parked_.any_held()) return;
      const place p = items_.announce_at_ticket();
      if (!ring_.published(p) || !ring_.empty_at(p)) return;
      if (items_.try_advance_ticket(p)) hand_on_empty(p);
    }
  }

  /// The value at a claimed place is being written; a write by this very thread (the receive
  /// runs inside a value's construction, from code it resumed inline) could never finish.
  void await_publication(place p) const noexcept {
    assert(!ring_.written_by_this_thread(p) &&
           "asyncband::mpmc: a receive from inside the construction of a value sent to the same channel");
    if (ring_.published(p)) return;
    asyncband::detail::at_test_point(asyncband::detail::test_point::awaiting_publication);
    ring_.await_publication(p);
  }

  /// A receive could not move the value at place p out: the value stays where it is, for the
  /// next receive (ahead of newer places), with its unit of capacity, and a unit of `items_` goes
  /// back for it. Its cell goes on at once, to fresh storage, so that sends coming round the ring
  /// do not wait for a receive to take it; only if that storage cannot be allocated does the
  /// value hold its cell (as a value still being moved out does).
  void park(place p, T& value) noexcept {
    parked_value<T> v{&value, nullptr, p, false};
    if (auto* fresh = new_block()) {
      v.block = ring_.relocate(p, fresh);
      ring_.hand_on(p);
    } else {
      v.in_cell = true;
    }
    parked_.push(v, false);
    items_.template give<false>(1);  // after the park: the receive given this unit finds it
  }

  /// Storage for a cell whose value is parked; nullptr if it cannot be allocated.
  static asyncband::detail::value_block<T>* new_block() noexcept {
#ifdef ASYNCBAND_TESTING
    if (refuse_relocation_for_tests) return nullptr;
#endif
    return new (std::nothrow) asyncband::detail::value_block<T>;
  }

  /// An empty place is passed: its count goes (before its unit, which may resume a send inline).
  void hand_on_empty(place p) noexcept {
    empties_.fetch_sub(1, std::memory_order_relaxed);
    hand_on(p);
  }

  /// A receive is done with place p: the cell goes to the next lap and its unit of capacity back.
  void hand_on(place p) noexcept {
    ring_.hand_on(p);
    capacity_.template give<false>(1);
  }

  /// The last receiver went: destroys the values received by nobody, so that they do not live
  /// as long as the senders: the parked ones and those in the ring up to the first place still
  /// being written (perhaps by this very thread, further up its stack: the last receiver may go
  /// inside a value's construction), which is not waited for. It and those behind it are
  /// destroyed with the channel. Nobody else claims places any more, apart from the passing of
  /// empty places.
  void discard_received_by_nobody() noexcept {
    parked_value<T> v;
    while (parked_.pop(v)) {
      v.value->~T();
      delete v.block;
      if (v.in_cell) {
        ring_.hand_on(v.p);
        parked_.taken_from_cell();
      }
      capacity_.template give<false>(1);
    }
    for (;;) {
      const place p = items_.next_ticket();
      if (!ring_.published(p)) return;
      if (!items_.try_advance_ticket(p)) continue;  // an empty place, passed by its send meanwhile
      if (ring_.empty_at(p)) {
        hand_on_empty(p);
      } else {
        ring_.at(p).value().~T();
        hand_on(p);
      }
    }
  }

  // Read by everybody, written by nobody.
  const std::size_t logical_capacity_;
  asyncband::detail::value_ring<T, true> ring_;
  parked_places<T> parked_;
  asyncband::detail::atomic<std::size_t> empties_{0};  // empty places not yet passed (written only for those)
  // Written by every send and receive: each on its own line.
  alignas(64) semaphore capacity_;
  alignas(64) semaphore items_;
  asyncband::detail::atomic<bool> closed_{false};
};

}  // namespace asyncband::mpmc::detail
