// SPDX-License-Identifier: Apache-2.0
// asyncband/phaser.hpp
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <atomic>
#include <cassert>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

#include "detail/atomic.hpp"
#include "detail/broadcast_parking.hpp"
#include "detail/debug_access.hpp"
#include "detail/wait_functions.hpp"
#include "detail/wait_queue.hpp"
#include "result.hpp"
#include "stop_token.hpp"

namespace asyncband {

/// A phase of a phaser: a wrapping 64-bit counter. Phases compare equal or unequal, and next()
/// is the phase after; there is no ordering, since the counter wraps after 2^64 advances. Waits
/// observe a *change* of phase, never a numeric target.
class phase_id {
 public:
  /// Phase 0, a phaser's first.
  constexpr phase_id() noexcept = default;
  /// The phase whose counter is `value`.
  constexpr explicit phase_id(std::uint64_t value) noexcept : value_(value) {}

  /// The counter.
  [[nodiscard]] constexpr std::uint64_t value() const noexcept { return value_; }
  /// The phase after this one (after the largest value: 0).
  [[nodiscard]] constexpr phase_id next() const noexcept { return phase_id(value_ + 1); }

  /// Same phase (same counter).
  friend constexpr bool operator==(phase_id, phase_id) noexcept = default;

 private:
  std::uint64_t value_ = 0;
};

class phaser;
class phaser_participant;
class phaser_batch;

namespace detail {
class phaser_participant_wait;
class phaser_observer_wait;
}  // namespace detail

/// Reusable phases with a participant set that changes over time (Java's Phaser, without
/// tiering). Participants hold shared ownership: create() returns a shared_ptr, and every
/// participant keeps its phaser alive.
///
/// Contract
/// - when_any: a participant's wait arrives when it starts, and keeps its arrival if it loses.
/// - Registration. enroll() adds one participant, enroll(n) n of them at once; each is a
///   move-only handle that owes one arrival in every phase while it is registered.
///   Linearization: a registration takes effect at one point, under the phaser's lock. A
///   registration made before the current phase's final arrival joins that phase (and owes its
///   arrival in it, so that arrival is no longer final); one made after joins the next phase.
///   Never a mix: a new participant owes exactly the phases from the one it joined.
/// - Arrival. A phase completes (advances) when every participant registered in it has arrived
///   or withdrawn. Repeated arrivals of one participant in one phase count once.
/// - Withdrawal. arrive_and_deregister() arrives (if it had not) and leaves. Destroying a
///   participant, or a batch with unused registrations, withdraws them: an obligation not yet
///   met in the current phase is removed, which may complete the phase. Withdrawal says nothing
///   about the application's work; close() the phaser to report a failure.
/// - Empty phaser. A phase completes when its last obligation goes, by arrival or withdrawal,
///   even if nobody is left registered: the phaser then stays dormant in the next phase, and a
///   later registration joins that one. It never terminates by itself.
/// - Waiting. A participant's wait() reports the completion of its latest arrival's phase, once:
///   if that phase has completed and no wait of this participant has reported it yet, the wait
///   ends at once without arriving (split-phase use: arrive(), other work, wait()); otherwise it
///   arrives in the current phase (unless it already has) and waits for that phase. Observer
///   waits do not count as reporting. The observer wait, wait(observed), waits until the phase
///   differs from `observed`, without registering. Both yield the phase that the completion
///   started.
/// - Closing. close() freezes the unfinished phase: its waiters, and later waits for it, end
///   with wait_status::closed; waits for phases that had already completed still succeed.
///   After close, registrations and arrivals report closed.
/// - Synchronization: everything a participant did before its arrival in a phase happens-before
///   everything that follows a wait (of any participant or observer) that observes that phase's
///   completion, and everything that follows a phase() read returning a later phase.
/// - Fairness and resumption: the final arrival wakes every waiter of the phase exactly once,
///   after releasing the phaser's lock; coroutines resume on their own schedulers (in parallel on
///   a multi-threaded one), or inline on the arriving thread. Blocked plain threads are released
///   together by one notification.
class phaser : public std::enable_shared_from_this<phaser> {
  struct key {
    explicit key() = default;
  };

