// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/semaphore_wait.hpp: the semaphore's wait list (its queued waiter, the
// hand-out of returned permits, close) and its acquisitions (the awaiters, the five forms, and
// the owned ones: owned_semaphore_permit, acquire_owned).
//
// Part of semaphore.hpp, which includes it at its end: everything here needs the complete
// class. Included on its own, it includes semaphore.hpp first, whose own include of this file
// is then skipped.
#pragma once

#include <algorithm>
#include <cassert>
#include <coroutine>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <variant>

#include "../semaphore.hpp"
#include "../stop_token.hpp"
#include "lock_retry.hpp"
#include "owned_guard.hpp"
#include "wait_functions.hpp"
#include "wait_queue.hpp"

namespace asyncband {

namespace detail {

/// A queued acquisition: how many it asked for and how many it has been given so far.
class semaphore_waiter : public waiter {
 public:
  semaphore_waiter(semaphore* owner, std::size_t n) noexcept : semaphore_(owner), needed_(n) {}

  static constexpr bool transferable = true;

  bool try_ready() noexcept { return needed_ == 0 || semaphore_->try_take(needed_); }
  /// Enough is available (read-only: a blocking acquisition spins on it before parking).
  bool may_be_ready() const noexcept { return semaphore_->available() >= needed_; }
  /// A blocking acquisition on a barging semaphore stops spinning once another waiter is queued
  /// or out to retry: it parks behind it at once (measured: with 4 and 8 threads on 2 cores the
  /// contended mutex ran 1.3-2x faster than with everybody spinning; with 2, the same). Not on
  /// a plain semaphore, whose threads do not retry but are handed their permits: parked behind,
  /// they convoy through hand-offs to parked threads (`semaphore/contended_threads_4` 3.6x
  /// slower), so they spin as on a strict FIFO semaphore.
  bool worth_spinning() const noexcept {
    return !semaphore_->barging_ || semaphore_->threads_handed() || !semaphore_->word_.someone_waits();
  }
  /// A blocking acquisition yields between its spin's tries (detail::spin_backoff::yield):
  /// whoever it waits for (a lock's holder, a channel's receiver freeing capacity) gets the
  /// core and keeps its cache lines a while (docs/design.md, "The spin yields between its
  /// tries"). An MPMC receive decides by its channel's capacity instead (receive_waiter).
  bool backs_off_by_yielding() const noexcept { return true; }

  bool enqueue() noexcept {
    granted_ = 0;
    return semaphore_->queue_.complete_or_enqueue(*this, [this] { return semaphore_->take_or_queue(*this); });
  }

  /// Unlinks a queued waiter and gives its partial grant to the waiters behind it, in one
  /// locked step. The cancelled waiter goes first into the batch that wakes those it completes,
  /// and is resolved here, ahead of them: one of them resumed inline may destroy its frame,
  /// which then finds it resolved. So this returns false in every case (as if a waker had
  /// claimed it), and the caller leaves the resolution to us.
  bool cancel(wait_status why) noexcept {
    if (semaphore_->barging_) return cancel_barging(why);
    semaphore_->wake(
        [this, why](wait_list& waiters, wake_batch& batch) {
          if (!waiters.unlink_if_linked(*this, why)) return;
          batch.add(*this);
          semaphore_->hand_out(std::exchange(granted_, 0), waiters, batch);
        },
        test_point::claimed_for_cancel);
    return false;
  }

  /// cancel() on a barging semaphore: nothing is granted while queued there (a grant is always
  /// complete, and claims the waiter), so there is nothing to pass on; `queued` follows the list,
  /// and with shared barging the waiters behind are served from what is available.
  bool cancel_barging(wait_status why) noexcept {
    semaphore_->wake(
        [this, why](wait_list& waiters, wake_batch& batch) {
          if (!waiters.unlink_if_linked(*this, why)) return;
          batch.add(*this);
          semaphore_->sync_queued(waiters);
          // Shared: the waiter behind may be covered by the permits available now.
          if (semaphore_->shared_) semaphore_->settle_shared(waiters, batch);
        },
        test_point::claimed_for_cancel);
    return false;
  }

