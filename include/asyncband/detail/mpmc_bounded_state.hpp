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
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>

#include "../result.hpp"
#include "../semaphore.hpp"
#include "atomic.hpp"
#include "mpmc_handles.hpp"
#include "mpmc_receiver.hpp"
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

/// A value of type T claimed for a receive may be copied (under a spin lock: no user code runs):
/// out of its cell into the claim of the receive it is delivered to, and into a record when that
/// receive gives it back.
template <class T>
inline constexpr bool copied_out = std::is_trivially_copyable_v<T> && sizeof(T) <= 128;

/// Where a value claimed for a receive is. In the ring: in its cell (`in_cell`, at place `p`),
/// or where a cell left it when the cell went on to fresh storage (a park), in storage the
/// record owns (`block`; nullptr: the cell's own, the ring's). Or `copied` (a trivially
/// copyable value): in storage of whoever holds this, a record's slot or a receive's claim, and
/// `value` is null.
template <class T>
struct parked_value {
  T* value = nullptr;
  asyncband::detail::value_block<T>* block = nullptr;
  place p = 0;
  bool in_cell = false;
  bool copied = false;
};

/// The values claimed for receives and not taken, waiting for whichever receive holds a unit of
/// `items_` next (front first): values parked by a receive whose move threw, and values given
/// back by a receive that claimed one or was bound one and did not use it. There is exactly one
/// unit of `items_` for each (see bounded_state), and each keeps its unit of capacity, so there
/// are at most `capacity` of them: the storage for the records is reserved once, with the
/// channel. It also counts the values that hold their cell and are not handed on yet (parked
/// without storage to move the cell to, or delivered to a receive that has not taken them yet),
/// under the same lock, so that the return of capacity can wait for them.
template <class T>
class claimed_values {
 public:
  explicit claimed_values(std::size_t capacity) : slots_(new slot[capacity]), capacity_(capacity) {}

  /// Ahead of every other. `again`: v was counted as holding its cell already.
  void push_front(const parked_value<T>& v, bool again) noexcept {
    const std::lock_guard lock(lock_);
    slots_[front_slot()].v = v;
    grow(v, again);
  }
  /// Ahead of every other: a copy of `value` (trivially copyable, in storage about to go: a
  /// receive's claim), into the record's own slot, from which pop() copies it out again under
  /// the lock (a pointer into the slot would outlive its record: the next push reuses it).
  void push_front_copy(const T& value) noexcept {
    static_assert(copied_out<T>);
    const std::lock_guard lock(lock_);
    slot& s = slots_[front_slot()];
    std::memcpy(static_cast<void*>(s.storage), static_cast<const void*>(&value), sizeof(T));
    s.v = {nullptr, nullptr, 0, false, true};
    grow(s.v, false);
  }
  /// A value now holds its cell until a receive takes it (a delivery bound to a receive).
  void hold_cell() noexcept {
    const std::lock_guard lock(lock_);
    held_.store(held_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  /// A value that held its cell was taken (or moved to other storage), and the cell handed on.
  /// Returns the units of capacity deferred until no value held its cell.
  [[nodiscard]] std::size_t taken_from_cell() noexcept {
    const std::lock_guard lock(lock_);
    const std::size_t left = held_.load(std::memory_order_relaxed) - 1;
    held_.store(left, std::memory_order_relaxed);
    return left == 0 ? std::exchange(deferred_, 0) : 0;
  }
  /// The units of capacity of n places just handed on: those to give back now (all of them,
  /// or none while a value holds its cell: they come back with the last such take).
  [[nodiscard]] std::size_t units_to_give(std::size_t n) noexcept {
    const std::lock_guard lock(lock_);
    if (held_.load(std::memory_order_relaxed) == 0) return n;
    deferred_ += n;
    return 0;
  }
  /// Takes the front record, if any, a copied value into `copy` (room for a T). One relaxed
  /// load when none is: a receive whose unit came with a record sees it, since the push
  /// happened before the unit was given.
  bool pop(parked_value<T>& v, unsigned char* copy) noexcept {
    if (count_.load(std::memory_order_relaxed) == 0) return false;
    const std::lock_guard lock(lock_);
    const std::size_t n = count_.load(std::memory_order_relaxed);
    if (n == 0) return false;
    v = slots_[first_].v;
    if constexpr (copied_out<T>) {
      if (v.copied)
        std::memcpy(static_cast<void*>(copy), static_cast<const void*>(slots_[first_].storage), sizeof(T));
    }
    first_ = (first_ + 1) % capacity_;
    count_.store(n - 1, std::memory_order_relaxed);
    return true;
  }
  [[nodiscard]] std::size_t size() const noexcept { return count_.load(std::memory_order_relaxed); }
  /// Some value holds its cell (a hint: exact under the lock).
  [[nodiscard]] bool may_hold_cells() const noexcept { return held_.load(std::memory_order_relaxed) != 0; }
  /// The records, when nobody else is left (the channel's destruction). Copied values need no
  /// destruction (trivially copyable).
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i != count_.load(std::memory_order_relaxed); ++i)
      f(slots_[(first_ + i) % capacity_].v);
  }

