// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/wait_operation.hpp: the one awaiter and the one blocking wait that every
// primitive's waiting operation is made of.
//
// A primitive describes one waiting operation as a node type deriving from detail::waiter:
//
//   struct my_node : detail::waiter {
//     using value_type = ...;                     // what a completed wait yields (may be void)
//     static constexpr bool transferable = ...;   // does a completed wait hold a grant that a
//                                                 // late cancellation must pass on?
//     bool try_ready() noexcept;                  // complete without queueing (lock-free or locked)
//     bool enqueue() noexcept;                    // under the lock: complete now (true) or link
//     bool cancel(wait_status why) noexcept;      // unlink if still queued; true if it did and the
//                                                 // caller must resolve it (false: claimed by a
//                                                 // waker, or resolved by cancel itself)
//     value_type take();                          // after completion with status ok
//     void give_back() noexcept;                  // transferable only: pass the grant on (or
//                                                 // bool: whether there was one, for a node whose
//                                                 // completed wait may carry none)
//     bool may_be_ready() noexcept;               // optional: a read-only guess that try_ready()
//                                                 // would succeed; a blocking twin then retries
//                                                 // for a few microseconds before it parks
//   };
//
// and returns wait_awaiter<my_node, Cancellable> from its wait functions, and block_wait() from
// its blocking twins (detail/wait_functions.hpp writes those once for all). pending_wait holds
// the whole suspension protocol; primitives never touch the handshake themselves.
#pragma once

#include <chrono>
#include <concepts>
#include <coroutine>
#include <cstdint>
#include <new>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>

#include "../result.hpp"
#include "../scheduler.hpp"
#include "../stop_token.hpp"
#include "broadcast_parking.hpp"
#include "lock_retry.hpp"
#include "spin_lock.hpp"
#include "waiter.hpp"

namespace asyncband::detail {

template <class Node>
concept wait_node = std::derived_from<Node, waiter> && requires(Node& n, wait_status why) {
  typename Node::value_type;
  { Node::transferable } -> std::convertible_to<bool>;
  { n.try_ready() } noexcept -> std::same_as<bool>;
  { n.enqueue() } noexcept -> std::same_as<bool>;
  { n.cancel(why) } noexcept -> std::same_as<bool>;
  n.take();
};

/// An awaiter is awaited once. Awaiting it again after it suspended would publish a node whose
/// wait is over (a use-after-free once the awaiter dies), so every awaiter checks where the
/// check is free (on its suspension path, or on a value its fast path reads anyway) and throws.
[[noreturn]] [[gnu::cold]] [[gnu::noinline]] inline void throw_awaited_again() {
  throw std::logic_error(
      "asyncband: an awaiter was co_awaited again after it suspended; an awaiter is awaited once "
      "(call the wait function again for a new wait)");
}

/// Claims `node` with outcome `why` if it is still queued, and resolves it. If a waker claimed
/// it first, does nothing: that waker resolves it. A node seen claimed is left without touching
/// the primitive, which a waiter woken in the same batch may have destroyed (and that waiter
/// may be the very caller, requesting stop on a token this node shares).
template <class Node>
void cancel_and_resolve(Node& node, wait_status why) noexcept {
  if (node.is_claimed()) return;
  if (node.cancel(why)) {
    at_test_point(test_point::claimed_for_cancel);
    node.resolve();
  }
}

/// The stop callback of a waiting operation: claims the node if it is still queued and resolves
/// it (the coroutine resumes with a cancelled outcome). If a waker claimed it first, does nothing.
template <class Node>
struct cancel_on_stop {
  Node* node;
  void operator()() const noexcept { cancel_and_resolve(*node, wait_status::cancelled); }
};

/// A cancellable wait registers its stop callback after publication and drops it when the wait
/// ends; a wait that cannot be cancelled keeps neither token nor callback. The callback lives in
/// raw storage rather than a std::optional: g++ 12 at -O2/-O3 reports a false
/// -Wmaybe-uninitialized inside a never-engaged optional<stop_callback>.
template <class Node, bool Cancellable>
class stop_registration {
 public:
  explicit stop_registration(asyncband::stop_token t) noexcept : token_(std::move(t)) {}
  stop_registration(const stop_registration&) = delete;
  stop_registration& operator=(const stop_registration&) = delete;
  ~stop_registration() { disarm(); }

