// asyncband/mpsc/bounded.hpp
#pragma once

#include <atomic>
#include <bit>
#include <cassert>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <thread>
#include <type_traits>
#include <utility>

#include "../detail/channel_core.hpp"
#include "../detail/select_send.hpp"
#include "../detail/spin_lock.hpp"
#include "../detail/wait_functions.hpp"
#include "../detail/wait_queue.hpp"
#include "../result.hpp"
#include "../semaphore.hpp"

namespace asyncband::mpsc {

template <class T>
class sender;
template <class T>
class receiver;
template <class T>
class permit;
template <class T>
class owned_permit;

/// The outcome of try_reserve: a permit, or full / disconnected.
template <class P>
class [[nodiscard]] try_reserve_result {
 public:
  try_reserve_result(P p) : permit_(std::move(p)) {}             // NOLINT(google-explicit-constructor)
  try_reserve_result(send_status failure) : status_(failure) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] send_status status() const noexcept { return status_; }
  [[nodiscard]] bool ok() const noexcept { return status_ == send_status::ok; }
  [[nodiscard]] bool full() const noexcept { return status_ == send_status::full; }
  [[nodiscard]] bool disconnected() const noexcept { return status_ == send_status::disconnected; }
  explicit operator bool() const noexcept { return ok(); }

  /// Precondition: ok().
  [[nodiscard]] P& value() & noexcept { return *permit_; }
  [[nodiscard]] P&& value() && noexcept { return std::move(*permit_); }
  [[nodiscard]] P& operator*() & noexcept { return *permit_; }
  [[nodiscard]] P* operator->() noexcept { return &*permit_; }

 private:
  std::optional<P> permit_;
  send_status status_ = send_status::ok;
};

namespace detail {

template <class T>
std::pair<sender<T>, receiver<T>> bounded_starting_at(std::size_t capacity, std::uint32_t first_index);

/// A place in the ring: a 32-bit counter that wraps (the capacity's ticket, see semaphore).
using place = std::uint32_t;

/// One cell of the ring. `seq` tells whose turn it is: index i may be written when seq == i,
/// and read when seq == i + 1; reading hands it to index i + size. The value is constructed in
/// place; `skip` marks a cell whose value's construction threw (nothing to receive).
template <class T>
struct cell {
  std::atomic<place> seq;
  bool skip = false;
  alignas(T) unsigned char storage[sizeof(T)];

  T& value() noexcept { return *std::launder(reinterpret_cast<T*>(storage)); }
};

/// A value this thread is constructing in a bounded channel's place `index`; they form a list
/// on the thread's stack, innermost first (a value's move constructor may send again). A
/// receive that finds its next place claimed and unwritten waits for the writer, unless that
/// writer is its own thread, which cannot finish while the receive waits inside it.
struct write_in_progress {
  const void* channel;
  place index;
  const write_in_progress* outer;
};
inline thread_local const write_in_progress* writes_in_progress = nullptr;

/// The shared state of a bounded channel: the capacity, the ring, the receiver's wake-up.
///
/// Capacity and order are kept apart. Capacity is a semaphore of `capacity` units (FIFO among
/// waiting senders, cancellation-safe, closable): a send, or a permit, first takes a unit. A
/// send then claims its cell with the next ticket of the semaphore's word (the claim counter),
/// constructs the value there and publishes it by storing the cell's `seq` (release). While
/// nobody waits for capacity, a send takes its unit and its ticket in one CAS; a permit's send
/// takes only the ticket (one fetch_add). The single receiver owns `head_`, reads a cell once
/// its seq says so (acquire), hands the cell on to the next lap, and returns the unit. A permit
/// is a unit with no cell yet: it can be held, moved or given back without touching the order
/// of messages. Cells in use (claimed, not yet received) never exceed the units taken, so at
/// most `capacity` <= physical size: a claimed cell is normally free already; the writer still
/// waits for its seq, which also gives it the happens-before of the cell's last read. Places
/// are 32-bit and wrap; the physical size is at most 2^31, so a cell's stamps of two laps never
/// collide. Whatever may wake a capacity waiter (a unit returned by the receiver, a permit or a
/// failed send; a cancelled send; close) holds a reference to the state meanwhile (a handle, a
/// permit's sender, which must outlive it, or the state's own), so the semaphore is kept alive
/// by its owner (detail::kept_alive_t) and its wake-ups take no pin.
template <class T>
class bounded_state : public channel_core<bounded_state<T>> {
  using core = channel_core<bounded_state<T>>;

