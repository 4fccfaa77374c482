// SPDX-License-Identifier: Apache-2.0
// asyncband/asio.hpp: every asyncband waiting operation from Boost.Asio (optional; needs
// Boost.Asio 1.81 or later, headers only; not included by asyncband.hpp).
//
// An asio::awaitable cannot co_await a foreign awaitable, so the bridge offers the primitives'
// operations as Asio asynchronous operations, usable with every completion token (use_awaitable,
// deferred, use_future, callbacks, as_tuple, redirect_error, bind_executor, bind_allocator,
// bind_cancellation_slot, experimental::parallel_group, the awaitable operators || and &&):
//
//   namespace ab = asyncband;
//   namespace net = boost::asio;
//   auto permit = co_await ab::asio::async_op([&] { return sem.acquire(2); }, net::use_awaitable);
//   auto [ec, value] = co_await ab::asio::async_recv(rx, net::as_tuple(net::use_awaitable));
//   auto back = co_await ab::asio::async_send(tx, std::move(v), net::redirect_error(net::use_awaitable, ec));
//   auto first = co_await (ab::asio::async_recv(rx, net::use_awaitable) || timer.async_wait(...));
//   auto guard = co_await ab::asio::async_outcome([&] { return m.lock(); }, net::use_awaitable);
//   ab::wait_status s = co_await ab::asio::async_wait(event, net::use_awaitable);
//
// Contract
// - Operations: async_op([executor,] factory, token) runs the awaiter that `factory()` returns,
//   which may be any awaiter the primitives return for a waiting operation (asio::
//   selectable_awaiter): the waits of the events, latch, wait_group, barrier, phaser, watch
//   (changed) and shutdown; semaphore acquire; mutex lock; rwlock read and write; channel recv,
//   send and reserve (mpsc, oneshot, broadcast); each with or without a stop token. The factory
//   is called once, at initiation (for `deferred`, when the operation is launched), and the
//   awaiter is built in place in the operation's state. The operation has the semantics of
//   `co_await factory()`: the same node, protocol and outcomes; what the awaiter refers to must
//   outlive the operation, as for co_await. Named forms: async_lock, async_read_lock,
//   async_write_lock, async_acquire, async_recv, async_send. The once family has its own forms at
//   the end of this header.
// - Staged operations: a condvar wait or wait_while and watch's wait_for are several waits in a
//   row (a notification then the mutex; versions until a predicate holds), not one node that
//   could commit. async_op/async_outcome take them as a factory of an asyncband::stop_token
//   (asio::staged_factory: `[&](asyncband::stop_token s) { return cv.wait(std::move(g), s); }`); the
//   operation owns the stop source and the Asio cancellation requests the stop, so the wait's
//   own stop semantics apply at whichever stage it is (a condvar wait ends cancelled without the
//   mutex, a notify_one it consumed passes on). One that ended ok but is cancelled before its
//   handler runs is reported cancelled and gives back the same way: its guard is dropped and a
//   consumed notify_one passes on. Named forms: async_condvar_wait, async_condvar_wait_while,
//   async_wait_for (yielding std::optional of the guard). Terminal and partial cancellation only:
//   a cancelled one leaves the mutex unlocked, or versions marked seen. The stop source's state
//   is one more allocation per operation.
// - Completion signature (async_op, op_signature_t): Asio's convention. void(error_code) for an
//   operation that yields nothing or result<void>; void(error_code, T) for one that yields T or
//   result<T> (std::optional<T> when T has no default constructor, as the lock guards: engaged
//   exactly on success), T value-initialized on failure; void(error_code, std::optional<T>) for
//   a send of T: the value handed back, engaged exactly when the error_code is set. The codes
//   (asio/error.hpp): cancellation is boost::asio::error::operation_aborted itself (equal to
//   asio::error::cancelled); timeout, closed and lagged are in the asyncband
//   category. With use_awaitable a failure throws boost::system::system_error, and the values
//   of the completion go with it (a send's handed-back value too): use as_tuple,
//   redirect_error or the value form to keep them.
// - Value form: async_outcome([executor,] factory, token) is the same operation with signature
//   void(outcome_of_t<Factory>): what `co_await factory()` yields when that can say "cancelled"
//   (result<T>, send_result<T>, broadcast::recv_result<T>), else result<T> (result<void> for a
//   wait that yields nothing). Failures are values: nothing throws.
// - Status form: async_wait([executor,] primitive, [stop_token,] token) on a primitive built on
//   detail::wait_functions (events, latch, wait_group, barrier...: asio::waitable), with
//   signature void(wait_status) or void(wait_status, value) (completion_signature_t<P>; the
//   value is value-initialized unless the status is ok). It is async_outcome over
//   `primitive.wait(stop_token)`, kept for the programs written against it.
// - Per-operation cancellation, through the handler's associated cancellation slot
//   (bind_cancellation_slot, the awaitable operators, parallel_group, co_spawn with a bound
//   slot): terminal, partial and total are honoured (operation_traits<Awaiter>; a barrier's or
//   a phaser participant's wait honours terminal and partial only, as it keeps its arrival).
//   The cancellation and the operation's node contend for one commit point, as the operations
//   of an asyncband::when_any do:
//   * before a waker committed the node: the node is cancelled and the waker skips it (the
//     permit, the lock hand-off, the unit of capacity go to the next waiter);
//   * after the node committed (a waker granted it, or it completed at the start) and before
//     the handler ran: the operation gives back what it was granted. A semaphore's permits and
//     a lock hand-off pass to the next waiter, an auto-reset permit is stored again, a value a
//     receive was woken for stays in its channel, at its head, a send's unit goes back and its
//     value comes back in the completion (the value is sent only when the handler runs);
//   and either way the operation completes with operation_aborted (std::nullopt / cancelled in
//   the value form). So `||` and parallel_group lose nothing: whatever the losing operation had
//   been granted is given back, and a send that lost did not send. Once the handler has run, a
//   cancellation has no effect. A cancellation the operation does not honour does nothing. A
//   barrier or phaser arrival is not a grant: it is kept.
//   A stop token given to the primitive (`[&] { return ev.wait(stop); }`) keeps the core's
//   rules: a stop observed first completes the operation with its cancelled outcome.
//   The emit must be synchronized with the handler's executor, as Asio requires.
// - The start: an uncontended lock, acquisition or wait completes at once with the awaiter's
//   own lock-free step (what it took stays revocable, as above); a send always queues through
//   the channel's capacity, so that nothing is pushed into the channel before its handler runs.
// - Executor: the handler runs on its associated executor (asio::get_associated_executor), with
//   the executor passed as first argument, or else asio::system_executor, as its default. The
//   handler is never invoked inside the initiating function, nor inside the waking call (set(),
//   unlock, send, request_stop(), a cancellation_signal's emit()): the completion is always
//   posted to that executor, as Asio timers and sockets do. So a broadcast wake-up of N
//   operations returns at once and the N handlers run as their executors schedule them. While
//   pending, the operation counts as outstanding work of that executor (io_context::run() does
//   not return).
// - Storage: one allocation per operation, with the handler's associated allocator (asio's
//   recycling allocator when it has none, which reuses a per-thread block), holding the awaiter,
//   the handler and the work guard; it is released before the handler is invoked. A staged
//   operation allocates one more block, its asyncband::stop_source's state (with operator new). Posting the
//   completion is an Asio post (which allocates through the same allocator).
// - Lifetimes: the primitive must outlive the operation, as for every wait. If the execution
//   context of the handler's executor is shut down or destroyed (io_context destructor) while
//   operations are pending, they are unlinked from their primitives and their handlers are
//   destroyed without being invoked (for use_awaitable: the coroutine frame is destroyed), as
//   Asio does with its own pending operations; a later wake-up does not find them. An operation
//   already woken whose handler had not run yet is destroyed the same way, and what it had been
//   granted passes on (a permit or lock to the next waiter; a send's value is destroyed unsent).
//   The context may be destroyed from code a wake-up runs inline (a coroutine without a
//   scheduler that a set(), notify or unlock resumes), even when that wake-up also woke
//   operations of the context: the shutdown takes them out of the wake-up still in progress on
//   its thread and ends them as above. Do not destroy the context concurrently with a wake-up or
//   cancellation of one of its operations on another thread (a data race on the context, as
//   for any Asio call made during its destruction).
// - Exceptions: a factory that throws (a second concurrent receive: std::logic_error) throws
//   from the initiation, nothing started: from the initiating call for callbacks, from the
//   launch for deferred; under use_awaitable Asio (1.81) initiates after the coroutine
//   suspended, so the exception propagates out of the executor's run(). A value whose move
//   throws while the outcome is taken (on the handler's executor) propagates out of run() too,
//   the handler destroyed unrun.
// - Combinators: `||`, `&&` and parallel_group cancel the operations that lose, and those give
//   back what they had (above). With parallel_group and `deferred`, pass the executor of the
//   coroutine to the operation (`async_recv(ex, rx, deferred)`): an operation completes on the
//   executor its initiation names, asio::system_executor by default, and the group's
//   cancellation of it must be synchronized with that executor.
// - g++ 12 destroys twice a braced temporary with a non-trivial destructor written inside a
//   co_await expression (docs/design.md, Toolchain notes): build such an argument (a job struct
//   passed to async_send) before the co_await.
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <type_traits>
#include <utility>

