// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::barrier: generations completed by the last of three arrivals, a
// cancelled wait that keeps its arrival, and a waiter that destroys the barrier, under the
// explorer's schedules.
#include <asyncband/barrier.hpp>
#include <asyncband/stop_token.hpp>

#include <coroutine>
#include <exception>

#include "kept.hpp"
#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// Three participants, two generations: each wait returns only after all three arrived in its
// generation, and each generation has exactly one leader.
TEST(ModelBarrier, ThreeParticipantsTwoGenerations) {
  EXPECT_TRUE(model::explored(801, [] {
    model::kept<asyncband::barrier> kept_b(3);
    auto& b = *kept_b;
    atomic<int> arrivals{0};
    atomic<int> leaders{0};
    const auto participant = [&] {
      for (int generation = 1; generation <= 2; ++generation) {
        arrivals.fetch_add(1);
        if (b.wait_blocking().is_leader()) leaders.fetch_add(1);
        check(arrivals.load() >= 3 * generation, "a wait returned before its generation was complete");
      }
    };
    thread a(participant);
    thread c(participant);
    participant();
    a.join();
    c.join();
    check(leaders.load() == 2, "a generation had no leader, or two");
    check(b.generation() == 2, "a generation was lost");
  }));
}

/// A coroutine that starts at once and ends on whoever resumes it (no scheduler: the waker).
struct eager {
  struct promise_type {
    eager get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

/// Waits on `b` with `stop`; records how the wait ended: 1 leader, 2 ok, 3 cancelled.
eager wait_and_record(asyncband::barrier& b, asyncband::stop_token stop, atomic<int>& outcome) {
  auto r = co_await b.wait(std::move(stop));
  outcome.store(!r.ok() ? 3 : r->is_leader() ? 1 : 2);
}

// A wait cancelled after it arrived keeps its arrival: the other participant's wait still
// completes the generation (otherwise it waits for good: a deadlock). The coroutine arrives
// when it suspends, and its thread requests the stop after that, while the other arrives.
TEST(ModelBarrier, CancelledWaitKeepsItsArrival) {
  EXPECT_TRUE(model::explored(802, [] {
    model::kept<asyncband::barrier> kept_b(2);
    auto& b = *kept_b;
    asyncband::stop_source stop;
    atomic<int> outcome{0};
    thread cancelling([&] {
      wait_and_record(b, stop.get_token(), outcome);  // returns once arrived: suspended or done
      stop.request_stop();
    });
    const bool led = b.wait_blocking().is_leader();
    cancelling.join();
    const int o = outcome.load();
    check(o != 0, "the cancelled wait never ended");
    check(led != (o == 1), "a generation had no leader, or two");
    check(b.generation() == 1, "the cancelled wait's arrival was lost");
  }));
}

// Last one out: the participant woken by the leader's arrival destroys the barrier at once,
// while the leader's arrival may still be returning (a use after free shows under the
// sanitizers).
TEST(ModelBarrier, WokenParticipantDestroysTheBarrier) {
  EXPECT_TRUE(model::explored(803, [] {
    model::kept<asyncband::barrier> b(2);
    asyncband::barrier* const shared = b.get();
    atomic<int> leaders{0};
    const auto participant = [&] {
      if (shared->wait_blocking().is_leader()) {
        leaders.fetch_add(1);
      } else {
        b.reset();
      }
    };
    thread a(participant);
    participant();
    a.join();
    check(leaders.load() == 1 && b.get() == nullptr, "a generation had no leader, or two");
  }));
}

}  // namespace
