// asyncband/mpmc/bounded.hpp: the bounded MPMC channel: bounded(), sender, receiver. Each value
// goes to exactly one receiver. Its parts: detail/mpmc_bounded_state.hpp (the state: ring,
// capacity, the values' semaphore); the sending half and the permits are the bounded MPSC
// channel's (detail/bounded_sender.hpp, detail/bounded_permit.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>

#include "../detail/bounded_permit.hpp"
#include "../detail/bounded_sender.hpp"
#include "../detail/mpmc_bounded_state.hpp"
#include "../detail/receiving_end.hpp"
#include "../detail/semaphore_wait.hpp"
#include "../result.hpp"
#include "../semaphore.hpp"

namespace asyncband::mpmc {

/// The sending half of a bounded MPMC channel; its contract: detail::bounded_sender. It can
/// also close() the channel, and count its senders and receivers.
template <class T>
using sender = asyncband::detail::bounded_sender<detail::bounded_state<T>>;
/// Units of a bounded MPMC channel's capacity reserved for later sends (detail::bounded_permit).
template <class T>
using permit = asyncband::detail::bounded_permit<detail::bounded_state<T>>;
/// A permit that keeps the channel alive (detail::bounded_owned_permit).
template <class T>
using owned_permit = asyncband::detail::bounded_owned_permit<detail::bounded_state<T>>;

template <class T>
class receiver;

namespace detail {

/// A receive: an acquisition of one unit of the channel's `items_` semaphore (so it queues,
/// is cancelled and loses a when_any as an acquisition does; a unit it does not use goes to the
/// next receive), then the take of the value that unit stands for, moved once into the outcome.
template <class T>
class recv_wait : public asyncband::detail::semaphore_waiter {
 public:
  using value_type = T;
  using outcome_type = result<T>;
  static constexpr bool fallible = true;

  explicit recv_wait(bounded_state<T>* s) noexcept : semaphore_waiter(&s->items(), 1), state_(s) {}

  result<T> take() { return state_->template take<result<T>>(take_permit()); }

