// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/fanout_ring.hpp: the shared state of a broadcast channel, both modes.
//
// One ring of `capacity` slots. Every message has a position (a 64-bit counter that wraps); a
// sender claims the next position under a short lock (no user code under it), writes the value
// into the position's slot outside any lock and publishes it with one release store of the
// slot's `seq`. Each receiver keeps its own cursor (position and slot index) and reads the
// slot without a lock. Details in docs/design.md, "Broadcast".
//
// A slot's words:
//   seq    2 * position (the message the slot holds) or 2 * position + 1 (being written for
//          that position); compared modulo 2^63, so positions may wrap past 2^64.
//   state  bits 0..29: readers registered on the slot right now (overflow mode only: a writer
//          about to overwrite waits for them); bit 30: holds a value; bits 32..63: receivers that
//          were subscribed when the message was sent and have not read or passed it yet.
//
// overflow: a writer overwrites whatever the slot held; a receiver that finds its position
// overwritten reports lagged(n) and jumps to the oldest position still held.
// bounded (lossless): a position's slot is free again once every receiver counted for the
// previous lap has read or passed it (`remaining` reaches 0); capacity is a semaphore of
// `capacity` units, one taken by each send and returned by the last reader of its message, so
// senders wait (FIFO, cancellable) while the slowest receiver is `capacity` behind, and no send
// scans the receivers.
#pragma once

#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "../broadcast/recv_result.hpp"
#include "../result.hpp"
#include "../semaphore.hpp"
#include "atomic.hpp"
#include "receiving_end.hpp"
#include "spin_lock.hpp"
#include "wait_queue.hpp"
#include "waiter.hpp"

namespace asyncband::broadcast::detail {

using position = std::uint64_t;

/// Where a receiver reads next: the position and its slot (kept apart, so that the slot index
/// never needs a division and positions may wrap at any capacity).
struct cursor {
  position pos = 0;
  std::size_t idx = 0;
};

inline constexpr std::uint64_t reader_one = 1;
inline constexpr std::uint64_t readers_mask = (std::uint64_t{1} << 30) - 1;
inline constexpr std::uint64_t full_bit = std::uint64_t{1} << 30;
inline constexpr std::uint64_t remaining_one = std::uint64_t{1} << 32;

constexpr std::uint32_t remaining_of(std::uint64_t state) noexcept {
  return static_cast<std::uint32_t>(state >> 32);
}
constexpr std::uint64_t encode(position p, bool writing) noexcept {
  return (p << 1) | static_cast<std::uint64_t>(writing);
}

/// What a slot's seq says to a receiver looking for position `p`.
enum class at_slot : unsigned char {
  readable,    ///< it holds p
  not_yet,     ///< it holds an earlier lap, or p is being written
  overwritten  ///< it holds (or is being written for) a later lap: p is gone
};
constexpr at_slot classify(std::uint64_t seq, position p) noexcept {
  // The distance between the slot's position and p, as a signed 63-bit number.
  const auto distance = static_cast<std::int64_t>(((seq >> 1) - p) << 1) >> 1;
  if (distance < 0) return at_slot::not_yet;
  if (distance > 0) return at_slot::overwritten;
  return (seq & 1) != 0 ? at_slot::not_yet : at_slot::readable;
}

template <class T>
struct alignas(64) slot {
  asyncband::detail::atomic<std::uint64_t> seq{0};
  asyncband::detail::atomic<std::uint64_t> state{0};
  alignas(T) unsigned char storage[sizeof(T)];

  T& value() noexcept { return *std::launder(reinterpret_cast<T*>(storage)); }
};

/// What a receive owns: the ring, its cursor, and the "one receive at a time" word. Lives in the
/// receiver handle; a receive node points to it.
template <class Ring>
struct receiver_state {
  Ring* ring = nullptr;
  cursor at{};
  asyncband::detail::receive_in_progress receiving;
};

template <class T, bool Lossless>
class ring;

/// A receive: ready when the receiver's position holds a message, was overwritten (lagged), or
/// can never be written (closed). Cancel-safe: the cursor moves only in take().
template <class T, bool Lossless>
class recv_wait : public asyncband::detail::waiter {
 public:
  using value_type = T;
  using outcome_type = recv_result<T>;
  static constexpr bool transferable = false;
  static constexpr bool fallible = true;

