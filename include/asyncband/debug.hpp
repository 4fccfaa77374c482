// SPDX-License-Identifier: Apache-2.0
// asyncband/debug.hpp: debug output for every primitive, guard, channel half, permit and
// outcome: `operator<<` on a std::ostream, and a std::formatter where the standard library has
// one. Opt-in: the core headers never include <ostream>; a program that prints includes this.
//
//   std::cout << m << '\n';                 // asyncband::mutex{locked, waiters: 2}
//   std::cout << tx << '\n';                // asyncband::mpsc::sender{capacity: 8, free: 3, closed: false}
//   std::string s = std::format("{}", ev);  // asyncband::manual_reset_event{set, waiters: 0}
//
// What is shown is a snapshot, possibly stale by the time it is read. It is read with atomic
// loads; where it lives under a primitive's internal lock (the waiters, a barrier's count), the
// lock is held only to copy a few words and count at most 64 waiters, and nothing is written to
// the stream until it is released. No user code runs under the lock, and a primitive's value is
// never printed through the primitive: a mutex or rwlock shows only whether it is held (print
// the value through a guard), a once_cell or a watch channel shows its value because readers
// reach it without any lock.
//
// Format: `asyncband::<name>{state, field: value, ...}`. A value is written with its own
// operator<< if it has one, as `...` otherwise. A waiter count above 64 shows as `64+`. A handle
// without a channel (moved from) shows as `{moved-from}`. Outcomes show as their status, with
// their payload in parentheses: `ok(42)`, `closed(7)`, `lagged(3)`, `cancelled`.
//
// std::formatter: specialised for each of these types (format spec "{}" only) where the standard
// library has std::format: __cpp_lib_format is defined, or libc++ 17 or later. libc++ 16 has it
// only under -fexperimental-library, and says so nowhere: there, define ASYNCBAND_STD_FORMAT=1.
// ASYNCBAND_STD_FORMAT=0 leaves the formatters out.
//
// Threads: printing reads what the const member functions read, and may run wherever they may
// (a primitive from any thread; a handle from the thread that uses it, or from any thread on a
// copy of it). An MPSC receiver is read as its own len() reads it: from the thread that receives. Never print
// a primitive from a test hook of the waiter core (it runs under the primitive's lock).
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <version>

#include "asyncband.hpp"

#if !defined(ASYNCBAND_STD_FORMAT)
// libc++ has a stable <format> from 17 on without defining __cpp_lib_format (its release notes).
#if defined(__cpp_lib_format) || (defined(_LIBCPP_VERSION) && _LIBCPP_VERSION >= 170000)
#define ASYNCBAND_STD_FORMAT 1
#else
#define ASYNCBAND_STD_FORMAT 0
#endif
#endif
#if ASYNCBAND_STD_FORMAT
#include <format>
#endif

namespace asyncband::detail {

/// A type the debug output can write: it has an operator<< on std::ostream.
template <class T>
concept debug_printable = requires(std::ostream& os, const T& value) { os << value; };

/// Writes `value` with its operator<<, or `...` for a type without one.
template <class T>
void write_value(std::ostream& os, const T& value) {
  if constexpr (debug_printable<T>) {
    os << value;
  } else {
    os << "...";
  }
}

/// "true" or "false", whatever the stream's boolalpha flag.
inline const char* bool_name(bool b) noexcept {
  return b ? "true" : "false";
}

/// How many waiters a queue held: counted under its lock, at most `limit` (`64+` beyond).
struct waiter_count {
  static constexpr std::size_t limit = 64;
  std::size_t counted = 0;
  bool more = false;

  friend std::ostream& operator<<(std::ostream& os, waiter_count c) {
    os << c.counted;
    if (c.more) os << '+';
    return os;
  }
};

/// Under the queue's lock: the first `waiter_count::limit` waiters, and whether there are more.
inline waiter_count count_waiters(const wait_list& waiters) noexcept {
  waiter_count c;
  for (const waiter* w = waiters.front(); w != nullptr; w = w->next) {
    if (c.counted == waiter_count::limit) {
      c.more = true;
      break;
    }
    ++c.counted;
  }
  return c;
}

/// The snapshots the debug output shows, read from the primitives' private state (each grants
/// it access with a friend declaration; see detail/debug_access.hpp).
struct debug_access {
  static waiter_count waiters(wait_queue& queue) noexcept {
    const std::lock_guard lock(queue.mutex());
    return count_waiters(queue.waiters());
  }

  // --- the semaphore and the locks built on it ----------------------------------------------------
  struct semaphore_state {
    std::size_t available = 0;
    std::size_t deficit = 0;
    std::size_t head_granted = 0;  // the partial grant of the oldest waiter
    waiter_count waiters;
  };
  static semaphore_state state(const semaphore& s) noexcept {
    semaphore_state st;
    const std::lock_guard lock(s.queue_.mutex());
    const wait_list& queued = s.queue_.waiters();
    st.available = s.available();
    st.deficit = s.deficit_;
    if (!queued.empty()) st.head_granted = static_cast<const semaphore_waiter&>(*queued.front()).granted();
    st.waiters = count_waiters(queued);
    return st;
  }
  template <class T>
  static semaphore_state state(const mutex<T>& m) noexcept {
    return state(m.semaphore_);
  }
  template <class T>
  static semaphore_state state(const rwlock<T>& l) noexcept {
    return state(l.semaphore_);
  }