  [[nodiscard]] bool stop_requested() const noexcept { return token_.stop_requested(); }

  /// May run the callback inline (a stop requested meanwhile): the node is then cancelled.
  void arm(Node& node) noexcept {
    if (!token_.stop_possible()) return;
    ::new (static_cast<void*>(storage_)) callback_type(token_, cancel_on_stop<Node>{&node});
    armed_ = true;
  }

  /// Waits for a callback running on another thread, then unregisters it.
  void disarm() noexcept {
    if (!armed_) return;
    armed_ = false;
    std::launder(reinterpret_cast<callback_type*>(storage_))->~callback_type();
  }

 private:
  using callback_type = asyncband::stop_callback<cancel_on_stop<Node>>;
  asyncband::stop_token token_;
  bool armed_ = false;
  alignas(callback_type) unsigned char storage_[sizeof(callback_type)];
};

template <class Node>
struct stop_registration<Node, false> {
  explicit stop_registration(const asyncband::stop_token& /*unused*/) noexcept {}
  [[nodiscard]] static bool stop_requested() noexcept { return false; }
  static void arm(Node& /*unused*/) noexcept {}
  static void disarm() noexcept {}
};

/// The default of pending_wait::publish's hook.
struct nothing_to_do {
  void operator()() const noexcept {}
};

/// A node whose wait can end without its value even when nobody cancels it (a closed phaser or
/// channel): it declares `static constexpr bool fallible = true;` and its resolver writes the
/// failure into `status`.
template <class Node>
inline constexpr bool fallible_v = requires { requires Node::fallible; };

/// A node whose outcome says more than result<value> can (a broadcast receive's `lagged(n)`)
/// names it: `using outcome_type = ...;`, constructible from a failed wait_status, and take()
/// returns it. Such a wait yields it whether cancellable or not.
template <class Node>
inline constexpr bool has_outcome_type_v = requires { typename Node::outcome_type; };

template <class Node, bool Cancellable>
struct wait_yield {
  using type = std::conditional_t<Cancellable || fallible_v<Node>, result<typename Node::value_type>,
                                  typename Node::value_type>;
};
template <class Node, bool Cancellable>
  requires has_outcome_type_v<Node>
struct wait_yield<Node, Cancellable> {
  using type = typename Node::outcome_type;
};

/// What a wait yields: the node's value (or nothing) for waits that cannot fail, result<value>
/// for cancellable or fallible ones, or the node's own outcome type.
template <class Node, bool Cancellable>
using wait_yield_t = typename wait_yield<Node, Cancellable>::type;

/// A completed wait that will not deliver its outcome (cancelled late, or destroyed or discarded
/// unrun) passes on what it was granted; true if there was a grant to pass on.
template <class Node>
bool pass_on_grant(Node& node) noexcept {
  if constexpr (Node::transferable) {
    if (node.status == wait_status::ok) {
      if constexpr (std::is_same_v<decltype(node.give_back()), bool>) {
        return node.give_back();  // a broadcast completion carries nothing: not cancelled
      } else {
        node.give_back();
        return true;
      }
    }
  }
  return false;
}

/// Turns a resolved node into what the wait yields. A transferable grant received after a stop
/// request was observed is passed on, and the wait reports cancelled: cancellation commits
/// until the waiter resumes, and whatever it had been granted is not lost.
template <class Node, bool Cancellable>
wait_yield_t<Node, Cancellable> finish_wait(Node& node, bool stop_requested) {
  if constexpr (Cancellable || fallible_v<Node> || has_outcome_type_v<Node>) {
    if (Cancellable && stop_requested && pass_on_grant(node)) return wait_status::cancelled;
    if (node.status != wait_status::ok) return node.status;
    if constexpr (std::is_void_v<typename Node::value_type>) {
      node.take();
      return {};
    } else {
      return node.take();
    }
  } else {
    return node.take();
  }
}

/// One waiting operation in progress: the node, the stop token and the stop callback, and the
/// whole suspension protocol. The coroutine awaiter, the blocking wait and the callback wait
/// (bridges) are thin drivers of it that differ only in how a resolved wait continues.
/// Not movable: the node's address is published to other threads while pending.
template <wait_node Node, bool Cancellable>
class pending_wait {
 public:
  template <class... Args>
  explicit pending_wait(asyncband::stop_token token, Args&&... args)
      : node_(std::forward<Args>(args)...), stop_(std::move(token)) {}
  pending_wait(const pending_wait&) = delete;
  pending_wait& operator=(const pending_wait&) = delete;

