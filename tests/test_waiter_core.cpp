// SPDX-License-Identifier: Apache-2.0
// The waiter core: the node handshake, the wait list, and the suspension protocol every
// primitive shares, exercised through a minimal primitive built the way the real ones are.
#include <gtest/gtest.h>

#include "support/awaited_twice.hpp"
#include "support/probe.hpp"
#include "support/thread_hook.hpp"

#include <algorithm>
#include <asyncband/block_on.hpp>
#include <asyncband/detail/wait_functions.hpp>
#include <asyncband/detail/wait_queue.hpp>
#include <asyncband/manual_reset_event.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <asyncband/stop_token.hpp>
#include <atomic>
#include <functional>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using namespace asyncband_test;
using asyncband::result;

/// A gate that opens one waiter per open_one() (or all with open_all()), built only from the
/// core's pieces, as a primitive would be. Transferable, so late cancellation passes grants on.
class gate : public asyncband::detail::wait_functions<gate> {
  friend class asyncband::detail::wait_functions<gate>;
  friend class asyncband::detail::queued_waiter<gate>;

 public:
  void open_one() {
    queue_.wake([this](asyncband::detail::wait_list& w, asyncband::detail::wake_batch& b) {
      if (w.empty()) {
        ++stored_;
      } else {
        w.claim_front(b);
      }
    });
  }
  void open_all() { queue_.wake_all(); }
  int stored() {
    const std::lock_guard lock(queue_.mutex());
    return stored_;
  }
  int given_back = 0;

 private:
  class wait_node : public asyncband::detail::queued_waiter<gate> {
   public:
    using value_type = int;
    static constexpr bool transferable = true;
    using queued_waiter::queued_waiter;
    bool try_ready() noexcept { return false; }
    bool enqueue() noexcept {
      return owner().queue_.complete_or_enqueue(*this, [this] {
        if (owner().stored_ == 0) return false;
        --owner().stored_;
        return true;
      });
    }
    int take() noexcept { return 42; }
    void give_back() noexcept {
      ++owner().given_back;
      owner().open_one();
    }
  };
  asyncband::detail::wait_queue& queue() noexcept { return queue_; }

  asyncband::detail::wait_queue queue_;
  int stored_ = 0;  // guarded by queue_.mutex()
};

// A probe (see support/probe.hpp) that checks the value of every wait that produced one.
struct gate_probe : probe {
  void after_wait(gate& /*unused*/) noexcept {}
  void after_wait(gate& /*unused*/, int value) { EXPECT_EQ(value, 42); }
};

// --- the node and the list ---------------------------------------------------------------------

TEST(WaitList, FifoWithRemovalFromTheMiddle) {
  asyncband::detail::wait_list list;
  asyncband::detail::waiter a, b, c;
  for (auto* w : {&a, &b, &c}) w->prepare({});  // as publication does
  list.push_back(a);
  list.push_back(b);
  list.push_back(c);
  EXPECT_TRUE(list.unlink_if_linked(b, wait_status::cancelled));
  EXPECT_FALSE(list.unlink_if_linked(b, wait_status::cancelled));
  EXPECT_EQ(b.status, wait_status::cancelled);
  asyncband::detail::wake_batch batch;
  list.claim_all(batch);
  EXPECT_TRUE(list.empty());
  EXPECT_FALSE(a.linked);
  EXPECT_EQ(a.next, &c);  // the batch keeps FIFO order
  EXPECT_EQ(c.next, nullptr);
  batch.resolve_all();  // nobody armed: resolving resumes nothing
  EXPECT_TRUE(a.is_resolved());
  EXPECT_TRUE(c.is_resolved());
}

TEST(Handshake, ResolvedBeforeArmMeansDoNotSuspend) {
  asyncband::detail::waiter w;
  w.prepare({});
  w.resolve();
  EXPECT_FALSE(w.arm());
}

TEST(Handshake, ArmedThenResolvedRunsTheTargetOnce) {
  asyncband::detail::parker p;
  asyncband::detail::waiter w;
  w.prepare(asyncband::detail::resume_target(&asyncband::detail::parker::unpark_thunk, &p));
  EXPECT_TRUE(w.arm());
  w.resolve();
  p.park();  // would hang if the target had not run
  EXPECT_TRUE(w.is_resolved());
}

