// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::semaphore: its word's lock-free paths against its wait list, under
// the explorer's schedules.
#include <asyncband/semaphore.hpp>
#include <asyncband/stop_token.hpp>

#include "mailbox.hpp"
#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// Mutual exclusion, and every permit back: two threads take the one permit in turn (spinning,
// parking, or handed it by the release), the third only tries.
TEST(ModelSemaphore, OnePermitExcludes) {
  EXPECT_TRUE(model::explored(1, [] {
    asyncband::semaphore s(1);
    atomic<int> inside{0};
    const auto worker = [&] {
      for (int i = 0; i != 2; ++i) {
        auto permit = s.acquire_blocking(1);
        check(inside.fetch_add(1) == 0, "two holders of the one permit");
        inside.fetch_sub(1);
      }
    };
    thread a(worker);
    thread b(worker);
    if (auto p = s.try_acquire(1)) check(inside.load() == 0, "try_acquire took a held permit");
    a.join();
    b.join();
    check(s.available() == 1, "a permit was lost");
  }));
}

// The smallest hand-off: one thread parks for the permit, another releases it. Few steps, so
// the explorer reaches every window of the park and the wake-up: the node's publication, its
// resume handshake, the parker's flag and its notification.
TEST(ModelSemaphore, ReleaseWakesParkedThread) {
  EXPECT_TRUE(model::explored(5, [] {
    asyncband::semaphore s(0);
    thread waiter([&] { auto p = s.acquire_blocking(1); });
    s.release(1);
    waiter.join();
    check(s.available() == 1, "the permit was lost");
  }));
}

// A waiter cancelled while the one permit is released: it ends with the permit or cancelled,
// exactly once, and the permit is never lost: a grant to a cancelled waiter passes on to the
// other waiter (which otherwise waits for good: a deadlock the explorer reports).
TEST(ModelSemaphore, CancelRacesRelease) {
  EXPECT_TRUE(model::explored(2, [] {
    asyncband::semaphore s(0);
    asyncband::stop_source stop;
    atomic<int> granted{0};
    thread waiter([&] {
      auto r = s.acquire_blocking(1, stop.get_token());
      if (r.ok()) granted.fetch_add(1);
    });
    thread other([&] {
      auto p = s.acquire_blocking(1);
      granted.fetch_add(1);
    });
    thread canceller([&] { stop.request_stop(); });
    s.release(1);  // the one permit: whoever gets it first hands it on, cancelled or done
    canceller.join();
    waiter.join();
    other.join();
    const int g = granted.load();
    check(g == 1 || g == 2, "a permit was granted twice or lost");
    check(s.available() == 1, "a permit was lost");
  }));
}

// A waiter for two permits holds a partial grant of the one released when it is cancelled: the
// one goes on to the waiter for one (which otherwise waits for good). Strict FIFO: a barging
// semaphore makes no partial grants.
TEST(ModelSemaphore, CancelledPartialGrantPassesOn) {
  EXPECT_TRUE(model::explored(4, [] {
    asyncband::semaphore s(asyncband::strict_fifo, 0);
    asyncband::stop_source stop;
    thread two([&] { check(!s.acquire_blocking(2, stop.get_token()).ok(), "two permits out of one"); });
    thread one([&] { auto p = s.acquire_blocking(1); });
    s.release(1);
    stop.request_stop();
    two.join();
    one.join();
    check(s.available() == 1, "the permit was lost");
  }));
}

// Waiters asking for different counts are served in order, and a release of many serves
// several: the counts add up.
TEST(ModelSemaphore, ManyPermitsAddUp) {
  EXPECT_TRUE(model::explored(3, [] {
    asyncband::semaphore s(1);
    thread two([&] { auto p = s.acquire_blocking(2); });
    thread one([&] { auto p = s.acquire_blocking(1); });
    s.release(2);
    two.join();
    one.join();
    check(s.available() == 3, "permits were lost");
  }));
}

// Bounded barging, a retry for part of the permits: a coroutine's retry for one of two permits
// may take it lock-free, end and free its frame while another holder's release is in the
// semaphore's lock, at the pass bound (2 in a model build), where the release asks whether the
// passed waiter is due: it must not read the retry's node (ASan sees a use after free). A
// thread queued behind is handed its permit, and what a retry leaves serves it.
TEST(ModelSemaphore, ARetryForOneOfTwoPermitsEndsWhileAnotherReleaseIsLocked) {
  EXPECT_TRUE(model::explored(6, [] {
    asyncband::semaphore s(2);
    auto first = s.try_acquire(1);
    auto second = s.try_acquire(1);
    const auto acquire = [&s]() -> asyncband::runtime::task<void> { auto p = co_await s.acquire(1); };
    thread retrying([&] {
      model::mailbox box;
      model::run_on(box, acquire());
    });
    thread queued([&] { auto p = s.acquire_blocking(1); });
    thread releasing([&] { second->release(); });
    first->release();
    if (auto p = s.try_acquire(1)) check(p->count() == 1, "a barger took more than it asked for");
    retrying.join();
    queued.join();
    releasing.join();
    check(s.available() == 2, "a permit was lost");
  }));
}

// A deficit is repaid before anybody takes a permit: a holder's release races reduce_permits
// and a barger; whatever the order, the two permits removed stay removed.
TEST(ModelSemaphore, ADeficitIsRepaidBeforeABargerTakes) {
  EXPECT_TRUE(model::explored(7, [] {
    asyncband::semaphore s(2);
    auto held = s.try_acquire(1);
    thread holder([&] { held->release(); });
    thread barger([&] {
      if (auto p = s.try_acquire(1)) p->release();
    });
    s.reduce_permits(2);
    holder.join();
    barger.join();
    check(s.available() == 0, "a permit of the deficit was taken or added");
    s.release(1);
    check(s.available() == 1, "the deficit was repaid twice");
  }));
}

}  // namespace