 public:
  /// The most participants a phaser can hold.
  [[nodiscard]] static constexpr std::size_t max() noexcept {
    return std::numeric_limits<std::size_t>::max() / 2;
  }

  /// A phaser with no participants, in phase `start` (a start near the counter's end tests the
  /// wrap-around).
  [[nodiscard]] static std::shared_ptr<phaser> create(phase_id start = phase_id{}) {
    return std::make_shared<phaser>(key{}, start);
  }
  /// Use create(): participants share ownership of their phaser.
  phaser(key /*unused*/, phase_id start) noexcept : phase_(start.value()) {}
  phaser(const phaser&) = delete;
  phaser& operator=(const phaser&) = delete;
  /// Debug builds assert that no observer wait with a node is pending (a participant's wait
  /// keeps the phaser alive; a plain thread's untimed wait has no node to find).
  ~phaser() { assert(queue_.no_waiters_left() && "asyncband::phaser destroyed with waiters"); }

  /// The current phase (lock-free).
  [[nodiscard]] phase_id phase() const noexcept { return phase_id(phase_.load(std::memory_order_acquire)); }
  /// Participants registered now.
  [[nodiscard]] std::size_t participants() const;
  /// Participants yet to arrive in the current phase.
  [[nodiscard]] std::size_t unarrived() const;
  /// True once close() was called.
  [[nodiscard]] bool is_closed() const noexcept { return closed_.load(std::memory_order_acquire); }

  /// Registers one participant in the current phase; closed once the phaser is closed.
  /// Throws std::overflow_error beyond max() participants.
  [[nodiscard]] inline result<phaser_participant> enroll();
  /// Registers n participants at once (all in the same phase), handed out by the batch.
  [[nodiscard]] inline result<phaser_batch> enroll(std::size_t n);

  /// Observer: waits until the phase differs from `observed`; yields result<phase_id>: the
  /// phase then current (ok), or closed if the phaser closed while still in `observed`.
  auto wait(phase_id observed) noexcept;
  /// As above; also ends with wait_status::cancelled when `stop` is requested first.
  auto wait(phase_id observed, asyncband::stop_token stop) noexcept;
  /// wait(observed) for a plain thread: blocks until the phase differs from `observed`.
  inline result<phase_id> wait_blocking(phase_id observed);
  /// As wait_blocking(observed), or until `stop` is requested (then cancelled).
  inline result<phase_id> wait_blocking(phase_id observed, asyncband::stop_token stop);
  /// As wait_blocking(observed), for at most `timeout` (then timeout).
  template <class Rep, class Period>
  result<phase_id> wait_timeout(phase_id observed, std::chrono::duration<Rep, Period> timeout);

  /// Freezes the unfinished phase: its waiters end closed. Idempotent.
  inline void close() noexcept;

 private:
  friend class phaser_participant;
  friend class phaser_batch;
  friend class detail::phaser_participant_wait;
  friend class detail::phaser_observer_wait;
  friend class detail::queued_waiter<phaser>;
  friend struct asyncband::detail::debug_access;
  using observer_forms = detail::wait_forms<detail::phaser_observer_wait>;

  /// What a locked step works with.
  struct locked_state {
    detail::wait_list& waiters;
    detail::wake_batch& batch;
  };

  /// Runs `step(locked_state&)` under the lock; then, unlocked, releases the parked threads if
  /// the step changed what they wait for and asked for it (release_parked: a close always, an
  /// advance when a blocked thread counted itself) and resolves the waiters the step claimed
  /// (detail::wait_queue::locked_step, which unpins after the notify). Returns what the step
  /// returned.
  template <class Step>
  auto locked(Step&& step) noexcept {
    return queue_.locked_step([&step](detail::wait_list& waiters, detail::wake_batch& batch) {
      locked_state state{waiters, batch};
      return std::forward<Step>(step)(state);
    });
  }