  /// Destroying a wait that is still pending unlinks its node (see docs/design.md, "Destroying
  /// a waiting coroutine"); abandon() does it. Nothing to do if it never published, or was
  /// resolved and finished.
  ~pending_wait() {
    if (node_.is_suspended_unresolved()) [[unlikely]]
      abandon();
  }

  [[nodiscard]] Node& node() noexcept { return node_; }

  /// Published and not yet resolved: a resolver will still run the target.
  [[nodiscard]] bool pending() const noexcept { return node_.is_suspended_unresolved(); }

  /// Whether it suspended once already: a wait is published at most once.
  [[nodiscard]] bool was_published() const noexcept { return node_.was_published(); }

  /// Before publishing: true if the wait is over without queueing (a stop already requested
  /// ends it cancelled without touching the primitive).
  [[nodiscard]] bool try_complete() noexcept {
    if (stop_.stop_requested()) {
      node_.status = wait_status::cancelled;
      return true;
    }
    return node_.try_ready();
  }

  /// Queues the wait with `target` as its continuation. Returns true if it is pending: a
  /// resolver will run `target` exactly once. Returns false if it completed during publication
  /// (`target` will not run). Nothing here touches the wait after the final arm().
  /// Out of line so that nothing after the publication is merged into a coroutine body (clang 14
  /// has touched the frame after await_suspend handed it away: LLVM 56301/65054).
  /// `linked()` runs right after the node is queued, before anything can resume the wait (a
  /// condvar unlocks its mutex there: after registering, and before it can be resumed).
  /// `commit`: the when_any this wait is a branch of (see commit_point), or nullptr.
  template <class Linked = nothing_to_do>
  [[gnu::noinline]] [[nodiscard]] bool publish(resume_target target, Linked linked = {},
                                               commit_point* commit = nullptr) noexcept {
    at_test_point(test_point::queueing);  // a change made here must be seen by enqueue()'s re-check
    node_.prepare(target, commit);
    if (node_.enqueue()) {
      linked();
      return false;
    }
    at_test_point(test_point::published);
    linked();
    stop_.arm(node_);
    at_test_point(test_point::before_arm);
    return node_.arm();
  }

  /// Ends a pending wait as a stop request would, with outcome `why` (a timeout, a bridge's
  /// own cancellation): no effect if a waker claimed it first.
  void cancel(wait_status why) noexcept { cancel_and_resolve(node_, why); }

  /// Whether a stop was requested (a resolved wait deciding whether to use what it was granted).
  [[nodiscard]] bool stop_requested() const noexcept { return stop_.stop_requested(); }

  /// Instead of finish(), for a completed wait whose grant the waiter went on to use before
  /// resuming (a once's run): drops the stop callback; nothing is passed on.
  void keep_grant() noexcept { stop_.disarm(); }

  /// Instead of finish(), for a completed wait whose outcome nobody will take (a bridge's
  /// handler destroyed unrun, a when_any branch that lost): passes on a grant it received, as a
  /// late cancellation would. True if there was one.
  bool discard() noexcept {
    stop_.disarm();
    return pass_on_grant(node_);
  }

  /// After completion (or resolution): what the wait yields.
  wait_yield_t<Node, Cancellable> finish() {
    stop_.disarm();
    return finish_wait<Node, Cancellable>(node_, stop_.stop_requested());
  }