#include "asio/error.hpp"
#include "asio/operation.hpp"
#include "asyncband.hpp"
#include "stop_token.hpp"

/// The Boost.Asio bridge (asyncband/asio.hpp, optional): every asyncband waiting operation as an
/// Asio asynchronous operation, for every completion token.
namespace asyncband::asio {

/// A primitive whose wait async_wait can drive: it names a node following the core's protocol
/// (every primitive built on detail::wait_functions does).
template <class P>
concept waitable =
    requires { typename bridge_detail::node_of_t<P>; } && detail::wait_node<bridge_detail::node_of_t<P>> &&
    std::is_constructible_v<bridge_detail::node_of_t<P>, P*>;

/// Per-primitive policy of async_wait; specialize for a primitive of your own if it differs.
template <class P>
struct wait_traits {
  /// The Asio cancellation types that cancel a pending wait.
  static constexpr boost::asio::cancellation_type_t cancellation = boost::asio::cancellation_type::terminal |
                                                                   boost::asio::cancellation_type::partial |
                                                                   boost::asio::cancellation_type::total;
  /// What the primitive's wait does at the call, before its node starts.
  static void begin(P&) noexcept {}
};

/// A barrier wait arrives when it starts, and a cancelled one keeps its arrival: a side effect,
/// so its cancellation is not "total".
template <>
struct wait_traits<barrier> {
  // A cancelled barrier wait keeps its arrival: a side effect, so not a "total" cancellation.
  /// The cancellation types async_wait accepts: terminal and partial.
  static constexpr boost::asio::cancellation_type_t cancellation =
      boost::asio::cancellation_type::terminal | boost::asio::cancellation_type::partial;
  /// Nothing to do at the call.
  static void begin(barrier&) noexcept {}
};

/// A wait_group's wait, whose every form gives up the handle's membership first.
template <>
struct wait_traits<wait_group> {
  /// The cancellation types async_wait accepts: terminal, partial and total.
  static constexpr boost::asio::cancellation_type_t cancellation = boost::asio::cancellation_type::terminal |
                                                                   boost::asio::cancellation_type::partial |
                                                                   boost::asio::cancellation_type::total;
  // Every wait form of a wait_group gives up the handle's membership first: its wait node does,
  // when it is built (and completes at once, without the handle, if that departure was the last).
  /// Nothing to do at the call: the wait node gives up the membership when it is built.
  static void begin(wait_group& /*unused*/) noexcept {}
};

namespace bridge_detail {

/// async_wait's factory: the primitive's cancellable wait.
template <class P>
struct wait_factory {
  P* primitive;
  asyncband::stop_token stop;
  auto operator()() {
    wait_traits<P>::begin(*primitive);
    return detail::wait_awaiter<node_of_t<P>, true>(std::move(stop), primitive);
  }
};

template <class P>
using status_form_of = status_form<typename driver_t<wait_factory<P>>::outcome>;

}  // namespace bridge_detail

/// The completion signature of async_wait on P.
template <waitable P>
using completion_signature_t = typename bridge_detail::status_form_of<P>::signature;

/// Waits on `primitive` as an Asio asynchronous operation; completes on the handler's
/// associated executor (default: `ex`), cancellable through `stop` and the handler's
/// cancellation slot. Signature: completion_signature_t<P>.
template <asio_executor Executor, waitable P,
          BOOST_ASIO_COMPLETION_TOKEN_FOR(completion_signature_t<P>) CompletionToken>
auto async_wait(const Executor& ex, P& primitive, asyncband::stop_token stop, CompletionToken&& token) {
  return boost::asio::async_initiate<CompletionToken, completion_signature_t<P>>(
      bridge_detail::initiate_operation<bridge_detail::status_form_of<P>, wait_traits<P>::cancellation,
                                        Executor>(ex),
      token, bridge_detail::wait_factory<P>{&primitive, std::move(stop)});
}

/// As above, cancellable only through the handler's cancellation slot.
template <asio_executor Executor, waitable P,
          BOOST_ASIO_COMPLETION_TOKEN_FOR(completion_signature_t<P>) CompletionToken>
auto async_wait(const Executor& ex, P& primitive, CompletionToken&& token) {
  return asio::async_wait(ex, primitive, asyncband::stop_token{}, std::forward<CompletionToken>(token));
}

/// Completes on the handler's associated executor, or asio::system_executor if it has none.
template <waitable P, BOOST_ASIO_COMPLETION_TOKEN_FOR(completion_signature_t<P>) CompletionToken>
auto async_wait(P& primitive, asyncband::stop_token stop, CompletionToken&& token) {
  return asio::async_wait(boost::asio::system_executor(), primitive, std::move(stop),
                          std::forward<CompletionToken>(token));
}

/// As above, cancellable only through the handler's cancellation slot.
template <waitable P, BOOST_ASIO_COMPLETION_TOKEN_FOR(completion_signature_t<P>) CompletionToken>
auto async_wait(P& primitive, CompletionToken&& token) {
  return asio::async_wait(boost::asio::system_executor(), primitive, asyncband::stop_token{},
                          std::forward<CompletionToken>(token));
}

}  // namespace asyncband::asio