  [[nodiscard]] std::uint64_t phase_locked() const noexcept { return phase_.load(std::memory_order_relaxed); }
  [[nodiscard]] bool closed_locked() const noexcept { return closed_.load(std::memory_order_relaxed); }

  void join_locked(std::size_t n) {
    if (n > max() - registered_) throw std::overflow_error("asyncband::phaser: more than max() participants");
    registered_ += n;
    unarrived_ += n;
  }

  /// Removes n obligations of the current phase (arrivals or withdrawals of participants that
  /// had not arrived); the last one completes the phase, unless the phaser is closed (frozen).
  void discharge_locked(std::size_t n, locked_state& s) noexcept {
    unarrived_ -= n;
    if (unarrived_ == 0 && !closed_locked()) advance_locked(s);
  }

  /// An advance is made by a participant (or a batch) that arrives or withdraws, and the
  /// phaser outlives its lock hold whatever a thread that sees the new phase does: the
  /// participant's reference to the phaser goes only through a withdrawal, which takes this
  /// lock. So an advance that finds no blocked thread counted takes no pin, moves no word and
  /// notifies nobody: one lock hold in all. (An arrive() that wakes nobody does not even come
  /// here: see discharge_quietly_locked.)
  void advance_locked(locked_state& s) noexcept {
    const bool release_sleepers = parking_.has_counted_sleepers();
    if (release_sleepers) queue_.pin();  // before the change: see release_parked()
    start_next_phase_locked();
    s.waiters.claim_all(s.batch);
    if (release_sleepers) release_parked(s);
  }

  void start_next_phase_locked() noexcept {
    phase_.store(phase_locked() + 1, std::memory_order_release);
    unarrived_ = registered_;
  }

  /// Under the lock: discharging n obligations now wakes nobody, because it does not complete
  /// the phase or because nobody waits for it (no queued waiter, no blocked thread counted).
  /// Such a discharge needs no wake_batch (discharge_quietly_locked): the common arrive().
  [[nodiscard]] bool discharge_wakes_nobody_locked(std::size_t n) noexcept {
    return unarrived_ > n || (queue_.waiters().empty() && !parking_.has_counted_sleepers());
  }
  /// discharge_locked() when discharge_wakes_nobody_locked(n).
  void discharge_quietly_locked(std::size_t n) noexcept {
    unarrived_ -= n;
    if (unarrived_ == 0 && !closed_locked()) start_next_phase_locked();
  }

  /// After a change that lets waits complete lock-free (a new phase, the close), made with the
  /// queue pinned before it: the step's driver notifies the parked threads after unlocking and
  /// then unpins (wake_batch::release_word). A thread that sees the change (spinning, or a wait
  /// that never parked) may destroy the phaser at once (last one out); the destructor waits for
  /// the pin. The close always pins: it is called through a reference that a woken thread may
  /// drop.
  void release_parked(locked_state& s) noexcept { s.batch.release_word(parking_); }

  /// Withdraws n registrations, of which `owing` had not arrived in the current phase.
  void withdraw(std::size_t n, std::size_t owing) noexcept {
    locked([this, n, owing](locked_state& s) {
      registered_ -= n;
      if (owing != 0) discharge_locked(owing, s);
      return true;
    });
  }

