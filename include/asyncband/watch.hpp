// SPDX-License-Identifier: Apache-2.0
// asyncband/watch.hpp: one latest value with a version, from one sender to many receivers
// (tokio's watch, in this library's conventions).
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <atomic>
#include <cassert>
#include <chrono>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "detail/atomic.hpp"
#include "detail/broadcast_parking.hpp"
#include "detail/debug_access.hpp"
#include "detail/wait_functions.hpp"
#include "detail/wait_queue.hpp"
#include "result.hpp"
#include "stop_token.hpp"

/// One latest value with a version, from one sender to many receivers: channel().
namespace asyncband::watch {

template <class T>
class sender;
template <class T>
class receiver;
template <class T>
class borrowed;

namespace detail {

namespace core = asyncband::detail;

/// One published value and its reference count: the channel holds one reference while the value
/// is current, every borrowed<T> one more. Whoever drops the last reference destroys the value,
/// so a guard can outlive the version it shows, the channel, even every handle. A cell whose
/// value is destroyed may be reused by the sender for a later value (its spare).
template <class T>
class value_cell {
 public:
  value_cell() noexcept = default;
  value_cell(const value_cell&) = delete;
  value_cell& operator=(const value_cell&) = delete;
  ~value_cell() = default;

  /// Constructs the value; the caller holds the one reference.
  template <class... Args>
  void construct(Args&&... args) {
    ::new (static_cast<void*>(storage_)) T(std::forward<Args>(args)...);
    refs_.store(1, std::memory_order_relaxed);
  }
  [[nodiscard]] T& value() noexcept { return *std::launder(reinterpret_cast<T*>(storage_)); }
  void destroy_value() noexcept { value().~T(); }

  /// Another reference, from one who already holds one (or holds the lock under which the
  /// channel's reference cannot go).
  void acquire() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  /// Drops a reference; true if it was the last: the caller then owns the cell, value included.
  [[nodiscard]] bool release() noexcept { return refs_.fetch_sub(1, std::memory_order_acq_rel) == 1; }
  /// Whether the caller's reference is the only one (no guard can take one any more: the cell
  /// is no longer current).
  [[nodiscard]] bool unique() const noexcept { return refs_.load(std::memory_order_acquire) == 1; }

  /// A guard's last reference: nothing of the channel is touched (it may be gone).
  static void release_and_free(value_cell* cell) noexcept {
    if (cell->release()) {
      cell->destroy_value();
      delete cell;
    }
  }

 private:
  asyncband::detail::atomic<std::size_t> refs_{0};
  alignas(T) unsigned char storage_[sizeof(T)];
};

/// The one shared state of a channel: the current value, the version word, the receivers' wait
/// queue and the sender's, and the words plain threads park on. Reference-counted by the handles
/// (the sender and every receiver); each handle releases its reference as the very last thing it
/// does with the state.
template <class T>
class state {
 public:
  /// The version word: the version in the upper bits (steps of 2), the sender's departure in bit 0.
  static constexpr std::uint64_t closed_bit = 1;
  static constexpr std::uint64_t one_version = 2;

  template <class... Args>
  explicit state(std::in_place_t /*unused*/, Args&&... args) {
    cells_.current = make_cell(std::forward<Args>(args)...);
  }
  state(const state&) = delete;
  state& operator=(const state&) = delete;
  ~state() = default;  // cells_ frees the values, once queue_ has waited out a pinned send

  // ---- Versions and receivers ----------------------------------------------------------------

  [[nodiscard]] std::uint64_t version_word(
      std::memory_order order = std::memory_order_acquire) const noexcept {
    return version_.load(order);
  }
  [[nodiscard]] static std::uint64_t version_of(std::uint64_t word) noexcept { return word & ~closed_bit; }
  [[nodiscard]] static bool is_closed(std::uint64_t word) noexcept { return (word & closed_bit) != 0; }

  [[nodiscard]] std::size_t receiver_count() const noexcept {
    return receivers_.load(std::memory_order_acquire);
  }

  /// A new receiver handle (a copy, or the sender's subscribe()).
  void add_receiver() noexcept {
    receivers_.fetch_add(1, std::memory_order_relaxed);
    handles_.fetch_add(1, std::memory_order_relaxed);
  }

  /// A receiver handle goes (its last access): the last one completes the sender's closed() waits,
  /// parked or queued. The handle's reference keeps the state alive through the wake-ups.
  void receiver_leaves() noexcept {
    if (receivers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      sender_parking_.changed();  // after the count: a sender that sees the new key sees 0
      sender_parking_.notify();
      closed_waiters_.wake_all();
    }
    release();
  }

