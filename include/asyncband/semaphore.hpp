// SPDX-License-Identifier: Apache-2.0
// asyncband/semaphore.hpp: the counting semaphore. Its parts, each in its own file:
//   detail/semaphore_word.hpp     the count word and its lock-free paths (and a channel's tickets)
//   detail/semaphore_permit.hpp   semaphore_permit, what an acquisition yields
//   detail/semaphore_wait.hpp     the wait list (queued waiters, hand-out, close), the acquisitions
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "detail/debug_access.hpp"
#include "detail/semaphore_permit.hpp"
#include "detail/semaphore_word.hpp"
#include "detail/wait_functions.hpp"
#include "detail/wait_queue.hpp"
#include "result.hpp"

namespace asyncband {

namespace mpsc::detail {
template <class T>
class bounded_state;
}  // namespace mpsc::detail
namespace mpmc::detail {
template <class T>
class bounded_state;
template <class T>
class unbounded_state;
template <class State, class T>
class value_takes;
}  // namespace mpmc::detail
namespace broadcast::detail {
template <class T, bool Lossless>
class ring;
}  // namespace broadcast::detail

class semaphore;
template <class T>
class mutex;
template <class T>
class rwlock;

namespace detail {
class semaphore_waiter;
template <class Make, bool Fallible = false>
class semaphore_acquire;
template <class Make, bool Fallible = false, bool Retries = false>
class acquire_awaiter;
template <class Make, bool Fallible = false>
struct acquire_forms;
template <class Source>
class source_awaiter;
/// The Make of an acquisition that yields the permit itself (semaphore::acquire, a condvar's
/// re-lock).
struct permit_itself;
}  // namespace detail

/// Tag of the semaphore, mutex and rwlock constructors for strict FIFO hand-off (no barging at
/// all).
struct strict_fifo_t {
  explicit strict_fifo_t() = default;
};
/// Selects strict FIFO hand-off: `mutex<int> m(asyncband::strict_fifo, 0);`,
/// `rwlock<int> l(asyncband::strict_fifo, 0);`.
inline constexpr strict_fifo_t strict_fifo{};

/// A counting semaphore: bounded barging (the default) or strict FIFO hand-off with partial
/// grants (`semaphore s(asyncband::strict_fifo, n)`), and a deficit.
///
/// Contract
/// - Synchronization: returning permits (a permit's destruction, `release`) happens-before the
///   acquisition that receives them completes.
/// - Fairness, bounded barging (the default): a request is served whole, never in part.
///   - Any acquisition (`try_acquire` too) takes its n permits when n are available at that
///     moment, queued waiters or not, so a small request may pass a larger one queued ahead.
///   - A release that makes the head's request available sends a coroutine's plain
///     `co_await acquire(n)` on a scheduler to retry, as the mutex does (a newcomer may beat it;
///     a retry that loses goes back to the front). It hands every other waiter its permits
///     directly (plain threads, acquisitions with a stop token or a timeout, owned ones,
///     when_any branches, coroutines without a scheduler): as many consecutive front waiters as
///     the available permits cover, up to the first that is sent to retry.
///   - The bound: every release made while anybody waits is a pass, counted from zero again
///     whenever the oldest waiter gets its permits or nobody waits. The `max_passes`-th makes
///     the semaphore starve: no acquisition barges any more (`try_acquire` fails, new ones
///     queue), and releases serve the queue in FIFO order until the oldest waiter holds its
///     permits.
///   - A retry that took its permits serves the waiters queued behind it that what is left
///     covers (releases made while it was in flight left the queue to it).
/// - Fairness, strict FIFO: released permits go first to repay a deficit, then to the waiter
///   at the head of the queue, which keeps what it is given (a partial grant) until it has all
///   it asked for; only then does the next waiter receive any. `try_acquire` and a new
///   `acquire` never take permits while anybody is queued (no barging), so a large request
///   cannot starve.
/// - when_any: an acquisition that lost its when_any is never granted a permit, not even part of
///   one: a release commits the head before completing its grant and passes over one that lost.
/// - Cancellation commits until the waiter resumes: a waiter cancelled while queued gives its
///   partial grant (strict FIFO) to the next waiters; one cancelled after its grant was complete
///   (stop observed on resumption, or its frame destroyed) returns all of it. Nothing is lost.
/// - `reduce_permits(n)` removes n permits; what is not available now becomes a deficit that
///   later releases repay before anybody takes a permit (barging or not).
/// - Programming errors throw std::invalid_argument or std::overflow_error before any change: a
///   request above max(), an available count pushed above max() by `release`. A permit whose
///   return would push it above max() (only possible after `release` added permits never taken)
///   terminates the program: a destructor cannot throw.
/// - Uncontended paths are lock-free: acquiring with nobody queued is one CAS, and so is
///   returning permits with nobody queued and no deficit.
/// - Destroying a coroutine while its acquisition's retry is posted to its scheduler is
///   undefined, as while its resumption is (debug builds assert).
/// - The semaphore must outlive its pending waits and its permits (an owned permit, from
///   `acquire_owned` on a std::shared_ptr, keeps it alive); a waiter that acquired may destroy
///   it at once (the releasing call does not touch it after the hand-off).
class semaphore {
  friend class semaphore_permit;
  friend class detail::semaphore_waiter;
  template <class Make, bool Fallible>
  friend class detail::semaphore_acquire;
  template <class Make, bool Fallible, bool Retries>
  friend class detail::acquire_awaiter;
  template <class Source>
  friend class detail::source_awaiter;
  template <class T>
  friend class mpsc::detail::bounded_state;
  template <class T>
  friend class mpmc::detail::bounded_state;
  template <class T>
  friend class mpmc::detail::unbounded_state;
  template <class State, class T>
  friend class mpmc::detail::value_takes;  // a batch's units of the values' semaphore
  template <class T, bool Lossless>
  friend class broadcast::detail::ring;  // close()
  template <class T>
  friend class mutex;  // their destructors' debug check
  template <class T>
  friend class rwlock;
  friend struct asyncband::detail::debug_access;  // debug.hpp's snapshot