  // --- events, countdowns -------------------------------------------------------------------------
  struct flag_state {
    bool set = false;
    waiter_count waiters;
  };
  /// manual_reset_event, auto_reset_event: is_set() and the waiters, in one hold of the lock.
  template <class Event>
  static flag_state state(const Event& e) noexcept
    requires std::is_same_v<Event, manual_reset_event> || std::is_same_v<Event, auto_reset_event>
  {
    const std::lock_guard lock(e.queue_.mutex());
    return {e.is_set(), count_waiters(e.queue_.waiters())};
  }
  static waiter_count waiters(const latch& l) noexcept { return waiters(l.queue_); }
  static waiter_count waiters(const condvar& cv) noexcept { return waiters(cv.queue_); }
  static waiter_count waiters(const wait_group& g) noexcept { return waiters(g.state_->queue); }
  static bool empty(const wait_group& g) noexcept { return g.state_ == nullptr; }

  struct barrier_state {
    std::ptrdiff_t remaining = 0;
    std::uint64_t generation = 0;
    waiter_count waiters;
  };
  static barrier_state state(const barrier& b) noexcept {
    const std::lock_guard lock(b.queue_.mutex());
    return {b.remaining_.load(std::memory_order_relaxed), b.generation(), count_waiters(b.queue_.waiters())};
  }

  struct phaser_state {
    std::uint64_t phase = 0;
    std::size_t participants = 0;
    std::size_t unarrived = 0;
    bool closed = false;
    waiter_count waiters;
  };
  static phaser_state state(const phaser& p) noexcept {
    const std::lock_guard lock(p.queue_.mutex());
    return {p.phase_locked(), p.registered_, p.unarrived_, p.closed_locked(),
            count_waiters(p.queue_.waiters())};
  }
  /// A participant's own view: registered (else nothing to show), and arrived in the phase now.
  static bool arrived_now(const phaser_participant& pp) noexcept {
    return pp.arrived_ && pp.arrived_in_ == pp.phaser_->phase();
  }

  // --- the once family ------------------------------------------------------------------------------
  enum class gate_phase : unsigned char { idle, running, completed };
  struct gate_state {
    gate_phase phase = gate_phase::idle;
    waiter_count waiters;
  };
  static gate_state state(const once_gate& g) noexcept {
    const std::lock_guard lock(g.queue_.mutex());
    const std::uint8_t s = g.state_.load(std::memory_order_acquire);
    const gate_phase phase = s == once_gate::done      ? gate_phase::completed
                             : s == once_gate::running ? gate_phase::running
                                                       : gate_phase::idle;
    return {phase, count_waiters(g.queue_.waiters())};
  }
  static gate_state state(const once& o) noexcept { return state(o.gate_); }
  template <class T>
  static gate_state state(const once_cell<T>& c) noexcept {
    return state(c.gate_);
  }

  // --- shutdown ---------------------------------------------------------------------------------------
  static const shutdown_state* state(const shutdown_observer& o) noexcept { return o.state_.get(); }
  static const shutdown_state* state(const shutdown::sender& tx) noexcept { return tx.state_.get(); }

  // --- channels ---------------------------------------------------------------------------------------
  template <class State>
  static State* state(const sender_handle<State>& tx) noexcept {
    return tx.state_;
  }
  template <class State, class Wait, template <class> class ManyWait>
  static State* state(const receiving_end<State, Wait, ManyWait>& rx) noexcept {
    return rx.state_;
  }
  /// A broadcast receiver's ring: null once moved from.
  template <class T, broadcast::mode M>
  static const auto* ring(const broadcast::receiver<T, M>& rx) noexcept {
    return rx.rx_.ring;
  }

