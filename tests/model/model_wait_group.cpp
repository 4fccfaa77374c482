// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::wait_group: the last member's departure against waits (which leave
// first), cancellation, and a new round started while the old one ends, under the explorer's
// schedules.
#include <asyncband/stop_token.hpp>
#include <asyncband/wait_group.hpp>

#include <utility>

#include "kept.hpp"
#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// Two members leave (one lock-free, one last, under the lock) while the group's wait leaves and
// queues: the wait ends once nobody is left, never before, and is never missed (a deadlock).
TEST(ModelWaitGroup, LastDepartureWakesTheWait) {
  EXPECT_TRUE(model::explored(701, [] {
    asyncband::wait_group wg;
    atomic<int> left{0};
    const auto member = [&left](asyncband::wait_group mine) {
      return [&left, m = std::move(mine)]() mutable {
        left.fetch_add(1);
        m.leave();
      };
    };
    thread a(member(wg));
    thread b(member(wg));
    wg.wait_blocking();
    check(left.load() == 2 && wg.members() == 0, "the wait ended with members left");
    a.join();
    b.join();
  }));
}

// A wait cancelled while the last member leaves: it ends ok (nobody left) or cancelled, exactly
// once, and the other wait is still woken. Both waits leave the group when they start.
TEST(ModelWaitGroup, CancelRacesTheLastDeparture) {
  EXPECT_TRUE(model::explored(702, [] {
    asyncband::wait_group wg;
    asyncband::stop_source stop;
    atomic<int> ends{0};
    thread cancellable([&ends, &stop, mine = wg]() mutable {
      auto r = mine.wait_blocking(stop.get_token());
      check(r.ok() || r.status() == asyncband::wait_status::cancelled,
            "a wait ended neither ok nor cancelled");
      if (r.ok()) check(mine.members() == 0, "a wait ended ok with members left");
      ends.fetch_add(1);
    });
    thread member([mine = wg]() mutable { mine.leave(); });
    thread canceller([&] { stop.request_stop(); });
    wg.wait_blocking();
    check(wg.members() == 0, "the wait ended with members left");
    canceller.join();
    cancellable.join();
    member.join();
    check(ends.load() == 1, "a wait ended twice or never");
  }));
}

// A copy made from a former member while the last member leaves joins either the old round (the
// count was still 1) or starts a new one (the count was 0): a wait made after the copy joined
// is of the copy's round, and must not end before the copy leaves.
TEST(ModelWaitGroup, NewRoundIsNotReleasedByTheOldOne) {
  EXPECT_TRUE(model::explored(703, [] {
    asyncband::wait_group wg;
    model::kept<asyncband::wait_group> kept_joiner(wg);  // kept: see kept.hpp
    auto& joiner_handle = *kept_joiner;
    joiner_handle.leave();  // a former member: its copy joins as a new member
    model::kept<asyncband::wait_group> kept_waiter(wg);
    auto& waiter_handle = *kept_waiter;
    waiter_handle.leave();
    atomic<bool> joined{false};
    atomic<bool> copy_left{false};
    thread last([mine = std::move(wg)]() mutable { mine.leave(); });  // the one member left
    thread joiner([&] {
      asyncband::wait_group copy(joiner_handle);
      joined.store(true);
      copy_left.store(true);
      copy.leave();
    });
    thread waiter([&] {
      const bool after_join = joined.load();
      waiter_handle.wait_blocking();
      if (after_join) check(copy_left.load(), "a wait of the new round ended while its member was in");
    });
    last.join();
    joiner.join();
    waiter.join();
  }));
}

}  // namespace