  using acquire_forms = detail::acquire_forms<detail::permit_itself>;

 public:
  /// The largest count of permits a semaphore holds, or a single request asks for: 2^31 - 1.
  [[nodiscard]] static constexpr std::size_t max() noexcept { return detail::semaphore_word::max; }

  /// Bounded barging: how many releases made while anybody waits may pass the oldest waiter
  /// before the semaphore starves (no acquisition barges; releases serve the queue in FIFO
  /// order until the oldest waiter holds its permits). The rwlock's bound is the same (a parked
  /// writer thread's only once it has waited `thread_max_wait`); the mutex's is the same number
  /// counted differently (`mutex::max_passes`: every max_passes-th unlock hands the lock over).
  /// 2 in a model build, so that the explorer's few releases reach the bound.
#ifdef ASYNCBAND_MODEL
  static constexpr unsigned max_passes = 2;
#else
  static constexpr unsigned max_passes = 100;
#endif
  static_assert(max_passes <= detail::semaphore_word::max_pass_bound, "the word counts passes in 8 bits");

  /// A semaphore holding `permits` permits, with bounded barging. Throws std::invalid_argument
  /// if permits > max().
  explicit semaphore(std::size_t permits) : semaphore(permits, detail::shared_barging_t{}) {
    retrying_request_ = 0;  // any coroutine's request retries; no thread's does
  }
  /// A semaphore holding `permits` permits, with strict FIFO hand-off and partial grants.
  /// Throws std::invalid_argument if permits > max().
  semaphore(strict_fifo_t /*unused*/, std::size_t permits) : word_(checked(permits)) {}
  /// For a count that is rarely all available: no guessed first CAS (see semaphore_word).
  /// `first_ticket`: the channel's first place (tests of wrap-around start near 2^32).
  semaphore(std::size_t permits, detail::varying_count_t /*unused*/, std::uint32_t first_ticket = 0)
      : word_(checked(permits), detail::varying_count_t{}, first_ticket) {}
  /// As above, for a semaphore its owner keeps alive through every call that may wake a waiter
  /// (detail::kept_alive_t).
  semaphore(std::size_t permits, detail::varying_count_t varying, std::uint32_t first_ticket,
            detail::kept_alive_t /*unused*/)
      : semaphore(permits, varying, first_ticket) {
    kept_alive_ = true;
  }
  /// One permit with bounded barging, for a mutex (see mutex's contract and
  /// detail::semaphore_word's barging section): only ever one holder, whose unlocks count the
  /// passes. The word takes no guess (varying_count_t): a CAS on a guessed "free" (lock) or
  /// "held, nobody waiting" (unlock) instead of a read first fails on a contended lock and takes
  /// the cache line exclusively all the same; measured 1.35x (the lock's guess) and 1.75x (both)
  /// the time of the read-first CAS on `mutex/contended_K`, 2026-12-04.
  explicit semaphore(detail::barging_t /*unused*/) : word_(1, detail::varying_count_t{}, 0) {
    barging_ = true;
  }
  /// `permits` permits with bounded barging for any number of holders, for an rwlock (see
  /// rwlock's contract and detail::semaphore_word's shared barging section): a take of n takes
  /// them whenever n are available and the word does not starve; the passes are counted in
  /// the word. No partial grants or close on such a semaphore (a plain one has a deficit).
  semaphore(std::size_t permits, detail::shared_barging_t shared) : word_(checked(permits), shared) {
    barging_ = true;
    shared_ = true;
    retrying_request_ = permits;
  }
  semaphore(const semaphore&) = delete;
  semaphore& operator=(const semaphore&) = delete;
  /// Debug builds assert that no acquisition is pending.
  ~semaphore() { assert(no_waiters_left() && "asyncband::semaphore destroyed with waiters"); }