  // --- watch ---------------------------------------------------------------------------------------
  template <class T>
  static const watch::detail::state<T>* state(const watch::sender<T>& tx) noexcept {
    return tx.state_;
  }
  template <class T>
  static const watch::detail::state<T>* state(const watch::receiver<T>& rx) noexcept {
    return rx.state_;
  }
  template <class T>
  static bool empty(const watch::borrowed<T>& b) noexcept {
    return b.cell_ == nullptr;
  }
};

/// `, outcome: o` for a when_any's winner whose outcome is a value (not a wait's std::monostate).
template <class Outcome>
void write_winner(std::ostream& os, const Outcome* outcome) {
  if constexpr (!std::is_same_v<Outcome, std::monostate>) {
    if (outcome == nullptr) return;
    os << ", outcome: ";
    write_value(os, *outcome);
  }
}

/// `name(payload)` for an outcome that carries one, `name` otherwise.
template <class T>
std::ostream& write_outcome(std::ostream& os, const char* status, const T* payload) {
  os << status;
  if (payload == nullptr) return os;
  os << '(';
  write_value(os, *payload);
  return os << ')';
}

/// The full name of a channel family's handles, by the state type.
template <class State>
struct channel_family;
template <class T>
struct channel_family<mpsc::detail::bounded_state<T>> {
  static constexpr const char* prefix = "asyncband::mpsc::";
};
template <class T>
struct channel_family<mpsc::detail::unbounded_state<T>> {
  static constexpr const char* prefix = "asyncband::mpsc::unbounded_";
};
template <class T>
struct channel_family<mpmc::detail::bounded_state<T>> {
  static constexpr const char* prefix = "asyncband::mpmc::";
};
template <class T>
struct channel_family<mpmc::detail::unbounded_state<T>> {
  static constexpr const char* prefix = "asyncband::mpmc::unbounded_";
};

/// `asyncband::mpsc::sender{capacity: 64, free: 59, closed: false}`; an MPMC sender adds `len`
/// first (an MPSC channel's length is the receiver's to read).
template <class State>
std::ostream& operator<<(std::ostream& os, const bounded_sender<State>& tx) {
  os << channel_family<State>::prefix << "sender{";
  const State* s = debug_access::state(tx);
  if (s == nullptr) return os << "moved-from}";
  if constexpr (State::multi_consumer) os << "len: " << s->len() << ", ";
  return os << "capacity: " << tx.capacity() << ", free: " << tx.free_capacity()
            << ", closed: " << bool_name(tx.is_closed()) << '}';
}

/// `asyncband::mpsc::unbounded_sender{len: 3, closed: false}`.
template <class State>
std::ostream& operator<<(std::ostream& os, const unbounded_sender<State>& tx) {
  os << channel_family<State>::prefix << "sender{";
  const State* s = debug_access::state(tx);
  if (s == nullptr) return os << "moved-from}";
  return os << "len: " << s->len() << ", closed: " << bool_name(tx.is_closed()) << '}';
}

/// `asyncband::mpsc::permit{units: 2}`.
template <class State>
std::ostream& operator<<(std::ostream& os, const bounded_permit<State>& p) {
  return os << channel_family<State>::prefix << "permit{units: " << p.size() << '}';
}
/// `asyncband::mpsc::owned_permit{units: 2}`.
template <class State>
std::ostream& operator<<(std::ostream& os, const bounded_owned_permit<State>& p) {
  return os << channel_family<State>::prefix << "owned_permit{units: " << p.size() << '}';
}

/// A channel receiver: `prefix + receiver{len: 2[, capacity: 8], closed: false}`.
template <class Receiver, class State>
std::ostream& write_receiver(std::ostream& os, const Receiver& rx, const State* s, bool closed) {
  os << channel_family<State>::prefix << "receiver{";
  if (s == nullptr) return os << "moved-from}";
  os << "len: " << rx.len();
  if constexpr (requires { rx.capacity(); }) os << ", capacity: " << rx.capacity();
  return os << ", closed: " << bool_name(closed) << '}';
}

}  // namespace asyncband::detail

namespace asyncband {

// --- outcomes -----------------------------------------------------------------------------------------

/// `ok`, `cancelled`, `timeout`, `closed`.
inline std::ostream& operator<<(std::ostream& os, wait_status s) {
  return os << to_string(s);
}
/// `ok`, `full`, `closed`, `cancelled`, `timeout`.
inline std::ostream& operator<<(std::ostream& os, send_status s) {
  return os << to_string(s);
}
/// `ok`, `empty`, `closed`.
inline std::ostream& operator<<(std::ostream& os, recv_status s) {
  return os << to_string(s);
}

/// `ok(value)` (`ok` for result<void>), or the status that ended the wait.
template <class T>
std::ostream& operator<<(std::ostream& os, const result<T>& r) {
  if constexpr (std::is_void_v<T>) {
    return os << r.status();
  } else {
    return detail::write_outcome(os, to_string(r.status()), r.ok() ? &r.value() : nullptr);
  }
}

// send_result, try_recv_result and try_reserve_result give their payload through non-const
// value() only (to hand it back by move); it is only read here.

/// `ok`, or the status with the value handed back: `closed(7)`.
template <class T>
std::ostream& operator<<(std::ostream& os, const send_result<T>& r) {
  auto& payload = const_cast<send_result<T>&>(r);
  return detail::write_outcome(os, to_string(r.status()), r.ok() ? nullptr : &payload.value());
}

/// `ok(value)`, `empty`, `closed`.
template <class T>
std::ostream& operator<<(std::ostream& os, const try_recv_result<T>& r) {
  auto& payload = const_cast<try_recv_result<T>&>(r);
  return detail::write_outcome(os, to_string(r.status()), r.ok() ? &payload.value() : nullptr);
}

/// `ok(permit)`, `full`, `closed`.
template <class P>
std::ostream& operator<<(std::ostream& os, const try_reserve_result<P>& r) {
  auto& payload = const_cast<try_reserve_result<P>&>(r);
  return detail::write_outcome(os, to_string(r.status()), r.ok() ? &payload.value() : nullptr);
}

/// `value(v)` or `error(e)`.
template <class T, class E>
std::ostream& operator<<(std::ostream& os, const init_result<T, E>& r) {
  if (r.has_value()) return detail::write_outcome(os, "value", &r.value());
  return detail::write_outcome(os, "error", &r.error());
}

/// `asyncband::barrier_wait_result{leader: true}`.
inline std::ostream& operator<<(std::ostream& os, const barrier_wait_result& r) {
  return os << "asyncband::barrier_wait_result{leader: " << detail::bool_name(r.is_leader()) << '}';
}

/// `asyncband::phase_id{3}`.
inline std::ostream& operator<<(std::ostream& os, phase_id p) {
  return os << "asyncband::phase_id{" << p.value() << '}';
}

/// `asyncband::any_result{index: 1, outcome: ok(42)}` (no outcome for a wait that yields
/// nothing), or `asyncband::any_result{cancelled}`.
template <class... Outcomes>
std::ostream& operator<<(std::ostream& os, const any_result<Outcomes...>& r) {
  os << "asyncband::any_result{";
  if (r.cancelled()) return os << "cancelled}";
  os << "index: " << r.index();
  auto& outcomes = const_cast<any_result<Outcomes...>&>(r);  // get<I>() is non-const: read only
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    const auto winner = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
      if (J != r.index()) return false;
      detail::write_winner(os, r.template has<J>() ? &outcomes.template get<J>() : nullptr);
      return true;
    };
    (void)(winner(std::integral_constant<std::size_t, I>{}) || ...);
  }(std::index_sequence_for<Outcomes...>{});
  return os << '}';
}