 public:
  bounded_state(std::size_t capacity, place first_index)
      : logical_capacity_(capacity),
        mask_(static_cast<place>(std::bit_ceil(capacity) - 1)),
        cells_(new cell<T>[std::size_t{mask_} + 1]),
        capacity_(capacity, asyncband::detail::varying_count_t{}, first_index,
                  asyncband::detail::kept_alive_t{}),
        head_(first_index) {
    for (place i = first_index; i != static_cast<place>(first_index + mask_ + 1); ++i)
      at(i).seq.store(i, std::memory_order_relaxed);
  }
  bounded_state(const bounded_state&) = delete;
  bounded_state& operator=(const bounded_state&) = delete;

  /// The last reference is gone: every sender finished, so every claimed cell is published.
  /// Values never received are destroyed here, exactly once.
  ~bounded_state() {
    const place end = capacity_.next_ticket();
    assert(every_unit_is_back(end) &&
           "asyncband::mpsc::permit outlived its channel: every sender and the receiver are gone while a "
           "permit<T> still holds units of capacity (keep a sender alive while it is held, or use an "
           "owned_permit)");
    for (place i = head_; i != end; ++i) {
      cell<T>& c = at(i);
      if (!c.skip) c.value().~T();
    }
  }

  // --- sending ---------------------------------------------------------------------------------
  semaphore& capacity() noexcept { return capacity_; }
  [[nodiscard]] std::size_t logical_capacity() const noexcept { return logical_capacity_; }

  /// Sends `value` with one unit of capacity, which passes to the message (the receiver returns
  /// it). If constructing the value throws, the cell is published empty, holding the unit until
  /// the receiver passes it, and the exception propagates.
  template <class U>
  void push(semaphore_permit& units, U&& value) {
    units.split(1).forget();
    write_at(capacity_.take_ticket(), std::forward<U>(value));
  }
  /// Sends `value` (moved from only then) if a unit is available and nobody waits for one: the
  /// unit and the place in one CAS. Closed or full: false.
  bool try_push(T& value) {
    place i = 0;
    if (!capacity_.try_take_with_ticket(i)) return false;
    write_at(i, std::move(value));
    return true;
  }

  // --- receiving (the receiver only) -------------------------------------------------------------
  [[nodiscard]] std::size_t len() const noexcept {
    return static_cast<place>(capacity_.next_ticket() - head_);
  }

  /// Passes the empty cells at the head (their units go back).
  void skip_empty() noexcept {
    for (;;) {
      cell<T>& c = at(head_);
      if (c.seq.load(std::memory_order_acquire) != head_ + 1 || !c.skip) return;
      hand_on(c);
    }
  }
  [[nodiscard]] bool head_has_value() noexcept {
    const cell<T>& c = at(head_);
    return c.seq.load(std::memory_order_acquire) == head_ + 1 && !c.skip;
  }

