// asyncband/detail/callback_wait.hpp: a primitive's waiting operation driven by a callback
// instead of a coroutine, for bridges to callback-based frameworks (asyncband/asio.hpp).
//
// A thin driver of pending_wait (wait_operation.hpp), like wait_awaiter and block_wait: the same
// node, protocol and outcomes; where wait_awaiter resumes a coroutine, callback_wait calls
// `on_resolved(context)` on the resolving thread (a resume_target callback).
//
// Usage, by an owner that keeps the callback_wait at a stable address until it is finished:
//
//   callback_wait<Node, true> w(token, &on_resolved, ctx, &primitive);
//   if (w.start()) { /* completed now: on_resolved will not be called */ }
//   ... otherwise on_resolved(ctx) is called exactly once, on the resolving thread ...
//   auto outcome = w.finish();   // result<value_type>; then the object may be destroyed
#pragma once

#include <stop_token>
#include <utility>

#include "../result.hpp"
#include "wait_operation.hpp"
#include "waiter.hpp"

namespace asyncband::detail {

/// The node type of a primitive built on wait_functions.
template <class Primitive>
using wait_node_of_t = typename Primitive::template wait_node_of<>::type;

template <wait_node Node, bool Cancellable>
class callback_wait {
 public:
  /// Called once, on the thread that resolves a pending wait (a waker, the thread calling
  /// request_stop(), or the caller of cancel()). Must not throw. It may destroy the
  /// callback_wait only after calling finish() (typically it posts the completion elsewhere).
  using callback = resume_target::callback;

  template <class... Args>
  callback_wait(std::stop_token token, callback on_resolved, void* context, Args&&... args)
      : wait_(std::move(token), std::forward<Args>(args)...), target_(on_resolved, context) {}

  /// Starts the wait. Returns true if it completed at once (on_resolved will not be called);
  /// false if it is pending (on_resolved will be called exactly once). A stop already requested
  /// completes it at once as cancelled, without touching the primitive. Nothing here touches
  /// the object after the step that may hand it to the resolving thread.
  [[nodiscard]] bool start() noexcept { return wait_.try_complete() || !wait_.publish(target_); }

  /// Cancels a pending wait from any thread, as a stop request would: it completes with
  /// `cancelled` (on_resolved is called, on this thread) unless a waker claimed it first, and
  /// does nothing otherwise. Valid until finish() is called.
  void cancel() noexcept { wait_.cancel(wait_status::cancelled); }

  /// After completion (start() returned true, or on_resolved was called): the outcome. A
  /// transferable grant received after a stop request was observed is passed on (cancelled).
  wait_yield_t<Node, Cancellable> finish() { return wait_.finish(); }

  /// After completion, instead of finish(), when the outcome will never be delivered: passes on
  /// what the wait was granted (an auto_reset_event permit goes to the next waiter).
  void discard() noexcept { wait_.discard(); }

  // Destroying a pending wait (one that started and was not resolved) unlinks it, as for a
  // destroyed coroutine (pending_wait's destructor); destroying one whose on_resolved call is
  // in flight is undefined.

 private:
  pending_wait<Node, Cancellable> wait_;
  resume_target target_;
};

}  // namespace asyncband::detail