  // --- bounded barging: the lock's retry (see source_awaiter) --------------------------------
  /// Before publication: this waiter has a retry (a coroutine on its scheduler, or its parked
  /// thread itself), so it may be taken out of the head to try again instead of being handed
  /// the lock.
  void set_retries() noexcept { retries_ = true; }
  /// A plain thread's untimed lock without a stop token retries itself (block_wait) when the
  /// semaphore barges. With shared barging only a request for every permit of an rwlock (a
  /// writer) does: see semaphore::retrying_request_ (0 on a plain semaphore: no thread retries).
  [[nodiscard]] bool may_retry() const noexcept {
    return semaphore_->barging() && (!semaphore_->shared_ || needed_ == semaphore_->retrying_request_);
  }
  /// set_retries() for a plain thread, parked between its turns since `now`: bounded in time.
  void set_retries_parked(lock_clock::time_point now) noexcept {
    retries_ = true;
    parked_since_ = now;
  }
  [[nodiscard]] bool retries() const noexcept { return retries_; }
  /// A parked thread's retry, bounded in time (else a coroutine's, bounded by the count).
  [[nodiscard]] bool timed() const noexcept { return parked_since_ != lock_clock::time_point{}; }
  /// Under the lock, at the pass bound: whether an unlock hands it the lock now. A coroutine's
  /// retry is due at every bound; a parked thread's once it has waited semaphore::thread_max_wait
  /// (until then a hand-over would stall every locker for as long as the thread takes to wake).
  /// In a model build, where time does not pass, a thread is due at every second check, so that
  /// the explorer sees it both passed and handed the lock.
  [[nodiscard]] bool due() noexcept {
    if (!timed()) return true;
    if constexpr (model_build) return (++due_checks_ & 1U) == 0;
    return lock_clock::now() - parked_since_ >= semaphore::thread_max_wait;
  }
  /// After its resolution: taken out to try again (true), or handed the lock (false).
  [[nodiscard]] bool must_retry() const noexcept { return retry_; }
  /// Under the lock: claimed to try again (true) or handed the lock (false).
  void set_retry(bool retry) noexcept { retry_ = retry; }
  /// Under the lock: the retry in flight is handed the lock (a pass bound reached).
  void hand() noexcept { handed_ = true; }
  [[nodiscard]] bool handed() const noexcept { return handed_; }
  /// The retry's lock-free attempt: takes the lock if it is free (barging like anybody).
  bool retry_take() noexcept {
    if (!semaphore_->word_.try_take_retrying(needed_)) return false;
    retry_ = false;
    semaphore_->serve_behind_retry();
    return true;
  }
  /// The retry lost: back to the front of the queue, continuing at `target` when resolved
  /// again. Returns true if it is pending (nothing may touch the wait after that), false if it
  /// holds the lock now or was resolved meanwhile (must_retry() says which).
  bool requeue(resume_target target) noexcept {
    forget_resolution();
    prepare(target);
    if (semaphore_->queue_.complete_or_requeue_front(*this,
                                                     [this] { return semaphore_->retry_locked(*this); })) {
      semaphore_->serve_behind_retry();
      return false;
    }
    at_test_point(test_point::published);  // queued again, not armed: a serve here is seen by arm()
    return arm();
  }

  /// A complete grant that will not be used goes back (to the next waiter, or available). A
  /// waiter claimed to retry was granted nothing: its retry in flight ends instead.
  void give_back() noexcept {
    if (retry_) {
      semaphore_->drop_retry(*this);
    } else {
      semaphore_->give<false>(needed_);
    }
  }

  [[nodiscard]] std::size_t missing() const noexcept { return needed_ - granted_; }
  [[nodiscard]] std::size_t granted() const noexcept { return granted_; }
  void grant(std::size_t n) noexcept { granted_ += n; }
  /// Takes back everything granted so far (a branch that lost its when_any); returns how much.
  std::size_t ungrant() noexcept { return std::exchange(granted_, 0); }

 protected:
  semaphore_permit take_permit() noexcept { return {semaphore_, needed_}; }

 private:
  semaphore* semaphore_;
  std::size_t needed_;
  std::size_t granted_;                    // set by enqueue(); guarded by the semaphore's lock while queued
  bool retries_ = false;                   // barging: served by a retry (set before publication)
  lock_clock::time_point parked_since_{};  // barging: a parked thread's start (else the epoch)
  unsigned due_checks_ = 0;                // barging, model build: due() calls for a thread
  bool retry_ = false;   // barging: claimed to retry, not handed the lock (set by its claimer)
  bool handed_ = false;  // barging: the retry in flight was handed the lock (under the lock)
};

struct permit_itself {
  semaphore_permit operator()(semaphore_permit&& permit) const noexcept { return std::move(permit); }
};

/// An acquisition whose completed wait yields `make(permit)`: the permit itself, or a guard built
/// on it (mutex, rwlock). `Make` is called once, on the waiter's side, after resumption.
template <class Make, bool Fallible>
class semaphore_acquire : public semaphore_waiter {
 public:
  using value_type = std::invoke_result_t<Make&, semaphore_permit&&>;
  /// A closable semaphore's acquisition (a channel's capacity) can end wait_status::closed.
  static constexpr bool fallible = Fallible;

  semaphore_acquire(semaphore* owner, std::size_t n,
                    Make make) noexcept(std::is_nothrow_move_constructible_v<Make>)
      : semaphore_waiter(owner, n), make_(std::move(make)) {}

  value_type take() { return make_(take_permit()); }

