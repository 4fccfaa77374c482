// SPDX-License-Identifier: Apache-2.0
// asyncband/asio/operation.hpp: any asyncband waiting operation as a Boost.Asio asynchronous
// operation (optional; needs Boost 1.81 or later, headers only). The contract is in
// asyncband/asio.hpp, which includes this header.
//
// One adapter drives every awaiter the primitives return (a wait, an acquire, a lock, a receive,
// a send, a reserve) through the branch protocol of asyncband::when_any
// (detail::select_access, detail/wait_operation.hpp): the operation is a one-branch select whose
// other contender for the commit point is the Asio cancellation. The awaiter is built in place
// inside the operation's allocated state, by a factory called at initiation (awaiters are not
// movable, and a deferred token initiates later).
#pragma once

#include "../version.hpp"  // first: a build below C++20 stops there, with one message

#include <algorithm>
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/execution.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/is_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/require.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>

#include "../asyncband.hpp"
#include "../detail/atomic.hpp"
#include "../detail/spin_lock.hpp"
#include "../detail/wait_operation.hpp"
#include "../stop_token.hpp"
#include "error.hpp"

namespace asyncband::asio {

/// An executor in either of Asio's models.
template <class E>
concept asio_executor = boost::asio::execution::is_executor<E>::value || boost::asio::is_executor<E>::value;

/// An awaiter the adapter can drive: one of the awaiters the primitives return (any wait,
/// acquire, lock, receive, send or reserve), for which detail::select_access is specialized.
template <class A>
concept selectable_awaiter = requires { typename asyncband::detail::select_access<A>::outcome; };

/// A callable returning a selectable awaiter by value (`[&] { return sem.acquire(2); }`).
template <class F>
concept awaiter_factory =
    std::invocable<std::decay_t<F>&> && selectable_awaiter<std::invoke_result_t<std::decay_t<F>&>>;

/// A callable taking an asyncband::stop_token and returning by value an awaiter of several waits in a
/// row built with that token (`[&](asyncband::stop_token stop) { return cv.wait(std::move(g), stop); }`):
/// a condvar wait or wait_while, watch's wait_for. The operation cancels it by requesting that
/// stop.
template <class F>
concept staged_factory =
    std::invocable<std::decay_t<F>&, asyncband::stop_token> &&
    asyncband::detail::staged_awaiter<std::invoke_result_t<std::decay_t<F>&, asyncband::stop_token>>;

/// What async_op and async_outcome accept: either kind of factory.
template <class F>
concept operation_factory = awaiter_factory<F> || staged_factory<F>;

/// Per-awaiter policy of the adapter; specialize for an awaiter type of your own.
template <class Awaiter>
struct operation_traits {
  /// The Asio cancellation types that cancel the operation. Every one by default: a cancelled
  /// operation gives back what it had been granted, so it leaves no side effect ("total").
  static constexpr boost::asio::cancellation_type_t cancellation = boost::asio::cancellation_type::terminal |
                                                                   boost::asio::cancellation_type::partial |
                                                                   boost::asio::cancellation_type::total;
};

namespace bridge_detail {

/// The node type of a primitive built on detail::wait_functions.
template <class P>
using node_of_t = typename P::template wait_node_of<>::type;

/// A wait whose start has a side effect that cancellation keeps (an arrival): not "total".
inline constexpr boost::asio::cancellation_type_t keeps_side_effect =
    boost::asio::cancellation_type::terminal | boost::asio::cancellation_type::partial;

}  // namespace bridge_detail

/// A barrier wait arrives when it starts, and a cancelled one keeps its arrival.
template <bool Cancellable>
struct operation_traits<asyncband::detail::wait_awaiter<bridge_detail::node_of_t<barrier>, Cancellable>> {
  /// The cancellation types the operation accepts: terminal and partial.
  static constexpr boost::asio::cancellation_type_t cancellation = bridge_detail::keeps_side_effect;
};

/// A phaser participant's wait arrives (if it had not) when it starts, and keeps its arrival.
template <bool Cancellable>
struct operation_traits<
    asyncband::detail::wait_awaiter<asyncband::detail::phaser_participant_wait, Cancellable>> {
  /// The cancellation types the operation accepts: terminal and partial.
  static constexpr boost::asio::cancellation_type_t cancellation = bridge_detail::keeps_side_effect;
};

/// A staged wait (a condvar wait, watch's wait_for) leaves a trace when cancelled (the mutex
/// unlocked, versions marked seen): not "total".
template <asyncband::detail::staged_awaiter Awaiter>
struct operation_traits<Awaiter> {
  /// The cancellation types the operation accepts: terminal and partial.
  static constexpr boost::asio::cancellation_type_t cancellation = bridge_detail::keeps_side_effect;
};

namespace bridge_detail {

// ---------------------------------------------------------------------------------------------
// Outcomes and completion signatures.

/// What the value form delivers for an awaiter whose `co_await` yields O: O itself when it can
/// say "cancelled" (result<T>, send_result<T>, a broadcast recv_result<T>), else result<O>
/// (result<void> for a wait that yields nothing), since any Asio operation can be cancelled.
template <class O>
struct lift {
  using type = result<O>;
};
template <>
struct lift<void> {
  using type = result<void>;
};
template <class O>
  requires std::is_constructible_v<O, wait_status>
struct lift<O> {
  using type = O;
};
template <class T>
struct lift<send_result<T>> {
  using type = send_result<T>;
};
template <class O>
using lifted_t = typename lift<O>::type;

template <class O>
inline constexpr bool is_send_result_v = false;
template <class T>
inline constexpr bool is_send_result_v<send_result<T>> = true;

/// The value argument of an error-code signature: the value itself, or std::optional of it for
/// a type with no default constructor (the lock guards), which a failure could not provide.
template <class V>
using value_arg_t = std::conditional_t<std::is_default_constructible_v<V>, V, std::optional<V>>;

/// The value form: the handler receives exactly the outcome.
template <class Outcome>
struct outcome_form {
  using outcome_type = Outcome;
  using signature = void(Outcome);
  template <class Handler>
  static void invoke(Handler& handler, Outcome&& outcome) {
    std::move(handler)(std::move(outcome));
  }
};

/// Asio's convention: void(error_code[, value]).
template <class Outcome>
struct error_form;

template <>
struct error_form<result<void>> {
  using outcome_type = result<void>;
  using signature = void(boost::system::error_code);
  template <class Handler>
  static void invoke(Handler& handler, result<void>&& outcome) {
    std::move(handler)(error::to_error_code(outcome.status()));
  }
};

template <class V>
struct error_form<result<V>> {
  using outcome_type = result<V>;
  using arg = value_arg_t<V>;
  using signature = void(boost::system::error_code, arg);
  template <class Handler>
  static void invoke(Handler& handler, result<V>&& outcome) {
    if (outcome.ok()) {
      std::move(handler)(boost::system::error_code(), arg(std::move(outcome).value()));
    } else {
      std::move(handler)(error::to_error_code(outcome.status()), arg());
    }
  }
};

/// A send hands its value back on failure: engaged exactly when the error_code is set.
template <class T>
struct error_form<send_result<T>> {
  using outcome_type = send_result<T>;
  using signature = void(boost::system::error_code, std::optional<T>);
  template <class Handler>
  static void invoke(Handler& handler, send_result<T>&& outcome) {
    if (outcome.ok()) {
      std::move(handler)(boost::system::error_code(), std::optional<T>());
    } else {
      std::move(handler)(error::to_error_code(outcome.status()),
                         std::optional<T>(std::move(outcome).value()));
    }
  }
};

template <class T>
struct error_form<broadcast::recv_result<T>> {
  using outcome_type = broadcast::recv_result<T>;
  using arg = value_arg_t<T>;
  using signature = void(boost::system::error_code, arg);
  template <class Handler>
  static void invoke(Handler& handler, broadcast::recv_result<T>&& outcome) {
    if (outcome.ok()) {
      std::move(handler)(boost::system::error_code(), arg(std::move(outcome).value()));
    } else {
      std::move(handler)(error::to_error_code(outcome.status()), arg());
    }
  }
};

/// async_wait's form: void(wait_status[, value]), the value value-initialized unless ok.
template <class Outcome>
struct status_form;

template <>
struct status_form<result<void>> {
  using outcome_type = result<void>;
  using signature = void(wait_status);
  template <class Handler>
  static void invoke(Handler& handler, result<void>&& outcome) {
    std::move(handler)(outcome.status());
  }
};

template <class V>
struct status_form<result<V>> {
  using outcome_type = result<V>;
  using signature = void(wait_status, V);
  template <class Handler>
  static void invoke(Handler& handler, result<V>&& outcome) {
    const wait_status status = outcome.status();
    std::move(handler)(status, status == wait_status::ok ? std::move(outcome).value() : V{});
  }
};

// ---------------------------------------------------------------------------------------------
// Completing without publishing.

/// Whether the adapter may first try an awaiter's lock-free completion (select_access::poll),
/// and how it gives back what a poll took when a late cancellation (or the context's shutdown)
/// means the outcome will not be delivered. An awaiter not listed here is always published:
/// whatever it is granted then stays in its node until the handler runs (a send's poll would
/// push its value, which nothing could take back).
template <class Awaiter>
struct poll_policy {
  static constexpr bool polls = false;
};

/// A wait's poll leaves what it took in the node (an auto-reset permit, a semaphore's permits);
/// the node passes it on exactly as for a published wait (pending_wait::discard), and a value a
/// receive found stays in its channel until taken.
template <class Node, bool Cancellable>
struct poll_policy<asyncband::detail::wait_awaiter<Node, Cancellable>> {
  static constexpr bool polls = true;
  static void revoke(asyncband::detail::wait_awaiter<Node, Cancellable>& a) {
    asyncband::detail::select_access<asyncband::detail::wait_awaiter<Node, Cancellable>>::pass_on(a, true);
  }
};

/// An uncontended acquisition or lock takes its permits with one CAS; the outcome made of them
/// (a permit, a guard) releases them to the next waiter when it is dropped.
template <class Make, bool Fallible, bool Retries>
struct poll_policy<asyncband::detail::acquire_awaiter<Make, Fallible, Retries>> {
  static constexpr bool polls = true;
  static void revoke(asyncband::detail::acquire_awaiter<Make, Fallible, Retries>& a) {
    static_cast<void>(
        asyncband::detail::select_access<asyncband::detail::acquire_awaiter<Make, Fallible, Retries>>::win(
            a));
  }
};

template <class Source>
struct poll_policy<asyncband::detail::source_awaiter<Source>> {
  static constexpr bool polls = true;
  static void revoke(asyncband::detail::source_awaiter<Source>& a) {
    static_cast<void>(asyncband::detail::select_access<asyncband::detail::source_awaiter<Source>>::win(a));
  }
};

// ---------------------------------------------------------------------------------------------
// The execution context's record of pending operations.

/// What the service of an execution context knows of a pending operation.
struct pending_op {
  /// Where a published operation stands with its service; guarded by the service's lock. The
  /// service is told twice, in either order: once the publication left the operation pending
  /// (wait_service::add), and once its wait is resolved (wait_service::resolve); whichever
  /// comes second goes on with the operation.
  enum class stage : std::uint8_t {
    publishing,  ///< neither yet
    resolved,    ///< resolved first: the publishing thread completes it when it comes to add()
    listed,      ///< added first: the resolving thread completes it
    cancelling,  ///< added after the context shut down: the publishing thread ends the wait, adds again
    refused,     ///< added again, still unresolved: its resolution destroys it
  };

