// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/waiter.hpp: the waiter core's node, its FIFO list, and the wake batch.
//
// Every waiting operation of every primitive is a `waiter` living in the awaiting frame (or on
// the blocked thread's stack). A primitive keeps its waiters in a `wait_list` guarded by the
// primitive's own mutex. The protocol, in full in docs/design.md:
//
//  * Claiming. Whoever removes a node from the list under the primitive's lock (a waker, a
//    cancellation, a close) is its one resolver, and writes its `status` there.
//  * Resolving. After releasing the lock, the resolver calls resolve(): one fetch_or of
//    `resolved` into the node's handshake. The waiting side ends its suspension with one
//    fetch_or of `suspended`. Whichever of the two comes second resumes the coroutine: the
//    resolver (through the coroutine's scheduler, or inline) or await_suspend (by returning
//    false). So the coroutine is resumed exactly once, and nothing touches the node after the
//    step that may hand it to another thread.
//  * Waking never happens under a lock: the waker collects claimed nodes into a wake_batch and
//    resolves them after unlocking.
#pragma once

#include <atomic>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>

#include "../result.hpp"
#include "../scheduler.hpp"
#include "atomic.hpp"
#include "broadcast_parking.hpp"

namespace asyncband::detail {

// ---------------------------------------------------------------------------------------------
// Test hooks. With ASYNCBAND_TESTING defined, the core calls a per-thread hook at the points
// where threads can interleave, so that the test scheduler can run another operation exactly
// there and reproduce a race deterministically. Without it they compile to nothing.
enum class test_point : unsigned char {
  published,           ///< A waiter is linked and visible to wakers; its stop callback is not yet set.
  before_arm,          ///< The stop callback is registered; the waiter is about to suspend.
  claimed_for_wake,    ///< A waker claimed nodes and released the lock; nothing is resolved yet.
  claimed_for_cancel,  ///< A cancellation unlinked a node and released the lock; not yet resolved.
  awaiting_resolver,   ///< A wait being destroyed found its node claimed; it waits for the resolver.
  woken,               ///< A waker made the change that lets waiters complete; it still holds the primitive.
  destroying,          ///< A primitive's destructor, before it waits out wakers still inside it.
  queueing,            ///< A wait's lock-free check found it not ready; its locked re-check comes next.
  awaiting_publication,  ///< A receive found its next place claimed, not yet written; it waits for it.
  claimed_position,      ///< A broadcast send claimed its position and has not written it yet.
  parking,    ///< A thread read its broadcast word's key and was not released yet; it sleeps on the key next.
  listing,    ///< An Asio operation's wait is published and pending; it lists itself with its context next.
  refused,    ///< An Asio operation's listing found its context shut down; it cancels its wait next.
  releasing,  ///< A waker resolved the threads on a broadcast word; it moves the word and notifies next.
  returning   ///< A call that woke nobody released the lock after its change; it returns next, touching
              ///< nothing.
};

#ifdef ASYNCBAND_TESTING
struct test_hook {
  void (*fn)(void* ctx, test_point) = nullptr;
  void* ctx = nullptr;
};
inline thread_local test_hook current_test_hook{};
inline void at_test_point(test_point p) {
  const test_hook hook = current_test_hook;
  if (hook.fn != nullptr) hook.fn(hook.ctx, p);
}
#else
inline void at_test_point(test_point) noexcept {}
#endif

// ---------------------------------------------------------------------------------------------
/// Blocks a plain thread until a resolver releases it; lives on the blocked thread's stack.
/// Trivial to create (one word), so a blocking wait that completes without queueing costs
/// nothing for it. unpark() stores, then wakes the futex by address: the parked thread may
/// return and reuse the stack between the two, which is harmless, because the wake-up by
/// address touches only the kernel's wait queue, never the parker's memory (libstdc++'s
/// std::latch relies on the same property).
class parker {
 public:
  void park() noexcept {
    if (released_.load(std::memory_order_acquire) != 0) return;
    before_blocking();
    while (released_.load(std::memory_order_acquire) == 0) released_.wait(0, std::memory_order_acquire);
  }
  void unpark() noexcept {
    released_.store(1, std::memory_order_seq_cst);  // pairs with notify's check for sleepers
    released_.notify_one();
  }
  static void unpark_thunk(void* self) noexcept { static_cast<parker*>(self)->unpark(); }

