// SPDX-License-Identifier: Apache-2.0
// The lifetime harness of issue 11: for every public operation that can complete a wait, on every
// primitive, a waiter with no scheduler (resumed inline by that operation; or a plain thread
// blocked in the wait) destroys at once everything "last one out" lets it destroy: the primitive
// (or its shared state's last handle), its own handles, its own coroutine frame. The completing
// call must not touch any of it afterwards (ASan), nor wait for itself (the watchdog).
//
// One row per (primitive, waiting form, completing operation); see support/lifetime.hpp for the
// parts of a row. A new primitive adds its rows to all_rows().
#include <gtest/gtest.h>

#include <algorithm>
#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/stop_token.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "support/lifetime.hpp"

namespace {

using namespace asyncband_test::lifetime;
using namespace std::chrono_literals;
using asyncband::block_on;
using asyncband::phase_id;
using asyncband::stop_token;

struct no_waker : waker_base {};

/// What the completing side holds is boxed: g++ 12 reports a false -Wmaybe-uninitialized for
/// guards and handles in a std::optional on the stack.
template <class T>
std::unique_ptr<T> boxed(T&& value) {
  return std::make_unique<T>(std::move(value));
}

// ------------------------------------------------------------------------------------------------
// Events, latch, barrier: the waiter destroys the primitive itself.

struct mre_world {
  asyncband::manual_reset_event ev;
};
struct are_world {
  asyncband::auto_reset_event ev;
};
struct latch_world {
  asyncband::latch l{1};
};
struct barrier_world {
  asyncband::barrier b{2};
};
struct barrier_of_four {
  asyncband::barrier b{4};
};

void add_event_rows(std::vector<row>& rows) {
  using W = mre_world;
  const auto set = [](W* w, no_waker&) { w->ev.set(); };
  rows.push_back(coroutine_row<W, no_waker>(
      "manual_reset_event_set", "ok", no_setup{}, [](W& w, stop_token) { return w.ev.wait(); }, set));
  rows.push_back(coroutine_row<W, no_waker>(
      "manual_reset_event_set_cancellable", "ok", no_setup{}, [](W& w, stop_token t) { return w.ev.wait(t); },
      set));
  rows.push_back(coroutine_row<W, no_waker>(
      "manual_reset_event_stop", "cancelled", no_setup{}, [](W& w, stop_token t) { return w.ev.wait(t); },
      request_stop{}));
  for (const int n : {3, 20}) {
    rows.push_back(crowd_row<W, no_waker>(
        "manual_reset_event_set_crowd_" + std::to_string(n), n, "ok", no_setup{},
        [](W& w, stop_token) { return w.ev.wait(); }, [](W& w, stop_token) { return w.ev.wait(); },
        [](W* w, no_waker&, asyncband::stop_source&) { w->ev.set(); }));
  }
  rows.push_back(thread_row<W, no_waker>(
      "manual_reset_event_set_blocked_thread", "ok", no_setup{},
      [](W& w, stop_token t) { return w.ev.wait_blocking(t); }, set));
  rows.push_back(thread_row<W, no_waker>(
      "manual_reset_event_set_timeout_thread", "ok", no_setup{},
      [](W& w, stop_token) { return w.ev.wait_timeout(1h); }, set));

  using A = are_world;
  const auto notify_one = [](A* w, no_waker&) { w->ev.notify_one(); };
  rows.push_back(coroutine_row<A, no_waker>(
      "auto_reset_event_notify_one", "ok", no_setup{}, [](A& w, stop_token) { return w.ev.wait(); },
      notify_one));
  rows.push_back(coroutine_row<A, no_waker>(
      "auto_reset_event_notify_one_cancellable", "ok", no_setup{},
      [](A& w, stop_token t) { return w.ev.wait(t); }, notify_one));
  rows.push_back(coroutine_row<A, no_waker>(
      "auto_reset_event_notify_all", "ok", no_setup{}, [](A& w, stop_token) { return w.ev.wait(); },
      [](A* w, no_waker&) { w->ev.notify_all(); }));
  rows.push_back(coroutine_row<A, no_waker>(
      "auto_reset_event_stop", "cancelled", no_setup{}, [](A& w, stop_token t) { return w.ev.wait(t); },
      request_stop{}));
  rows.push_back(pass_on_row<A, no_waker>(
      "auto_reset_event_notify_one_permit_passed_on", no_setup{},
      [](A& w, stop_token t) { return w.ev.wait(t); }, [](A& w, stop_token) { return w.ev.wait(); },
      notify_one));
  rows.push_back(crowd_row<A, no_waker>(
      "auto_reset_event_notify_all_crowd", 3, "ok", no_setup{}, [](A& w, stop_token) { return w.ev.wait(); },
      [](A& w, stop_token) { return w.ev.wait(); },
      [](A* w, no_waker&, asyncband::stop_source&) { w->ev.notify_all(); }));
  rows.push_back(thread_row<A, no_waker>(
      "auto_reset_event_notify_one_blocked_thread", "ok", no_setup{},
      [](A& w, stop_token t) { return w.ev.wait_blocking(t); }, notify_one));

  using L = latch_world;
  rows.push_back(coroutine_row<L, no_waker>(
      "latch_count_down", "ok", no_setup{}, [](L& w, stop_token) { return w.l.wait(); },
      [](L* w, no_waker&) { w->l.count_down(); }));
  rows.push_back(coroutine_row<L, no_waker>(
      "latch_arrive", "ok", no_setup{}, [](L& w, stop_token) { return w.l.wait(); },
      [](L* w, no_waker&) { w->l.arrive(1); }));
  rows.push_back(coroutine_row<L, no_waker>(
      "latch_count_down_cancellable", "ok", no_setup{}, [](L& w, stop_token t) { return w.l.wait(t); },
      [](L* w, no_waker&) { w->l.count_down(); }));
  rows.push_back(coroutine_row<L, no_waker>(
      "latch_stop", "cancelled", no_setup{}, [](L& w, stop_token t) { return w.l.wait(t); }, request_stop{}));
  rows.push_back(thread_row<L, no_waker>(
      "latch_count_down_blocked_thread", "ok", no_setup{},
      [](L& w, stop_token t) { return w.l.wait_blocking(t); }, [](L* w, no_waker&) { w->l.count_down(); }));

  // The waker is the barrier's last arrival: a wait that completes without suspending.
  using B = barrier_world;
  const auto last_arrival = [](B* w, no_waker&) { (void)block_on(w->b.wait()); };
  rows.push_back(coroutine_row<B, no_waker>(
      "barrier_last_co_wait", "ok", no_setup{}, [](B& w, stop_token) { return w.b.wait(); }, last_arrival));
  rows.push_back(coroutine_row<B, no_waker>(
      "barrier_last_co_wait_cancellable", "ok", no_setup{}, [](B& w, stop_token t) { return w.b.wait(t); },
      [](B* w, no_waker&) { (void)block_on(w->b.wait(stop_token{})); }));
  rows.push_back(coroutine_row<B, no_waker>(
      "barrier_last_wait_blocking", "ok", no_setup{}, [](B& w, stop_token) { return w.b.wait(); },
      [](B* w, no_waker&) { (void)w->b.wait_blocking(); }));
  rows.push_back(coroutine_row<B, no_waker>(
      "barrier_last_wait_timeout", "ok", no_setup{}, [](B& w, stop_token) { return w.b.wait(); },
      [](B* w, no_waker&) { (void)w->b.wait_timeout(1h); }));
  rows.push_back(crowd_row<barrier_of_four, no_waker>(
      "barrier_last_co_wait_crowd", 2, "ok", no_setup{},
      [](barrier_of_four& w, stop_token) { return w.b.wait(); },
      [](barrier_of_four& w, stop_token) { return w.b.wait(); },
      [](barrier_of_four* w, no_waker&, asyncband::stop_source&) { (void)block_on(w->b.wait()); }));
  rows.push_back(coroutine_row<B, no_waker>(
      "barrier_stop", "cancelled", no_setup{}, [](B& w, stop_token t) { return w.b.wait(t); },
      request_stop{}));
  rows.push_back(thread_row<B, no_waker>(
      "barrier_last_wait_blocking_thread", "ok", no_setup{},
      [](B& w, stop_token t) { return w.b.wait_blocking(t); },
      [](B* w, no_waker&) { (void)w->b.wait_blocking(); }));
}

// ------------------------------------------------------------------------------------------------
// wait_group: the waiter waits on its own handle `mine`; the last other member leaves. The issue
// counts the leaving handle among what the waiter may destroy when it is in the World.

struct wg_world {
  asyncband::wait_group mine;
  asyncband::wait_group last{mine};
};
struct wg_mine_only {
  asyncband::wait_group mine;
};
struct wg_waker : waker_base {
  std::unique_ptr<asyncband::wait_group> last;
};

void add_wait_group_rows(std::vector<row>& rows) {
  using W = wg_world;
  const auto wait = [](W& w, stop_token) { return w.mine.wait(); };
  rows.push_back(coroutine_row<W, no_waker>("wait_group_leave", "ok", no_setup{}, wait,
                                            [](W* w, no_waker&) { w->last.leave(); }));
  rows.push_back(coroutine_row<W, no_waker>(
      "wait_group_leave_cancellable", "ok", no_setup{}, [](W& w, stop_token t) { return w.mine.wait(t); },
      [](W* w, no_waker&) { w->last.leave(); }));
  rows.push_back(coroutine_row<W, no_waker>("wait_group_last_wait_blocking", "ok", no_setup{}, wait,
                                            [](W* w, no_waker&) { w->last.wait_blocking(); }));
  rows.push_back(
      coroutine_row<W, no_waker>("wait_group_last_wait_blocking_cancellable", "ok", no_setup{}, wait,
                                 [](W* w, no_waker&) { (void)w->last.wait_blocking(stop_token{}); }));
  rows.push_back(coroutine_row<W, no_waker>("wait_group_last_wait_timeout", "ok", no_setup{}, wait,
                                            [](W* w, no_waker&) { (void)w->last.wait_timeout(1h); }));
  rows.push_back(coroutine_row<W, no_waker>("wait_group_last_co_wait", "ok", no_setup{}, wait,
                                            [](W* w, no_waker&) { block_on(w->last.wait()); }));
  rows.push_back(
      coroutine_row<W, no_waker>("wait_group_last_co_wait_cancellable", "ok", no_setup{}, wait,
                                 [](W* w, no_waker&) { (void)block_on(w->last.wait(stop_token{})); }));

  using M = wg_mine_only;
  const auto other_member = [](M& w, wg_waker& k) {
    k.last = std::make_unique<asyncband::wait_group>(w.mine);
  };
  rows.push_back(coroutine_row<M, wg_waker>(
      "wait_group_last_destroyed", "ok", other_member, [](M& w, stop_token) { return w.mine.wait(); },
      [](M*, wg_waker& k) { k.last.reset(); }));
  rows.push_back(coroutine_row<M, wg_waker>(
      "wait_group_stop", "cancelled", other_member, [](M& w, stop_token t) { return w.mine.wait(t); },
      request_stop{}));
  // Assigning to the last member's handle leaves first: the handle is the waiter's to destroy.
  rows.push_back(coroutine_row<W, no_waker>("wait_group_last_move_assigned", "ok", no_setup{}, wait,
                                            [](W* w, no_waker&) { w->last = asyncband::wait_group{}; }));
  rows.push_back(coroutine_row<W, wg_waker>(
      "wait_group_last_copy_assigned", "ok",
      [](W&, wg_waker& k) { k.last = std::make_unique<asyncband::wait_group>(); }, wait,
      [](W* w, wg_waker& k) { w->last = *k.last; }));
  rows.push_back(crowd_row<W, no_waker>(
      "wait_group_leave_crowd", 3, "ok", no_setup{}, [](W& w, stop_token) { return w.mine.wait(); },
      [](W& w, stop_token) { return w.mine.wait(); },
      [](W* w, no_waker&, asyncband::stop_source&) { w->last.leave(); }));
  rows.push_back(thread_row<W, no_waker>(
      "wait_group_leave_blocked_thread", "ok", no_setup{},
      [](W& w, stop_token t) { return w.mine.wait_blocking(t); }, [](W* w, no_waker&) { w->last.leave(); }));
}

// ------------------------------------------------------------------------------------------------
// phaser: the waiter is participant `mine` (its wait arrives) or an observer; `other` is the
// arrival that completes the phase. The World holds the phaser's last handles: the shared_ptr and
// the participants.

struct phaser_world {
  std::shared_ptr<asyncband::phaser> ph = asyncband::phaser::create();
  asyncband::phaser_participant mine = std::move(*ph->enroll());
  asyncband::phaser_participant other = std::move(*ph->enroll());
};
struct phaser_observed {
  std::shared_ptr<asyncband::phaser> ph = asyncband::phaser::create();
  asyncband::phaser_participant other = std::move(*ph->enroll());
};
struct phaser_mine_only {
  std::shared_ptr<asyncband::phaser> ph = asyncband::phaser::create();
  asyncband::phaser_participant mine = std::move(*ph->enroll());
};
struct phaser_batch_observed {
  std::shared_ptr<asyncband::phaser> ph = asyncband::phaser::create();
  asyncband::phaser_batch batch = std::move(*ph->enroll(1));
};
struct phaser_waker : waker_base {
  std::shared_ptr<asyncband::phaser> elsewhere = asyncband::phaser::create();
  std::unique_ptr<asyncband::phaser_participant> other;
  std::unique_ptr<asyncband::phaser_batch> batch;
};

void add_phaser_rows(std::vector<row>& rows) {
  using W = phaser_world;
  const auto wait = [](W& w, stop_token) { return w.mine.wait(); };
  const auto wait_cancellable = [](W& w, stop_token t) { return w.mine.wait(t); };
  rows.push_back(coroutine_row<W, no_waker>("phaser_arrive", "ok", no_setup{}, wait,
                                            [](W* w, no_waker&) { (void)w->other.arrive(); }));
  rows.push_back(coroutine_row<W, no_waker>("phaser_arrive_cancellable", "ok", no_setup{}, wait_cancellable,
                                            [](W* w, no_waker&) { (void)w->other.arrive(); }));
  rows.push_back(coroutine_row<W, no_waker>("phaser_arrive_and_deregister", "ok", no_setup{}, wait,
                                            [](W* w, no_waker&) { (void)w->other.arrive_and_deregister(); }));
  rows.push_back(coroutine_row<W, no_waker>("phaser_close", "closed", no_setup{}, wait,
                                            [](W* w, no_waker&) { w->ph->close(); }));
  rows.push_back(coroutine_row<W, no_waker>("phaser_participant_co_wait_wakes_participant", "ok", no_setup{},
                                            wait, [](W* w, no_waker&) { (void)block_on(w->other.wait()); }));
  rows.push_back(coroutine_row<W, no_waker>("phaser_participant_wait_blocking_wakes_participant", "ok",
                                            no_setup{}, wait,
                                            [](W* w, no_waker&) { (void)w->other.wait_blocking(); }));
  rows.push_back(coroutine_row<W, no_waker>(
      "phaser_participant_wait_blocking_cancellable_wakes_participant", "ok", no_setup{}, wait,
      [](W* w, no_waker&) { (void)w->other.wait_blocking(stop_token{}); }));
  rows.push_back(coroutine_row<W, no_waker>("phaser_participant_wait_timeout_wakes_participant", "ok",
                                            no_setup{}, wait,
                                            [](W* w, no_waker&) { (void)w->other.wait_timeout(1h); }));
  rows.push_back(coroutine_row<W, no_waker>("phaser_stop_participant", "cancelled", no_setup{},
                                            wait_cancellable, request_stop{}));

  using M = phaser_mine_only;
  const auto wait_mine = [](M& w, stop_token) { return w.mine.wait(); };
  rows.push_back(coroutine_row<M, phaser_waker>(
      "phaser_participant_destroyed", "ok", [](M& w, phaser_waker& k) { k.other = boxed(*w.ph->enroll()); },
      wait_mine, [](M*, phaser_waker& k) { k.other.reset(); }));
  rows.push_back(coroutine_row<M, phaser_waker>(
      "phaser_batch_destroyed", "ok", [](M& w, phaser_waker& k) { k.batch = boxed(*w.ph->enroll(2)); },
      wait_mine, [](M*, phaser_waker& k) { k.batch.reset(); }));

  using O = phaser_observed;
  const auto observe = [](O& w, stop_token) { return w.ph->wait(phase_id{}); };
  const auto observe_cancellable = [](O& w, stop_token t) { return w.ph->wait(phase_id{}, t); };
  rows.push_back(coroutine_row<O, no_waker>("phaser_observer_arrive", "ok", no_setup{}, observe,
                                            [](O* w, no_waker&) { (void)w->other.arrive(); }));
  rows.push_back(coroutine_row<O, no_waker>("phaser_observer_arrive_cancellable", "ok", no_setup{},
                                            observe_cancellable,
                                            [](O* w, no_waker&) { (void)w->other.arrive(); }));
  rows.push_back(coroutine_row<O, no_waker>("phaser_observer_arrive_and_deregister", "ok", no_setup{},
                                            observe,
                                            [](O* w, no_waker&) { (void)w->other.arrive_and_deregister(); }));
  rows.push_back(coroutine_row<O, no_waker>("phaser_observer_close", "closed", no_setup{}, observe,
                                            [](O* w, no_waker&) { w->ph->close(); }));
  rows.push_back(coroutine_row<O, no_waker>("phaser_participant_co_wait_wakes_observer", "ok", no_setup{},
                                            observe,
                                            [](O* w, no_waker&) { (void)block_on(w->other.wait()); }));
  rows.push_back(coroutine_row<O, no_waker>("phaser_participant_wait_blocking_wakes_observer", "ok",
                                            no_setup{}, observe,
                                            [](O* w, no_waker&) { (void)w->other.wait_blocking(); }));
  rows.push_back(coroutine_row<O, no_waker>("phaser_participant_wait_timeout_wakes_observer", "ok",
                                            no_setup{}, observe,
                                            [](O* w, no_waker&) { (void)w->other.wait_timeout(1h); }));
  // Assigning to a participant or batch withdraws it first: the handle is the waiter's to destroy.
  rows.push_back(coroutine_row<O, phaser_waker>(
      "phaser_participant_move_assigned_wakes_observer", "ok",
      [](O&, phaser_waker& k) { k.other = boxed(*k.elsewhere->enroll()); }, observe,
      [](O* w, phaser_waker& k) { w->other = std::move(*k.other); }));
  rows.push_back(coroutine_row<phaser_batch_observed, phaser_waker>(
      "phaser_batch_move_assigned_wakes_observer", "ok",
      [](phaser_batch_observed&, phaser_waker& k) { k.batch = boxed(*k.elsewhere->enroll(1)); },
      [](phaser_batch_observed& w, stop_token) { return w.ph->wait(phase_id{}); },
      [](phaser_batch_observed* w, phaser_waker& k) { w->batch = std::move(*k.batch); }));
  rows.push_back(
      crowd_row<O, no_waker>("phaser_observer_arrive_crowd", 3, "ok", no_setup{}, observe, observe,
                             [](O* w, no_waker&, asyncband::stop_source&) { (void)w->other.arrive(); }));
  rows.push_back(coroutine_row<O, no_waker>("phaser_stop_observer", "cancelled", no_setup{},
                                            observe_cancellable, request_stop{}));

  rows.push_back(thread_row<W, no_waker>(
      "phaser_arrive_blocked_participant_thread", "ok", no_setup{},
      [](W& w, stop_token t) { return w.mine.wait_blocking(t); },
      [](W* w, no_waker&) { (void)w->other.arrive(); }));
  // wait_blocking() without a stop token parks on the phaser's broadcast word, not on a node.
  rows.push_back(thread_row<O, no_waker>(
      "phaser_arrive_broadcast_parked_observer_thread", "ok", no_setup{},
      [](O& w, stop_token) { return w.ph->wait_blocking(phase_id{}); },
      [](O* w, no_waker&) { (void)w->other.arrive(); }, 200, false));
  rows.push_back(thread_row<W, no_waker>(
      "phaser_arrive_broadcast_parked_participant_thread", "ok", no_setup{},
      [](W& w, stop_token) { return w.mine.wait_blocking(); },
      [](W* w, no_waker&) { (void)w->other.arrive(); }, 200, false));
  rows.push_back(thread_row<O, no_waker>(
      "phaser_close_broadcast_parked_observer_thread", "closed", no_setup{},
      [](O& w, stop_token) { return w.ph->wait_blocking(phase_id{}); },
      [](O* w, no_waker&) { w->ph->close(); }, 200, false));
  rows.push_back(thread_row<O, no_waker>(
      "phaser_arrive_blocked_observer_thread", "ok", no_setup{},
      [](O& w, stop_token t) { return w.ph->wait_blocking(phase_id{}, t); },
      [](O* w, no_waker&) { (void)w->other.arrive(); }));
}

// ------------------------------------------------------------------------------------------------
// semaphore, mutex, rwlock: the waiter destroys its permit or guard, then the primitive. What the
// completing side holds (a permit, a guard) is its own and stays outside the World.

struct sem_world {
  asyncband::semaphore s{0};
};
struct sem_one {
  asyncband::semaphore s{1};
};
struct sem_one_fifo {  // partial grants
  asyncband::semaphore s{asyncband::strict_fifo, 1};
};
struct sem_permit_in_world {
  asyncband::semaphore s{1};
  std::optional<asyncband::semaphore_permit> held;  // in the World: a late write shows
};
struct sem_elsewhere : waker_base {
  asyncband::semaphore other{1};
};
struct sem_waker : waker_base {
  std::unique_ptr<asyncband::semaphore_permit> permit;
};

void add_semaphore_rows(std::vector<row>& rows) {
  using W = sem_world;
  const auto release = [](W* w, no_waker&) { w->s.release(); };
  rows.push_back(coroutine_row<W, no_waker>(
      "semaphore_release", "ok", no_setup{}, [](W& w, stop_token) { return w.s.acquire(); }, release));
  rows.push_back(coroutine_row<W, no_waker>(
      "semaphore_release_cancellable", "ok", no_setup{}, [](W& w, stop_token t) { return w.s.acquire(1, t); },
      release));
  rows.push_back(coroutine_row<W, no_waker>(
      "semaphore_release_many", "ok", no_setup{}, [](W& w, stop_token) { return w.s.acquire(3); },
      [](W* w, no_waker&) { w->s.release(3); }));
  rows.push_back(coroutine_row<W, no_waker>(
      "semaphore_stop", "cancelled", no_setup{}, [](W& w, stop_token t) { return w.s.acquire(1, t); },
      request_stop{}));
  rows.push_back(pass_on_row<W, no_waker>(
      "semaphore_release_permit_passed_on", no_setup{}, [](W& w, stop_token t) { return w.s.acquire(1, t); },
      [](W& w, stop_token) { return w.s.acquire(); }, release));
  // Each waiter releases its permit as it returns, resuming the next one inline.
  for (const int n : {3, 20}) {
    rows.push_back(crowd_row<W, no_waker>(
        "semaphore_release_chain_" + std::to_string(n), n, "ok", no_setup{},
        [](W& w, stop_token) { return w.s.acquire(); }, [](W& w, stop_token) { return w.s.acquire(); },
        [](W* w, no_waker&, asyncband::stop_source&) { w->s.release(); }));
  }
  // A cancelled acquisition passes its partial grant on to the next waiter (strict FIFO).
  rows.push_back(crowd_row<sem_one_fifo, no_waker>(
      "semaphore_stop_passes_partial_grant_on", 1, "cancelled", no_setup{},
      [](sem_one_fifo& w, stop_token t) { return w.s.acquire(2, t); },
      [](sem_one_fifo& w, stop_token) { return w.s.acquire(); },
      [](sem_one_fifo*, no_waker&, asyncband::stop_source& bystanders) { bystanders.request_stop(); }));
  rows.push_back(thread_row<W, no_waker>(
      "semaphore_release_blocked_thread", "ok", no_setup{},
      [](W& w, stop_token t) { return w.s.acquire_blocking(1, t); }, release));

  rows.push_back(coroutine_row<sem_permit_in_world, sem_elsewhere>(
      "semaphore_permit_move_assigned_destroyed_by_waiter", "ok",
      [](sem_permit_in_world& w, sem_elsewhere&) { w.held.emplace(std::move(*w.s.try_acquire())); },
      [](sem_permit_in_world& w, stop_token) { return w.s.acquire(); },
      [](sem_permit_in_world* w, sem_elsewhere& k) { *w->held = std::move(*k.other.try_acquire()); }));

  using O = sem_one;
  const auto hold = [](O& w, sem_waker& k) { k.permit = boxed(*w.s.try_acquire()); };
  rows.push_back(coroutine_row<O, sem_waker>(
      "semaphore_permit_release", "ok", hold, [](O& w, stop_token) { return w.s.acquire(); },
      [](O*, sem_waker& k) { k.permit->release(); }));
  rows.push_back(coroutine_row<O, sem_waker>(
      "semaphore_permit_destroyed", "ok", hold, [](O& w, stop_token) { return w.s.acquire(); },
      [](O*, sem_waker& k) { k.permit.reset(); }));
}

struct mutex_world {
  asyncband::mutex<int> m;
};
struct mutex_held {  // for the stop row: nobody releases it, so its holder is part of the World
  asyncband::mutex<int> m;
  std::optional<asyncband::mutex_guard<int>> held = m.try_lock();
};
struct mutex_waker : waker_base {
  std::unique_ptr<asyncband::mutex_guard<int>> guard;
};
struct mutex_guard_in_world {
  asyncband::mutex<int> m;
  std::optional<asyncband::mutex_guard<int>> held;  // in the World: a late write shows
};
struct mutex_elsewhere : waker_base {
  asyncband::mutex<int> other;
};
struct owned_mutex_world {
  std::shared_ptr<asyncband::mutex<int>> m = std::make_shared<asyncband::mutex<int>>();
};
struct owned_mutex_waker : waker_base {
  std::unique_ptr<asyncband::owned_mutex_guard<int>> guard;
};
struct mapped_guard_in_world {
  asyncband::mutex<int> m;
  std::optional<asyncband::mapped_mutex_guard<int>> held;
};
struct owned_guard_in_world {
  std::shared_ptr<asyncband::mutex<int>> m = std::make_shared<asyncband::mutex<int>>();
  std::optional<asyncband::owned_mutex_guard<int>> held;
};
struct owned_mutex_elsewhere : waker_base {
  std::shared_ptr<asyncband::mutex<int>> other = std::make_shared<asyncband::mutex<int>>();
};

void add_mutex_rows(std::vector<row>& rows) {
  using W = mutex_world;
  const auto hold = [](W& w, mutex_waker& k) { k.guard = boxed(*w.m.try_lock()); };
  const auto unlock = [](W*, mutex_waker& k) { k.guard->unlock(); };
  rows.push_back(coroutine_row<W, mutex_waker>(
      "mutex_unlock", "ok", hold, [](W& w, stop_token) { return w.m.lock(); }, unlock));
  rows.push_back(coroutine_row<W, mutex_waker>(
      "mutex_unlock_cancellable", "ok", hold, [](W& w, stop_token t) { return w.m.lock(t); }, unlock));
  rows.push_back(coroutine_row<W, mutex_waker>(
      "mutex_guard_destroyed", "ok", hold, [](W& w, stop_token) { return w.m.lock(); },
      [](W*, mutex_waker& k) { k.guard.reset(); }));
  rows.push_back(pass_on_row<W, mutex_waker>(
      "mutex_unlock_ownership_passed_on", hold, [](W& w, stop_token t) { return w.m.lock(t); },
      [](W& w, stop_token) { return w.m.lock(); }, unlock));
  rows.push_back(coroutine_row<mutex_held, no_waker>(
      "mutex_stop", "cancelled", no_setup{}, [](mutex_held& w, stop_token t) { return w.m.lock(t); },
      request_stop{}));
  for (const int n : {3, 20}) {
    rows.push_back(crowd_row<W, mutex_waker>(
        "mutex_unlock_chain_" + std::to_string(n), n, "ok", hold, [](W& w, stop_token) { return w.m.lock(); },
        [](W& w, stop_token) { return w.m.lock(); },
        [](W*, mutex_waker& k, asyncband::stop_source&) { k.guard->unlock(); }));
  }
  rows.push_back(thread_row<W, mutex_waker>(
      "mutex_unlock_blocked_thread", "ok", hold, [](W& w, stop_token t) { return w.m.lock_blocking(t); },
      unlock));

  // The waker's own guard is among what the waiter may destroy: unlock() and assignment give
  // the lock up as their last action.
  using H = mutex_guard_in_world;
  const auto hold_in_world = [](H& w, mutex_elsewhere& /*unused*/) {
    w.held.emplace(std::move(*w.m.try_lock()));
  };
  rows.push_back(coroutine_row<H, mutex_elsewhere>(
      "mutex_unlock_guard_destroyed_by_waiter", "ok", hold_in_world,
      [](H& w, stop_token) { return w.m.lock(); }, [](H* w, mutex_elsewhere&) { w->held->unlock(); }));
  rows.push_back(coroutine_row<H, mutex_elsewhere>(
      "mutex_guard_move_assigned_destroyed_by_waiter", "ok", hold_in_world,
      [](H& w, stop_token) { return w.m.lock(); },
      [](H* w, mutex_elsewhere& k) { *w->held = std::move(*k.other.try_lock()); }));

  using O = owned_mutex_world;
  rows.push_back(coroutine_row<O, owned_mutex_waker>(
      "mutex_owned_guard_destroyed", "ok",
      [](O& w, owned_mutex_waker& k) { k.guard = boxed(*asyncband::try_lock_owned(w.m)); },
      [](O& w, stop_token) { return asyncband::lock_owned(w.m); },
      [](O*, owned_mutex_waker& k) { k.guard.reset(); }));

  // Mapped and owned guards, assigned to: the old lock goes last, from a local.
  using MG = mapped_guard_in_world;
  const auto whole = [](int& v) -> int& { return v; };
  rows.push_back(coroutine_row<MG, mutex_elsewhere>(
      "mutex_mapped_guard_move_assigned_destroyed_by_waiter", "ok",
      [whole](MG& w, mutex_elsewhere&) { w.held.emplace(std::move(*w.m.try_lock()).map(whole)); },
      [](MG& w, stop_token) { return w.m.lock(); },
      [whole](MG* w, mutex_elsewhere& k) { *w->held = std::move(*k.other.try_lock()).map(whole); }));
  using OG = owned_guard_in_world;
  rows.push_back(coroutine_row<OG, owned_mutex_elsewhere>(
      "mutex_owned_guard_move_assigned_destroyed_by_waiter", "ok",
      [](OG& w, owned_mutex_elsewhere&) { w.held.emplace(std::move(*asyncband::try_lock_owned(w.m))); },
      [](OG& w, stop_token) { return asyncband::lock_owned(w.m); },
      [](OG* w, owned_mutex_elsewhere& k) { *w->held = std::move(*asyncband::try_lock_owned(k.other)); }));
}

struct rwlock_world {
  asyncband::rwlock<int> rw;
};
struct rwlock_write_held {
  asyncband::rwlock<int> rw;
  std::optional<asyncband::rwlock_write_guard<int>> held = rw.try_write();
};
struct rwlock_read_held {
  asyncband::rwlock<int> rw;
  std::optional<asyncband::rwlock_read_guard<int>> held = rw.try_read();
};
/// As rwlock_read_held, with strict FIFO: a reader queues behind a waiting writer (with
/// barging it would take a free share at once).
struct rwlock_fifo_read_held {
  asyncband::rwlock<int> rw{asyncband::strict_fifo, 0};
  std::optional<asyncband::rwlock_read_guard<int>> held = rw.try_read();
};
struct rwlock_waker : waker_base {
  std::unique_ptr<asyncband::rwlock_write_guard<int>> writer;
  std::unique_ptr<asyncband::rwlock_read_guard<int>> reader;
};
// downgrade(): the waker keeps a read share, so the rwlock must outlive the waiter; the waiter
// destroys its guard and its frame only.
struct rwlock_elsewhere {
  asyncband::rwlock<int>* rw = nullptr;
};
struct rwlock_owning_waker : rwlock_waker {
  asyncband::rwlock<int> rw;
};
struct rwlock_read_guard_in_world {
  asyncband::rwlock<int> rw;
  std::optional<asyncband::rwlock_read_guard<int>> held;
};
struct rwlock_write_guard_in_world {
  asyncband::rwlock<int> rw;
  std::optional<asyncband::rwlock_write_guard<int>> held;
};
struct rwlock_other : waker_base {
  asyncband::rwlock<int> other;
};
// downgrade() of a write guard that the waiter destroys (the rwlock is the waker's: the new read
// guard keeps a share of it).
struct rwlock_downgraded_in_world {
  asyncband::rwlock<int>* rw = nullptr;
  std::optional<asyncband::rwlock_write_guard<int>> held;
};

void add_rwlock_rows(std::vector<row>& rows) {
  using W = rwlock_world;
  const auto hold_write = [](W& w, rwlock_waker& k) { k.writer = boxed(*w.rw.try_write()); };
  const auto hold_read = [](W& w, rwlock_waker& k) { k.reader = boxed(*w.rw.try_read()); };
  const auto read = [](W& w, stop_token) { return w.rw.read(); };
  const auto write = [](W& w, stop_token) { return w.rw.write(); };
  rows.push_back(coroutine_row<W, rwlock_waker>("rwlock_write_unlock_wakes_reader", "ok", hold_write, read,
                                                [](W*, rwlock_waker& k) { k.writer->unlock(); }));
  rows.push_back(coroutine_row<W, rwlock_waker>("rwlock_write_guard_destroyed_wakes_writer", "ok", hold_write,
                                                write, [](W*, rwlock_waker& k) { k.writer.reset(); }));
  rows.push_back(coroutine_row<W, rwlock_waker>("rwlock_read_unlock_wakes_writer", "ok", hold_read, write,
                                                [](W*, rwlock_waker& k) { k.reader->unlock(); }));
  rows.push_back(coroutine_row<W, rwlock_waker>("rwlock_read_guard_destroyed_wakes_writer", "ok", hold_read,
                                                write, [](W*, rwlock_waker& k) { k.reader.reset(); }));
  rows.push_back(coroutine_row<W, rwlock_waker>(
      "rwlock_write_unlock_wakes_reader_cancellable", "ok", hold_write,
      [](W& w, stop_token t) { return w.rw.read(t); }, [](W*, rwlock_waker& k) { k.writer->unlock(); }));
  rows.push_back(coroutine_row<W, rwlock_waker>(
      "rwlock_read_unlock_wakes_writer_cancellable", "ok", hold_read,
      [](W& w, stop_token t) { return w.rw.write(t); }, [](W*, rwlock_waker& k) { k.reader->unlock(); }));
  rows.push_back(coroutine_row<rwlock_write_held, no_waker>(
      "rwlock_stop_read", "cancelled", no_setup{},
      [](rwlock_write_held& w, stop_token t) { return w.rw.read(t); }, request_stop{}));
  rows.push_back(coroutine_row<rwlock_read_held, no_waker>(
      "rwlock_stop_write", "cancelled", no_setup{},
      [](rwlock_read_held& w, stop_token t) { return w.rw.write(t); }, request_stop{}));
  rows.push_back(coroutine_row<rwlock_elsewhere, rwlock_owning_waker>(
      "rwlock_downgrade_wakes_reader", "ok",
      [](rwlock_elsewhere& w, rwlock_owning_waker& k) {
        w.rw = &k.rw;
        k.writer = boxed(*k.rw.try_write());
      },
      [](rwlock_elsewhere& w, stop_token) { return w.rw->read(); },
      [](rwlock_elsewhere*, rwlock_owning_waker& k) { k.reader = boxed(std::move(*k.writer).downgrade()); }));
  for (const int n : {3, 20}) {
    rows.push_back(crowd_row<W, rwlock_waker>(
        "rwlock_write_unlock_writer_chain_" + std::to_string(n), n, "ok", hold_write, write, write,
        [](W*, rwlock_waker& k, asyncband::stop_source&) { k.writer->unlock(); }));
  }
  rows.push_back(
      crowd_row<W, rwlock_waker>("rwlock_write_unlock_wakes_readers", 3, "ok", hold_write, read, read,
                                 [](W*, rwlock_waker& k, asyncband::stop_source&) { k.writer->unlock(); }));
  // A cancelled write passes the read shares it had gathered on to the reader queued behind it
  // (strict FIFO: with barging the reader would not queue behind the writer).
  rows.push_back(crowd_row<rwlock_fifo_read_held, no_waker>(
      "rwlock_stop_writer_lets_reader_in", 1, "cancelled", no_setup{},
      [](rwlock_fifo_read_held& w, stop_token t) { return w.rw.write(t); },
      [](rwlock_fifo_read_held& w, stop_token) { return w.rw.read(); },
      [](rwlock_fifo_read_held*, no_waker&, asyncband::stop_source& bystanders) {
        bystanders.request_stop();
      }));
  rows.push_back(thread_row<W, rwlock_waker>(
      "rwlock_write_unlock_blocked_reader_thread", "ok", hold_write,
      [](W& w, stop_token t) { return w.rw.read_blocking(t); },
      [](W*, rwlock_waker& k) { k.writer->unlock(); }));

  // The waker's own guard is among what the waiter may destroy.
  using RG = rwlock_read_guard_in_world;
  rows.push_back(coroutine_row<RG, rwlock_other>(
      "rwlock_read_guard_move_assigned_destroyed_by_waiter", "ok",
      [](RG& w, rwlock_other&) { w.held.emplace(std::move(*w.rw.try_read())); },
      [](RG& w, stop_token) { return w.rw.write(); },
      [](RG* w, rwlock_other& k) { *w->held = std::move(*k.other.try_read()); }));
  using WG = rwlock_write_guard_in_world;
  rows.push_back(coroutine_row<WG, rwlock_other>(
      "rwlock_write_guard_move_assigned_destroyed_by_waiter", "ok",
      [](WG& w, rwlock_other&) { w.held.emplace(std::move(*w.rw.try_write())); },
      [](WG& w, stop_token) { return w.rw.read(); },
      [](WG* w, rwlock_other& k) { *w->held = std::move(*k.other.try_write()); }));
  using DG = rwlock_downgraded_in_world;
  rows.push_back(coroutine_row<DG, rwlock_owning_waker>(
      "rwlock_downgrade_write_guard_destroyed_by_waiter", "ok",
      [](DG& w, rwlock_owning_waker& k) {
        w.rw = &k.rw;
        w.held.emplace(std::move(*k.rw.try_write()));
      },
      [](DG& w, stop_token) { return w.rw->read(); },
      [](DG* w, rwlock_owning_waker& k) { k.reader = boxed(std::move(*w->held).downgrade()); }));
}

// ------------------------------------------------------------------------------------------------
// condvar: the waiter waits with the mutex held (taken in its wait expression), relocks, and
// destroys its guard, the condvar and the mutex.

struct condvar_world {
  asyncband::mutex<int> m;
  asyncband::condvar cv;
};

void add_condvar_rows(std::vector<row>& rows) {
  using W = condvar_world;
  const auto wait = [](W& w, stop_token) { return w.cv.wait(std::move(*w.m.try_lock())); };
  const auto wait_cancellable = [](W& w, stop_token t) { return w.cv.wait(std::move(*w.m.try_lock()), t); };
  rows.push_back(coroutine_row<W, no_waker>("condvar_notify_one", "ok", no_setup{}, wait,
                                            [](W* w, no_waker&) { w->cv.notify_one(); }));
  rows.push_back(coroutine_row<W, no_waker>("condvar_notify_all", "ok", no_setup{}, wait,
                                            [](W* w, no_waker&) { w->cv.notify_all(); }));
  rows.push_back(coroutine_row<W, no_waker>("condvar_notify_one_cancellable", "ok", no_setup{},
                                            wait_cancellable, [](W* w, no_waker&) { w->cv.notify_one(); }));
  rows.push_back(coroutine_row<W, no_waker>(
      "condvar_wait_while_notify_one", "ok", no_setup{},
      [](W& w, stop_token) {
        return w.cv.wait_while(std::move(*w.m.try_lock()), [](int& ready) { return ready == 0; });
      },
      [](W* w, no_waker&) {
        **w->m.try_lock() = 1;  // locked for this statement
        w->cv.notify_one();
      }));
  // Notified under the mutex: the waiter's relock completes at the unlock.
  rows.push_back(coroutine_row<W, no_waker>("condvar_notify_one_then_unlock", "ok", no_setup{}, wait,
                                            [](W* w, no_waker&) {
                                              auto guard = w->m.try_lock();
                                              w->cv.notify_one();
                                              guard->unlock();
                                            }));
  rows.push_back(
      crowd_row<W, no_waker>("condvar_notify_all_crowd", 3, "ok", no_setup{}, wait, wait,
                             [](W* w, no_waker&, asyncband::stop_source&) { w->cv.notify_all(); }));
  // A waiter claimed by notify_one and cancelled before it resumes passes the notification on
  // (without relocking): the next waiter relocks and destroys the condvar and the mutex.
  rows.push_back(pass_on_row<W, no_waker>("condvar_notify_one_passed_on", no_setup{}, wait_cancellable, wait,
                                          [](W* w, no_waker&) { w->cv.notify_one(); }));
  rows.push_back(
      coroutine_row<W, no_waker>("condvar_stop", "cancelled", no_setup{}, wait_cancellable, request_stop{}));
  rows.push_back(thread_row<W, no_waker>(
      "condvar_notify_one_blocked_thread", "ok", no_setup{},
      [](W& w, stop_token t) { return w.cv.wait_blocking(std::move(*w.m.try_lock()), t); },
      [](W* w, no_waker&) { w->cv.notify_one(); }));
}

// ------------------------------------------------------------------------------------------------
// Channels. A waiting receiver destroys its receiver and, where the completing call is made on a
// sender it would be the last handle of, that sender too; a waiting sender destroys its sender.

struct oneshot_world {
  std::pair<asyncband::oneshot::sender<int>, asyncband::oneshot::receiver<int>> ch =
      asyncband::oneshot::channel<int>();
};
struct oneshot_elsewhere : waker_base {
  std::pair<asyncband::oneshot::sender<int>, asyncband::oneshot::receiver<int>> other =
      asyncband::oneshot::channel<int>();
};
struct oneshot_waker : waker_base {
  std::unique_ptr<asyncband::oneshot::sender<int>> tx;
};

void add_oneshot_rows(std::vector<row>& rows) {
  using W = oneshot_world;
  const auto recv = [](W& w, stop_token) { return w.ch.second.recv(); };
  const auto recv_cancellable = [](W& w, stop_token t) { return w.ch.second.recv(t); };
  const auto send = [](W* w, auto&) { (void)w->ch.first.send(1); };
  rows.push_back(coroutine_row<W, no_waker>("oneshot_send", "ok", no_setup{}, recv, send));
  rows.push_back(
      coroutine_row<W, no_waker>("oneshot_send_cancellable", "ok", no_setup{}, recv_cancellable, send));
  rows.push_back(coroutine_row<W, oneshot_waker>(
      "oneshot_sender_destroyed", "closed",
      [](W& w, oneshot_waker& k) { k.tx = boxed(std::move(w.ch.first)); }, recv,
      [](W*, oneshot_waker& k) { k.tx.reset(); }));
  rows.push_back(coroutine_row<W, oneshot_elsewhere>(
      "oneshot_sender_move_assigned", "closed", no_setup{}, recv,
      [](W* w, oneshot_elsewhere& k) { w->ch.first = std::move(k.other.first); }));
  rows.push_back(coroutine_row<W, no_waker>("oneshot_receiver_close", "closed", no_setup{}, recv,
                                            [](W* w, no_waker&) { w->ch.second.close(); }));
  rows.push_back(
      coroutine_row<W, no_waker>("oneshot_stop", "cancelled", no_setup{}, recv_cancellable, request_stop{}));
  rows.push_back(thread_row<W, no_waker>(
      "oneshot_send_blocked_thread", "ok", no_setup{},
      [](W& w, stop_token t) { return w.ch.second.recv_blocking(t); }, send));
}

struct unbounded_world {
  std::pair<asyncband::mpsc::unbounded_sender<int>, asyncband::mpsc::unbounded_receiver<int>> ch =
      asyncband::mpsc::unbounded<int>();
};
struct unbounded_elsewhere : waker_base {
  std::pair<asyncband::mpsc::unbounded_sender<int>, asyncband::mpsc::unbounded_receiver<int>> other =
      asyncband::mpsc::unbounded<int>();
};
struct unbounded_waker : waker_base {
  std::unique_ptr<asyncband::mpsc::unbounded_sender<int>> tx;
};

void add_unbounded_rows(std::vector<row>& rows) {
  using W = unbounded_world;
  const auto recv = [](W& w, stop_token) { return w.ch.second.recv(); };
  const auto recv_cancellable = [](W& w, stop_token t) { return w.ch.second.recv(t); };
  const auto send = [](W* w, auto&) { (void)w->ch.first.send(1); };
  rows.push_back(coroutine_row<W, no_waker>("unbounded_send", "ok", no_setup{}, recv, send));
  rows.push_back(
      coroutine_row<W, no_waker>("unbounded_send_cancellable", "ok", no_setup{}, recv_cancellable, send));
  rows.push_back(coroutine_row<W, unbounded_waker>(
      "unbounded_sender_destroyed", "closed",
      [](W& w, unbounded_waker& k) { k.tx = boxed(std::move(w.ch.first)); }, recv,
      [](W*, unbounded_waker& k) { k.tx.reset(); }));
  rows.push_back(coroutine_row<W, unbounded_elsewhere>(
      "unbounded_sender_move_assigned", "closed", no_setup{}, recv,
      [](W* w, unbounded_elsewhere& k) { w->ch.first = std::move(k.other.first); }));
  rows.push_back(coroutine_row<W, no_waker>("unbounded_receiver_close", "closed", no_setup{}, recv,
                                            [](W* w, no_waker&) { w->ch.second.close(); }));
  rows.push_back(coroutine_row<W, no_waker>("unbounded_stop", "cancelled", no_setup{}, recv_cancellable,
                                            request_stop{}));
  rows.push_back(thread_row<W, no_waker>(
      "unbounded_send_blocked_thread", "ok", no_setup{},
      [](W& w, stop_token t) { return w.ch.second.recv_blocking(t); }, send));
}

// A receiver waiting on an empty bounded channel.
struct bounded_world {
  std::pair<asyncband::mpsc::sender<int>, asyncband::mpsc::receiver<int>> ch =
      asyncband::mpsc::bounded<int>(1);
};
struct bounded_with_permit : bounded_world {
  std::optional<asyncband::mpsc::permit<int>> permit = ch.first.try_reserve().value();
};
struct bounded_elsewhere : waker_base {
  std::pair<asyncband::mpsc::sender<int>, asyncband::mpsc::receiver<int>> other =
      asyncband::mpsc::bounded<int>(1);
};
struct bounded_rx_waker : waker_base {
  std::unique_ptr<asyncband::mpsc::sender<int>> tx;
  std::unique_ptr<asyncband::mpsc::owned_permit<int>> permit;
};
// A sender waiting for capacity (the channel is full); the receiver is the completing side's.
struct bounded_sender_world {
  std::optional<asyncband::mpsc::sender<int>> tx;
};
struct bounded_tx_waker : waker_base {
  std::unique_ptr<asyncband::mpsc::receiver<int>> rx;
  std::unique_ptr<asyncband::mpsc::owned_permit<int>> permit;
};
// A sender waiting for capacity, with the handle the completing side assigns to in the World.
struct bounded_sender_and_handles {
  std::optional<asyncband::mpsc::sender<int>> tx;
  std::optional<asyncband::mpsc::receiver<int>> rx;
  std::optional<asyncband::mpsc::owned_permit<int>> permit;
};
struct bounded_assigning_waker : waker_base {
  std::pair<asyncband::mpsc::sender<int>, asyncband::mpsc::receiver<int>> other =
      asyncband::mpsc::bounded<int>(1);
  std::unique_ptr<asyncband::mpsc::receiver<int>> rx;  // of the waiter's channel, when not in the World
};

void add_bounded_rows(std::vector<row>& rows) {
  using W = bounded_world;
  const auto recv = [](W& w, stop_token) { return w.ch.second.recv(); };
  const auto recv_cancellable = [](W& w, stop_token t) { return w.ch.second.recv(t); };
  const auto try_send = [](W* w, auto&) { (void)w->ch.first.try_send(1); };
  rows.push_back(
      coroutine_row<W, no_waker>("bounded_try_send_wakes_receiver", "ok", no_setup{}, recv, try_send));
  rows.push_back(coroutine_row<W, no_waker>("bounded_try_send_wakes_receiver_cancellable", "ok", no_setup{},
                                            recv_cancellable, try_send));
  rows.push_back(coroutine_row<W, no_waker>("bounded_co_send_wakes_receiver", "ok", no_setup{}, recv,
                                            [](W* w, no_waker&) { (void)block_on(w->ch.first.send(1)); }));
  rows.push_back(
      coroutine_row<W, no_waker>("bounded_co_send_cancellable_wakes_receiver", "ok", no_setup{}, recv,
                                 [](W* w, no_waker&) { (void)block_on(w->ch.first.send(1, stop_token{})); }));
  rows.push_back(coroutine_row<W, no_waker>("bounded_send_blocking_wakes_receiver", "ok", no_setup{}, recv,
                                            [](W* w, no_waker&) { (void)w->ch.first.send_blocking(1); }));
  rows.push_back(coroutine_row<bounded_with_permit, no_waker>(
      "bounded_permit_send_wakes_receiver", "ok", no_setup{},
      [](bounded_with_permit& w, stop_token) { return w.ch.second.recv(); },
      [](bounded_with_permit* w, no_waker&) { (void)w->permit->send(1); }));
  rows.push_back(coroutine_row<W, bounded_rx_waker>(
      "bounded_owned_permit_send_wakes_receiver", "ok",
      [](W& w, bounded_rx_waker& k) { k.permit = boxed(w.ch.first.try_reserve_owned().value()); }, recv,
      [](W*, bounded_rx_waker& k) { (void)k.permit->send(1); }));
  rows.push_back(coroutine_row<W, bounded_rx_waker>(
      "bounded_sender_destroyed_wakes_receiver", "closed",
      [](W& w, bounded_rx_waker& k) { k.tx = boxed(std::move(w.ch.first)); }, recv,
      [](W*, bounded_rx_waker& k) { k.tx.reset(); }));
  rows.push_back(coroutine_row<W, bounded_elsewhere>(
      "bounded_sender_move_assigned_wakes_receiver", "closed", no_setup{}, recv,
      [](W* w, bounded_elsewhere& k) { w->ch.first = std::move(k.other.first); }));
  rows.push_back(coroutine_row<W, no_waker>("bounded_receiver_close_wakes_receiver", "closed", no_setup{},
                                            recv, [](W* w, no_waker&) { w->ch.second.close(); }));
  rows.push_back(coroutine_row<W, no_waker>("bounded_stop_receiver", "cancelled", no_setup{},
                                            recv_cancellable, request_stop{}));
  rows.push_back(thread_row<W, no_waker>(
      "bounded_try_send_blocked_receiver_thread", "ok", no_setup{},
      [](W& w, stop_token t) { return w.ch.second.recv_blocking(t); }, try_send));

  using S = bounded_sender_world;
  using K = bounded_tx_waker;
  const auto full = [](S& w, K& k) {
    auto [tx, rx] = asyncband::mpsc::bounded<int>(1);
    w.tx.emplace(std::move(tx));
    k.rx = boxed(std::move(rx));
    (void)w.tx->try_send(0);
  };
  const auto full_by_permit = [](S& w, K& k) {
    auto [tx, rx] = asyncband::mpsc::bounded<int>(1);
    w.tx.emplace(std::move(tx));
    k.rx = boxed(std::move(rx));
    k.permit = boxed(w.tx->try_reserve_owned().value());
  };
  const auto send = [](S& w, stop_token) { return w.tx->send(2); };
  const auto try_recv = [](S*, K& k) { (void)k.rx->try_recv(); };
  rows.push_back(coroutine_row<S, K>("bounded_try_recv_wakes_sender", "ok", full, send, try_recv));
  rows.push_back(coroutine_row<S, K>(
      "bounded_try_recv_wakes_sender_cancellable", "ok", full,
      [](S& w, stop_token t) { return w.tx->send(2, t); }, try_recv));
  rows.push_back(coroutine_row<S, K>("bounded_co_recv_wakes_sender", "ok", full, send,
                                     [](S*, K& k) { (void)block_on(k.rx->recv()); }));
  rows.push_back(coroutine_row<S, K>("bounded_recv_blocking_wakes_sender", "ok", full, send,
                                     [](S*, K& k) { (void)k.rx->recv_blocking(); }));
  rows.push_back(coroutine_row<S, K>(
      "bounded_try_recv_wakes_reserve", "ok", full, [](S& w, stop_token) { return w.tx->reserve(); },
      try_recv));
  rows.push_back(coroutine_row<S, K>(
      "bounded_try_recv_wakes_reserve_owned", "ok", full,
      [](S& w, stop_token) { return w.tx->reserve_owned(); }, try_recv));
  rows.push_back(coroutine_row<S, K>("bounded_owned_permit_destroyed_wakes_sender", "ok", full_by_permit,
                                     send, [](S*, K& k) { k.permit.reset(); }));
  rows.push_back(coroutine_row<S, K>("bounded_receiver_destroyed_wakes_sender", "closed", full, send,
                                     [](S*, K& k) { k.rx.reset(); }));
  rows.push_back(coroutine_row<S, K>("bounded_receiver_close_wakes_sender", "closed", full, send,
                                     [](S*, K& k) { k.rx->close(); }));
  rows.push_back(coroutine_row<S, K>(
      "bounded_stop_sender", "cancelled", full, [](S& w, stop_token t) { return w.tx->send(2, t); },
      request_stop{}));
  rows.push_back(thread_row<S, K>(
      "bounded_try_recv_blocked_sender_thread", "ok", full,
      [](S& w, stop_token t) { return w.tx->send_blocking(2, t); }, try_recv));

  // Assigning to the handle that frees the capacity (an owned permit) or disconnects the channel
  // (the receiver): the old one goes last, from a local.
  using A = bounded_sender_and_handles;
  using AK = bounded_assigning_waker;
  const auto send_a = [](A& w, stop_token) { return w.tx->send(2); };
  rows.push_back(coroutine_row<A, AK>(
      "bounded_owned_permit_move_assigned_wakes_sender", "ok",
      [](A& w, AK& k) {
        auto [tx, rx] = asyncband::mpsc::bounded<int>(1);
        w.tx.emplace(std::move(tx));
        k.rx = boxed(std::move(rx));
        w.permit.emplace(w.tx->try_reserve_owned().value());
      },
      send_a, [](A* w, AK& k) { *w->permit = k.other.first.try_reserve_owned().value(); }));
  rows.push_back(coroutine_row<A, AK>(
      "bounded_receiver_move_assigned_wakes_sender", "closed",
      [](A& w, AK&) {
        auto [tx, rx] = asyncband::mpsc::bounded<int>(1);
        w.tx.emplace(std::move(tx));
        w.rx.emplace(std::move(rx));
        (void)w.tx->try_send(0);
      },
      send_a, [](A* w, AK& k) { *w->rx = std::move(k.other.second); }));
}

// ------------------------------------------------------------------------------------------------
// broadcast (both modes): a receiver waiting on an empty channel; the waiter's World holds the
// channel's only sender and receiver, so it destroys the ring while the send, close or stop that
// woke it is still on the stack. bounded: a sender waiting for capacity, woken by the receive that
// frees it, the receiver leaving, close or stop.

template <asyncband::broadcast::mode M>
using broadcast_pair =
    std::pair<asyncband::broadcast::sender<int, M>, asyncband::broadcast::receiver<int, M>>;

template <asyncband::broadcast::mode M>
struct broadcast_world {
  broadcast_pair<M> ch = asyncband::broadcast::detail::make_channel<int, M>(1, 0);
};
template <asyncband::broadcast::mode M>
struct broadcast_elsewhere : waker_base {
  broadcast_pair<M> other = asyncband::broadcast::detail::make_channel<int, M>(1, 0);
};
template <asyncband::broadcast::mode M>
struct broadcast_waker : waker_base {
  std::unique_ptr<asyncband::broadcast::sender<int, M>> tx;
};

/// A send that does not wait: send() (overflow) or try_send() (bounded).
template <asyncband::broadcast::mode M>
void broadcast_send_now(asyncband::broadcast::sender<int, M>& tx, int v) {
  if constexpr (M == asyncband::broadcast::mode::overflow) {
    (void)tx.send(v);
  } else {
    (void)tx.try_send(v);
  }
}

template <asyncband::broadcast::mode M>
void add_broadcast_receiver_rows(std::vector<row>& rows, const std::string& prefix) {
  using W = broadcast_world<M>;
  using K = broadcast_waker<M>;
  using E = broadcast_elsewhere<M>;
  const auto recv = [](W& w, stop_token) { return w.ch.second.recv(); };
  const auto recv_cancellable = [](W& w, stop_token t) { return w.ch.second.recv(t); };
  const auto send = [](W* w, auto&) { broadcast_send_now(w->ch.first, 1); };
  rows.push_back(coroutine_row<W, no_waker>(prefix + "_send_wakes_receiver", "ok", no_setup{}, recv, send));
  rows.push_back(coroutine_row<W, no_waker>(prefix + "_send_wakes_receiver_cancellable", "ok", no_setup{},
                                            recv_cancellable, send));
  rows.push_back(coroutine_row<W, K>(
      prefix + "_sender_destroyed_wakes_receiver", "closed",
      [](W& w, K& k) { k.tx = boxed(std::move(w.ch.first)); }, recv, [](W*, K& k) { k.tx.reset(); }));
  rows.push_back(coroutine_row<W, E>(prefix + "_sender_move_assigned_wakes_receiver", "closed", no_setup{},
                                     recv, [](W* w, E& k) { w->ch.first = std::move(k.other.first); }));
  rows.push_back(coroutine_row<W, no_waker>(prefix + "_close_wakes_receiver", "closed", no_setup{}, recv,
                                            [](W* w, no_waker&) { w->ch.first.close(); }));
  rows.push_back(coroutine_row<W, no_waker>(prefix + "_stop_receiver", "cancelled", no_setup{},
                                            recv_cancellable, request_stop{}));
  rows.push_back(thread_row<W, no_waker>(
      prefix + "_send_wakes_blocked_receiver_thread", "ok", no_setup{},
      [](W& w, stop_token t) { return w.ch.second.recv_blocking(t); }, send));
  if constexpr (M == asyncband::broadcast::mode::bounded) {
    rows.push_back(coroutine_row<W, no_waker>(prefix + "_co_send_wakes_receiver", "ok", no_setup{}, recv,
                                              [](W* w, no_waker&) { (void)block_on(w->ch.first.send(1)); }));
    rows.push_back(coroutine_row<W, no_waker>(prefix + "_send_blocking_wakes_receiver", "ok", no_setup{},
                                              recv,
                                              [](W* w, no_waker&) { (void)w->ch.first.send_blocking(1); }));
  }
}

// A bounded sender waiting for capacity (the channel is full); the receiver is the completing
// side's.
struct broadcast_sender_world {
  std::optional<asyncband::broadcast::bounded_sender<int>> tx;
};
struct broadcast_sender_waker : waker_base {
  std::unique_ptr<asyncband::broadcast::bounded_receiver<int>> rx;
};

void add_broadcast_sender_rows(std::vector<row>& rows) {
  using S = broadcast_sender_world;
  using K = broadcast_sender_waker;
  const auto full = [](S& w, K& k) {
    auto [tx, rx] = asyncband::broadcast::bounded<int>(1);
    w.tx.emplace(std::move(tx));
    k.rx = boxed(std::move(rx));
    (void)w.tx->try_send(0);
  };
  const auto send = [](S& w, stop_token) { return w.tx->send(2); };
  const auto send_cancellable = [](S& w, stop_token t) { return w.tx->send(2, t); };
  const auto try_recv = [](S*, K& k) { (void)k.rx->try_recv(); };
  rows.push_back(coroutine_row<S, K>("broadcast_bounded_try_recv_wakes_sender", "ok", full, send, try_recv));
  rows.push_back(coroutine_row<S, K>("broadcast_bounded_try_recv_wakes_sender_cancellable", "ok", full,
                                     send_cancellable, try_recv));
  rows.push_back(coroutine_row<S, K>("broadcast_bounded_co_recv_wakes_sender", "ok", full, send,
                                     [](S*, K& k) { (void)block_on(k.rx->recv()); }));
  rows.push_back(coroutine_row<S, K>("broadcast_bounded_recv_blocking_wakes_sender", "ok", full, send,
                                     [](S*, K& k) { (void)k.rx->recv_blocking(); }));
  rows.push_back(coroutine_row<S, K>("broadcast_bounded_receiver_destroyed_wakes_sender", "closed", full,
                                     send, [](S*, K& k) { k.rx.reset(); }));
  rows.push_back(coroutine_row<S, K>("broadcast_bounded_close_wakes_sender", "closed", full, send,
                                     [](S* w, K&) { w->tx->close(); }));
  rows.push_back(coroutine_row<S, K>("broadcast_bounded_stop_sender", "cancelled", full, send_cancellable,
                                     request_stop{}));
  rows.push_back(thread_row<S, K>(
      "broadcast_bounded_try_recv_wakes_blocked_sender_thread", "ok", full,
      [](S& w, stop_token t) { return w.tx->send_blocking(2, t); }, try_recv));
}

void add_broadcast_rows(std::vector<row>& rows) {
  add_broadcast_receiver_rows<asyncband::broadcast::mode::overflow>(rows, "broadcast_overflow");
  add_broadcast_receiver_rows<asyncband::broadcast::mode::bounded>(rows, "broadcast_bounded");
  add_broadcast_sender_rows(rows);
}

// ------------------------------------------------------------------------------------------------
// The once family: the completing side is another caller's run (a leader started in setup, whose
// initialiser waits on the waker's event), or a set()/blocking call that completes the gate.

struct once_world {
  asyncband::once o;
};
struct cell_world {
  asyncband::once_cell<int> c;
};
struct map_world {
  asyncband::once_map<int, int> m;
};
struct flight_world {
  asyncband::singleflight::group<int, int> g;
};
/// Holds the event a leader's initialiser waits on: setting it completes the leader's run.
struct leader_waker : waker_base {
  asyncband::manual_reset_event go;
};

/// An initialiser that waits for `go` (a hand-written awaitable: the event's own wait).
auto wait_for(asyncband::manual_reset_event& go) {
  return [&go] { return go.wait(); };
}
auto yield_after(asyncband::manual_reset_event& go, int value) {
  return [&go, value]() -> asyncband::runtime::task<int> {
    co_await go.wait();
    co_return value;
  };
}

/// A leader: its run is in flight (waiting for `go`) when the row's waiter queues behind it.
inline_coroutine lead_once(asyncband::once& o, asyncband::manual_reset_event& go) {
  co_await o.call_once(wait_for(go));
}
inline_coroutine lead_cell(asyncband::once_cell<int>& c, asyncband::manual_reset_event& go) {
  (void)co_await c.get_or_init(yield_after(go, 1));
}
inline_coroutine lead_map(asyncband::once_map<int, int>& m, asyncband::manual_reset_event& go) {
  (void)co_await m.compute(0, yield_after(go, 1));
}
inline_coroutine lead_flight(asyncband::singleflight::group<int, int>& g, asyncband::manual_reset_event& go) {
  (void)co_await g.work(0, yield_after(go, 1));
}

void add_once_rows(std::vector<row>& rows) {
  const auto release = [](auto* /*world*/, leader_waker& k) { k.go.set(); };
  const auto never = [] { return 0; };
  using O = once_world;
  rows.push_back(coroutine_row<O, leader_waker>(
      "once_call_once_behind_a_run", "ok", [](O& w, leader_waker& k) { lead_once(w.o, k.go); },
      [](O& w, stop_token) { return w.o.call_once([] {}); }, release));
  rows.push_back(coroutine_row<O, leader_waker>(
      "once_wait_behind_a_run", "ok", [](O& w, leader_waker& k) { lead_once(w.o, k.go); },
      [](O& w, stop_token t) { return w.o.wait(t); }, release));
  rows.push_back(coroutine_row<O, no_waker>(
      "once_wait_completed_by_call_once_blocking", "ok", no_setup{},
      [](O& w, stop_token) { return w.o.wait(); }, [](O* w, no_waker&) { w->o.call_once_blocking([] {}); }));
  // (A stop row behind a run would destroy the once under its leader's pending call.)
  rows.push_back(coroutine_row<O, no_waker>(
      "once_wait_stop", "cancelled", no_setup{}, [](O& w, stop_token t) { return w.o.wait(t); },
      request_stop{}));

  using C = cell_world;
  rows.push_back(coroutine_row<C, leader_waker>(
      "once_cell_get_or_init_behind_a_run", "ok", [](C& w, leader_waker& k) { lead_cell(w.c, k.go); },
      [never](C& w, stop_token t) { return w.c.get_or_init(never, t); }, release));
  rows.push_back(coroutine_row<C, no_waker>(
      "once_cell_wait_completed_by_set", "ok", no_setup{}, [](C& w, stop_token) { return w.c.wait(); },
      [](C* w, no_waker&) { (void)w->c.set(2); }));
  rows.push_back(thread_row<C, no_waker>(
      "once_cell_wait_blocked_thread_completed_by_set", "ok", no_setup{},
      [](C& w, stop_token t) { return w.c.wait_blocking(t); }, [](C* w, no_waker&) { (void)w->c.set(2); }));

  using M = map_world;
  rows.push_back(coroutine_row<M, leader_waker>(
      "once_map_compute_behind_a_run", "ok", [](M& w, leader_waker& k) { lead_map(w.m, k.go); },
      [never](M& w, stop_token) { return w.m.compute(0, never); }, release));

  using F = flight_world;
  rows.push_back(coroutine_row<F, leader_waker>(
      "singleflight_follower_of_a_flight", "ok", [](F& w, leader_waker& k) { lead_flight(w.g, k.go); },
      [never](F& w, stop_token t) { return w.g.work(0, never, t); }, release));
}

// A receiver waiting for a watch channel's next version (changed, wait_for), and a sender
// waiting for every receiver to go (closed).
struct watch_world {
  std::pair<asyncband::watch::sender<int>, asyncband::watch::receiver<int>> ch =
      asyncband::watch::channel<int>(0);
};
struct watch_elsewhere : waker_base {
  std::pair<asyncband::watch::sender<int>, asyncband::watch::receiver<int>> other =
      asyncband::watch::channel<int>(0);
};
struct watch_sender_waker : waker_base {
  std::unique_ptr<asyncband::watch::sender<int>> tx;
};
struct watch_receiver_waker : waker_base {
  std::unique_ptr<asyncband::watch::receiver<int>> rx;
};

void add_watch_rows(std::vector<row>& rows) {
  using W = watch_world;
  const auto changed = [](W& w, stop_token) { return w.ch.second.changed(); };
  const auto changed_cancellable = [](W& w, stop_token t) { return w.ch.second.changed(t); };
  const auto wait_for_one = [](W& w, stop_token t) {
    return w.ch.second.wait_for([](int v) { return v == 1; }, t);
  };
  const auto send = [](W* w, auto&) { (void)w->ch.first.send(1); };
  rows.push_back(coroutine_row<W, no_waker>("watch_send", "ok", no_setup{}, changed, send));
  rows.push_back(
      coroutine_row<W, no_waker>("watch_send_cancellable", "ok", no_setup{}, changed_cancellable, send));
  rows.push_back(coroutine_row<W, no_waker>("watch_send_replace", "ok", no_setup{}, changed,
                                            [](W* w, no_waker&) { (void)w->ch.first.send_replace(1); }));
  rows.push_back(
      coroutine_row<W, no_waker>("watch_send_modify", "ok", no_setup{}, changed,
                                 [](W* w, no_waker&) { w->ch.first.send_modify([](int& v) { v = 1; }); }));
  rows.push_back(coroutine_row<W, no_waker>("watch_wait_for_send", "ok", no_setup{}, wait_for_one, send));
  rows.push_back(coroutine_row<W, watch_sender_waker>(
      "watch_sender_destroyed", "closed",
      [](W& w, watch_sender_waker& k) { k.tx = boxed(std::move(w.ch.first)); }, changed,
      [](W*, watch_sender_waker& k) { k.tx.reset(); }));
  rows.push_back(coroutine_row<W, watch_sender_waker>(
      "watch_wait_for_sender_destroyed", "closed",
      [](W& w, watch_sender_waker& k) { k.tx = boxed(std::move(w.ch.first)); }, wait_for_one,
      [](W*, watch_sender_waker& k) { k.tx.reset(); }));
  rows.push_back(coroutine_row<W, watch_elsewhere>(
      "watch_sender_move_assigned", "closed", no_setup{}, changed,
      [](W* w, watch_elsewhere& k) { w->ch.first = std::move(k.other.first); }));
  rows.push_back(
      coroutine_row<W, no_waker>("watch_stop", "cancelled", no_setup{}, changed_cancellable, request_stop{}));
  rows.push_back(coroutine_row<W, no_waker>("watch_wait_for_stop", "cancelled", no_setup{}, wait_for_one,
                                            request_stop{}));
  rows.push_back(coroutine_row<W, watch_receiver_waker>(
      "watch_closed_last_receiver_destroyed", "ok",
      [](W& w, watch_receiver_waker& k) { k.rx = boxed(std::move(w.ch.second)); },
      [](W& w, stop_token t) { return w.ch.first.closed(t); },
      [](W*, watch_receiver_waker& k) { k.rx.reset(); }));
  rows.push_back(thread_row<W, no_waker>(
      "watch_send_blocked_thread", "ok", no_setup{},
      [](W& w, stop_token t) { return w.ch.second.changed_blocking(t); }, send));
  rows.push_back(thread_row<W, watch_receiver_waker>(
      "watch_closed_blocked_thread", "ok",
      [](W& w, watch_receiver_waker& k) { k.rx = boxed(std::move(w.ch.second)); },
      [](W& w, stop_token t) { return w.ch.first.closed_blocking(t); },
      [](W*, watch_receiver_waker& k) { k.rx.reset(); }));
  // The forms without a stop token or timeout park on the channel's word, without a node.
  rows.push_back(thread_row<W, no_waker>(
      "watch_send_parked_thread", "ok", no_setup{},
      [](W& w, stop_token) { return w.ch.second.changed_blocking(); }, send, 200, false));
  rows.push_back(thread_row<W, no_waker>(
      "watch_wait_for_send_parked_thread", "ok", no_setup{},
      [](W& w, stop_token) { return w.ch.second.wait_for_blocking([](int v) { return v == 1; }); }, send, 200,
      false));
  rows.push_back(thread_row<W, watch_sender_waker>(
      "watch_sender_destroyed_parked_thread", "closed",
      [](W& w, watch_sender_waker& k) { k.tx = boxed(std::move(w.ch.first)); },
      [](W& w, stop_token) { return w.ch.second.changed_blocking(); },
      [](W*, watch_sender_waker& k) { k.tx.reset(); }, 200, false));
  rows.push_back(thread_row<W, watch_receiver_waker>(
      "watch_closed_parked_thread", "ok",
      [](W& w, watch_receiver_waker& k) { k.rx = boxed(std::move(w.ch.second)); },
      [](W& w, stop_token) {
        w.ch.first.closed_blocking();
        return true;
      },
      [](W*, watch_receiver_waker& k) { k.rx.reset(); }, 200, false));
}

std::vector<row> all_rows() {
  std::vector<row> rows;
  add_event_rows(rows);
  add_wait_group_rows(rows);
  add_phaser_rows(rows);
  add_semaphore_rows(rows);
  add_mutex_rows(rows);
  add_rwlock_rows(rows);
  add_condvar_rows(rows);
  add_oneshot_rows(rows);
  add_unbounded_rows(rows);
  add_bounded_rows(rows);
  add_broadcast_rows(rows);
  add_once_rows(rows);
  add_watch_rows(rows);
  return rows;
}

class lifetime : public testing::TestWithParam<row> {};

TEST_P(lifetime, WaiterResumedInlineDestroysEverything) {
  const row& r = GetParam();
  const watchdog guard(r.name, std::chrono::seconds(30));
  r.body();
}

INSTANTIATE_TEST_SUITE_P(test_lifetime, lifetime, testing::ValuesIn(all_rows()),
                         [](const testing::TestParamInfo<row>& info) { return info.param.name; });

TEST(test_lifetime_table, RowNamesAreUnique) {
  std::vector<std::string> names;
  for (const row& r : all_rows()) names.push_back(r.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
}

}  // namespace