  pending_op* prev = nullptr;
  pending_op* next = nullptr;
  /// Cancels the wait if no waker committed it yet (it then resolves on this thread).
  void (*cancel)(pending_op*) noexcept = nullptr;
  /// Destroys the operation without invoking its handler.
  void (*destroy)(pending_op*) noexcept = nullptr;
  stage at = stage::publishing;
};

/// What the caller of wait_service::add or wait_service::resolve does next with the operation.
enum class next_step : std::uint8_t {
  nothing,   ///< the other of the two calls (or the shutdown loop) takes care of it
  complete,  ///< post its completion
  cancel,    ///< add() only: the context is shut down: end the wait, then add() again
  destroy,   ///< the context is shut down and the wait is over: destroy it unrun
};

/// Tracks the operations pending on one execution context, so that its shutdown can end them
/// without invoking their handlers (Asio's own services do the same with their operations).
/// Only operations that wait are listed: one that completed at its start has its completion
/// posted already, which the context destroys unrun.
///
/// At shutdown, under the service's lock, every listed operation is cancelled: one still queued
/// resolves on the shutting-down thread, which keeps it for destruction after the loop. One a
/// waker has committed resolves later on the waker's thread, finds the service shut down and
/// destroys itself (passing its grant on). The context deletes the service right after
/// shutdown(), so a waker or canceller of one of its operations must not run concurrently with
/// the context's destruction (the header contract says so); the lock only orders the shutdown
/// loop with operations resolved on other threads before it. (Wakers never hold a primitive's
/// lock while they take this one, so taking primitives' locks under it is safe.) The lock is a
/// spin lock: listing and unlisting are a few stores.
class wait_service final : public boost::asio::execution_context::service {
 public:
  static inline boost::asio::execution_context::id id;

  explicit wait_service(boost::asio::execution_context& context) : service(context) {}
  wait_service(const wait_service&) = delete;
  wait_service& operator=(const wait_service&) = delete;
  /// Invalidates every thread's cached lookup (of()): a later context may reuse the address.
  ~wait_service() override { epoch().fetch_add(1, std::memory_order_release); }

  /// The service of `context`. asio::use_service takes the registry's mutex and scans its list;
  /// a pending operation asks for it each time, so the last answer is kept per thread, checked
  /// against a global count of destroyed services.
  static wait_service& of(boost::asio::execution_context& context) {
    struct lookup {
      const boost::asio::execution_context* context = nullptr;
      wait_service* service = nullptr;
      std::uint64_t epoch = 0;
    };
    thread_local lookup last;
    const std::uint64_t now = epoch().load(std::memory_order_acquire);
    if (last.context == &context && last.epoch == now) return *last.service;
    wait_service& found = boost::asio::use_service<wait_service>(context);
    last = lookup{&context, &found, now};
    return found;
  }