  /// `co_await s.acquire(n)` yields a permit for n. Throws std::invalid_argument if n > max().
  auto acquire(std::size_t n = 1);
  /// Yields result<semaphore_permit>: ok, or cancelled.
  auto acquire(std::size_t n, asyncband::stop_token stop);
  /// acquire(n) for a plain thread: blocks until n permits are held.
  semaphore_permit acquire_blocking(std::size_t n = 1);
  /// As acquire_blocking(n), or until `stop` is requested: the permit, or cancelled.
  result<semaphore_permit> acquire_blocking(std::size_t n, asyncband::stop_token stop);
  /// As acquire_blocking(n), for at most `timeout`: the permit, or timeout.
  template <class Rep, class Period>
  result<semaphore_permit> acquire_timeout(std::size_t n, std::chrono::duration<Rep, Period> timeout);

  /// n permits now, or nothing: fails if fewer are available; with strict FIFO also if anybody
  /// is queued, with barging while the semaphore starves (n = 0 always succeeds).
  [[nodiscard]] std::optional<semaphore_permit> try_acquire(std::size_t n = 1) {
    if (checked(n) != 0 && !try_take(n)) return std::nullopt;
    return semaphore_permit(this, n);
  }

  /// Adds n new permits (repaying a deficit, then serving waiters first). Throws
  /// std::overflow_error if the available count would exceed max().
  void release(std::size_t n = 1) {
    if (n > max()) throw std::overflow_error("asyncband::semaphore::release: above max()");
    give<true>(n);
  }

  /// Permits available now (0 while a deficit is outstanding; with strict FIFO, also while
  /// anybody waits; with barging, those available may be kept for the oldest waiter while the
  /// semaphore starves).
  [[nodiscard]] std::size_t available() const noexcept { return word_.available(); }

  /// Takes every available permit and forgets them; returns how many.
  std::size_t drain_permits() noexcept { return word_.take_all(); }