  /// The sender goes (its last access): ends every pending change wait closed, parked or queued.
  /// The sender's reference keeps the state alive through the wake-ups.
  void sender_leaves() noexcept {
    queue_.wake([this](core::wait_list& waiters, core::wake_batch& batch) {
      version_.store(version_.load(std::memory_order_relaxed) | closed_bit, std::memory_order_release);
      waiters.claim_all(batch, wait_status::closed);
      receivers_parking_.changed();
    });
    receivers_parking_.notify();
    release();
  }

  // ---- Plain threads' waits without a node (no stop token, no timeout) -------------------------

  /// A receiver's changed_blocking(): sleeps on the receivers' parking word until a version newer
  /// than `seen` exists (marks it seen: ok) or the sender is gone with nothing newer (closed).
  /// The key is read before the version word: a send after that read has moved the key, so the
  /// sleep returns at once; a send before it is seen by the check (the key's acquire pairs with
  /// the release of the send's bump, made after its version store). No change is missed.
  [[nodiscard]] result<void> park_until_changed(std::uint64_t& seen) const noexcept {
    result<void> outcome = wait_status::closed;
    receivers_parking_.sleep_until(
        [this, &seen, &outcome] {
          const std::uint64_t word = version_word();
          if (version_of(word) == seen) return is_closed(word);
          seen = version_of(word);
          outcome = {};
          return true;
        },
        [] { core::at_test_point(core::test_point::parking); });
    return outcome;
  }

  /// The sender's closed_blocking(): sleeps on its parking word until no receiver is left.
  void park_until_no_receivers() const noexcept {
    sender_parking_.sleep_until([this] { return receiver_count() == 0; },
                                [] { core::at_test_point(core::test_point::parking); });
  }

  // ---- Reading ---------------------------------------------------------------------------------

  /// The current value with a reference taken, and the version word it belongs to, as one
  /// consistent pair: both change only under the lock.
  struct snapshot {
    value_cell<T>* cell;
    std::uint64_t word;
  };
  [[nodiscard]] snapshot borrow() noexcept {
    const std::lock_guard lock(queue_.mutex());
    cells_.current->acquire();
    return {cells_.current, version_.load(std::memory_order_relaxed)};
  }

  /// The sender only (the one writer of the current cell, so no lock is needed to read it).
  [[nodiscard]] const T& current_value_for_sender() noexcept { return cells_.current->value(); }

  // ---- Writing (the sender only: its mutating calls are not concurrent) --------------------

  /// A cell holding a new value: the spare if there is one, else a new allocation. If
  /// constructing the value throws, nothing changed.
  template <class... Args>
  [[nodiscard]] value_cell<T>* make_cell(Args&&... args) {
    value_cell<T>* cell = cells_.spare != nullptr ? std::exchange(cells_.spare, nullptr) : new value_cell<T>;
    try {
      cell->construct(std::forward<Args>(args)...);
    } catch (...) {
      recycle(cell);
      throw;
    }
    return cell;
  }

  /// A cell made by make_cell() and never published: destroys its value, keeps the cell.
  void discard(value_cell<T>* cell) noexcept {
    cell->destroy_value();
    recycle(cell);
  }

  /// Makes `cell` current, bumps the version and wakes every waiting receiver. Under the lock:
  /// the swap, the version, the claim of the queued waits, the bump of the parking word. After
  /// unlocking, while the state is pinned: one notify for every parked thread, then the old
  /// value's channel reference is dropped (its destructor, user code, runs here if no guard holds
  /// it). A parked thread, or one that sees the version lock-free, may destroy every handle at
  /// once (last one out): the pin keeps the state until the unpin. Then the batch is resolved:
  /// nothing of the state, or of the sender, is touched after that (a receiver resumed inline may
  /// destroy both).
  void publish(value_cell<T>* cell) noexcept {
    publish_then(cell, [this](value_cell<T>* old) noexcept {
      if (old->release()) discard(old);
    });
  }

  /// As publish(), but keeps the channel's reference to the old cell and returns it (the
  /// caller takes the value out of it, then releases it with value_cell::release_and_free).
  [[nodiscard]] value_cell<T>* publish_keeping_old(value_cell<T>* cell) noexcept {
    value_cell<T>* kept = nullptr;
    publish_then(cell, [&kept](value_cell<T>* old) noexcept { kept = old; });
    return kept;
  }

  core::wait_queue& queue() noexcept { return queue_; }
  core::wait_queue& closed_waiters() noexcept { return closed_waiters_; }

 private:
  void recycle(value_cell<T>* cell) noexcept {
    if (cells_.spare == nullptr) {
      cells_.spare = cell;
    } else {
      delete cell;
    }
  }