 private:
  Make make_;
};

/// `co_await` of an acquisition without a stop token. The uncontended case takes the permits
/// with one CAS and builds nothing else: the awaiter holds only the acquisition's arguments,
/// and the waiting operation (node, publication) is constructed in await_suspend, only when the
/// acquisition must queue. Every store before the CAS delays it (a locked instruction first
/// drains the store buffer), so this is what makes `co_await m.lock()` as cheap as a try_lock.
/// `semaphore_ == nullptr` marks the constructed wait.
template <class Awaiter>
struct lazy_acquire_access;

/// An awaiter's room for the retry coroutine (detail/lock_retry.hpp) of a wait on a semaphore
/// with bounded barging: raw until publish(), so that nothing is stored before the lock-free
/// CAS of an uncontended acquisition.
class retry_slot {
 public:
  // Raw room, filled by publish. Not `= default`: the union's coroutine_handle has a default
  // member initializer, which would delete a defaulted constructor (and the handle must stay
  // unwritten until publish).
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init,hicpp-member-init,modernize-use-equals-default)
  retry_slot() noexcept {}
  retry_slot(const retry_slot&) = delete;
  retry_slot& operator=(const retry_slot&) = delete;
  // NOLINTNEXTLINE(modernize-use-equals-default): the union member's lifetime is publish()'s
  ~retry_slot() {}

  /// Starts the retry of `wait`'s node (built, not published), which continues `waiter` on
  /// `scheduler` once it holds the permits, and publishes the wait with it. A wait resolved to
  /// retry before it suspended retries here, on the waiter's own thread. True if pending.
  /// Out of line: nothing after the publication may be merged into the awaiting coroutine's body
  /// (clang 14: LLVM 56301/65054).
  template <class Wait>
  [[gnu::noinline]] bool publish(Wait& wait, std::coroutine_handle<> waiter,
                                 scheduler_ref scheduler) noexcept {
    semaphore_waiter& node = wait.node();
    ::new (static_cast<void*>(&retry_))
        std::coroutine_handle<lock_retry_promise>(run_lock_retry(room_, node, scheduler).handle);
    retry_.promise().set_waiter(waiter);
    node.set_retries();
    const resume_target target(retry_, scheduler);
    if (wait.publish(target)) return true;  // pending: nothing touches the awaiter any more
    return retry_until_pending(node, target);
  }

  /// Destroys the built `wait` (unlinking it if pending: its retry then never runs again), and
  /// the retry coroutine if publish() started one.
  template <class Wait>
  void destroy(Wait& wait) noexcept {
    const bool retried = wait.node().retries();
    // A retry posted to the scheduler and not run yet still holds the frame: destroying the
    // waiting coroutine then is undefined, as with any resumption in flight.
    // pending() first: while the wait is pending an unlock may write must_retry's flag; once it
    // is not, its acquire load orders that write.
    assert(!(retried && !wait.pending() && wait.node().must_retry()) &&
           "asyncband: a lock's or acquisition's coroutine destroyed while its retry was posted to its "
           "scheduler");
    wait.~Wait();
    if (retried) retry_.destroy();
  }

 private:
  union {
    std::coroutine_handle<lock_retry_promise> retry_;
  };
  lock_retry_room room_;
};

/// A Retries awaiter keeps a retry_slot: one on a barging semaphore from a coroutine with a
/// scheduler waits through a retry (a plain semaphore's `co_await acquire(n)`).
template <class Make, bool Fallible, bool Retries>
class [[nodiscard("co_await it: a lock or acquisition does nothing until it is awaited")]] acquire_awaiter {
  using wait_type = pending_wait<semaphore_acquire<Make, Fallible>, false>;

 public:
  using value_type = wait_yield_t<semaphore_acquire<Make, Fallible>, false>;

  acquire_awaiter(semaphore* owner, std::size_t n, Make make) noexcept
      : semaphore_(owner), count_(n), make_(std::move(make)) {
    static_assert(std::is_nothrow_move_constructible_v<Make>);
  }
  acquire_awaiter(const acquire_awaiter&) = delete;
  acquire_awaiter& operator=(const acquire_awaiter&) = delete;
  ~acquire_awaiter() {
    if (semaphore_ != nullptr) return;
    if constexpr (Retries) {
      retry_.destroy(wait_);
    } else {
      wait_.~wait_type();
    }
  }

  /// Throws std::logic_error if this awaiter suspended before (the null semaphore_ says so; a
  /// test folded away when the awaiter was just built from a semaphore's `this`).
  bool await_ready() {
    if (semaphore_ == nullptr) [[unlikely]]
      throw_awaited_again();
    return count_ == 0 || semaphore_->try_take(count_);
  }

  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    const scheduler_ref scheduler = scheduler_of(h);
    if constexpr (Retries) {
      if (!scheduler.empty() && semaphore_->barging()) {
        build();
        return retry_.publish(wait_, h, scheduler);
      }
    }
    build();
    return wait_.publish(resume_target(h, scheduler), nothing_to_do{}, nullptr);
  }