/// `asyncband::selection{index: 1, size: 3, outcome: ok(42)}`, or
/// `asyncband::selection{cancelled, size: 3}`.
template <class Outcome>
std::ostream& operator<<(std::ostream& os, const selection<Outcome>& s) {
  os << "asyncband::selection{";
  if (s.cancelled()) return os << "cancelled, size: " << s.size() << '}';
  os << "index: " << s.index() << ", size: " << s.size();
  auto& outcomes = const_cast<selection<Outcome>&>(s);  // get(i) is non-const: read only
  detail::write_winner(os, s.has(s.index()) ? &outcomes.get(s.index()) : nullptr);
  return os << '}';
}

// --- events, countdowns, lifecycle ------------------------------------------------------------------

/// `asyncband::manual_reset_event{set, waiters: 0}` or `{unset, waiters: 2}`.
inline std::ostream& operator<<(std::ostream& os, const manual_reset_event& e) {
  const auto st = detail::debug_access::state(e);
  return os << "asyncband::manual_reset_event{" << (st.set ? "set" : "unset") << ", waiters: " << st.waiters
            << '}';
}

/// `asyncband::auto_reset_event{set, waiters: 0}` (a permit is stored) or `{unset, waiters: 2}`.
inline std::ostream& operator<<(std::ostream& os, const auto_reset_event& e) {
  const auto st = detail::debug_access::state(e);
  return os << "asyncband::auto_reset_event{" << (st.set ? "set" : "unset") << ", waiters: " << st.waiters
            << '}';
}

/// `asyncband::latch{count: 2, waiters: 1}`.
inline std::ostream& operator<<(std::ostream& os, const latch& l) {
  const detail::waiter_count waiters = detail::debug_access::waiters(l);
  return os << "asyncband::latch{count: " << l.count() << ", waiters: " << waiters << '}';
}

/// `asyncband::wait_group{members: 2, member: true, waiters: 0}`, or `{moved-from}`.
inline std::ostream& operator<<(std::ostream& os, const wait_group& g) {
  os << "asyncband::wait_group{";
  if (detail::debug_access::empty(g)) return os << "moved-from}";
  const detail::waiter_count waiters = detail::debug_access::waiters(g);
  return os << "members: " << g.members() << ", member: " << detail::bool_name(g.is_member())
            << ", waiters: " << waiters << '}';
}

/// `asyncband::barrier{participants: 3, remaining: 2, generation: 0, waiters: 1}`: `remaining`
/// arrivals complete the current generation (`waiters`: the coroutine and cancellable waits
/// queued; threads in a plain wait_blocking() queue no node: they sleep on the barrier's word).
inline std::ostream& operator<<(std::ostream& os, const barrier& b) {
  const auto st = detail::debug_access::state(b);
  return os << "asyncband::barrier{participants: " << b.participants() << ", remaining: " << st.remaining
            << ", generation: " << st.generation << ", waiters: " << st.waiters << '}';
}

/// `asyncband::phaser{phase: 3, participants: 2, unarrived: 1, closed: false, waiters: 0}`
/// (`waiters`: the coroutine and cancellable waits queued; plain threads park uncounted).
inline std::ostream& operator<<(std::ostream& os, const phaser& p) {
  const auto st = detail::debug_access::state(p);
  return os << "asyncband::phaser{phase: " << st.phase << ", participants: " << st.participants
            << ", unarrived: " << st.unarrived << ", closed: " << detail::bool_name(st.closed)
            << ", waiters: " << st.waiters << '}';
}