  /// The protocol of publish(): `retire(old)` runs after unlocking, before resolving, pinned.
  template <class Retire>
  void publish_then(value_cell<T>* cell, Retire retire) noexcept {
    core::wake_batch batch;
    queue_.pin();
    value_cell<T>* old = nullptr;
    {
      const std::lock_guard lock(queue_.mutex());
      old = std::exchange(cells_.current, cell);
      version_.store(version_.load(std::memory_order_relaxed) + one_version, std::memory_order_release);
      queue_.waiters().claim_all(batch);
      receivers_parking_.changed();
    }
    core::at_test_point(core::test_point::woken);
    receivers_parking_.notify();  // one system call at most, however many threads are parked
    retire(old);
    queue_.unpin();  // the last access to the state: a receiver resumed below may destroy it
    batch.resolve_all();
  }

  void release() noexcept {
    if (handles_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  /// The cells the channel owns: the current value's and the sender's spare. Freed by this
  /// member's destructor, which runs after queue_'s (declared before it): the last handle may go
  /// while a send, still pinned, drops the old value into the spare (last one out), and queue_'s
  /// destructor waits for that send to unpin.
  struct owned_cells {
    value_cell<T>* spare = nullptr;    // the sender's only
    value_cell<T>* current = nullptr;  // guarded by queue_.mutex(); written by the sender only
    owned_cells() = default;
    owned_cells(const owned_cells&) = delete;
    owned_cells& operator=(const owned_cells&) = delete;
    ~owned_cells() {
      if (current != nullptr) value_cell<T>::release_and_free(current);
      delete spare;
    }
  };

  owned_cells cells_;                                    // declared first: make_cell reads the spare
  asyncband::detail::atomic<std::uint64_t> version_{0};  // written under queue_.mutex(), read lock-free
  asyncband::detail::atomic<std::size_t> receivers_{1};  // receiver handles
  asyncband::detail::atomic<std::size_t> handles_{2};    // receivers + the sender
  // The parking words: before queue_, whose destructor waits for pinned wakers (a send notifies
  // the receivers' word before it unpins).
  core::broadcast_parking receivers_parking_;  // receivers' untimed, uncancellable waits
  core::broadcast_parking sender_parking_;     // the sender's closed_blocking()
  core::wait_queue queue_;                     // receivers' changed() and wait_for() waits
  core::wait_queue closed_waiters_;            // the sender's closed() waits
};

/// A receiver's wait for a version it has not seen: ok (marking it seen), or closed when the
/// sender is gone and nothing newer is unseen.
template <class T>
class changed_wait : public core::waiter {
 public:
  using value_type = void;
  static constexpr bool transferable = false;  // a change is not consumed: nothing to pass on
  static constexpr bool fallible = true;

  changed_wait(state<T>* s, std::uint64_t* seen) noexcept : state_(s), seen_(seen) {}

  bool try_ready() noexcept { return ready(state_->version_word()); }
  bool enqueue() noexcept {
    return state_->queue().complete_or_enqueue(
        *this, [this] { return ready(state_->version_word(std::memory_order_relaxed)); });
  }
  bool cancel(wait_status why) noexcept { return state_->queue().cancel(*this, why); }
  /// Marks the latest version seen (a later one may have come since the wake: it is coalesced).
  void take() noexcept { *seen_ = state<T>::version_of(state_->version_word()); }

 private:
  bool ready(std::uint64_t word) noexcept {
    if (state<T>::version_of(word) != *seen_) return true;
    if (!state<T>::is_closed(word)) return false;
    status = wait_status::closed;
    return true;
  }

  state<T>* state_;
  std::uint64_t* seen_;
};

/// The sender's wait for every receiver to be gone.
template <class T>
class closed_wait : public core::waiter {
 public:
  using value_type = void;
  static constexpr bool transferable = false;

  explicit closed_wait(state<T>* s) noexcept : state_(s) {}

  bool try_ready() noexcept { return state_->receiver_count() == 0; }
  bool enqueue() noexcept {
    return state_->closed_waiters().complete_or_enqueue(*this,
                                                        [this] { return state_->receiver_count() == 0; });
  }
  bool cancel(wait_status why) noexcept { return state_->closed_waiters().cancel(*this, why); }
  void take() noexcept {}

 private:
  state<T>* state_;
};

template <class T, class Predicate, bool Cancellable>
class wait_for_awaiter;

}  // namespace detail

// ---------------------------------------------------------------------------------------------
/// A read guard on one version of a watch channel's value: no copy of the value, and NO LOCK.
/// It holds a reference to the version it shows; the sender never waits for it (a send publishes
/// a new version beside it), and the value it shows never changes while it lives. The last
/// guard on a version that is no longer current destroys that value, on the guard's thread.
/// Copying a guard takes another reference (one atomic increment); a guard may outlive the
/// channel. A moved-from guard is empty (dereferencing it is undefined; asserted).
template <class T>
class [[nodiscard]] borrowed {
 public:
  /// Another guard on the same version (one atomic increment).
  borrowed(const borrowed& other) noexcept : cell_(other.cell_), changed_(other.changed_) {
    if (cell_ != nullptr) cell_->acquire();
  }
  /// Takes over `other`'s version; `other` is left empty.
  borrowed(borrowed&& other) noexcept
      : cell_(std::exchange(other.cell_, nullptr)), changed_(other.changed_) {}
  /// Shows `other`'s version instead (its own reference goes).
  borrowed& operator=(const borrowed& other) noexcept {
    borrowed copy(other);
    swap(copy);
    return *this;
  }
  /// Takes over `other`'s version (its own reference goes); `other` is left empty.
  borrowed& operator=(borrowed&& other) noexcept {
    borrowed taken(std::move(other));
    swap(taken);
    return *this;
  }
  ~borrowed() {
    if (cell_ != nullptr) detail::value_cell<T>::release_and_free(cell_);
  }