  value_type await_resume() {
    if (semaphore_ != nullptr) return make_(semaphore_permit(semaphore_, count_));
    return wait_.finish();
  }

 private:
  friend struct lazy_acquire_access<acquire_awaiter>;

  /// Awaited (or selected) before: its wait was built.
  [[nodiscard]] bool spent() const noexcept { return semaphore_ == nullptr; }

  /// Builds the waiting operation: the awaiter's arguments move into its node.
  void build() noexcept {
    ::new (static_cast<void*>(&wait_))
        wait_type(asyncband::stop_token{}, semaphore_, count_, std::move(make_));
    semaphore_ = nullptr;
  }

  /// Builds the waiting operation and publishes it (a when_any branch: `commit`).
  bool publish(resume_target target, commit_point* commit) noexcept {
    build();
    return wait_.publish(target, nothing_to_do{}, commit);
  }

  semaphore* semaphore_;
  std::size_t count_;
  Make make_;
  union {
    wait_type wait_;  // constructed by await_suspend
  };
  [[no_unique_address]] std::conditional_t<Retries, retry_slot, std::monostate> retry_;
};

/// A Source whose semaphore may barge (a mutex's: `static constexpr bool retries = true;`):
/// its awaiter keeps room for the retry coroutine.
template <class Source>
inline constexpr bool source_retries_v = requires { requires Source::retries; };

/// acquire_awaiter for an acquisition whose semaphore, count and guard maker all follow from
/// one pointer (a mutex; an rwlock's read or write side): the awaiter is that `Source`, so the
/// uncontended lock stores one word into the frame before its CAS instead of three. A Source is
/// a pointer wrapper with `explicit operator bool`, `semaphore_ref()`, `count()` and `maker()`; an
/// empty Source marks the constructed wait. On a semaphore with bounded barging, a coroutine
/// with a scheduler waits through a retry coroutine (detail/lock_retry.hpp) whose frame lives
/// here; every other waiter (no scheduler, a when_any branch) is handed the lock in FIFO order.
template <class Source>
class [[nodiscard("co_await it: a lock does nothing until it is awaited")]] source_awaiter {
  using node_type = semaphore_acquire<decltype(std::declval<const Source&>().maker())>;
  using wait_type = pending_wait<node_type, false>;
  static constexpr bool retries = source_retries_v<Source>;

 public:
  using value_type = typename node_type::value_type;

  explicit source_awaiter(Source source) noexcept : source_(source) {}
  source_awaiter(const source_awaiter&) = delete;
  source_awaiter& operator=(const source_awaiter&) = delete;
  ~source_awaiter() {
    if (source_) return;
    if constexpr (retries) {
      retry_.destroy(wait_);
    } else {
      wait_.~wait_type();
    }
  }

  /// Throws std::logic_error if this awaiter suspended before (an empty source says so; a test
  /// folded away when the source was just built from a mutex's or rwlock's `this`).
  bool await_ready() {
    if (!source_) [[unlikely]]
      throw_awaited_again();
    return source_.semaphore_ref().try_take(source_.count());
  }

  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    const scheduler_ref scheduler = scheduler_of(h);
    if constexpr (retries) {
      if (!scheduler.empty() && source_.semaphore_ref().barging()) return publish_retrying(h, scheduler);
    }
    return publish(resume_target(h, scheduler), nullptr);
  }

  value_type await_resume() {
    if (source_) return source_.maker()(semaphore_permit(&source_.semaphore_ref(), source_.count()));
    return wait_.finish();
  }

 private:
  friend struct lazy_acquire_access<source_awaiter>;

  /// Builds the wait with the retry coroutine as its continuation, and publishes it.
  [[gnu::noinline]] bool publish_retrying(std::coroutine_handle<> waiter, scheduler_ref scheduler) noexcept {
    build();
    return retry_.publish(wait_, waiter, scheduler);
  }

  /// Builds the waiting operation from the source (which empties).
  void build() noexcept {
    const Source s = std::exchange(source_, Source{});
    ::new (static_cast<void*>(&wait_))
        wait_type(asyncband::stop_token{}, &s.semaphore_ref(), s.count(), s.maker());
  }

  /// Awaited (or selected) before: its wait was built.
  [[nodiscard]] bool spent() const noexcept { return !source_; }

  /// Builds the waiting operation and publishes it.
  bool publish(resume_target target, commit_point* commit) noexcept {
    build();
    return wait_.publish(target, nothing_to_do{}, commit);
  }

  Source source_;
  union {
    wait_type wait_;  // constructed by await_suspend
  };
  [[no_unique_address]] std::conditional_t<retries, retry_slot, std::monostate> retry_;
};