// ---------------------------------------------------------------------------------------------
// The once family from an asio::awaitable, with an initialiser that is Asio's own.

namespace asyncband::detail {

/// Builds the once family's ops for the Boost.Asio forms below.
struct once_ops {
  template <class F>
  static auto call_once(once& o, F f) {
    return call_once_op<F>(&o.gate_, std::move(f));
  }
  template <class T, class F>
  static auto get_or_init(once_cell<T>& c, F f) {
    return cell_init_op<plain_cell_ref<T>, T&, F>(c.ref(), std::move(f));
  }
  template <class T, class F>
  static auto get_or_try_init(once_cell<T>& c, F f) {
    return cell_try_init_op<plain_cell_ref<T>, T&, F>(c.ref(), std::move(f));
  }
  template <class K, class V, class H, class E, class F>
  static auto compute(once_map<K, V, H, E>& m, const K& key, F f) {
    return cell_init_op<typename once_map<K, V, H, E>::ticket, V, F>(m.join(key), std::move(f));
  }
  template <class K, class V, class H, class E, class F>
  static auto try_compute(once_map<K, V, H, E>& m, const K& key, F f) {
    return cell_try_init_op<typename once_map<K, V, H, E>::ticket, V, F>(m.join(key), std::move(f));
  }
  template <class K, class V, class H, class E, class F>
  static auto work(singleflight::group<K, V, H, E>& g, const K& key, F f) {
    return cell_init_op<typename singleflight::group<K, V, H, E>::ticket, V, F>(g.join(key), std::move(f));
  }
  template <class K, class V, class H, class E, class F>
  static auto try_work(singleflight::group<K, V, H, E>& g, const K& key, F f) {
    return cell_try_init_op<typename singleflight::group<K, V, H, E>::ticket, V, F>(g.join(key),
                                                                                    std::move(f));
  }
};

}  // namespace asyncband::detail

