// asyncband/asio.hpp: waiting on asyncband primitives from Boost.Asio (optional; needs Boost.Asio
// 1.81 or later, headers only; not included by asyncband.hpp).
//
// An asio::awaitable cannot co_await a foreign awaitable, so the bridge offers the primitives'
// waits as Asio asynchronous operations, usable with every completion token:
//
//   namespace ab = asyncband;
//   ab::wait_status s = co_await ab::asio::async_wait(event, boost::asio::use_awaitable);
//   auto [s, r] = co_await ab::asio::async_wait(barrier, stop_token, boost::asio::use_awaitable);
//   ab::asio::async_wait(latch, boost::asio::bind_executor(strand, [](ab::wait_status) {...}));
//   std::future<ab::wait_status> f = ab::asio::async_wait(wg, boost::asio::use_future);
//
// Contract
// - Primitives: manual_reset_event, auto_reset_event, latch, wait_group, barrier, and any
//   primitive built on detail::wait_functions (see asyncband::asio::waitable). The operation
//   has the semantics of the primitive's `wait(stop_token)`: the same node, protocol and
//   outcomes. A wait_group handle leaves its group when the operation starts; a barrier wait
//   arrives when it starts (a stop already requested: no arrival); an auto_reset_event permit
//   received by a wait cancelled before its handler runs is passed on.
// - Completion signature: void(wait_status) for primitives whose wait yields nothing, and
//   void(wait_status, barrier_wait_result) for barrier (generally void(wait_status, value_type);
//   the value is value-initialized unless the status is ok). Every form may be cancelled through
//   Asio's per-operation cancellation, so every form reports a status. With use_awaitable the
//   co_await yields wait_status, or std::tuple<wait_status, value_type>. Cancellation is an
//   expected outcome, not an error: there is no error_code and nothing throws.
// - Executor: the handler runs on its associated executor (asio::get_associated_executor), with
//   the executor passed as first argument, or else asio::system_executor, as its default. The
//   handler is never invoked inside async_wait, nor inside the waking call (set(), count_down(),
//   request_stop(), a cancellation_signal's emit()): the completion is always posted to that
//   executor, as Asio timers and sockets do. So a broadcast wake-up of N operations returns at
//   once and the N handlers run as their executors schedule them. While pending, the operation
//   counts as outstanding work of that executor (io_context::run() does not return).
// - Cancellation, two ways, both ending the operation with wait_status::cancelled exactly once:
//   * async_wait(p, stop_token, token): a stop request observed before a waker claims the wait
//     (for auto_reset_event: before the handler runs) cancels it; a token already stopped at the
//     start completes it cancelled at once (still posted) without touching the primitive.
//   * the handler's associated cancellation slot (asio::bind_cancellation_slot, awaitable
//     operators, co_spawn with a bound slot): the types in wait_traits<P>::cancellation are
//     honoured (all of terminal, partial, total; barrier: terminal and partial, as its arrival
//     is kept). The emit must be synchronized with the handler's executor, as Asio requires.
//   Cancellation is best effort: a wait already claimed by a waker completes with ok.
// - Storage: one allocation per operation, with the handler's associated allocator (asio's
//   recycling allocator when it has none, which reuses a per-thread block), holding the handler,
//   the waiter node and the work guard; it is released before the handler is invoked. Posting
//   the completion is an Asio post (which allocates through the same allocator).
// - Lifetimes: the primitive must outlive the operation, as for every wait. If the execution
//   context of the handler's executor is shut down or destroyed (io_context destructor) while
//   operations are pending, they are unlinked from their primitives and their handlers are
//   destroyed without being invoked (for use_awaitable: the coroutine frame is destroyed), as
//   Asio does with its own pending operations; a later wake-up does not find them. An operation
//   already woken whose handler had not run yet is destroyed the same way, and an
//   auto_reset_event permit it was handed passes on to the next waiter. Do not destroy the context
//   concurrently with a wake-up or cancellation of one of its operations.
#pragma once

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/execution.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/is_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <mutex>
#include <stop_token>
#include <type_traits>
#include <utility>

#include "asyncband.hpp"
#include "detail/callback_wait.hpp"