/// when_any drives a lazily built acquisition (acquire_awaiter, source_awaiter) as the plain
/// co_await does: one CAS in poll when uncontended, and through the node it then builds when
/// not, committed before it is granted anything.
template <class Awaiter>
struct lazy_acquire_access {
  using awaiter = Awaiter;
  using outcome = typename awaiter::value_type;

  static bool spent(const awaiter& a) noexcept { return a.spent(); }
  static bool poll(awaiter& a) { return a.await_ready(); }
  static bool publish(awaiter& a, resume_target target, commit_point& commit) noexcept {
    return a.publish(target, &commit);
  }
  static waiter& node(awaiter& a) noexcept { return a.wait_.node(); }
  static void cancel(awaiter& a) noexcept { a.wait_.cancel(wait_status::cancelled); }
  static outcome win(awaiter& a) { return a.await_resume(); }
  static void pass_on(awaiter& a, bool started) noexcept {
    if (started) a.wait_.discard();
  }
  static std::optional<stored_outcome_t<outcome>> handed_back(awaiter& /*unused*/) {
    return cancelled_outcome<outcome>();
  }
};

/// A semaphore acquisition (or a channel's capacity) as a when_any branch: handed its permits,
/// never retrying (publish() takes no retry).
template <class Make, bool Fallible, bool Retries>
struct select_access<acquire_awaiter<Make, Fallible, Retries>>
    : lazy_acquire_access<acquire_awaiter<Make, Fallible, Retries>> {};

/// A mutex's or rwlock's lock as a when_any branch.
template <class Source>
struct select_access<source_awaiter<Source>> : lazy_acquire_access<source_awaiter<Source>> {};

/// The five forms of an acquisition yielding `make(permit)`: wait_forms, with the plain
/// `co_await` form replaced by acquire_awaiter.
template <class Make, bool Fallible>
struct acquire_forms : wait_forms<semaphore_acquire<Make, Fallible>> {
  [[nodiscard]] static acquire_awaiter<Make, Fallible> await(semaphore* owner, std::size_t n,
                                                             Make make) noexcept {
    return {owner, n, std::move(make)};
  }
};

}  // namespace detail

// --- the wait list ------------------------------------------------------------------------------

inline bool semaphore::take_or_queue(detail::semaphore_waiter& w) noexcept {
  if (barging_) return word_.take_or_mark_queued(w.missing(), false);
  if (closed_) {
    w.status = wait_status::closed;
    return true;
  }
  std::size_t partial = 0;
  if (word_.take_or_mark_contended(w.missing(), partial)) return true;
  w.grant(partial);
  return false;
}

inline void semaphore::close(return_hook on_return, void* context) noexcept {
  wake([&](detail::wait_list& waiters, detail::wake_batch& batch) {
    if (closed_) return;
    closed_ = true;
    on_return_ = on_return;
    on_return_context_ = context;
    closed_count_ = word_.take_all_and_mark_contended();
    for (detail::waiter* w = waiters.front(); w != nullptr; w = w->next)
      closed_count_ += static_cast<detail::semaphore_waiter*>(w)->granted();
    waiters.claim_all(batch, wait_status::closed);
  });
}

inline void semaphore::hand_out(std::size_t n, detail::wait_list& waiters,
                                detail::wake_batch& batch) noexcept {
  if (closed_) {  // nobody acquires any more: returned permits are only counted
    closed_count_ += n;
    return;
  }
  const std::size_t repaid = std::min(n, deficit_);
  deficit_ -= repaid;
  n -= repaid;
  while (n != 0 && !waiters.empty()) {
    auto& head = static_cast<detail::semaphore_waiter&>(*waiters.front());
    if (head.lost()) {  // its when_any is over: not even part of a grant is its
      n += head.ungrant();
      waiters.claim_front(batch, wait_status::cancelled);
      continue;
    }
    const std::size_t given = std::min(n, head.missing());
    head.grant(given);
    n -= given;
    if (head.missing() != 0) continue;
    // Complete: commit it before it takes the permits. A branch whose when_any another branch
    // won gives back what it was partly granted, and is claimed cancelled.
    if (!head.commit()) n += head.ungrant();
    waiters.claim_front(batch, head.missing() == 0 ? wait_status::ok : wait_status::cancelled);
  }
  if (waiters.empty() && deficit_ == 0) word_.make_available(n);  // contended (count 0) until now
}