namespace asyncband::asio {

namespace bridge_detail {

/// once_awaiter's protocol as an asio::awaitable: the gate's runner wait through async_wait
/// (cancellable through the coroutine's cancellation slot; a run granted to a cancelled wait
/// passes on), then, if the run came to this caller, its own initialiser awaited right here.
template <class Op>
boost::asio::awaitable<result<typename Op::yield_type>> run_once(Op op) {
  using outcome = result<typename Op::yield_type>;
  using F = typename Op::initializer_type;
  const auto [status, turn] = co_await async_wait(op.gate(), boost::asio::use_awaitable);
  if (status != wait_status::ok) co_return status;
  if (turn == detail::gate_turn::completed) {
    co_return detail::yield_as<outcome>([&op]() -> decltype(auto) { return op.finish_completed(); });
  }
  detail::run_grant grant(op.gate());  // a throw, or the frame destroyed mid-run: the run passes on
  if constexpr (!detail::awaitable_result<detail::initializer_call_t<F>>) {
    detail::run_initializer_blocking(op, grant, {});  // a plain function: nothing to await
  } else if constexpr (std::is_void_v<detail::initializer_value_t<F>>) {
    co_await detail::invoke_initializer(op.initializer(), {});
    op.accept(grant);
  } else {
    auto value = co_await detail::invoke_initializer(op.initializer(), {});
    op.accept(std::move(value), grant);
  }
  grant.fail();  // no effect if the run completed (a try_ initialiser's error: it passes on)
  co_return detail::yield_as<outcome>([&op]() -> decltype(auto) { return op.finish_run(); });
}

}  // namespace bridge_detail

/// once::call_once from an asio::awaitable. `f` returns an asio::awaitable (or is a plain
/// function); the call yields result<void>: ok, or cancelled (the coroutine's cancellation
/// slot ended its wait). Failure, pass-on and synchronization as once::call_once.
template <class F>
boost::asio::awaitable<result<void>> call_once(once& o, F f) {
  return bridge_detail::run_once(detail::once_ops::call_once(o, std::move(f)));
}

/// once_cell::get_or_init from an asio::awaitable: yields result<T&>.
template <class T, class F>
boost::asio::awaitable<result<T&>> get_or_init(once_cell<T>& cell, F f) {
  return bridge_detail::run_once(detail::once_ops::get_or_init(cell, std::move(f)));
}

/// once_cell::get_or_try_init from an asio::awaitable: yields result<init_result<T&, E>>.
template <class T, class F>
auto get_or_try_init(once_cell<T>& cell, F f) {
  return bridge_detail::run_once(detail::once_ops::get_or_try_init(cell, std::move(f)));
}

/// once_map::compute from an asio::awaitable: yields result<V>.
template <class K, class V, class H, class E, class F>
boost::asio::awaitable<result<V>> compute(once_map<K, V, H, E>& map, const K& key, F f) {
  return bridge_detail::run_once(detail::once_ops::compute(map, key, std::move(f)));
}

/// once_map::try_compute from an asio::awaitable: yields result<init_result<V, E>>.
template <class K, class V, class H, class E, class F>
auto try_compute(once_map<K, V, H, E>& map, const K& key, F f) {
  return bridge_detail::run_once(detail::once_ops::try_compute(map, key, std::move(f)));
}

/// singleflight::group::work from an asio::awaitable: yields result<V>.
template <class K, class V, class H, class E, class F>
boost::asio::awaitable<result<V>> work(singleflight::group<K, V, H, E>& group, const K& key, F f) {
  return bridge_detail::run_once(detail::once_ops::work(group, key, std::move(f)));
}

/// singleflight::group::try_work from an asio::awaitable: yields result<init_result<V, E>>.
template <class K, class V, class H, class E, class F>
auto try_work(singleflight::group<K, V, H, E>& group, const K& key, F f) {
  return bridge_detail::run_once(detail::once_ops::try_work(group, key, std::move(f)));
}

}  // namespace asyncband::asio