  /// Removes n permits for good: those available now at once, the rest as a deficit that later
  /// releases repay before any waiter is served. Throws std::invalid_argument if n > max(), and
  /// std::overflow_error if the deficit would exceed max().
  void reduce_permits(std::size_t n) {
    checked(n);
    const std::lock_guard lock(queue_.mutex());
    std::size_t missing = 0;
    if (!word_.take_up_to(n, max() - deficit_, missing))
      throw std::overflow_error("asyncband::semaphore::reduce_permits: deficit above max()");
    deficit_ += missing;
  }

 private:
  /// For the debug check of an owner's destructor (see wait_queue::no_waiters_left).
  [[nodiscard]] bool no_waiters_left() noexcept {
    // A retry in flight is a pending lock outside the queue.
    return queue_.no_waiters_left() && !(barging_ && detail::semaphore_word::retrying_in(word_.load()));
  }

  // --- tickets, for a channel's capacity (bounded_state): see detail::semaphore_word -----------
  [[nodiscard]] bool try_take_with_ticket(std::uint32_t& ticket) noexcept {
    return word_.try_take_with_ticket(ticket);
  }
  std::uint32_t take_ticket() noexcept { return word_.take_ticket(); }
  [[nodiscard]] bool try_advance_ticket(std::uint32_t expected) noexcept {
    return word_.try_advance_ticket(expected);
  }
  std::uint32_t announce_at_ticket() noexcept { return word_.announce_at_ticket(); }
  [[nodiscard]] std::uint32_t next_ticket() const noexcept { return word_.next_ticket(); }
  detail::semaphore_word& word() noexcept { return word_; }
  [[nodiscard]] const detail::semaphore_word& word() const noexcept { return word_; }
  [[nodiscard]] bool contended_now() const noexcept { return word_.contended_now(); }

  static std::size_t checked(std::size_t n) {
    if (n > max()) throw std::invalid_argument("asyncband::semaphore: count above max()");
    return n;
  }

  /// Lock-free: takes n permits if nobody is queued and enough are available.
  bool try_take(std::size_t n) noexcept { return word_.try_take(n); }
  /// Lock-free: takes up to n of the permits available if nobody is queued; returns how many.
  std::size_t try_take_some(std::size_t n) noexcept { return word_.try_take_some(n); }

  /// Under the lock, for a waiter about to queue: takes n permits if it can (true); otherwise
  /// gives it every available permit as a partial grant, marks the state contended (false), and
  /// the caller links it.
  bool take_or_queue(detail::semaphore_waiter& w) noexcept;

  using add_outcome = detail::semaphore_word::add_outcome;
  add_outcome try_add(std::size_t n) noexcept { return word_.try_add(n); }

  /// Returns n permits. Lock-free when nobody is queued and no deficit is outstanding;
  /// otherwise hands them out under the lock (re-checking there: the state may have become
  /// uncontended meanwhile). `Checked`: throw std::overflow_error rather than exceed max().
  /// Permits coming back from a permit exceed it only if `release` added permits beyond those
  /// ever taken: a fatal error there, since a permit's destructor cannot throw.
  template <bool Checked>
  void give(std::size_t n) noexcept(!Checked) {
    if (n == 0) return;
    if (barging_) {
      if (shared_) {
        give_shared<Checked>(n);
      } else {
        give_barging(n);
      }
      return;
    }
    const add_outcome outcome = try_add(n);  // checks n > max() too
    if (outcome != add_outcome::added) [[unlikely]]
      give_slowly<Checked>(n, outcome);
  }

  /// n permits would push the available count above max(): nothing changed. `Checked` (release)
  /// throws; a permit's return cannot, so it is a fatal error there.
  template <bool Checked>
  [[noreturn]] static void overflowed() noexcept(!Checked) {
    if constexpr (Checked) {
      throw std::overflow_error("asyncband::semaphore::release: above max()");
    } else {
      std::terminate();
    }
  }

