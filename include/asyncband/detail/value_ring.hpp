// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/value_ring.hpp: a bounded channel's storage: a ring of cells, each value
// constructed in place and published by its cell's sequence stamp.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "atomic.hpp"
#include "spin_lock.hpp"

namespace asyncband::detail {

/// A place in the ring: a 32-bit counter that wraps (a channel's ticket, see semaphore_word).
using ring_place = std::uint32_t;

/// Storage for one value outside the ring: where a relocatable ring's cell goes on when the
/// value it holds must stay put (value_ring::relocate).
template <class T>
struct value_block {
  alignas(T) unsigned char bytes[sizeof(T)];
};

/// The moved_to member of a cell of a ring that never relocates: nothing.
struct never_relocated {};

/// One cell of the ring. `seq` tells whose turn it is: place i may be written when seq == i,
/// and read when seq == i + 1; handing it on gives it to place i + size. The value is
/// constructed in place; `skip` marks a cell whose value's construction threw (nothing to
/// receive). It is written before the stamp that publishes the cell and read after it; atomic
/// (relaxed) because an MPMC receiver may read it speculatively, for a place it has not claimed
/// and that may be handed on and rewritten meanwhile (its claim then fails: see
/// mpmc::detail::bounded_state::pass_empty_places). In a relocatable ring, `moved_to` is the
/// storage the cell uses instead of its own once a value was left behind in it: written by the
/// cell's reader before the stamp that hands the cell on, read by its next writer after it.
template <class T, bool Relocatable = false>
struct ring_cell {
  asyncband::detail::atomic<ring_place> seq;
  asyncband::detail::atomic<bool> skip{false};
  alignas(T) unsigned char storage[sizeof(T)];
  [[no_unique_address]] std::conditional_t<Relocatable, value_block<T>*, never_relocated> moved_to{};

  void* address() noexcept {
    if constexpr (Relocatable) {
      if (moved_to != nullptr) return moved_to->bytes;
    }
    return storage;
  }
  T& value() noexcept { return *std::launder(reinterpret_cast<T*>(address())); }
};

/// A value this thread is constructing in a ring's place `index`; they form a list on the
/// thread's stack, innermost first (a value's move constructor may send again). A receive that
/// finds its next place claimed and unwritten waits for the writer, unless that writer is its
/// own thread, which cannot finish while the receive waits inside it.
struct write_in_progress {
  const void* ring;
  ring_place index;
  const write_in_progress* outer;
};
inline thread_local const write_in_progress* writes_in_progress = nullptr;

/// The default of value_ring::write_at's hook before an empty place is published: nothing.
struct nothing_before_empty {
  void operator()() const noexcept {}
};

/// The cells of a bounded channel, at least `capacity` of them (a power of two). Who may write
/// or read which place is the channel's business (its capacity hands out places, its receivers
/// take them); the ring keeps the values and their publication: a writer waits for its cell's
/// turn (normally at once: the cell's last reader has handed it on), constructs the value and
/// publishes it with a release store of the stamp; a reader that sees the stamp (acquire) may
/// move the value out and hand the cell on. Places are 32-bit and wrap; the size is at most
/// 2^31, so a cell's stamps of two laps never collide. `Relocatable`: a reader may leave a value
/// where it is and give the cell new storage (relocate), so that the cell goes on at once.
template <class T, bool Relocatable = false>
class value_ring {
 public:
  using cell_type = ring_cell<T, Relocatable>;

  value_ring(std::size_t capacity, ring_place first_index)
      : mask_(static_cast<ring_place>(std::bit_ceil(capacity) - 1)),
        cells_(new cell_type[std::size_t{mask_} + 1]) {
    const ring_place end = first_index + mask_ + 1;  // wraps like every place
    for (ring_place i = first_index; i != end; ++i) at(i).seq.store(i, std::memory_order_relaxed);
  }
  value_ring(const value_ring&) = delete;
  value_ring& operator=(const value_ring&) = delete;
  /// The values are the channel's to destroy; the storage cells moved to is the ring's.
  ~value_ring() {
    if constexpr (Relocatable) {
      for (std::size_t i = 0; i != std::size_t{mask_} + 1; ++i) delete cells_[i].moved_to;
    }
  }