  /// Throws std::logic_error if another receive on this receiver is in progress.
  explicit recv_wait(receiver_state<ring<T, Lossless>>* rx) : rx_(rx) { rx->receiving.begin(); }
  recv_wait(const recv_wait&) = delete;
  recv_wait& operator=(const recv_wait&) = delete;
  ~recv_wait() {
    if (!taken_) rx_->receiving.end();
  }

  bool try_ready() noexcept { return rx_->ring->ready(rx_->at, status); }
  bool enqueue() noexcept { return rx_->ring->enqueue_receiver(*this); }
  bool cancel(wait_status why) noexcept { return rx_->ring->cancel_receiver(*this, why); }
  /// The receive is over before the read: the read's last step may resume a sender inline
  /// (lossless: the unit of the message goes back), which may destroy the receiver handle.
  recv_result<T> take() {
    receiver_state<ring<T, Lossless>>* const rx = rx_;
    rx->receiving.end();
    taken_ = true;
    return rx->ring->read(rx->at);
  }

  /// The waiting receiver's position: read by wakers under the receivers' lock while it sleeps.
  [[nodiscard]] const cursor& at() const noexcept { return rx_->at; }

 private:
  receiver_state<ring<T, Lossless>>* rx_;
  bool taken_ = false;
};

/// Capacity of the lossless mode: a semaphore. The overflow mode has none.
struct no_capacity {
  explicit no_capacity(std::size_t /*unused*/, asyncband::detail::varying_count_t /*unused*/) noexcept {}
};

template <class T, bool Lossless>
class ring {
  static_assert(std::is_copy_constructible_v<T>, "asyncband::broadcast: every receiver gets a copy of T");
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "asyncband::broadcast: a claimed position must be published, so moving T into the "
                "ring must not throw (send a std::shared_ptr<T> for such a type)");
  static_assert(std::is_nothrow_destructible_v<T>);

 public:
  using recv_node = recv_wait<T, Lossless>;
  using capacity_type = std::conditional_t<Lossless, semaphore, no_capacity>;

  /// `first`: the first position (tests of wrap-around start near 2^64).
  ring(std::size_t capacity, position first)
      : capacity_(checked(capacity)),
        slots_(std::make_unique<slot<T>[]>(capacity)),
        tail_(first),
        units_(capacity, asyncband::detail::varying_count_t{}) {
    for (std::size_t i = 0; i < capacity; ++i) {
      slots_[i].seq.store(encode(first + i - capacity, false), std::memory_order_relaxed);
    }
  }
  ring(const ring&) = delete;
  ring& operator=(const ring&) = delete;
  ~ring() {
    for (std::size_t i = 0; i < capacity_; ++i) {
      if ((slots_[i].state.load(std::memory_order_relaxed) & full_bit) != 0) slots_[i].value().~T();
    }
  }

  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  capacity_type& units() noexcept { return units_; }

  // --- references ------------------------------------------------------------------------------
  void add_sender() noexcept {
    refs_.fetch_add(1, std::memory_order_relaxed);
    senders_.fetch_add(1, std::memory_order_relaxed);
  }
  /// The last sender closes the channel, while it still holds its reference.
  void drop_sender() noexcept {
    if (senders_.fetch_sub(1, std::memory_order_acq_rel) == 1) close();
    drop_ref();
  }
  void drop_ref() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  /// A new receiver starting at the next message (under the claim lock, so a send in progress
  /// either counts it, and it reads that message, or does not, and it starts after it).
  [[nodiscard]] cursor subscribe() {
    std::optional<cursor> at;
    {
      const std::lock_guard lock(tail_lock_);
      const std::uint32_t n = receivers_.load(std::memory_order_relaxed);
      if (n != max_receivers) {
        receivers_.store(n + 1, std::memory_order_relaxed);
        refs_.fetch_add(1, std::memory_order_relaxed);
        at = cursor{tail_.load(std::memory_order_relaxed), tail_idx_};
      }
    }
    if (!at) throw std::length_error("asyncband::broadcast: too many receivers");
    return *at;
  }

