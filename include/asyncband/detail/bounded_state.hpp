// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/bounded_state.hpp: the shared state of a bounded MPSC channel: its capacity
// (a semaphore whose tickets are the ring's places), its ring and its receiving end.
#pragma once

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "../result.hpp"
#include "../semaphore.hpp"
#include "atomic.hpp"
#include "channel_core.hpp"
#include "receiving_end.hpp"
#include "spin_lock.hpp"
#include "value_ring.hpp"
#include "wait_functions.hpp"

namespace asyncband::mpsc {

template <class T>
class receiver;

namespace detail {

/// A place in the ring (the capacity's ticket).
using place = asyncband::detail::ring_place;

/// The shared state of a bounded channel: the capacity, the ring, the receiver's wake-up.
///
/// Capacity and order are kept apart. Capacity is a semaphore of `capacity` units (FIFO among
/// waiting senders, cancellation-safe, closable): a send, or a permit, first takes a unit. A
/// send then claims its cell with the next ticket of the semaphore's word (the claim counter),
/// constructs the value there and publishes it by storing the cell's `seq` (release). While
/// nobody waits for capacity, a send takes its unit and its ticket in one CAS; a permit's send
/// takes only the ticket (one fetch_add). The single receiver owns `head_`, reads a cell once
/// its seq says so (acquire), hands the cell on to the next lap, and returns the unit. A permit
/// is a unit with no cell yet: it can be held, moved or given back without touching the order
/// of messages. Cells in use (claimed, not yet received) never exceed the units taken, so at
/// most `capacity` <= physical size: a claimed cell is normally free already; the writer still
/// waits for its seq, which also gives it the happens-before of the cell's last read. Places
/// are 32-bit and wrap; the physical size is at most 2^31, so a cell's stamps of two laps never
/// collide.
///
/// The capacity semaphore is kept alive by its owner (detail::kept_alive_t): its wake-ups take
/// no pin. Whatever may wake a capacity waiter holds a reference to the state meanwhile, or is
/// ordered before the state's destruction by other means:
/// - a unit returned by the receiver, a permit (its sender must outlive it) or a failed send,
///   and close(): a handle's reference, or the state's own, kept until after the wake-up;
/// - a cancelled send or reservation, which need not hold one itself (a stop callback on
///   another thread, the Asio cancellation slot or the context's shutdown, a when_any sweep):
///   the waiting side holds a reference and cannot go on before the cancellation returns.
///   ~asyncband::stop_callback, run on every way out of the wait, waits for a callback in progress;
///   Asio's emit is synchronized with the handler, and the primitive must outlive a pending
///   operation (asio.hpp); the when_any sweeper holds a unit of the combinator, so the winner
///   does not resume before the sweep ends.
template <class T>
class bounded_state : public channel_core<bounded_state<T>> {
  using core = channel_core<bounded_state<T>>;

 public:
  using value_type = T;
  static constexpr bool multi_consumer = false;

  bounded_state(std::size_t capacity, place first_index)
      : logical_capacity_(capacity),
        ring_(capacity, first_index),
        capacity_(capacity, asyncband::detail::varying_count_t{}, first_index,
                  asyncband::detail::kept_alive_t{}),
        head_(first_index) {}
  bounded_state(const bounded_state&) = delete;
  bounded_state& operator=(const bounded_state&) = delete;

  /// The last reference is gone: every sender finished, so every claimed cell is published.
  /// Values never received are destroyed here, exactly once.
  ~bounded_state() {
    const place end = capacity_.next_ticket();
    assert((asyncband::detail::model_run_failed() || every_unit_is_back(end)) &&
           "asyncband::mpsc::permit outlived its channel: every sender and the receiver are gone while a "
           "permit<T> still holds units of capacity (keep a sender alive while it is held, or use an "
           "owned_permit)");
    ring_.destroy_values(head_, end);
  }

  // --- sending ---------------------------------------------------------------------------------
  semaphore& capacity() noexcept { return capacity_; }
  [[nodiscard]] std::size_t logical_capacity() const noexcept { return logical_capacity_; }

  /// Sends `value` with one unit of capacity, which passes to the message (the receiver returns
  /// it). If constructing the value throws, the cell is published empty, holding the unit until
  /// the receiver passes it, and the exception propagates.
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

  // --- receiving (the receiver only) -------------------------------------------------------------
  [[nodiscard]] std::size_t len() const noexcept {
    const place queued = capacity_.next_ticket() - head_;  // places wrap: unsigned arithmetic
    return queued;
  }