  /// On the publishing thread, once the publication left op pending: lists it, unless it was
  /// resolved meanwhile (complete it) or the context is shut down (cancel, or destroy it).
  [[nodiscard]] next_step add(pending_op& op) noexcept {
    const std::lock_guard lock(lock_);
    if (shut_down_) return refuse(op);
    if (op.at == pending_op::stage::resolved) return next_step::complete;
    op.at = pending_op::stage::listed;
    op.prev = nullptr;
    op.next = head_;
    if (head_ != nullptr) head_->prev = &op;
    head_ = &op;
    return next_step::nothing;
  }

  /// On the resolving thread: a listed op leaves the list (complete it), unless the context is
  /// shut down (destroy it, or leave it to the shutdown loop running on this thread); one not
  /// listed yet is left to add().
  [[nodiscard]] next_step resolve(pending_op& op) noexcept {
    if (shutting_down_here() == this) return resolve_in_shutdown(op);
    const std::lock_guard lock(lock_);
    switch (op.at) {
      case pending_op::stage::publishing:
      case pending_op::stage::cancelling:
        op.at = pending_op::stage::resolved;
        return next_step::nothing;
      case pending_op::stage::listed:
        // The shutdown loop unlisted it. Only a resolution outside Asio's rules reaches this (one
        // on another thread while the context is being destroyed): a defence, not a contract.
        if (shut_down_) return next_step::destroy;
        unlink(op);
        return next_step::complete;
      case pending_op::stage::refused:
      case pending_op::stage::resolved:  // not reached: a wait is resolved once
        break;
    }
    return next_step::destroy;
  }

 private:
  void unlink(pending_op& op) noexcept {
    (op.prev == nullptr ? head_ : op.prev->next) = op.next;
    if (op.next != nullptr) op.next->prev = op.prev;
    op.next = op.prev = nullptr;
  }

  static asyncband::detail::atomic<std::uint64_t>& epoch() noexcept {
    static asyncband::detail::atomic<std::uint64_t> destroyed{0};
    return destroyed;
  }

  static const wait_service*& shutting_down_here() noexcept {
    thread_local const wait_service* current = nullptr;
    return current;
  }

  /// add() on a shut-down context. The first time, the publishing thread ends the wait and comes
  /// back: a resolution on another thread meanwhile must not destroy the operation under it.
  /// The second time, whichever of the two comes second destroys it.
  static next_step refuse(pending_op& op) noexcept {
    switch (op.at) {
      case pending_op::stage::publishing:
        op.at = pending_op::stage::cancelling;
        return next_step::cancel;
      case pending_op::stage::cancelling:
        op.at = pending_op::stage::refused;
        return next_step::nothing;
      case pending_op::stage::resolved:
      case pending_op::stage::listed:  // not reached: the context was shut down before it came
      case pending_op::stage::refused:
        break;
    }
    return next_step::destroy;
  }

  /// resolve(), inside this thread's shutdown loop (which holds the lock): an operation the loop
  /// cancelled, or one still listed that the cancellation of another completed (a partial grant
  /// handed on), is destroyed after the loop; one whose publication is still under way on
  /// another thread (a cancellation here woke it) is left to its add(), which finds the context
  /// shut down.
  next_step resolve_in_shutdown(pending_op& op) noexcept {
    // A publication under way on another thread while the context is destroyed is outside
    // Asio's rules (the service is deleted right after shutdown()): this branch is a defence.
    if (op.at == pending_op::stage::publishing) {
      op.at = pending_op::stage::resolved;
      return next_step::nothing;
    }
    if (op.prev != nullptr || head_ == &op) unlink(op);
    op.next = doomed_;
    doomed_ = &op;
    return next_step::nothing;
  }

  void shutdown() override {
    {
      // Waiter code a cancellation wakes on this thread (a condvar wait cancelled while it
      // re-locks passes its notification on) runs once the lock is released, and before this
      // returns (resolve_here: not in an enclosing batch), since the service is deleted then.
      asyncband::detail::wake_collector after_unlock;
      {
        const std::lock_guard lock(lock_);
        shut_down_ = true;
        shutting_down_here() = this;
        // One at a time from the head: a cancellation may complete an operation still listed,
        // which resolve() then takes out of the list (a saved `next` would go stale).
        while (head_ != nullptr) {
          pending_op* const op = head_;
          unlink(*op);
          op->cancel(op);
        }
        shutting_down_here() = nullptr;
      }
      after_unlock.resolve_here();
    }
    // Outside the lock: destroying a handler runs arbitrary destructors.
    while (doomed_ != nullptr) {
      pending_op* const op = doomed_;
      doomed_ = op->next;
      op->destroy(op);
    }
  }

  asyncband::detail::spin_lock lock_;
  pending_op* head_ = nullptr;
  pending_op* doomed_ = nullptr;  // only on the shutting-down thread
  bool shut_down_ = false;
};

template <class Executor>
auto track_work(const Executor& ex) {
  if constexpr (boost::asio::execution::is_executor<Executor>::value) {
    // Asio's property objects are spelled this way.
    // NOLINTNEXTLINE(readability-static-accessed-through-instance)
    return boost::asio::prefer(ex, boost::asio::execution::outstanding_work.tracked);
  } else {
    return boost::asio::make_work_guard(ex);
  }
}

/// The io_context executor a type-erased any_io_executor (use_awaitable's) wraps, if it wraps
/// one; else nullptr. Through it, a post and a work count skip the type erasure: asio::post on
/// an any_io_executor copies the polymorphic executor several times (each copy an indirect
/// call) and wraps the function in a second, type-erased allocation; counting work on it builds
/// another polymorphic executor. Both are the same operation on the same io_context.
template <class Executor>
const boost::asio::io_context::executor_type* io_context_target(const Executor& ex) noexcept {
  if constexpr (std::is_same_v<Executor, boost::asio::any_io_executor>) {
    return ex.template target<boost::asio::io_context::executor_type>();
  } else {
    return nullptr;
  }
}

/// The execution context of `ex` (through io_context_target when it has one: a query through
/// the type erasure is an indirect call).
template <class Executor>
boost::asio::execution_context& context_of(const Executor& ex) {
  if (const boost::asio::io_context::executor_type* io = io_context_target(ex)) return io->context();
  if constexpr (boost::asio::execution::is_executor<Executor>::value) {
    return boost::asio::query(ex, boost::asio::execution::context);
  } else {
    return ex.context();
  }
}

/// asio::post(ex, f), with f's associated allocator; straight to the io_context's executor when
/// `ex` is an any_io_executor wrapping one (the same properties asio::post requests).
template <class Executor, class Function>
void post_to(const Executor& ex, Function&& f) {
  namespace execution = boost::asio::execution;
  if (const boost::asio::io_context::executor_type* io = io_context_target(ex)) {
    // Asio's property objects are spelled this way.
    // NOLINTBEGIN(readability-static-accessed-through-instance)
    boost::asio::prefer(boost::asio::require(*io, execution::blocking.never), execution::relationship.fork,
                        execution::allocator(boost::asio::get_associated_allocator(f)))
        .execute(std::forward<Function>(f));
    // NOLINTEND(readability-static-accessed-through-instance)
    return;
  }
  boost::asio::post(ex, std::forward<Function>(f));
}

/// The outstanding work of an io_context, counted on its own executor (io_context_target).
using io_context_work =
    std::decay_t<decltype(boost::asio::prefer(std::declval<const boost::asio::io_context::executor_type&>(),
                                              // NOLINTNEXTLINE(readability-static-accessed-through-instance)
                                              boost::asio::execution::outstanding_work.tracked))>;

/// Whether a handler keeps its associated executor's outstanding work by itself, so that an
/// operation holding it needs to count none of its own: use_awaitable's handler owns its
/// coroutine, and a coroutine started by asio::co_spawn holds work on its executor (which is the
/// handler's) for as long as it exists (co_spawn_entry_point's work guards); as_tuple and
/// redirect_error wrap such a handler and keep its executor. (A bound executor does not: an
/// executor_binder is not looked through.)
template <class Handler>
inline constexpr bool keeps_own_work_v = false;
template <class Executor, class... Args>
inline constexpr bool keeps_own_work_v<boost::asio::detail::awaitable_handler<Executor, Args...>> = true;
template <class Handler>
inline constexpr bool keeps_own_work_v<boost::asio::detail::as_tuple_handler<Handler>> =
    keeps_own_work_v<Handler>;
template <class Handler>
inline constexpr bool keeps_own_work_v<boost::asio::detail::redirect_error_handler<Handler>> =
    keeps_own_work_v<Handler>;

/// An operation's hold on its executor's outstanding work, taken when it publishes: a `Work`
/// (track_work), or an io_context_work when the executor wraps an io_context's. Raw storage
/// rather than a std::optional or std::variant: g++ 12 at -O2 reports a false
/// -Wmaybe-uninitialized inside a never-engaged optional of a type-erased executor (as for
/// stop_registration, wait_operation.hpp).
template <class Work>
class work_hold {
 public:
  work_hold() noexcept = default;
  work_hold(work_hold&& other) noexcept {
    if (other.held_ == held::work) {
      ::new (static_cast<void*>(storage_)) Work(std::move(*other.template get<Work>()));
    } else if (other.held_ == held::io_work) {
      ::new (static_cast<void*>(storage_)) io_context_work(std::move(*other.template get<io_context_work>()));
    }
    held_ = other.held_;
    other.reset();
  }
  work_hold(const work_hold&) = delete;
  work_hold& operator=(const work_hold&) = delete;
  work_hold& operator=(work_hold&&) = delete;
  ~work_hold() { reset(); }

