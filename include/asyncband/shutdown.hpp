// SPDX-License-Identifier: Apache-2.0
// asyncband/shutdown.hpp: a shutdown pair (Asyncband's `shutdown` module): one sender signals
// shutdown to every receiver and waits until every receiver is gone.
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <cassert>
#include <chrono>
#include <cstddef>
#include <memory>
#include <utility>

#include "detail/debug_access.hpp"
#include "detail/wait_functions.hpp"
#include "detail/wait_queue.hpp"
#include "result.hpp"
#include "stop_token.hpp"
#include "wait_group.hpp"

namespace asyncband {

namespace shutdown {
class sender;
class receiver;
class watcher;
}  // namespace shutdown

namespace detail {

/// What every handle of a pair shares: the signal and the waiters for it. The signal is the
/// asyncband::stop_source itself (requested = shut down), so the receivers' stop tokens and
/// is_shutdown_now() can never disagree: there is one flag.
class shutdown_state {
 public:
  shutdown_state() = default;
  shutdown_state(const shutdown_state&) = delete;
  shutdown_state& operator=(const shutdown_state&) = delete;
  /// Debug builds assert that no is_shutdown() wait is pending (its handle must outlive it).
  ~shutdown_state() {
    assert(queue_.no_waiters_left() && "asyncband::shutdown receiver or watcher destroyed with waiters");
  }

  [[nodiscard]] bool signalled() const noexcept { return source_.stop_requested(); }
  [[nodiscard]] asyncband::stop_token token() const noexcept { return source_.get_token(); }

  /// The first call requests stop, which runs the tokens' stop callbacks on this thread, outside
  /// any lock of ours; then wakes the queued is_shutdown() waiters. Later calls return at once.
  /// The caller holds a reference of its own on this state: a callback or a waiter resumed
  /// inline may destroy every handle.
  void signal() noexcept {
    if (!source_.request_stop()) return;
    queue_.wake_all();
  }

  wait_queue& queue() noexcept { return queue_; }

 private:
  asyncband::stop_source source_;
  wait_queue queue_;
};

/// An is_shutdown() wait: complete once the stop is requested. enqueue() reads the flag under
/// the queue's lock and signal() wakes under it after setting the flag, so a wait either sees
/// the flag or is found in the queue.
class shutdown_wait : public queued_waiter<shutdown_state> {
 public:
  using value_type = void;
  static constexpr bool transferable = false;
  using queued_waiter::queued_waiter;

  bool try_ready() noexcept { return owner().signalled(); }
  bool enqueue() noexcept {
    return owner().queue().complete_or_enqueue(*this, [this] { return owner().signalled(); });
  }
  void take() noexcept {}
};

/// What a receiver and a watcher have in common: they observe the signal. Not a public type: a
/// receiver does not convert to a watcher by slicing (use watch()).
class shutdown_observer {
 public:
  /// True once shutdown() was called (a lock-free load). True implies that stop_token() is
  /// stopped; the stop callbacks may still be running on the thread that called shutdown().
  [[nodiscard]] bool is_shutdown_now() const noexcept { return state().signalled(); }

  /// A token stopped by shutdown(): give it to any stop-token-aware wait (an asyncband wait, a
  /// std::jthread, a std::condition_variable_any) to have shutdown cancel it. It stays valid
  /// after every handle is gone.
  [[nodiscard]] asyncband::stop_token stop_token() const noexcept { return state().token(); }

  /// Waits for the shutdown signal. `co_await rx.is_shutdown();`
  auto is_shutdown() const noexcept { return forms::await(&state()); }
  /// Waits for the signal or until `stop` is requested; yields result<void> (ok or cancelled).
  /// (This handle's own stop_token() as `stop` makes the wait end cancelled, not ok.)
  auto is_shutdown(asyncband::stop_token stop) const noexcept {
    return forms::await_until_stopped(std::move(stop), &state());
  }
  /// Blocks the calling thread until the signal.
  void is_shutdown_blocking() const { forms::block(&state()); }
  /// Blocks the calling thread until the signal or until `stop` is requested.
  result<void> is_shutdown_blocking(asyncband::stop_token stop) const {
    return forms::block_until_stopped(std::move(stop), &state());
  }
  /// Blocks the calling thread until the signal or until `timeout` has passed.
  template <class Rep, class Period>
  result<void> is_shutdown_timeout(std::chrono::duration<Rep, Period> timeout) const {
    return forms::block_for(timeout, &state());
  }