 private:
  asyncband::detail::atomic<std::uint32_t> released_{0};
};

#if defined(ASYNCBAND_MODEL)
/// A model build: time does not pass in an explored run, so a timed park is a park that the
/// deadline never ends (a timeout nobody else ends is a deadlock the explorer reports).
class timed_parker {
 public:
  void park() noexcept { parker_.park(); }
  template <class Clock, class Duration>
  bool park_until(const std::chrono::time_point<Clock, Duration>& /*deadline*/) noexcept {
    parker_.park();
    return true;
  }
  void unpark() noexcept { parker_.unpark(); }
  static void unpark_thunk(void* self) noexcept { static_cast<timed_parker*>(self)->unpark(); }

 private:
  parker parker_;
};
#else
/// A parker that can give up at a deadline (the standard has no timed atomic wait). unpark()
/// notifies under the parker's mutex, so the parked thread cannot destroy it before unpark()
/// has finished touching it; that costs the woken thread one extra hand-over of the mutex,
/// acceptable for the timeout forms.
class timed_parker {
 public:
  void park() {
    before_blocking();  // outside the lock: the hook may take a scheduler's lock and wake a thread
    std::unique_lock lock(mutex_);
    released_cv_.wait(lock, [this] { return released_; });
  }
  /// Returns false if the deadline passed first.
  template <class Clock, class Duration>
  bool park_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    before_blocking();
    std::unique_lock lock(mutex_);
    return released_cv_.wait_until(lock, deadline, [this] { return released_; });
  }
  void unpark() noexcept {
    const std::lock_guard lock(mutex_);
    released_ = true;
    released_cv_.notify_one();
  }
  static void unpark_thunk(void* self) noexcept { static_cast<timed_parker*>(self)->unpark(); }

 private:
  std::mutex mutex_;
  std::condition_variable released_cv_;
  bool released_ = false;
};
#endif

// ---------------------------------------------------------------------------------------------
/// Where a resolved waiter continues: a coroutine (posted to its scheduler, or resumed inline),
/// or a callback (a parked thread's unpark, a bridge's completion).
class resume_target {
 public:
  using callback = void (*)(void* context) noexcept;

  resume_target() noexcept = default;
  resume_target(std::coroutine_handle<> h, scheduler_ref sched) noexcept
      : handle_(h), sched_(sched), runs_inline_(sched.empty()) {}
  /// A callback that returns promptly (unparks a thread, posts a completion).
  resume_target(callback fn, void* context) noexcept : callback_(fn), context_(context) {}

  /// A callback that goes on with the waiter's work on the resolving thread (a condvar wait's
  /// next stage), and so may wake others from inside a resolution.
  static resume_target continuation(callback fn, void* context) noexcept {
    resume_target t(fn, context);
    t.runs_inline_ = true;
    return t;
  }

  /// A plain thread that sleeps on its primitive's broadcast word (broadcast_parking) rather
  /// than on a parker of its own: resolving it does nothing by itself; the waker moves the word
  /// once for every such waiter it resolved and wakes them all with one notify
  /// (wake_batch::release_broadcast).
  static resume_target broadcast(broadcast_parking* word) noexcept {
    resume_target t;
    t.context_ = word;
    t.broadcast_ = true;
    return t;
  }

  /// Whether running it runs the waiter's code on the resolving thread (an inline coroutine, a
  /// continuation): only those can nest resolutions one inside another.
  [[nodiscard]] bool runs_inline() const noexcept { return runs_inline_; }

  /// The broadcast word the waiter sleeps on (resume_target::broadcast), or nullptr.
  [[nodiscard]] broadcast_parking* broadcast_word() const noexcept {
    return broadcast_ ? static_cast<broadcast_parking*>(context_) : nullptr;
  }

  void run() const noexcept {
    if (callback_ != nullptr) {
      callback_(context_);
    } else if (!broadcast_) {
      sched_.resume(handle_);
    }
  }

 private:
  std::coroutine_handle<> handle_{};
  scheduler_ref sched_{};
  callback callback_ = nullptr;
  void* context_ = nullptr;
  bool runs_inline_ = false;
  bool broadcast_ = false;
};

// ---------------------------------------------------------------------------------------------
class waiter;