/// `asyncband::phaser_participant{phase: 3, arrived: false}` (the phaser's phase now, and
/// whether this participant arrived in it), or `{deregistered}`.
inline std::ostream& operator<<(std::ostream& os, const phaser_participant& pp) {
  os << "asyncband::phaser_participant{";
  if (!pp) return os << "deregistered}";
  return os << "phase: " << pp.phaser()->phase().value()
            << ", arrived: " << detail::bool_name(detail::debug_access::arrived_now(pp)) << '}';
}

/// `asyncband::phaser_batch{remaining: 2}`.
inline std::ostream& operator<<(std::ostream& os, const phaser_batch& b) {
  return os << "asyncband::phaser_batch{remaining: " << b.size() << '}';
}

namespace shutdown {
/// `asyncband::shutdown::sender{shutdown: false, receivers: 2}`, or `{moved-from}`.
inline std::ostream& operator<<(std::ostream& os, const sender& tx) {
  os << "asyncband::shutdown::sender{";
  const detail::shutdown_state* s = detail::debug_access::state(tx);
  if (s == nullptr) return os << "moved-from}";
  return os << "shutdown: " << detail::bool_name(s->signalled()) << ", receivers: " << tx.receivers() << '}';
}
}  // namespace shutdown

namespace detail {
/// A shutdown receiver or watcher: `name{shutdown: false}`, or `name{moved-from}`.
inline std::ostream& write_observer(std::ostream& os, const char* name, const shutdown_observer& o) {
  os << name << '{';
  const shutdown_state* s = debug_access::state(o);
  if (s == nullptr) return os << "moved-from}";
  return os << "shutdown: " << bool_name(s->signalled()) << '}';
}
}  // namespace detail

namespace shutdown {
/// `asyncband::shutdown::receiver{shutdown: false}`, or `{moved-from}`.
inline std::ostream& operator<<(std::ostream& os, const receiver& rx) {
  return detail::write_observer(os, "asyncband::shutdown::receiver", rx);
}
/// `asyncband::shutdown::watcher{shutdown: false}`, or `{moved-from}`.
inline std::ostream& operator<<(std::ostream& os, const watcher& w) {
  return detail::write_observer(os, "asyncband::shutdown::watcher", w);
}
}  // namespace shutdown

// --- the once family ---------------------------------------------------------------------------------

namespace detail {
/// "idle", "running" or "completed".
inline const char* gate_phase_name(debug_access::gate_phase p) noexcept {
  switch (p) {
    case debug_access::gate_phase::idle:
      return "idle";
    case debug_access::gate_phase::running:
      return "running";
    case debug_access::gate_phase::completed:
      return "completed";
  }
  return "unknown";
}
}  // namespace detail

/// `asyncband::once{idle, waiters: 0}`, `{running, waiters: 2}` or `{completed, waiters: 0}`.
inline std::ostream& operator<<(std::ostream& os, const once& o) {
  const auto st = detail::debug_access::state(o);
  return os << "asyncband::once{" << detail::gate_phase_name(st.phase) << ", waiters: " << st.waiters << '}';
}

/// `asyncband::once_cell{set, value: 42}`, or `{empty, waiters: 0}` / `{running, waiters: 1}`
/// while it has no value (running: an initialiser is running).
template <class T>
std::ostream& operator<<(std::ostream& os, const once_cell<T>& c) {
  os << "asyncband::once_cell{";
  if (const T* value = c.get()) {  // set for good: read without any lock, as get() readers do
    os << "set, value: ";
    detail::write_value(os, *value);
    return os << '}';
  }
  const auto st = detail::debug_access::state(c);
  if (st.phase == detail::debug_access::gate_phase::completed) {  // set meanwhile
    os << "set, value: ";
    detail::write_value(os, *c.get());
    return os << '}';
  }
  return os << (st.phase == detail::debug_access::gate_phase::running ? "running" : "empty")
            << ", waiters: " << st.waiters << '}';
}

/// `asyncband::once_map{size: 3}`: the keys with an entry (computed, or a call in progress).
template <class K, class V, class H, class E>
std::ostream& operator<<(std::ostream& os, const once_map<K, V, H, E>& m) {
  return os << "asyncband::once_map{size: " << m.size() << '}';
}

namespace singleflight {
/// `asyncband::singleflight::group{flights: 1}`: the keys with a flight in progress.
template <class K, class V, class H, class E>
std::ostream& operator<<(std::ostream& os, const group<K, V, H, E>& g) {
  return os << "asyncband::singleflight::group{flights: " << g.size() << '}';
}
}  // namespace singleflight

// --- locks ---------------------------------------------------------------------------------------------

/// `asyncband::semaphore{available: 3, waiters: 0}`; an outstanding deficit (reduce_permits)
/// shows after `available`: `{available: 0, deficit: 2, waiters: 0}`.
inline std::ostream& operator<<(std::ostream& os, const semaphore& s) {
  const auto st = detail::debug_access::state(s);
  os << "asyncband::semaphore{available: " << st.available;
  if (st.deficit != 0) os << ", deficit: " << st.deficit;
  return os << ", waiters: " << st.waiters << '}';
}