  /// Passes the empty cells at the head (their units go back). The test is inline, the pass out
  /// of line: an empty cell is a send whose value's construction threw, rare, and every receive
  /// asks.
  void skip_empty() noexcept {
    if (head_is_empty_cell()) [[unlikely]]
      skip_empty_cells();
  }
  [[nodiscard]] bool head_has_value() noexcept { return ring_.has_value(head_); }

  /// Nothing can come any more: no producer is left, or the channel is closed and every unit is
  /// back (no permit or send in flight can still publish). Read before looking at the ring: a
  /// producer publishes before it leaves.
  [[nodiscard]] bool finished() const noexcept {
    if (this->producers_gone()) return true;
    return this->closed() && capacity_.closed_count() == logical_capacity_;
  }
  /// Under the receiver's lock, as it is about to sleep: a read-modify-write of the claim
  /// counter, so every claim is ordered before it (and is looked at here) or after it (and its
  /// publisher sees the receiver asleep). True, "do not sleep", if the head is published, or if
  /// a place claimed before is still being written by another thread, which may not wake the
  /// receiver: await_outstanding_write() then waits for it. Writes by this very thread (the
  /// receive runs inside a value's construction) cannot finish while it waits; they publish
  /// later on this thread and so see the receiver asleep.
  [[nodiscard]] bool announce_sleep() noexcept {
    const place next = capacity_.announce_at_ticket();
    // Each place is looked at once: a head found unpublished and then taken for published
    // would let the receiver sleep through a write whose publisher read the flag early.
    for (place i = head_; i != next; ++i) {
      if (ring_.published(i)) {
        if (i == head_) {
          outstanding_ = i;  // nothing to wait for: take it
          return true;
        }
      } else if (!ring_.written_by_this_thread(i)) {
        outstanding_ = i;
        return true;
      }
    }
    return false;
  }
  /// After announce_sleep() said "do not sleep": waits for the write it found, if any.
  void await_outstanding_write() const noexcept {
    const place i = outstanding_;
    if (ring_.published(i)) return;
    asyncband::detail::at_test_point(asyncband::detail::test_point::awaiting_publication);
    ring_.await_publication(i);
  }
  /// Under the receiver's lock, while it sleeps: passes the empty cells at its head.
  std::size_t pass_empty_locked() noexcept {
    std::size_t passed = 0;
    while (ring_.published(head_) && ring_.empty_at(head_)) {
      ring_.hand_on(head_++);
      ++passed;
    }
    return passed;
  }
  void return_units(std::size_t n) noexcept { capacity_.template give<false>(n); }
  /// Under the receiver's lock, while it sleeps (head_ is stable then).
  [[nodiscard]] bool value_waiting_locked() const noexcept {
    for (place i = head_;; ++i) {
      if (!ring_.published(i)) return false;
      if (!ring_.empty_at(i)) return true;
    }
  }
  /// After an ok completion of the receiver's wait: a value is at the head, past empty cells.
  result<T> take_head() {
    return after_wake<result<T>>([this] { return pop<result<T>>(); });
  }
  /// The same for a batch receive: up to `limit` values appended to `out`.
  template <class Buffer>
  result<std::size_t> take_head_many(Buffer& out, std::size_t limit) {
    return after_wake<result<std::size_t>>([this, &out, limit] { return pop_many(out, limit); });
  }

  /// Precondition: head_has_value(). Moves the head's value once, into `Outcome` built in
  /// place; only then do the cell and the unit go on. If that move throws, the value stays
  /// where it is, for the next receive.
  template <class Outcome>
  Outcome pop() {
    T& value = ring_.at(head_).value();
    return asyncband::detail::take_into<Outcome>(value, [this, &value]() noexcept {
      value.~T();
      hand_on_head();
    });
  }

  /// Precondition: head_has_value(). Moves up to `limit` of the values published from the head
  /// on into `out` (appended, in order), passing the empty cells among them; their cells go on
  /// one by one, their units of capacity back in one give (one hand-out to the senders waiting).
  /// Room for them is made first (if that throws, nothing is taken). If a move throws, the
  /// values before it stay appended and their units go back, the value stays at the head, and
  /// the exception propagates.
  template <class Buffer>
  std::size_t pop_many(Buffer& out, std::size_t limit) {
    const std::size_t n = std::min(limit, len());  // places claimed: at least those published
    asyncband::detail::make_room(out, n);
    std::size_t taken = 0;
    std::size_t passed = 0;
    try {
      for (; taken != n && ring_.published(head_); ++passed) {
        if (!ring_.empty_at(head_)) {
          T& value = ring_.at(head_).value();
          out.push_back(std::move(value));
          value.~T();
          ++taken;
        }
        ring_.hand_on(head_++);
      }
    } catch (...) {
      return_units(passed);
      throw;
    }
    return_units(passed);
    return taken;
  }