  cell_type& at(ring_place i) const noexcept { return cells_[i & mask_]; }

  /// The reader of place i leaves its value where it is (the caller takes charge of it) and
  /// gives the cell `fresh` storage for its next laps; hand_on(i) follows. Returns the block
  /// the value lives in, now the caller's to delete, or nullptr if it is the cell's own storage
  /// (the ring's: it stays, unused).
  value_block<T>* relocate(ring_place i, value_block<T>* fresh) noexcept
    requires Relocatable
  {
    return std::exchange(at(i).moved_to, fresh);
  }

  /// Place i's value (or its emptiness) is written, and nobody has handed its cell on yet.
  [[nodiscard]] bool published(ring_place i) const noexcept {
    const ring_place next = i + 1;  // wraps like every place
    return at(i).seq.load(std::memory_order_acquire) == next;
  }
  /// Place i, once published, is empty (its value's construction threw).
  [[nodiscard]] bool empty_at(ring_place i) const noexcept {
    return at(i).skip.load(std::memory_order_relaxed);
  }
  /// Published, with a value.
  [[nodiscard]] bool has_value(ring_place i) const noexcept { return published(i) && !empty_at(i); }

  /// Constructs the value at place `i` (claimed by the caller) and publishes it, then calls
  /// `after_publish(true)`. If the construction throws, `before_empty()` runs, the cell is
  /// published empty, `after_publish(false)` runs, and the exception propagates.
  template <class U, class AfterPublish, class BeforeEmpty = nothing_before_empty>
  void write_at(ring_place i, U&& value, AfterPublish&& after_publish, BeforeEmpty before_empty = {}) {
    cell_type& c = at(i);
    wait_for_turn(c, i);
    const write_in_progress writing{this, i, writes_in_progress};
    writes_in_progress = &writing;
    try {
      ::new (c.address()) T(std::forward<U>(value));
    } catch (...) {
      writes_in_progress = writing.outer;
      before_empty();
      c.skip.store(true, std::memory_order_relaxed);
      c.seq.store(i + 1, std::memory_order_release);
      after_publish(false);
      throw;
    }
    writes_in_progress = writing.outer;
    c.skip.store(false, std::memory_order_relaxed);
    c.seq.store(i + 1, std::memory_order_release);
    after_publish(true);
  }

  /// Place i is being written by this thread, further down its stack.
  [[nodiscard]] bool written_by_this_thread(ring_place i) const noexcept {
    for (const write_in_progress* w = writes_in_progress; w != nullptr; w = w->outer) {
      if (w->ring == this && w->index == i) return true;
    }
    return false;
  }

  /// Waits (spinning) until place i is published.
  void await_publication(ring_place i) const noexcept {
    spin_until([this, i] { return published(i); });
  }

  /// The reader is done with place i (its value moved out and destroyed, or none): the cell
  /// goes to the next lap.
  void hand_on(ring_place i) noexcept { at(i).seq.store(i + mask_ + 1, std::memory_order_release); }

  /// Destroys the values of the published places [from, to) (the channel goes).
  void destroy_values(ring_place from, ring_place to) noexcept {
    for (ring_place i = from; i != to; ++i) {
      if (!empty_at(i)) at(i).value().~T();
    }
  }

 private:
  /// The cell is normally free at once; it can lag only while its last reader finishes moving
  /// the previous lap's value out, a few instructions.
  static void wait_for_turn(const cell_type& c, ring_place i) noexcept {
    spin_until([&c, i] { return c.seq.load(std::memory_order_acquire) == i; });
  }

  const ring_place mask_;  // size - 1
  std::unique_ptr<cell_type[]> cells_;
};

}  // namespace asyncband::detail