  template <class Executor>
  void take(const Executor& ex) {
    reset();
    if (const boost::asio::io_context::executor_type* io = io_context_target(ex)) {
      // NOLINTBEGIN(readability-static-accessed-through-instance)
      ::new (static_cast<void*>(storage_))
          io_context_work(boost::asio::prefer(*io, boost::asio::execution::outstanding_work.tracked));
      // NOLINTEND(readability-static-accessed-through-instance)
      held_ = held::io_work;
    } else {
      ::new (static_cast<void*>(storage_)) Work(track_work(ex));
      held_ = held::work;
    }
  }
  void reset() noexcept {
    if (held_ == held::work) {
      get<Work>()->~Work();
    } else if (held_ == held::io_work) {
      get<io_context_work>()->~io_context_work();
    }
    held_ = held::none;
  }

 private:
  enum class held : unsigned char { none, work, io_work };
  template <class W>
  W* get() noexcept {
    return std::launder(reinterpret_cast<W*>(storage_));
  }

  static constexpr std::size_t storage_size = std::max(sizeof(Work), sizeof(io_context_work));
  static constexpr std::size_t storage_align = std::max(alignof(Work), alignof(io_context_work));

  held held_ = held::none;
  alignas(storage_align) unsigned char storage_[storage_size];
};

// ---------------------------------------------------------------------------------------------
// Drivers: what the operation does with its awaiter.
//
// A driver is built in place from the factory and offers:
//   void uncontended()                before the start: no cancellation slot, so nothing cancels
//                                     the operation concurrently with its completion
//   bool complete_at_once()           completes without publishing (may throw: nothing started)
//   bool publish(resume_target)       true if pending: the target runs on the resolving thread
//   void resolved()                   on that thread, first thing
//   bool cancel()                     the Asio cancellation or the context's shutdown; false if
//                                     too late to stop the wait (it has been granted already)
//   Outcome settle<Outcome>(bool late)    on the handler's executor: the outcome, or, for an
//                                     operation cancelled in time or late, what it gives back
//   void give_back()                  completed, destroyed unrun: its grant passes on

/// Takes `node` out of the wake batch of this thread that claimed it, if any, and resolves it.
inline void resolve_claimed_here(asyncband::detail::waiter& node) noexcept {
  if (asyncband::detail::wake_batch::withdraw(node)) node.resolve();
}

/// A when_any branch (detail::select_access): the awaiter's node and the Asio cancellation
/// contend for one commit point, as the branches of a select do (detail/any_engine.hpp). A node
/// commits when a waker grants it (under the primitive's lock), when it completes at the start,
/// or, for a resolution that grants nothing, in resolved() (the last two only with a
/// cancellation slot: commit_node). A cancellation that loses is late: the operation gives back
/// what the node was granted. The context's shutdown contends too, for a listed operation.
template <class Awaiter>
class branch_driver {
  using access = asyncband::detail::select_access<Awaiter>;
  using policy = poll_policy<Awaiter>;
  using access_outcome = typename access::outcome;

 public:
  using awaiter_type = Awaiter;
  /// What the value form delivers.
  using outcome = lifted_t<access_outcome>;

  template <class Factory>
  explicit branch_driver(Factory& factory) : awaiter_(factory()) {}  // a prvalue, built in place
  branch_driver(const branch_driver&) = delete;
  branch_driver& operator=(const branch_driver&) = delete;
  ~branch_driver() = default;

  /// No cancellation slot: the node need not commit (commit_node), and a waker's commit is a
  /// load and a store (commit_point::set_uncontended).
  void uncontended() noexcept {
    uncontended_ = true;
    commit_.set_uncontended();
  }

  /// The poll, where what it takes is revocable (poll_policy).
  bool complete_at_once() {
    if constexpr (policy::polls) {
      if (access::poll(awaiter_)) {
        polled_ = true;
        commit_node(&awaiter_);
        return true;
      }
    }
    return false;
  }

  bool publish(asyncband::detail::resume_target target) noexcept {
    if (access::publish(awaiter_, target, commit_)) return true;
    resolved();  // completed during the publication: nobody else can have committed yet
    return false;
  }

  /// A resolution that granted nothing commits here.
  void resolved() noexcept { commit_node(&access::node(awaiter_)); }

  /// Resolves now a node a wake batch of this thread has claimed and not resolved yet.
  void resolve_if_claimed_here() noexcept { resolve_claimed_here(access::node(awaiter_)); }

  bool cancel() noexcept {
    if (!commit_.try_commit(cancel_id())) return false;
    access::cancel(awaiter_);
    return true;
  }

  /// The winner's outcome; or, for a cancelled operation (before its node committed, or late),
  /// what it gives back: the grant passes on, a send's value comes back, and it reports cancelled.
  template <class Outcome>
  Outcome settle(bool late) {
    if (!late && commit_.winner() != cancel_id()) return win<Outcome>();
    if constexpr (policy::polls) {
      if (polled_) {
        policy::revoke(awaiter_);
        return Outcome(wait_status::cancelled);
      }
    }
    return lose<Outcome>();
  }