  /// Nothing can come any more: no producer is left, or the channel is closed and every unit is
  /// back (no permit or send in flight can still publish). Read before looking at the ring: a
  /// producer publishes before it leaves.
  [[nodiscard]] bool finished() const noexcept {
    if (this->producers_gone()) return true;
    return this->closed() && capacity_.closed_count() == logical_capacity_;
  }
  /// Under the receiver's lock, as it is about to sleep: a read-modify-write of the claim
  /// counter, so every claim is ordered before it (and is looked at here) or after it (and its
  /// publisher sees the receiver asleep). True, "do not sleep", if the head is published, or if
  /// a place claimed before is still being written by another thread, which may not wake the
  /// receiver: await_outstanding_write() then waits for it. Writes by this very thread (the
  /// receive runs inside a value's construction) cannot finish while it waits; they publish
  /// later on this thread and so see the receiver asleep.
  [[nodiscard]] bool announce_sleep() noexcept {
    const place next = capacity_.announce_at_ticket();
    // Each place is looked at once: a head found unpublished and then taken for published
    // would let the receiver sleep through a write whose publisher read the flag early.
    for (place i = head_; i != next; ++i) {
      if (published(i)) {
        if (i == head_) {
          outstanding_ = i;  // nothing to wait for: take it
          return true;
        }
      } else if (!written_by_this_thread(i)) {
        outstanding_ = i;
        return true;
      }
    }
    return false;
  }
  /// After announce_sleep() said "do not sleep": waits for the write it found, if any.
  void await_outstanding_write() const noexcept {
    const place i = outstanding_;
    if (published(i)) return;
    asyncband::detail::at_test_point(asyncband::detail::test_point::awaiting_publication);
    asyncband::detail::spin_until([this, i] { return published(i); });
  }
  /// Under the receiver's lock, while it sleeps: passes the empty cells at its head.
  std::size_t pass_empty_locked() noexcept {
    std::size_t passed = 0;
    for (;;) {
      cell<T>& c = at(head_);
      if (c.seq.load(std::memory_order_acquire) != head_ + 1 || !c.skip) return passed;
      c.seq.store(head_ + mask_ + 1, std::memory_order_release);
      ++head_;
      ++passed;
    }
  }
  void return_units(std::size_t n) noexcept { capacity_.template give<false>(n); }
  /// Under the receiver's lock, while it sleeps (head_ is stable then).
  [[nodiscard]] bool value_waiting_locked() const noexcept {
    for (place i = head_;; ++i) {
      const cell<T>& c = at(i);
      if (c.seq.load(std::memory_order_acquire) != i + 1) return false;
      if (!c.skip) return true;
    }
  }
  /// After an ok completion of the receiver's wait: a value is at the head, past empty cells.
  result<T> take_head() {
    skip_empty();
    if (!head_has_value()) return wait_status::closed;  // defensive: an ok wake-up guarantees one
    return pop<result<T>>();
  }

  /// Precondition: head_has_value(). Moves the head's value once, into `Outcome` built in
  /// place; only then do the cell and the unit go on. If that move throws, the value stays
  /// where it is, for the next receive.
  template <class Outcome>
  Outcome pop() {
    cell<T>& c = at(head_);
    return asyncband::detail::take_into<Outcome>(c.value(), [this, &c]() noexcept {
      c.value().~T();
      hand_on(c);
    });
  }

  /// try_recv: a value, empty, or disconnected. Throws std::logic_error while a receive is
  /// pending: that receive's senders own the cursor while it sleeps (they pass empty cells).
  try_recv_result<T> try_pop() {
    receiving_.check();
    skip_empty();
    if (head_has_value()) return checked_pop();
    if (!finished()) return recv_status::empty;
    skip_empty();
    if (head_has_value()) return checked_pop();
    return recv_status::disconnected;
  }

  asyncband::detail::receive_in_progress& receiving() noexcept { return receiving_; }

  /// The receiver closes the channel (also when it goes): no new sends or reservations;
  /// queued senders end disconnected. Permits already held may still send.
  /// A sender woken inline by the capacity's close may destroy every handle, the closing
  /// receiver's included: the state keeps a reference of its own until the end.
  void close() noexcept {
    this->add_ref();
    this->mark_closed();
    capacity_.close(&on_unit_back, this);
    this->after_possible_end();  // nothing outstanding: a pending receive ends closed now
    this->drop_ref();
  }

  /// The receiver goes: later sends hand their value back; values received by nobody are
  /// destroyed now (those still being written, when the last reference goes).
  void receiver_leaves() noexcept {
    this->mark_receiver_gone();
    close();
    for (;;) {
      skip_empty();
      if (!head_has_value()) break;
      cell<T>& c = at(head_);
      c.value().~T();
      hand_on(c);
    }
    this->drop_ref();
  }

 private:
  friend class receiver<T>;

  /// try_recv's take: not while a receive is pending (the value is that receive's).
  try_recv_result<T> checked_pop() {
    receiving_.check();
    return pop<try_recv_result<T>>();
  }

  cell<T>& at(place i) const noexcept { return cells_[i & mask_]; }