  /// try_recv: a value, empty, or closed. Throws std::logic_error while a receive is
  /// pending: that receive's senders own the cursor while it sleeps (they pass empty cells).
  try_recv_result<T> try_pop() {
    return try_receive<try_recv_result<T>>([this] { return pop<try_recv_result<T>>(); });
  }
  /// try_recv_many: ok with how many values were appended (up to `limit`), empty, or
  /// closed; throws as try_pop() does.
  template <class Buffer>
  try_recv_result<std::size_t> try_receive_many(Buffer& out, std::size_t limit) {
    return try_receive<try_recv_result<std::size_t>>([this, &out, limit] { return pop_many(out, limit); });
  }

  asyncband::detail::receive_in_progress& receiving() noexcept { return receiving_; }

  /// The receiver closes the channel (also when it goes): no new sends or reservations;
  /// queued senders end closed. Permits already held may still send.
  /// A sender woken inline by the capacity's close may destroy every handle, the closing
  /// receiver's included: the state keeps a reference of its own until the end.
  void close() noexcept {
    this->add_ref();
    this->mark_closed();
    capacity_.close(&on_unit_back, this);
    this->after_possible_end();  // nothing outstanding: a pending receive ends closed now
    this->announce_closed();
    this->drop_ref();
  }

  /// The receiver goes: later sends hand their value back; values received by nobody are
  /// destroyed now (those still being written, when the last reference goes).
  void receiver_leaves() noexcept {
    this->mark_receiver_gone();
    close();
    for (;;) {
      skip_empty();
      if (!head_has_value()) break;
      ring_.at(head_).value().~T();
      hand_on_head();
    }
    this->drop_ref();
  }

 private:
  friend class receiver<T>;

  /// After an ok wake-up, `take()` from the head past its empty cells (closed if no value is
  /// there: defensive, an ok wake-up guarantees one).
  template <class Outcome, class Take>
  Outcome after_wake(Take take) {
    skip_empty();
    if (!head_has_value()) return wait_status::closed;
    return take();
  }

  /// A try form: `take()` if a value is at the head (past empty cells), else empty or
  /// closed. Not while a receive is pending (std::logic_error).
  template <class Outcome, class Take>
  Outcome try_receive(Take take) {
    receiving_.check();
    skip_empty();
    if (head_has_value()) return take();
    if (!finished()) return recv_status::empty;
    skip_empty();
    if (head_has_value()) return take();
    return recv_status::closed;
  }

  /// The debug check of the destructor: every unit of capacity is back (the receiver's going
  /// closed the semaphore, which counts them from then on), or held by a place still in the
  /// ring. A unit missing is a plain permit's, which outlived every sender (its contract) and
  /// would give it back into freed memory.
  [[nodiscard]] bool every_unit_is_back(place end) const noexcept {
    const place queued = end - head_;
    return capacity_.closed_count() + queued == logical_capacity_;
  }

  /// Place `i` was claimed (the claim, a ticket taken with acquire, is ordered after the
  /// receiver's announced sleep if that came first: channel_core).
  template <class U>
  void write_at(place i, U&& value) {
    ring_.write_at(i, std::forward<U>(value),
                   [this](bool /*with_value*/) noexcept { this->after_claimed_publish(); });
  }

  static void on_unit_back(void* self) noexcept { static_cast<bounded_state*>(self)->after_possible_end(); }

  /// The receiver is done with the head cell: the next lap may use it, and its unit goes back.
  void hand_on_head() noexcept {
    ring_.hand_on(head_++);
    capacity_.template give<false>(1);
  }

  /// The head cell is published and empty.
  [[nodiscard]] bool head_is_empty_cell() const noexcept {
    return ring_.published(head_) && ring_.empty_at(head_);
  }
  /// Hands on the head cell while it is published and empty.
  [[gnu::noinline]] void skip_empty_cells() noexcept {
    while (head_is_empty_cell()) hand_on_head();
  }

  // Read by everybody, written by nobody: apart from the capacity's word, which every send and
  // receive writes, and from the receiver's cursor.
  const std::size_t logical_capacity_;
  asyncband::detail::value_ring<T> ring_;
  alignas(64) semaphore capacity_;
  alignas(64) place head_;  // the receiver's cursor
  place outstanding_ = 0;   // the receiver's: the write announce_sleep() found in progress
  asyncband::detail::receive_in_progress receiving_;  // the receiver's
};

}  // namespace detail
}  // namespace asyncband::mpsc
