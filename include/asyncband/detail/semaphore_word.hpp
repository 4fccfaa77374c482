// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/semaphore_word.hpp: the semaphore's count word, its lock-free paths and
// the tickets a channel's capacity hands out with it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "atomic.hpp"

namespace asyncband::detail {

/// Tag of the semaphore constructor for a count that is rarely at its initial value (a
/// channel's capacity): its lock-free paths read the state instead of guessing it.
struct varying_count_t {
  explicit varying_count_t() = default;
};
/// Tag of the semaphore constructor for a semaphore whose owner keeps it alive through every
/// call that may wake one of its waiters (a return of permits, a cancellation, close): its
/// wake-ups then need no pin (detail::wait_queue::wake_kept_alive). Only for an owner that can
/// show it for every caller: see bounded_state (mpsc) for the argument.
struct kept_alive_t {
  explicit kept_alive_t() = default;
};
/// Tag of the semaphore constructor for a lock with bounded barging (a mutex's semaphore: one
/// permit, one holder at a time): see semaphore_word's barging section and docs/design.md.
struct barging_t {
  explicit barging_t() = default;
};
/// Tag of the semaphore constructor for bounded barging with any number of holders (an rwlock:
/// a read takes one permit, a write all): the passes are counted in the word, and a `starving`
/// flag stops the barging once they reach the bound (see semaphore_word's shared barging
/// section and docs/design.md).
struct shared_barging_t {
  explicit shared_barging_t() = default;
};

/// The one atomic word of a semaphore: bit 0 is `contended`, set while anybody is queued or a
/// deficit is outstanding; bits 1-31 are the available count; bits 32-63 are a ticket counter,
/// which only a channel uses (a send takes its unit of capacity and its place in the ring in
/// one CAS). While `contended` is set the count is 0 (the head waiter or the deficit absorbs
/// every permit), and only holders of the owner's lock change the word apart from the tickets,
/// so the lock-free paths are exactly: take with the bit clear, give with the bit clear, and
/// advance the ticket. A mutex's semaphore barges instead (barging_t): it never sets
/// `contended`, and keeps two flags in the ticket bits (see "bounded barging" below). Every
/// write keeps the ticket bits, and every write is a read-modify-write, never a plain store: a
/// channel's receiver announces its sleep with one, and each later claim must read from its
/// release sequence (announce_at_ticket).
class semaphore_word {
 public:
  /// The largest count the word holds: 2^31 - 1.
  static constexpr std::size_t max = (std::size_t{1} << 31) - 1;
  /// The largest pass bound a shared barging word counts to (its 8 bits of passes).
  static constexpr unsigned max_pass_bound = 0xff;

  /// What try_add did.
  enum class add_outcome : unsigned char { added, contended, overflow };

  /// `count` available, and guessed to be the usual state (see guess_before_take).
  explicit semaphore_word(std::size_t count) noexcept : idle_(encode(count)), state_(idle_) {}
  /// `count` available, with shared barging: a lock-free take also fails while the word is
  /// `starving`. No guess: a contended rwlock is rarely idle, and the guessed CAS measured
  /// 1.9x the time of read-then-CAS for coroutine writers (`rwlock/write_contended_K`) and
  /// 1.4-1.7x for threads, while uncontended locks measured the same either way.
  semaphore_word(std::size_t count, shared_barging_t /*unused*/) noexcept
      : idle_(0), take_blockers_(contended | starving), state_(encode(count)) {}
  /// For a count that is rarely all available: no guess. Tickets start at `first_ticket`.
  semaphore_word(std::size_t count, varying_count_t /*unused*/, std::uint32_t first_ticket) noexcept
      : idle_(0), state_(encode(count) | (std::uint64_t{first_ticket} << 32)) {}

