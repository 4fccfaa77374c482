// SPDX-License-Identifier: Apache-2.0
// asyncband/resume_on.hpp: keeps a coroutine of any task type on a scheduler of its choosing
// across an asyncband wait.
//
// A task type whose promise has no `asyncband_scheduler` hook (cppcoro's, libcoro's, a
// hand-written one) is resumed inline by whoever completes its wait: after `co_await l.wait()`
// it runs on the thread that counted the latch down. `resume_on` keeps it on its scheduler:
//
//   co_await asyncband::resume_on(pool, ev.wait());          // continues on one of pool's threads
//   auto r = co_await asyncband::resume_on(pool, rx.recv()); // yields what co_await rx.recv() yields
//
// How: the awaited operation does not see the waiting coroutine but a tiny "hop" coroutine that
// continues it. The hop's promise has the hook, so the wake-up itself posts the hop to the
// scheduler (the waker runs none of the waiter's code), and the hop, once run there, continues
// the waiting coroutine by symmetric transfer. For a scheduler that only offers a `schedule()`
// awaitable (cppcoro, libcoro), the hop has no hook: the waker resumes the hop inline, and all
// the hop does there is `co_await sched.schedule()`. The hop's frame lives in the awaiter: no
// allocation. See docs/design.md, "Foreign task types: resume_on".
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <cassert>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <new>
#include <type_traits>
#include <utility>

#include "detail/awaitable_traits.hpp"
#include "scheduler.hpp"

namespace asyncband {

/// A scheduler reached through an awaitable: `co_await s.schedule()` moves the awaiting
/// coroutine onto it (cppcoro's static_thread_pool, libcoro's thread_pool). resume_on uses
/// `schedule(handle)` instead when `S` also models asyncband::scheduler.
template <class S>
concept awaitable_scheduler = requires(S& s) {
  { detail::get_awaiter(s.schedule()).await_ready() } -> std::convertible_to<bool>;
  detail::get_awaiter(s.schedule()).await_resume();
};

namespace detail {

/// How a hop reaches its scheduler: the core posts it through the hook (`post_hop`), or it
/// resumes inline on the waker and awaits `target->schedule()` (`await_hop`).
struct post_hop {
  scheduler_ref target;
};
template <class S>
struct await_hop {
  S* target;
};

template <class Hop>
class hop_promise;

/// The hop coroutine's handle, as its body returns it.
template <class Hop>
struct hop_coroutine {
  using promise_type = hop_promise<Hop>;
  std::coroutine_handle<hop_promise<Hop>> handle;
};

/// The size the awaiter reserves for the hop's frame: the promise plus what g++ 12 and clang 14
/// add (resume and destroy pointers, the suspend index, the frame parameter; and for an
/// await_hop the schedule awaitable and its awaiter), with room to spare. A frame that does not
/// fit is allocated instead (tests/test_resume_on.cpp checks that ours fit).
template <class Hop>
struct hop_frame_extra : std::integral_constant<std::size_t, 64> {};
template <class S>
struct hop_frame_extra<await_hop<S>> {
  using schedule_type = decltype(std::declval<S&>().schedule());
  using awaiter_type = std::remove_cvref_t<decltype(get_awaiter(std::declval<schedule_type>()))>;
  static constexpr std::size_t value = 96 + 2 * (sizeof(schedule_type) + sizeof(awaiter_type));
};

/// Continues the waiting coroutine, by symmetric transfer, once the hop has arrived.
struct continue_waiter {
  bool await_ready() const noexcept { return false; }
  template <class Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> hop) const noexcept {
    return hop.promise().waiter();
  }
  void await_resume() const noexcept {}
};

/// The promise of a hop: the coroutine to continue, how to reach the scheduler, and, for a
/// post_hop, the hook that makes the core post the hop there.
template <class Hop>
class hop_promise {
 public:
  static constexpr std::size_t frame_budget =
      sizeof(Hop) + 3 * sizeof(void*) + sizeof(scheduler_ref) + sizeof(bool) + hop_frame_extra<Hop>::value;
  /// Raw room for the frame, inside the awaiter.
  struct storage {
    alignas(__STDCPP_DEFAULT_NEW_ALIGNMENT__) unsigned char bytes[frame_budget];
  };