  void give_back() noexcept {
    try {
      if constexpr (policy::polls) {
        if (polled_) {
          policy::revoke(awaiter_);
          return;
        }
      }
      access::pass_on(awaiter_, true);
    } catch (...) {  // a guard maker threw while the permits went back: nobody is left to tell
    }
  }

 private:
  /// What the cancellation contends for the commit point as: never a node's address.
  [[nodiscard]] const void* cancel_id() const noexcept { return &commit_; }

  /// The node's side of the commit point, as `who`, once the wait is over. Without a
  /// cancellation slot it commits nothing: only a waker of the linked node (the semaphore's
  /// hand-out asks whether its head lost, which is false while nobody else committed) and
  /// settle() read the winner, and settle() takes "nobody won" as the node's win. The other contenders (the
  /// context's shutdown, a listing that finds the context shut down) cancel an operation that
  /// is then destroyed unrun, never settled. A waker that granted something committed the node
  /// already, under the primitive's lock: the exchange would only fail, and costs as much as one
  /// that succeeds.
  void commit_node(const void* who) noexcept {
    if (uncontended_ || commit_.winner() != nullptr) return;
    static_cast<void>(commit_.try_commit(who));
  }

  template <class Outcome>
  Outcome win() {
    if constexpr (std::is_void_v<access_outcome>) {
      access::win(awaiter_);
      return Outcome();
    } else if constexpr (std::is_same_v<access_outcome, Outcome>) {
      return access::win(awaiter_);
    } else {
      return Outcome(access::win(awaiter_));
    }
  }

  /// A losing operation's outcome, once its grant is passed on: a send's comes from
  /// select_access::handed_back (its value); any other's is just "cancelled".
  template <class Outcome>
  Outcome lose() {
    access::pass_on(awaiter_, true);
    if constexpr (is_send_result_v<Outcome>) {
      auto back = access::handed_back(awaiter_);
      return std::move(*back);  // a losing send always hands its value back
    } else {
      return Outcome(wait_status::cancelled);
    }
  }

  Awaiter awaiter_;
  asyncband::detail::commit_point commit_;
  bool polled_ = false;       // completed by poll at the start, never published
  bool uncontended_ = false;  // no cancellation slot (commit_node)
};

/// Several waits in a row (a condvar wait, watch's wait_for; detail::staged_access), built with
/// the token of a stop source the driver owns: the Asio cancellation requests that stop, and the
/// awaiter's own stop semantics apply at whichever stage it is. A wait that ended ok but was
/// cancelled before its handler ran is reported cancelled and gives back what it consumed (the
/// guard is dropped, a condvar's notify_one passes on), as a late cancellation of a branch does.
/// The stop source's state is one more allocation per operation.
template <class Awaiter>
class staged_driver {
  using access = asyncband::detail::staged_access;

 public:
  using awaiter_type = Awaiter;
  /// What the value form delivers: the awaiter's own outcome (a result<T>).
  using outcome = access::outcome<Awaiter>;

  template <class Factory>
  explicit staged_driver(Factory& factory) : awaiter_(factory(stop_.get_token())) {}
  staged_driver(const staged_driver&) = delete;
  staged_driver& operator=(const staged_driver&) = delete;
  ~staged_driver() = default;

  /// Nothing to spare: a staged wait has no commit point.
  static void uncontended() noexcept {}
  bool complete_at_once() { return access::ready(awaiter_); }
  bool publish(asyncband::detail::resume_target target) noexcept { return access::start(awaiter_, target); }
  static void resolved() noexcept {}

  /// Resolves now the current stage's node if a wake batch of this thread claimed it.
  void resolve_if_claimed_here() noexcept {
    if (asyncband::detail::waiter* node = access::current_node(awaiter_)) resolve_claimed_here(*node);
  }
  /// Never too late here: a stop requested after the wait ended is seen by settle().
  bool cancel() noexcept {
    stop_.request_stop();
    return true;
  }

  template <class Outcome>
  Outcome settle(bool /*late: a branch's notion; a stop request says it here*/) {
    Outcome resumed(access::resume(awaiter_));
    if (!resumed.ok() || !stop_.stop_requested()) return resumed;
    return give_back_instead(std::move(resumed));
  }

  void give_back() noexcept {
    try {
      static_cast<void>(give_back_instead(access::resume(awaiter_)));
    } catch (...) {  // a predicate threw: the wait consumed nothing it could give back
    }
  }

 private:
  /// Passes on what the wait consumed, then drops an ok outcome (a guard unlocks): in that
  /// order, since the unlock may resume a waiter inline that destroys the condvar ("last one
  /// out"); a notify_one passed on while the guard is held only queues its taker for the mutex.
  template <class Outcome>
  Outcome give_back_instead(Outcome resumed) noexcept {
    if (resumed.ok()) {
      access::give_back(awaiter_);
      const Outcome dropped(std::move(resumed));
    }
    return Outcome(wait_status::cancelled);
  }

  asyncband::stop_source stop_;  // before the awaiter, which is built with its token
  Awaiter awaiter_;
};

// ---------------------------------------------------------------------------------------------
// The operation.

/// One asynchronous operation: its driver (holding the awaiter, built in place by the factory),
/// the handler and the work guard. Allocated with the handler's associated allocator; destroyed
/// before the handler is invoked.
///
/// Protocol:
/// - The start completes the awaiter at once where the driver can (a revocable poll, a staged
///   wait whose outcome is decided), else publishes it. A completion at the start, or one that
///   resolves later on a waker's thread, is posted to the handler's executor.
/// - The cancellation slot's handler cancels through the driver; a cancellation too late to stop
///   the wait is recorded, and the driver then gives back what the wait was granted.
/// - finish(), on the handler's executor: the driver settles the outcome (the winner's, or the
///   give-back reported as cancelled); then the state is freed and the handler invoked.
/// - A pending operation is listed with the context's wait_service (for shutdown) after its
///   publication; the service's lock orders that listing with a resolution on another thread:
///   whichever of the two comes second goes on to complete the operation (pending_op::stage).
template <class Driver, class Form, boost::asio::cancellation_type_t Accepted, class Handler, class Executor>
class operation final : public pending_op {
  using outcome_type = typename Form::outcome_type;
  using handler_allocator =
      boost::asio::associated_allocator_t<Handler, boost::asio::recycling_allocator<void>>;
  using allocator_type = typename std::allocator_traits<handler_allocator>::template rebind_alloc<operation>;
  using work_type = decltype(track_work(std::declval<const Executor&>()));

 public:
  /// Builds the awaiter with the factory and starts the operation; from the initiating function.
  /// A factory that throws leaves the handler untouched (the exception propagates).
  template <class Factory>
  static void start(Handler&& handler, const Executor& ex, Factory& factory) {
    allocator_type alloc(get_allocator_of(handler));
    operation* const op = std::allocator_traits<allocator_type>::allocate(alloc, 1);
    try {
      ::new (static_cast<void*>(op)) operation(factory, std::move(handler), ex);
    } catch (...) {
      std::allocator_traits<allocator_type>::deallocate(alloc, op, 1);
      throw;
    }
    try {
      op->launch();
    } catch (...) {  // nothing was published: the operation goes, the exception propagates
      op->destroy_self();
      throw;
    }
  }

