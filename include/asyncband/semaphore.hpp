// asyncband/semaphore.hpp
#pragma once

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <type_traits>
#include <utility>

#include "detail/wait_functions.hpp"
#include "detail/wait_queue.hpp"
#include "result.hpp"

namespace asyncband {

namespace mpsc::detail {
template <class T>
class bounded_state;
}  // namespace mpsc::detail
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
template <class Make, bool Fallible = false>
class acquire_awaiter;
template <class Make, bool Fallible = false>
struct acquire_forms;
template <class Source>
class source_awaiter;
/// Tag of the semaphore constructor for a count that is rarely at its initial value (a
/// channel's capacity): its lock-free paths read the state instead of guessing it.
struct varying_count_t {
  explicit varying_count_t() = default;
};
/// Tag of the semaphore constructor for a semaphore whose owner keeps it alive through every
/// call that may wake one of its waiters (a return of permits, a cancellation, close): a
/// channel's capacity, every user of which holds a reference to the channel. Its wake-ups then
/// need no pin (detail::wait_queue::wake_kept_alive).
struct kept_alive_t {
  explicit kept_alive_t() = default;
};
/// The Make of an acquisition that yields the permit itself (semaphore::acquire, a condvar's
/// re-lock).
struct permit_itself;
}  // namespace detail