  /// The borrowed value.
  [[nodiscard]] const T& operator*() const noexcept { return get(); }
  /// The borrowed value's members.
  [[nodiscard]] const T* operator->() const noexcept { return &get(); }
  /// The borrowed value.
  [[nodiscard]] const T& get() const noexcept {
    assert(cell_ != nullptr && "asyncband::watch::borrowed: empty (moved from)");
    return cell_->value();
  }
  /// Whether this version was new to the receiver that borrowed it (not yet seen when borrowed);
  /// always false for a sender's borrow.
  [[nodiscard]] bool has_changed() const noexcept { return changed_; }

  /// Exchanges two guards.
  void swap(borrowed& other) noexcept {
    std::swap(cell_, other.cell_);
    std::swap(changed_, other.changed_);
  }

 private:
  friend class sender<T>;
  friend class receiver<T>;
  template <class, class, bool>
  friend class detail::wait_for_awaiter;
  friend struct asyncband::detail::debug_access;
  borrowed(detail::value_cell<T>* cell, bool changed) noexcept : cell_(cell), changed_(changed) {}

  detail::value_cell<T>* cell_;
  bool changed_;
};

/// Creates a watch channel holding `initial` (constructed from `args`): the sender and a first
/// receiver, which has seen the initial value. One allocation for the channel, one per value.
template <class T, class... Args>
std::pair<sender<T>, receiver<T>> channel(Args&&... args);

// ---------------------------------------------------------------------------------------------
/// The sending half of a watch channel: replaces or modifies the one value, never waits for a
/// receiver. Move-only; destroying it closes the channel (receivers' waits end closed once they
/// have seen the last version; the last value stays borrowable).
///
/// Contract
/// - Versions: every send, send_replace, send_modify and send_if_modified that changes the value
///   makes a new version, one higher. Receivers see versions, not messages: several versions
///   published before a receiver looks are seen as one change, with the last value (coalescing).
/// - Synchronization: everything the sender did before publishing a version (the value's
///   construction included) happens-before everything a receiver does after a borrow that shows
///   that version, and after a changed() or wait_for() that completes because of it.
/// - Readers do not block the sender: a guard (borrowed<T>) holds no lock. A send builds the new
///   value in its own cell (reusing the previous one when no guard holds it), then swaps it in
///   under the channel's spin lock (a pointer swap and a version store); the writer never waits
///   for readers and readers never starve it. send_modify() therefore works on a copy (T must be
///   copy-constructible for it). No user code (T's constructors and destructor, f) runs under
///   the internal lock.
/// - Waking: a send wakes every receiver waiting in changed() or wait_for() at that moment; the
///   waiters are claimed under the lock and resolved after it, each on its own scheduler (or
///   inline on the sending thread for a coroutine without one). Threads blocked in the forms
///   without a stop token or timeout sleep on one word instead, which the send notifies once
///   after unlocking (one system call however many sleep). A receiver resumed inline may
///   destroy its handle, the sender, anything: the send touches nothing after waking.
/// - closed() completes once every receiver is gone (receiver_count() reaches 0); a later
///   subscribe() does not undo a completed closed().
/// - Exceptions: if building the new value, or f in send_modify / send_if_modified, throws,
///   nothing changed (no new version, no wake-up) and the exception propagates.
/// - Threads: the sender's member functions are not called concurrently with one another
///   (the standard library's rule for non-const calls); its waits (closed()) need the sender to
///   outlive them.
template <class T>
class [[nodiscard]] sender {
 public:
  /// Takes over `other`'s channel; `other` is left moved-from.
  sender(sender&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  /// Closes this sender's channel (as destruction does), then takes over `other`'s.
  sender& operator=(sender&& other) noexcept {
    if (this != &other) {
      const sender departing(std::move(*this));  // goes last: it may wake receivers inline
      state_ = std::exchange(other.state_, nullptr);
    }
    return *this;
  }
  sender(const sender&) = delete;
  sender& operator=(const sender&) = delete;
  /// Closes the channel: pending change waits end closed (receivers keep the last value).
  ~sender() {
    if (state_ != nullptr) std::exchange(state_, nullptr)->sender_leaves();
  }

  /// Publishes `value` as a new version, if any receiver exists; otherwise stores nothing and
  /// hands the value back (send_status::closed), as tokio's send does.
  template <class U = T>
    requires std::constructible_from<T, U&&>
  send_result<T> send(U&& value) {
    detail::state<T>* const s = live();
    if (s->receiver_count() == 0) return {send_status::closed, T(std::forward<U>(value))};
    s->publish(s->make_cell(std::forward<U>(value)));
    return {};
  }

  /// Publishes `value` as a new version whether or not receivers exist, and returns the value it
  /// replaced: moved out if no guard still shows it, copied otherwise (hence copy-constructible T).
  template <class U = T>
    requires std::constructible_from<T, U&&> && std::copy_constructible<T>
  T send_replace(U&& value) {
    detail::state<T>* const s = live();
    detail::value_cell<T>* const old = s->publish_keeping_old(s->make_cell(std::forward<U>(value)));
    // Only the old cell is touched from here: it is ours (one reference), the state may be gone.
    struct release_old {
      detail::value_cell<T>* cell;
      ~release_old() { detail::value_cell<T>::release_and_free(cell); }
    } const done{old};
    if (old->unique()) return T(std::move(old->value()));
    return T(std::as_const(old->value()));
  }

  /// Modifies the value with `f(T&)` and publishes the result as a new version (receivers or not).
  /// `f` works on a copy of the current value (readers keep the old version meanwhile); if the
  /// copy or `f` throws, nothing changed.
  template <class F>
    requires std::invocable<F&, T&> && std::copy_constructible<T>
  void send_modify(F&& f) {
    send_if_modified([&f](T& value) {
      std::invoke(f, value);
      return true;
    });
  }

  /// Modifies the value with `f(T&)`, which returns whether it changed anything: only then is a
  /// new version published and are receivers woken; returns that. `f` works on a copy: when it
  /// returns false, its copy is discarded (a change reported as none is not kept, unlike tokio,
  /// where it stays visible without a wake-up). If the copy or `f` throws, nothing changed.
  template <class F>
    requires std::invocable<F&, T&> && std::convertible_to<std::invoke_result_t<F&, T&>, bool> &&
             std::copy_constructible<T>
  bool send_if_modified(F&& f) {
    detail::state<T>* const s = live();
    detail::value_cell<T>* const cell = s->make_cell(s->current_value_for_sender());
    bool modified = false;
    try {
      modified = static_cast<bool>(std::invoke(f, cell->value()));
    } catch (...) {
      s->discard(cell);
      throw;
    }
    if (!modified) {
      s->discard(cell);
      return false;
    }
    s->publish(cell);
    return true;
  }

  /// A new receiver that has seen the current version (its first changed() waits for the next).
  [[nodiscard]] receiver<T> subscribe() const {
    detail::state<T>* const s = live();
    s->add_receiver();
    return receiver<T>(s, detail::state<T>::version_of(s->version_word()));
  }

  /// A guard on the current value (its has_changed() is false).
  [[nodiscard]] borrowed<T> borrow() const {
    const auto snap = live()->borrow();
    return borrowed<T>(snap.cell, false);
  }

  /// How many receivers exist now.
  [[nodiscard]] std::size_t receiver_count() const noexcept {
    return state_ == nullptr ? 0 : state_->receiver_count();
  }
  /// Whether no receiver exists (send() would hand its value back).
  [[nodiscard]] bool is_closed() const noexcept { return receiver_count() == 0; }

  /// Waits until every receiver is gone. `co_await tx.closed();`
  auto closed() { return closed_forms::await(live()); }
  /// As closed(), or until `stop` is requested; yields result<void>: ok or cancelled.
  auto closed(asyncband::stop_token stop) {
    return closed_forms::await_until_stopped(std::move(stop), live());
  }
  /// Blocks the calling thread until every receiver is gone.
  void closed_blocking() { live()->park_until_no_receivers(); }
  /// As closed_blocking(), or until `stop` is requested: ok or cancelled.
  result<void> closed_blocking(asyncband::stop_token stop) {
    return closed_forms::block_until_stopped(std::move(stop), live());
  }
  /// As closed_blocking(), for at most `timeout`: ok or timeout.
  template <class Rep, class Period>
  result<void> closed_timeout(std::chrono::duration<Rep, Period> timeout) {
    return closed_forms::block_for(timeout, live());
  }

 private:
  using closed_forms = asyncband::detail::wait_forms<detail::closed_wait<T>>;
  template <class U, class... Args>
  friend std::pair<sender<U>, receiver<U>> channel(Args&&... args);
  friend struct asyncband::detail::debug_access;
  explicit sender(detail::state<T>* s) noexcept : state_(s) {}

  [[nodiscard]] detail::state<T>* live() const {
    if (state_ == nullptr) throw std::logic_error("asyncband::watch::sender: moved from");
    return state_;
  }

  detail::state<T>* state_;
};

// ---------------------------------------------------------------------------------------------
/// A receiving half of a watch channel: borrows the latest value and waits for newer versions.
/// Copyable: a copy is another receiver, starting with the same seen version.
///
/// Contract
/// - Seen version: each receiver remembers the last version it has seen. borrow_and_update(),
///   a completed changed() and a completed wait_for() mark the current version seen; borrow()
///   does not.
/// - changed() yields result<void>: ok as soon as a version newer than the seen one exists
///   (marking the latest seen; several sends in between are one change), closed once the sender
///   is gone and nothing newer is unseen. No change is missed: the lock-free check and the
///   locked re-check-and-queue see every version published before them, and a send after the
///   queueing claims the wait (the version and the queue change under the same lock). A
///   blocking form without a stop token or timeout queues nothing: it reads the channel's
///   parking word before its check, and a send after that read has moved the word, so its sleep
///   returns at once.
/// - has_changed() yields result<bool>: whether a newer version exists, or closed as soon as the
///   sender is gone (tokio's rule: even with an unseen version).
/// - wait_for(pred) checks the current value first, then each new version, until pred(const T&)
///   holds: it yields a guard on that value (marked seen), or closed once the sender is gone and
///   the last value does not satisfy pred. pred runs outside every lock: on the awaiting thread
///   for the first check, then on the thread whose send woke the wait (as a condvar's
///   predicate runs on the notifier's side); keep it short. If it throws, the wait ends and the
///   exception propagates from the co_await.
/// - when_any: changed() marks the version seen only when it wins; a losing one leaves it unseen.
/// - Cancellation (stop token): a wait commits to cancelled if the stop request is observed
///   before a send or the sender's departure claims it; a wait claimed first reports what
///   claimed it (ok or closed), even if stop was requested before it resumed. Nothing is
///   consumed by a change, so nothing needs passing on. A stop already requested ends a wait
///   cancelled at once, without checking.
/// - Waking: each waiting receiver resumes on its own scheduler (or inline on the sending thread
///   for a coroutine without one); threads blocked without a stop token or timeout are released
///   together by one notify. Fairness: all waiters of a version wake together.
/// - Threads: a receiver object is used by one thread at a time (copy it for another task); it
///   must outlive its waits and not be moved while one is pending.
template <class T>
class [[nodiscard]] receiver {
 public:
  /// Another receiver of the same channel, which has seen what `other` has.
  receiver(const receiver& other) noexcept : state_(other.state_), seen_(other.seen_) {
    if (state_ != nullptr) state_->add_receiver();
  }
  /// Takes over `other`'s place among the receivers; `other` is left moved-from.
  receiver(receiver&& other) noexcept : state_(std::exchange(other.state_, nullptr)), seen_(other.seen_) {}
  /// Leaves this receiver's channel (as destruction does), then joins `other`'s, seeing what it
  /// has seen.
  receiver& operator=(const receiver& other) noexcept {
    if (this != &other) {
      const receiver departing(std::move(*this));  // goes last: it may complete closed() inline
      receiver copy(other);
      state_ = std::exchange(copy.state_, nullptr);
      seen_ = copy.seen_;
    }
    return *this;
  }
  /// Leaves this receiver's channel (as destruction does), then takes over `other`'s place.
  receiver& operator=(receiver&& other) noexcept {
    if (this != &other) {
      const receiver departing(std::move(*this));
      state_ = std::exchange(other.state_, nullptr);
      seen_ = other.seen_;
    }
    return *this;
  }
  /// The last receiver's departure completes the sender's closed() waits.
  ~receiver() {
    if (state_ != nullptr) std::exchange(state_, nullptr)->receiver_leaves();
  }