/// The commit point of a when_any: one atomic word that the first of its branches to commit
/// takes. A waker about to hand a grant to a branch's node commits it first, under the
/// primitive's lock (waiter::commit()); a branch whose when_any another branch has won is never
/// granted anything: its waker drops it as cancelled and serves the next waiter. Completions
/// that grant nothing (a broadcast, a closed channel, a value that stays in the channel until
/// taken) commit when they are resolved, and only the winner takes.
class commit_point {
 public:
  commit_point() noexcept = default;
  commit_point(const commit_point&) = delete;
  commit_point& operator=(const commit_point&) = delete;

  /// For an owner whose contenders never commit concurrently (an Asio operation without a
  /// cancellation slot): the first still decides, without a read-modify-write. Before anything
  /// can commit.
  void set_uncontended() noexcept { uncontended_ = true; }

  /// True if `who` has won (now, or before): the first call decides for good.
  bool try_commit(const void* who) noexcept {
    if (uncontended_) {
      const void* const first = winner_.load(std::memory_order_acquire);
      if (first != nullptr) return first == who;
      winner_.store(who, std::memory_order_release);
      return true;
    }
    const void* expected = nullptr;
    return winner_.compare_exchange_strong(expected, who, std::memory_order_acq_rel,
                                           std::memory_order_acquire) ||
           expected == who;
  }
  /// Whether someone other than `who` has won.
  [[nodiscard]] bool lost(const void* who) const noexcept {
    const void* const w = winner_.load(std::memory_order_acquire);
    return w != nullptr && w != who;
  }
  [[nodiscard]] const void* winner() const noexcept { return winner_.load(std::memory_order_acquire); }

 private:
  asyncband::detail::atomic<const void*> winner_{nullptr};
  bool uncontended_ = false;
};