  /// The debug check of the destructor: every unit of capacity is back (the receiver's going
  /// closed the semaphore, which counts them from then on), or held by a place still in the
  /// ring. A unit missing is a plain permit's, which outlived every sender (its contract) and
  /// would give it back into freed memory.
  [[nodiscard]] bool every_unit_is_back(place end) const noexcept {
    return capacity_.closed_count() + static_cast<place>(end - head_) == logical_capacity_;
  }

  /// Place i's value (or its emptiness) is written: the receiver's cursor has not passed it.
  [[nodiscard]] bool published(place i) const noexcept {
    return at(i).seq.load(std::memory_order_acquire) == static_cast<place>(i + 1);
  }

  /// Place `i` was claimed (the claim, a ticket taken with acquire, is ordered after the
  /// receiver's announced sleep if that came first: channel_core).
  template <class U>
  void write_at(place i, U&& value) {
    cell<T>& c = at(i);
    wait_for_turn(c, i);
    const write_in_progress writing{this, i, writes_in_progress};
    writes_in_progress = &writing;
    try {
      ::new (static_cast<void*>(c.storage)) T(std::forward<U>(value));
    } catch (...) {
      writes_in_progress = writing.outer;
      c.skip = true;
      publish(c, i);
      throw;
    }
    writes_in_progress = writing.outer;
    c.skip = false;
    publish(c, i);
  }

  [[nodiscard]] bool written_by_this_thread(place i) const noexcept {
    for (const write_in_progress* w = writes_in_progress; w != nullptr; w = w->outer) {
      if (w->channel == this && w->index == i) return true;
    }
    return false;
  }

  /// The cell is normally free at once; it can lag only while the receiver finishes reading the
  /// previous lap's value, a few instructions.
  static void wait_for_turn(const cell<T>& c, place i) noexcept {
    asyncband::detail::spin_until([&c, i] { return c.seq.load(std::memory_order_acquire) == i; });
  }

  void publish(cell<T>& c, place i) noexcept {
    c.seq.store(i + 1, std::memory_order_release);
    this->after_claimed_publish();
  }

  static void on_unit_back(void* self) noexcept { static_cast<bounded_state*>(self)->after_possible_end(); }

  /// The receiver is done with the head cell: the next lap may use it, and its unit goes back.
  void hand_on(cell<T>& c) noexcept {
    c.seq.store(head_ + mask_ + 1, std::memory_order_release);
    ++head_;
    capacity_.template give<false>(1);
  }

  // Read by everybody, written by nobody: apart from the capacity's word, which every send and
  // receive writes, and from the receiver's cursor.
  const std::size_t logical_capacity_;
  const place mask_;  // physical size - 1
  std::unique_ptr<cell<T>[]> cells_;
  alignas(64) semaphore capacity_;
  alignas(64) place head_;  // the receiver's cursor
  place outstanding_ = 0;   // the receiver's: the write announce_sleep() found in progress
  asyncband::detail::receive_in_progress receiving_;  // the receiver's
};

/// The capacity acquisitions of a channel: fallible (closed = disconnected).
using capacity_forms = asyncband::detail::acquire_forms<asyncband::detail::permit_itself, true>;

/// A send in a coroutine: takes a unit of capacity (awaiting it if the channel is full), then
/// publishes. The value waits in the awaiter, and comes back if the send fails.
template <class T, class Acquire>
class [[nodiscard("co_await it: the value is not sent until the send is awaited")]] send_awaiter {
 public:
  template <class... Args>
  send_awaiter(bounded_state<T>* s, T&& value, Args&&... acquisition)
      : state_(s), value_(std::move(value)), acquire_(std::forward<Args>(acquisition)...) {}
  send_awaiter(const send_awaiter&) = delete;
  send_awaiter& operator=(const send_awaiter&) = delete;