  /// A plain thread's wait, without a node: until the phase is no longer `awaited`, or the
  /// phaser closed while still in it. The thread counted itself as a sleeper under the lock,
  /// where it saw the phaser still in `awaited` and open (so the advance or close that ends the
  /// wait releases the word); it uncounts itself here. The closed flag is read first: once
  /// closed, the phase is frozen, so a phase read after it tells a completed phase from a frozen
  /// one.
  result<phase_id> block_while_in(phase_id awaited) noexcept {
    detail::at_test_point(detail::test_point::published);
    result<phase_id> outcome = wait_status::closed;
    parking_.sleep_until(
        [this, awaited, &outcome] {
          const bool closed = is_closed();
          const phase_id now = phase();
          if (now != awaited) outcome = now;
          return now != awaited || closed;
        },
        [] { detail::at_test_point(detail::test_point::parking); });
    parking_.uncount_sleeper();  // the caller's reference (or its registration) keeps the phaser
    return outcome;
  }

  detail::wait_queue& queue() noexcept { return queue_; }

  asyncband::detail::atomic<std::uint64_t> phase_;  // written under the lock, read lock-free
  asyncband::detail::atomic<bool> closed_{false};   // likewise
  std::size_t registered_ = 0;                      // guarded by queue_.mutex()
  std::size_t unarrived_ = 0;                       // guarded by queue_.mutex()
  detail::broadcast_parking parking_;  // before queue_: it outlives the destructor's wait for wakers
  mutable detail::wait_queue queue_;
};

/// One registration in a phaser: it owes one arrival in every phase while registered.
/// Move-only; destroying it withdraws the registration (see phaser's contract). A participant
/// is used by one thread or coroutine at a time, like any object; different participants of one
/// phaser may be used concurrently.
///
/// Where arrival commits: arrive() arrives when it returns. A wait() that has not arrived in the
/// current phase arrives when it starts waiting: in the coroutine form, when co_await suspends
/// it (before any resumption can happen); in the blocking forms, on the call. A wait whose stop
/// token is already stopped when it starts does not arrive. A wait cancelled after that keeps
/// its arrival: the phase still completes when the others arrive, and the participant's next
/// wait() waits for that same phase without arriving again.
class [[nodiscard]] phaser_participant {
 public:
  /// The phaser (nullptr once deregistered or moved from).
  [[nodiscard]] const std::shared_ptr<asyncband::phaser>& phaser() const noexcept { return phaser_; }

  /// Takes over `other`'s registration; `other` is left empty.
  phaser_participant(phaser_participant&& other) noexcept
      : phaser_(std::move(other.phaser_)),
        arrived_in_(other.arrived_in_),
        arrived_(other.arrived_),
        awaiting_(other.awaiting_) {}
  /// Withdraws this participant's registration (as its destructor does), then takes over
  /// `other`'s.
  phaser_participant& operator=(phaser_participant&& other) noexcept {
    if (this != &other) {
      // The old registration withdraws last, from a local: withdrawing may complete the phase
      // and resume a waiter that destroys this participant at once (last one out).
      const phaser_participant departing(std::move(*this));
      phaser_ = std::move(other.phaser_);
      arrived_in_ = other.arrived_in_;
      arrived_ = other.arrived_;
      awaiting_ = other.awaiting_;
    }
    return *this;
  }
  phaser_participant(const phaser_participant&) = delete;
  phaser_participant& operator=(const phaser_participant&) = delete;
  ~phaser_participant() { withdraw(); }

  /// Still registered.
  explicit operator bool() const noexcept { return phaser_ != nullptr; }

  /// Records this participant's arrival in the current phase without waiting (once per phase:
  /// a repeated call returns the same phase). Yields the phase it arrived in, or closed.
  /// Precondition (std::logic_error): registered.
  inline result<phase_id> arrive();

  /// Reports the completion of its latest arrival's phase if no wait has yet (without arriving);
  /// otherwise arrives if it has not in the current phase, and waits for that phase to complete.
  /// Yields result<phase_id>: the phase the completion started, or closed.
  auto wait();
  /// As above; also ends with wait_status::cancelled when `stop` is requested first.
  auto wait(asyncband::stop_token stop);
  /// wait() for a plain thread: blocks until the phase completes.
  inline result<phase_id> wait_blocking();
  /// As wait_blocking(), or until `stop` is requested (then cancelled).
  inline result<phase_id> wait_blocking(asyncband::stop_token stop);
  /// As wait_blocking(), for at most `timeout` (then timeout).
  template <class Rep, class Period>
  result<phase_id> wait_timeout(std::chrono::duration<Rep, Period> timeout);