// ---------------------------------------------------------------------------------------------
/// The intrusive node of one waiting operation. Primitives derive from it to add what a waiter
/// carries (a requested count, a generation, a value).
class waiter {
 public:
  /// Leaves the links and the target unset: a wait that completes without queueing never reads
  /// them, and every store before an atomic read-modify-write costs it time (the locked
  /// instruction first drains the store buffer). prepare() sets them when the wait publishes.
  /// `linked` alone is set here: a cancellation may come before publication (a bridge's
  /// cancellation slot, a service shutdown) and must find the node unlinked.
  // User-provided, so that value-initializing a node (Node()) does not zero it either.
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init,hicpp-member-init,modernize-use-equals-default)
  waiter() noexcept {}
  waiter(const waiter&) = delete;
  waiter& operator=(const waiter&) = delete;
  ~waiter() = default;

  // Guarded by the owning primitive's lock while linked; read by the waiter after resumption.
  // next and prev are meaningful only after prepare().
  waiter* next;
  waiter* prev;
  bool linked = false;
  wait_status status = wait_status::ok;

  /// Before publication: where the waiter continues once resolved, and not linked yet; `commit`
  /// is the when_any the wait is a branch of (nullptr for a plain wait).
  void prepare(resume_target t, commit_point* commit = nullptr) noexcept {
    target_ = t;
    commit_ = commit;
    next = prev = nullptr;
    linked = false;
  }

  /// A waker, under the primitive's lock, before it grants this (linked) node anything: true if
  /// the node may take it (a plain wait, or the branch that wins its when_any); false if
  /// another branch of its when_any has won: the waker then claims it as cancelled instead, and
  /// passes the grant on.
  [[nodiscard]] bool commit() noexcept { return commit_ == nullptr || commit_->try_commit(this); }
  /// Under the primitive's lock: another branch of this (linked) node's when_any has won, so
  /// nothing may be granted to it, not even part of a grant.
  [[nodiscard]] bool lost() const noexcept { return commit_ != nullptr && commit_->lost(this); }
  [[nodiscard]] bool resumes_inline() const noexcept { return target_.runs_inline(); }
  /// The broadcast word the waiter's thread sleeps on, or nullptr (resume_target::broadcast).
  [[nodiscard]] broadcast_parking* broadcast_word() const noexcept { return target_.broadcast_word(); }

  /// The waiting side, once setup is done: returns true if the waiter must stay suspended
  /// (a resolver will resume it), false if it was already resolved (continue now).
  [[nodiscard]] bool arm() noexcept {
    return (handshake_.fetch_or(suspended, std::memory_order_acq_rel) & resolved) == 0;
  }

  /// The resolver, after releasing the primitive's lock. Resumes the waiter if it has armed;
  /// otherwise the waiter sees `resolved` when it arms and continues by itself. The node may
  /// be gone once this returns; callers must have read anything they need from it before.
  void resolve() noexcept {
    const resume_target target = target_;  // the node may die right after the fetch_or
    const auto prev_state = handshake_.fetch_or(resolved, std::memory_order_acq_rel);
    if ((prev_state & (suspended | abandoned)) == suspended) target.run();
  }

  /// The waiting side takes back a node it was resolved with, to publish it again (a lock's
  /// retry that lost the lock goes back to the front of the queue): forgets the resolution.
  /// Only while nobody else can reach the node: unlinked, and its resolver past resolve()'s
  /// fetch_or (after which a resolver touches nothing of the node).
  void forget_resolution() noexcept { handshake_.store(0, std::memory_order_relaxed); }

  /// Whether the node was ever armed or resolved, that is published and suspended once: its
  /// handshake never goes back, so publishing it again (an awaiter co_awaited a second time)
  /// would queue a node whose wait is over, which nobody unlinks. One relaxed load: only the
  /// owner of the awaiter asks, on its own thread.
  [[nodiscard]] bool was_published() const noexcept {
    return handshake_.load(std::memory_order_relaxed) != 0;
  }

  /// Whether a waker claimed the node (since it was last queued). Read without the primitive's
  /// lock by a cancellation (detail::cancel_and_resolve): a claimed node is its waker's to
  /// resolve, and the primitive may already be gone, destroyed by a waiter resolved earlier in
  /// the same batch, which may also be the one requesting this stop.
  [[nodiscard]] bool is_claimed() const noexcept { return claimed_.load(std::memory_order_acquire); }
  /// Under the primitive's lock: when queued (false) and when claimed into a wake batch (true).
  void set_claimed(bool claimed) noexcept { claimed_.store(claimed, std::memory_order_release); }

  [[nodiscard]] bool is_resolved() const noexcept {
    return (handshake_.load(std::memory_order_acquire) & resolved) != 0;
  }
  [[nodiscard]] bool is_suspended_unresolved() const noexcept {
    return (handshake_.load(std::memory_order_acquire) & (suspended | resolved)) == suspended;
  }

  /// The awaiting frame is being destroyed while suspended. Returns false if a resolver had
  /// already handed the coroutine on (its resumption is in flight: destroying it is undefined).
  /// After this, a resolver that claims the node will not resume it.
  [[nodiscard]] bool abandon() noexcept {
    return (handshake_.fetch_or(abandoned, std::memory_order_acq_rel) & resolved) == 0;
  }

  /// After abandon(): a resolver that already claimed the node is between its unlock and its
  /// resolve(); wait out those few instructions so the node outlives them.
  void await_resolver() const noexcept {
    while (!is_resolved()) yield_thread();
  }

 private:
  static constexpr std::uint8_t suspended = 1;
  static constexpr std::uint8_t resolved = 2;
  static constexpr std::uint8_t abandoned = 4;

  union {
    resume_target target_;  // set by prepare(); a union member, so that nothing initializes it before
  };
  commit_point* commit_;  // set by prepare()
  asyncband::detail::atomic<std::uint8_t> handshake_{0};
  asyncband::detail::atomic<bool> claimed_{false};
};

// ---------------------------------------------------------------------------------------------
/// Waiters claimed under a lock, resolved after it is released. Singly linked through `next`.
class wake_batch {
  friend class wake_collector;

 public:
  wake_batch() noexcept = default;
  wake_batch(const wake_batch&) = delete;
  wake_batch& operator=(const wake_batch&) = delete;
  ~wake_batch() { assert(head_ == nullptr && "wake_batch destroyed with unresolved waiters"); }

  /// Under the lock: the node is already unlinked and its status written.
  void add(waiter& w) noexcept {
    if (broadcast_parking* word = w.broadcast_word()) {
      assert((broadcast_ == nullptr || broadcast_ == word) && "wake_batch: waiters of two broadcast words");
      broadcast_ = word;
    }
    w.set_claimed(true);
    w.next = nullptr;
    if (tail_ == nullptr) {
      head_ = &w;
    } else {
      tail_->next = &w;
    }
    tail_ = &w;
  }