/// `asyncband::semaphore_permit{count: 2}`.
inline std::ostream& operator<<(std::ostream& os, const semaphore_permit& p) {
  return os << "asyncband::semaphore_permit{count: " << p.count() << '}';
}

/// `asyncband::owned_semaphore_permit{count: 2}`.
inline std::ostream& operator<<(std::ostream& os, const owned_semaphore_permit& p) {
  return os << "asyncband::owned_semaphore_permit{count: " << p.count() << '}';
}

/// `asyncband::mutex{locked, waiters: 2}` or `{unlocked, waiters: 0}`. Never the value: print it
/// through a guard.
template <class T>
std::ostream& operator<<(std::ostream& os, const mutex<T>& m) {
  const auto st = detail::debug_access::state(m);
  return os << "asyncband::mutex{" << (st.available == 0 ? "locked" : "unlocked")
            << ", waiters: " << st.waiters << '}';
}

/// `asyncband::rwlock{unlocked, waiters: 0}`, `{read-locked, readers: 2, waiters: 1}` or
/// `{write-locked, waiters: 0}` (max_readers() readers at once also show as write-locked). Never
/// the value: print it through a guard.
template <class T>
std::ostream& operator<<(std::ostream& os, const rwlock<T>& l) {
  const auto st = detail::debug_access::state(l);
  // Shares held: all of them but those available and those handed to the oldest waiter so far.
  const std::size_t held = l.max_readers() - std::min(l.max_readers(), st.available + st.head_granted);
  os << "asyncband::rwlock{";
  if (held == 0) {
    os << "unlocked";
  } else if (held == l.max_readers()) {
    os << "write-locked";
  } else {
    os << "read-locked, readers: " << held;
  }
  return os << ", waiters: " << st.waiters << '}';
}

namespace detail {
/// The name of each guard type (null for any other type).
template <class Guard>
inline constexpr const char* guard_name = nullptr;
template <class T>
inline constexpr const char* guard_name<mutex_guard<T>> = "asyncband::mutex_guard";
template <class U>
inline constexpr const char* guard_name<mapped_mutex_guard<U>> = "asyncband::mapped_mutex_guard";
template <class T>
inline constexpr const char* guard_name<owned_mutex_guard<T>> = "asyncband::owned_mutex_guard";
template <class U>
inline constexpr const char* guard_name<owned_mapped_mutex_guard<U>> = "asyncband::owned_mapped_mutex_guard";
template <class T>
inline constexpr const char* guard_name<rwlock_read_guard<T>> = "asyncband::rwlock_read_guard";
template <class T>
inline constexpr const char* guard_name<rwlock_write_guard<T>> = "asyncband::rwlock_write_guard";
template <class T>
inline constexpr const char* guard_name<owned_rwlock_read_guard<T>> = "asyncband::owned_rwlock_read_guard";
template <class T>
inline constexpr const char* guard_name<owned_rwlock_write_guard<T>> = "asyncband::owned_rwlock_write_guard";
}  // namespace detail

/// Every mutex and rwlock guard, owned and mapped ones too: `asyncband::mutex_guard{locked,
/// value: 42}`, or `{unlocked}` (unlocked, or moved from). The value is read through the guard,
/// which holds the lock.
template <class Guard>
  requires(detail::guard_name<Guard> != nullptr)
std::ostream& operator<<(std::ostream& os, const Guard& g) {
  os << detail::guard_name<Guard> << '{';
  if (!g.owns_lock()) return os << "unlocked}";
  os << "locked, value: ";
  detail::write_value(os, *g);
  return os << '}';
}

/// `asyncband::condvar{waiters: 2}`: the waits registered for a notification (not those
/// re-locking the mutex after one).
inline std::ostream& operator<<(std::ostream& os, const condvar& cv) {
  return os << "asyncband::condvar{waiters: " << detail::debug_access::waiters(cv) << '}';
}

// --- channels ------------------------------------------------------------------------------------------

namespace oneshot {
/// `asyncband::oneshot::sender{open}`, `{closed}` (the receiver closed or is gone), or `{spent}`
/// (sent, or moved from).
template <class T>
std::ostream& operator<<(std::ostream& os, const sender<T>& tx) {
  os << "asyncband::oneshot::sender{";
  if (!tx) return os << "spent}";
  return os << (tx.is_closed() ? "closed" : "open") << '}';
}
/// `asyncband::oneshot::receiver{pending}`, `{ready}` (a value waits to be taken),
/// `{terminated}` (no value will ever be received), or `{moved-from}`.
template <class T>
std::ostream& operator<<(std::ostream& os, const receiver<T>& rx) {
  os << "asyncband::oneshot::receiver{";
  if (asyncband::detail::debug_access::state(rx) == nullptr) return os << "moved-from}";
  if (rx.ready()) return os << "ready}";
  return os << (rx.is_terminated() ? "terminated" : "pending") << '}';
}
}  // namespace oneshot