  operation(const operation&) = delete;
  operation& operator=(const operation&) = delete;
  ~operation() = default;

 private:
  template <class Factory>
  operation(Factory& factory, Handler&& handler, const Executor& ex)
      : driver_(factory),
        handler_(std::move(handler)),
        executor_(ex),
        slot_(boost::asio::get_associated_cancellation_slot(handler_)) {
    cancel = &cancel_listed;
    destroy = &destroy_unrun;
  }

  static handler_allocator get_allocator_of(const Handler& h) noexcept {
    return boost::asio::get_associated_allocator(h, boost::asio::recycling_allocator<void>());
  }

  /// Throws only before anything is published (a poll of a spent awaiter, a condvar predicate's
  /// first check (watch's wait_for keeps its predicate's exception for the outcome), an allocation: of the
  /// work-tracking executor, of the context's service at its first use).
  void launch() {
    // Before the wait can complete: a completion may run (and clear the slot) at once.
    if (slot_.is_connected()) {
      slot_.template emplace<cancel_handler>(this);
    } else {
      driver_.uncontended();
    }
    if (driver_.complete_at_once()) {
      completed_ = true;
      post_completion();
      return;
    }
    // An operation that may wait holds its executor's outstanding work from here. One that
    // completed at once needs none: its posted completion is work, and copying a tracked
    // type-erased executor (post copies it several times) costs an atomic count each time. Nor
    // does one whose handler holds that work already (a coroutine's, keeps_own_work_v).
    if constexpr (!keeps_own_work_v<Handler>) work_.take(executor_);
    service_ = &wait_service::of(context_of(executor_));  // may create it: before publishing
    if (!driver_.publish(asyncband::detail::resume_target(&on_resolved, this))) {
      completed_ = true;
      post_completion();
      return;
    }
    list_pending();
  }

  /// After a publication that left the wait pending: lists the operation with its context, or
  /// completes it if it was resolved meanwhile. Nothing is touched after add() unless this thread
  /// came second.
  void list_pending() noexcept {
    asyncband::detail::at_test_point(asyncband::detail::test_point::listing);
    take_step(service_->add(*this));
  }

  /// The resume target of the published wait: on the thread that resolved it (a waker, a
  /// cancellation, a stop request).
  static void on_resolved(void* self) noexcept {
    auto& op = *static_cast<operation*>(self);
    op.driver_.resolved();
    op.completed_ = true;  // before resolve(): the thread that add() or resolve() sends on reads it
    op.take_step(op.service_->resolve(op));
  }

  /// What wait_service::add or wait_service::resolve left to this thread.
  void take_step(next_step step) noexcept {
    switch (step) {
      case next_step::nothing:
        return;
      case next_step::complete:
        post_completion();
        return;
      case next_step::cancel:  // shut down: end the wait (if not granted yet), then add() again
        asyncband::detail::at_test_point(asyncband::detail::test_point::refused);
        static_cast<void>(driver_.cancel());
        take_step(service_->add(*this));
        return;
      case next_step::destroy:
        destroy_self();
        return;
    }
  }

  void post_completion() noexcept { post_to(executor_, completion(this)); }

  /// The context's shutdown, for a listed operation.
  /// A node a waker claimed cannot be cancelled any more; if that waker is a wake batch further
  /// down this thread's stack (the context is destroyed by code it resumed inline), it would
  /// resolve the operation after the service is gone: it is resolved now instead, and so ends
  /// with the shutdown.
  static void cancel_listed(pending_op* self) noexcept {
    auto& op = *static_cast<operation*>(self);
    static_cast<void>(op.driver_.cancel());
    op.driver_.resolve_if_claimed_here();
  }
  static void destroy_unrun(pending_op* self) noexcept { static_cast<operation*>(self)->destroy_self(); }

  /// The Asio cancellation slot's handler (run where the emit is, which Asio requires to be
  /// synchronized with the handler's executor, so never during finish()).
  struct cancel_handler {
    explicit cancel_handler(operation* o) noexcept : op(o) {}
    operation* op;
    void operator()(boost::asio::cancellation_type_t type) const noexcept {
      if ((type & Accepted) == boost::asio::cancellation_type::none) return;
      if (!op->driver_.cancel()) op->late_cancel_ = true;  // granted already: give it back
    }
  };

  /// Posted to the handler's executor; owns the operation until it runs (destroyed unrun, e.g.
  /// by the context's shutdown, it destroys the operation without invoking the handler).
  class completion {
   public:
    using allocator_type = handler_allocator;
    explicit completion(operation* op) noexcept : op_(op), alloc_(get_allocator_of(op->handler_)) {}
    completion(completion&& other) noexcept : op_(std::exchange(other.op_, nullptr)), alloc_(other.alloc_) {}
    completion(const completion&) = delete;
    completion& operator=(const completion&) = delete;
    completion& operator=(completion&&) = delete;
    ~completion() {
      if (op_ != nullptr) op_->destroy_self();
    }
    [[nodiscard]] allocator_type get_allocator() const noexcept { return alloc_; }
    void operator()() { std::exchange(op_, nullptr)->finish(); }

   private:
    operation* op_;
    handler_allocator alloc_;
  };

  /// On the handler's executor: settles the outcome, frees the operation, invokes the handler.
  void finish() {
    if (slot_.is_connected()) slot_.clear();
    completed_ = false;  // settled below, whatever happens
    allocator_type alloc(get_allocator_of(handler_));
    outcome_type outcome = settle_or_destroy();
    Handler handler(std::move(handler_));
    [[maybe_unused]] work_hold<work_type> work(std::move(work_));  // released after the handler returns
    destroy_self(alloc);
    Form::invoke(handler, std::move(outcome));
  }

  /// A value's move (or a staged wait's predicate) that throws while the outcome is taken
  /// propagates out of the executor's run(), as a handler's own exception would; the handler is
  /// then destroyed unrun.
  outcome_type settle_or_destroy() {
    try {
      return driver_.template settle<outcome_type>(late_cancel_);
    } catch (...) {
      destroy_self();
      throw;
    }
  }

  void destroy_self() noexcept { destroy_self(allocator_type(get_allocator_of(handler_))); }

  // `alloc` is taken before the handler may be moved from.
  void destroy_self(allocator_type alloc) noexcept {
    if (slot_.is_connected()) slot_.clear();
    if (std::exchange(completed_, false)) driver_.give_back();  // destroyed unrun: its grant passes on
    this->~operation();
    std::allocator_traits<allocator_type>::deallocate(alloc, this, 1);
  }