  /// give()'s out-of-line rest, so that an uncontended unlock is inlined whole: a call would
  /// store its return address right before the atomic read-modify-write, which waits for it.
  template <bool Checked>
  [[gnu::noinline]] void give_slowly(std::size_t n, add_outcome outcome) noexcept(!Checked) {
    if (outcome == add_outcome::contended) {
      return_hook hook = nullptr;
      void* hook_context = nullptr;
      outcome = wake([this, n, &hook, &hook_context](detail::wait_list& waiters, detail::wake_batch& batch) {
        const add_outcome locked = try_add(n);
        if (locked != add_outcome::contended) return locked;
        if (n > max()) return add_outcome::overflow;
        if (closed_) {
          hook = on_return_;
          hook_context = on_return_context_;
        }
        hand_out(n, waiters, batch);
        return locked;
      });
      if (hook != nullptr) hook(hook_context);  // nothing of the semaphore is read after the wake-up
    }
    if (outcome == add_outcome::overflow) overflowed<Checked>();
  }

  // --- bounded barging (docs/design.md, "Contended coroutine locks" and "Shared barging") ------

  /// How long a plain thread waiting for the lock may be passed (checked at every
  /// max_passes-th unlock) before an unlock hands the lock to it. Waking a parked thread takes
  /// microseconds, and every locker waits while the lock is kept for it, so a thread's bound is
  /// a time, as in Go's and parking_lot's mutexes; a coroutine's retry resumes on a running
  /// scheduler and is bounded by the count alone. (A model build, where time does not pass,
  /// counts checks instead: see semaphore_waiter::due().)
  static constexpr std::chrono::microseconds thread_max_wait{1000};

  /// A plain semaphore with barging: no thread's wait retries (retrying_request_).
  [[nodiscard]] bool threads_handed() const noexcept { return shared_ && retrying_request_ == 0; }
  /// For the lock's retry coroutine (detail::source_awaiter): this semaphore barges.
  [[nodiscard]] bool barging() const noexcept { return barging_; }