  /// A receiver goes: it stops holding senders back at once (every message it was counted for
  /// and has not read is passed), then drops its reference.
  void unsubscribe(cursor at) noexcept {
    position end = 0;
    std::size_t end_idx = 0;
    {
      const std::lock_guard lock(tail_lock_);
      receivers_.store(receivers_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
      end = tail_.load(std::memory_order_relaxed);
      end_idx = tail_idx_;
    }
    pass_all(at, end, end_idx);
    drop_ref();
  }

  [[nodiscard]] std::size_t receiver_count() const noexcept {
    return receivers_.load(std::memory_order_relaxed);
  }

  /// Messages from `at` to the last one claimed (sends still being written included; more than
  /// capacity() means the receiver lagged).
  [[nodiscard]] std::uint64_t len(const cursor& at) const noexcept {
    return tail_.load(std::memory_order_acquire) - at.pos;
  }

  /// Messages held that some receiver counted for them has not read yet. O(capacity).
  [[nodiscard]] std::size_t held() const noexcept {
    std::size_t n = 0;
    for (std::size_t i = 0; i < capacity_; ++i) {
      const std::uint64_t s = slots_[i].state.load(std::memory_order_acquire);
      if ((s & full_bit) != 0 && remaining_of(s) != 0) ++n;
    }
    return n;
  }

  // --- closing ---------------------------------------------------------------------------------
  /// No more sends; receivers drain what was sent, then end closed. Waiting senders (lossless)
  /// end closed with their values.
  /// The closer may be a handle that a sender or receiver woken here destroys at once: the
  /// ring keeps a reference of its own until the wake-ups are done.
  void close() noexcept {
    {
      const std::lock_guard lock(tail_lock_);
      if (closed_.load(std::memory_order_relaxed)) return;
      closed_.store(true, std::memory_order_seq_cst);
      refs_.fetch_add(1, std::memory_order_relaxed);
    }
    if constexpr (Lossless) units_.close(nullptr, nullptr);
    after_publish();  // receivers at the end learn that nothing more comes
    drop_ref();
  }
  [[nodiscard]] bool is_closed() const noexcept { return closed_.load(std::memory_order_acquire); }

  // --- sending ---------------------------------------------------------------------------------
  /// The overflow send: claims the next position and writes it, overwriting the oldest message.
  /// Hands the value back if the channel is closed or has no receiver.
  send_result<T> send_overwriting(T&& value) noexcept {
    const std::optional<claim> c = claim_next();
    if (!c) return {send_status::closed, std::move(value)};
    asyncband::detail::at_test_point(asyncband::detail::test_point::claimed_position);
    slot<T>& s = slots_[c->idx];
    take_for_overwriting(s, c->pos);
    ::new (static_cast<void*>(s.storage)) T(std::move(value));
    publish(s, *c);
    after_publish();  // the last access to the ring
    return {};
  }

  /// The lossless send, once it holds a unit of capacity: claims, writes, publishes. The unit
  /// stays with the message (its last reader returns it). Hands the value back if the channel
  /// is closed or has no receiver (the unit goes back).
  send_result<T> send_with_unit(semaphore_permit&& unit, T&& value) noexcept {
    const std::optional<claim> c = claim_next();
    if (!c) return {send_status::closed, std::move(value)};  // `unit` returns as it goes
    unit.forget();
    asyncband::detail::at_test_point(asyncband::detail::test_point::claimed_position);
    slot<T>& s = slots_[c->idx];
    // The unit says a slot is free; this one is, but for a receiver leaving out of order that is
    // still passing it (a few instructions: see docs/design.md).
    asyncband::detail::spin_until([&s, c] {
      return s.state.load(std::memory_order_acquire) == 0 &&
             s.seq.load(std::memory_order_acquire) == encode(c->pos - c->capacity, false);
    });
    ::new (static_cast<void*>(s.storage)) T(std::move(value));
    publish(s, *c);
    after_publish();
    return {};
  }

  // --- receiving -------------------------------------------------------------------------------
  /// Lock-free: whether a receive at `at` can complete now; `status` closed if it never can.
  bool ready(const cursor& at, wait_status& status) const noexcept {
    if (const std::optional<wait_status> s = poll(at)) {
      status = *s;
      return true;
    }
    return false;
  }

  /// Registers a sleeping receive unless it can complete after all (a Dekker pair with
  /// after_publish: the sleeper counts itself, then looks; a sender publishes, then looks).
  bool enqueue_receiver(recv_node& node) noexcept {
    const std::lock_guard lock(rx_queue_.mutex());
    rx_queue_.waiters().push_back(node);
    sleepers_.store(sleepers_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    asyncband::detail::atomic_thread_fence(std::memory_order_seq_cst);
    if (const std::optional<wait_status> s = poll(node.at())) {
      unlink_locked(rx_queue_.waiters(), node);
      node.status = *s;
      return true;
    }
    return false;
  }

  bool cancel_receiver(recv_node& node, wait_status why) noexcept {
    return rx_queue_.cancel(node, why, [this](const asyncband::detail::wait_list& /*unused*/) {
      sleepers_.store(sleepers_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    });
  }

  /// Reads the message at `at` and moves past it: ok, lagged (the cursor jumps to the oldest
  /// message held), empty (not written yet) or closed (never will be). If copying the message
  /// throws, nothing changed. Every outcome is a prvalue all the way out (no move of it).
  recv_result<T> read(cursor& at) {
    if constexpr (Lossless) {
      return read_lossless(at);
    } else {
      return read_overflow(at);
    }
  }

 private:
  /// Every receiver registers on at most one slot at a time: the readers field never overflows.
  static constexpr std::uint32_t max_receivers = static_cast<std::uint32_t>(readers_mask);

  static std::size_t checked(std::size_t capacity) {
    if (capacity == 0) throw std::invalid_argument("asyncband::broadcast: capacity 0");
    if (capacity > semaphore::max())
      throw std::invalid_argument("asyncband::broadcast: capacity above 2^31 - 1");
    return capacity;
  }

  struct claim {
    position pos;
    std::size_t idx;
    std::uint32_t receivers;
    std::size_t capacity;
  };

  /// The next position, with the receivers that will read it; nullopt if closed or nobody
  /// listens. A few instructions under the claim lock, no user code.
  std::optional<claim> claim_next() noexcept {
    const std::lock_guard lock(tail_lock_);
    const std::uint32_t n = receivers_.load(std::memory_order_relaxed);
    if (n == 0 || closed_.load(std::memory_order_relaxed)) return std::nullopt;
    const claim c{tail_.load(std::memory_order_relaxed), tail_idx_, n, capacity_};
    tail_.store(c.pos + 1, std::memory_order_release);
    tail_idx_ = next_index(c.idx);
    return c;
  }

  [[nodiscard]] std::size_t next_index(std::size_t i) const noexcept {
    return i + 1 == capacity_ ? 0 : i + 1;
  }
  static void advance(cursor& at, std::size_t capacity) noexcept {
    ++at.pos;
    at.idx = at.idx + 1 == capacity ? 0 : at.idx + 1;
  }

  /// Overflow: waits for the previous lap's write to be published (a later claim never writes
  /// first), marks the slot as being written, waits for readers copying the old message, and
  /// destroys it.
  void take_for_overwriting(slot<T>& s, position q) noexcept {
    const std::uint64_t previous = encode(q - capacity_, false);
    asyncband::detail::spin_until([&s, previous, q] {
      std::uint64_t expected = previous;
      return s.seq.compare_exchange_weak(expected, encode(q, true), std::memory_order_seq_cst,
                                         std::memory_order_relaxed);
    });
    // Readers register (seq_cst) before they look at seq: either one sees the other's mark.
    asyncband::detail::spin_until(
        [&s] { return (s.state.load(std::memory_order_seq_cst) & readers_mask) == 0; });
    // The full bit stays set until publish() rewrites the state: nobody reads a slot being
    // written, and a locked instruction fewer per overwrite of an unread message.
    if ((s.state.load(std::memory_order_acquire) & full_bit) != 0) s.value().~T();
  }

  /// The value is in place: sets who will read it, then the one release store receivers look for.
  void publish(slot<T>& s, const claim& c) noexcept {
    const std::uint64_t counted = full_bit | (std::uint64_t{c.receivers} << 32);
    if constexpr (Lossless) {
      s.state.store(counted, std::memory_order_relaxed);  // nobody touches a free slot
    } else {
      // Readers backing off may hold registrations: keep them.
      std::uint64_t st = s.state.load(std::memory_order_relaxed);
      while (!s.state.compare_exchange_weak(st, (st & readers_mask) | counted, std::memory_order_relaxed)) {
      }
    }
    s.seq.store(encode(c.pos, false), std::memory_order_release);
  }

  /// After a publication or the close: wakes sleeping receivers that can complete.
  void after_publish() noexcept {
    asyncband::detail::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_relaxed) != 0) wake_ready_receivers();
  }

  void wake_ready_receivers() noexcept {
    rx_queue_.wake([this](asyncband::detail::wait_list& waiters, asyncband::detail::wake_batch& batch) {
      for (asyncband::detail::waiter* w = waiters.front(); w != nullptr;) {
        asyncband::detail::waiter* const next = w->next;
        auto& node = static_cast<recv_node&>(*w);
        if (const std::optional<wait_status> s = poll(node.at())) {
          unlink_locked(waiters, node);
          node.status = *s;
          batch.add(node);
        }
        w = next;
      }
    });
  }

  void unlink_locked(asyncband::detail::wait_list& waiters, recv_node& node) noexcept {
    waiters.remove(node);
    sleepers_.store(sleepers_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  }

  /// ok if a receive at `at` has something to report (a message, or that it lagged), closed if
  /// nothing can ever come, nullopt if it must wait.
  [[nodiscard]] std::optional<wait_status> poll(const cursor& at) const noexcept {
    if (classify(slots_[at.idx].seq.load(std::memory_order_acquire), at.pos) != at_slot::not_yet) {
      return wait_status::ok;
    }
    if (ended_at(at)) return wait_status::closed;
    return std::nullopt;
  }

  /// Closed, and `at` is past the last position ever claimed (the tail is frozen once closed).
  [[nodiscard]] bool ended_at(const cursor& at) const noexcept {
    return closed_.load(std::memory_order_seq_cst) && tail_.load(std::memory_order_acquire) == at.pos;
  }

  recv_result<T> read_overflow(cursor& at) {
    slot<T>& s = slots_[at.idx];
    s.state.fetch_add(reader_one, std::memory_order_seq_cst);  // pairs with take_for_overwriting
    const at_slot where = classify(s.seq.load(std::memory_order_seq_cst), at.pos);
    if (where != at_slot::readable) {
      s.state.fetch_sub(reader_one, std::memory_order_release);
      if (where == at_slot::not_yet) return nothing_at(at);
      return recv_result<T>::lagged_by(jump_to_oldest(at));
    }
    // Registered and readable: no writer touches the slot until we deregister.
    const bool last = remaining_of(s.state.load(std::memory_order_acquire)) == 1;  // nobody else will read it
    // Runs once the outcome is built: deregisters, and moves past the message unless the copy threw.
    struct finish {
      slot<T>& s;
      cursor& at;
      std::size_t capacity;
      bool last;
      int unwinding;
      ~finish() {
        if (std::uncaught_exceptions() != unwinding) {  // the copy threw: nothing read
          s.state.fetch_sub(reader_one, std::memory_order_release);
          return;
        }
        if (last) s.value().~T();  // the moved-from shell
        s.state.fetch_sub(reader_one + remaining_one + (last ? full_bit : 0), std::memory_order_release);
        advance(at, capacity);
      }
    } const done{s, at, capacity_, last, std::uncaught_exceptions()};
    if (last) return recv_result<T>(std::in_place, std::move(s.value()));
    return recv_result<T>(std::in_place, std::as_const(s.value()));
  }

  /// Nothing at `at` yet: empty, or closed if nothing can come any more.
  recv_result<T> nothing_at(const cursor& at) const noexcept {
    return recv_result<T>(ended_at(at) ? recv_status::closed : recv_status::empty);
  }

  /// The cursor found its message overwritten: it jumps to the oldest position still held (the
  /// next claim's slot, a lap back). Returns how many messages it skipped.
  std::uint64_t jump_to_oldest(cursor& at) noexcept {
    position tail = 0;
    std::size_t tail_idx = 0;
    {
      const std::lock_guard lock(tail_lock_);
      tail = tail_.load(std::memory_order_relaxed);
      tail_idx = tail_idx_;
    }
    const position oldest = tail - capacity_;
    const std::uint64_t missed = oldest - at.pos;
    assert(missed != 0 && missed < (std::uint64_t{1} << 62));
    at = {oldest, tail_idx};
    return missed;
  }

  recv_result<T> read_lossless(cursor& at) {
    slot<T>& s = slots_[at.idx];
    if (classify(s.seq.load(std::memory_order_acquire), at.pos) != at_slot::readable) return nothing_at(at);
    // Held until every counted receiver has read or passed it: nobody writes it meanwhile.
    const bool last = remaining_of(s.state.load(std::memory_order_acquire)) == 1;
    // Runs once the outcome is built, unless the copy threw: moves past the message and passes
    // it, which may resume a sender inline, so it is the last step.
    struct finish {
      ring& r;
      slot<T>& s;
      cursor& at;
      int unwinding;
      ~finish() {
        if (std::uncaught_exceptions() != unwinding) return;
        advance(at, r.capacity_);
        r.pass(s);
      }
    } const done{*this, s, at, std::uncaught_exceptions()};
    if (last) return recv_result<T>(std::in_place, std::move(s.value()));
    return recv_result<T>(std::in_place, std::as_const(s.value()));
  }

  /// Lossless: this receiver is done with the slot's message. The last one destroys it, frees
  /// the slot and returns the unit its send took. Returns whether it was the last.
  bool pass_quietly(slot<T>& s) noexcept {
    // `remaining` only falls while the message is held, and counts this receiver: seeing 1, it
    // is the last, and the slot is its alone (senders only read a held slot's state). It frees
    // it with a plain store, without a read-modify-write on the line that the sender and the
    // other receivers share (every message at 1 receiver). The acquire load, like the RMW's,
    // reads the last decrement, so every other receiver's copy happens before the destruction.
    if (remaining_of(s.state.load(std::memory_order_acquire)) != 1) {
      const std::uint64_t before = s.state.fetch_sub(remaining_one, std::memory_order_acq_rel);
      if (remaining_of(before) != 1) return false;
    }
    s.value().~T();
    s.state.store(0, std::memory_order_release);
    return true;
  }
  void pass(slot<T>& s) noexcept {
    if (pass_quietly(s)) units_.release(1);
  }

  /// A leaving receiver passes every message it was counted for: [at, end).
  void pass_all(cursor at, position end, std::size_t end_idx) noexcept {
    if constexpr (Lossless) {
      std::size_t freed = 0;
      for (; at.pos != end; advance(at, capacity_)) {
        slot<T>& s = slots_[at.idx];
        // Claimed before we left: published within a move construction.
        asyncband::detail::spin_until([&s, &at] {
          return classify(s.seq.load(std::memory_order_acquire), at.pos) == at_slot::readable;
        });
        if (pass_quietly(s)) ++freed;
      }
      if (freed != 0)
        units_.release(freed);  // may resume senders inline: the ring outlives it (our reference)
    } else {
      if (end - at.pos > capacity_) at = {end - capacity_, end_idx};  // older ones are overwritten
      for (; at.pos != end; advance(at, capacity_)) pass_overflow(slots_[at.idx], at.pos);
    }
  }

  /// Overflow: a leaving receiver drops its count on a message it did not read, so that the
  /// others' last reader can still move it out; nothing to do for one already overwritten.
  void pass_overflow(slot<T>& s, position p) noexcept {
    for (;;) {
      s.state.fetch_add(reader_one, std::memory_order_seq_cst);
      const at_slot where = classify(s.seq.load(std::memory_order_seq_cst), p);
      if (where == at_slot::readable) {
        s.state.fetch_sub(reader_one + remaining_one, std::memory_order_release);
        return;
      }
      s.state.fetch_sub(reader_one, std::memory_order_release);
      if (where == at_slot::overwritten) return;
      asyncband::detail::spin_until(
          [&s, p] { return classify(s.seq.load(std::memory_order_acquire), p) != at_slot::not_yet; });
    }
  }

  const std::size_t capacity_;
  std::unique_ptr<slot<T>[]> slots_;

  alignas(64) asyncband::detail::spin_lock tail_lock_;  // guards the claim: the four below
  asyncband::detail::atomic<position> tail_;            // the next position to claim
  std::size_t tail_idx_ = 0;                            // its slot
  asyncband::detail::atomic<std::uint32_t> receivers_{0};
  asyncband::detail::atomic<bool> closed_{false};

  alignas(64) asyncband::detail::atomic<std::size_t> refs_{1};  // senders + receivers
  asyncband::detail::atomic<std::size_t> senders_{1};
  asyncband::detail::atomic<std::size_t> sleepers_{0};  // receives queued in rx_queue_
  asyncband::detail::wait_queue rx_queue_;
  capacity_type units_;
};

}  // namespace asyncband::broadcast::detail