/// Permits taken from a semaphore; destroying the permit returns them. Move-only.
///
/// An empty permit (default-constructed, moved-from, forgotten) returns nothing. A permit may
/// outlive the scope that acquired it, but not its semaphore.
class [[nodiscard]] semaphore_permit {
 public:
  semaphore_permit() noexcept = default;
  semaphore_permit(semaphore_permit&& other) noexcept
      : semaphore_(std::exchange(other.semaphore_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  semaphore_permit& operator=(semaphore_permit&& other) noexcept {
    if (this != &other) {
      // The old permits are released last, from a local: the release may resume a waiter inline
      // that destroys this permit at once (last one out).
      const semaphore_permit departing(std::move(*this));
      semaphore_ = std::exchange(other.semaphore_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  semaphore_permit(const semaphore_permit&) = delete;
  semaphore_permit& operator=(const semaphore_permit&) = delete;
  /// Unlike release(), clears nothing: a store right before the release's atomic
  /// read-modify-write would delay it, and nobody may look at a permit being destroyed.
  ~semaphore_permit() {
    if (count_ != 0) release_to_semaphore(count_);
  }

  /// How many permits this holds.
  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  /// The semaphore the permits came from (nullptr for a permit that never held any).
  [[nodiscard]] asyncband::semaphore* semaphore() const noexcept { return semaphore_; }
  explicit operator bool() const noexcept { return count_ != 0; }

  /// Returns the permits to the semaphore now (the destructor then has nothing to do).
  inline void release() noexcept;
  /// Returns n of the permits now and keeps the rest (all of them if n >= count()).
  inline void release(std::size_t n) noexcept;

  /// Gives up the permits without returning them: the semaphore has that many fewer for good.
  /// Returns how many were forgotten.
  std::size_t forget() noexcept { return std::exchange(count_, 0); }

  /// Moves `n` of this permit's permits into a new permit of the same semaphore.
  /// Throws std::invalid_argument if this holds fewer than `n`.
  semaphore_permit split(std::size_t n) {
    if (n > count_) throw std::invalid_argument("asyncband::semaphore_permit::split: more than it holds");
    count_ -= n;
    return {semaphore_, n};
  }

  /// Takes over `other`'s permits. Throws std::invalid_argument (and changes nothing) if they
  /// come from another semaphore: returning them here would corrupt both counts; throws
  /// std::overflow_error if the sum would exceed semaphore::max().
  inline void merge(semaphore_permit&& other);

 private:
  friend class asyncband::semaphore;
  friend class detail::semaphore_waiter;
  template <class Make, bool Fallible>
  friend class detail::acquire_awaiter;
  template <class Source>
  friend class detail::source_awaiter;
  semaphore_permit(asyncband::semaphore* owner, std::size_t n) noexcept : semaphore_(owner), count_(n) {}
  inline void release_to_semaphore(std::size_t n) const noexcept;

  asyncband::semaphore* semaphore_ = nullptr;
  std::size_t count_ = 0;
};

/// A counting semaphore with strict FIFO hand-off, partial grants and a deficit.
///
/// Contract
/// - Synchronization: returning permits (a permit's destruction, `release`) happens-before the
///   acquisition that receives them completes.
/// - Fairness: strict FIFO. Released permits go first to repay a deficit, then to the waiter at
///   the head of the queue, which keeps what it is given (a partial grant) until it has all it
///   asked for; only then does the next waiter receive any. `try_acquire` and a new `acquire`
///   never take permits while anybody is queued (no barging), so a large request cannot starve.
/// - when_any: an acquisition that lost its when_any is never granted a permit, not even part of
///   one: a release commits the head before completing its grant and passes over one that lost.
/// - Cancellation commits until the waiter resumes: a waiter cancelled while queued gives its
///   partial grant to the next waiters; one cancelled after its grant was complete (stop
///   observed on resumption, or its frame destroyed) returns all of it. Nothing is lost.
/// - `reduce_permits(n)` removes n permits; what is not available now becomes a deficit that
///   later releases repay before any waiter is served.
/// - Programming errors throw std::invalid_argument or std::overflow_error before any change: a
///   request above max(), an available count pushed above max() by `release`.
/// - Uncontended paths are lock-free: acquiring with nobody queued is one CAS, and so is
///   returning permits with nobody queued and no deficit.
/// - The semaphore must outlive its pending waits and its permits; a waiter that acquired may
///   destroy it at once (the releasing call does not touch it after the hand-off).
class semaphore {
  friend class semaphore_permit;
  friend class detail::semaphore_waiter;
  template <class Make, bool Fallible>
  friend class detail::semaphore_acquire;
  template <class Make, bool Fallible>
  friend class detail::acquire_awaiter;
  template <class Source>
  friend class detail::source_awaiter;
  template <class T>
  friend class mpsc::detail::bounded_state;
  template <class T, bool Lossless>
  friend class broadcast::detail::ring;  // close()
  template <class T>
  friend class mutex;  // their destructors' debug check
  template <class T>
  friend class rwlock;

  using acquire_forms = detail::acquire_forms<detail::permit_itself>;

 public:
  /// The largest count of permits a semaphore holds, or a single request asks for: 2^31 - 1.
  [[nodiscard]] static constexpr std::size_t max() noexcept { return (std::size_t{1} << 31) - 1; }

  explicit semaphore(std::size_t permits) : idle_(encode(checked(permits))), state_(idle_) {}
  /// For a count that is rarely all available: no guessed first CAS (see guess_before_take).
  /// `first_ticket`: the channel's first place (tests of wrap-around start near 2^32).
  semaphore(std::size_t permits, detail::varying_count_t /*unused*/, std::uint32_t first_ticket = 0)
      : idle_(0), state_(encode(checked(permits)) | (std::uint64_t{first_ticket} << 32)) {}
  /// As above, for a semaphore its owner keeps alive through every call that may wake a waiter
  /// (detail::kept_alive_t).
  semaphore(std::size_t permits, detail::varying_count_t varying, std::uint32_t first_ticket,
            detail::kept_alive_t /*unused*/)
      : semaphore(permits, varying, first_ticket) {
    kept_alive_ = true;
  }
  semaphore(const semaphore&) = delete;
  semaphore& operator=(const semaphore&) = delete;
  /// Debug builds assert that no acquisition is pending.
  ~semaphore() { assert(no_waiters_left() && "asyncband::semaphore destroyed with waiters"); }

  /// `co_await s.acquire(n)` yields a permit for n. Throws std::invalid_argument if n > max().
  auto acquire(std::size_t n = 1);
  /// Yields result<semaphore_permit>: ok, or cancelled.
  auto acquire(std::size_t n, std::stop_token stop);
  semaphore_permit acquire_blocking(std::size_t n = 1);
  result<semaphore_permit> acquire_blocking(std::size_t n, std::stop_token stop);
  template <class Rep, class Period>
  result<semaphore_permit> acquire_timeout(std::size_t n, std::chrono::duration<Rep, Period> timeout);

  /// n permits now, or nothing: fails if fewer are available or anybody is queued (n = 0
  /// always succeeds).
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

  /// Permits available now (0 while anybody waits or a deficit is outstanding).
  [[nodiscard]] std::size_t available() const noexcept {
    const std::uint64_t s = state_.load(std::memory_order_acquire);
    return (s & contended) != 0 ? 0 : count_of(s);
  }

  /// Takes every available permit and forgets them; returns how many.
  std::size_t drain_permits() noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while ((s & contended) == 0 && count_of(s) != 0) {
      if (state_.compare_exchange_weak(s, s & ticket_bits, std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return count_of(s);
    }
    return 0;
  }

  /// Removes n permits for good: those available now at once, the rest as a deficit that later
  /// releases repay before any waiter is served. Throws std::invalid_argument if n > max(), and
  /// std::overflow_error if the deficit would exceed max().
  void reduce_permits(std::size_t n) {
    checked(n);
    const std::lock_guard lock(queue_.mutex());
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    for (;;) {
      if ((s & contended) != 0) {  // nothing available; only lock holders change the state now
        add_deficit(n);
        return;
      }
      const std::size_t taken = std::min(count_of(s), n);
      const std::size_t rest = n - taken;
      if (rest > max() - deficit_)
        throw std::overflow_error("asyncband::semaphore::reduce_permits: deficit above max()");
      const std::uint64_t next =
          (s & ticket_bits) | encode(count_of(s) - taken) | (rest != 0 ? contended : 0);
      if (state_.compare_exchange_weak(s, next, std::memory_order_acquire, std::memory_order_relaxed)) {
        deficit_ += rest;
        return;
      }
    }
  }

 private:
  /// For the debug check of an owner's destructor (see wait_queue::no_waiters_left).
  [[nodiscard]] bool no_waiters_left() noexcept { return queue_.no_waiters_left(); }

  // state_: bit 0 is `contended`, set while anybody is queued or a deficit is outstanding; bits
  // 1-31 are the available count; bits 32-63 are a ticket counter, which only a channel uses
  // (bounded_state: a send takes its unit of capacity and its place in the ring in one CAS).
  // While `contended` is set the count is 0 (the head waiter or the deficit absorbs every
  // permit), and only holders of the queue's lock change the count, so the lock-free paths are
  // exactly: take with the bit clear, give with the bit clear, and advance the ticket. Every
  // write keeps the ticket bits, and every write is a read-modify-write, never a plain store:
  // a channel's receiver announces its sleep with one, and each later claim must read from its
  // release sequence (bounded_state::announce_sleep).
  static constexpr std::uint64_t contended = 1;
  static constexpr std::uint64_t ticket_one = std::uint64_t{1} << 32;
  static constexpr std::uint64_t ticket_bits = ~(ticket_one - 1);
  static constexpr std::uint64_t encode(std::size_t count) noexcept { return std::uint64_t{count} << 1; }
  static constexpr std::size_t count_of(std::uint64_t state) noexcept {
    return static_cast<std::size_t>((state >> 1) & max());
  }
  static constexpr std::uint32_t ticket_of(std::uint64_t state) noexcept {
    return static_cast<std::uint32_t>(state >> 32);
  }

  // --- tickets, for a channel's capacity (bounded_state) ---------------------------------------
  /// Lock-free: one permit and the next ticket, if nobody is queued and a permit is available.
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
  /// The next ticket, for a permit already held.
  std::uint32_t take_ticket() noexcept {
    return ticket_of(state_.fetch_add(ticket_one, std::memory_order_acquire));
  }
  /// The next ticket, not taken: a read-modify-write, ordered with every take (seq_cst).
  std::uint32_t announce_at_ticket() noexcept {
    return ticket_of(state_.fetch_add(0, std::memory_order_seq_cst));
  }
  [[nodiscard]] std::uint32_t next_ticket() const noexcept {
    return ticket_of(state_.load(std::memory_order_acquire));
  }

  static std::size_t checked(std::size_t n) {
    if (n > max()) throw std::invalid_argument("asyncband::semaphore: count above max()");
    return n;
  }

  void add_deficit(std::size_t n) {
    if (n > max() - deficit_)
      throw std::overflow_error("asyncband::semaphore::reduce_permits: deficit above max()");
    deficit_ += n;
  }

  /// The first guess of the lock-free paths: nobody else holds any permit, as for an
  /// uncontended mutex or rwlock. A right guess saves the read before the CAS, which costs
  /// about 5 ns right after another locked instruction; a wrong one costs the failed CAS, which
  /// then reports the actual state.
  [[nodiscard]] std::uint64_t guess_before_take(std::size_t n) const noexcept {
    return idle_ >= encode(n) ? idle_ : state_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t guess_before_give(std::size_t n) const noexcept {
    return idle_ >= encode(n) ? idle_ - encode(n) : state_.load(std::memory_order_relaxed);
  }

  /// Lock-free: takes n permits if nobody is queued and enough are available.
  bool try_take(std::size_t n) noexcept {
    std::uint64_t s = guess_before_take(n);
    while ((s & contended) == 0 && count_of(s) >= n) {
      if (state_.compare_exchange_weak(s, s - encode(n), std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return true;
    }
    return false;
  }

  /// Under the lock, for a waiter about to queue: takes n permits if it can (true); otherwise
  /// gives it every available permit as a partial grant, marks the state contended (false), and
  /// the caller links it.
  bool take_or_queue(detail::semaphore_waiter& w) noexcept;

  enum class add_outcome : unsigned char { added, contended, overflow };

  /// Lock-free: adds n available permits if nobody is queued and nothing is owed.
  add_outcome try_add(std::size_t n) noexcept {
    std::uint64_t s = guess_before_give(n);
    while ((s & contended) == 0) {
      if (n > max() || count_of(s) > max() - n) return add_outcome::overflow;
      if (state_.compare_exchange_weak(s, s + encode(n), std::memory_order_release,
                                       std::memory_order_relaxed))
        return add_outcome::added;
    }
    return add_outcome::contended;
  }

  /// Returns n permits. Lock-free when nobody is queued and no deficit is outstanding;
  /// otherwise hands them out under the lock (re-checking there: the state may have become
  /// uncontended meanwhile). `Checked`: throw std::overflow_error rather than exceed max().
  /// Permits coming back from a permit exceed it only if `release` added permits beyond those
  /// ever taken: a fatal error there, since a permit's destructor cannot throw.
  template <bool Checked>
  void give(std::size_t n) noexcept(!Checked) {
    if (n == 0) return;
    const add_outcome outcome = try_add(n);  // checks n > max() too
    if (outcome != add_outcome::added) [[unlikely]]
      give_slowly<Checked>(n, outcome);
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
    if (outcome == add_outcome::overflow) {
      if constexpr (Checked) {
        throw std::overflow_error("asyncband::semaphore::release: above max()");
      } else {
        std::terminate();
      }
    }
  }

  /// Under the lock, with the state contended (count 0, changed only by lock holders): n
  /// permits repay the deficit, then go to waiters in FIFO order; a waiter that has all it asked
  /// for is claimed into `batch`. When nobody is left waiting and nothing is owed, the rest
  /// becomes available and the state uncontended again.
  inline void hand_out(std::size_t n, detail::wait_list& waiters, detail::wake_batch& batch) noexcept;

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

  const std::uint64_t idle_;  // the state with the initial permits all available
  std::atomic<std::uint64_t> state_;
  std::size_t deficit_ = 0;  // guarded by queue_.mutex()
  bool kept_alive_ = false;  // set once, by the constructor (detail::kept_alive_t)
  bool closed_ = false;      // guarded by queue_.mutex(), as the three below
  std::size_t closed_count_ = 0;
  return_hook on_return_ = nullptr;
  void* on_return_context_ = nullptr;
  mutable detail::wait_queue queue_;
};

namespace detail {

/// A queued acquisition: how many it asked for and how many it has been given so far.
class semaphore_waiter : public waiter {
 public:
  semaphore_waiter(semaphore* owner, std::size_t n) noexcept : semaphore_(owner), needed_(n) {}

  static constexpr bool transferable = true;

  bool try_ready() noexcept { return needed_ == 0 || semaphore_->try_take(needed_); }

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
    semaphore_->wake(
        [this, why](wait_list& waiters, wake_batch& batch) {
          if (!waiters.unlink_if_linked(*this, why)) return;
          batch.add(*this);
          semaphore_->hand_out(std::exchange(granted_, 0), waiters, batch);
        },
        test_point::claimed_for_cancel);
    return false;
  }

  /// A complete grant that will not be used goes back (to the next waiter, or available).
  void give_back() noexcept { semaphore_->give<false>(needed_); }

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
  std::size_t granted_;  // set by enqueue(); guarded by the semaphore's lock while queued
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

template <class Make, bool Fallible>
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
    if (semaphore_ == nullptr) wait_.~wait_type();
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
    return publish(resume_target(h, scheduler_of(h)), nullptr);
  }

  value_type await_resume() {
    if (semaphore_ != nullptr) return make_(semaphore_permit(semaphore_, count_));
    return wait_.finish();
  }

 private:
  friend struct lazy_acquire_access<acquire_awaiter>;

  /// Awaited (or selected) before: its wait was built.
  [[nodiscard]] bool spent() const noexcept { return semaphore_ == nullptr; }

  /// Builds the waiting operation (the awaiter's arguments move into its node) and publishes it.
  bool publish(resume_target target, commit_point* commit) noexcept {
    ::new (static_cast<void*>(&wait_)) wait_type(std::stop_token{}, semaphore_, count_, std::move(make_));
    semaphore_ = nullptr;
    return wait_.publish(target, nothing_to_do{}, commit);
  }

  semaphore* semaphore_;
  std::size_t count_;
  Make make_;
  union {
    wait_type wait_;  // constructed by await_suspend
  };
};

/// acquire_awaiter for an acquisition whose semaphore, count and guard maker all follow from
/// one pointer (a mutex; an rwlock's read or write side): the awaiter is that `Source`, so the
/// uncontended lock stores one word into the frame before its CAS instead of three. A Source is
/// a pointer wrapper with `explicit operator bool`, `semaphore_ref()`, `count()` and `maker()`; an
/// empty Source marks the constructed wait.
template <class Source>
class [[nodiscard("co_await it: a lock does nothing until it is awaited")]] source_awaiter {
  using node_type = semaphore_acquire<decltype(std::declval<const Source&>().maker())>;
  using wait_type = pending_wait<node_type, false>;

 public:
  using value_type = typename node_type::value_type;

  explicit source_awaiter(Source source) noexcept : source_(source) {}
  source_awaiter(const source_awaiter&) = delete;
  source_awaiter& operator=(const source_awaiter&) = delete;
  ~source_awaiter() {
    if (!source_) wait_.~wait_type();
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
    return publish(resume_target(h, scheduler_of(h)), nullptr);
  }

  value_type await_resume() {
    if (source_) return source_.maker()(semaphore_permit(&source_.semaphore_ref(), source_.count()));
    return wait_.finish();
  }

 private:
  friend struct lazy_acquire_access<source_awaiter>;

  /// Awaited (or selected) before: its wait was built.
  [[nodiscard]] bool spent() const noexcept { return !source_; }

  /// Builds the waiting operation from the source (which empties) and publishes it.
  bool publish(resume_target target, commit_point* commit) noexcept {
    const Source s = std::exchange(source_, Source{});
    ::new (static_cast<void*>(&wait_)) wait_type(std::stop_token{}, &s.semaphore_ref(), s.count(), s.maker());
    return wait_.publish(target, nothing_to_do{}, commit);
  }

  Source source_;
  union {
    wait_type wait_;  // constructed by await_suspend
  };
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

/// A semaphore acquisition (or a channel's capacity) as a when_any branch.
template <class Make, bool Fallible>
struct select_access<acquire_awaiter<Make, Fallible>> : lazy_acquire_access<acquire_awaiter<Make, Fallible>> {
};

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

inline bool semaphore::take_or_queue(detail::semaphore_waiter& w) noexcept {
  if (closed_) {
    w.status = wait_status::closed;
    return true;
  }
  std::uint64_t s = state_.load(std::memory_order_relaxed);
  for (;;) {
    if ((s & contended) != 0) return false;
    const std::size_t available_now = count_of(s);
    if (available_now >= w.missing()) {
      if (state_.compare_exchange_weak(s, s - encode(w.missing()), std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return true;
    } else if (state_.compare_exchange_weak(s, (s & ticket_bits) | contended, std::memory_order_acquire,
                                            std::memory_order_relaxed)) {
      w.grant(available_now);
      return false;
    }
  }
}

inline void semaphore::close(return_hook on_return, void* context) noexcept {
  wake([&](detail::wait_list& waiters, detail::wake_batch& batch) {
    if (closed_) return;
    closed_ = true;
    on_return_ = on_return;
    on_return_context_ = context;
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while (!state_.compare_exchange_weak(s, (s & ticket_bits) | contended, std::memory_order_acq_rel,
                                         std::memory_order_relaxed)) {
    }
    closed_count_ = (s & contended) != 0 ? 0 : count_of(s);
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
  if (waiters.empty() && deficit_ == 0) {  // contended (count 0) until now: only tickets move
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    while (!state_.compare_exchange_weak(s, (s & ticket_bits) | encode(n), std::memory_order_release,
                                         std::memory_order_relaxed)) {
    }
  }
}

// The acquisition forms need the node types, which need a complete semaphore.
inline auto semaphore::acquire(std::size_t n) {
  return acquire_forms::await(this, checked(n), detail::permit_itself{});
}
inline auto semaphore::acquire(std::size_t n, std::stop_token stop) {
  return acquire_forms::await_until_stopped(std::move(stop), this, checked(n), detail::permit_itself{});
}
inline semaphore_permit semaphore::acquire_blocking(std::size_t n) {
  return acquire_forms::block(this, checked(n), detail::permit_itself{});
}
inline result<semaphore_permit> semaphore::acquire_blocking(std::size_t n, std::stop_token stop) {
  return acquire_forms::block_until_stopped(std::move(stop), this, checked(n), detail::permit_itself{});
}
template <class Rep, class Period>
result<semaphore_permit> semaphore::acquire_timeout(std::size_t n,
                                                    std::chrono::duration<Rep, Period> timeout) {
  return acquire_forms::block_for(timeout, this, checked(n), detail::permit_itself{});
}

}  // namespace asyncband