[[gnu::noinline]] inline void semaphore::hand_over_due(std::size_t n) noexcept {
  passes_ = 0;
  // Nobody queued and no retry in flight: a CAS from that state frees the permits (a CAS is
  // never stale, where a read of the flags could be and stretch the bound). Else, under the lock.
  if (word_.try_give_unless_waiting(n)) return;
  wake([this, n](detail::wait_list& waiters, detail::wake_batch& batch) {
    if (detail::semaphore_word::retrying_in(word_.load())) {
      if (retry_node_->due()) {
        retry_node_->hand();  // it will find the lock its own (the count stays 0 meanwhile)
      } else {
        word_.give_barging(n);  // a parked thread's retry, not due yet: passed again
      }
      return;
    }
    // A parked thread at the head that is not due yet is served as by any unlock.
    detail::semaphore_waiter* const head = front_not_lost(waiters, batch);
    if (head != nullptr && head->retries() && !head->due()) {
      serve_locked(n, waiters, batch);
      return;
    }
    // Nobody left (or only when_any branches that lost, claimed here): free the permits under
    // the lock, before anything claimed is resolved (a resolution may run waiter code here).
    if (!hand_to_front(n, waiters, batch)) word_.give_barging(n);
  });
}

[[gnu::noinline]] inline void semaphore::serve_head(std::size_t n) noexcept {
  wake([this, n](detail::wait_list& waiters, detail::wake_batch& batch) { serve_locked(n, waiters, batch); });
}

inline void semaphore::serve_locked(std::size_t n, detail::wait_list& waiters,
                                    detail::wake_batch& batch) noexcept {
  // The flags change only under this lock while the permit is held (a retry takes it only
  // when free): re-checked for a cancellation that emptied the queue meanwhile.
  if (!detail::semaphore_word::must_serve(word_.load())) {
    word_.give_barging(n);
    return;
  }
  detail::semaphore_waiter* const head = front_not_lost(waiters, batch);
  if (head == nullptr) {  // only when_any branches that lost were queued
    word_.give_barging(n);
    return;
  }
  if (!head->retries()) {
    if (!hand_to_front(n, waiters, batch)) word_.give_barging(n);
    return;
  }
  word_.set_retrying();
  retry_node_ = head;
  head->set_retry(true);
  waiters.claim_front(batch);
  sync_queued(waiters);
  word_.give_barging(n);  // free for the retry, or for whoever comes first
}

[[gnu::noinline]] inline void semaphore::drop_retry(detail::semaphore_waiter& w) noexcept {
  wake([this, &w](detail::wait_list& waiters, detail::wake_batch& batch) {
    retry_node_ = nullptr;
    if (shared_) {  // a shared retry is never handed anything: what is available serves the queue
      word_.clear_retrying();
      settle_shared(waiters, batch);
      return;
    }
    const std::size_t n = w.missing();
    bool holds = w.handed();
    if (holds) {
      word_.clear_retrying();
    } else {
      holds = word_.take_clearing_retrying(n);  // else a holder serves the head when it gives
    }
    if (holds) serve_locked(n, waiters, batch);
  });
}

[[gnu::noinline]] inline void semaphore::settle_queue() noexcept {
  wake([this](detail::wait_list& waiters, detail::wake_batch& batch) { settle_shared(waiters, batch); });
}

[[gnu::noinline]] inline bool semaphore::give_shared_locked(std::size_t n) noexcept {
  return wake([this, n](detail::wait_list& waiters, detail::wake_batch& batch) {
    // While owed, the word is `contended` with the count 0, and only this lock changes it.
    const std::size_t repaid = std::min(n, deficit_);
    deficit_ -= repaid;
    if (deficit_ != 0) return true;  // still owed: nothing to add, nobody to serve
    if (repaid == n) {
      if (repaid != 0) word_.clear_owed();
      return true;
    }
    // Overflow only with nothing owed (else the count was 0, and n <= max): nothing changed then.
    if (!word_.give_counting_pass(n - repaid, max_passes,
                                  [this, &waiters] { return passed_waiter_due(waiters); }))
      return false;
    if (repaid != 0) word_.clear_owed();
    settle_shared(waiters, batch);
    return true;
  });
}

inline bool semaphore::passed_waiter_due(detail::wait_list& waiters) noexcept {
  // Only a parked thread's retry is read: one needs every permit, so it cannot complete while
  // this giver holds some, and its node is alive (semaphore::retrying_request_). A coroutine's
  // retry is due at every bound, and may be gone.
  if (detail::semaphore_word::retrying_in(word_.load())) return !retry_timed_ || retry_node_->due();
  auto* head = static_cast<detail::semaphore_waiter*>(waiters.front());
  return head == nullptr || head->due();
}