 protected:
  explicit shutdown_observer(std::shared_ptr<shutdown_state> state) noexcept : state_(std::move(state)) {}
  shutdown_observer(const shutdown_observer&) = default;
  shutdown_observer(shutdown_observer&&) noexcept = default;
  shutdown_observer& operator=(const shutdown_observer&) = default;
  shutdown_observer& operator=(shutdown_observer&&) noexcept = default;
  ~shutdown_observer() = default;

  [[nodiscard]] shutdown_state& state() const noexcept {
    assert(state_ != nullptr && "asyncband::shutdown: use of a moved-from receiver or watcher");
    return *state_;
  }

  std::shared_ptr<shutdown_state> state_;

 private:
  friend struct debug_access;
  using forms = wait_forms<shutdown_wait>;
};

}  // namespace detail

/// A shutdown pair: one sender signals shutdown to every receiver and watcher, then waits until
/// every receiver is gone (Asyncband's `shutdown::new_pair`; Go's context cancellation plus a
/// WaitGroup in one object).
///
///   auto [tx, rx] = asyncband::shutdown::make_pair();
///   for (...) spawn(worker(rx));            // each copy of the receiver is tracked
///   rx.reset();                             // the caller's own copy is not a worker
///   ...
///   tx.shutdown();                          // every receiver sees it; every stop_token() stops
///   co_await tx.wait_done();                // until the last receiver is destroyed
///
///   task<void> worker(shutdown::receiver rx) {   // tracked until its frame is destroyed
///     while (auto job = co_await jobs.recv(rx.stop_token())) { ... }   // cancelled by shutdown
///   }
namespace shutdown {

/// Creates a pair: the sender and the first receiver, sharing one state (allocated here; with
/// asyncband::stop_source's and the receivers' wait_group state: three allocations, none later: not
/// per copy, not per wait).
[[nodiscard]] inline std::pair<sender, receiver> make_pair();

/// The signalling half: shutdown() signals every receiver and watcher, the wait_done forms wait
/// until every receiver is gone. Move-only.
///
/// Contract
/// - Signal: shutdown() is idempotent and noexcept. The first call (i) requests stop on the
///   pair's asyncband::stop_source: from then on is_shutdown_now() is true, every stop_token() is
///   stopped, and an is_shutdown() wait starting completes at once; (ii) runs the stop callbacks
///   registered on those tokens, on the calling thread (asyncband::stop_source's rule), which cancels
///   asyncband waits given the token; (iii) wakes every pending is_shutdown() wait. A concurrent
///   later call returns at once, possibly before (iii).
/// - Synchronization: everything done before the first shutdown() happens-before everything
///   after an observation of it (is_shutdown_now() or stop_requested() returning true, a
///   completed is_shutdown() wait, a stop callback). Everything a receiver's holder did before
///   destroying or resetting it happens-before the completion of a wait_done wait that observes
///   every receiver gone.
/// - Dropping: destroying a sender that still has its pair signals shutdown, as if shutdown()
///   were called (as std::jthread's destructor requests stop): nobody else could ever signal, and
///   a receiver waiting without a stop token would wait forever. A moved-from sender signals
///   nothing.
/// - Waiting: wait_done() needs no prior shutdown(): it waits until no receiver is left (at once
///   if none is), and stays complete, since no new receiver can be made without a live one.
///   Watchers and moved-from receivers do not count.
/// - Cancellation: wait_done(stop) commits to cancelled if the stop request is observed before
///   the last receiver's departure claims the waiter; a stop already requested ends it at once.
/// - Lifetime ("last one out"): a waiter resumed inline by shutdown(), or by the last receiver's
///   destruction, may destroy the sender, every receiver and watcher (and with them the shared
///   state) at once; the call that woke it touches none of them afterwards. The sender must
///   outlive its own pending wait_done waits. On a moved-from sender, shutdown() does nothing
///   and receivers() is 0; its other calls are undefined (debug builds assert).
/// - Threads: shutdown(), is_shutdown_now(), receivers() and the wait_done forms only read the
///   sender, so they may run concurrently on one sender (a signal-handling thread calls
///   shutdown() while another waits in wait_done_blocking()); assignment and destruction need
///   exclusive access. Different handles of a pair may be used concurrently.
class sender {
 public:
  /// Takes `other`'s pair; `other` is empty afterwards (and signals nothing).
  sender(sender&& other) noexcept = default;
  /// Signals the pair this sender had (see "Dropping"), then takes `other`'s.
  sender& operator=(sender&& other) noexcept {
    if (this != &other) {
      // The old pair is signalled last, when `old` goes: it may resume a waiter inline that
      // destroys this sender, so nothing may write the sender after it.
      sender old(std::move(*this));
      state_ = std::move(other.state_);
      done_ = std::move(other.done_);
    }
    return *this;
  }
  sender(const sender&) = delete;
  sender& operator=(const sender&) = delete;
  /// Signals shutdown if it has not been (see "Dropping").
  ~sender() { shutdown(); }