 private:
  /// A record, with room for a copy of its value.
  struct slot {
    parked_value<T> v;
    alignas(T) unsigned char storage[copied_out<T> ? sizeof(T) : 1];
  };

  std::size_t front_slot() noexcept { return first_ = first_ == 0 ? capacity_ - 1 : first_ - 1; }
  void grow(const parked_value<T>& v, bool again) noexcept {
    count_.store(count_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (!again && v.in_cell)
      held_.store(held_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  asyncband::detail::spin_lock lock_;
  asyncband::detail::atomic<std::size_t> count_{0};  // written under the lock
  std::size_t first_ = 0;                            // under the lock
  asyncband::detail::atomic<std::size_t> held_{0};   // written under the lock
  std::size_t deferred_ = 0;                         // under the lock
  std::unique_ptr<slot[]> slots_;
  const std::size_t capacity_;
};

/// The shared state of a bounded MPMC channel.
///
/// Capacity: the semaphore `capacity_` of free units; a send takes one, and with it, from the
/// same word, its place in the ring (the send ticket), writes its value there and publishes it
/// with the cell's stamp. The receive that takes a value hands its cell on and returns the unit.
///
/// Values: the ring's stamps say which places are published; the receive ticket (the ticket
/// bits of `items_`' word) is the next place no receive has claimed. While nobody waits, a
/// receive claims a published place itself: one CAS of the word from "idle at ticket t" (no
/// unit available, nobody queued) to t + 1, and sends never touch `items_`. That is the fast
/// path: a message is the send's CAS of `capacity_` and the receive's CAS of `items_` and return
/// of a unit, with no other read-modify-write.
///
/// Waiting receives queue on the semaphore `items_` (so they are FIFO across every copy of the
/// receiver, are cancelled, time out and lose a when_any as acquisitions do). While any is
/// queued the word is contended, so no receive claims a place itself (no barging): values are
/// *delivered* instead. A delivery, under `items_`' lock, claims the published place at the
/// ticket for the first queued receive that can still take it (semaphore::grant_bound), grants
/// it one unit and binds the value to it, in its wait node (bind_delivery): a trivially copyable
/// value is copied there and its cell goes on; another stays in its cell, and every return of
/// capacity is held back until its receive takes it, so that no send comes round the ring to
/// that cell. Other receives may claim the places after a bound value before its receive runs:
/// each value is its receive's, so nobody's order changes.
///
/// Who delivers: a send, after publishing, fences and looks whether receives are queued; a
/// receive, after queueing (the word is contended from then on), fences and looks whether the
/// place at the ticket is published. One of the two sees the other (Dekker), so a published
/// value is never slept through; a delivery goes on along the published places while receives
/// are queued, and a place that is not published yet is delivered by its send, which then sees
/// them queued.
///
/// Records (`claimed_`): values that went back to the channel after a receive held them (a
/// throwing move, a receive cancelled after its claim or delivery), at the front, each with a
/// unit of `items_`; a receive holding a unit takes the front record. Such a value may reach a
/// receive after later values of its producer; every other value keeps its producer's order.
/// A send that comes round the ring to a cell whose value a running receive claimed but has not
/// finished moving waits for it, as in every ring with per-cell stamps.
///
/// An empty place (a send whose construction threw) is passed by whoever finds it at the ticket:
/// a receive claiming a place, a delivery, or the send that empties it, if it is next in line
/// already; else the receive that takes the value before it does, once that value is out
/// (pass_empty_places), so that its unit of capacity comes back even when no value follows it.
///
/// A value whose move threw does not hold its cell: it stays where it is and the cell goes on to
/// fresh storage (park), so that no send waits for a receive to take it. Only if that storage
/// cannot be allocated does the value hold its cell until a receive takes it.
template <class T>
class bounded_state : public handle_counts<bounded_state<T>>, public value_takes<bounded_state<T>, T> {
 public:
  using value_type = T;
  static constexpr bool multi_consumer = true;

  /// A delivered value of this type is copied out of its cell, under the lock, into the claim of
  /// the receive it goes to (in its wait node).
  static constexpr bool delivered_out = copied_out<T>;

  /// What a receive holds once it may take a value: a place it claimed itself (`v.in_cell`, at
  /// `v.p`), a value a delivery bound to it (`delivered`: in its cell, or copied here), or a
  /// record of `claimed_` (with the unit of `items_` it came with; a copied value copied here).
  struct claimed_value {
    parked_value<T> v;
    /// Not a place it claimed itself: a delivered value or a record (so not unclaimed, and
    /// counted as holding its cell, if it does, until it is taken).
    bool bound = false;
    /// Delivered: counted in `delivered_` until taken or given back.
    bool delivered = false;
    /// A copied value (v.copied), for a trivially copyable T.
    alignas(T) mutable unsigned char copy[delivered_out ? sizeof(T) : 1];
  };

  bounded_state(std::size_t capacity, place first_index)
      : logical_capacity_(capacity),
        ring_(capacity, first_index),
        claimed_(capacity),
        capacity_(capacity, asyncband::detail::varying_count_t{}, first_index),
        items_(0, asyncband::detail::varying_count_t{}, first_index) {}
  bounded_state(const bounded_state&) = delete;
  bounded_state& operator=(const bounded_state&) = delete;

  /// The last reference is gone: every send finished. Values never received are destroyed here.
  ~bounded_state() {
    const place sent = capacity_.next_ticket();
    const place claimed = items_.next_ticket();
    [[maybe_unused]] const place unclaimed = sent - claimed;  // places wrap: unsigned arithmetic
    assert(delivered_.load(std::memory_order_relaxed) == 0 &&
           "asyncband::mpmc: a receive outlived its channel");
    assert((asyncband::detail::model_run_failed() ||
            capacity_.closed_count() + unclaimed + claimed_.size() == logical_capacity_) &&
           "asyncband: permit outlived its channel: every sender and receiver are gone while a permit still "
           "holds units of capacity (keep a sender alive while it is held, or use an owned permit)");
    ring_.destroy_values(claimed, sent);
    claimed_.for_each([](const parked_value<T>& v) {
      if (!v.copied) v.value->~T();
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

  /// Values accepted and not yet received (including sends still being written, values
  /// delivered to receives that have not taken them yet, and the places of sends whose
  /// construction threw that are not passed yet: each holds a unit of capacity).
  [[nodiscard]] std::size_t len() const noexcept {
    // The receive ticket first: it never passes the send ticket, so read in this order the
    // difference is never negative (a wrap to ~2^32); and the sum of counts read at different
    // moments is clamped to what the channel can hold.
    const place claimed = items_.next_ticket();
    const place queued = capacity_.next_ticket() - claimed;  // places wrap
    const std::size_t n = queued + claimed_.size() + delivered_.load(std::memory_order_relaxed);
    return std::min(n, logical_capacity_);
  }

  /// A receive that does not wait: a record with its unit, if a unit is available (nobody
  /// queued), else the published place at the ticket, if the word is idle (nobody queued, no
  /// record waiting for its unit's holder). Passes the empty places it finds at the ticket.
  /// False: nothing to take now without overtaking a waiting receive.
  bool try_claim(claimed_value& c) noexcept {
    using sw = asyncband::detail::semaphore_word;
    auto& word = items_.word();
    std::uint64_t s = word.load();
    for (;;) {
      if (sw::has_units(s)) {
        if (!items_.try_take(1)) return false;
        c = pop_record();
        return true;
      }
      if (!sw::idle(s)) return false;
      const place p = sw::ticket_in(s);
      if (!ring_.published(p) && !being_written(p)) return false;
      if (!word.try_advance_idle(s)) continue;
      ring_.await_publication(p);  // at once, or one copy away (being_written)
      if (!ring_.empty_at(p)) {
        c.v = {&ring_.at(p).value(), nullptr, p, true, false};
        c.bound = false;
        c.delivered = false;
        return true;
      }
      hand_on_empty(p);
      s = word.load();
    }
  }
  /// try_claim() may succeed (read-only, for a blocking receive's spin).
  [[nodiscard]] bool may_claim() const noexcept {
    const std::uint64_t s = items_.word().load();
    using word = asyncband::detail::semaphore_word;
    return word::has_units(s) ||
           (word::idle(s) && (ring_.published(word::ticket_in(s)) || being_written(word::ticket_in(s))));
  }
  /// A claim that will not be used (its receive lost a when_any, or was stopped after it
  /// claimed or was bound its value): back to the ring if it can go there unnoticed (unclaim);
  /// else its value goes back ahead of the others as a record, for the next receive, with a unit
  /// of `items_`. A trivially copyable value is copied into the record and its cell goes on at
  /// once; a bound value of another type stays in its cell, whose capacity is held back since
  /// its delivery. Only a place of another type that the receive claimed itself is parked
  /// (its cell goes on to fresh storage, an allocation): capacity was not held back for it, so
  /// a send may already wait for its cell.
  void give_back(const claimed_value& c) noexcept {
    if (!c.bound && unclaim(c.v.p)) return;
    note_reoffered(c);
    if (!c.v.in_cell) return record_again(c);
    if constexpr (delivered_out) {
      claimed_.push_front_copy(*c.v.value);
      ring_.hand_on(c.v.p);  // its unit of capacity stays with the record
    } else if (c.bound) {
      claimed_.push_front(c.v, true);  // its cell is counted as held already
    } else {
      park_out_of_cell(c.v.p, *c.v.value, false);
    }
    stop_counting_delivery(c);
    items_.template give<false>(1);  // last: the receive given this unit finds the record
  }

  /// Place p, claimed by a receive that will not take it, back to the ring if nobody claimed a
  /// place after it (the word is still idle at p + 1): the order of the values is then as if it
  /// had not been claimed. (A claim that read the word at p + 1 earlier and succeeds after this
  /// and another claim of p takes p + 1, which is still the next place then.)
  bool unclaim(place p) noexcept {
    using sw = asyncband::detail::semaphore_word;
    auto& word = items_.word();
    std::uint64_t s = word.load();
    const place next = p + 1;  // wraps like every place
    if (!sw::idle(s) || sw::ticket_in(s) != next) return false;
    return word.try_retreat_idle(s);
  }

  /// Place p is claimed by a send (it lies before the send ticket) on another thread, which is
  /// writing a value of a trivially copyable type there: a receive may claim it and wait for the
  /// write, a few instructions (unless the value is converted from another type by user code).
  /// A receive never waits for another type's move constructor, which may take any time.
  [[nodiscard]] bool being_written(place p) const noexcept {
    if constexpr (delivered_out) {
      return capacity_.next_ticket() != p && !ring_.written_by_this_thread(p);
    } else {
      return false;
    }
  }

  /// A receive just queued (the word is contended): if the place at the ticket is published,
  /// its send may have looked for queued receives before, and found none; deliver it.
  /// Called with a reference held: a receive this delivers to may drop every handle.
  void after_receive_queued() noexcept {
    asyncband::detail::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with published()'s
    if (ring_.published(items_.next_ticket())) deliver();
  }

 private:
  // --- what value_takes needs (see there) --------------------------------------------------------
  friend class value_takes<bounded_state<T>, T>;

  /// The value a unit of `items_` stands for: the front record (there is one for each unit).
  claimed_value claim_value() noexcept { return pop_record(); }
  claimed_value pop_record() noexcept {
    claimed_value c;
    c.bound = true;
    [[maybe_unused]] const bool found = claimed_.pop(c.v, c.copy);
    assert(found && "asyncband::mpmc: a unit of items_ without its record");
    return c;
  }
  static T& value_of(const claimed_value& c) noexcept {
    if constexpr (delivered_out) {
      if (c.v.copied) return *std::launder(reinterpret_cast<T*>(c.copy));
    }
    return *c.v.value;
  }

  /// Its value moved out: destroys what is left of it, frees the storage it was parked in, and
  /// hands its cell on if it held one.
  void release(const claimed_value& c) noexcept {
    stop_counting_delivery(c);
    if (!c.v.copied) c.v.value->~T();
    delete c.v.block;
    if (c.v.in_cell) {
      ring_.hand_on(c.v.p);
      if (c.bound) give_capacity(claimed_.taken_from_cell());
    }
  }

  /// Its move threw: parked (again) for the next receive, with a unit of `items_`.
  void park(const claimed_value& c) noexcept {
    note_reoffered(c);
    if (!c.v.in_cell) return record_again(c);
    park_out_of_cell(c.v.p, *c.v.value, c.bound);
    stop_counting_delivery(c);
    items_.template give<false>(1);  // last: the receive given this unit finds the record
  }

  /// A value out of its cell (copied, or parked in storage of its own) goes back to the front
  /// of the records, with a unit of `items_`.
  void record_again(const claimed_value& c) noexcept {
    if constexpr (delivered_out) {
      if (c.v.copied) {
        claimed_.push_front_copy(value_of(c));  // the claim goes with its receive
      } else {
        claimed_.push_front(c.v, true);
      }
    } else {
      claimed_.push_front(c.v, true);
    }
    stop_counting_delivery(c);
    items_.template give<false>(1);  // last: the receive given this unit finds the record
  }

  /// A delivered value is a record now (or taken): after it is counted there, so that len()
  /// never undercounts.
  void stop_counting_delivery(const claimed_value& c) noexcept {
    if (c.delivered) delivered_.fetch_sub(1, std::memory_order_relaxed);
  }

  void note_reoffered([[maybe_unused]] const claimed_value& c) noexcept {
#ifdef ASYNCBAND_TESTING
    if (auto* hook = on_value_reoffered_for_tests.load()) hook(&value_of(c));
#endif
  }

  /// n values were taken and their cells handed on: passes the empty places they held up, then
  /// returns their units of capacity, in one give.
  void done_with_values(std::size_t n) noexcept {
    if (empties_.load(std::memory_order_relaxed) != 0) pass_empty_places();
    // Last: it may resume a send inline. (So may the units of the empty places passed above; the
    // caller holds a handle, so the state outlives what they resume.) Deferred while a record
    // holds its cell: see pass_empty_places.
    give_capacity(claimed_.may_hold_cells() ? claimed_.units_to_give(n) : n);
  }

  /// Closed, and every unit of capacity is back: every accepted value was received, and no
  /// permit or send in flight can publish any more.
  [[nodiscard]] bool drained() const noexcept {
    return closed() && capacity_.closed_count() == logical_capacity_;
  }

  /// After close, and after every unit of capacity that comes back later: once drained, the
  /// receives waiting (for nothing: nothing is published then) and every later one end closed.
  void end_if_drained() noexcept {
    if (drained()) items_.close(&nothing_to_do, nullptr);
  }
  static void on_unit_back(void* self) noexcept { static_cast<bounded_state*>(self)->end_if_drained(); }
  static void nothing_to_do(void* /*unused*/) noexcept {}

  /// Once a place is published (with a value or empty), receives that queued meanwhile get what
  /// is there: see the class comment. An empty place is counted before its publication, so that
  /// empties_ never undercounts the empty places not yet passed, and passed at once if it is next
  /// in line.
  template <class U>
  void write_at(place i, U&& value) {
    ring_.write_at(
        i, std::forward<U>(value),
        [this](bool with_value) noexcept {
          if (with_value) return after_publication();
          // Passing the empty place returns capacity, which may resume a send inline that drops
          // every handle, the caller's included.
          this->add_ref();
          pass_empty_places();
          after_publication();
          this->drop_ref();
        },
        [this]() noexcept { empties_.fetch_add(1, std::memory_order_relaxed); });
  }

  /// A place was published: receives that queued meanwhile get what is there.
  void after_publication() noexcept {
    asyncband::detail::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with after_receive_queued()'s
    if (items_.contended_now()) deliver();
  }

  /// Under `items_`' lock, while receives are queued: claims the published place at the ticket
  /// for the first of them, one at a time (passing empty places), and binds it to that receive
  /// with its unit (bind_delivery). A receive it resumes inline may drop every handle, the
  /// caller's included: the state keeps a reference of its own until the end.
  void deliver() noexcept {
    this->add_ref();
    std::size_t passed = 0;
    items_.wake([this, &passed](asyncband::detail::wait_list& waiters, asyncband::detail::wake_batch& batch) {
      while (!waiters.empty()) {
        const place p = items_.next_ticket();
        if (!ring_.published(p)) return;
        if (ring_.empty_at(p)) {
          // Passed here, its unit of capacity given after the lock (it may resume a send).
          if (items_.try_advance_ticket(p)) {
            empties_.fetch_sub(1, std::memory_order_relaxed);
            ring_.hand_on(p);
            ++passed;
          }
          continue;
        }
        items_.grant_bound(waiters, batch, [this, p](asyncband::detail::semaphore_waiter& w) {
          bind_delivery(p, static_cast<receive_waiter<bounded_state>&>(w));
        });
      }
    });

    if (passed != 0) give_capacity(claimed_.units_to_give(passed));
    if (empties_.load(std::memory_order_relaxed) != 0) pass_empty_places();
    this->drop_ref();
  }

  /// Under `items_`' lock: the value at published place p goes to receive `r`, which was just
  /// granted its unit and resumes after the lock. A value of a trivially copyable type leaves
  /// its cell at once, copied into the receive's node (a copy runs no user code, so it may run
  /// under the lock), and the cell goes on; another stays in its cell until `r` takes it, and
  /// capacity is held back until then (claimed_values::hold_cell).
  void bind_delivery(place p, receive_waiter<bounded_state>& r) noexcept {
    // Capacity is held back before the ticket moves: an empty place after p passed by another
    // thread in between must not return its unit while p's cell is held.
    if constexpr (!delivered_out) claimed_.hold_cell();
    delivered_.fetch_add(1, std::memory_order_relaxed);  // before the ticket: len() never undercounts
    // Only empty places are passed by others while receives are queued; p holds a value.
    [[maybe_unused]] const bool advanced = items_.try_advance_ticket(p);
    assert(advanced && "asyncband::mpmc: a delivered place claimed by another");
    claimed_value& c = r.bind();
    c.bound = true;
    c.delivered = true;
    if constexpr (delivered_out) {
      std::memcpy(static_cast<void*>(c.copy), static_cast<const void*>(&ring_.at(p).value()), sizeof(T));
      ring_.hand_on(p);
      c.v = {nullptr, nullptr, p, false, true};
    } else {
      c.v = {&ring_.at(p).value(), nullptr, p, true, false};
    }
  }

  /// Passes the empty places at the front of the receive order (no receive would take them),
  /// returning their units of capacity. Run by the send that publishes an empty place, and by
  /// each receive, once it has taken its value, if empty places are not yet passed (and by a
  /// delivery, which claims places as a receive does): one of the two sees the other. Both
  /// change the receive ticket with a read-modify-write of the items_ word (the send's
  /// announce_at_ticket, the claim), so one comes first: if the send's, the claim acquires its
  /// publication and the count in empties_ made before it; if the claim's, the send reads the
  /// ticket it left, at the empty place. A place that somebody claims meanwhile fails the
  /// ticket's compare-and-swap and is not touched.
  ///
  /// Passing places frees units of capacity, so sends may come round the ring sooner: not while
  /// a record's value holds its cell (delivered and not yet taken, or parked without storage to
  /// move the cell to). Those units are deferred until the last such value is taken
  /// (hand_on_empty), so that no send comes round the ring to a cell a record holds: every place
  /// from that record's on holds a unit then.
  void pass_empty_places() noexcept {
    for (;;) {
      const place p = items_.announce_at_ticket();
      if (!ring_.published(p) || !ring_.empty_at(p)) return;
      if (items_.try_advance_ticket(p)) hand_on_empty(p);
    }
  }

  /// A receive could not move the value it claimed out: the value stays where it is, a record
  /// for the next receive (ahead of newer places), with its unit of capacity; the caller gives a
  /// unit of `items_` for it. Its cell goes on at once, to fresh storage, so that sends coming
  /// round the ring do not wait for a receive to take it; only if that storage cannot be
  /// allocated does the value hold its cell (as a bound value does). `again`: its cell was
  /// counted as held already (a record, a bound value).
  void park_out_of_cell(place p, T& value, bool again) noexcept {
    parked_value<T> v{&value, nullptr, p, true};
    if (auto* fresh = new_block()) {
      v.block = ring_.relocate(p, fresh);
      v.in_cell = false;
      ring_.hand_on(p);
      if (again) give_capacity(claimed_.taken_from_cell());  // it was counted as holding its cell
    }
    claimed_.push_front(v, again);
  }

  /// Storage for a cell whose value is parked; nullptr if it cannot be allocated.
  static asyncband::detail::value_block<T>* new_block() noexcept {
#ifdef ASYNCBAND_TESTING
    if (refuse_relocation_for_tests) return nullptr;
#endif
    return new (std::nothrow) asyncband::detail::value_block<T>;
  }

  /// An empty place is passed: its count goes (before its unit, which may resume a send inline;
  /// deferred while a record's value holds its cell: see pass_empty_places).
  void hand_on_empty(place p) noexcept {
    empties_.fetch_sub(1, std::memory_order_relaxed);
    ring_.hand_on(p);
    give_capacity(claimed_.units_to_give(1));
  }
  void give_capacity(std::size_t n) noexcept { capacity_.template give<false>(n); }

  /// A receive is done with place p: the cell goes to the next lap and its unit of capacity back.
  void hand_on(place p) noexcept {
    ring_.hand_on(p);
    capacity_.template give<false>(1);
  }

  /// The last receiver went: destroys the values received by nobody, so that they do not live
  /// as long as the senders: the records and those in the ring up to the first place still
  /// being written (perhaps by this very thread, further up its stack: the last receiver may go
  /// inside a value's construction), which is not waited for. It and those behind it are
  /// destroyed with the channel. Nobody else claims places any more, apart from the passing of
  /// empty places.
  void discard_received_by_nobody() noexcept {
    parked_value<T> v;
    alignas(T) unsigned char copy[copied_out<T> ? sizeof(T) : 1];
    while (claimed_.pop(v, copy)) {
      if (!v.copied) v.value->~T();
      delete v.block;
      std::size_t units = 1;
      if (v.in_cell) {
        ring_.hand_on(v.p);
        units += claimed_.taken_from_cell();
      }
      give_capacity(units);
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
  claimed_values<T> claimed_;
  asyncband::detail::atomic<std::size_t> empties_{0};  // empty places not yet passed (written only for those)
  // Written by every send and receive: each on its own line.
  alignas(64) semaphore capacity_;
  alignas(64) semaphore items_;
  asyncband::detail::atomic<std::size_t> delivered_{0};  // values bound to receives, not yet taken
  asyncband::detail::atomic<bool> closed_{false};
};

}  // namespace asyncband::mpmc::detail
