// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/fallback_stop.hpp: a stop token of asyncband's own, with the contract of
// C++20's std::stop_token, std::stop_source and std::stop_callback, for standard libraries that
// lack <stop_token> (libc++ before 17). asyncband/stop_token.hpp makes these the public names
// only where <version> does not define __cpp_lib_jthread; the tests compile them everywhere.
//
// The shared state is one heap block: an owner count (sources, tokens and registered
// callbacks) and one atomic word holding the stop-requested bit, a lock bit and the number of
// stop_sources. The lock guards the intrusive list of registered callbacks and is held only for
// list surgery: callbacks run with it released, so they may register or deregister others.
#pragma once

#include <atomic>
#include <concepts>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <utility>

#include "atomic.hpp"
#include "spin_lock.hpp"

// In namespace detail (outside the API reference), whichever the public names are.
namespace asyncband::detail {
namespace fallback_stop {

/// The tag type of nostopstate (as std::nostopstate_t).
struct nostopstate_t {
  explicit nostopstate_t() = default;
};

/// Tag for a stop_source without a stop state (as std::nostopstate).
inline constexpr nostopstate_t nostopstate{};

/// A registered callback as the stop state sees it: a list node and the function that runs it.
/// The list links are guarded by the stop state's lock.
struct callback_node {
  using run_fn = void(callback_node*) noexcept;

  explicit callback_node(run_fn* runner) noexcept : run(runner) {}

  run_fn* run;
  callback_node* next = nullptr;
  /// The pointer that points at this node (the list head or the previous node's `next`);
  /// null when the node is not in the list.
  callback_node** link = nullptr;
};

/// The state shared by a stop_source, its copies, their tokens and registered callbacks.
class stop_state {
 public:
  stop_state(const stop_state&) = delete;
  stop_state& operator=(const stop_state&) = delete;

  /// A new state with one owner, which is one stop_source.
  [[nodiscard]] static stop_state* make() { return new stop_state(); }