inline void semaphore::settle_shared(detail::wait_list& waiters, detail::wake_batch& batch) noexcept {
  for (;;) {
    const std::uint64_t s = word_.load();
    if (detail::semaphore_word::retrying_in(s)) return;  // it takes them, or queues and is served here
    detail::semaphore_waiter* const head = front_not_lost(waiters, batch);
    if (head == nullptr) return;  // the emptied queue ended the starving (sync_queued)
    const std::size_t need = head->missing();
    if (detail::semaphore_word::count_in(s) < need) return;
    if (head->retries() && !detail::semaphore_word::starving_in(s)) {
      assert(!head->timed() || need == retrying_request_);
      word_.set_retrying();
      retry_node_ = head;
      retry_timed_ = head->timed();
      head->set_retry(true);
      waiters.claim_front(batch);
      sync_queued(waiters);
      return;
    }
    // Taken before the head is committed: a when_any branch committed and then not served would
    // block its other branches. A barger that took them first gives them back here (the head is
    // queued without a retry in flight, so its give comes to this lock).
    if (!word_.take_for_waiter(need)) return;
    if (!head->commit()) {  // it lost its when_any meanwhile
      word_.give_barging(need);
      waiters.claim_front(batch, wait_status::cancelled);
      continue;
    }
    head->grant(need);
    head->set_retry(false);
    waiters.claim_front(batch);
    word_.clear_starving();  // the oldest waiter holds its permits
    sync_queued(waiters);
  }
}

inline detail::semaphore_waiter* semaphore::front_not_lost(detail::wait_list& waiters,
                                                           detail::wake_batch& batch) noexcept {
  while (!waiters.empty()) {
    auto* head = static_cast<detail::semaphore_waiter*>(waiters.front());
    if (!head->lost()) return head;
    waiters.claim_front(batch, wait_status::cancelled);
  }
  sync_queued(waiters);
  return nullptr;
}

inline bool semaphore::hand_to_front(std::size_t n, detail::wait_list& waiters,
                                     detail::wake_batch& batch) noexcept {
  auto* oldest = static_cast<detail::semaphore_waiter*>(waiters.committed_front(batch));
  if (oldest != nullptr) {
    assert(oldest->missing() == n);
    oldest->grant(n);
    oldest->set_retry(false);
    waiters.claim_front(batch);
  }
  sync_queued(waiters);
  return oldest != nullptr;
}

inline bool semaphore::retry_locked(detail::semaphore_waiter& w) noexcept {
  retry_node_ = nullptr;
  if (w.handed() || word_.take_or_mark_queued(w.missing(), true)) {
    if (w.handed()) word_.clear_retrying();
    w.set_retry(false);
    return true;
  }
  return false;
}

template <class Bind>
bool semaphore::grant_bound(detail::wait_list& waiters, detail::wake_batch& batch, Bind&& bind) noexcept {
  assert(!closed_ && deficit_ == 0);
  auto* head = static_cast<detail::semaphore_waiter*>(waiters.committed_front(batch));
  if (head != nullptr) {
    assert(head->granted() == 0 && head->missing() == 1);
    head->grant(1);
    bind(*head);
    waiters.claim_front(batch, wait_status::ok);
  }
  if (waiters.empty()) word_.make_available(0);  // contended until now
  return head != nullptr;
}

inline auto semaphore::acquire(std::size_t n) {
  return detail::acquire_awaiter<detail::permit_itself, false, true>(this, checked(n),
                                                                     detail::permit_itself{});
}
inline auto semaphore::acquire(std::size_t n, asyncband::stop_token stop) {
  return acquire_forms::await_until_stopped(std::move(stop), this, checked(n), detail::permit_itself{});
}
inline semaphore_permit semaphore::acquire_blocking(std::size_t n) {
  return acquire_forms::block(this, checked(n), detail::permit_itself{});
}
inline result<semaphore_permit> semaphore::acquire_blocking(std::size_t n, asyncband::stop_token stop) {
  return acquire_forms::block_until_stopped(std::move(stop), this, checked(n), detail::permit_itself{});
}
template <class Rep, class Period>
result<semaphore_permit> semaphore::acquire_timeout(std::size_t n,
                                                    std::chrono::duration<Rep, Period> timeout) {
  return acquire_forms::block_for(timeout, this, checked(n), detail::permit_itself{});
}

}  // namespace asyncband

namespace asyncband {

class owned_semaphore_permit;
namespace detail {
struct make_owned_semaphore_permit;
}  // namespace detail

/// Permits that also keep their semaphore alive (shared ownership): what `acquire_owned` yields,
/// for work that outlives the scope that acquired them (a detached task, a connection limit
/// held by a session object). Destroying it returns the permits, then drops the reference (so
/// does move assignment, for what it held: detail::owning_permit). Move-only; an empty one
/// (moved-from, forgotten, released) returns nothing.
class [[nodiscard]] owned_semaphore_permit {
 public:
  /// An empty permit: holds nothing and keeps nothing alive.
  owned_semaphore_permit() noexcept = default;

  /// How many permits this holds.
  [[nodiscard]] std::size_t count() const noexcept { return held_.permit().count(); }
  /// The semaphore this keeps alive (null once moved from).
  [[nodiscard]] const std::shared_ptr<asyncband::semaphore>& semaphore() const noexcept {
    return held_.owner();
  }
  /// count() > 0.
  explicit operator bool() const noexcept { return static_cast<bool>(held_.permit()); }