 private:
  /// The destructor's rest, out of line: the common case (the wait is over) stays a single test
  /// inlined into the awaiting code.
  [[gnu::noinline]] void abandon() noexcept {
    if (!node_.abandon()) {
      assert(false && "asyncband: a wait destroyed while its resumption was in flight");
      return;
    }
    stop_.disarm();  // waits for a stop callback running on another thread
    if (node_.cancel(wait_status::cancelled)) return;
    // A resolver claimed the node before we abandoned it: let it finish (or, if it is this
    // thread, withdraw the node from its batch), then pass on what it granted, since nobody
    // will resume to use it.
    if (!wake_batch::withdraw(node_)) {
      at_test_point(test_point::awaiting_resolver);
      node_.await_resolver();
    }
    pass_on_grant(node_);
  }

  Node node_;
  stop_registration<Node, Cancellable> stop_;
};

/// How asyncband::when_any drives an awaiter as one of its branches; specialized next to each
/// selectable awaiter type (a friend of it), with these static members:
///   using outcome = ...;                 what `co_await a` yields (void: std::monostate)
///   bool spent(A&)                       awaited (or selected) before: it may not start again
///   bool poll(A&)                        completes without publishing (nothing is published yet,
///                                        so no other branch can have won: it wins if true)
///   bool publish(A&, resume_target, commit_point&)   as pending_wait::publish: true if pending
///   waiter& node(A&)                     its node (what it commits as), after publish
///   void cancel(A&)                      a published wait's cancellation (status cancelled)
///   outcome win(A&)                      the winner's outcome, as `co_await a` would yield it
///   void pass_on(A&, bool started)       a loser (noexcept): passes on a grant it received
///   std::optional<outcome> handed_back(A&)   a loser, after pass_on: what comes back to the caller
///                                        (a send's value), or the cancelled outcome if the
///                                        outcome type can say so
template <class Awaiter>
struct select_access;

/// What a when_any keeps of a branch's outcome: the outcome, or std::monostate for a wait that
/// yields nothing.
template <class Outcome>
using stored_outcome_t = std::conditional_t<std::is_void_v<Outcome>, std::monostate, Outcome>;

/// The cancelled outcome of a losing branch, if its outcome type can express one.
template <class Outcome>
std::optional<stored_outcome_t<Outcome>> cancelled_outcome() {
  if constexpr (std::is_constructible_v<Outcome, wait_status>) {
    return Outcome(wait_status::cancelled);
  } else {
    return std::nullopt;
  }
}

/// The awaiter of every waiting operation; lives in the awaiting coroutine's frame.
/// The awaiters carry [[nodiscard]] with a reason (a forgotten co_await starts no wait); the
/// functions returning them do not repeat a plain [[nodiscard]], which would hide it under g++.
template <wait_node Node, bool Cancellable>
class [[nodiscard("co_await it: a wait does nothing until it is awaited")]] wait_awaiter {
 public:
  template <class... Args>
  explicit wait_awaiter(asyncband::stop_token token, Args&&... args)
      : wait_(std::move(token), std::forward<Args>(args)...) {}

  bool await_ready() noexcept { return wait_.try_complete(); }
  /// Throws std::logic_error if this awaiter suspended before (it is awaited once). A second
  /// await that completes at once without suspending is harmless and goes unnoticed.
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    if (wait_.was_published()) [[unlikely]]
      throw_awaited_again();
    return wait_.publish(resume_target(h, scheduler_of(h)));
  }
  wait_yield_t<Node, Cancellable> await_resume() { return wait_.finish(); }

 private:
  friend struct select_access<wait_awaiter>;
  pending_wait<Node, Cancellable> wait_;
};

/// Every wait_awaiter is a when_any branch: the node commits before anything is granted, and a
/// losing node passes on what it was granted (pending_wait::discard).
template <wait_node Node, bool Cancellable>
struct select_access<wait_awaiter<Node, Cancellable>> {
  using awaiter = wait_awaiter<Node, Cancellable>;
  using outcome = wait_yield_t<Node, Cancellable>;

  static bool spent(const awaiter& a) noexcept { return a.wait_.was_published(); }
  static bool poll(awaiter& a) noexcept { return a.wait_.try_complete(); }
  static bool publish(awaiter& a, resume_target target, commit_point& commit) noexcept {
    return a.wait_.publish(target, nothing_to_do{}, &commit);
  }
  static waiter& node(awaiter& a) noexcept { return a.wait_.node(); }
  static void cancel(awaiter& a) noexcept { a.wait_.cancel(wait_status::cancelled); }
  static outcome win(awaiter& a) { return a.wait_.finish(); }
  static void pass_on(awaiter& a, bool started) noexcept {
    if (started) a.wait_.discard();
  }
  static std::optional<stored_outcome_t<outcome>> handed_back(awaiter& /*unused*/) {
    return cancelled_outcome<outcome>();
  }
};

