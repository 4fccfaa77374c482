// asyncband/detail/value_ring.hpp: a bounded channel's storage: a ring of cells, each value
// constructed in place and published by its cell's sequence stamp.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>

#include "spin_lock.hpp"

namespace asyncband::detail {

/// A place in the ring: a 32-bit counter that wraps (a channel's ticket, see semaphore_word).
using ring_place = std::uint32_t;

/// One cell of the ring. `seq` tells whose turn it is: place i may be written when seq == i,
/// and read when seq == i + 1; handing it on gives it to place i + size. The value is
/// constructed in place; `skip` marks a cell whose value's construction threw (nothing to
/// receive).
template <class T>
struct ring_cell {
  std::atomic<ring_place> seq;
  bool skip = false;
  alignas(T) unsigned char storage[sizeof(T)];

  T& value() noexcept { return *std::launder(reinterpret_cast<T*>(storage)); }
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

/// The cells of a bounded channel, at least `capacity` of them (a power of two). Who may write
/// or read which place is the channel's business (its capacity hands out places, its receivers
/// take them); the ring keeps the values and their publication: a writer waits for its cell's
/// turn (normally at once: the cell's last reader has handed it on), constructs the value and
/// publishes it with a release store of the stamp; a reader that sees the stamp (acquire) may
/// move the value out and hand the cell on. Places are 32-bit and wrap; the size is at most
/// 2^31, so a cell's stamps of two laps never collide.
template <class T>
class value_ring {
 public:
  value_ring(std::size_t capacity, ring_place first_index)
      : mask_(static_cast<ring_place>(std::bit_ceil(capacity) - 1)),
        cells_(new ring_cell<T>[std::size_t{mask_} + 1]) {
    for (ring_place i = first_index; i != static_cast<ring_place>(first_index + mask_ + 1); ++i)
      at(i).seq.store(i, std::memory_order_relaxed);
  }
  value_ring(const value_ring&) = delete;
  value_ring& operator=(const value_ring&) = delete;

  ring_cell<T>& at(ring_place i) const noexcept { return cells_[i & mask_]; }

  /// Place i's value (or its emptiness) is written, and nobody has handed its cell on yet.
  [[nodiscard]] bool published(ring_place i) const noexcept {
    return at(i).seq.load(std::memory_order_acquire) == static_cast<ring_place>(i + 1);
  }
  /// Published, with a value.
  [[nodiscard]] bool has_value(ring_place i) const noexcept { return published(i) && !at(i).skip; }

  /// Constructs the value at place `i` (claimed by the caller) and publishes it, then calls
  /// `after_publish()`. If the construction throws, the cell is published empty, after_publish()
  /// still runs, and the exception propagates.
  template <class U, class AfterPublish>
  void write_at(ring_place i, U&& value, AfterPublish&& after_publish) {
    ring_cell<T>& c = at(i);
    wait_for_turn(c, i);
    const write_in_progress writing{this, i, writes_in_progress};
    writes_in_progress = &writing;
    try {
      ::new (static_cast<void*>(c.storage)) T(std::forward<U>(value));
    } catch (...) {
      writes_in_progress = writing.outer;
      c.skip = true;
      c.seq.store(i + 1, std::memory_order_release);
      after_publish();
      throw;
    }
    writes_in_progress = writing.outer;
    c.skip = false;
    c.seq.store(i + 1, std::memory_order_release);
    after_publish();
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
      ring_cell<T>& c = at(i);
      if (!c.skip) c.value().~T();
    }
  }

 private:
  /// The cell is normally free at once; it can lag only while its last reader finishes moving
  /// the previous lap's value out, a few instructions.
  static void wait_for_turn(const ring_cell<T>& c, ring_place i) noexcept {
    spin_until([&c, i] { return c.seq.load(std::memory_order_acquire) == i; });
  }

  const ring_place mask_;  // size - 1
  std::unique_ptr<ring_cell<T>[]> cells_;
};

}  // namespace asyncband::detail