  /// A guard on the current value, without marking it seen; its has_changed() tells whether the
  /// version was new to this receiver.
  [[nodiscard]] borrowed<T> borrow() const {
    const auto snap = live()->borrow();
    const std::uint64_t version = detail::state<T>::version_of(snap.word);
    return borrowed<T>(snap.cell, version != seen_);
  }

  /// A guard on the current value, marking its version seen.
  [[nodiscard]] borrowed<T> borrow_and_update() {
    const auto snap = live()->borrow();
    const std::uint64_t version = detail::state<T>::version_of(snap.word);
    const bool changed = version != seen_;
    seen_ = version;
    return borrowed<T>(snap.cell, changed);
  }

  /// Whether a version newer than the seen one exists; closed once the sender is gone.
  [[nodiscard]] result<bool> has_changed() const {
    const std::uint64_t word = live()->version_word();
    if (detail::state<T>::is_closed(word)) return wait_status::closed;
    return detail::state<T>::version_of(word) != seen_;
  }

  /// Waits for a version newer than the seen one (and marks it seen). `co_await rx.changed()`
  /// yields result<void>: ok, or closed.
  auto changed() { return changed_forms::await(live(), &seen_); }
  /// As changed(), or until `stop` is requested: ok, closed or cancelled.
  auto changed(asyncband::stop_token stop) {
    return changed_forms::await_until_stopped(std::move(stop), live(), &seen_);
  }
  /// Blocks the calling thread until changed() would complete: ok or closed.
  result<void> changed_blocking() { return live()->park_until_changed(seen_); }
  /// As changed_blocking(), or until `stop` is requested: ok, closed or cancelled.
  result<void> changed_blocking(asyncband::stop_token stop) {
    return changed_forms::block_until_stopped(std::move(stop), live(), &seen_);
  }
  /// As changed_blocking(), for at most `timeout`: ok, closed or timeout.
  template <class Rep, class Period>
  result<void> changed_timeout(std::chrono::duration<Rep, Period> timeout) {
    return changed_forms::block_for(timeout, live(), &seen_);
  }