  /// The holder's unlock: one CAS, unless the head is queued without a retry in flight (then
  /// serve_head). Every max_passes-th unlock hands the lock over instead, if anybody waits.
  /// passes_ is the holder's: only the one holder of the one permit touches it.
  void give_barging(std::size_t n) noexcept {
    if (++passes_ >= max_passes) [[unlikely]] {
      hand_over_due(n);
      return;
    }
    if (!word_.try_give_barging(n)) [[unlikely]]
      serve_head(n);
  }
  /// The holder's give on a shared barging semaphore (an rwlock, a plain semaphore): one CAS
  /// while nobody waits and nothing is owed, or while a retry is in flight below the pass bound
  /// and the word does not starve;
  /// otherwise under the lock (give_shared_locked). Above max() (only a plain semaphore's
  /// `release` can get there), nothing changes: overflowed().
  template <bool Checked>
  void give_shared(std::size_t n) noexcept(!Checked) {
    const add_outcome outcome = word_.try_give_shared(n, max_passes);
    if (outcome != add_outcome::added) [[unlikely]]
      give_shared_slowly<Checked>(n, outcome);
  }
  /// give_shared()'s out-of-line rest (as give_slowly is give()'s).
  template <bool Checked>
  [[gnu::noinline]] void give_shared_slowly(std::size_t n, add_outcome outcome) noexcept(!Checked) {
    if (outcome == add_outcome::contended && give_shared_locked(n)) return;
    overflowed<Checked>();
  }
  /// give_shared()'s locked part: repays the deficit first, adds the rest counting the pass (and
  /// starving at the bound), then settles the queue. False, and nothing changed, on overflow.
  /// Out of line.
  bool give_shared_locked(std::size_t n) noexcept;
  /// Under the lock, shared barging: serves the front of the queue from the available permits,
  /// unless a retry is in flight (it takes them or queues again, and then is served here). A
  /// covered head that retries is sent to retry (not while starving); any other covered head is
  /// handed its permits, and so is the next, until one is not covered. An emptied queue ends
  /// the starving.
  void settle_shared(detail::wait_list& waiters, detail::wake_batch& batch) noexcept;
  /// After a retry took its permits (shared barging): what is left serves the waiters queued
  /// behind it. A give made while the retry was in flight added its permits lock-free or left
  /// them to the retry (settle_shared), so only a retry of part of the permits (a plain
  /// semaphore's) can leave some while others wait; an rwlock writer's takes every one.
  void serve_behind_retry() noexcept {
    if (shared_ && word_.queued_with_some_available()) [[unlikely]]
      settle_queue();
  }
  /// settle_shared under the lock. Out of line.
  void settle_queue() noexcept;
  /// Under the lock, shared barging: whether the waiter the bound protects (the retry in
  /// flight, else the head) is due (semaphore_waiter::due); true if nobody waits.
  bool passed_waiter_due(detail::wait_list& waiters) noexcept;
  /// give_barging()'s bound: hands the n permits the caller holds to the retry in flight or
  /// the head, or frees them if nobody waits. Out of line.
  void hand_over_due(std::size_t n) noexcept;
  /// give_barging() with the head queued and no retry in flight: under the lock, takes the head
  /// out to retry on its scheduler and frees the n permits, or hands them to a head that cannot
  /// retry. Out of line.
  void serve_head(std::size_t n) noexcept;
  /// serve_head()'s locked part, for a caller holding n permits under the lock.
  inline void serve_locked(std::size_t n, detail::wait_list& waiters, detail::wake_batch& batch) noexcept;
  /// A waiter claimed to retry is destroyed before its retry ran (its wait's destructor passes
  /// on its grant): the retry in flight ends, and a permit it was handed, or that is free, serves
  /// the head. Out of line.
  void drop_retry(detail::semaphore_waiter& w) noexcept;
  /// Under the lock (barging): claims the when_any branches that lost at the front of the list,
  /// cancelled, and returns the first waiter behind them, or nullptr (`queued` then follows the
  /// emptied list). A serve must look past them: a lost branch cannot retry, and handing the
  /// lock on from it would skip the retry of a waiter behind it.
  detail::semaphore_waiter* front_not_lost(detail::wait_list& waiters, detail::wake_batch& batch) noexcept;
  /// Under the lock, holding n permits taken from the word: hands them to the first queued
  /// waiter that commits (true); false if nobody is left.
  bool hand_to_front(std::size_t n, detail::wait_list& waiters, detail::wake_batch& batch) noexcept;
  /// Under the lock, after the list lost a waiter: the word's `queued` follows it.
  void sync_queued(const detail::wait_list& waiters) noexcept {
    if (waiters.empty()) word_.clear_queued();
  }
  /// Under the lock, for the retry in flight `w` that did not take the permit lock-free: true if
  /// it holds it now (handed over meanwhile, or available), false if it is to go back to the
  /// front of the queue (the word says queued again).
  inline bool retry_locked(detail::semaphore_waiter& w) noexcept;

  /// Under the lock, with the state contended (count 0, changed only by lock holders): n
  /// permits repay the deficit, then go to waiters in FIFO order; a waiter that has all it asked
  /// for is claimed into `batch`. When nobody is left waiting and nothing is owed, the rest
  /// becomes available and the state uncontended again.
  inline void hand_out(std::size_t n, detail::wait_list& waiters, detail::wake_batch& batch) noexcept;

  /// Under the lock, with the state contended, for waiters of one unit each (an MPMC channel's
  /// receives): grants the first queued waiter that can still take it one unit counted nowhere
  /// else, which stands for what `bind(waiter)` gives it, and claims it; those whose when_any
  /// is over are claimed cancelled first. False if nobody was left to take it. When nobody is
  /// left waiting, the state is uncontended again (with nothing available).
  template <class Bind>
  bool grant_bound(detail::wait_list& waiters, detail::wake_batch& batch, Bind&& bind) noexcept;

  detail::wait_queue& queue() noexcept { return queue_; }