// --- nested resolutions ---------------------------------------------------------------------------

/// Each level resolves a batch of one inline continuation, which starts the next level, down to
/// `depth`; the last level resolves a batch holding an inline continuation and a plain callback.
struct nested_chain {
  int depth = 0;                // links in the chain
  int steps = 0;                // links run so far
  int level = 0;                // current stack depth of next_level
  int deepest_stack_level = 0;  // how deep the recursion really went
  bool plain_ran_before_return = false;
  bool inline_ran = false;
  int inline_ran_at_level = -1;
  std::vector<asyncband::detail::waiter> nodes = std::vector<asyncband::detail::waiter>(64);
  std::size_t used = 0;

  asyncband::detail::waiter& node(asyncband::detail::resume_target t) {
    asyncband::detail::waiter& w = nodes.at(used++);
    w.prepare(t);
    EXPECT_TRUE(w.arm());
    return w;
  }

  static void descend(void* self) noexcept { static_cast<nested_chain*>(self)->next_level(); }
  static void last_inline(void* self) noexcept {
    auto* c = static_cast<nested_chain*>(self);
    c->inline_ran = true;
    c->inline_ran_at_level = c->level;
  }
  static void plain(void* self) noexcept { *static_cast<bool*>(self) = true; }

  void next_level() {
    ++level;
    ++steps;
    deepest_stack_level = std::max(deepest_stack_level, level);
    asyncband::detail::wake_batch batch;
    if (steps < depth) {
      batch.add(node(asyncband::detail::resume_target::continuation(&descend, this)));
      batch.resolve_all();
    } else {
      bool plain_ran = false;
      batch.add(node(asyncband::detail::resume_target::continuation(&last_inline, this)));
      batch.add(node(asyncband::detail::resume_target(&plain, &plain_ran)));
      batch.resolve_all();
      plain_ran_before_return = plain_ran;
    }
    --level;
  }
};

TEST(WakeBatch, ShallowNestingResolvesEverythingOnTheSpot) {
  nested_chain chain;
  chain.depth = 4;
  chain.next_level();
  EXPECT_TRUE(chain.plain_ran_before_return);
  EXPECT_TRUE(chain.inline_ran);
  EXPECT_EQ(chain.inline_ran_at_level, 4);
}

// Past the nesting limit, continuations join the innermost batch being resolved (so an inline
// chain loops instead of recursing), but a plain callback (a parked thread's unpark, a post) is
// still resolved on the spot: deferring it could leave a parked thread waiting for this thread.
TEST(WakeBatch, PastTheNestingLimitOnlyInlineMembersAreDeferred) {
  nested_chain chain;
  chain.depth = 40;
  chain.next_level();
  EXPECT_TRUE(chain.plain_ran_before_return);
  EXPECT_TRUE(chain.inline_ran);
  EXPECT_EQ(chain.steps, 40);
  EXPECT_LT(chain.deepest_stack_level, 20) << "the chain recursed past the nesting limit";
}

// --- wake and stop racing at every interleaving point ------------------------------------------

TEST(Race, WakeAtEachPointBeforeSuspension) {
  for (const test_point point : {test_point::published, test_point::before_arm}) {
    test_scheduler s;
    gate g;
    gate_probe p;
    asyncband::stop_source stop;
    s.at(point, [&] { g.open_one(); });
    s.spawn(stoppable_waiter(g, stop.get_token(), p));
    s.run();
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::ok);
    EXPECT_EQ(s.pending_actions(), 0U);
    stop.request_stop();  // after completion: no effect
    s.run();
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(g.stored(), 0);
  }
}

TEST(Race, StopAtEachPointBeforeSuspension) {
  for (const test_point point : {test_point::published, test_point::before_arm}) {
    test_scheduler s;
    gate g;
    gate_probe p;
    asyncband::stop_source stop;
    s.at(point, [&] { stop.request_stop(); });
    s.spawn(stoppable_waiter(g, stop.get_token(), p));
    s.run();
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(p.status, wait_status::cancelled);
    g.open_one();  // the cancelled waiter is unlinked: the grant is stored, nobody resumes twice
    s.run();
    EXPECT_EQ(p.resumed, 1);
    EXPECT_EQ(g.stored(), 1);
  }
}