  /// Waits until `pred(const T&)` holds for the current value (checked first) or a later one;
  /// yields result<borrowed<T>>: a guard on that value (marked seen), or closed.
  template <class Predicate>
  auto wait_for(Predicate pred) {
    return detail::wait_for_awaiter<T, Predicate, false>(live(), &seen_, std::move(pred), {});
  }
  /// As wait_for(pred), or until `stop` is requested: also cancelled.
  template <class Predicate>
  auto wait_for(Predicate pred, asyncband::stop_token stop) {
    return detail::wait_for_awaiter<T, Predicate, true>(live(), &seen_, std::move(pred), std::move(stop));
  }
  /// Blocks the calling thread until wait_for(pred) would complete: a guard, or closed.
  template <class Predicate>
  result<borrowed<T>> wait_for_blocking(Predicate pred) {
    return block_wait_for(pred, {}, {});
  }
  /// As wait_for_blocking(pred), or until `stop` is requested: also cancelled.
  template <class Predicate>
  result<borrowed<T>> wait_for_blocking(Predicate pred, asyncband::stop_token stop) {
    return block_wait_for(pred, std::move(stop), {});
  }
  /// As wait_for_blocking(pred), for at most `timeout` in all: also timeout.
  template <class Predicate, class Rep, class Period>
  result<borrowed<T>> wait_for_timeout(Predicate pred, std::chrono::duration<Rep, Period> timeout) {
    return block_wait_for(pred, {}, asyncband::detail::deadline_after(timeout));
  }