  /// The frame goes into `room` when it fits (it does for g++ 12 and clang 14).
  template <class... Args>
  static void* operator new(std::size_t size, storage& room, const Args&... /*unused*/) {
    return size <= frame_budget ? static_cast<void*>(room.bytes) : ::operator new(size);
  }
  /// Receives the size operator new received: only a frame that did not fit was allocated.
  static void operator delete(void* frame, std::size_t size) noexcept {
    if (size > frame_budget) ::operator delete(frame);
  }

  hop_coroutine<Hop> get_return_object() noexcept {
    return {std::coroutine_handle<hop_promise>::from_promise(*this)};
  }
  std::suspend_always initial_suspend() const noexcept { return {}; }
  continue_waiter final_suspend() const noexcept { return {}; }
  void return_void() const noexcept {}
  /// Only a throwing `schedule()` gets here, on the waker: nobody is left to report it to.
  [[noreturn]] void unhandled_exception() const noexcept { std::terminate(); }

  /// asyncband's scheduler hook: a relay to the target (which notes whether it posted this very
  /// hop), or none for an await_hop (the waker resumes the hop, which then awaits schedule()).
  [[nodiscard]] scheduler_ref asyncband_scheduler() const noexcept { return hook_; }

  /// Before the hop is handed to the awaited operation.
  void prepare(Hop hop, std::coroutine_handle<> waiter) noexcept {
    hop_ = hop;
    waiter_ = waiter;
    if constexpr (std::is_same_v<Hop, post_hop>) hook_ = scheduler_ref::of(relay_);
  }

  [[nodiscard]] std::coroutine_handle<> waiter() const noexcept { return waiter_; }

  /// For a post_hop resumed by something other than its scheduler (an awaiter that does not
  /// read the hook resumed it inline): posts the hop now and returns true; false if the hop
  /// already runs on the scheduler. Out of line: nothing may touch the frame once it is posted.
  [[gnu::noinline]] static bool post_unless_arrived(std::coroutine_handle<hop_promise> hop) noexcept {
    hop_promise& p = hop.promise();
    if (p.arrived_) return false;
    p.arrived_ = true;
    p.hop_.target.schedule(hop);
    return true;
  }

 private:
  /// The hook's scheduler: forwards to the target, noting when the handle is the hop itself (an
  /// asyncband task awaited through resume_on inherits the hook and posts its own handle here).
  struct relay {
    hop_promise* promise;
    void schedule(std::coroutine_handle<> h) const noexcept {
      hop_promise& p = *promise;
      if (h.address() == std::coroutine_handle<hop_promise>::from_promise(p).address()) p.arrived_ = true;
      p.hop_.target.schedule(h);
    }
  };

  Hop hop_{};
  std::coroutine_handle<> waiter_;
  relay relay_{this};
  scheduler_ref hook_;
  bool arrived_ = false;  // written before the hop is posted, read once it runs
};

/// The body of a post_hop: the core posted it to the scheduler, or it posts itself first.
struct arrive_on_scheduler {
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<hop_promise<post_hop>> hop) const noexcept {
    return hop_promise<post_hop>::post_unless_arrived(hop);
  }
  void await_resume() const noexcept {}
};

// g++ 12 without optimisation (-O0) warns that the frame's operator delete does not match its
// operator new (-Wmismatched-new-delete). It does: a coroutine frame is always freed by the
// promise's usual operator delete(void*, size_t), whatever arguments its operator new took
// ([dcl.fct.def.coroutine]); the warning is wrong here, and would fail a user's -Werror build.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
inline hop_coroutine<post_hop> run_post_hop(hop_promise<post_hop>::storage& /*room*/) {
  co_await arrive_on_scheduler{};
}