namespace mpsc {
/// `asyncband::mpsc::receiver{len: 2, capacity: 8, closed: false}` (closed: by close(), or every
/// sender is gone: nothing new can come), or `{moved-from}`.
template <class T>
std::ostream& operator<<(std::ostream& os, const receiver<T>& rx) {
  const auto* s = asyncband::detail::debug_access::state(rx);
  return asyncband::detail::write_receiver(os, rx, s, s != nullptr && (s->closed() || s->producers_gone()));
}
/// `asyncband::mpsc::unbounded_receiver{len: 2, closed: false}`, or `{moved-from}`.
template <class T>
std::ostream& operator<<(std::ostream& os, const unbounded_receiver<T>& rx) {
  const auto* s = asyncband::detail::debug_access::state(rx);
  return asyncband::detail::write_receiver(os, rx, s, s != nullptr && (s->closed() || s->producers_gone()));
}
}  // namespace mpsc

namespace mpmc {
/// `asyncband::mpmc::receiver{len: 2, capacity: 8, closed: false}`, or `{moved-from}`.
template <class T>
std::ostream& operator<<(std::ostream& os, const receiver<T>& rx) {
  return asyncband::detail::write_receiver(os, rx, asyncband::detail::debug_access::state(rx),
                                           rx.is_closed());
}
/// `asyncband::mpmc::unbounded_receiver{len: 2, closed: false}`, or `{moved-from}`.
template <class T>
std::ostream& operator<<(std::ostream& os, const unbounded_receiver<T>& rx) {
  return asyncband::detail::write_receiver(os, rx, asyncband::detail::debug_access::state(rx),
                                           rx.is_closed());
}
}  // namespace mpmc

namespace broadcast {
/// The enumerator's name: "overflow" or "bounded".
inline const char* to_string(mode m) noexcept {
  return m == mode::overflow ? "overflow" : "bounded";
}

/// `ok`, `empty`, `lagged`, `closed`, `cancelled`, `timeout`.
inline std::ostream& operator<<(std::ostream& os, recv_status s) {
  return os << to_string(s);
}
/// `overflow` or `bounded`.
inline std::ostream& operator<<(std::ostream& os, mode m) {
  return os << to_string(m);
}

/// `ok(value)`, `lagged(3)` (the messages missed), or the status.
template <class T>
std::ostream& operator<<(std::ostream& os, const recv_result<T>& r) {
  if (r.lagged()) {
    const std::uint64_t missed = r.missed();
    return asyncband::detail::write_outcome(os, "lagged", &missed);
  }
  return asyncband::detail::write_outcome(os, to_string(r.status()), r.ok() ? &r.value() : nullptr);
}

/// `asyncband::broadcast::overflow_sender{len: 2, capacity: 16, receivers: 1, closed: false}`
/// (bounded_sender for a lossless channel; len: messages some receiver has not read), or
/// `{moved-from}`.
template <class T, mode M>
std::ostream& operator<<(std::ostream& os, const sender<T, M>& tx) {
  os << "asyncband::broadcast::" << to_string(M) << "_sender{";
  if (tx.capacity() == 0) return os << "moved-from}";  // a channel's capacity is at least 1
  return os << "len: " << tx.len() << ", capacity: " << tx.capacity()
            << ", receivers: " << tx.receiver_count()
            << ", closed: " << asyncband::detail::bool_name(tx.is_closed()) << '}';
}

/// `asyncband::broadcast::overflow_receiver{len: 2, capacity: 16, closed: false}` (len: the
/// messages this receiver has not read; above capacity, it lagged), or `{moved-from}`.
template <class T, mode M>
std::ostream& operator<<(std::ostream& os, const receiver<T, M>& rx) {
  os << "asyncband::broadcast::" << to_string(M) << "_receiver{";
  const auto* ring = asyncband::detail::debug_access::ring(rx);
  if (ring == nullptr) return os << "moved-from}";
  return os << "len: " << rx.len() << ", capacity: " << rx.capacity()
            << ", closed: " << asyncband::detail::bool_name(ring->is_closed()) << '}';
}
}  // namespace broadcast