  // --- lock-free --------------------------------------------------------------------------------
  /// Takes n if nobody is queued (a barging word: is starving) and enough are available.
  bool try_take(std::size_t n) noexcept {
    std::uint64_t s = guess_before_take(n);
    while ((s & take_blockers_) == 0 && count_of(s) >= n) {
      if (state_.compare_exchange_weak(s, s - encode(n), std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return true;
    }
    return false;
  }

  /// Takes up to n of what is available if nobody is queued; returns how many (0 while anybody
  /// is queued: no barging). An MPMC batch receive takes the values there beyond its first.
  std::size_t try_take_some(std::size_t n) noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while ((s & contended) == 0 && count_of(s) != 0 && n != 0) {
      const std::size_t taken = std::min(count_of(s), n);
      if (state_.compare_exchange_weak(s, s - encode(taken), std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return taken;
    }
    return 0;
  }

  /// Adds n if nobody is queued and nothing is owed; reports overflow above max instead.
  add_outcome try_add(std::size_t n) noexcept {
    std::uint64_t s = guess_before_give(n);
    while ((s & contended) == 0) {
      if (n > max || count_of(s) > max - n) return add_outcome::overflow;
      if (state_.compare_exchange_weak(s, s + encode(n), std::memory_order_release,
                                       std::memory_order_relaxed))
        return add_outcome::added;
    }
    return add_outcome::contended;
  }

  /// Available now (0 while contended).
  [[nodiscard]] std::size_t available() const noexcept {
    const std::uint64_t s = state_.load(std::memory_order_acquire);
    return (s & contended) != 0 ? 0 : count_of(s);
  }

  /// Takes everything available; returns how much.
  std::size_t take_all() noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while ((s & contended) == 0 && count_of(s) != 0) {
      if (state_.compare_exchange_weak(s, s & ticket_bits, std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return count_of(s);
    }
    return 0;
  }

  // --- tickets, for a channel's capacity ----------------------------------------------------------
  /// One unit and the next ticket, if nobody is queued and a unit is available.
  [[nodiscard]] bool try_take_with_ticket(std::uint32_t& ticket) noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while ((s & contended) == 0 && count_of(s) != 0) {
      if (state_.compare_exchange_weak(s, s - encode(1) + ticket_one, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        ticket = ticket_of(s);
        return true;
      }
    }
    return false;
  }
  /// The next ticket, for a unit already held.
  std::uint32_t take_ticket() noexcept {
    return ticket_of(state_.fetch_add(ticket_one, std::memory_order_acquire));
  }
  /// Takes ticket `expected` if it is still the next one (true); false once somebody took it. An
  /// MPMC receiver passes a place no unit stands for (an empty one) with it.
  bool try_advance_ticket(std::uint32_t expected) noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while (ticket_of(s) == expected) {
      if (state_.compare_exchange_weak(s, s + ticket_one, std::memory_order_acq_rel,
                                       std::memory_order_relaxed))
        return true;
    }
    return false;
  }
  /// The next ticket, not taken: a read-modify-write, ordered with every take (seq_cst).
  std::uint32_t announce_at_ticket() noexcept {
    return ticket_of(state_.fetch_add(0, std::memory_order_seq_cst));
  }
  [[nodiscard]] std::uint32_t next_ticket() const noexcept {
    return ticket_of(state_.load(std::memory_order_acquire));
  }

  // --- an MPMC receive's claim of a place without a unit (mpmc::detail::bounded_state) --------
  /// The word now (acquire): for idle() and ticket_in(), then try_advance_idle().
  [[nodiscard]] std::uint64_t load() const noexcept { return state_.load(std::memory_order_acquire); }
  /// Nobody is queued and no unit is available: only the ticket bits are set.
  [[nodiscard]] static bool idle(std::uint64_t state) noexcept { return (state & ~ticket_bits) == 0; }
  /// A unit is available (and so nobody is queued).
  [[nodiscard]] static bool has_units(std::uint64_t state) noexcept { return count_of(state) != 0; }
  [[nodiscard]] static std::uint32_t ticket_in(std::uint64_t state) noexcept { return ticket_of(state); }
  /// Takes the ticket of `state` if the word is still exactly `state` (idle, as loaded); on
  /// failure `state` is the word now.
  bool try_advance_idle(std::uint64_t& state) noexcept {
    return state_.compare_exchange_strong(state, state + ticket_one, std::memory_order_acq_rel,
                                          std::memory_order_acquire);
  }
  /// Gives the ticket before that of `state` back if the word is still exactly `state` (idle).
  bool try_retreat_idle(std::uint64_t& state) noexcept {
    return state_.compare_exchange_strong(state, state - ticket_one, std::memory_order_acq_rel,
                                          std::memory_order_acquire);
  }
  /// Somebody is queued (or a deficit is owed). Relaxed: a publisher orders it with a fence.
  [[nodiscard]] bool contended_now() const noexcept {
    return (state_.load(std::memory_order_relaxed) & contended) != 0;
  }

  // --- bounded barging (a mutex's semaphore: no tickets, `contended` never set) ----------------
  // Two flags take the place of the ticket bits, which only a channel uses: `queued` (the wait
  // list is not empty; changed under the owner's lock) and `retrying` (the head of the list was
  // taken out of it to try again, and has not yet; set under the lock, cleared by that retry).
  // Anybody who finds the count available takes it, queued waiters or not. The holder's give
  // is one CAS that adds n while the head needs no serving (nobody queued, or a retry in flight
  // that will take the count or queue again); otherwise the holder serves the head under the
  // owner's lock, still holding the count: a give never frees it with the head unserved, since
  // whoever served the head after such a give could let it complete and destroy the owner while
  // the giver still had to touch it. Every change of the flags is a read-modify-write, ordered
  // with every give and take: a waiter that queues sets `queued` in the same CAS that saw
  // nothing available, and a give's CAS fails if the flags changed since it read them.

  /// The holder's give: adds n unless the head must be served (then false, and nothing changed).
  bool try_give_barging(std::size_t n) noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while (!must_serve(s)) {
      if (state_.compare_exchange_weak(s, s + encode(n), std::memory_order_release,
                                       std::memory_order_relaxed))
        return true;
    }
    return false;
  }
  /// The holder's give at its pass bound: adds n only while nobody is queued and no retry is in
  /// flight (true); false, and nothing changed, otherwise.
  bool try_give_unless_waiting(std::size_t n) noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while ((s & (queued | retrying)) == 0) {
      if (state_.compare_exchange_weak(s, s + encode(n), std::memory_order_release,
                                       std::memory_order_relaxed))
        return true;
    }
    return false;
  }
  /// Under the owner's lock, with the head served: adds n.
  void give_barging(std::size_t n) noexcept { state_.fetch_add(encode(n), std::memory_order_release); }
  /// A waiter is queued and no retry is in flight: the holder must serve the head before it
  /// gives (a retry, or the count directly to a waiter that cannot retry).
  [[nodiscard]] static bool must_serve(std::uint64_t state) noexcept {
    return (state & (queued | retrying)) == queued;
  }
  /// Somebody is queued or out to retry (a lock-free read: a spinning locker's hint).
  [[nodiscard]] bool someone_waits() const noexcept {
    return (state_.load(std::memory_order_relaxed) & (queued | retrying)) != 0;
  }
  /// The retry in flight: takes n if available, and clears `retrying` with the same CAS (and
  /// `starving` and the passes, which a shared word keeps for the oldest waiter: this retry).
  bool try_take_retrying(std::size_t n) noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while (count_of(s) >= n) {
      if (state_.compare_exchange_weak(s, (s - encode(n)) & ~(retrying | starving | pass_bits),
                                       std::memory_order_acquire, std::memory_order_relaxed))
        return true;
    }
    return false;
  }
  /// Under the lock, for a waiter about to queue (`retry`: the retry in flight, going back to
  /// the front): takes n if available (true), or marks the word queued (false: the caller links
  /// it). A retry clears `retrying` in the same CAS, either way. While a shared word is
  /// `starving` only the retry takes (it is the oldest waiter), and its take clears the flag and
  /// the passes.
  bool take_or_mark_queued(std::size_t n, bool retry) noexcept {
    const std::uint64_t clear = retry ? (retrying | starving | pass_bits) : 0;
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      const bool takes = count_of(s) >= n && (retry || (s & starving) == 0);
      const std::uint64_t next = takes ? s - encode(n) : (s | queued) & ~(retry ? retrying : 0);
      if (state_.compare_exchange_weak(s, takes ? next & ~clear : next, std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return takes;
    }
  }
  /// Under the lock, for a retry in flight whose waiter is gone: clears `retrying`, and takes n
  /// in the same CAS if available (true: the caller serves the head with them).
  bool take_clearing_retrying(std::size_t n) noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t next = (count_of(s) >= n ? s - encode(n) : s) & ~retrying;
      if (state_.compare_exchange_weak(s, next, std::memory_order_acquire, std::memory_order_relaxed))
        return count_of(s) >= n;
    }
  }
  /// Under the lock: the wait list became empty. Unless a retry is in flight (the oldest waiter,
  /// for which they are kept), a shared word stops starving and its passes restart: nobody
  /// waits, and the next waiter's count starts from zero.
  void clear_queued() noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t keep = (s & retrying) != 0 ? ~queued : ~(queued | starving | pass_bits);
      if (state_.compare_exchange_weak(s, s & keep, std::memory_order_relaxed)) return;
    }
  }
  /// Under the lock: the head is taken out to retry.
  void set_retrying() noexcept { state_.fetch_or(retrying, std::memory_order_relaxed); }
  /// Under the lock: the retry in flight ends (it was handed the count).
  void clear_retrying() noexcept { state_.fetch_and(~retrying, std::memory_order_relaxed); }
  [[nodiscard]] static bool retrying_in(std::uint64_t state) noexcept { return (state & retrying) != 0; }

  // --- shared barging (an rwlock's or a plain semaphore's: any number of holders) --------------
  // The flags of the barging section, plus `starving` and a pass count in the ticket bits. A
  // give made while anybody waits (queued, or a retry in flight) is a pass; the one that brings
  // the count to the bound sets `starving` (under the owner's lock) and restarts it. The count
  // also restarts whenever the oldest waiter gets its permits (handed them, or its retry takes
  // them) and whenever nobody waits any more (a give finds nobody, or the list empties). While the
  // word starves, lock-free takes fail and every give goes to the owner's lock, which hands the
  // permits to the front of the queue in FIFO order until the oldest waiter holds its own; a
  // retry in flight may take them for itself. Which waiter a give completes depends on the
  // head's request, which the word does not know: a give with the head queued and no retry in
  // flight goes to the owner's lock, as a strict FIFO give with anybody queued does. A plain
  // semaphore's deficit (reduce_permits) sets `contended`, with the count 0 (take_up_to): takes
  // fail on it, and so does the lock-free give, so that the owner's lock repays it first.

  /// The holder's give: adds n lock-free if nobody waits, or if a retry is in flight, the word
  /// does not starve and this pass stays below `bound` (it is counted): `added`. `contended`, and
  /// nothing changed, otherwise, and while a deficit is owed (`contended` set: the caller gives
  /// under the owner's lock, which repays it first); `overflow` if the count would exceed max.
  add_outcome try_give_shared(std::size_t n, unsigned bound) noexcept {
    std::uint64_t s = guess_before_give(n);
    for (;;) {
      // Nobody waits: the count restarts (and the word is the idle guess again).
      std::uint64_t next = (s + encode(n)) & ~pass_bits;
      if ((s & (queued | retrying | starving | contended)) != 0) {
        if ((s & (retrying | starving | contended)) != retrying || passes_of(s) + 1 >= bound)
          return add_outcome::contended;
        next = s + encode(n) + pass_one;
      }
      if (n > max || count_of(s) > max - n) return add_outcome::overflow;
      if (state_.compare_exchange_weak(s, next, std::memory_order_release, std::memory_order_relaxed))
        return add_outcome::added;
    }
  }
  /// Somebody is queued while some count is available (a retry that took part of it).
  [[nodiscard]] bool queued_with_some_available() const noexcept {
    const std::uint64_t s = state_.load(std::memory_order_relaxed);
    return (s & queued) != 0 && (s & contended) == 0 && count_of(s) != 0;
  }
  /// Under the owner's lock, shared barging: the deficit is repaid; gives may add lock-free
  /// again (the count is 0 until one does).
  void clear_owed() noexcept { state_.fetch_and(~contended, std::memory_order_relaxed); }
  /// Under the owner's lock: adds n, and counts a pass if anybody waits (else the count
  /// restarts). At the bound the count restarts and the word starves if `due()` says the passed
  /// waiter is due (a coroutine always; a parked thread once it has waited long enough). False,
  /// and nothing changed, if the count would exceed max.
  template <class Due>
  bool give_counting_pass(std::size_t n, unsigned bound, Due&& due) noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    int starve = -1;  // asked due() yet: -1 no, else its answer
    for (;;) {
      if (n > max || count_of(s) > max - n) return false;
      std::uint64_t next = (s + encode(n)) & ~pass_bits;  // nobody waits: the count restarts
      if ((s & (queued | retrying)) != 0) {
        next = s + encode(n);
        if (passes_of(s) + 1 >= bound) {
          if (starve < 0) starve = due() ? 1 : 0;
          next = (next & ~pass_bits) | (starve != 0 ? starving : 0);
        } else {
          next += pass_one;
        }
      }
      if (state_.compare_exchange_weak(s, next, std::memory_order_release, std::memory_order_relaxed))
        return true;
    }
  }
  /// Under the owner's lock, for a waiter it hands them to: takes n if available, starving or
  /// not (true); false if fewer are.
  bool take_for_waiter(std::size_t n) noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while (count_of(s) >= n) {
      if (state_.compare_exchange_weak(s, s - encode(n), std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return true;
    }
    return false;
  }
  /// Under the owner's lock: the oldest waiter holds its permits; barging resumes, and the passes
  /// of the next oldest count from zero.
  void clear_starving() noexcept { state_.fetch_and(~(starving | pass_bits), std::memory_order_relaxed); }
  [[nodiscard]] static bool starving_in(std::uint64_t state) noexcept { return (state & starving) != 0; }
  [[nodiscard]] static std::size_t count_in(std::uint64_t state) noexcept { return count_of(state); }

  // --- under the owner's lock ---------------------------------------------------------------------
  /// For a waiter about to queue that still misses `missing`: takes them (true), or takes every
  /// available unit into `granted` and marks the word contended (false: the caller queues).
  bool take_or_mark_contended(std::size_t missing, std::size_t& granted) noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      if ((s & contended) != 0) return false;
      const std::size_t available_now = count_of(s);
      if (available_now >= missing) {
        if (state_.compare_exchange_weak(s, s - encode(missing), std::memory_order_acquire,
                                         std::memory_order_relaxed))
          return true;
      } else if (state_.compare_exchange_weak(s, (s & ticket_bits) | contended, std::memory_order_acquire,
                                              std::memory_order_relaxed)) {
        granted += available_now;
        return false;
      }
    }
  }

  /// Takes up to n of what is available and sets `missing` to the rest; if any is missing, the
  /// word is marked contended (the owner records it as a deficit). False, and nothing changed,
  /// if more than `max_missing` would be missing. Contended already: all n are missing.
  bool take_up_to(std::size_t n, std::size_t max_missing, std::size_t& missing) noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      const std::size_t taken = (s & contended) != 0 ? 0 : std::min(count_of(s), n);
      if (n - taken > max_missing) return false;
      if ((s & contended) != 0) break;  // only lock holders change the word now
      const std::uint64_t next =
          (s & ticket_bits) | encode(count_of(s) - taken) | (taken != n ? contended : 0);
      if (state_.compare_exchange_weak(s, next, std::memory_order_acquire, std::memory_order_relaxed)) break;
    }
    missing = n - ((s & contended) != 0 ? 0 : std::min(count_of(s), n));
    return true;
  }

  /// Marks the word contended for good (a close); returns what was available.
  std::size_t take_all_and_mark_contended() noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while (!state_.compare_exchange_weak(s, (s & ticket_bits) | contended, std::memory_order_acq_rel,
                                         std::memory_order_relaxed)) {
    }
    return (s & contended) != 0 ? 0 : count_of(s);
  }

  /// From contended (count 0) to uncontended with n available: nobody waits, nothing is owed.
  void make_available(std::size_t n) noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while (!state_.compare_exchange_weak(s, (s & ticket_bits) | encode(n), std::memory_order_release,
                                         std::memory_order_relaxed)) {
    }
  }

 private:
  static constexpr std::uint64_t contended = 1;
  static constexpr std::uint64_t ticket_one = std::uint64_t{1} << 32;
  static constexpr std::uint64_t ticket_bits = ~(ticket_one - 1);
  static constexpr std::uint64_t queued = ticket_one;         // barging mode only
  static constexpr std::uint64_t retrying = ticket_one << 1;  // barging mode only
  static constexpr std::uint64_t starving = ticket_one << 2;  // shared barging only
  static constexpr unsigned pass_shift = 35;                  // shared barging: 8 bits of passes
  static constexpr std::uint64_t pass_one = std::uint64_t{1} << pass_shift;
  static constexpr std::uint64_t pass_bits = std::uint64_t{0xff} << pass_shift;
  static constexpr unsigned passes_of(std::uint64_t state) noexcept {
    return static_cast<unsigned>((state & pass_bits) >> pass_shift);
  }
  static constexpr std::uint64_t encode(std::size_t count) noexcept { return std::uint64_t{count} << 1; }
  static constexpr std::size_t count_of(std::uint64_t state) noexcept {
    // Through uint32_t, which holds the 31 count bits: the one conversion that narrows, and
    // the same code wherever size_t has 32 or 64 bits.
    return static_cast<std::uint32_t>(state >> 1) & max;
  }
  static constexpr std::uint32_t ticket_of(std::uint64_t state) noexcept {
    return static_cast<std::uint32_t>(state >> 32);
  }

  /// The first guess of the lock-free paths: nobody else holds any, as for an uncontended
  /// mutex or rwlock. A right guess saves the read before the CAS, which costs about 5 ns right
  /// after another locked instruction; a wrong one costs the failed CAS, which then reports the
  /// actual state.
  [[nodiscard]] std::uint64_t guess_before_take(std::size_t n) const noexcept {
    return idle_ >= encode(n) ? idle_ : state_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t guess_before_give(std::size_t n) const noexcept {
    return idle_ >= encode(n) ? idle_ - encode(n) : state_.load(std::memory_order_relaxed);
  }

  const std::uint64_t idle_;  // the word with the initial count all available (0: no guess)
  const std::uint64_t take_blockers_ = contended;  // flags that fail a lock-free take
  asyncband::detail::atomic<std::uint64_t> state_;
};

}  // namespace asyncband::detail