namespace asyncband::asio {

/// A primitive whose wait can be driven by the bridge: it names a node following the core's
/// protocol (every primitive built on detail::wait_functions does).
template <class P>
concept waitable = requires {
  typename detail::wait_node_of_t<P>;
} && detail::wait_node<detail::wait_node_of_t<P>> && std::is_constructible_v<detail::wait_node_of_t<P>, P*>;

/// An executor in either of Asio's models.
template <class E>
concept asio_executor = boost::asio::execution::is_executor<E>::value || boost::asio::is_executor<E>::value;

/// Per-primitive policy; specialize for a primitive of your own if it differs from the default.
template <class P>
struct wait_traits {
  /// The Asio cancellation types that cancel a pending wait.
  static constexpr boost::asio::cancellation_type_t cancellation = boost::asio::cancellation_type::terminal |
                                                                   boost::asio::cancellation_type::partial |
                                                                   boost::asio::cancellation_type::total;
  /// What the primitive's wait does at the call, before its node starts.
  static void begin(P&) noexcept {}
};

template <>
struct wait_traits<barrier> {
  // A cancelled barrier wait keeps its arrival: a side effect, so not a "total" cancellation.
  static constexpr boost::asio::cancellation_type_t cancellation =
      boost::asio::cancellation_type::terminal | boost::asio::cancellation_type::partial;
  static void begin(barrier&) noexcept {}
};

template <>
struct wait_traits<wait_group> {
  static constexpr boost::asio::cancellation_type_t cancellation = boost::asio::cancellation_type::terminal |
                                                                   boost::asio::cancellation_type::partial |
                                                                   boost::asio::cancellation_type::total;
  // Every wait form of a wait_group gives up the handle's membership first: its wait node does,
  // when it is built (and completes at once, without the handle, if that departure was the last).
  static void begin(wait_group& /*unused*/) noexcept {}
};

namespace bridge_detail {

template <class V>
struct signature_for {
  using type = void(wait_status, V);
};
template <>
struct signature_for<void> {
  using type = void(wait_status);
};

}  // namespace bridge_detail

/// The completion signature of async_wait on P.
template <waitable P>
using completion_signature_t =
    typename bridge_detail::signature_for<typename detail::wait_node_of_t<P>::value_type>::type;

namespace bridge_detail {

/// What the service of an execution context knows of a pending operation.
struct pending_op {
  pending_op* prev = nullptr;
  pending_op* next = nullptr;
  /// Cancels the wait if it is still queued (its on_resolved then runs on this thread).
  void (*cancel)(pending_op*) noexcept = nullptr;
  /// Destroys the operation without invoking its handler.
  void (*destroy)(pending_op*) noexcept = nullptr;
};

/// Tracks the operations pending on one execution context, so that its shutdown can end them
/// without invoking their handlers (Asio's own services do the same with their operations).
///
/// At shutdown, under the service's lock, every listed operation is cancelled: one still queued
/// resolves on the shutting-down thread, which keeps it for destruction after the loop. An
/// operation already resolved has left the list and has its completion posted, which the
/// context destroys unrun. The context deletes the service right after shutdown(), so a waker
/// or canceller of one of its operations must not run concurrently with the context's
/// destruction (the header contract says so); the lock only orders the shutdown loop with
/// operations resolved on other threads before it. (Wakers never hold a primitive's lock while
/// they take this one, so taking primitives' locks under it is safe.)
class wait_service final : public boost::asio::execution_context::service {
 public:
  static inline boost::asio::execution_context::id id;

  explicit wait_service(boost::asio::execution_context& context) : service(context) {}

  /// Lists op; false if the context is shut down (the caller destroys op without starting it).
  bool add(pending_op& op) noexcept {
    const std::lock_guard lock(mutex_);
    if (shut_down_) return false;
    op.prev = nullptr;
    op.next = head_;
    if (head_ != nullptr) head_->prev = &op;
    head_ = &op;
    return true;
  }

  /// A resolved op leaves the list. True: post its completion. False: the context is shut down
  /// (or shutting down, on this thread): nothing will run there any more; the op is taken care
  /// of (destroyed by the caller, or after the shutdown loop).
  [[nodiscard]] bool remove(pending_op& op, bool& destroy_now) noexcept {
    destroy_now = false;
    if (shutting_down_here() == this) {  // resolved by our own cancel(), inside the loop below
      op.next = doomed_;
      doomed_ = &op;
      return false;
    }
    const std::lock_guard lock(mutex_);
    if (shut_down_) {
      destroy_now = true;
      return false;
    }
    (op.prev == nullptr ? head_ : op.prev->next) = op.next;
    if (op.next != nullptr) op.next->prev = op.prev;
    op.next = op.prev = nullptr;
    return true;
  }