  /// Arrives (if it had not in the current phase) and leaves the phaser: it owes nothing in
  /// later phases, and the handle is empty afterwards. Yields the phase it arrived in, or closed.
  /// Precondition (std::logic_error): registered.
  inline result<phase_id> arrive_and_deregister();

 private:
  friend class asyncband::phaser;
  friend class phaser_batch;
  friend class detail::phaser_participant_wait;
  friend struct asyncband::detail::debug_access;
  using wait_forms = detail::wait_forms<detail::phaser_participant_wait>;

  explicit phaser_participant(std::shared_ptr<asyncband::phaser> owner) noexcept
      : phaser_(std::move(owner)) {}

  phaser_participant* registered() {
    if (!phaser_) throw std::logic_error("asyncband::phaser_participant: not registered");
    return this;
  }

  /// Under the phaser's lock.
  [[nodiscard]] bool arrived_in_current() const noexcept {
    return arrived_ && arrived_in_.value() == phaser_->phase_locked();
  }

  /// Under the phaser's lock: arrives in the current phase unless it already has; false if the
  /// phaser is closed (arrivals report closed from then on). The arrival may complete the phase.
  bool arrive_locked(asyncband::phaser::locked_state& s) noexcept {
    if (phaser_->closed_locked()) return false;
    if (arrived_in_current()) return true;
    record_arrival_locked();
    phaser_->discharge_locked(1, s);
    return true;
  }

  void record_arrival_locked() noexcept {
    arrived_in_ = phase_id(phaser_->phase_locked());
    arrived_ = true;
    awaiting_ = true;
  }

  /// What arrive_waking_nobody() did: arrived (in `phase`), found the phaser closed, or left
  /// the arrival to the full step because it wakes somebody.
  struct quiet_arrival {
    enum class outcome : std::uint8_t { arrived, closed, wakes_somebody };
    outcome how;
    phase_id phase;  // the phase arrived in, read under the lock (outcome::arrived)
  };

  /// arrive() in a lock hold of its own, without a wake_batch, when the arrival wakes nobody
  /// (phaser::discharge_wakes_nobody_locked); `wakes_somebody`, having changed nothing, when the
  /// arrival would complete a phase that somebody waits for: arrive() then takes the full step.
  /// Nobody is woken, but a thread reading phase() lock-free may see the new phase as soon as
  /// the lock is released and destroy this participant and the phaser at once (last one out):
  /// the phase is copied under the lock, and nothing is touched after it. (Returned in two
  /// registers: a result<phase_id> copied through the stack stalled store forwarding, +8 ns.)
  quiet_arrival arrive_waking_nobody() noexcept {
    asyncband::phaser& owner = *phaser_;
    const std::lock_guard lock(owner.queue_.mutex());
    if (owner.closed_locked()) return {quiet_arrival::outcome::closed, {}};
    if (!arrived_in_current()) {
      if (!owner.discharge_wakes_nobody_locked(1)) return {quiet_arrival::outcome::wakes_somebody, {}};
      record_arrival_locked();
      owner.discharge_quietly_locked(1);
    }
    return {quiet_arrival::outcome::arrived, arrived_in_};
  }

  /// Under the phaser's lock, for a wait: an arrival whose phase has completed and that no wait
  /// has reported yet is the one to report (no new arrival); otherwise arrives as above. Decided
  /// under the lock: a lock-free look could see the phase unfinished and then arrive again in
  /// the next one after the final arrival slipped in between.
  bool arrive_for_wait_locked(asyncband::phaser::locked_state& s) noexcept {
    if (awaiting_ && arrived_in_.value() != phaser_->phase_locked()) return true;
    return arrive_locked(s);
  }