  /// Returns the permits now (the reference to the semaphore stays until destruction).
  void release() noexcept { held_.permit().release(); }
  /// Returns n of the permits now and keeps the rest (all of them if n >= count()).
  void release(std::size_t n) noexcept { held_.permit().release(n); }
  /// Gives up the permits without returning them; returns how many were forgotten.
  std::size_t forget() noexcept { return held_.permit().forget(); }
  /// Moves n of the permits into a new owned permit of the same semaphore. Throws
  /// std::invalid_argument if this holds fewer than n.
  owned_semaphore_permit split(std::size_t n) {
    return owned_semaphore_permit(held_.owner(), held_.permit().split(n));
  }
  /// Takes over other's permits; throws as semaphore_permit::merge (and changes nothing).
  void merge(owned_semaphore_permit&& other) {
    if (&other == this) return;
    // An empty permit takes the other's semaphore along with its permits: it must keep that
    // one alive now (it may hold a reference to another, or to none).
    const bool adopts = count() == 0 && other.count() != 0;
    held_.permit().merge(std::move(other.held_.permit()));
    if (adopts) held_.adopt(other.held_.owner());
  }

 private:
  friend struct detail::make_owned_semaphore_permit;
  owned_semaphore_permit(std::shared_ptr<asyncband::semaphore> owner, semaphore_permit&& permit) noexcept
      : held_(std::move(owner), std::move(permit)) {}

  detail::owning_permit<asyncband::semaphore> held_;
};

namespace detail {
/// The Make of an owned acquisition: wraps the permit with the reference that keeps its
/// semaphore alive.
struct make_owned_semaphore_permit {
  std::shared_ptr<asyncband::semaphore> owner;
  owned_semaphore_permit operator()(semaphore_permit&& permit) noexcept {
    return {std::move(owner), std::move(permit)};
  }
};
using owned_acquire_forms = acquire_forms<make_owned_semaphore_permit>;

inline std::size_t checked_owned_count(std::size_t n) {
  if (n > semaphore::max())
    throw std::invalid_argument("asyncband::acquire_owned: count above semaphore::max()");
  return n;
}
}  // namespace detail

/// `co_await acquire_owned(s, n)` yields an owned_semaphore_permit for n that keeps `*s` alive.
/// The contract of semaphore::acquire, except that on a barging semaphore it is handed its
/// permits (no retry: its awaiter has no room for one). Precondition: s
/// is not null. Throws std::invalid_argument if n > semaphore::max().
inline auto acquire_owned(std::shared_ptr<semaphore> s, std::size_t n = 1) {
  semaphore* raw = s.get();
  return detail::owned_acquire_forms::await(raw, detail::checked_owned_count(n),
                                            detail::make_owned_semaphore_permit{std::move(s)});
}
/// Yields result<owned_semaphore_permit>: ok, or cancelled.
inline auto acquire_owned(std::shared_ptr<semaphore> s, std::size_t n, asyncband::stop_token stop) {
  semaphore* raw = s.get();
  return detail::owned_acquire_forms::await_until_stopped(std::move(stop), raw,
                                                          detail::checked_owned_count(n),
                                                          detail::make_owned_semaphore_permit{std::move(s)});
}
/// acquire_owned() for a plain thread: blocks until n permits of `*s` are held. Precondition: s
/// is not null.
inline owned_semaphore_permit acquire_owned_blocking(std::shared_ptr<semaphore> s, std::size_t n = 1) {
  semaphore* raw = s.get();
  return detail::owned_acquire_forms::block(raw, detail::checked_owned_count(n),
                                            detail::make_owned_semaphore_permit{std::move(s)});
}
/// As acquire_owned_blocking(s, n), or until `stop` is requested: the permits, or cancelled.
inline result<owned_semaphore_permit> acquire_owned_blocking(std::shared_ptr<semaphore> s, std::size_t n,
                                                             asyncband::stop_token stop) {
  semaphore* raw = s.get();
  return detail::owned_acquire_forms::block_until_stopped(std::move(stop), raw,
                                                          detail::checked_owned_count(n),
                                                          detail::make_owned_semaphore_permit{std::move(s)});
}
/// n permits now that keep `*s` alive, or nothing (as semaphore::try_acquire).
[[nodiscard]] inline std::optional<owned_semaphore_permit> try_acquire_owned(std::shared_ptr<semaphore> s,
                                                                             std::size_t n = 1) {
  auto permit = s->try_acquire(n);
  if (!permit) return std::nullopt;
  return detail::make_owned_semaphore_permit{std::move(s)}(std::move(*permit));
}

}  // namespace asyncband