  void add_owner() noexcept { owners_.fetch_add(1, std::memory_order_relaxed); }
  void release_owner() noexcept {
    if (owners_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  void add_source() noexcept { word_.fetch_add(source_unit, std::memory_order_relaxed); }
  void remove_source() noexcept { word_.fetch_sub(source_unit, std::memory_order_acq_rel); }

  [[nodiscard]] bool stop_requested() const noexcept {
    return (word_.load(std::memory_order_acquire) & requested_bit) != 0;
  }
  /// Requested already, or a stop_source is left that could request it.
  [[nodiscard]] bool stop_possible() const noexcept {
    return (word_.load(std::memory_order_acquire) & ~locked_bit) != 0;
  }

  /// Sets the request (only the first call does: true) and runs every registered callback on
  /// this thread, one at a time, each taken off the list before it runs with the lock released.
  bool request_stop() noexcept {
    if (lock_unless(requested_bit, false) != lock_outcome::locked) return false;
    // A callback may destroy the last stop_source: keep the state alive until the end.
    add_owner();
    requester_ = std::this_thread::get_id();
    while (callback_node* n = head_) {
      unlink(n);
      running_.store(n, std::memory_order_relaxed);
      unlock();
      n->run(n);  // may destroy *n (its own stop_callback, on this thread): n is not used again
      // Release: a destructor waiting on another thread sees everything the callback did.
      running_.store(nullptr, std::memory_order_release);
      running_.notify_all();
      lock();
    }
    unlock();
    release_owner();  // last: may delete this
    return true;
  }

  /// Registers `n`: true if it is in the list. If a stop was requested, runs it here and now;
  /// if no stop can ever be requested (no stop_source left), drops it. Either way, false.
  bool add(callback_node* n) noexcept {
    switch (lock_unless(0, true)) {
      case lock_outcome::stop_requested:
        n->run(n);
        return false;
      case lock_outcome::stop_impossible:
        return false;
      case lock_outcome::locked:
        break;
    }
    n->next = head_;
    if (head_ != nullptr) head_->link = &n->next;
    head_ = n;
    n->link = &head_;
    unlock();
    return true;
  }

  /// Deregisters `n` (added before). If its callback is running on another thread, waits until
  /// it returns; if on this thread (destroyed from inside its own callback), returns at once.
  void remove(callback_node* n) noexcept {
    lock();
    if (n->link != nullptr) {
      unlink(n);
      unlock();
      return;
    }
    // Taken off by request_stop (requester_ is set): its callback runs or has run.
    // Acquire: a callback finished already (nullptr or another node) happened before this.
    const bool running = running_.load(std::memory_order_acquire) == n;
    const bool on_requester = requester_ == std::this_thread::get_id();
    unlock();
    if (running && !on_requester) running_.wait(n, std::memory_order_acquire);
  }

 private:
  static constexpr std::uint32_t requested_bit = 1;
  static constexpr std::uint32_t locked_bit = 2;
  static constexpr std::uint32_t source_unit = 4;

  stop_state() = default;
  ~stop_state() = default;

  enum class lock_outcome { locked, stop_requested, stop_impossible };

  /// Takes the lock, setting `also` with it, unless a stop was requested (or, with
  /// `need_source`, no stop_source is left).
  lock_outcome lock_unless(std::uint32_t also, bool need_source) noexcept {
    lock_outcome out = lock_outcome::locked;
    spin_until([&] {
      std::uint32_t w = word_.load(std::memory_order_acquire);
      if ((w & requested_bit) != 0) {
        out = lock_outcome::stop_requested;
        return true;
      }
      if (need_source && w < source_unit) {
        out = lock_outcome::stop_impossible;
        return true;
      }
      return (w & locked_bit) == 0 &&
             word_.compare_exchange_weak(w, w | locked_bit | also, std::memory_order_acq_rel,
                                         std::memory_order_relaxed);
    });
    return out;
  }

  void lock() noexcept {
    spin_until([this] {
      std::uint32_t w = word_.load(std::memory_order_relaxed);
      return (w & locked_bit) == 0 &&
             word_.compare_exchange_weak(w, w | locked_bit, std::memory_order_acquire,
                                         std::memory_order_relaxed);
    });
  }
  void unlock() noexcept { word_.fetch_sub(locked_bit, std::memory_order_release); }

  static void unlink(callback_node* n) noexcept {
    *n->link = n->next;
    if (n->next != nullptr) n->next->link = n->link;
    n->next = nullptr;
    n->link = nullptr;
  }

  asyncband::detail::atomic<std::uint32_t> owners_{1};
  asyncband::detail::atomic<std::uint32_t> word_{source_unit};
  callback_node* head_ = nullptr;  // guarded by the lock bit
  std::thread::id requester_;      // written once, under the lock, before any callback leaves the list
  asyncband::detail::atomic<callback_node*> running_{
      nullptr};  // the callback request_stop runs; set under the lock
};

/// One owning reference to a stop_state, or none.
class state_ref {
 public:
  state_ref() noexcept = default;
  explicit state_ref(stop_state* s) noexcept : state_(s) {}
  state_ref(const state_ref& other) noexcept : state_(other.state_) {
    if (state_ != nullptr) state_->add_owner();
  }
  state_ref(state_ref&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  state_ref& operator=(state_ref other) noexcept {
    swap(other);
    return *this;
  }
  ~state_ref() {
    if (state_ != nullptr) state_->release_owner();
  }

  void swap(state_ref& other) noexcept { std::swap(state_, other.state_); }
  [[nodiscard]] stop_state* get() const noexcept { return state_; }
  stop_state* operator->() const noexcept { return state_; }
  explicit operator bool() const noexcept { return state_ != nullptr; }
  friend bool operator==(const state_ref&, const state_ref&) noexcept = default;

 private:
  stop_state* state_ = nullptr;
};

class stop_source;
template <class Callback>
class stop_callback;

/// A view of a stop state that can tell whether a stop was requested, and can have callbacks
/// registered (stop_callback), but cannot request one: std::stop_token's contract. A
/// default-constructed token has no state: never stopped, and no stop is possible.
class stop_token {
 public:
  /// A token with no stop state.
  stop_token() noexcept = default;

  /// Whether a stop was requested on the state.
  [[nodiscard]] bool stop_requested() const noexcept { return state_ && state_->stop_requested(); }
  /// Whether a stop was requested or still can be (a stop_source of the state is left).
  [[nodiscard]] bool stop_possible() const noexcept { return state_ && state_->stop_possible(); }

  /// Exchanges the states of two tokens.
  void swap(stop_token& other) noexcept { state_.swap(other.state_); }
  /// Exchanges the states of two tokens.
  friend void swap(stop_token& a, stop_token& b) noexcept { a.swap(b); }
  /// Whether both share one stop state (or both have none).
  [[nodiscard]] friend bool operator==(const stop_token&, const stop_token&) noexcept = default;

 private:
  friend class stop_source;
  template <class Callback>
  friend class stop_callback;

  explicit stop_token(state_ref s) noexcept : state_(std::move(s)) {}

  state_ref state_;
};

/// The owner of a stop state that can request a stop: std::stop_source's contract. The default
/// constructor allocates a new state (and may throw std::bad_alloc); copies share it.
/// request_stop() runs every callback registered on the state's tokens, on the calling thread,
/// exactly once, whichever copy calls it and however many times.
class stop_source {
 public:
  /// A source with a new stop state.
  stop_source() : state_(stop_state::make()) {}
  /// A source with no stop state (nothing to request).
  explicit stop_source(nostopstate_t /*unused*/) noexcept {}

  /// Another source of the same state.
  stop_source(const stop_source& other) noexcept : state_(other.state_) {
    if (state_) state_->add_source();
  }
  /// Takes over `other`'s state; `other` has none afterwards.
  stop_source(stop_source&& other) noexcept = default;
  /// Becomes a source of `other`'s state.
  stop_source& operator=(const stop_source& other) noexcept {
    if (state_ != other.state_) stop_source(other).swap(*this);
    return *this;
  }
  /// Takes over `other`'s state; `other` has none afterwards.
  stop_source& operator=(stop_source&& other) noexcept {
    stop_source moved(std::move(other));
    moved.swap(*this);
    return *this;
  }
  ~stop_source() {
    if (state_) state_->remove_source();
  }

  /// Requests a stop: true for the call that made the request (its callbacks have run when it
  /// returns), false if one was made before or this source has no state.
  bool request_stop() const noexcept { return state_ && state_->request_stop(); }
  /// Whether a stop was requested.
  [[nodiscard]] bool stop_requested() const noexcept { return state_ && state_->stop_requested(); }
  /// Whether this source has a stop state.
  [[nodiscard]] bool stop_possible() const noexcept { return static_cast<bool>(state_); }
  /// A token of this source's state (a token without one if it has none).
  [[nodiscard]] stop_token get_token() const noexcept { return stop_token(state_); }

  /// Exchanges the states of two sources.
  void swap(stop_source& other) noexcept { state_.swap(other.state_); }
  /// Exchanges the states of two sources.
  friend void swap(stop_source& a, stop_source& b) noexcept { a.swap(b); }
  /// Whether both share one stop state (or both have none).
  [[nodiscard]] friend bool operator==(const stop_source&, const stop_source&) noexcept = default;

 private:
  state_ref state_;
};

/// Runs a callable when a stop is requested on a token's state, as std::stop_callback: on the
/// requesting thread, exactly once; at once in the constructor if the stop was requested
/// already; never if the token has no state or no stop is possible any more, or if this object
/// is destroyed first. The destructor deregisters the callable; if it is running on another
/// thread, the destructor waits until it returns (so what it uses may be destroyed next),
/// unless it is called from inside the callable itself. Neither copyable nor movable.
template <class Callback>
class [[nodiscard]] stop_callback {
  static_assert(std::is_nothrow_destructible_v<Callback>, "the callback's destructor must not throw");
  static_assert(std::is_invocable_v<Callback>, "the callback must be invocable with no arguments");

 public:
  /// The callable's type.
  using callback_type = Callback;

  /// Registers `cb` (constructed into this object) with the state of `token`.
  template <class C>
    requires std::constructible_from<Callback, C>
  explicit stop_callback(const stop_token& token,
                         C&& cb) noexcept(std::is_nothrow_constructible_v<Callback, C>)
      : node_(std::forward<C>(cb)) {
    if (token.state_ && token.state_->add(&node_)) state_ = token.state_;
  }
  /// Registers `cb` (constructed into this object) with the state of `token`, taking over the
  /// token's reference to it.
  template <class C>
    requires std::constructible_from<Callback, C>
  explicit stop_callback(stop_token&& token, C&& cb) noexcept(std::is_nothrow_constructible_v<Callback, C>)
      : node_(std::forward<C>(cb)) {
    if (token.state_ && token.state_->add(&node_)) state_ = std::move(token.state_);
  }

  stop_callback(const stop_callback&) = delete;
  stop_callback& operator=(const stop_callback&) = delete;
  stop_callback(stop_callback&&) = delete;
  stop_callback& operator=(stop_callback&&) = delete;

  /// Deregisters the callable, waiting for it if it runs on another thread.
  ~stop_callback() {
    if (state_) state_->remove(&node_);
  }

 private:
  struct node : callback_node {
    template <class C>
    explicit node(C&& cb) : callback_node(&invoke), fn(std::forward<C>(cb)) {}

    static void invoke(callback_node* n) noexcept { std::forward<Callback>(static_cast<node*>(n)->fn)(); }

    Callback fn;
  };

  node node_;
  state_ref state_;  // set only if node_ was registered
};

/// Deduces the callback type, as std::stop_callback's guide.
template <class Callback>
stop_callback(stop_token, Callback) -> stop_callback<Callback>;

}  // namespace fallback_stop
}  // namespace asyncband::detail