  /// Signals shutdown to every receiver and watcher: see the class contract. Idempotent.
  void shutdown() noexcept {
    if (!state_) return;
    // A reference of its own: the stop callbacks and the woken waiters may destroy this sender
    // and every other handle while signal() still runs.
    const std::shared_ptr<detail::shutdown_state> keep = state_;
    keep->signal();
  }

  /// True once shutdown() was called (a lock-free load).
  [[nodiscard]] bool is_shutdown_now() const noexcept { return state().signalled(); }

  /// The number of tracked receivers now (a snapshot).
  [[nodiscard]] std::size_t receivers() const noexcept { return done_.members(); }

  /// Waits until every tracked receiver is gone. `co_await tx.wait_done();`
  auto wait_done() noexcept { return group().wait(); }
  /// Waits until every receiver is gone or `stop` is requested; yields result<void>.
  auto wait_done(asyncband::stop_token stop) noexcept { return group().wait(std::move(stop)); }
  /// Blocks the calling thread until every receiver is gone.
  void wait_done_blocking() { group().wait_blocking(); }
  /// Blocks the calling thread until every receiver is gone or `stop` is requested.
  result<void> wait_done_blocking(asyncband::stop_token stop) {
    return group().wait_blocking(std::move(stop));
  }
  /// Blocks the calling thread until every receiver is gone or `timeout` has passed.
  template <class Rep, class Period>
  result<void> wait_done_timeout(std::chrono::duration<Rep, Period> timeout) {
    return group().wait_timeout(timeout);
  }

 private:
  friend std::pair<sender, receiver> make_pair();
  friend struct asyncband::detail::debug_access;

  sender(std::shared_ptr<detail::shutdown_state> state, wait_group done) noexcept
      : state_(std::move(state)), done_(std::move(done)) {}

  [[nodiscard]] detail::shutdown_state& state() const noexcept {
    assert(state_ != nullptr && "asyncband::shutdown: use of a moved-from sender");
    return *state_;
  }
  wait_group& group() noexcept {
    assert(state_ != nullptr && "asyncband::shutdown: use of a moved-from sender");
    return done_;
  }