  /// With capacity at hand and no stop token, the value goes into the ring right here (unit and
  /// place in one CAS). A stop token is looked at first, so that form takes the general path.
  /// Throws std::logic_error if this awaiter sent or suspended before (awaited twice: its value
  /// is gone); both flags are known false where the awaiter was just built, so the test folds.
  bool await_ready() {
    if (sent_ || suspended_) [[unlikely]]
      asyncband::detail::throw_awaited_again();
    if constexpr (sends_when_ready) {
      sent_ = !state_->closed() && state_->try_push(value_);
      return sent_;  // else the acquisition's own lock-free attempt would fail the same way
    } else {
      return acquire_.await_ready();
    }
  }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    suspended_ = true;  // before the publication: nothing touches the awaiter after it
    return acquire_.await_suspend(h);
  }
  send_result<T> await_resume() {
    if (sent_) return {};
    return finish_send(*state_, acquire_.await_resume(), std::move(value_));
  }

 private:
  static constexpr bool sends_when_ready =
      std::is_same_v<Acquire, asyncband::detail::acquire_awaiter<asyncband::detail::permit_itself, true>>;

  friend struct asyncband::detail::send_select_access<send_awaiter>;
  /// Sent, or awaited (or selected) before.
  [[nodiscard]] bool spent() const noexcept { return sent_ || suspended_; }

  bounded_state<T>* state_;
  T value_;
  Acquire acquire_;
  bool sent_ = false;
  bool suspended_ = false;
};

/// After the capacity wait: publishes with the unit, or hands the value back.
template <class T>
send_result<T> finish_send(bounded_state<T>& s, result<semaphore_permit>&& unit,
                           std::type_identity_t<T>&& value) {
  if (!unit.ok()) {
    return {unit.cancelled() ? send_status::cancelled
                             : (unit.timed_out() ? send_status::timeout : send_status::disconnected),
            std::move(value)};
  }
  if (s.receiver_gone()) return {send_status::disconnected, std::move(value)};
  s.push(*unit, std::move(value));
  return {};
}

}  // namespace detail

/// Creates a bounded MPSC channel holding at most `capacity` values (exactly: storage rounds up
/// to a power of two, the capacity does not). Throws std::invalid_argument if capacity is 0 or
/// above semaphore::max().
template <class T>
std::pair<sender<T>, receiver<T>> bounded(std::size_t capacity);

/// The sending half of a bounded channel. Copyable: every copy is a producer; the channel
/// disconnects when the last producer (sender or owned permit) or the receiver goes.
///
/// Contract
/// - when_any: a send that lost its when_any is never granted a unit of capacity, and its value
///   comes back in the when_any's result (send_status::cancelled); the same for reserve().
/// - Order: values from one sender (one thread or coroutine sending in sequence) are received in
///   the order they were sent; sends from different producers interleave in the order in which
///   they claimed their places (one atomic step each, once it has its unit of capacity).
/// - Capacity waiters are served in FIFO order (the capacity is an asyncband::semaphore): a
///   send or reserve that waits is never overtaken by a later one or by a try_send.
/// - A send that does not deliver hands its value back: full (try_send), disconnected (the
///   receiver closed the channel or is gone), cancelled, timeout. Cancellation commits while
///   the send waits for capacity; once a unit is granted the value is delivered (a unit granted
///   to a send cancelled at that moment goes to the next waiter).
/// - Synchronization: constructing a value in the channel happens-before the receive that takes it.
/// - The value is constructed in the channel from the moved value; if that move throws, the
///   exception propagates, nothing is received, and the unit of capacity returns once the
///   receiver passes the empty place.
template <class T>
class sender {
  using state_type = detail::bounded_state<T>;