  [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }

  /// Under the lock, after the change: threads sleep on `word` without a node (a barrier's or a
  /// phaser's wait_blocking) and are released by it. Precondition: the caller pinned the queue
  /// before its change, since those threads read the changed state without the lock and may
  /// destroy the primitive as soon as they see it; the driver of the step unpins once it has
  /// notified (owner_pinned()). The word moves here, under the lock (a locked instruction right
  /// after the unlock's store would wait for it to drain); release_broadcast() notifies.
  void release_word(broadcast_parking& word) noexcept {
    assert((broadcast_ == nullptr || broadcast_ == &word) && "wake_batch: two broadcast words");
    word.changed();
    broadcast_ = &word;
    owner_pinned_ = true;
  }
  /// release_word() was called: the step's owner pinned the queue already.
  [[nodiscard]] bool owner_pinned() const noexcept { return owner_pinned_; }

  /// Some member sleeps on a broadcast word, or release_word() was called: release_broadcast()
  /// must come first, while the primitive is kept alive.
  [[nodiscard]] bool has_broadcast() const noexcept { return broadcast_ != nullptr; }

  /// After the lock is released, while the primitive is kept alive (pinned, or held by a
  /// reference): resolves the members that sleep on the broadcast word, then moves the word
  /// once and wakes them all with one notify, and takes them out of the batch. One system call
  /// at most for a whole generation of blocked threads, and they wake together instead of one
  /// after another while the waker is preempted by each. A thread may return as soon as it sees
  /// its node resolved, before the notify: hence the caller's pin, which the primitive's
  /// destruction waits for. The other members stay for resolve_all().
  void release_broadcast() noexcept {
    if (broadcast_ != nullptr) release_broadcast_now();
  }

  /// After the lock is released: resolves every node in FIFO order. While it runs, the batch
  /// is registered as this thread's, so that a coroutine it resumes inline may destroy the frame
  /// of a later member (see withdraw()).
  /// The test is inline and the work out of line: most wake-ups (an uncontended unlock, a
  /// barrier generation that nobody waits for) claim nobody, and a call costs them more than
  /// the test.
  void resolve_all() noexcept {
    assert(broadcast_ == nullptr &&
           "wake_batch: release_broadcast() first, while the primitive is kept alive");
    release_broadcast();  // (a release build's fallback: its threads must not sleep for good)
    if (head_ != nullptr) resolve_members();
  }

  /// While alive, wake-ups made on this thread from inside the resolution of a batch are not
  /// resolved on the spot but appended to that batch, whose loop resolves them next. For
  /// continuations that run in a resolver and wake others again (a condvar wait_while going back
  /// to wait): a chain of them then runs as a loop, not as ever deeper recursion.
  class defer_nested {
   public:
    defer_nested() noexcept : previous_(std::exchange(deferring_here(), true)) {}
    defer_nested(const defer_nested&) = delete;
    defer_nested& operator=(const defer_nested&) = delete;
    ~defer_nested() { deferring_here() = previous_; }

   private:
    bool previous_;
  };

  /// For a wait being destroyed whose node a waker claimed: if that waker is this very thread,
  /// further down the stack (a coroutine it resumed inline is destroying another member of the
  /// same batch), waiting for it would never end. Takes `w` out of this thread's batches
  /// instead and returns true: it will not be resolved. False if no batch of this thread has it.
  static bool withdraw(waiter& w) noexcept {
    for (wake_batch* b = resolving_here(); b != nullptr; b = b->outer_) {
      if (b->unlink(w)) return true;
    }
    return false;
  }

