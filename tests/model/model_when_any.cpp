// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::when_any: one winner, and a losing branch gives back what it was
// granted, when the branches complete on other threads at the same time. The when_any runs as
// a coroutine driven by block_on on the body's thread; the branches' completions resume it
// inline, on whichever model thread completes them.
#include <asyncband/block_on.hpp>
#include <asyncband/mpsc/unbounded.hpp>
#include <asyncband/semaphore.hpp>
#include <asyncband/when_any.hpp>

#include "model.hpp"

namespace {

using model::ex::check;
using model::ex::thread;

// Two acquisitions released at once on two threads: exactly one wins, and the loser's grant
// goes back to its semaphore (a lost permit shows in the count).
TEST(ModelWhenAny, LosingAcquisitionGivesItsPermitBack) {
  EXPECT_TRUE(model::explored(950, [] {
    asyncband::semaphore a(0);
    asyncband::semaphore b(0);
    thread ra([&] { a.release(1); });
    thread rb([&] { b.release(1); });
    {
      auto r = asyncband::block_on(asyncband::when_any(a.acquire(1), b.acquire(1)));
      check(r.index() == 0 || r.index() == 1, "no winner");
      check(r.index() == 0 ? a.available() == 0 : b.available() == 0, "the winner's permit is not held");
    }
    ra.join();
    rb.join();
    check(a.available() == 1 && b.available() == 1, "a permit was lost");
  }));
}

// Two receives, two values sent at once: one is received, the other stays first in its channel.
TEST(ModelWhenAny, LosingReceiveLeavesItsValue) {
  EXPECT_TRUE(model::explored(951, [] {
    auto [tx1, rx1] = asyncband::mpsc::unbounded<int>();
    auto [tx2, rx2] = asyncband::mpsc::unbounded<int>();
    thread s1([t = &tx1] { check(t->send(1).ok(), "a send failed"); });
    thread s2([t = &tx2] { check(t->send(2).ok(), "a send failed"); });
    auto r = asyncband::block_on(asyncband::when_any(rx1.recv(), rx2.recv()));
    s1.join();
    s2.join();
    const int won = r.index() == 0 ? *r.get<0>() : *r.get<1>();
    check(won == (r.index() == 0 ? 1 : 2), "the winner's value is wrong");
    auto other = r.index() == 0 ? rx2.try_recv() : rx1.try_recv();
    check(other.ok() && *other == 3 - won, "the loser's value was lost");
  }));
}

}  // namespace