  Driver driver_;  // first: built before the handler is moved in (a throwing factory leaves it)
  Handler handler_;
  Executor executor_;          // the handler's
  work_hold<work_type> work_;  // its outstanding work, from the publication
  boost::asio::associated_cancellation_slot_t<Handler> slot_;
  wait_service* service_ = nullptr;  // set before it publishes
  bool completed_ = false;           // its outcome decided, not yet settled (a grant to give back)
  bool late_cancel_ = false;         // cancelled after its wait had been granted
};

/// The driver of the operation a factory starts.
template <class F>
auto pick_driver() {
  if constexpr (awaiter_factory<F>) {
    return std::type_identity<branch_driver<std::invoke_result_t<F&>>>{};
  } else {
    return std::type_identity<staged_driver<std::invoke_result_t<F&, asyncband::stop_token>>>{};
  }
}
template <operation_factory F>
using driver_t = typename decltype(pick_driver<std::decay_t<F>>())::type;

/// The initiation object handed to asio::async_initiate.
template <class Form, boost::asio::cancellation_type_t Accepted, class DefaultExecutor>
class initiate_operation {
 public:
  using executor_type = DefaultExecutor;
  explicit initiate_operation(const DefaultExecutor& ex) : executor_(ex) {}
  [[nodiscard]] executor_type get_executor() const noexcept { return executor_; }

  template <class Handler, class Factory>
  void operator()(Handler&& handler, Factory&& factory) const {
    using handler_type = std::decay_t<Handler>;
    handler_type h(std::forward<Handler>(handler));
    auto ex = boost::asio::get_associated_executor(h, executor_);
    operation<driver_t<Factory>, Form, Accepted, handler_type, decltype(ex)>::start(std::move(h), ex,
                                                                                    factory);
  }