 private:
  bounded_state<T>* state_;
};

template <class T>
std::pair<sender<T>, receiver<T>> bounded_starting_at(std::size_t capacity, std::uint32_t first_index);

}  // namespace detail

/// Creates a bounded MPMC channel holding at most `capacity` values (exactly: storage rounds up
/// to a power of two, the capacity does not). Throws std::invalid_argument if capacity is 0 or
/// above semaphore::max().
template <class T>
std::pair<sender<T>, receiver<T>> bounded(std::size_t capacity);

/// The receiving half of a bounded MPMC channel. Copyable: every copy is a receiver, and each
/// value goes to exactly one receive of one of them. When the last receiver goes, the channel
/// is disconnected: later sends hand their value back, senders waiting for capacity end
/// disconnected, and the values nobody received are destroyed.
///
/// Contract
/// - Fairness: receives that wait are served in FIFO order, across every copy of the receiver;
///   a try_recv or a new receive never takes a value while a receive waits.
/// - Synchronization: a value's construction in the channel happens-before the receive that
///   takes it.
/// - Cancellation commits until the receive resumes. A receive cancelled (stop token, its frame
///   destroyed, a lost when_any, a timeout) takes nothing: if it had been woken for a value, the
///   value goes to the next waiting receive, or stays in the channel. No value is lost or
///   received twice.
/// - recv() yields result<T>: a value, or wait_status::closed once nothing can come any more
///   (the channel is closed or every producer is gone, and no permit or accepted send is
///   outstanding) and every accepted value has been received.
/// - close() (on either half): no new sends or reservations; what was accepted, and the sends
///   of permits held at the time, still drain to the receivers.
/// - Every receive form moves the value exactly once, from the channel into the result. If that
///   move throws, the exception propagates and the value stays in the channel, for the next
///   receive (ahead of the others). It stays in its cell of the ring: if receives on other
///   threads overtook the one that threw (claimed later values meanwhile), a send that comes
///   round the ring to that cell waits (spinning, then yielding) until a receive takes the value,
///   as it waits for a receive still moving its cell's previous value out. Such a send on the
///   only thread that receives, or inside that move, never finishes.
/// - A send whose construction of the value throws leaves an empty place, passed at once if it
///   is next in line, else by the receive that takes the value before it: its unit of capacity
///   comes back without any value following it.
/// - Several receives may be in progress at once, from any copies, threads or coroutines. Each
///   receiver must outlive its own receives (their awaiters included).
/// - A receive may wait for a value being constructed by another thread (spinning, then
///   yielding): T's move constructor must not wait for anything a receiver does. A receive from
///   inside the construction of a value sent to the same channel on the same thread (through
///   code that construction resumes inline) never finishes; debug builds assert.
template <class T>
class [[nodiscard]] receiver
    : public asyncband::detail::receiving_end<detail::bounded_state<T>, detail::recv_wait<T>> {
  using base = asyncband::detail::receiving_end<detail::bounded_state<T>, detail::recv_wait<T>>;

 public:
  receiver(receiver&&) noexcept = default;
  receiver& operator=(receiver&&) noexcept = default;
  /// Another receiver of the same channel (a moved-from receiver copies as moved-from).
  receiver(const receiver& other) noexcept : base(adopt(other.state_)) {}
  receiver& operator=(const receiver& other) noexcept {
    if (this != &other) *this = receiver(other);
    return *this;
  }
  ~receiver() = default;

  /// A value now: ok, empty, or disconnected (nothing left, and nothing can come).
  try_recv_result<T> try_recv() { return this->live()->try_take(); }
  /// Closes the channel: no new sends; what was accepted still drains.
  void close() noexcept {
    if (this->state_ != nullptr) this->state_->close();
  }
  /// The channel is closed (or every sender is gone).
  [[nodiscard]] bool is_closed() const noexcept { return this->state_ == nullptr || this->state_->closed(); }
  /// Values accepted and not yet received (including sends still being written).
  [[nodiscard]] std::size_t len() const noexcept { return this->state_ == nullptr ? 0 : this->state_->len(); }
  [[nodiscard]] bool empty() const noexcept { return len() == 0; }
  [[nodiscard]] std::size_t capacity() const noexcept {
    return this->state_ == nullptr ? 0 : this->state_->logical_capacity();
  }
  /// The senders (and owned permits) of the channel now.
  [[nodiscard]] std::size_t sender_count() const noexcept {
    return this->state_ == nullptr ? 0 : this->state_->sender_count();
  }
  /// The receivers of the channel now.
  [[nodiscard]] std::size_t receiver_count() const noexcept {
    return this->state_ == nullptr ? 0 : this->state_->receiver_count();
  }

 private:
  template <class U>
  friend std::pair<sender<U>, receiver<U>> detail::bounded_starting_at(std::size_t, std::uint32_t);
  explicit receiver(detail::bounded_state<T>* s) noexcept : base(s) {}

  static detail::bounded_state<T>* adopt(detail::bounded_state<T>* s) noexcept {
    if (s != nullptr) s->add_receiver();
    return s;
  }
};

namespace detail {
/// For tests of counter wrap-around: a channel whose indexes start at `first_index`.
template <class T>
std::pair<sender<T>, receiver<T>> bounded_starting_at(std::size_t capacity, std::uint32_t first_index) {
  if (capacity == 0 || capacity > semaphore::max())
    throw std::invalid_argument("asyncband::mpmc::bounded: capacity must be in [1, semaphore::max()]");
  auto* state = new bounded_state<T>(capacity, first_index);
  return {sender<T>(asyncband::detail::adopt_state_t{}, state), receiver<T>(state)};
}
}  // namespace detail

template <class T>
std::pair<sender<T>, receiver<T>> bounded(std::size_t capacity) {
  return detail::bounded_starting_at<T>(capacity, 0);
}

}  // namespace asyncband::mpmc