 private:
  /// resolve_all()'s work, for a batch with members.
  [[gnu::noinline]] void resolve_members() noexcept {
    at_test_point(test_point::claimed_for_wake);
    if (wake_batch* outer = resolving_here();
        outer != nullptr && (deferring_here() || nesting_here() >= max_nesting)) {
      outer->adopt_inline_members(*this);  // the outer loop resolves them once the current node returns
      if (head_ == nullptr) return;        // the rest (unparks, posts) are resolved here
    }
    // Continuations resolved from here run with deferral off: only the code that asked for it
    // (between defer_nested's construction and destruction, in this very frame) defers.
    const bool deferring = std::exchange(deferring_here(), false);
    ++nesting_here();
    outer_ = std::exchange(resolving_here(), this);
    while (head_ != nullptr) {
      waiter* const w = head_;
      head_ = w->next;  // advance before resolve(): the node may be gone after it
      if (head_ == nullptr) tail_ = nullptr;
      w->resolve();
    }
    resolving_here() = outer_;
    --nesting_here();
    deferring_here() = deferring;
  }

  /// release_broadcast()'s work, out of line: the test is what every other wake-up pays.
  [[gnu::noinline]] void release_broadcast_now() noexcept {
    broadcast_parking* const word = std::exchange(broadcast_, nullptr);
    bool resolved = false;
    waiter* kept_tail = nullptr;
    for (waiter* w = head_; w != nullptr;) {
      waiter* const next = w->next;  // before resolve(): the node may be gone after it
      if (w->broadcast_word() == word) {
        (kept_tail == nullptr ? head_ : kept_tail->next) = next;
        w->resolve();
        resolved = true;
      } else {
        kept_tail = w;
      }
      w = next;
    }
    tail_ = kept_tail;
    at_test_point(test_point::releasing);
    if (resolved) word->changed();  // after the resolutions the sleepers check
    word->notify();
  }

  static wake_batch*& resolving_here() noexcept {
    thread_local wake_batch* batch = nullptr;
    return batch;
  }

  /// Batches being resolved on this thread, one inside another (a coroutine resumed inline
  /// wakes others, which wake others...). Past max_nesting, a batch is appended to the
  /// innermost one being resolved instead: an inline hand-off chain (every unlock resuming the
  /// next lock holder inline) then runs as a loop, and its depth no longer grows with the number
  /// of waiters (cppcoro's and libcoro's stack overflows).
  static constexpr unsigned max_nesting = 16;
  static unsigned& nesting_here() noexcept {
    thread_local unsigned depth = 0;
    return depth;
  }

  static bool& deferring_here() noexcept {
    thread_local bool deferring = false;
    return deferring;
  }

  /// Moves the members of `inner` that would run waiter code on this thread (inline coroutines,
  /// continuations) to the back of this batch. The others stay in `inner`: resolving them only
  /// unparks a thread or posts to a scheduler, which does not nest, and deferring them would
  /// make a parked thread (maybe this one, in a timeout) wait for this thread's outer loop.
  void adopt_inline_members(wake_batch& inner) noexcept {
    waiter* kept_head = nullptr;
    waiter* kept_tail = nullptr;
    for (waiter* w = inner.head_; w != nullptr;) {
      waiter* const next = w->next;
      if (w->resumes_inline()) {
        add(*w);
      } else {
        w->next = nullptr;
        (kept_tail == nullptr ? kept_head : kept_tail->next) = w;
        kept_tail = w;
      }
      w = next;
    }
    inner.head_ = kept_head;
    inner.tail_ = kept_tail;
  }

  bool unlink(waiter& w) noexcept {
    waiter* prev = nullptr;
    for (waiter* n = head_; n != nullptr; prev = n, n = n->next) {
      if (n != &w) continue;
      (prev == nullptr ? head_ : prev->next) = n->next;
      if (tail_ == n) tail_ = prev;
      return true;
    }
    return false;
  }

  waiter* head_ = nullptr;
  waiter* tail_ = nullptr;
  wake_batch* outer_ = nullptr;             // the batch this thread was resolving when this one started
  broadcast_parking* broadcast_ = nullptr;  // the word some members sleep on, until released
  bool owner_pinned_ = false;               // release_word() was called
};

/// For a caller that must be done with its own state before any waiter code runs on this
/// thread (a when_any's sweep, which holds a unit of its coroutine while it cancels the losing
/// branches, whose cancellations may serve other waiters): while it collects, the members of
/// batches resolved on this thread that would run waiter code here (inline coroutines,
/// continuations) are appended to its own batch instead; resolve() runs them afterwards.
/// After stop_collecting() the batch stays registered as one this thread is resolving, so that
/// a frame destroyed meanwhile (by code the caller resumes) can withdraw a node from it.
class wake_collector {
 public:
  wake_collector() noexcept : previous_deferring_(std::exchange(wake_batch::deferring_here(), true)) {
    batch_.outer_ = std::exchange(wake_batch::resolving_here(), &batch_);
  }
  wake_collector(const wake_collector&) = delete;
  wake_collector& operator=(const wake_collector&) = delete;
  ~wake_collector() { resolve(); }