/// Marks an awaiter made of several waits in a row (a condvar wait, watch's wait_for), which a
/// driver other than a coroutine (the Asio adapter) runs through staged_access. Only the
/// awaiters of the forms with a stop token derive from staged_awaiter_base<true>: a driver
/// cancels them by requesting that stop. They are not when_any branches (no single node that
/// could commit).
template <bool Cancellable>
struct staged_awaiter_base {};

/// An awaiter staged_access can drive and cancel (through the stop token it was given).
template <class A>
concept staged_awaiter = std::derived_from<A, staged_awaiter_base<true>>;

/// How a driver other than a coroutine runs a staged awaiter (a friend of each):
///   ready(a)           await_ready(): true if the outcome is decided without waiting
///   start(a, target)   await_suspend() without a coroutine: true if a wait is pending, and then
///                      `target` runs on the thread that ends the last stage (nothing touches
///                      the awaiter before it); false if the outcome was decided at once
///   resume(a)          await_resume(): the outcome
///   give_back(a)       after an ok outcome was taken and dropped, for a driver that reports it
///                      cancelled instead (late): passes on what the wait consumed
///   current_node(a)    the node of the stage in progress or last ended (nullptr before any)
struct staged_access {
  template <class A>
  using outcome = decltype(std::declval<A&>().await_resume());

  template <staged_awaiter A>
  static bool ready(A& a) {
    return a.await_ready();
  }
  template <staged_awaiter A>
  static bool start(A& a, resume_target target) noexcept {
    return a.start(target);
  }
  template <staged_awaiter A>
  static outcome<A> resume(A& a) {
    return a.await_resume();
  }
  template <staged_awaiter A>
  static void give_back(A& a) noexcept {
    a.give_back();
  }
  /// The node of the stage in progress or last ended, or nullptr before the first.
  template <staged_awaiter A>
  static waiter* current_node(A& a) noexcept {
    return a.current_node();
  }
};

using steady_deadline = std::optional<std::chrono::steady_clock::time_point>;

/// A node whose blocking waits retry before parking: its completion usually comes from another
/// thread that is running now (a channel's other side, a lock's holder), sooner than a park and
/// a wake would take.
template <class Node>
concept spins_before_parking = requires(Node& n) {
  { n.may_be_ready() } noexcept -> std::same_as<bool>;
};

/// A node whose spin before parking may stop early: `worth_spinning()` (a read-only hint) false
/// parks at once (a barging mutex with somebody already waiting: spinners beyond the cores only
/// take the CPU from the holder).
template <class Node>
concept stops_spinning = requires(const Node& n) {
  { n.worth_spinning() } noexcept -> std::same_as<bool>;
};

/// A node whose spin may back off by yielding: `backs_off_by_yielding()` true spins with
/// spin_backoff::yield (a semaphore's acquisition, a receive on a small channel: see
/// receive_spins_by_yielding); any other node spins with the pause hint.
template <class Node>
concept may_yield_while_spinning = requires(const Node& n) {
  { n.backs_off_by_yielding() } noexcept -> std::same_as<bool>;
};

/// The node's backs_off_by_yielding(), or false for a node without it (a pause spin).
template <class Node>
bool spins_by_yielding(const Node& n) noexcept {
  if constexpr (may_yield_while_spinning<Node>) {
    return n.backs_off_by_yielding();
  } else {
    return false;
  }
}

