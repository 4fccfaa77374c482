// asyncband/detail/wait_operation.hpp: the one awaiter and the one blocking wait that every
// primitive's waiting operation is made of.
//
// A primitive describes one waiting operation as a node type deriving from detail::waiter:
//
//   struct my_node : detail::waiter {
//     using value_type = ...;                     // what a completed wait yields (may be void)
//     static constexpr bool transferable = ...;   // does a completed wait hold a grant that a
//                                                 // late cancellation must pass on?
//     bool try_ready() noexcept;                  // complete without queueing (lock-free or locked)
//     bool enqueue() noexcept;                    // under the lock: complete now (true) or link
//     bool cancel(wait_status why) noexcept;      // unlink if still queued; true if it did
//     value_type take();                          // after completion with status ok
//     void give_back() noexcept;                  // transferable only: pass the grant on
//   };
//
// and returns wait_awaiter<my_node, Cancellable> from its wait functions, and block_wait() from
// its blocking twins. This file holds the whole suspension protocol; primitives never touch the
// handshake themselves.
#pragma once

#include <chrono>
#include <concepts>
#include <coroutine>
#include <optional>
#include <stop_token>
#include <type_traits>
#include <utility>

#include "../result.hpp"
#include "../scheduler.hpp"
#include "waiter.hpp"

namespace asyncband::detail {

template <class Node>
concept wait_node = std::derived_from<Node, waiter> && requires(Node& n, wait_status why) {
  typename Node::value_type;
  { Node::transferable } -> std::convertible_to<bool>;
  { n.try_ready() } noexcept -> std::same_as<bool>;
  { n.enqueue() } noexcept -> std::same_as<bool>;
  { n.cancel(why) } noexcept -> std::same_as<bool>;
  n.take();
};

/// The stop callback of a waiting operation: claims the node if it is still queued and resolves
/// it (the coroutine resumes with a cancelled outcome). If a waker claimed it first, does nothing.
template <class Node>
struct cancel_on_stop {
  Node* node;
  void operator()() const noexcept {
    if (node->cancel(wait_status::cancelled)) {
      at_test_point(test_point::claimed_for_cancel);
      node->resolve();
    }
  }
};

template <class Node>
using stop_callback_for = std::stop_callback<cancel_on_stop<Node>>;

/// What a wait yields: the node's value (or nothing) for waits that cannot fail, result<value>
/// for cancellable ones.
template <class Node, bool Cancellable>
using wait_yield_t =
    std::conditional_t<Cancellable, result<typename Node::value_type>, typename Node::value_type>;

/// Turns a resolved node into what the wait yields. A transferable grant received after a stop
/// request was observed is passed on, and the wait reports cancelled: cancellation commits
/// until the waiter resumes, and whatever it had been granted is not lost.
template <class Node, bool Cancellable>
wait_yield_t<Node, Cancellable> finish_wait(Node& node, const std::stop_token& token) {
  if constexpr (Cancellable) {
    if (node.status == wait_status::ok && Node::transferable && token.stop_requested()) {
      if constexpr (Node::transferable) node.give_back();
      return wait_status::cancelled;
    }
    if (node.status != wait_status::ok) return node.status;
    if constexpr (std::is_void_v<typename Node::value_type>) {
      node.take();
      return {};
    } else {
      return node.take();
    }
  } else {
    return node.take();
  }
}

/// The awaiter of every waiting operation. Lives in the awaiting coroutine's frame, with its node.
/// Not movable: the node's address is published to other threads while suspended.
template <wait_node Node, bool Cancellable>
class [[nodiscard]] wait_awaiter {
 public:
  template <class... Args>
  explicit wait_awaiter(std::stop_token token, Args&&... args)
      : node_(std::forward<Args>(args)...), token_(std::move(token)) {}
  wait_awaiter(const wait_awaiter&) = delete;
  wait_awaiter& operator=(const wait_awaiter&) = delete;

  /// Destroying the frame of a coroutine suspended here unlinks the node (see docs/design.md,
  /// "Destroying a waiting coroutine"). Nothing to do if it never suspended or was resumed.
  ~wait_awaiter() {
    if (!node_.is_suspended_unresolved()) return;
    if (!node_.abandon()) {
      assert(false && "asyncband: coroutine destroyed while its resumption was in flight");
      return;
    }
    stop_callback_.reset();  // waits for a stop callback running on another thread
    if (!node_.cancel(wait_status::cancelled)) node_.await_resolver();
  }

  bool await_ready() noexcept {
    if (Cancellable && token_.stop_requested()) {
      node_.status = wait_status::cancelled;
      return true;
    }
    return node_.try_ready();
  }

  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    node_.set_target(resume_target(h, scheduler_of(h)));
    return suspend();
  }

  wait_yield_t<Node, Cancellable> await_resume() {
    stop_callback_.reset();
    return finish_wait<Node, Cancellable>(node_, token_);
  }

 private:
  // Kept out of line so that nothing after the publication step is merged into the coroutine
  // body (clang 14 has touched the frame after await_suspend handed it away: LLVM 56301/65054).
  [[gnu::noinline]] bool suspend() noexcept {
    if (node_.enqueue()) return false;
    at_test_point(test_point::published);
    if (Cancellable && token_.stop_possible()) stop_callback_.emplace(token_, cancel_on_stop<Node>{&node_});
    at_test_point(test_point::before_arm);
    return node_.arm();
  }

  Node node_;
  std::stop_token token_;
  std::optional<stop_callback_for<Node>> stop_callback_;
};

using steady_deadline = std::optional<std::chrono::steady_clock::time_point>;

/// The blocking twin of wait_awaiter: the same node and protocol, with the calling thread
/// parked instead of a coroutine suspended. A deadline that passes first cancels with `timeout`.
template <wait_node Node, bool Cancellable, class... Args>
wait_yield_t<Node, Cancellable> block_wait(std::stop_token token, steady_deadline deadline, Args&&... args) {
  Node node(std::forward<Args>(args)...);
  if (Cancellable && token.stop_requested()) {
    node.status = wait_status::cancelled;
  } else if (!node.try_ready()) {
    parker park;
    node.set_target(resume_target(&park));
    if (!node.enqueue()) {
      std::optional<stop_callback_for<Node>> on_stop;
      if (Cancellable && token.stop_possible()) on_stop.emplace(token, cancel_on_stop<Node>{&node});
      if (node.arm()) {
        if (deadline && !park.park_until(*deadline) && node.cancel(wait_status::timeout)) node.resolve();
        park.park();  // returns at once if already released
      }
    }
  }
  return finish_wait<Node, Cancellable>(node, token);
}

}  // namespace asyncband::detail