  /// Wake-ups on this thread run on the spot again.
  void stop_collecting() noexcept { wake_batch::deferring_here() = previous_deferring_; }
  /// Resolves what was collected (once).
  void resolve() noexcept {
    if (resolved_) return;
    resolved_ = true;
    stop_collecting();
    wake_batch::resolving_here() = batch_.outer_;
    batch_.resolve_all();
  }
  /// As resolve(), but what was collected runs here even deep in nested resolutions (past
  /// max_nesting), never handed to an enclosing batch: for a caller whose state the collected
  /// waiters still use and which is gone once it returns (an execution context's shutdown).
  void resolve_here() noexcept {
    if (resolved_) return;
    resolved_ = true;
    stop_collecting();
    wake_batch::resolving_here() = batch_.outer_;
    const bool deferring = std::exchange(wake_batch::deferring_here(), false);
    const unsigned depth = std::exchange(wake_batch::nesting_here(), 0U);
    batch_.resolve_all();
    wake_batch::nesting_here() = depth;
    wake_batch::deferring_here() = deferring;
  }

 private:
  wake_batch batch_;
  bool previous_deferring_;
  bool resolved_ = false;
};

// ---------------------------------------------------------------------------------------------
/// The FIFO of waiters of one primitive. Not synchronized: the primitive's lock guards it.
class wait_list {
 public:
  wait_list() noexcept = default;
  wait_list(const wait_list&) = delete;
  wait_list& operator=(const wait_list&) = delete;

  [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }
  [[nodiscard]] waiter* front() const noexcept { return head_; }

  void push_back(waiter& w) noexcept {
    assert(!w.linked);
    w.set_claimed(false);
    w.next = nullptr;
    w.prev = tail_;
    if (tail_ == nullptr) {
      head_ = &w;
    } else {
      tail_->next = &w;
    }
    tail_ = &w;
    w.linked = true;
  }

  /// Links `w` first: a waiter that was at the head and goes back there (a lock's retry).
  void push_front(waiter& w) noexcept {
    assert(!w.linked);
    w.set_claimed(false);
    w.prev = nullptr;
    w.next = head_;
    if (head_ == nullptr) {
      tail_ = &w;
    } else {
      head_->prev = &w;
    }
    head_ = &w;
    w.linked = true;
  }

  void remove(waiter& w) noexcept {
    assert(w.linked);
    (w.prev == nullptr ? head_ : w.prev->next) = w.next;
    (w.next == nullptr ? tail_ : w.next->prev) = w.prev;
    w.next = w.prev = nullptr;
    w.linked = false;
  }

  /// The cancellation path of most primitives: if `w` is still queued, unlink it with outcome
  /// `why` and return true (the caller then resolves it after unlocking); false if a waker
  /// claimed it first.
  bool unlink_if_linked(waiter& w, wait_status why) noexcept {
    if (!w.linked) return false;
    remove(w);
    w.status = why;
    return true;
  }

  /// Unlinks the head, records its outcome and adds it to the batch.
  void claim_front(wake_batch& batch, wait_status status = wait_status::ok) noexcept {
    waiter& w = *head_;
    remove(w);
    w.status = status;
    batch.add(w);
  }

  /// For a waker about to grant something to the head: commits the head (waiter::commit()) and
  /// returns it, after claiming as cancelled every head that lost its when_any (it must not be
  /// granted anything; its when_any is cancelling it). nullptr if nobody is left.
  waiter* committed_front(wake_batch& batch) noexcept {
    while (head_ != nullptr && !head_->commit()) claim_front(batch, wait_status::cancelled);
    return head_;
  }

  /// Unlinks every waiter into the batch, in FIFO order.
  void claim_all(wake_batch& batch, wait_status status = wait_status::ok) noexcept {
    while (!empty()) claim_front(batch, status);
  }

 private:
  waiter* head_ = nullptr;
  waiter* tail_ = nullptr;
};

}  // namespace asyncband::detail