 public:
  sender(const sender& other) noexcept : state_(other.state_) {
    if (state_ != nullptr) state_->add_producer();  // a copy of a moved-from sender is moved-from
  }
  sender(sender&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  sender& operator=(const sender& other) noexcept {
    if (this != &other) *this = sender(other);
    return *this;
  }
  sender& operator=(sender&& other) noexcept {
    if (this != &other) {
      const sender departing(std::move(*this));  // goes last: it may wake the receiver inline
      state_ = std::exchange(other.state_, nullptr);
    }
    return *this;
  }
  ~sender() { reset(); }

  /// `co_await tx.send(v)` yields send_result<T>: ok, or disconnected with the value.
  auto send(T value) {
    state_type* const s = live();  // before any use of the state
    return detail::send_awaiter<T,
                                asyncband::detail::acquire_awaiter<asyncband::detail::permit_itself, true>>(
        s, std::move(value), &s->capacity(), 1, asyncband::detail::permit_itself{});
  }
  /// As above; also ends cancelled (with the value) when `stop` is requested first.
  auto send(T value, std::stop_token stop) {
    using acquire = asyncband::detail::wait_awaiter<
        asyncband::detail::semaphore_acquire<asyncband::detail::permit_itself, true>, true>;
    state_type* const s = live();
    return detail::send_awaiter<T, acquire>(s, std::move(value), std::move(stop), &s->capacity(), 1,
                                            asyncband::detail::permit_itself{});
  }
  /// Sends now if there is capacity: ok, full or disconnected (with the value).
  send_result<T> try_send(T value) {
    state_type& s = *live();
    if (s.closed()) return {send_status::disconnected, std::move(value)};
    if (s.try_push(value)) return {};
    return {s.closed() ? send_status::disconnected : send_status::full, std::move(value)};
  }
  /// The blocking twins of send.
  send_result<T> send_blocking(T value) {
    state_type& s = *live();
    if (!s.closed() && s.try_push(value)) return {};
    return detail::finish_send(
        s, detail::capacity_forms::block(&s.capacity(), 1, asyncband::detail::permit_itself{}),
        std::move(value));
  }
  send_result<T> send_blocking(T value, std::stop_token stop) {
    state_type& s = *live();
    return detail::finish_send(s,
                               detail::capacity_forms::block_until_stopped(
                                   std::move(stop), &s.capacity(), 1, asyncband::detail::permit_itself{}),
                               std::move(value));
  }
  template <class Rep, class Period>
  send_result<T> send_timeout(T value, std::chrono::duration<Rep, Period> timeout) {
    state_type& s = *live();
    return detail::finish_send(
        s, detail::capacity_forms::block_for(timeout, &s.capacity(), 1, asyncband::detail::permit_itself{}),
        std::move(value));
  }

  /// `co_await tx.reserve()` yields result<permit<T>>: a unit of capacity held for a later
  /// send, or closed (disconnected). The permit must not outlive this sender.
  auto reserve() { return reserve_many(1); }
  auto reserve(std::stop_token stop) { return reserve_many(1, std::move(stop)); }
  /// n units at once (n <= capacity()), for n later sends.
  auto reserve_many(std::size_t n) {
    return capacity_forms_for<make_permit>::await(&live()->capacity(), checked(n), make_permit{state_});
  }
  auto reserve_many(std::size_t n, std::stop_token stop) {
    return capacity_forms_for<make_permit>::await_until_stopped(std::move(stop), &live()->capacity(),
                                                                checked(n), make_permit{state_});
  }
  result<permit<T>> reserve_blocking(std::size_t n = 1) {
    return capacity_forms_for<make_permit>::block(&live()->capacity(), checked(n), make_permit{state_});
  }
  /// A permit now, or full / disconnected.
  try_reserve_result<permit<T>> try_reserve(std::size_t n = 1) {
    state_type& s = *live();
    if (s.closed()) return send_status::disconnected;
    std::optional<semaphore_permit> units = s.capacity().try_acquire(checked(n));
    if (!units) return s.closed() ? send_status::disconnected : send_status::full;
    return permit<T>(&s, std::move(*units));
  }

  /// As reserve(), but the permit keeps the channel alive and counts as a producer by itself.
  auto reserve_owned(std::size_t n = 1) {
    return capacity_forms_for<make_owned_permit>::await(&live()->capacity(), checked(n),
                                                        make_owned_permit{state_});
  }
  auto reserve_owned(std::size_t n, std::stop_token stop) {
    return capacity_forms_for<make_owned_permit>::await_until_stopped(std::move(stop), &live()->capacity(),
                                                                      checked(n), make_owned_permit{state_});
  }
  try_reserve_result<owned_permit<T>> try_reserve_owned(std::size_t n = 1) {
    try_reserve_result<permit<T>> p = try_reserve(n);
    if (!p) return p.status();
    return owned_permit<T>(std::move(*p));
  }

  /// The receiver closed the channel or is gone: sends hand their value back.
  [[nodiscard]] bool is_closed() const noexcept { return state_ == nullptr || state_->closed(); }
  [[nodiscard]] std::size_t capacity() const noexcept {
    return state_ == nullptr ? 0 : state_->logical_capacity();
  }

 private:
  template <class U>
  friend std::pair<sender<U>, receiver<U>> detail::bounded_starting_at(std::size_t, std::uint32_t);
  template <class>
  friend class owned_permit;
  explicit sender(state_type* s) noexcept : state_(s) {}

  struct make_permit {
    state_type* state;
    permit<T> operator()(semaphore_permit&& units) const noexcept {
      return permit<T>(state, std::move(units));
    }
  };
  struct make_owned_permit {
    state_type* state;
    owned_permit<T> operator()(semaphore_permit&& units) const noexcept {
      return owned_permit<T>(permit<T>(state, std::move(units)));
    }
  };
  template <class Make>
  using capacity_forms_for = asyncband::detail::acquire_forms<Make, true>;

  state_type* live() const {
    if (state_ == nullptr) throw std::logic_error("asyncband::mpsc::sender: moved from");
    return state_;
  }
  std::size_t checked(std::size_t n) const {
    if (n == 0 || n > live()->logical_capacity())
      throw std::invalid_argument("asyncband::mpsc::sender::reserve: n must be in [1, capacity()]");
    return n;
  }
  void reset() noexcept {
    if (state_ != nullptr) std::exchange(state_, nullptr)->drop_producer();
  }

  state_type* state_;
};

/// Units of capacity reserved for later sends, without a place in the order yet: other values
/// flow while it is held, and each send() takes its place when it is made. Destroying it
/// returns the unused units. Move-only; it must not outlive the sender that reserved it (use an
/// owned_permit for that). A debug build asserts ("permit outlived its sender") when a permit
/// sends or is destroyed with units after every sender is gone, and ("permit outlived its
/// channel") when the channel goes (every sender and the receiver gone) while a plain permit
/// still holds units; NDEBUG builds pay nothing for the checks.
template <class T>
class [[nodiscard]] permit {
 public:
  permit(permit&&) noexcept = default;
  permit& operator=(permit&&) noexcept = default;
  permit(const permit&) = delete;
  permit& operator=(const permit&) = delete;
  /// Its units go back; a debug build asserts that the sender that reserved them is still there.
  ~permit() {
    assert((!units_ || !state_->producers_gone()) && "asyncband::mpsc::permit outlived its sender");
  }