  std::shared_ptr<detail::shutdown_state> state_;
  /// A handle on the receivers' group that is not a member itself: its wait forms (which leave
  /// first, a no-op here) wait for the members, the receivers, to be gone. Being no member, the
  /// handle is only read by them, which is what lets wait_done run concurrently with itself and
  /// with shutdown().
  wait_group done_;
};

/// The tracked observing half: waits for the shutdown signal, and the sender's wait_done waits
/// until every receiver is destroyed. Copyable: each copy is tracked.
///
/// Contract
/// - Tracking: a receiver counts for wait_done from its creation (make_pair, a copy) until it is
///   destroyed, reset() or moved from (a move transfers the tracking; the moved-from receiver
///   is empty and must not be used, but may be assigned to or destroyed). A receiver is a
///   wait_group member: a copy beyond wait_group::max() receivers throws std::overflow_error.
/// - Signal: is_shutdown_now(), the is_shutdown() forms and stop_token() all read the one flag
///   that shutdown() sets first (see sender). A receiver copied after shutdown sees it at once.
/// - when_any: is_shutdown() completes a branch with nothing to give back (a service loop's quit).
/// - Cancellation: is_shutdown(stop) commits to cancelled if the stop request is observed before
///   shutdown() claims the waiter; a stop already requested ends it at once. Nothing is granted,
///   so nothing needs passing on.
/// - Lifetime ("last one out"): the destruction (or reset, or assignment) of the last receiver
///   may resume a wait_done waiter inline, which may destroy the sender and every handle; the
///   receiver touches nothing of the pair afterwards. A receiver must outlive its own pending
///   waits.
/// - Threads: the const operations (the waits, is_shutdown_now(), stop_token(), watch(), being
///   copied) may run concurrently on one receiver; reset(), assignment and destruction need
///   exclusive access. Copies may be used concurrently.
class receiver : public detail::shutdown_observer {
 public:
  /// Another tracked receiver of the same pair (a copy of an empty receiver is empty).
  receiver(const receiver& other) = default;
  /// Transfers `other`'s tracking; `other` is empty afterwards.
  receiver(receiver&& other) noexcept = default;
  /// Gives up this receiver's tracking, then tracks a copy of `other`.
  receiver& operator=(const receiver& other) {
    if (this != &other) *this = receiver(other);
    return *this;
  }
  /// Gives up this receiver's tracking (last: see reset()), then takes `other`'s.
  receiver& operator=(receiver&& other) noexcept {
    if (this != &other) {
      receiver old(std::move(*this));  // leaves when `old` goes, as the last action
      state_ = std::move(other.state_);
      member_ = std::move(other.member_);
    }
    return *this;
  }
  /// Stops being tracked (may complete wait_done).
  ~receiver() = default;

  /// Stops being tracked now, as destroying it would; the receiver is empty afterwards. The
  /// departure is its last action (it may resume a wait_done waiter inline that destroys this
  /// receiver).
  void reset() noexcept { const receiver gone(std::move(*this)); }

  /// A watcher of the same pair: it observes the signal but is not tracked.
  [[nodiscard]] inline watcher watch() const;

 private:
  friend std::pair<sender, receiver> make_pair();

  receiver(std::shared_ptr<detail::shutdown_state> state, wait_group member) noexcept
      : shutdown_observer(std::move(state)), member_(std::move(member)) {}

  /// Declared after the state (in the base): destroyed first, so the departure, which may
  /// resume a waiter, happens before the state reference is dropped.
  wait_group member_;
};

/// The untracked observing half: the receiver's signal waits and stop token, without counting
/// for wait_done. Copyable. Made by receiver::watch().
///
/// Contract
/// - Signal, synchronization and cancellation: as for a receiver.
/// - Lifetime: a watcher keeps the shared state alive, never the wait_done wait pending. It
///   must outlive its own pending waits; a moved-from watcher must not be used (but may be
///   assigned to or destroyed).
/// - Threads: as for a receiver.
class watcher : public detail::shutdown_observer {
 public:
  /// Another watcher of the same pair.
  watcher(const watcher& other) = default;
  /// Takes `other`'s pair; `other` is empty afterwards.
  watcher(watcher&& other) noexcept = default;
  /// Watches `other`'s pair instead.
  watcher& operator=(const watcher& other) = default;
  /// Watches `other`'s pair instead; `other` is empty afterwards.
  watcher& operator=(watcher&& other) noexcept = default;
  /// Drops its reference on the shared state; affects no wait.
  ~watcher() = default;

 private:
  friend class receiver;
  explicit watcher(std::shared_ptr<detail::shutdown_state> state) noexcept
      : shutdown_observer(std::move(state)) {}
};

inline watcher receiver::watch() const {
  (void)state();  // asserts on an empty receiver
  return watcher(state_);
}

inline std::pair<sender, receiver> make_pair() {
  auto state = std::make_shared<detail::shutdown_state>();
  wait_group first;        // the first receiver's membership
  wait_group done(first);  // a second handle on the same group...
  done.leave();            // ...that is no member: the sender waits without counting itself
  return {sender(state, std::move(done)), receiver(std::move(state), std::move(first))};
}

}  // namespace shutdown
}  // namespace asyncband