  void withdraw() noexcept {
    if (!phaser_) return;
    // Read under the lock inside withdraw(): whether it arrived depends on the current phase.
    auto owner = std::move(phaser_);
    owner->locked([&](asyncband::phaser::locked_state& s) {
      owner->registered_ -= 1;
      const bool owes = !(arrived_ && arrived_in_.value() == owner->phase_locked());
      if (owes) owner->discharge_locked(1, s);
      return true;
    });
  }

  std::shared_ptr<asyncband::phaser> phaser_;
  phase_id arrived_in_{};  // the phase of its latest arrival (valid if arrived_)
  bool arrived_ = false;
  bool awaiting_ = false;  // an arrival whose completion no wait has reported yet
};

/// n registrations made at once (phaser::enroll(n)), all in the phase they joined, handed out
/// one by one. Move-only; destroying it withdraws the registrations not taken.
class [[nodiscard]] phaser_batch {
 public:
  /// Takes over `other`'s registrations; `other` is left empty.
  phaser_batch(phaser_batch&& other) noexcept
      : phaser_(std::move(other.phaser_)), remaining_(std::exchange(other.remaining_, 0)) {}
  /// Withdraws the registrations not taken, then takes over `other`'s.
  phaser_batch& operator=(phaser_batch&& other) noexcept {
    if (this != &other) {
      const phaser_batch departing(std::move(*this));  // withdraws last: see phaser_participant
      phaser_ = std::move(other.phaser_);
      remaining_ = std::exchange(other.remaining_, 0);
    }
    return *this;
  }
  phaser_batch(const phaser_batch&) = delete;
  phaser_batch& operator=(const phaser_batch&) = delete;
  ~phaser_batch() { withdraw_rest(); }

  /// Registrations not yet taken.
  [[nodiscard]] std::size_t size() const noexcept { return remaining_; }
  /// Every registration has been taken (size() == 0).
  [[nodiscard]] bool empty() const noexcept { return remaining_ == 0; }

  /// Hands out one registration as a participant; nullopt once all are taken.
  std::optional<phaser_participant> take() {
    if (remaining_ == 0) return std::nullopt;
    --remaining_;
    return phaser_participant(phaser_);
  }

 private:
  friend class phaser;
  phaser_batch(std::shared_ptr<phaser> owner, std::size_t n) noexcept
      : phaser_(std::move(owner)), remaining_(n) {}

  /// None of the rest has arrived anywhere: each still owes its arrival in the current phase.
  void withdraw_rest() noexcept {
    if (remaining_ == 0) return;
    const std::size_t n = std::exchange(remaining_, 0);  // nothing is written after the wake-up
    phaser_->withdraw(n, n);
  }

  std::shared_ptr<phaser> phaser_;
  std::size_t remaining_;
};

namespace detail {

/// A participant's wait: arrives under the lock in enqueue() (together with queueing, so the
/// arrival and the registration of the waiter are one step), then waits for the phase of its
/// arrival to complete.
class phaser_participant_wait : public queued_waiter<phaser> {
 public:
  using value_type = phase_id;
  static constexpr bool transferable = false;
  static constexpr bool fallible = true;

  explicit phaser_participant_wait(phaser_participant* p) noexcept
      : queued_waiter(p->phaser_.get()), participant_(p) {}

  /// Lock-free: an arrival whose phase has already completed (a wait retried after a
  /// cancellation, or after arrive()) needs no lock.
  bool try_ready() noexcept {
    arrived_in_ = participant_->arrived_in_;
    return participant_->awaiting_ && owner().phase() != arrived_in_;
  }