  /// Units left.
  [[nodiscard]] std::size_t size() const noexcept { return units_.count(); }
  explicit operator bool() const noexcept { return static_cast<bool>(units_); }

  /// Sends with one unit: ok, or disconnected with the value if the receiver is gone (the unit
  /// stays). A receiver that only closed the channel still receives it.
  /// Precondition (std::logic_error): size() > 0.
  send_result<T> send(T value) {
    if (!units_) throw std::logic_error("asyncband::mpsc::permit: no unit left");
    assert(!state_->producers_gone() && "asyncband::mpsc::permit outlived its sender");
    if (state_->receiver_gone()) return {send_status::disconnected, std::move(value)};
    state_->push(units_, std::move(value));
    return {};
  }

 private:
  friend class sender<T>;
  friend class owned_permit<T>;
  permit(detail::bounded_state<T>* s, semaphore_permit&& units) noexcept
      : state_(s), units_(std::move(units)) {}

  detail::bounded_state<T>* state_;
  semaphore_permit units_;
};

/// A permit that keeps the channel alive and counts as a producer: it may outlive every
/// sender, and the receiver sees the channel disconnected only once it is gone too.
template <class T>
class [[nodiscard]] owned_permit {
 public:
  owned_permit(owned_permit&& other) noexcept
      : permit_(std::move(other.permit_)), owner_(std::exchange(other.owner_, nullptr)) {}
  owned_permit& operator=(owned_permit&& other) noexcept {
    if (this != &other) {
      // The old units and reference go last, from a local: returning units may resume a sender
      // inline that destroys this permit at once (last one out).
      const owned_permit departing(std::move(*this));
      permit_ = std::move(other.permit_);
      owner_ = std::exchange(other.owner_, nullptr);
    }
    return *this;
  }
  owned_permit(const owned_permit&) = delete;
  owned_permit& operator=(const owned_permit&) = delete;
  ~owned_permit() {
    permit_.units_.release();  // before the reference goes: the state must outlive it
    reset();
  }