/// Two waiters queued on a gate, the first cancellable: the setting of the two races below.
struct two_queued_waiters {
  test_scheduler s;
  gate g;
  gate_probe first, second;
  asyncband::stop_source stop;

  two_queued_waiters() {
    s.spawn(stoppable_waiter(g, stop.get_token(), first));
    s.spawn(stoppable_waiter(g, {}, second));
    s.run();
  }
  /// The first ends cancelled, the second gets the one grant; each resumes once.
  void expect_first_cancelled_second_served() const {
    EXPECT_EQ(first.resumed, 1);
    EXPECT_EQ(first.status, wait_status::cancelled);
    EXPECT_EQ(second.resumed, 1);
    EXPECT_EQ(second.status, wait_status::ok);
  }
};

TEST(Race, StopAfterWakerClaimedTheNodeIsTooLateToUnlink) {
  // The stop request lands while the waker holds the claimed node, before it resolves it: the
  // stop callback finds nothing to unlink. The waiter is resumed once, by the waker; because the
  // grant is transferable and the stop was observed before it resumed, it passes the grant on.
  two_queued_waiters t;
  t.s.at(test_point::claimed_for_wake, [&] { t.stop.request_stop(); });
  t.g.open_one();
  t.s.run();
  t.expect_first_cancelled_second_served();
  EXPECT_EQ(t.g.given_back, 1);
  EXPECT_EQ(t.g.stored(), 0);
}

TEST(Race, WakeAfterCancellationClaimedTheNodeGoesToTheNextWaiter) {
  two_queued_waiters t;
  t.s.at(test_point::claimed_for_cancel, [&] { t.g.open_one(); });
  t.stop.request_stop();
  t.s.run();
  t.expect_first_cancelled_second_served();
  EXPECT_EQ(t.g.given_back, 0);  // it never held the grant
  EXPECT_EQ(t.g.stored(), 0);
}

TEST(Race, SeededInterleavingsResumeEveryWaiterExactlyOnce) {
  // Waiters, openers and stoppers in a random order per seed: every waiter resumes once, every
  // grant ends up with exactly one waiter or stored, never both and never lost.
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    test_scheduler s(seed);
    gate g;
    constexpr int waiters = 4;
    std::vector<gate_probe> probes(waiters);
    std::vector<asyncband::stop_source> stops(waiters);
    for (int i = 0; i < waiters; ++i) s.spawn(stoppable_waiter(g, stops[i].get_token(), probes[i]));
    for (int i = 0; i < 3; ++i) {
      s.spawn([](gate& g) -> task<void> {
        g.open_one();
        co_return;
      }(g));
    }
    for (int i = 0; i < waiters; i += 2) {
      s.spawn([](asyncband::stop_source& st) -> task<void> {
        st.request_stop();
        co_return;
      }(stops[i]));
    }
    s.run();
    int ok = 0;
    int pending = 0;
    for (auto& p : probes) {
      EXPECT_LE(p.resumed, 1) << "seed " << seed;
      if (p.resumed == 0) ++pending;
      if (p.status == wait_status::ok) ++ok;
    }
    EXPECT_EQ(ok + g.stored(), 3) << "seed " << seed;  // three grants, none lost or doubled
    EXPECT_TRUE(pending == 0 || g.stored() == 0) << "seed " << seed;
    g.open_all();  // release the rest so every frame ends
    s.run();
    for (auto& p : probes) EXPECT_EQ(p.resumed, 1) << "seed " << seed;
  }
}

// --- destroying a suspended coroutine ----------------------------------------------------------