  /// The queue's wake-up (detail::wait_queue::wake), pinned unless the owner keeps this alive.
  template <class Claim>
  auto wake(Claim&& claim, detail::test_point after_unlock = detail::test_point::claimed_for_wake) noexcept {
    if (kept_alive_) return queue_.wake_kept_alive(std::forward<Claim>(claim), after_unlock);
    return queue_.wake(std::forward<Claim>(claim), after_unlock);
  }

  /// For a channel's capacity (bounded_state): no acquisition succeeds any more; queued ones end
  /// wait_status::closed. The state stays `contended`, so every lock-free path fails and the
  /// locked paths see closed_. From then on the semaphore only counts the permits that are back
  /// (available at close, partial grants of the waiters it closed, and every later return) in
  /// closed_count_, and calls `on_return(context)` after each later return, outside the lock:
  /// the channel's receiver learns that no permit is outstanding any more. Only fallible
  /// acquisitions can be used on a closable semaphore.
  using return_hook = void (*)(void* context) noexcept;
  inline void close(return_hook on_return, void* context) noexcept;

  /// After close(): the permits back so far (all of them once nobody holds any).
  [[nodiscard]] std::size_t closed_count() const noexcept {
    const std::lock_guard lock(queue_.mutex());
    return closed_count_;
  }

  detail::semaphore_word word_;
  std::size_t deficit_ = 0;  // guarded by queue_.mutex()
  bool kept_alive_ = false;  // set once, by the constructor (detail::kept_alive_t)
  bool barging_ = false;     // set once, by the constructor (detail::barging_t)
  bool shared_ = false;      // set once: barging with any number of holders
  // Shared barging: the one request of a plain thread that retries (an rwlock's: every permit, a
  // writer; 0 on a plain semaphore, whose threads are handed their permits). A thread's retry is
  // bounded in time, so the locked give reads its node (due()): while a giver holds some
  // permits, a retry for every permit cannot take lock-free, so its node is alive (the mutex has
  // the same guarantee from its one permit). A coroutine's retry of any size may retry on a plain
  // semaphore: it could complete and free its node meanwhile, and the give never reads it
  // (retry_timed_ says which).
  std::size_t retrying_request_ = 0;
  unsigned passes_ = 0;                             // barging: the holder's unlocks since the last hand-over
  detail::semaphore_waiter* retry_node_ = nullptr;  // barging: the retry in flight, while `retrying`
  bool retry_timed_ = false;                        // shared barging: retry_node_ is a parked thread's
  bool closed_ = false;                             // guarded by queue_.mutex(), as the three below
  std::size_t closed_count_ = 0;
  return_hook on_return_ = nullptr;
  void* on_return_context_ = nullptr;
  mutable detail::wait_queue queue_;
};

inline void semaphore_permit::merge(semaphore_permit&& other) {
  if (&other == this || other.count_ == 0) return;
  if (count_ == 0) {
    semaphore_ = other.semaphore_;
  } else if (other.semaphore_ != semaphore_) {
    throw std::invalid_argument("asyncband::semaphore_permit::merge: permits of another semaphore");
  } else if (other.count_ > semaphore::max() - count_) {
    throw std::overflow_error("asyncband::semaphore_permit::merge: above semaphore::max()");
  }
  count_ += std::exchange(other.count_, 0);
}

inline void semaphore_permit::release_to_semaphore(std::size_t n) const noexcept {
  semaphore_->give<false>(n);
}

inline void semaphore_permit::release() noexcept {
  if (count_ != 0) release_to_semaphore(std::exchange(count_, 0));
}

inline void semaphore_permit::release(std::size_t n) noexcept {
  n = std::min(n, count_);
  if (n == 0) return;
  count_ -= n;
  semaphore_->give<false>(n);
}

}  // namespace asyncband

// The wait list and the acquisitions (the owned ones too): they need the complete class.
#include "detail/semaphore_wait.hpp"
#include "stop_token.hpp"