  /// Arrives and queues in one lock hold. A wait that completes here reports its completion
  /// here, under the lock: its own arrival may have completed the phase, and a waiter that
  /// locked() then resumes inline may destroy the participant (and with it the phaser), so
  /// nothing after locked() may touch either.
  bool enqueue() noexcept {
    return owner().locked([this](phaser::locked_state& s) {
      if (!participant_->arrive_for_wait_locked(s)) {
        status = wait_status::closed;  // closed, and its arrival's phase (if any) did not complete
        return true;
      }
      arrived_in_ = participant_->arrived_in_;
      if (owner().phase_locked() != arrived_in_.value()) {
        participant_->awaiting_ = false;
        participant_ = nullptr;  // reported: take() must not touch the participant
        return true;
      }
      if (owner().closed_locked()) {
        status = wait_status::closed;
        return true;
      }
      s.waiters.push_back(*this);
      return false;
    });
  }

  /// Reports the completion once: the next wait() arrives in the new phase. A wait that was
  /// queued (or completed lock-free) reports it here, on the waiting side, where the
  /// participant is still its owner's.
  phase_id take() noexcept {
    if (participant_ != nullptr) participant_->awaiting_ = false;
    return arrived_in_.next();
  }

 private:
  phaser_participant* participant_;  // null once the completion is reported under the lock
  phase_id arrived_in_{};            // the phase this wait reports the completion of
};

/// An observer's wait: until the phase differs from the observed one.
class phaser_observer_wait : public queued_waiter<phaser> {
 public:
  using value_type = phase_id;
  static constexpr bool transferable = false;
  static constexpr bool fallible = true;

  phaser_observer_wait(phaser* owner, phase_id observed) noexcept
      : queued_waiter(owner), observed_(observed), seen_(observed.next()) {}

  bool try_ready() noexcept {
    seen_ = owner().phase();
    if (seen_ != observed_) return true;
    seen_ = observed_.next();  // the only advance that can end a queued wait
    return false;
  }

  bool enqueue() noexcept {
    return owner().locked([this](phaser::locked_state& s) {
      if (owner().phase_locked() != observed_.value()) {
        seen_ = phase_id(owner().phase_locked());
        return true;
      }
      if (owner().closed_locked()) {
        status = wait_status::closed;
        return true;
      }
      s.waiters.push_back(*this);
      return false;
    });
  }

  [[nodiscard]] phase_id take() const noexcept { return seen_; }