 private:
  DefaultExecutor executor_;
};

template <class Factory>
using error_form_of = error_form<typename driver_t<Factory>::outcome>;
template <class Factory>
using outcome_form_of = outcome_form<typename driver_t<Factory>::outcome>;
template <class Factory>
inline constexpr boost::asio::cancellation_type_t cancellation_of =
    operation_traits<typename driver_t<Factory>::awaiter_type>::cancellation;

}  // namespace bridge_detail

/// The completion signature of async_op for a factory: void(error_code) for a wait that yields
/// nothing, void(error_code, T) for one that yields T or result<T> (std::optional<T> if T has no
/// default constructor), void(error_code, std::optional<T>) for a send of T.
template <operation_factory Factory>
using op_signature_t = typename bridge_detail::error_form_of<Factory>::signature;

/// What async_outcome delivers for a factory: what `co_await factory()` yields when that can
/// say "cancelled" (result<T>, send_result<T>, broadcast::recv_result<T>), else result<T>.
template <operation_factory Factory>
using outcome_of_t = typename bridge_detail::outcome_form_of<Factory>::outcome_type;

/// The awaiter `factory()` returns, as an Asio asynchronous operation with Asio's error-code
/// convention (see asio.hpp). Completes on the handler's associated executor (default: `ex`).
template <asio_executor Executor, operation_factory Factory,
          BOOST_ASIO_COMPLETION_TOKEN_FOR(op_signature_t<Factory>) CompletionToken>
auto async_op(const Executor& ex, Factory&& factory, CompletionToken&& token) {
  using F = std::decay_t<Factory>;
  return boost::asio::async_initiate<CompletionToken, op_signature_t<F>>(
      bridge_detail::initiate_operation<bridge_detail::error_form_of<F>, bridge_detail::cancellation_of<F>,
                                        Executor>(ex),
      token, std::forward<Factory>(factory));
}

/// As above; completes on the handler's associated executor, or asio::system_executor.
template <operation_factory Factory, BOOST_ASIO_COMPLETION_TOKEN_FOR(op_signature_t<Factory>) CompletionToken>
auto async_op(Factory&& factory, CompletionToken&& token) {
  return asio::async_op(boost::asio::system_executor(), std::forward<Factory>(factory),
                        std::forward<CompletionToken>(token));
}

/// The value form: the same operation with signature void(outcome_of_t<Factory>), the outcome
/// exactly as asyncband reports it (nothing throws for a failure under use_awaitable).
template <asio_executor Executor, operation_factory Factory,
          BOOST_ASIO_COMPLETION_TOKEN_FOR(void(outcome_of_t<Factory>)) CompletionToken>
auto async_outcome(const Executor& ex, Factory&& factory, CompletionToken&& token) {
  using F = std::decay_t<Factory>;
  return boost::asio::async_initiate<CompletionToken, void(outcome_of_t<F>)>(
      bridge_detail::initiate_operation<bridge_detail::outcome_form_of<F>, bridge_detail::cancellation_of<F>,
                                        Executor>(ex),
      token, std::forward<Factory>(factory));
}

/// As above; completes on the handler's associated executor, or asio::system_executor.
template <operation_factory Factory,
          BOOST_ASIO_COMPLETION_TOKEN_FOR(void(outcome_of_t<Factory>)) CompletionToken>
auto async_outcome(Factory&& factory, CompletionToken&& token) {
  return asio::async_outcome(boost::asio::system_executor(), std::forward<Factory>(factory),
                             std::forward<CompletionToken>(token));
}

// ---------------------------------------------------------------------------------------------
// Named forms of async_op, for readability. Each has an executor-first form, as async_op: an
// operation launched by a combinator with `deferred` (parallel_group) completes on the
// executor it names, the default being asio::system_executor.

/// `co_await async_lock(m, use_awaitable)`: m.lock(); yields std::optional<mutex_guard<T>>
/// (engaged unless the error_code is set).
template <asio_executor Executor, class Lockable, class CompletionToken>
  requires requires(Lockable& m) {
    { m.lock() } -> selectable_awaiter;
  }
auto async_lock(const Executor& ex, Lockable& m, CompletionToken&& token) {
  return asio::async_op(
      ex, [&m] { return m.lock(); }, std::forward<CompletionToken>(token));
}
/// As above, on the handler's associated executor or asio::system_executor.
template <class Lockable, class CompletionToken>
  requires requires(Lockable& m) {
    { m.lock() } -> selectable_awaiter;
  }
auto async_lock(Lockable& m, CompletionToken&& token) {
  return asio::async_lock(boost::asio::system_executor(), m, std::forward<CompletionToken>(token));
}

/// rwlock::read(): shared access; yields std::optional<rwlock_read_guard<T>>.
template <asio_executor Executor, class RwLock, class CompletionToken>
  requires requires(RwLock& rw) {
    { rw.read() } -> selectable_awaiter;
  }
auto async_read_lock(const Executor& ex, RwLock& rw, CompletionToken&& token) {
  return asio::async_op(
      ex, [&rw] { return rw.read(); }, std::forward<CompletionToken>(token));
}
/// As above, on the handler's associated executor or asio::system_executor.
template <class RwLock, class CompletionToken>
  requires requires(RwLock& rw) {
    { rw.read() } -> selectable_awaiter;
  }
auto async_read_lock(RwLock& rw, CompletionToken&& token) {
  return asio::async_read_lock(boost::asio::system_executor(), rw, std::forward<CompletionToken>(token));
}

/// rwlock::write(): exclusive access; yields std::optional<rwlock_write_guard<T>>.
template <asio_executor Executor, class RwLock, class CompletionToken>
  requires requires(RwLock& rw) {
    { rw.write() } -> selectable_awaiter;
  }
auto async_write_lock(const Executor& ex, RwLock& rw, CompletionToken&& token) {
  return asio::async_op(
      ex, [&rw] { return rw.write(); }, std::forward<CompletionToken>(token));
}
/// As above, on the handler's associated executor or asio::system_executor.
template <class RwLock, class CompletionToken>
  requires requires(RwLock& rw) {
    { rw.write() } -> selectable_awaiter;
  }
auto async_write_lock(RwLock& rw, CompletionToken&& token) {
  return asio::async_write_lock(boost::asio::system_executor(), rw, std::forward<CompletionToken>(token));
}

/// semaphore::acquire(n): yields the semaphore_permit.
template <asio_executor Executor, class CompletionToken>
auto async_acquire(const Executor& ex, semaphore& sem, std::size_t n, CompletionToken&& token) {
  return asio::async_op(
      ex, [&sem, n] { return sem.acquire(n); }, std::forward<CompletionToken>(token));
}
/// As above, on the handler's associated executor or asio::system_executor.
template <class CompletionToken>
auto async_acquire(semaphore& sem, std::size_t n, CompletionToken&& token) {
  return asio::async_acquire(boost::asio::system_executor(), sem, n, std::forward<CompletionToken>(token));
}
/// semaphore::acquire(1).
template <asio_executor Executor, class CompletionToken>
auto async_acquire(const Executor& ex, semaphore& sem, CompletionToken&& token) {
  return asio::async_acquire(ex, sem, 1, std::forward<CompletionToken>(token));
}
/// As above, on the handler's associated executor or asio::system_executor.
template <class CompletionToken>
auto async_acquire(semaphore& sem, CompletionToken&& token) {
  return asio::async_acquire(boost::asio::system_executor(), sem, 1, std::forward<CompletionToken>(token));
}

/// rx.recv() on any channel's receiver (mpsc, oneshot, broadcast): yields the value; closed
/// once nothing can come any more.
template <asio_executor Executor, class Receiver, class CompletionToken>
  requires requires(Receiver& rx) {
    { rx.recv() } -> selectable_awaiter;
  }
auto async_recv(const Executor& ex, Receiver& rx, CompletionToken&& token) {
  return asio::async_op(
      ex, [&rx] { return rx.recv(); }, std::forward<CompletionToken>(token));
}
/// As above, on the handler's associated executor or asio::system_executor.
template <class Receiver, class CompletionToken>
  requires requires(Receiver& rx) {
    { rx.recv() } -> selectable_awaiter;
  }
auto async_recv(Receiver& rx, CompletionToken&& token) {
  return asio::async_recv(boost::asio::system_executor(), rx, std::forward<CompletionToken>(token));
}

/// tx.send(value) on a bounded channel's sender (mpsc, broadcast): yields std::optional<T>, the
/// value handed back when the send fails (engaged exactly when the error_code is set).
template <asio_executor Executor, class Sender, class T, class CompletionToken>
  requires requires(Sender& tx, T&& v) {
    { tx.send(std::move(v)) } -> selectable_awaiter;
  }
auto async_send(const Executor& ex, Sender& tx, T value, CompletionToken&& token) {
  return asio::async_op(
      ex, [&tx, v = std::move(value)]() mutable { return tx.send(std::move(v)); },
      std::forward<CompletionToken>(token));
}
/// As above, on the handler's associated executor or asio::system_executor.
template <class Sender, class T, class CompletionToken>
  requires requires(Sender& tx, T&& v) {
    { tx.send(std::move(v)) } -> selectable_awaiter;
  }
auto async_send(Sender& tx, T value, CompletionToken&& token) {
  return asio::async_send(boost::asio::system_executor(), tx, std::move(value),
                          std::forward<CompletionToken>(token));
}

/// condvar::wait(guard, stop): unlocks, waits for a notification, re-locks; yields
/// std::optional<Guard> (any guard of a mutex: mutex_guard, owned_mutex_guard, a mapped one;
/// the same type back), engaged unless the error_code is set (then the mutex is not held).
/// Cancellation has the wait's stop semantics at either stage; honoured for terminal and
/// partial cancellation (the mutex is unlocked either way: not "total").
template <asio_executor Executor, asyncband::detail::condvar_guard Guard, class CompletionToken>
auto async_condvar_wait(const Executor& ex, condvar& cv, Guard guard, CompletionToken&& token) {
  return asio::async_op(
      ex,
      [&cv, g = std::move(guard)](asyncband::stop_token stop) mutable {
        return cv.wait(std::move(g), std::move(stop));
      },
      std::forward<CompletionToken>(token));
}
/// As above, on the handler's associated executor or asio::system_executor.
template <asyncband::detail::condvar_guard Guard, class CompletionToken>
auto async_condvar_wait(condvar& cv, Guard guard, CompletionToken&& token) {
  return asio::async_condvar_wait(boost::asio::system_executor(), cv, std::move(guard),
                                  std::forward<CompletionToken>(token));
}

/// condvar::wait_while(guard, keep_waiting, stop): waits until keep_waiting(value) is false;
/// yields std::optional<Guard> as async_condvar_wait.
template <asio_executor Executor, asyncband::detail::condvar_guard Guard, class Predicate,
          class CompletionToken>
auto async_condvar_wait_while(const Executor& ex, condvar& cv, Guard guard, Predicate keep_waiting,
                              CompletionToken&& token) {
  return asio::async_op(
      ex,
      [&cv, g = std::move(guard), p = std::move(keep_waiting)](asyncband::stop_token stop) mutable {
        return cv.wait_while(std::move(g), std::move(p), std::move(stop));
      },
      std::forward<CompletionToken>(token));
}
/// As above, on the handler's associated executor or asio::system_executor.
template <asyncband::detail::condvar_guard Guard, class Predicate, class CompletionToken>
auto async_condvar_wait_while(condvar& cv, Guard guard, Predicate keep_waiting, CompletionToken&& token) {
  return asio::async_condvar_wait_while(boost::asio::system_executor(), cv, std::move(guard),
                                        std::move(keep_waiting), std::forward<CompletionToken>(token));
}

/// watch::receiver::wait_for(pred, stop): yields std::optional<watch::borrowed<T>>, a guard on
/// the first version for which pred holds; closed once the sender is gone.
template <asio_executor Executor, class Receiver, class Predicate, class CompletionToken>
  requires requires(Receiver& rx, Predicate p, asyncband::stop_token stop) {
    { rx.wait_for(std::move(p), std::move(stop)) } -> asyncband::detail::staged_awaiter;
  }
auto async_wait_for(const Executor& ex, Receiver& rx, Predicate pred, CompletionToken&& token) {
  return asio::async_op(
      ex,
      [&rx, p = std::move(pred)](asyncband::stop_token stop) mutable {
        return rx.wait_for(std::move(p), std::move(stop));
      },
      std::forward<CompletionToken>(token));
}
/// As above, on the handler's associated executor or asio::system_executor.
template <class Receiver, class Predicate, class CompletionToken>
  requires requires(Receiver& rx, Predicate p, asyncband::stop_token stop) {
    { rx.wait_for(std::move(p), std::move(stop)) } -> asyncband::detail::staged_awaiter;
  }
auto async_wait_for(Receiver& rx, Predicate pred, CompletionToken&& token) {
  return asio::async_wait_for(boost::asio::system_executor(), rx, std::move(pred),
                              std::forward<CompletionToken>(token));
}

}  // namespace asyncband::asio