 private:
  static const wait_service*& shutting_down_here() noexcept {
    thread_local const wait_service* current = nullptr;
    return current;
  }

  void shutdown() override {
    {
      const std::lock_guard lock(mutex_);
      shut_down_ = true;
      shutting_down_here() = this;
      pending_op* op = std::exchange(head_, nullptr);
      while (op != nullptr) {
        pending_op* const next = op->next;  // cancel() may move op to doomed_
        op->cancel(op);
        op = next;
      }
      shutting_down_here() = nullptr;
    }
    // Outside the lock: destroying a handler runs arbitrary destructors.
    while (doomed_ != nullptr) {
      pending_op* const op = doomed_;
      doomed_ = op->next;
      op->destroy(op);
    }
  }

  std::mutex mutex_;
  pending_op* head_ = nullptr;
  pending_op* doomed_ = nullptr;  // only on the shutting-down thread
  bool shut_down_ = false;
};

template <class Executor>
boost::asio::execution_context& context_of(const Executor& ex) {
  if constexpr (boost::asio::execution::is_executor<Executor>::value) {
    return boost::asio::query(ex, boost::asio::execution::context);
  } else {
    return ex.context();
  }
}

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

/// One pending async_wait: the handler, the waiter node, the work guard. Allocated with the
/// handler's associated allocator; destroyed before the handler is invoked.
template <class P, class Handler, class Executor>
class wait_op final : public pending_op {
  using node_type = detail::wait_node_of_t<P>;
  using value_type = typename node_type::value_type;
  using handler_allocator =
      boost::asio::associated_allocator_t<Handler, boost::asio::recycling_allocator<void>>;
  using allocator_type = typename std::allocator_traits<handler_allocator>::template rebind_alloc<wait_op>;
  using work_type = decltype(track_work(std::declval<const Executor&>()));

 public:
  /// Starts the operation; from the initiating function.
  static void start(Handler handler, const Executor& ex, P& primitive, std::stop_token stop) {
    wait_traits<P>::begin(primitive);
    wait_service& service = boost::asio::use_service<wait_service>(context_of(ex));
    allocator_type alloc(get_allocator_of(handler));
    wait_op* const op = std::allocator_traits<allocator_type>::allocate(alloc, 1);
    try {
      ::new (static_cast<void*>(op)) wait_op(std::move(handler), ex, service, primitive, std::move(stop));
    } catch (...) {
      std::allocator_traits<allocator_type>::deallocate(alloc, op, 1);
      throw;
    }
    if (!service.add(*op)) {
      op->destroy_self();
      return;
    }
    if (op->slot_.is_connected()) op->slot_.template emplace<cancel_handler>(op);
    if (op->wait_.start()) op->complete_later();
  }

 private:
  wait_op(Handler&& handler, const Executor& ex, wait_service& service, P& primitive, std::stop_token stop)
      : handler_(std::move(handler)),
        executor_(ex),
        work_(track_work(ex)),
        slot_(boost::asio::get_associated_cancellation_slot(handler_)),
        service_(&service),
        wait_(std::move(stop), &on_resolved, this, &primitive) {
    cancel = [](pending_op* self) noexcept { static_cast<wait_op*>(self)->wait_.cancel(); };
    destroy = [](pending_op* self) noexcept { static_cast<wait_op*>(self)->destroy_self(); };
  }

  static handler_allocator get_allocator_of(const Handler& h) noexcept {
    return boost::asio::get_associated_allocator(h, boost::asio::recycling_allocator<void>());
  }

  /// The asio cancellation slot's handler.
  struct cancel_handler {
    explicit cancel_handler(wait_op* o) noexcept : op(o) {}
    wait_op* op;
    void operator()(boost::asio::cancellation_type_t type) const noexcept {
      if ((type & wait_traits<P>::cancellation) != boost::asio::cancellation_type::none) op->wait_.cancel();
    }
  };

  /// Posted to the handler's executor; owns the operation until it runs (destroyed unrun, e.g.
  /// by the context's shutdown, it destroys the operation without invoking the handler).
  class completion {
   public:
    using allocator_type = handler_allocator;
    explicit completion(wait_op* op) noexcept : op_(op), alloc_(get_allocator_of(op->handler_)) {}
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
    wait_op* op_;
    handler_allocator alloc_;
  };

  /// The callback_wait's callback: on the thread that resolved the pending wait.
  static void on_resolved(void* self) noexcept { static_cast<wait_op*>(self)->complete_later(); }