TEST(Destroy, SuspendedWaiterIsUnlinkedAndTheGrantGoesOn) {
  test_scheduler s;
  gate g;
  gate_probe doomed, survivor;
  asyncband::stop_source stop;
  auto doomed_task = stoppable_waiter(g, stop.get_token(), doomed);
  auto survivor_task = stoppable_waiter(g, {}, survivor);
  // Drive both to their suspension through a scheduler-less root: block_on is not usable here
  // (it would block), so resume the lazy tasks by hand.
  doomed_task.handle().resume();
  survivor_task.handle().resume();
  EXPECT_FALSE(doomed_task.done());
  doomed_task = {};     // destroys the frame suspended in wait(): unlinks the node
  stop.request_stop();  // its stop callback is gone with it
  g.open_one();         // must reach the survivor, not the destroyed node
  EXPECT_EQ(doomed.resumed, 0);
  EXPECT_EQ(survivor.resumed, 1);
  EXPECT_EQ(survivor.status, wait_status::ok);
  EXPECT_TRUE(survivor_task.done());
}

// --- where waiters resume ------------------------------------------------------------------------

TEST(Resumption, WithASchedulerTheWakerOnlyPosts) {
  test_scheduler s;
  gate g;
  gate_probe p;
  s.spawn(stoppable_waiter(g, {}, p));
  s.run();
  g.open_one();
  EXPECT_EQ(p.resumed, 0);  // posted, not run on the waker's stack
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(p.resumed, 1);
}

TEST(Resumption, WithoutASchedulerTheWakerResumesInline) {
  gate g;
  std::thread::id resumed_on;
  [](gate& g, std::thread::id& where) -> bare_coroutine {
    co_await g.wait();
    where = std::this_thread::get_id();
  }(g, resumed_on);
  std::thread waker([&] { g.open_one(); });
  const auto waker_id = waker.get_id();
  waker.join();
  EXPECT_EQ(resumed_on, waker_id);
}

// --- blocking twins and block_on -----------------------------------------------------------------

TEST(Blocking, TimeoutCancelsAndLeavesNothingQueued) {
  gate g;
  const result<int> r = g.wait_timeout(std::chrono::milliseconds(5));
  EXPECT_TRUE(r.timed_out());
  g.open_one();  // no waiter left: stored
  EXPECT_EQ(g.stored(), 1);
  EXPECT_EQ(g.wait_blocking(), 42);  // takes the stored grant without blocking
}

TEST(Blocking, StopFromAnotherThreadEndsTheWait) {
  gate g;
  asyncband::stop_source stop;
  std::thread stopper([&] { stop.request_stop(); });
  const result<int> r = g.wait_blocking(stop.get_token());  // cancelled whichever runs first
  stopper.join();
  EXPECT_TRUE(r.cancelled());
}

TEST(Blocking, WakeFromAnotherThread) {
  gate g;
  std::thread opener([&] { g.open_one(); });
  EXPECT_EQ(g.wait_blocking(), 42);
  opener.join();
}

TEST(BlockOn, ReturnsValuesAndRethrows) {
  EXPECT_EQ(asyncband::block_on([]() -> task<int> { co_return 7; }()), 7);
  EXPECT_THROW(asyncband::block_on([]() -> task<void> {
                 throw std::runtime_error("boom");
                 co_return;
               }()),
               std::runtime_error);
  gate g;
  std::thread opener([&] { g.open_one(); });
  EXPECT_EQ(asyncband::block_on(g.wait()), 42);
  opener.join();
}

}  // namespace

namespace {

TEST(Destroy, GrantClaimedForADestroyedWaiterPassesOn) {
  // The waker has claimed the doomed waiter (and holds its grant) but not resolved it when the
  // frame is destroyed: the destructor waits for the resolver, then passes the grant on.
  gate g;
  gate_probe doomed, survivor;
  auto doomed_task = stoppable_waiter(g, {}, doomed);
  auto survivor_task = stoppable_waiter(g, {}, survivor);
  doomed_task.handle().resume();
  survivor_task.handle().resume();
  asyncband::manual_reset_event claimed, destroying;
  std::thread waker([&] {
    const asyncband_test::thread_hook hook(test_point::claimed_for_wake, [&] {
      claimed.set();
      destroying.wait_blocking();  // resolve only once the destructor waits for us
    });
    g.open_one();
  });
  claimed.wait_blocking();
  {
    const asyncband_test::thread_hook hook(test_point::awaiting_resolver, [&] { destroying.set(); });
    doomed_task = {};
  }
  waker.join();
  EXPECT_EQ(doomed.resumed, 0);
  EXPECT_EQ(g.given_back, 1);
  EXPECT_EQ(survivor.resumed, 1);
  EXPECT_EQ(survivor.status, wait_status::ok);
}

}  // namespace

