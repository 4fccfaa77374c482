// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/initializer.hpp: waiting on a once_gate and running the caller's own
// initialiser when the run comes to it, for coroutines and for plain threads.
//
// A primitive describes one "run once" operation as an Op:
//
//   struct my_op {
//     using yield_type = ...;                // what the call yields (void, T&, a copy, init_result)
//     once_gate& gate() noexcept;
//     using initializer_type = F;            // the caller's own initialiser:
//     F& initializer() noexcept;             // kept alive (captures too) for the whole run
//     void accept(run_grant&);               // f yielded nothing: store, then grant.complete()
//     void accept(R&& awaited, run_grant&);  // f yielded a value: store it, then grant.complete()
//                                            // (or keep the grant: the run failed, passes on)
//     yield_type finish_run();               // after this caller's own run
//     yield_type finish_completed();         // after somebody's run completed the gate
//   };
//
// once_awaiter drives it from a coroutine: the wait's node lives in the awaiter; the run is a
// coroutine of its own (initializer_run), created only if the run comes to this caller (so a
// call that only waits allocates nothing), started on the caller's scheduler, and continuing the
// caller at its end. block_once drives it from a plain thread.
#pragma once

#include <cassert>
#include <coroutine>
#include <exception>
#include <functional>
#include <type_traits>
#include <utility>

#include "../block_on.hpp"
#include "../result.hpp"
#include "../stop_token.hpp"
#include "awaitable_traits.hpp"
#include "once_gate.hpp"
#include "wait_functions.hpp"
#include "wait_operation.hpp"

namespace asyncband::detail {

/// Builds the ops of the once family's public classes for drivers outside the core (the
/// Boost.Asio forms, asyncband/asio.hpp, define it); every class of the family befriends it.
struct once_ops;

/// Calls the caller's initialiser, with the call's stop token if it takes one (so it can pass the
/// token on to what it awaits).
template <class F>
decltype(auto) invoke_initializer(F& f, const asyncband::stop_token& stop) {
  if constexpr (std::is_invocable_v<F&, asyncband::stop_token>) {
    return std::invoke(f, stop);
  } else {
    return std::invoke(f);
  }
}

template <class F>
using initializer_call_t =
    decltype(invoke_initializer(std::declval<F&>(), std::declval<const asyncband::stop_token&>()));

/// Whether `co_await r` is well-formed for a coroutine without an await_transform.
template <class R>
concept awaitable_result = requires(R&& r) {
  { get_awaiter(std::forward<R>(r)).await_ready() } -> std::convertible_to<bool>;
  get_awaiter(std::forward<R>(r)).await_resume();
};

template <class F, bool Awaitable = awaitable_result<initializer_call_t<F>>>
struct initializer_value {
  using type = await_result_t<initializer_call_t<F>>;
};
template <class F>
struct initializer_value<F, false> {
  using type = initializer_call_t<F>;
};
/// What an initialiser finally yields: what its awaitable yields, or what it returns (a plain
/// function, accepted by the blocking forms).
template <class F>
using initializer_value_t = typename initializer_value<F>::type;

/// The coroutine that runs a waiting caller's initialiser: lazy, resumes on the caller's
/// scheduler (its waits inside the initialiser do too), and continues the caller when done.
class [[nodiscard]] initializer_run {
 public:
  struct promise_type {
    scheduler_ref scheduler;
    std::coroutine_handle<> caller;
    std::exception_ptr error;

    [[nodiscard]] scheduler_ref asyncband_scheduler() const noexcept { return scheduler; }
    initializer_run get_return_object() noexcept {
      return initializer_run(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct continue_caller {
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) noexcept {
        return h.promise().caller;
      }
      void await_resume() noexcept {}
    };
    continue_caller final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { error = std::current_exception(); }
  };