  [[nodiscard]] std::size_t size() const noexcept { return permit_.size(); }
  explicit operator bool() const noexcept { return static_cast<bool>(permit_); }
  send_result<T> send(T value) { return permit_.send(std::move(value)); }

 private:
  friend class sender<T>;
  explicit owned_permit(permit<T>&& p) noexcept : permit_(std::move(p)), owner_(permit_.state_) {
    owner_->add_producer();
  }
  void reset() noexcept {
    if (owner_ != nullptr) std::exchange(owner_, nullptr)->drop_producer();
  }

  permit<T> permit_;
  detail::bounded_state<T>* owner_;
};

/// The receiving half of a bounded channel. Move-only; destroying it disconnects the channel
/// (later sends hand their value back) and destroys the values nobody received.
///
/// Contract
/// - when_any: a receive takes its value only if it wins; a losing one leaves the value at the
///   head, for the next receive.
/// - recv() yields result<T>: a value, or wait_status::closed once nothing can come any more
///   (every producer is gone, or the channel is closed and no permit or accepted send is
///   outstanding) and every accepted value has been received. It is cancel-safe: a cancelled
///   or destroyed receive takes nothing.
/// - close(): no new sends or reservations (they report disconnected; senders waiting for
///   capacity are woken with it); values already accepted, and sends of permits held at the
///   time, are still received.
/// - One receive at a time: a receive (a recv() awaiter, from its creation to its destruction,
///   or a blocking receive) excludes any other. Another recv(), recv_blocking() or recv_timeout()
///   meanwhile throws std::logic_error and leaves the pending receive undisturbed; so does any
///   try_recv() (while the receive sleeps, senders move the cursor past empty cells).
///   The receiver must outlive its receives (their awaiters included).
/// - Every receive form (block_on(rx.recv()) included) moves the value exactly once, from the
///   channel into the result; if that move throws, the exception propagates and the value stays
///   in the channel, for the next receive.
/// - A receive whose next value is being constructed by another thread waits for that move
///   construction (spinning, then yielding; a stop request or deadline is looked at after it)
///   rather than sleeping: this saves every send a fence. So T's move constructor must not
///   wait for anything the receiver's thread or executor does, nor switch stackful fibers. A
///   receive resumed inline from inside a move constructor running on its own thread is
///   recognised and sleeps instead.
template <class T>
class [[nodiscard]] receiver : public detail::receiver_handle<detail::bounded_state<T>, T> {
 public:
  [[nodiscard]] std::size_t capacity() const noexcept {
    return this->state_ == nullptr ? 0 : this->state_->logical_capacity();
  }

 private:
  template <class U>
  friend std::pair<sender<U>, receiver<U>> detail::bounded_starting_at(std::size_t, std::uint32_t);
  explicit receiver(detail::bounded_state<T>* s) noexcept
      : detail::receiver_handle<detail::bounded_state<T>, T>(s) {}
};

namespace detail {
/// For tests of counter wrap-around: a channel whose indexes start at `first_index`.
template <class T>
std::pair<sender<T>, receiver<T>> bounded_starting_at(std::size_t capacity, std::uint32_t first_index) {
  if (capacity == 0 || capacity > semaphore::max())
    throw std::invalid_argument("asyncband::mpsc::bounded: capacity must be in [1, semaphore::max()]");
  auto* state = new bounded_state<T>(capacity, first_index);
  return {sender<T>(state), receiver<T>(state)};
}
}  // namespace detail

template <class T>
std::pair<sender<T>, receiver<T>> bounded(std::size_t capacity) {
  return detail::bounded_starting_at<T>(capacity, 0);
}

}  // namespace asyncband::mpsc

namespace asyncband::detail {
/// A bounded MPSC send is a when_any branch.
template <class T, class Acquire>
struct select_access<mpsc::detail::send_awaiter<T, Acquire>>
    : asyncband::detail::send_select_access<mpsc::detail::send_awaiter<T, Acquire>> {};
}  // namespace asyncband::detail