namespace {

TEST(Destroy, ACoroutineResumedInlineMayDestroyALaterMemberOfItsBatch) {
  // set() claims A and B into one batch and resumes A inline; A destroys B's frame while B's
  // node is still in the batch being resolved further down this very stack. B's destructor must
  // withdraw it from that batch (waiting for the resolver would wait for itself).
  asyncband::manual_reset_event ev;
  gate_probe b_probe;
  bool a_ran = false;
  auto b_task = [](asyncband::manual_reset_event& ev, probe& p) -> task<void> {
    co_await ev.wait();
    ++p.resumed;
  }(ev, b_probe);
  [](asyncband::manual_reset_event& ev, task<void>& victim, bool& ran) -> bare_coroutine {
    co_await ev.wait();
    victim = {};  // destroys B, suspended in the same wake-up
    ran = true;
  }(ev, b_task, a_ran);
  b_task.handle().resume();  // B queues behind A
  ev.set();
  EXPECT_TRUE(a_ran);
  EXPECT_EQ(b_probe.resumed, 0);
}

TEST(Destroy, AStopRequestedByAWaiterThatDestroyedThePrimitiveLeavesItsClaimedSiblingAlone) {
  // set() claims A and B into one batch and resumes A inline; A destroys the event (last one
  // out) and then requests stop on the token B waits with. B's stop callback runs right there:
  // B is claimed, so it must leave the event alone (it used to lock the destroyed event's queue,
  // found by the once family's review; ASan reports it).
  auto ev = std::make_unique<asyncband::manual_reset_event>();
  asyncband::stop_source stop;
  std::optional<result<void>> b_outcome;
  [](std::unique_ptr<asyncband::manual_reset_event>& owned,
     asyncband::stop_source& source) -> bare_coroutine {
    (void)co_await owned->wait(source.get_token());
    owned.reset();
    source.request_stop();
  }(ev, stop);
  [](asyncband::manual_reset_event& event, asyncband::stop_token token,
     std::optional<result<void>>& outcome) -> bare_coroutine {
    outcome = co_await event.wait(std::move(token));
  }(*ev, stop.get_token(), b_outcome);
  asyncband::manual_reset_event* const raw = ev.get();
  raw->set();  // A destroys the event inside this call: set() touches nothing after its wake
  EXPECT_EQ(ev, nullptr);
  ASSERT_TRUE(b_outcome.has_value());
  EXPECT_TRUE(b_outcome->ok());  // claimed before the stop: the wait completed
}

// ---------------------------------------------------------------------------------------------
// Misuse: an awaiter is awaited once

// Awaiting a wait awaiter again after it suspended used to publish its finished node a second
// time: linked in the queue after the awaiter died (a use-after-free, even at -O0).
TEST(WaiterCoreMisuse, AwaitingAnAwaiterAgainAfterItSuspendedThrowsLogicError) {
  asyncband::manual_reset_event ev;
  expect_awaiting_again_throws_logic_error([&ev] { return ev.wait(); }, [&ev] { ev.set(); },
                                           [&ev] { ev.reset(); });  // else the event would let it through
}

// The check is on the suspension path only: awaiting again an awaiter that never suspended is a
// new attempt, as harmless as a fresh wait.
TEST(WaiterCoreMisuse, AwaitingAgainAnAwaiterThatNeverSuspendedIsAFreshAttempt) {
  asyncband::manual_reset_event ev(true);
  auto body = [&]() -> task<int> {
    auto w = ev.wait();
    co_await w;
    co_await w;
    co_return 2;
  };
  EXPECT_EQ(asyncband::block_on(body()), 2);
}

}  // namespace