namespace watch {
/// `asyncband::watch::sender{value: 42, receivers: 1}`, or `{moved-from}`. The value is read
/// through a borrow, without any lock.
template <class T>
std::ostream& operator<<(std::ostream& os, const sender<T>& tx) {
  os << "asyncband::watch::sender{";
  if (asyncband::detail::debug_access::state(tx) == nullptr) return os << "moved-from}";
  const borrowed<T> current = tx.borrow();
  os << "value: ";
  asyncband::detail::write_value(os, *current);
  return os << ", receivers: " << tx.receiver_count() << '}';
}

/// `asyncband::watch::receiver{value: 42, changed: false, closed: false}` (changed: a version
/// it has not seen; closed: the sender is gone), or `{moved-from}`.
template <class T>
std::ostream& operator<<(std::ostream& os, const receiver<T>& rx) {
  os << "asyncband::watch::receiver{";
  const auto* s = asyncband::detail::debug_access::state(rx);
  if (s == nullptr) return os << "moved-from}";
  const bool closed = detail::state<T>::is_closed(s->version_word());
  const borrowed<T> current = rx.borrow();
  os << "value: ";
  asyncband::detail::write_value(os, *current);
  return os << ", changed: " << asyncband::detail::bool_name(current.has_changed())
            << ", closed: " << asyncband::detail::bool_name(closed) << '}';
}

/// `asyncband::watch::borrowed{value: 42, changed: false}`, or `{moved-from}`.
template <class T>
std::ostream& operator<<(std::ostream& os, const borrowed<T>& b) {
  os << "asyncband::watch::borrowed{";
  if (asyncband::detail::debug_access::empty(b)) return os << "moved-from}";
  os << "value: ";
  asyncband::detail::write_value(os, *b);
  return os << ", changed: " << asyncband::detail::bool_name(b.has_changed()) << '}';
}
}  // namespace watch

}  // namespace asyncband

#if ASYNCBAND_STD_FORMAT
namespace asyncband::detail {
/// The std::formatter of every type above: the format spec "{}" only; writes what operator<<
/// writes.
struct debug_formatter {
  constexpr auto parse(std::format_parse_context& ctx) {
    const auto it = ctx.begin();
    if (it != ctx.end() && *it != '}')
      throw std::format_error("asyncband: debug output takes no format spec");
    return it;
  }
  template <class T, class Context>
  auto format(const T& value, Context& ctx) const {
    std::ostringstream os;
    os << value;
    const std::string text = os.str();
    return std::copy(text.begin(), text.end(), ctx.out());
  }
};
}  // namespace asyncband::detail

/// std::format("{}", x) for every type with debug output.
namespace std {
template <>
struct formatter<asyncband::wait_status> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::send_status> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::recv_status> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::barrier_wait_result> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::phase_id> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::manual_reset_event> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::auto_reset_event> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::latch> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::wait_group> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::barrier> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::phaser> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::phaser_participant> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::phaser_batch> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::shutdown::sender> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::shutdown::receiver> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::shutdown::watcher> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::once> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::semaphore> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::semaphore_permit> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::owned_semaphore_permit> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::condvar> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::broadcast::recv_status> : asyncband::detail::debug_formatter {};
template <>
struct formatter<asyncband::broadcast::mode> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::result<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::send_result<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::try_recv_result<T>> : asyncband::detail::debug_formatter {};
template <class P>
struct formatter<asyncband::try_reserve_result<P>> : asyncband::detail::debug_formatter {};
template <class T, class E>
struct formatter<asyncband::init_result<T, E>> : asyncband::detail::debug_formatter {};
template <class... O>
struct formatter<asyncband::any_result<O...>> : asyncband::detail::debug_formatter {};
template <class O>
struct formatter<asyncband::selection<O>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::broadcast::recv_result<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::once_cell<T>> : asyncband::detail::debug_formatter {};
template <class K, class V, class H, class E>
struct formatter<asyncband::once_map<K, V, H, E>> : asyncband::detail::debug_formatter {};
template <class K, class V, class H, class E>
struct formatter<asyncband::singleflight::group<K, V, H, E>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::mutex<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::rwlock<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::mutex_guard<T>> : asyncband::detail::debug_formatter {};
template <class U>
struct formatter<asyncband::mapped_mutex_guard<U>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::owned_mutex_guard<T>> : asyncband::detail::debug_formatter {};
template <class U>
struct formatter<asyncband::owned_mapped_mutex_guard<U>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::rwlock_read_guard<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::rwlock_write_guard<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::owned_rwlock_read_guard<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::owned_rwlock_write_guard<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::oneshot::sender<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::oneshot::receiver<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::mpsc::receiver<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::mpsc::unbounded_receiver<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::mpmc::receiver<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::mpmc::unbounded_receiver<T>> : asyncband::detail::debug_formatter {};
template <class S>
struct formatter<asyncband::detail::bounded_sender<S>> : asyncband::detail::debug_formatter {};
template <class S>
struct formatter<asyncband::detail::unbounded_sender<S>> : asyncband::detail::debug_formatter {};
template <class S>
struct formatter<asyncband::detail::bounded_permit<S>> : asyncband::detail::debug_formatter {};
template <class S>
struct formatter<asyncband::detail::bounded_owned_permit<S>> : asyncband::detail::debug_formatter {};
template <class T, asyncband::broadcast::mode M>
struct formatter<asyncband::broadcast::sender<T, M>> : asyncband::detail::debug_formatter {};
template <class T, asyncband::broadcast::mode M>
struct formatter<asyncband::broadcast::receiver<T, M>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::watch::sender<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::watch::receiver<T>> : asyncband::detail::debug_formatter {};
template <class T>
struct formatter<asyncband::watch::borrowed<T>> : asyncband::detail::debug_formatter {};
}  // namespace std
#endif  // ASYNCBAND_STD_FORMAT