/// The body of an await_hop: resumed inline by the waker, it moves to the scheduler.
template <class S>
hop_coroutine<await_hop<S>> run_await_hop(typename hop_promise<await_hop<S>>::storage& /*room*/, S& target) {
  co_await target.schedule();
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/// What resume_on returns: forwards the awaited operation's awaiter, with the hop in place of
/// the waiting coroutine. Holds the awaitable by reference when it is its own awaiter (an
/// asyncband wait is not movable), or the awaiter its operator co_await made.
template <class Hop, class Awaitable>
class [[nodiscard("co_await it: resume_on does nothing until it is awaited")]] resume_on_awaiter {
  using awaiter_type = decltype(get_awaiter(std::declval<Awaitable>()));
  using promise_type = hop_promise<Hop>;

 public:
  resume_on_awaiter(Hop hop, Awaitable&& awaitable)
      : awaiter_(get_awaiter(static_cast<Awaitable&&>(awaitable))), hop_(hop) {}
  resume_on_awaiter(const resume_on_awaiter&) = delete;
  resume_on_awaiter& operator=(const resume_on_awaiter&) = delete;
  ~resume_on_awaiter() {
    if (frame_) frame_.destroy();
  }

  bool await_ready() { return awaiter_.await_ready(); }

  /// Hands the awaited operation the hop instead of `waiter`, and returns what its
  /// await_suspend returns. Nothing after that call: the hop may continue the waiter on
  /// another thread at once, and the waiter may destroy this awaiter.
  template <class Promise>
  decltype(auto) await_suspend(std::coroutine_handle<Promise> waiter) {
    return awaiter_.await_suspend(make_hop(waiter));
  }

  /// Exactly what `co_await awaitable` yields (a prvalue stays a prvalue: nothing is moved).
  decltype(auto) await_resume() { return awaiter_.await_resume(); }

 private:
  std::coroutine_handle<promise_type> make_hop(std::coroutine_handle<> waiter) {
    if (frame_) frame_.destroy();  // awaited again: the previous hop is done
    frame_ = {};
    if constexpr (std::is_same_v<Hop, post_hop>) {
      frame_ = run_post_hop(room_).handle;
    } else {
      frame_ = run_await_hop(room_, *hop_.target).handle;
    }
    frame_.promise().prepare(hop_, waiter);
    return frame_;
  }

  awaiter_type awaiter_;
  Hop hop_;
  std::coroutine_handle<promise_type> frame_;
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init,hicpp-member-init): raw room, filled by make_hop
  typename promise_type::storage room_;
};

template <class S>
auto hop_to(S& s) noexcept {
  if constexpr (scheduler<S>) {
    return post_hop{scheduler_ref::of(s)};
  } else {
    static_assert(awaitable_scheduler<S>,
                  "resume_on: the scheduler needs schedule(std::coroutine_handle<>) noexcept (asyncband's "
                  "scheduler concept) or a schedule() returning an awaitable");
    return await_hop<S>{&s};
  }
}

}  // namespace detail

/// `co_await resume_on(sched, awaitable)` awaits `awaitable` and continues the awaiting
/// coroutine on `sched`, whatever its task type: for coroutines whose promise lacks asyncband's
/// `asyncband_scheduler` hook (cppcoro, libcoro, hand-written tasks), which a wake-up otherwise
/// resumes inline on the waking thread.
///
/// - `sched` is a scheduler_ref (non-empty), a type modelling asyncband::scheduler
///   (`schedule(h)`: asyncband's thread_pool and test_scheduler), or one with a `schedule()`
///   awaitable (cppcoro's static_thread_pool, libcoro's thread_pool). It must outlive the wait.
/// - Yields exactly what `co_await awaitable` yields, taken on `sched`. Cancellation, timeouts
///   and the rules of the awaited operation are unchanged (a stop request also continues the
///   coroutine on `sched`).
/// - If the operation completes without suspending, the coroutine continues where it is, with
///   no hop. If it suspends, the wake-up posts the continuation to `sched`: a scheduler
///   modelling asyncband::scheduler gets it from the waker directly (the waker runs nothing of
///   the waiter's); for a `schedule()` awaitable, the waker runs a hop of a few instructions
///   that awaits `sched.schedule()` (a throw from it there terminates the program).
/// - Await the result in the full-expression that makes it (it may refer to the awaitable):
///   `co_await resume_on(pool, ev.wait())`. No allocation.
template <class Scheduler, class Awaitable>
  requires(!std::same_as<std::remove_cvref_t<Scheduler>, scheduler_ref>)
auto resume_on(Scheduler& sched, Awaitable&& awaitable) {
  using hop = decltype(detail::hop_to(sched));
  return detail::resume_on_awaiter<hop, Awaitable>(detail::hop_to(sched),
                                                   static_cast<Awaitable&&>(awaitable));
}

/// resume_on through a type-erased scheduler; precondition: `!sched.empty()`.
template <class Awaitable>
auto resume_on(scheduler_ref sched, Awaitable&& awaitable) {
  assert(!sched.empty() && "asyncband::resume_on: an empty scheduler_ref");
  return detail::resume_on_awaiter<detail::post_hop, Awaitable>(detail::post_hop{sched},
                                                                static_cast<Awaitable&&>(awaitable));
}

}  // namespace asyncband