  /// Whether both receivers belong to the same channel.
  [[nodiscard]] bool same_channel(const receiver& other) const noexcept { return state_ == other.state_; }

 private:
  using changed_forms = asyncband::detail::wait_forms<detail::changed_wait<T>>;
  friend class sender<T>;
  template <class U, class... Args>
  friend std::pair<sender<U>, receiver<U>> channel(Args&&... args);
  friend struct asyncband::detail::debug_access;
  receiver(detail::state<T>* s, std::uint64_t seen) noexcept : state_(s), seen_(seen) {}

  [[nodiscard]] detail::state<T>* live() const {
    if (state_ == nullptr) throw std::logic_error("asyncband::watch::receiver: moved from");
    return state_;
  }

  template <class Predicate>
  result<borrowed<T>> block_wait_for(Predicate& pred, asyncband::stop_token stop,
                                     asyncband::detail::steady_deadline deadline) {
    detail::state<T>* const s = live();
    for (;;) {
      const auto snap = s->borrow();
      const std::uint64_t version = detail::state<T>::version_of(snap.word);
      borrowed<T> guard(snap.cell, version != seen_);
      seen_ = version;
      if (std::invoke(pred, std::as_const(*guard))) return guard;
      if (detail::state<T>::is_closed(snap.word)) return wait_status::closed;
      const result<void> r =
          stop.stop_possible() || deadline
              ? asyncband::detail::block_wait<detail::changed_wait<T>, true>(stop, deadline, s, &seen_)
              : s->park_until_changed(seen_);
      if (!r.ok()) return r.status();
    }
  }