  initializer_run() noexcept = default;
  initializer_run(initializer_run&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  initializer_run& operator=(initializer_run&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  initializer_run(const initializer_run&) = delete;
  initializer_run& operator=(const initializer_run&) = delete;
  /// Destroying a run still in progress (its caller's frame destroyed) destroys its frame: the
  /// initialiser's own waits are abandoned as any destroyed coroutine's are.
  ~initializer_run() {
    if (handle_) handle_.destroy();
  }

  explicit operator bool() const noexcept { return static_cast<bool>(handle_); }

  /// Sets where it runs and whom it continues; returns the handle to start it with.
  std::coroutine_handle<> prepare(scheduler_ref scheduler, std::coroutine_handle<> caller) const noexcept {
    handle_.promise().scheduler = scheduler;
    handle_.promise().caller = caller;
    return handle_;
  }
  [[nodiscard]] std::exception_ptr error() const noexcept { return handle_.promise().error; }

 private:
  explicit initializer_run(std::coroutine_handle<promise_type> h) noexcept : handle_(h) {}
  std::coroutine_handle<promise_type> handle_;
};

/// The blocking forms' run, on the calling thread: an awaitable initialiser through block_on, a
/// plain function called directly.
template <class Op>
void run_initializer_blocking(Op& op, run_grant& grant, const asyncband::stop_token& stop) {
  using F = typename Op::initializer_type;
  const auto call = [&]() -> decltype(auto) {
    if constexpr (awaitable_result<initializer_call_t<F>>) {
      return block_on(invoke_initializer(op.initializer(), stop));
    } else {
      return invoke_initializer(op.initializer(), stop);
    }
  };
  if constexpr (std::is_void_v<initializer_value_t<F>>) {
    call();
    op.accept(grant);
  } else {
    op.accept(call(), grant);
  }
}

/// The body of a run: awaits the initialiser and hands what it yields to the op. `op` and
/// `grant` live in the awaiter, which outlives the run.
/// A plain function (no awaitable) runs in it too: on the caller's scheduler, not the waker's.
template <class Op>
initializer_run run_initializer(Op& op, run_grant& grant, asyncband::stop_token stop) {
  using F = typename Op::initializer_type;
  if constexpr (!awaitable_result<initializer_call_t<F>>) {
    run_initializer_blocking(op, grant, stop);  // nothing to await: it does not block
  } else if constexpr (std::is_void_v<initializer_value_t<F>>) {
    co_await invoke_initializer(op.initializer(), stop);
    op.accept(grant);
  } else {
    auto&& value = co_await invoke_initializer(op.initializer(), stop);
    op.accept(std::forward<decltype(value)>(value), grant);
  }
  co_return;
}

/// `yield()` as an Outcome: result<void> needs its value made apart.
template <class Outcome, class Yield>
Outcome yield_as(Yield&& yield) {
  if constexpr (std::is_same_v<Outcome, result<void>>) {
    std::forward<Yield>(yield)();
    return {};
  } else {
    return std::forward<Yield>(yield)();
  }
}

/// The awaiter of every "run once" call. Not movable (the node is published); lives in the
/// awaiting coroutine's frame. The run, if this caller gets it, is a coroutine of its own.
template <class Op, bool Cancellable>
class [[nodiscard("co_await it: nothing waits or runs until it is awaited")]] once_awaiter {
 public:
  using yield_type = typename Op::yield_type;
  using outcome_type = std::conditional_t<Cancellable, result<yield_type>, yield_type>;

  template <class... Args>
  explicit once_awaiter(asyncband::stop_token stop, Args&&... args)
      : op_(std::forward<Args>(args)...), stop_(stop), wait_(std::move(stop), &op_.gate(), true) {}

  bool await_ready() noexcept { return wait_.try_complete(); }

  /// Throws std::logic_error if this awaiter suspended before (it is awaited once).
  template <class Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> caller) {
    if (wait_.was_published() || runner_ || error_) [[unlikely]]
      throw_awaited_again();  // (a run taken at once leaves no trace in the node: check the run too)
    caller_ = caller;
    scheduler_ = scheduler_of(caller);
    if (wait_.publish(resolved_target())) return std::noop_coroutine();
    return next_step();  // completed while queueing: the run came at once, or the gate completed
  }

  outcome_type await_resume() {
    if (!runner_ && !error_) return from_wait();
    wait_.keep_grant();
    if (runner_) error_ = runner_.error();
    grant_.fail();  // no effect if the run completed; else it passes on before we report
    if (error_) std::rethrow_exception(error_);
    return yield_as<outcome_type>([this]() -> decltype(auto) { return op_.finish_run(); });
  }

 private:
  resume_target resolved_target() noexcept {
    // With no scheduler, the caller (or its run) goes on inline on the resolving thread, as a
    // continuation: a wake batch defers it when resolutions nest deep.
    return scheduler_.empty() ? resume_target::continuation(&on_resolved, this)
                              : resume_target(&on_resolved, this);
  }

  /// The resolver, outside every lock: the caller continues, or its run starts, on the caller's
  /// scheduler. Nothing touches the awaiter after handing it over.
  static void on_resolved(void* self) noexcept {
    auto& awaiter = *static_cast<once_awaiter*>(self);
    const scheduler_ref scheduler = awaiter.scheduler_;
    scheduler.resume(awaiter.next_step());
  }

  /// What follows a completed wait: the run, if this caller was granted it and still wants it;
  /// otherwise the caller (await_resume reports, passing on a run it will not use).
  std::coroutine_handle<> next_step() noexcept {
    const auto& node = wait_.node();
    if (node.status != wait_status::ok || node.turn != gate_turn::run || wait_.stop_requested())
      return caller_;
    // The stop callback goes before the run starts: it reaches the gate, and from here on this
    // call wakes others (its run completes the gate, or passes on when it fails or its frame is
    // destroyed), any of whom may destroy the gate at once; a stop requested later must find
    // nothing registered. The node is no longer queued: the callback had nothing left to do.
    wait_.keep_grant();
    grant_ = run_grant(op_.gate());
    try {
      runner_ = run_initializer(op_, grant_, stop_);
    } catch (...) {  // the run's frame could not be made: this caller fails, the run passes on
      error_ = std::current_exception();
      return caller_;
    }
    return runner_.prepare(scheduler_, caller_);
  }

  outcome_type from_wait() {
    auto waited = wait_.finish();  // passes on a run granted after a stop request
    if constexpr (Cancellable) {
      if (!waited) return waited.status();
      assert(*waited == gate_turn::completed);
    } else {
      assert(waited == gate_turn::completed);
    }
    return yield_as<outcome_type>([this]() -> decltype(auto) { return op_.finish_completed(); });
  }

  // Destroyed in reverse: a run still in progress first (its frame), then the grant it held
  // (the run passes on), then the wait, then the op (which may own the gate's storage).
  Op op_;
  asyncband::stop_token stop_;
  pending_wait<once_gate::node, Cancellable> wait_;
  std::coroutine_handle<> caller_;
  scheduler_ref scheduler_;
  std::exception_ptr error_;
  run_grant grant_;
  initializer_run runner_;
};

/// The blocking twin of once_awaiter. A deadline bounds the wait for the gate, not a run.
template <class Op, bool Cancellable>
std::conditional_t<Cancellable, result<typename Op::yield_type>, typename Op::yield_type> block_once(
    asyncband::stop_token stop, steady_deadline deadline, Op& op) {
  using outcome_type =
      std::conditional_t<Cancellable, result<typename Op::yield_type>, typename Op::yield_type>;
  auto waited = block_wait<once_gate::node, Cancellable>(stop, deadline, &op.gate(), true);
  gate_turn turn{};
  if constexpr (Cancellable) {
    if (!waited) return waited.status();
    turn = *waited;
  } else {
    turn = waited;
  }
  if (turn == gate_turn::completed) {
    return yield_as<outcome_type>([&op]() -> decltype(auto) { return op.finish_completed(); });
  }
  run_grant grant(op.gate());
  run_initializer_blocking(op, grant, stop);  // if it throws, the grant fails on the way out
  grant.fail();                               // no effect if the run completed
  return yield_as<outcome_type>([&op]() -> decltype(auto) { return op.finish_run(); });
}

/// The five forms of one "run once" operation, from an Op constructible from `args`.
template <class Op>
struct once_forms {
  template <class... Args>
  static auto await(Args&&... args) {
    return once_awaiter<Op, false>({}, std::forward<Args>(args)...);
  }
  template <class... Args>
  static auto await_until_stopped(asyncband::stop_token stop, Args&&... args) {
    return once_awaiter<Op, true>(std::move(stop), std::forward<Args>(args)...);
  }
  template <class... Args>
  static decltype(auto) block(Args&&... args) {
    Op op(std::forward<Args>(args)...);
    return block_once<Op, false>({}, {}, op);
  }
  template <class... Args>
  static auto block_until_stopped(asyncband::stop_token stop, Args&&... args) {
    Op op(std::forward<Args>(args)...);
    return block_once<Op, true>(std::move(stop), {}, op);
  }
  template <class Rep, class Period, class... Args>
  static auto block_for(std::chrono::duration<Rep, Period> timeout, Args&&... args) {
    Op op(std::forward<Args>(args)...);
    return block_once<Op, true>({}, deadline_after(timeout), op);
  }
};

}  // namespace asyncband::detail