  void complete_later() noexcept {
    completed_ = true;
    bool destroy_now = false;
    if (service_->remove(*this, destroy_now)) {
      boost::asio::post(executor_, completion(this));
    } else if (destroy_now) {
      destroy_self();
    }
  }

  /// On the handler's executor: reads the outcome, frees the operation, invokes the handler.
  void finish() {
    auto outcome = wait_.finish();
    completed_ = false;  // the outcome is delivered: nothing to pass on any more
    allocator_type alloc(get_allocator_of(handler_));
    Handler handler(std::move(handler_));
    [[maybe_unused]] work_type work(std::move(work_));  // released after the handler returns
    destroy_self(alloc);
    if constexpr (std::is_void_v<value_type>) {
      std::move(handler)(outcome.status());
    } else {
      const wait_status status = outcome.status();
      std::move(handler)(status, status == wait_status::ok ? std::move(outcome).value() : value_type{});
    }
  }

  void destroy_self() noexcept { destroy_self(allocator_type(get_allocator_of(handler_))); }

  // `alloc` is taken before the handler may be moved from.
  void destroy_self(allocator_type alloc) noexcept {
    if (slot_.is_connected()) slot_.clear();
    if (completed_) wait_.discard();  // destroyed unrun: a permit it was handed passes on
    this->~wait_op();
    std::allocator_traits<allocator_type>::deallocate(alloc, this, 1);
  }

  Handler handler_;
  Executor executor_;
  work_type work_;
  boost::asio::associated_cancellation_slot_t<Handler> slot_;
  wait_service* service_;
  bool completed_ = false;  // resolved (or completed at the start) and not yet finished
  detail::callback_wait<node_type, true> wait_;
};

/// The initiation object handed to asio::async_initiate.
template <class DefaultExecutor>
class initiate_wait {
 public:
  using executor_type = DefaultExecutor;
  explicit initiate_wait(const DefaultExecutor& ex) : executor_(ex) {}
  [[nodiscard]] executor_type get_executor() const noexcept { return executor_; }

  template <class Handler, class P>
  void operator()(Handler&& handler, P* primitive, std::stop_token stop) const {
    using handler_type = std::decay_t<Handler>;
    auto ex = boost::asio::get_associated_executor(handler, executor_);
    wait_op<P, handler_type, decltype(ex)>::start(std::forward<Handler>(handler), ex, *primitive,
                                                  std::move(stop));
  }

 private:
  DefaultExecutor executor_;
};

}  // namespace bridge_detail

/// Waits on `primitive` as an Asio asynchronous operation; completes on the handler's
/// associated executor (default: `ex`), cancellable through `stop` and the handler's
/// cancellation slot. Signature: completion_signature_t<P>.
template <asio_executor Executor, waitable P,
          BOOST_ASIO_COMPLETION_TOKEN_FOR(completion_signature_t<P>) CompletionToken>
auto async_wait(const Executor& ex, P& primitive, std::stop_token stop, CompletionToken&& token) {
  return boost::asio::async_initiate<CompletionToken, completion_signature_t<P>>(
      bridge_detail::initiate_wait<Executor>(ex), token, &primitive, std::move(stop));
}

/// As above, cancellable only through the handler's cancellation slot.
template <asio_executor Executor, waitable P,
          BOOST_ASIO_COMPLETION_TOKEN_FOR(completion_signature_t<P>) CompletionToken>
auto async_wait(const Executor& ex, P& primitive, CompletionToken&& token) {
  return asio::async_wait(ex, primitive, std::stop_token{}, std::forward<CompletionToken>(token));
}

/// Completes on the handler's associated executor, or asio::system_executor if it has none.
template <waitable P, BOOST_ASIO_COMPLETION_TOKEN_FOR(completion_signature_t<P>) CompletionToken>
auto async_wait(P& primitive, std::stop_token stop, CompletionToken&& token) {
  return asio::async_wait(boost::asio::system_executor(), primitive, std::move(stop),
                          std::forward<CompletionToken>(token));
}

/// As above, cancellable only through the handler's cancellation slot.
template <waitable P, BOOST_ASIO_COMPLETION_TOKEN_FOR(completion_signature_t<P>) CompletionToken>
auto async_wait(P& primitive, CompletionToken&& token) {
  return asio::async_wait(boost::asio::system_executor(), primitive, std::stop_token{},
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