 private:
  phase_id observed_;
  phase_id seen_;
};

}  // namespace detail

inline std::size_t phaser::participants() const {
  const std::lock_guard lock(queue_.mutex());
  return registered_;
}

inline std::size_t phaser::unarrived() const {
  const std::lock_guard lock(queue_.mutex());
  return unarrived_;
}

inline result<phaser_participant> phaser::enroll() {
  {
    const std::lock_guard lock(queue_.mutex());
    if (closed_locked()) return wait_status::closed;
    join_locked(1);
  }
  return phaser_participant(shared_from_this());
}

inline result<phaser_batch> phaser::enroll(std::size_t n) {
  {
    const std::lock_guard lock(queue_.mutex());
    if (closed_locked()) return wait_status::closed;
    join_locked(n);
  }
  return phaser_batch(shared_from_this(), n);
}

// The wait forms need the node types, which need complete phaser and participant classes.
inline auto phaser::wait(phase_id observed) noexcept {
  return observer_forms::await(this, observed);
}
inline auto phaser::wait(phase_id observed, asyncband::stop_token stop) noexcept {
  return observer_forms::await_until_stopped(std::move(stop), this, observed);
}
inline result<phase_id> phaser::wait_blocking(phase_id observed) {
  if (const phase_id now = phase(); now != observed) return now;
  std::optional<result<phase_id>> over;
  locked([this, observed, &over](locked_state& /*unused*/) {
    if (phase_locked() != observed.value()) {
      over = phase_id(phase_locked());
    } else if (closed_locked()) {
      over = wait_status::closed;
    } else {
      parking_.count_sleeper();  // seen by the advance or close that ends this wait
    }
    return true;
  });
  if (over) return *over;
  return block_while_in(observed);
}
inline result<phase_id> phaser::wait_blocking(phase_id observed, asyncband::stop_token stop) {
  return observer_forms::block_until_stopped(std::move(stop), this, observed);
}
template <class Rep, class Period>
result<phase_id> phaser::wait_timeout(phase_id observed, std::chrono::duration<Rep, Period> timeout) {
  return observer_forms::block_for(timeout, this, observed);
}

inline auto phaser_participant::wait() {
  return wait_forms::await(registered());
}
inline auto phaser_participant::wait(asyncband::stop_token stop) {
  return wait_forms::await_until_stopped(std::move(stop), registered());
}
inline result<phase_id> phaser_participant::wait_blocking(asyncband::stop_token stop) {
  return wait_forms::block_until_stopped(std::move(stop), registered());
}
template <class Rep, class Period>
result<phase_id> phaser_participant::wait_timeout(std::chrono::duration<Rep, Period> timeout) {
  return wait_forms::block_for(timeout, registered());
}

inline void phaser::close() noexcept {
  locked([this](locked_state& s) {
    if (closed_locked()) return false;
    queue_.pin();  // before the change: see release_parked()
    closed_.store(true, std::memory_order_release);
    s.waiters.claim_all(s.batch, wait_status::closed);
    release_parked(s);
    return true;
  });
}

inline result<phase_id> phaser_participant::arrive() {
  registered();
  const quiet_arrival quiet = arrive_waking_nobody();
  switch (quiet.how) {
    case quiet_arrival::outcome::arrived:
      detail::at_test_point(detail::test_point::returning);
      return quiet.phase;
    case quiet_arrival::outcome::closed:
      return wait_status::closed;
    case quiet_arrival::outcome::wakes_somebody:
      break;
  }
  // The phase is copied under the lock: the final arrival may resume a waiter inline, which
  // may destroy this participant's handle before locked() returns.
  std::optional<phase_id> arrived_in;
  phaser_->locked([this, &arrived_in](asyncband::phaser::locked_state& s) {
    if (arrive_locked(s)) arrived_in = arrived_in_;
    return true;
  });
  if (!arrived_in) return wait_status::closed;
  return *arrived_in;
}

inline result<phase_id> phaser_participant::wait_blocking() {
  registered();
  // Decided under the lock, like the node's enqueue(): if the wait is over there (closed, or its
  // arrival's phase has completed, maybe by this very arrival), it is reported there, because a
  // waiter that locked() resumes inline may destroy this participant and its phaser. If it is
  // not over, nobody was woken, and both are this thread's to use.
  std::optional<result<phase_id>> over;
  asyncband::phaser* const owner = phaser_.get();
  owner->locked([this, owner, &over](asyncband::phaser::locked_state& s) {
    if (!arrive_for_wait_locked(s)) {
      over = wait_status::closed;
    } else if (owner->phase_locked() != arrived_in_.value()) {
      awaiting_ = false;
      over = arrived_in_.next();
    } else {                            // open: on a closed phaser, arrive_for_wait_locked() returned false
      owner->parking_.count_sleeper();  // seen by the advance or close that ends this wait
    }
    return true;
  });
  if (over) return *over;
  result<phase_id> outcome = owner->block_while_in(arrived_in_);
  if (outcome.ok()) awaiting_ = false;
  return outcome;
}

inline result<phase_id> phaser_participant::arrive_and_deregister() {
  registered();
  auto owner = std::move(phaser_);
  std::optional<phase_id> arrived_in;
  owner->locked([&](asyncband::phaser::locked_state& s) {
    const bool arrived_before = arrived_ && arrived_in_.value() == owner->phase_locked();
    if (!owner->closed_locked()) arrived_in = phase_id(owner->phase_locked());
    owner->registered_ -= 1;
    if (!arrived_before) owner->discharge_locked(1, s);  // closed: bookkeeping only
    return true;
  });
  if (!arrived_in) return wait_status::closed;
  return *arrived_in;
}

}  // namespace asyncband