  detail::state<T>* state_;
  std::uint64_t seen_;
};

namespace detail {

/// The awaiter of wait_for(pred): change waits in a row, driven from their resolutions so that
/// the coroutine suspends once and resumes only when pred holds (or the wait ends otherwise).
/// Lives in the awaiting frame.
template <class T, class Predicate, bool Cancellable>
class [[nodiscard("co_await it: a wait does nothing until it is awaited")]] wait_for_awaiter
    : public core::staged_awaiter_base<Cancellable> {
  friend struct core::staged_access;
  using changed_pending = core::pending_wait<changed_wait<T>, Cancellable>;

 public:
  wait_for_awaiter(state<T>* s, std::uint64_t* seen, Predicate pred, asyncband::stop_token stop)
      : state_(s), seen_(seen), pred_(std::move(pred)), stop_(std::move(stop)) {}
  wait_for_awaiter(const wait_for_awaiter&) = delete;
  wait_for_awaiter& operator=(const wait_for_awaiter&) = delete;
  ~wait_for_awaiter() = default;  // a pending change wait unlinks itself (pending_wait's destructor)

  /// Checks the current value. Throws std::logic_error if this awaiter suspended before.
  bool await_ready() {
    if (suspended_) [[unlikely]]
      core::throw_awaited_again();
    return decided();
  }
  /// Throws std::logic_error if this awaiter suspended before (it is awaited once).
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    if (suspended_) [[unlikely]]
      core::throw_awaited_again();
    return start(core::resume_target(h, scheduler_of(h)));
  }
  result<borrowed<T>> await_resume() {
    if (error_) std::rethrow_exception(error_);
    if (outcome_ != wait_status::ok) return outcome_;
    return std::move(*guard_);
  }

 private:
  /// Waits for versions; `target` continues the waiter once decided (staged_access::start).
  bool start(core::resume_target target) noexcept {
    suspended_ = true;
    self_ = target;
    return wait_changes();
  }

  /// For a driver that reports a decided wait cancelled: nothing was consumed (the versions it
  /// saw stay seen, as for a cancellation; the guard was dropped).
  static void give_back() noexcept {}

  /// The node of the change wait in progress or last ended (staged_access::current_node).
  core::waiter* current_node() noexcept { return changed_ ? &changed_->node() : nullptr; }

  /// Borrows the current value (marking it seen) and decides the outcome if it can: pred holds
  /// (ok; a throw counts as decided and is rethrown on resumption), the sender is gone
  /// (closed), a stop was requested (cancelled). False: wait for the next version.
  bool decided() noexcept {
    const auto snap = state_->borrow();
    const std::uint64_t version = state<T>::version_of(snap.word);
    borrowed<T> guard(snap.cell, version != *seen_);
    *seen_ = version;
    try {
      if (std::invoke(pred_, std::as_const(*guard))) {
        guard_.emplace(std::move(guard));
        return true;
      }
    } catch (...) {
      error_ = std::current_exception();
      return true;
    }
    if (state<T>::is_closed(snap.word)) return finish(wait_status::closed);
    if (Cancellable && stop_.stop_requested()) return finish(wait_status::cancelled);
    return false;
  }

  /// Waits for versions until decided. True if a wait is pending (its resolution continues in
  /// on_changed; nothing touches the frame after publishing it), false if decided now.
  /// Out of line: nothing after the publication may be merged into the coroutine (clang 14).
  [[gnu::noinline]] bool wait_changes() noexcept {
    for (;;) {
      changed_pending& w = changed_.emplace(stop_, state_, seen_);
      if (!w.try_complete() && w.publish(core::resume_target::continuation(&on_changed, this))) return true;
      if (decided_after_change()) return false;
    }
  }

  /// A change wait ended: closed or cancelled decide; a new version is checked.
  bool decided_after_change() noexcept {
    const result<void> r = changed_->finish();
    changed_.reset();
    if (!r.ok()) return finish(r.status());
    return decided();
  }

  bool finish(wait_status outcome) noexcept {
    outcome_ = outcome;
    return true;
  }

  /// The continuation of a resolved change wait, on the resolving thread.
  static void on_changed(void* self) noexcept {
    auto* const a = static_cast<wait_for_awaiter*>(self);
    const core::resume_target coroutine = a->self_;
    if (a->decided_after_change() || !a->wait_again()) coroutine.run();
  }
  bool wait_again() noexcept {
    const core::wake_batch::defer_nested loop_not_recursion;
    return wait_changes();
  }

  state<T>* state_;
  std::uint64_t* seen_;
  Predicate pred_;
  asyncband::stop_token stop_;
  core::resume_target self_;
  std::optional<changed_pending> changed_;
  std::optional<borrowed<T>> guard_;
  std::exception_ptr error_;
  wait_status outcome_ = wait_status::ok;
  bool suspended_ = false;
};

}  // namespace detail

template <class T, class... Args>
std::pair<sender<T>, receiver<T>> channel(Args&&... args) {
  auto* s = new detail::state<T>(std::in_place, std::forward<Args>(args)...);
  return {sender<T>(s), receiver<T>(s, 0)};
}

}  // namespace asyncband::watch