/// Before parking: retries the wait for about as long as parking and being woken would take.
/// Only read-only guesses spin (may_be_ready), so the spinning thread does not take the cache
/// line away from the thread it waits for; try_complete runs when a guess says it may succeed.
/// A node that is queued never spins. try_ready keeps to the primitive's order: a strict FIFO
/// semaphore's try_take fails while anybody is queued, so spinning cannot barge ahead of a
/// parked waiter; a barging mutex lets it take a free lock, as any locker may. The node chooses
/// the backoff (spins_by_yielding), except that a `timed` wait always spins with the pause hint:
/// its deadline is looked at only after the spin, and a yield may give the core away for a
/// whole time slice.
template <class Node, bool Cancellable>
bool spin_before_parking(pending_wait<Node, Cancellable>& wait, bool timed = false) noexcept {
  if constexpr (spins_before_parking<Node>) {
    const bool yielding = !timed && spins_by_yielding(wait.node());
    if constexpr (stops_spinning<Node>) {
      bool gave_up = false;
      const bool took = spin_briefly(yielding, [&wait, &gave_up] {
        if (!wait.node().worth_spinning()) return gave_up = true;
        return wait.node().may_be_ready() && wait.try_complete();
      });
      return took && !gave_up;
    }
    return spin_briefly(yielding, [&wait] { return wait.node().may_be_ready() && wait.try_complete(); });
  } else {
    return false;
  }
}

/// A lock's node that may be taken out of the queue to try again instead of being handed the
/// lock (a barging mutex's, detail/lock_retry.hpp): a thread's untimed wait without a stop
/// token then retries itself, as any running locker may barge.
template <class Node>
concept retries_when_parked = requires(const Node& n) {
  { n.may_retry() } noexcept -> std::same_as<bool>;
};

/// block_wait() once its first try failed: spins, then parks until the wait completes (or the
/// deadline cancels it). Out of line, so that the uncontended wait stays a try and a finish.
/// noexcept: if a timed park's std::mutex threw, the node would stay published with a target
/// on a dead parker; terminating is the only safe end.
template <class Node, bool Cancellable>
[[gnu::noinline]] void block_until_complete(pending_wait<Node, Cancellable>& wait,
                                            const steady_deadline& deadline) noexcept {
  if (spin_before_parking(wait, deadline.has_value())) return;
  if (!deadline) {
    if constexpr (!Cancellable && retries_when_parked<Node>) {
      if (wait.node().may_retry()) {
        park_retrying(wait.node(), [&wait](resume_target target) noexcept { return wait.publish(target); });
        return;
      }
    }
    parker park;
    if (wait.publish(resume_target(&parker::unpark_thunk, &park))) park.park();
  } else {
    timed_parker park;
    if (wait.publish(resume_target(&timed_parker::unpark_thunk, &park))) {
      if (!park.park_until(*deadline)) wait.cancel(wait_status::timeout);
      park.park();  // at once if released; else until the resolver that claimed the node
    }
  }
}

/// The blocking twin of wait_awaiter: the same protocol, with the calling thread parked instead
/// of a coroutine suspended. A deadline that passes first cancels with `timeout`.
template <wait_node Node, bool Cancellable, class... Args>
[[gnu::always_inline]] inline wait_yield_t<Node, Cancellable> block_wait(asyncband::stop_token token,
                                                                         steady_deadline deadline,
                                                                         Args&&... args) {
  pending_wait<Node, Cancellable> wait(std::move(token), std::forward<Args>(args)...);
  if (!wait.try_complete()) block_until_complete(wait, deadline);
  return wait.finish();
}

/// block_wait() without a stop token or a deadline, for a primitive whose wake-ups release
/// every waiter at once (a barrier's generation, a latch reaching zero, an event set): the
/// thread queues its node as any waiter does, with the primitive's broadcast word as its target,
/// and sleeps on that word instead of a parker of its own. The waker resolves every such node,
/// then moves the word once and notifies once (wake_batch::release_broadcast). The eventcount
/// order: the word's key is read before the node's state, so a resolution after the read moves
/// the word and sleep() returns at once.
template <wait_node Node, class... Args>
wait_yield_t<Node, false> block_wait_broadcast(broadcast_parking& word, Args&&... args) {
  pending_wait<Node, false> wait(asyncband::stop_token{}, std::forward<Args>(args)...);
  if (wait.try_complete() || spin_before_parking(wait)) return wait.finish();
  if (wait.publish(resume_target::broadcast(&word))) {
    word.sleep_until([&wait] { return wait.node().is_resolved(); },
                     [] { at_test_point(test_point::parking); });
  }
  return wait.finish();
}

}  // namespace asyncband::detail
