// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::rwlock: construction, shared readers up to max_readers, exclusive writers,
// write preference (one FIFO queue), readers let in together, downgrade, mapped guards,
// cancellation (a queued writer's partial grant passes on to the readers behind it), the waiter
// core's races for read and write waits, destruction of suspended waits, blocking twins, "last one
// out", and a bounded multi-threaded stress test of the reader/writer invariant.
#include "asyncband/rwlock.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/stop_token.hpp"
#include "support/awaited_twice.hpp"
#include "support/destroyed_with_waiters.hpp"
#include "support/last_one_out.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"
#include "support/thread_hook.hpp"
#include "support/wait_contract.hpp"

namespace {

using namespace asyncband_test;
using asyncband::block_on;
using asyncband::rwlock;
using asyncband::rwlock_read_guard;
using asyncband::rwlock_write_guard;
using asyncband::runtime::thread_pool;

// ---------------------------------------------------------------------------------------------
// Helpers

/// The read (Write = false) or the write waits of an rwlock, as the shared wait scenarios
/// (support/wait_contract.hpp) see a primitive: wait() is read() or write(). The waiter
/// coroutines keep the guard they receive until they end, so each releases as soon as it has run.
template <bool Write>
struct lock_view {
  rwlock<int>& rw;

  [[nodiscard]] auto wait() noexcept {
    if constexpr (Write) {
      return rw.write();
    } else {
      return rw.read();
    }
  }
  [[nodiscard]] auto wait(asyncband::stop_token stop) noexcept {
    if constexpr (Write) {
      return rw.write(std::move(stop));
    } else {
      return rw.read(std::move(stop));
    }
  }
  auto wait_blocking() {
    if constexpr (Write) {
      return rw.write_blocking();
    } else {
      return rw.read_blocking();
    }
  }
  auto wait_blocking(asyncband::stop_token stop) {
    if constexpr (Write) {
      return rw.write_blocking(std::move(stop));
    } else {
      return rw.read_blocking(std::move(stop));
    }
  }
  template <class Rep, class Period>
  auto wait_timeout(std::chrono::duration<Rep, Period> timeout) {
    if constexpr (Write) {
      return rw.write_timeout(timeout);
    } else {
      return rw.read_timeout(timeout);
    }
  }
};
using readers_of = lock_view<false>;
using writers_of = lock_view<true>;

/// An rwlock of 4 readers whose write lock the test holds from the start (`held`), so that every
/// wait queues; `release_held` is the scenarios' wake.
struct rwlock_holder {
  rwlock<int> l{0, 4};
  std::optional<rwlock_write_guard<int>> held = l.try_write();
};
template <bool Write>
struct held_rwlock : rwlock_holder, lock_view<Write> {
  held_rwlock() : lock_view<Write>{l} {}
};

const auto release_held = [](rwlock_holder& h) { h.held.reset(); };

/// Nothing is left held or queued: a writer gets the lock at once.
template <class T>
void expect_free(rwlock<T>& l) {
  EXPECT_TRUE(l.try_write().has_value());
  EXPECT_TRUE(l.try_read().has_value());
}

/// What a reader or writer saw once it had the lock: the value, and whether its guard owned it.
/// With `write` set, a writer stores that value.
struct rw_probe : probe {
  int seen = -1;
  bool owned = false;
  std::optional<int> write;

  template <class View>
  void after_wait(View& /*unused*/) noexcept {}
  template <class View, class Guard>
  void after_wait(View& /*unused*/, const Guard& g) noexcept {
    seen = *g;
    owned = g.owns_lock();
    if constexpr (requires { *g = 0; }) {
      if (write) *g = *write;
    }
  }
};

/// `n` plain waiters on `view`, spawned on `s` in order.
template <class View, class Probes>
void spawn_plain(test_scheduler& s, View& view, Probes& probes) {
  for (auto& p : probes) s.spawn(plain_waiter(view, p));
}

template <class Probes>
void expect_all_resumed_once_ok(const Probes& probes) {
  for (const auto& p : probes) {
    EXPECT_EQ(p.resumed, 1) << "probe " << p.id;
    EXPECT_EQ(p.status, wait_status::ok) << "probe " << p.id;
    EXPECT_TRUE(p.owned) << "probe " << p.id;
  }
}

// ---------------------------------------------------------------------------------------------
// Construction, readers and writers without waiting

TEST(Rwlock, ConstructionChecksMaxReaders) {
  EXPECT_THROW((void)rwlock<int>(0, 0), std::invalid_argument);
  EXPECT_THROW((void)rwlock<int>(0, asyncband::semaphore::max() + 1), std::invalid_argument);
  const rwlock<int> largest(0, asyncband::semaphore::max());
  EXPECT_EQ(largest.max_readers(), asyncband::semaphore::max());
  const rwlock<int> one(0, 1);
  EXPECT_EQ(one.max_readers(), 1U);
  rwlock<std::string> defaulted;
  EXPECT_EQ(defaulted.max_readers(), rwlock<std::string>::default_max_readers);
  EXPECT_TRUE((*defaulted.try_read())->empty());
}

TEST(Rwlock, InPlaceConstructionForValuesThatCannotMove) {
  rwlock<std::atomic<int>> l(std::in_place, 2, 5);
  EXPECT_EQ(l.max_readers(), 2U);
  EXPECT_EQ((*l.try_read())->load(), 5);
  EXPECT_THROW((void)rwlock<std::atomic<int>>(std::in_place, 0, 1), std::invalid_argument);
  rwlock<std::atomic<int>> defaulted;
  EXPECT_EQ(defaulted.max_readers(), rwlock<std::atomic<int>>::default_max_readers);
  EXPECT_EQ((*defaulted.try_write())->load(), 0);
}

TEST(Rwlock, ManyReadersAtOnceUpToMaxReaders) {
  rwlock<int> l(5, 3);
  std::vector<rwlock_read_guard<int>> readers;
  for (int i = 0; i < 3; ++i) {
    auto r = l.try_read();
    ASSERT_TRUE(r.has_value()) << "reader " << i;
    EXPECT_EQ(**r, 5);
    readers.push_back(std::move(*r));
  }
  EXPECT_FALSE(l.try_read().has_value());  // the 4th is over max_readers
  EXPECT_FALSE(l.try_write().has_value());
  readers.pop_back();
  EXPECT_TRUE(l.try_read().has_value());  // a share is free again
  EXPECT_FALSE(l.try_write().has_value());
  readers.clear();
  EXPECT_TRUE(l.try_write().has_value());

  rwlock<int> many(0);  // the default maximum is large
  std::vector<rwlock_read_guard<int>> lots;
  for (int i = 0; i < 1000; ++i) lots.push_back(*many.try_read());
  EXPECT_FALSE(many.try_write().has_value());
}

TEST(Rwlock, WriterIsExclusive) {
  rwlock<int> l(1, 4);
  {
    auto w = l.try_write();
    ASSERT_TRUE(w.has_value());
    EXPECT_EQ(**w, 1);
    **w = 2;
    EXPECT_FALSE(l.try_read().has_value());
    EXPECT_FALSE(l.try_write().has_value());
  }
  auto r = l.try_read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(**r, 2);  // the writer's store
}

TEST(Rwlock, GuardsUnlockAndMove) {
  rwlock<int> l(3, 2);
  auto r = *l.try_read();
  rwlock_read_guard<int> r2(std::move(r));
  EXPECT_FALSE(r.owns_lock());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_TRUE(r2.owns_lock());
  EXPECT_EQ(*r2, 3);
  auto other = *l.try_read();
  r2 = std::move(other);  // releases r2's own share first
  EXPECT_TRUE(l.try_read().has_value());
  r2.unlock();
  EXPECT_FALSE(r2.owns_lock());
  r2.unlock();  // nothing left to release

  auto w = *l.try_write();
  rwlock_write_guard<int> w2(std::move(w));
  EXPECT_FALSE(w.owns_lock());  // NOLINT(bugprone-use-after-move)
  *w2 = 4;
  EXPECT_FALSE(l.try_read().has_value());
  w2 = std::move(w);  // an empty guard moved in: the write lock is released
  EXPECT_FALSE(w2.owns_lock());
  auto check = l.try_read();
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ(**check, 4);
  check.reset();
  auto w3 = *l.try_write();
  w3.unlock();
  expect_free(l);
}

// ---------------------------------------------------------------------------------------------
// map

struct record {
  int id = 0;
  std::string name;
};

TEST(RwlockMap, MappedReadGuardsShareAndNarrow) {
  rwlock<record> l(record{1, "ann"}, 2);
  auto name = (*l.try_read()).map([](const record& r) -> const std::string& { return r.name; });
  EXPECT_TRUE(name.owns_lock());
  EXPECT_EQ(*name, "ann");
  EXPECT_EQ(name->size(), 3U);
  auto first = std::move(name).map([](const std::string& s) -> const char& { return s[0]; });
  EXPECT_FALSE(name.owns_lock());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(*first, 'a');
  EXPECT_TRUE(l.try_read().has_value());  // one share in use, one free
  EXPECT_FALSE(l.try_write().has_value());
  first.unlock();
  expect_free(l);
}

TEST(RwlockMap, MappedWriteGuardsAreExclusiveAndDowngrade) {
  rwlock<record> l(record{1, "ann"}, 3);
  auto name = (*l.try_write()).map([](record& r) -> std::string& { return r.name; });
  EXPECT_TRUE(name.owns_lock());
  EXPECT_FALSE(l.try_read().has_value());
  *name = "bob";
  auto initial = std::move(name).map([](std::string& s) -> char& { return s[0]; });
  *initial = 'r';
  EXPECT_FALSE(l.try_read().has_value());

  rwlock_read_guard<char> shared = std::move(initial).downgrade();  // a mapped read guard
  EXPECT_FALSE(initial.owns_lock());                                // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(shared.owns_lock());
  EXPECT_EQ(*shared, 'r');
  EXPECT_FALSE(l.try_write().has_value());  // the kept share
  auto r1 = l.try_read();
  auto r2 = l.try_read();
  EXPECT_TRUE(r1.has_value());
  EXPECT_TRUE(r2.has_value());  // 3 readers: the other shares were released
  EXPECT_EQ((*r1)->name, "rob");
  EXPECT_FALSE(l.try_read().has_value());
  r1.reset();
  r2.reset();
  shared.unlock();
  auto all = l.try_write();
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ((*all)->id, 1);
}

TEST(RwlockMap, AMappingFunctionThatThrowsKeepsTheLock) {
  rwlock<record> l(record{2, "b"}, 2);
  const auto boom = [](const record& /*unused*/) -> const int& { throw std::runtime_error("boom"); };
  auto r = *l.try_read();
  EXPECT_THROW((void)std::move(r).map(boom), std::runtime_error);
  EXPECT_TRUE(r.owns_lock());  // NOLINT(bugprone-use-after-move): map threw before taking anything
  EXPECT_EQ(r->id, 2);
  EXPECT_FALSE(l.try_write().has_value());
  r.unlock();

  auto w = *l.try_write();
  const auto boom_mut = [](record& /*unused*/) -> int& { throw std::runtime_error("boom"); };
  EXPECT_THROW((void)std::move(w).map(boom_mut), std::runtime_error);
  EXPECT_TRUE(w.owns_lock());  // NOLINT(bugprone-use-after-move)
  EXPECT_FALSE(l.try_read().has_value());
  w->name = "c";
  w.unlock();
  auto check = l.try_read();
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ((*check)->name, "c");
}

TEST(RwlockTryMap, APartThatIsThereMovesTheShareOrTheLock) {
  rwlock<record> l(record{1, "ann"}, 2);
  auto r = *l.try_read();
  auto name = r.try_map([](const record& rec) { return rec.name.empty() ? nullptr : &rec.name; });
  ASSERT_TRUE(name.has_value());
  EXPECT_FALSE(r.owns_lock());
  EXPECT_TRUE(name->owns_lock());
  EXPECT_EQ(**name, "ann");
  EXPECT_TRUE(l.try_read().has_value());  // one share in use, one free
  EXPECT_FALSE(l.try_write().has_value());
  name->unlock();

  auto w = *l.try_write();
  auto id = w.try_map([](record& rec) { return rec.id > 0 ? &rec.id : nullptr; });
  ASSERT_TRUE(id.has_value());
  EXPECT_FALSE(w.owns_lock());
  **id = 5;
  EXPECT_FALSE(l.try_read().has_value());
  rwlock_read_guard<int> shared = std::move(*id).downgrade();  // a try_mapped write guard downgrades too
  EXPECT_EQ(*shared, 5);
  EXPECT_TRUE(l.try_read().has_value());
  shared.unlock();
  expect_free(l);
}

TEST(RwlockTryMap, NoPartOrAThrowingFunctionKeepsTheShareOrTheLock) {
  rwlock<record> l(record{0, ""}, 2);
  auto r = *l.try_read();
  EXPECT_FALSE(
      r.try_map([](const record& rec) { return rec.name.empty() ? nullptr : &rec.name; }).has_value());
  EXPECT_TRUE(r.owns_lock());
  EXPECT_THROW(
      (void)r.try_map([](const record& /*unused*/) -> const int* { throw std::runtime_error("boom"); }),
      std::runtime_error);
  EXPECT_TRUE(r.owns_lock());
  EXPECT_FALSE(l.try_write().has_value());
  r.unlock();

  auto w = *l.try_write();
  EXPECT_FALSE(w.try_map([](record& rec) { return rec.id > 0 ? &rec.id : nullptr; }).has_value());
  EXPECT_TRUE(w.owns_lock());
  EXPECT_THROW((void)w.try_map([](record& /*unused*/) -> int* { throw std::runtime_error("boom"); }),
               std::runtime_error);
  EXPECT_TRUE(w.owns_lock());
  EXPECT_FALSE(l.try_read().has_value());
  w.unlock();
  expect_free(l);
}

TEST(RwlockExclusiveAccess, GetMutAndIntoInnerReachTheValueWithoutLocking) {
  rwlock<record> l(record{1, "ann"}, 4);
  EXPECT_FALSE(l.is_locked());
  l.get_mut().name = "bob";
  {
    auto r = *l.try_read();
    EXPECT_TRUE(l.is_locked());  // a reader holds a share
    EXPECT_EQ(r->name, "bob");
  }
  EXPECT_FALSE(l.is_locked());
  l.get_mut().id = 9;
  const record out = std::move(l).into_inner();
  EXPECT_EQ(out.name, "bob");
  EXPECT_EQ(out.id, 9);
  EXPECT_TRUE(l.try_write().has_value());  // NOLINT(bugprone-use-after-move): it keeps a moved-from value
}

TEST(RwlockExclusiveAccessDeathTest, IntoInnerWhileReadAsserts) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  EXPECT_DEATH(
      {
        rwlock<int> l(0, 2);
        const auto r = l.try_read();
        (void)std::move(l).into_inner();
      },
      "into_inner while locked");
}

// ---------------------------------------------------------------------------------------------
// Owned guards: read_owned / write_owned keep the rwlock alive.

using shared_rwlock = std::shared_ptr<rwlock<record>>;

/// `lock(l)` takes an owned guard; the guard must keep the rwlock alive once every other owner
/// is gone, give access, and release before it drops its reference.
template <class Lock>
void owned_guard_keeps_the_rwlock_alive(Lock lock) {
  auto l = std::make_shared<rwlock<record>>(record{7, "ann"}, 2);
  const std::weak_ptr<rwlock<record>> weak = l;
  auto g = lock(l);
  EXPECT_TRUE(g.owns_lock());
  EXPECT_EQ(g->name, "ann");
  l.reset();
  {
    const auto alive = weak.lock();
    ASSERT_NE(alive, nullptr);
    EXPECT_TRUE(alive->is_locked());
  }
  { auto kept = std::move(g); }
  EXPECT_TRUE(weak.expired());
}

TEST(RwlockOwned, EveryFormKeepsTheRwlockAlive) {
  asyncband::stop_source never;
  const auto token = never.get_token();
  owned_guard_keeps_the_rwlock_alive(
      [](shared_rwlock l) { return *asyncband::try_read_owned(std::move(l)); });
  owned_guard_keeps_the_rwlock_alive(
      [](shared_rwlock l) { return asyncband::read_owned_blocking(std::move(l)); });
  owned_guard_keeps_the_rwlock_alive(
      [](shared_rwlock l) { return block_on(asyncband::read_owned(std::move(l))); });
  owned_guard_keeps_the_rwlock_alive(
      [&](shared_rwlock l) { return block_on(asyncband::read_owned(std::move(l), token)).value(); });
  owned_guard_keeps_the_rwlock_alive(
      [&](shared_rwlock l) { return asyncband::read_owned_blocking(std::move(l), token).value(); });
  owned_guard_keeps_the_rwlock_alive(
      [](shared_rwlock l) { return *asyncband::try_write_owned(std::move(l)); });
  owned_guard_keeps_the_rwlock_alive(
      [](shared_rwlock l) { return asyncband::write_owned_blocking(std::move(l)); });
  owned_guard_keeps_the_rwlock_alive(
      [](shared_rwlock l) { return block_on(asyncband::write_owned(std::move(l))); });
  owned_guard_keeps_the_rwlock_alive(
      [&](shared_rwlock l) { return block_on(asyncband::write_owned(std::move(l), token)).value(); });
  owned_guard_keeps_the_rwlock_alive(
      [&](shared_rwlock l) { return asyncband::write_owned_blocking(std::move(l), token).value(); });
}

TEST(RwlockOwned, ReadersShareWritersExcludeAndFailedAttemptsKeepNoReference) {
  auto l = std::make_shared<rwlock<record>>(record{1, "a"}, 2);
  auto r1 = asyncband::try_read_owned(l);
  auto r2 = asyncband::try_read_owned(l);
  ASSERT_TRUE(r1.has_value());
  ASSERT_TRUE(r2.has_value());
  EXPECT_FALSE(asyncband::try_read_owned(l).has_value());  // max_readers
  EXPECT_FALSE(asyncband::try_write_owned(l).has_value());
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(block_on(asyncband::write_owned(l, stopped.get_token())).cancelled());
  EXPECT_TRUE(asyncband::write_owned_blocking(l, stopped.get_token()).cancelled());
  EXPECT_EQ(l.use_count(), 3);  // the two readers only
  r1->unlock();
  EXPECT_EQ(l.use_count(), 3);  // unlock keeps the reference
  r1.reset();
  r2.reset();
  EXPECT_EQ(l.use_count(), 1);
  expect_free(*l);
}

task<void> owned_writer(shared_rwlock l, asyncband::stop_token stop, probe& p, long& owners) {
  ++p.started;
  auto r = co_await asyncband::write_owned(std::move(l), std::move(stop));
  p.finish(r.status());
  if (!r.ok()) co_return;
  (*r)->id = 42;
  owners = std::move(*r).map([](record& rec) -> int& { return rec.id; }).owns_lock() ? 1 : 0;
}

TEST(RwlockOwned, AQueuedOwnedWriteKeepsTheRwlockAliveAndACancelledOneDropsItsReference) {
  test_scheduler s;
  auto l = std::make_shared<rwlock<record>>(record{0, "w"}, 2);
  const std::weak_ptr<rwlock<record>> weak = l;
  auto reader = asyncband::try_read_owned(l);
  asyncband::stop_source stop_second;
  probe first;
  probe second;
  long owners = 0;
  long unused = 0;
  s.spawn(owned_writer(l, asyncband::stop_token{}, first, owners));
  s.spawn(owned_writer(std::move(l), stop_second.get_token(), second, unused));
  s.run();
  EXPECT_EQ(first.resumed + second.resumed, 0);
  EXPECT_EQ(weak.use_count(), 3);  // the reader and two queued writes
  stop_second.request_stop();
  s.run();
  EXPECT_EQ(second.status, wait_status::cancelled);
  EXPECT_EQ(weak.use_count(), 2);  // the cancelled one let go
  reader.reset();                  // hands the lock to the first write, then lets go
  s.run();
  EXPECT_EQ(first.status, wait_status::ok);
  EXPECT_EQ(owners, 1);
  EXPECT_TRUE(weak.expired());  // its guard (mapped, then gone) was the last owner
}

TEST(RwlockOwned, MapTryMapDowngradeAndMoveAssignmentReleaseBeforeLettingGo) {
  auto a = std::make_shared<rwlock<record>>(record{1, "ann"}, 3);
  auto b = std::make_shared<rwlock<record>>(record{2, "bob"}, 3);
  const std::weak_ptr<rwlock<record>> weak_a = a;
  auto w = *asyncband::try_write_owned(a);
  auto name = std::move(w).map([](record& r) -> std::string& { return r.name; });
  EXPECT_FALSE(name.try_map([](std::string& n) { return n.empty() ? &n : nullptr; }).has_value());
  EXPECT_TRUE(name.owns_lock());
  auto initial = name.try_map([](std::string& n) { return n.empty() ? nullptr : &n[0]; });
  ASSERT_TRUE(initial.has_value());
  EXPECT_FALSE(name.owns_lock());
  **initial = 'A';
  auto shared = std::move(*initial).downgrade();  // one share kept, no writer in between
  EXPECT_EQ(*shared, 'A');
  EXPECT_FALSE(asyncband::try_write_owned(a).has_value());
  EXPECT_TRUE(asyncband::try_read_owned(a).has_value());
  a.reset();
  EXPECT_FALSE(weak_a.expired());

  { auto gone = std::move(shared); }  // the downgraded guard held the last reference
  EXPECT_TRUE(weak_a.expired());

  auto c = std::make_shared<rwlock<record>>(record{3, "cy"}, 3);
  const std::weak_ptr<rwlock<record>> weak_c = c;
  const auto id_of = [](record& r) -> int& { return r.id; };
  auto held = (*asyncband::try_write_owned(b)).map(id_of);
  auto other = (*asyncband::try_write_owned(std::move(c))).map(id_of);
  held = std::move(other);  // releases `b` first, then lets go of it
  EXPECT_FALSE(b->is_locked());
  EXPECT_EQ(b.use_count(), 1);
  EXPECT_EQ(*held, 3);
  {
    const auto alive = weak_c.lock();
    ASSERT_NE(alive, nullptr);
    EXPECT_TRUE(alive->is_locked());
  }
  { auto gone = std::move(held); }
  EXPECT_TRUE(weak_c.expired());
}

// ---------------------------------------------------------------------------------------------
// Waiting readers and writers on the test scheduler

TEST(Rwlock, UncontendedReadAndWriteCompleteWithoutSuspending) {
  test_scheduler s;
  rwlock<int> l(7, 2);
  readers_of readers{l};
  writers_of writers{l};
  asyncband::stop_source never;
  std::array<rw_probe, 4> p;
  p[1].write = 8;
  s.spawn(plain_waiter(readers, p[0]));
  s.spawn(stoppable_waiter(writers, never.get_token(), p[1]));
  s.spawn(stoppable_waiter(readers, never.get_token(), p[2]));
  s.spawn(plain_waiter(writers, p[3]));
  EXPECT_EQ(s.run(), 4U);  // one step each: none suspended
  expect_all_resumed_once_ok(p);
  EXPECT_EQ(p[0].seen, 7);
  EXPECT_EQ(p[2].seen, 8);
  expect_free(l);
}

TEST(Rwlock, TheReaderAboveMaxReadersWaitsForAShare) {
  test_scheduler s;
  rwlock<int> l(0, 2);
  readers_of readers{l};
  auto r1 = l.try_read();
  auto r2 = l.try_read();
  rw_probe third;
  s.spawn(plain_waiter(readers, third));
  s.run();
  EXPECT_EQ(third.started, 1);
  EXPECT_EQ(third.resumed, 0);
  r1.reset();
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(third.resumed, 1);
  EXPECT_TRUE(third.owned);
  r2.reset();
  expect_free(l);
}

TEST(Rwlock, AWriterWaitsForEveryReaderAndReadersQueuedBehindItGetInTogetherAfterIt) {
  test_scheduler s;
  rwlock<int> l(0, 4);
  readers_of readers{l};
  writers_of writers{l};
  auto r1 = l.try_read();
  auto r2 = l.try_read();
  rw_probe w;
  w.write = 1;
  s.spawn(plain_waiter(writers, w));
  s.run();
  EXPECT_EQ(w.resumed, 0);

  // Write preference: with a writer queued, new readers neither take a free share nor pass it.
  EXPECT_FALSE(l.try_read().has_value());
  std::array<rw_probe, 3> later;
  spawn_plain(s, readers, later);
  s.run();
  for (const auto& p : later) EXPECT_EQ(p.resumed, 0);

  r1.reset();
  EXPECT_EQ(s.ready_count(), 0U);  // the writer still waits for r2's share
  r2.reset();
  EXPECT_EQ(s.ready_count(), 1U);  // only the writer
  s.step();                        // the writer runs and unlocks: every queued reader at once
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(s.ready_count(), later.size());
  s.run();
  expect_all_resumed_once_ok(later);
  for (const auto& p : later) EXPECT_EQ(p.seen, 1);
  expect_free(l);
}

TEST(Rwlock, QueuedReadersUpToTheNextWriterGetInTogether) {
  test_scheduler s;
  held_rwlock<false> h;
  writers_of writers{h.l};
  std::array<rw_probe, 2> first;
  rw_probe w;
  std::array<rw_probe, 2> second;
  spawn_plain(s, h, first);
  s.spawn(plain_waiter(writers, w));
  spawn_plain(s, h, second);
  s.run();

  h.held.reset();
  EXPECT_EQ(s.ready_count(), 2U);  // the first two readers; the writer waits for their shares
  s.step();
  EXPECT_EQ(s.ready_count(), 1U);
  s.step();  // both readers done: the writer's turn
  EXPECT_EQ(s.ready_count(), 1U);
  EXPECT_EQ(w.resumed, 0);
  s.step();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(s.ready_count(), 2U);  // the two readers behind it
  s.run();
  expect_all_resumed_once_ok(first);
  expect_all_resumed_once_ok(second);
  expect_free(h.l);
}

// A mix of readers and writers, each holding the lock across a few reschedulings, on a seeded
// random scheduler. Invariants: writers alone, readers at most max_readers; and one FIFO
// queue: a writer enters after everybody that arrived before it and before everybody after it;
// a reader enters after every writer that arrived before it.
struct rw_turns {
  int max_readers;
  std::vector<bool> writer;  // by id
  std::vector<int> arrival;  // by id
  std::vector<int> entry;    // by id
  int arrived = 0;
  int entered = 0;
  int readers = 0;
  int writers = 0;
  int writes = 0;
  int violations = 0;

  rw_turns(int max, std::vector<bool> kinds)
      : max_readers(max), writer(std::move(kinds)), arrival(writer.size(), -1), entry(writer.size(), -1) {}

  void enter(int id) {
    entry[static_cast<std::size_t>(id)] = entered++;
    if (writer[static_cast<std::size_t>(id)]) {
      if (writers++ != 0 || readers != 0) ++violations;
    } else {
      if (writers != 0 || ++readers > max_readers) ++violations;
    }
  }
  void leave(int id) { --(writer[static_cast<std::size_t>(id)] ? writers : readers); }

  void expect_fifo_for_writers() const {
    const std::size_t n = writer.size();
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_GE(entry[i], 0) << "turn " << i << " never entered";
      for (std::size_t j = 0; j < n; ++j) {
        if (arrival[i] < arrival[j] && (writer[i] || writer[j])) {
          EXPECT_LT(entry[i], entry[j]) << "turn " << j << " entered before turn " << i;
        }
      }
    }
  }
};

task<void> pause(test_scheduler& s, int times) {
  for (int k = 0; k < times; ++k) co_await s.schedule();
}

task<void> rw_turn(test_scheduler& s, rwlock<int>& l, rw_turns& t, int id, int holds) {
  t.arrival[static_cast<std::size_t>(id)] = t.arrived++;
  if (t.writer[static_cast<std::size_t>(id)]) {
    auto g = co_await l.write();
    t.enter(id);
    EXPECT_EQ(*g, t.writes);
    *g = ++t.writes;
    co_await pause(s, holds);
    t.leave(id);
  } else {
    auto g = co_await l.read();
    t.enter(id);
    EXPECT_EQ(*g, t.writes);  // the last writer's store
    co_await pause(s, holds);
    t.leave(id);
  }
}

TEST(Rwlock, SeededMixOfReadersAndWritersKeepsTheInvariantsAndTheQueueOrder) {
  const std::vector<bool> kinds = {false, false, true,  false, false, false,
                                   true,  true,  false, false, false, true};
  for (std::uint64_t seed = 0; seed <= 16; ++seed) {
    SCOPED_TRACE(seed);
    test_scheduler s(seed == 0 ? std::nullopt : std::optional<std::uint64_t>(seed));
    rwlock<int> l(0, 3);
    rw_turns t(3, kinds);
    for (int id = 0; id < static_cast<int>(kinds.size()); ++id) s.spawn(rw_turn(s, l, t, id, 1 + id % 3));
    s.run();
    EXPECT_EQ(t.violations, 0);
    EXPECT_EQ(t.entered, static_cast<int>(kinds.size()));
    t.expect_fifo_for_writers();
    auto w = l.try_write();
    ASSERT_TRUE(w.has_value());
    EXPECT_EQ(**w, 4);
  }
}

// ---------------------------------------------------------------------------------------------
// Downgrade

TEST(RwlockDowngrade, KeepsAReadShareAndLetsTheQueuedReadersIn) {
  test_scheduler s;
  rwlock<int> l(0, 4);
  readers_of readers{l};
  writers_of writers{l};
  auto w = *l.try_write();
  std::array<rw_probe, 2> queued;
  rw_probe next_writer;
  rw_probe behind;
  spawn_plain(s, readers, queued);
  s.spawn(plain_waiter(writers, next_writer));
  s.spawn(plain_waiter(readers, behind));
  s.run();

  *w = 5;
  rwlock_read_guard<int> r = std::move(w).downgrade();
  EXPECT_FALSE(w.owns_lock());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(r.owns_lock());
  EXPECT_EQ(*r, 5);
  EXPECT_EQ(s.ready_count(), 2U);  // the readers queued behind it, up to the next writer
  s.run();
  expect_all_resumed_once_ok(queued);
  for (const auto& p : queued) EXPECT_EQ(p.seen, 5);
  EXPECT_EQ(next_writer.resumed, 0);  // waits for the kept share
  EXPECT_EQ(behind.resumed, 0);       // queued behind that writer
  EXPECT_FALSE(l.try_read().has_value());

  r.unlock();
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_EQ(next_writer.resumed, 1);
  EXPECT_EQ(behind.resumed, 1);
  expect_free(l);
}

TEST(RwlockDowngrade, NoWriterGetsInBetween) {
  test_scheduler s;
  rwlock<int> l(0, 2);
  writers_of writers{l};
  auto w = *l.try_write();
  rw_probe other;
  other.write = 9;
  s.spawn(plain_waiter(writers, other));
  s.run();
  *w = 1;
  auto r = std::move(w).downgrade();
  EXPECT_EQ(s.ready_count(), 0U);  // the queued writer got the released share only
  EXPECT_EQ(*r, 1);                // nobody wrote in between
  EXPECT_FALSE(l.try_read().has_value());
  r.unlock();
  s.run();
  EXPECT_EQ(other.resumed, 1);
  EXPECT_EQ(other.seen, 1);
  auto check = l.try_read();
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ(**check, 9);
}

TEST(RwlockDowngrade, WithASingleReaderTheWriteLockBecomesTheOnlyShare) {
  rwlock<int> l(3, 1);
  auto r = (*l.try_write()).downgrade();
  EXPECT_EQ(*r, 3);
  EXPECT_FALSE(l.try_read().has_value());
  EXPECT_FALSE(l.try_write().has_value());
  r.unlock();
  expect_free(l);
}

// ---------------------------------------------------------------------------------------------
// Cancellation: a queued writer's partial grant passes on

/// Two readers hold 2 of 3 shares; a writer queues (granted the free share), two readers queue
/// behind it, then one holder leaves (its share goes to the writer as well). `cancel` ends the
/// writer's wait; the two shares it had been given must let both queued readers in at once.
/// `start(l, s, w)` queues the writer (probe `w`), `cancel()` ends its wait; `writer_resumes`: 1
/// if the writer is a coroutine on `s` that resumes (cancelled), 0 otherwise.
template <class Start, class Cancel>
void partial_grant_goes_to_the_readers_behind(Start start, Cancel cancel, int writer_resumes) {
  test_scheduler s;
  rwlock<int> l(0, 3);
  readers_of readers{l};
  auto r1 = l.try_read();
  auto r2 = l.try_read();
  rw_probe w;
  start(l, s, w);
  std::array<rw_probe, 2> behind;
  spawn_plain(s, readers, behind);
  s.run();
  EXPECT_FALSE(l.try_read().has_value());  // a writer waits
  r1.reset();
  EXPECT_EQ(s.ready_count(), 0U);  // the writer holds 2 of 3 shares
  cancel();
  EXPECT_EQ(s.ready_count(), 2U + static_cast<std::size_t>(writer_resumes)) << "both readers must be let in";
  s.run();
  expect_all_resumed_once_ok(behind);
  EXPECT_EQ(w.resumed, writer_resumes);
  if (writer_resumes != 0) {
    EXPECT_EQ(w.status, wait_status::cancelled);
  }
  EXPECT_FALSE(w.owned);
  EXPECT_FALSE(l.try_write().has_value());  // r2 still holds
  r2.reset();
  expect_free(l);
}

TEST(RwlockCancel, AStoppedWriterPassesItsPartialGrantToTheReadersBehindIt) {
  asyncband::stop_source stop;
  std::optional<writers_of> writers;
  partial_grant_goes_to_the_readers_behind(
      [&stop, &writers](rwlock<int>& l, test_scheduler& s, rw_probe& w) {
        writers.emplace(writers_of{l});
        s.spawn(stoppable_waiter(*writers, stop.get_token(), w));
      },
      [&stop] { stop.request_stop(); }, 1);
}

TEST(RwlockCancel, ADestroyedWriterPassesItsPartialGrantToTheReadersBehindIt) {
  std::optional<writers_of> writers;
  task<void> doomed;
  partial_grant_goes_to_the_readers_behind(
      [&writers, &doomed](rwlock<int>& l, test_scheduler& s, rw_probe& w) {
        writers.emplace(writers_of{l});
        doomed = plain_waiter(*writers, w);
        start_on(s, doomed);
      },
      [&doomed] { doomed = {}; }, 0);
}

/// partial_grant_goes_to_the_readers_behind with a writer blocked on a plain thread in
/// `wait(l)`. The thread stops right after it has queued, before it parks, until the readers have
/// queued behind it; then `end()` runs and the thread goes on; its wait must report `expected`.
template <class Wait, class End>
void blocked_writer_passes_its_partial_grant(Wait wait, End end, wait_status expected) {
  std::latch queued(1);
  std::latch go(1);
  std::optional<std::thread> thread;
  std::optional<wait_status> status;
  partial_grant_goes_to_the_readers_behind(
      [&](rwlock<int>& l, test_scheduler& /*unused*/, rw_probe& /*unused*/) {
        thread.emplace([&l, &queued, &go, &status, &wait] {
          const thread_hook hook(test_point::before_arm, [&queued, &go] {
            queued.count_down();
            go.wait();
          });
          status = wait(l).status();
        });
        queued.wait();
      },
      [&] {
        end();
        go.count_down();
        thread->join();  // its wait ended (and handed the shares on) before it returned
      },
      0);
  EXPECT_EQ(status, expected);
}

TEST(RwlockCancel, ATimedOutWriterPassesItsPartialGrantToTheReadersBehindIt) {
  // write_timeout(0ms): once the thread goes on, its deadline has passed.
  blocked_writer_passes_its_partial_grant([](rwlock<int>& l) { return l.write_timeout(0ms); }, [] {},
                                          wait_status::timeout);
}

TEST(RwlockCancel, ABlockedWriterStoppedFromAnotherThreadPassesItsPartialGrantToTheReadersBehindIt) {
  asyncband::stop_source stop;
  blocked_writer_passes_its_partial_grant(
      [&stop](rwlock<int>& l) { return l.write_blocking(stop.get_token()); },
      [&stop] { stop.request_stop(); }, wait_status::cancelled);
}

TEST(RwlockCancel, AWriterHandedTheLockThatObservesItsStopBeforeResumingPassesItToTheReaders) {
  test_scheduler s;
  rwlock<int> l(0, 2);
  readers_of readers{l};
  writers_of writers{l};
  auto r1 = l.try_read();
  asyncband::stop_source stop_w;
  rw_probe w;
  std::array<rw_probe, 2> behind;
  s.spawn(stoppable_waiter(writers, stop_w.get_token(), w));
  spawn_plain(s, readers, behind);
  s.run();
  r1.reset();  // completes the writer's grant: its resumption is queued
  EXPECT_EQ(s.ready_count(), 1U);
  stop_w.request_stop();  // before it resumes
  EXPECT_FALSE(l.try_read().has_value());
  s.step();  // the writer: cancelled, gives both shares back, to the readers
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(w.status, wait_status::cancelled);
  EXPECT_EQ(s.ready_count(), 2U);
  s.run();
  expect_all_resumed_once_ok(behind);
  expect_free(l);
}

TEST(RwlockCancel, AStoppedReaderBehindAWriterLeavesNoTrace) {
  test_scheduler s;
  rwlock<int> l(0, 2);
  readers_of readers{l};
  writers_of writers{l};
  auto r1 = l.try_read();
  rw_probe w;
  rw_probe cancelled;
  rw_probe other;
  asyncband::stop_source stop;
  s.spawn(plain_waiter(writers, w));
  s.spawn(stoppable_waiter(readers, stop.get_token(), cancelled));
  s.spawn(plain_waiter(readers, other));
  s.run();
  stop.request_stop();
  s.run();
  EXPECT_EQ(cancelled.resumed, 1);
  EXPECT_EQ(cancelled.status, wait_status::cancelled);
  r1.reset();
  s.run();
  EXPECT_EQ(w.resumed, 1);
  EXPECT_EQ(other.resumed, 1);
  EXPECT_EQ(cancelled.resumed, 1);
  expect_free(l);
}

TEST(RwlockDestroy, AReaderResumedInlineMayDestroyAnotherReaderOfTheSameHandOff) {
  // The writer's unlock hands a share to A and B in one batch and resumes A inline (A has no
  // scheduler); A destroys B, whose node is still in that batch. B's share must come back.
  rwlock<int> l(0, 2);
  auto w = l.try_write();
  rw_probe b_probe;
  readers_of readers{l};
  auto b = plain_waiter(readers, b_probe);
  bool a_done = false;
  auto a = [](rwlock<int>& lock, task<void>& victim, bool& done) -> task<void> {
    auto g = co_await lock.read();
    victim = {};  // destroys B, suspended in the same hand-off
    EXPECT_TRUE(g.owns_lock());
    done = true;
  }(l, b, a_done);
  a.handle().resume();  // queues first, without a scheduler
  b.handle().resume();  // queues behind A, without a scheduler
  w.reset();
  EXPECT_TRUE(a_done);
  EXPECT_EQ(b_probe.started, 1);
  EXPECT_EQ(b_probe.resumed, 0);
  expect_free(l);  // B's share was not lost
}

// ---------------------------------------------------------------------------------------------
// The waiter core's scenarios, for read waits and for write waits (the test holds the write lock)

template <class Kind>
class RwlockWaits : public ::testing::Test {
 public:
  static constexpr bool write = Kind::value;
  using held = held_rwlock<write>;
};
struct kind_names {
  template <class Kind>
  static std::string GetName(int /*unused*/) {
    return Kind::value ? "Write" : "Read";
  }
};
using wait_kinds = ::testing::Types<std::false_type, std::true_type>;
TYPED_TEST_SUITE(RwlockWaits, wait_kinds, kind_names);

TYPED_TEST(RwlockWaits, AlreadyStoppedTokenCancelsAtOnce) {
  typename TestFixture::held h;
  already_stopped_token_cancels_at_once(h);
  h.held.reset();
  already_stopped_token_cancels_at_once(h);  // also when the lock is free: nothing taken
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, StopWhileQueuedCancelsAndTheOtherWaiterGetsTheLock) {
  typename TestFixture::held h;
  stop_while_suspended_cancels_and_resumes_once(h, release_held);
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, StopAtClaimedForWakeCancelsAndPassesTheGrantOn) {
  typename TestFixture::held h;
  stop_at_claimed_for_wake(h, release_held, wait_status::cancelled);
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, ReleaseAtClaimedForCancelGoesToTheOtherWaiter) {
  typename TestFixture::held h;
  wake_at_claimed_for_cancel_goes_to_the_other_waiter(h, release_held);
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, ReleaseAtPublishedOrBeforeArmCompletesWithoutSuspending) {
  using held = typename TestFixture::held;
  wake_before_suspension_completes_without_suspending([] { return held(); }, release_held,
                                                      [](held& h) { expect_free(h.l); });
}

TYPED_TEST(RwlockWaits, StopAtPublishedOrBeforeArmCancelsWithoutSuspending) {
  for (const test_point point : before_suspension) {
    SCOPED_TRACE(static_cast<int>(point));
    typename TestFixture::held h;
    stop_at_point_cancels_without_suspending(point, h, release_held);
    expect_free(h.l);
  }
}

TYPED_TEST(RwlockWaits, DestroyingQueuedWaitsAnywhereInTheQueueUnlinksThem) {
  typename TestFixture::held h;
  destroying_suspended_waiters_unlinks_them(h, release_held);
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, TimeoutTimesOutAndLeavesNoTrace) {
  typename TestFixture::held h;
  EXPECT_TRUE(h.wait_timeout(0ms).timed_out());
  EXPECT_TRUE(h.wait_timeout(1ms).timed_out());
  h.held.reset();
  expect_free(h.l);
  EXPECT_TRUE(h.wait_timeout(0ms).ok());  // free: completes without waiting
}

TYPED_TEST(RwlockWaits, TimeoutCompletesWhenReleasedByAnotherThread) {
  typename TestFixture::held h;
  wait_timeout_completes_when_woken_by_another_thread(h, release_held);
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, BlockingWaitWithStopTokenIsCancelledByAnotherThread) {
  typename TestFixture::held h;
  blocking_wait_is_cancelled_by_another_thread(h);
  EXPECT_FALSE(h.l.try_read().has_value());  // still the test's
  h.held.reset();
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, BlockingWaitsAreGrantedByAnotherThread) {
  typename TestFixture::held h;
  blocking_wait_is_woken_by_another_thread(h, release_held);
  std::optional<int> seen;
  h.held = h.l.try_write();
  std::thread waiter([&h, &seen] { seen = *h.wait_blocking(); });
  **h.held = 3;
  h.held.reset();
  waiter.join();
  EXPECT_EQ(seen, 3);  // the writer's store happened before
  expect_free(h.l);
}

TYPED_TEST(RwlockWaits, BlockOnWaitIsCancelledByAStopFromAnotherThread) {
  typename TestFixture::held h;
  block_on_wait_is_cancelled_by_another_thread(h);
  h.held.reset();
  expect_free(h.l);
}

TEST(RwlockBlocking, ReadersOnPlainThreadsShareAndBlockAWriter) {
  rwlock<int> l(0, 2);
  auto r1 = l.read_blocking();
  auto r2 = l.read_timeout(0ms);  // free share: the deadline does not matter
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(l.read_timeout(0ms).timed_out());  // max_readers
  EXPECT_TRUE(l.write_timeout(0ms).timed_out());
  asyncband::stop_source never;
  std::optional<wait_status> status;
  std::thread writer([&l, &never, &status] {
    auto w = l.write_blocking(never.get_token());
    status = w.status();
    if (w.ok()) **w = 1;
  });
  r1.unlock();
  r2->unlock();
  writer.join();
  EXPECT_EQ(status, wait_status::ok);
  auto r = l.read_blocking(never.get_token());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(**r, 1);
  auto again = block_on(l.read());
  EXPECT_EQ(*again, 1);
}

// ---------------------------------------------------------------------------------------------
// Last one out. The cancellation of a writer holding a partial grant hands the grant on while it
// still holds the rwlock's queue; with nobody queued behind, the shares become available to a
// lock-free try_read, whose holder may then destroy the rwlock: the destructor must wait for
// the cancellation to leave. (Unlocks never let anybody complete while they still hold it.)

TEST(RwlockLifetime, TheLastOneOutMayDestroyTheRwlockWhileACancelledWriterPassesItsShares) {
  test_scheduler s;
  rw_probe doomed;
  task<void> doomed_writer;
  std::optional<rwlock_read_guard<int>> reader;
  std::optional<writers_of> writers;
  waiter_destroys_while_the_waker_returns(
      [&s, &doomed, &doomed_writer, &reader, &writers] {
        auto l = std::make_unique<rwlock<int>>(0, 2);
        reader = l->try_read();
        writers.emplace(writers_of{*l});
        doomed_writer = plain_waiter(*writers, doomed);  // queues with the free share
        start_on(s, doomed_writer);
        s.run();
        return l;
      },
      [&doomed_writer](rwlock<int>& /*unused*/) { doomed_writer = {}; },
      [&reader](rwlock<int>& l) {
        EXPECT_TRUE(l.try_read().has_value());  // the share the writer passed on
        reader.reset();
      });
  EXPECT_EQ(doomed.started, 1);
  EXPECT_EQ(doomed.resumed, 0);
}

// ---------------------------------------------------------------------------------------------
// Stress: pool tasks and plain threads read and write one rwlock with every form (downgrades,
// cancellations and timeouts included). Invariants: writers alone, readers at most max_readers,
// readers see what the last writer wrote; the final value counts the writes.

constexpr auto kStressTime = 400ms;
constexpr int kStressIterations = 20000;
constexpr int kStressMaxReaders = 3;

struct rwlock_stress {
  rwlock<long> l{0, kStressMaxReaders};
  std::atomic<int> readers{0};
  std::atomic<int> writers{0};
  std::atomic<int> violations{0};
  std::atomic<long> writes{0};
  std::atomic<long> reads{0};
  std::atomic<long> failed{0};  // cancelled, timed out, try_ failed
  stop_epoch epoch;
  completion finished;
  stress_budget budget{kStressIterations, kStressTime};

  explicit rwlock_stress(int participants) : finished(participants) {}

  void enter_read(long value) {
    if (readers.fetch_add(1) + 1 > kStressMaxReaders || writers.load() != 0) violations.fetch_add(1);
    if (value < 0) violations.fetch_add(1);  // reads the writers' plain store (TSan)
    reads.fetch_add(1);
  }
  void leave_read() { readers.fetch_sub(1); }
  void enter_write(long& value) {
    if (writers.fetch_add(1) != 0 || readers.load() != 0) violations.fetch_add(1);
    ++value;
    writes.fetch_add(1);
  }
  void leave_write() { writers.fetch_sub(1); }

  /// A write that ends as a read share without letting another writer in.
  void write_then_downgrade(rwlock_write_guard<long> g) {
    enter_write(*g);
    readers.fetch_add(1);  // counted as a reader before it stops being the writer
    leave_write();
    auto r = std::move(g).downgrade();
    if (writers.load() != 0 || *r < 0) violations.fetch_add(1);
    readers.fetch_sub(1);
  }

  template <class Guard>
  void use(Guard& g) {
    if constexpr (std::is_same_v<Guard, rwlock_write_guard<long>>) {
      enter_write(*g);
      leave_write();
    } else {
      enter_read(*g);
      leave_read();
    }
  }
  template <class Result>
  void use_result(Result& r) {
    if (r.ok()) {
      use(*r);
    } else {
      failed.fetch_add(1);
    }
  }
  template <class Guard>
  void use_optional(std::optional<Guard>& g) {
    if (g) {
      use(*g);
    } else {
      failed.fetch_add(1);
    }
  }
};

task<void> rw_stress_task(thread_pool& pool, rwlock_stress& st, int id) {
  co_await pool.schedule();
  for (int i = 0; st.budget.keep_going(i); ++i) {
    switch ((i + id) % 7) {
      case 0: {
        auto g = co_await st.l.write();
        st.enter_write(*g);
        co_await pool.schedule();  // holds the write lock while it moves to another worker
        st.leave_write();
        break;
      }
      case 1: {
        auto r = co_await st.l.write(st.epoch.token());
        st.use_result(r);
        break;
      }
      case 2: {
        auto g = co_await st.l.write();
        st.write_then_downgrade(std::move(g));
        break;
      }
      case 3: {
        auto r = co_await st.l.read(st.epoch.token());
        st.use_result(r);
        break;
      }
      case 4: {
        auto g = co_await st.l.read();
        st.enter_read(*g);
        co_await pool.schedule();  // holds a share while it moves
        st.leave_read();
        break;
      }
      case 5: {
        auto g = st.l.try_read();
        st.use_optional(g);
        break;
      }
      default:
        st.epoch.cancel_current();
        break;
    }
  }
  st.finished.done();
}

void rw_stress_thread(rwlock_stress& st, int id) {
  for (int i = 0; st.budget.keep_going(i); ++i) {
    switch ((i + id) % 8) {
      case 0: {
        auto g = st.l.read_blocking();
        st.enter_read(*g);
        std::this_thread::yield();  // holds the share a little longer
        st.leave_read();
        break;
      }
      case 1: {
        auto r = st.l.read_blocking(st.epoch.token());
        st.use_result(r);
        break;
      }
      case 2: {
        auto r = st.l.read_timeout(50us);
        st.use_result(r);
        break;
      }
      case 3: {
        auto r = st.l.write_blocking(st.epoch.token());
        st.use_result(r);
        break;
      }
      case 4: {
        auto r = st.l.write_timeout(50us);
        st.use_result(r);
        break;
      }
      case 5: {
        auto g = st.l.try_write();
        st.use_optional(g);
        break;
      }
      case 6: {
        auto r = block_on(st.l.read(st.epoch.token()));
        st.use_result(r);
        break;
      }
      default:
        st.write_then_downgrade(st.l.write_blocking());
        st.epoch.cancel_current();
        break;
    }
  }
  st.finished.done();
}

TEST(RwlockStress, ReadersAndWritersOnPoolTasksAndPlainThreadsKeepTheInvariant) {
  constexpr int kTasks = 3;
  constexpr int kThreads = 3;
  rwlock_stress st(kTasks + kThreads);
  {
    thread_pool pool(2);  // destroyed before `st`
    for (int id = 0; id < kTasks; ++id) asyncband::runtime::spawn(pool.ref(), rw_stress_task(pool, st, id));
    std::vector<std::thread> threads;
    for (int id = 0; id < kThreads; ++id) threads.emplace_back(rw_stress_thread, std::ref(st), id);
    st.finished.wait_or_abort(60s, "rwlock stress");
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(st.violations.load(), 0);
  EXPECT_EQ(st.readers.load(), 0);
  EXPECT_EQ(st.writers.load(), 0);
  EXPECT_GT(st.writes.load(), 0);
  EXPECT_GT(st.reads.load(), 0);
  auto w = st.l.try_write();  // nothing leaked: every share came back
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(**w, st.writes.load());
  RecordProperty("writes", static_cast<int>(st.writes.load()));
  RecordProperty("reads", static_cast<int>(st.reads.load()));
  RecordProperty("failed", static_cast<int>(st.failed.load()));
}

// ---------------------------------------------------------------------------------------------
// Misuse: an awaiter is awaited once

TEST(RwlockMisuse, AwaitingAWriteLockAgainAfterItSuspendedThrowsLogicError) {
  rwlock<int> rw(0);
  auto reading = rw.try_read();
  ASSERT_TRUE(reading.has_value());
  expect_awaiting_again_throws_logic_error([&rw] { return rw.write(); }, [&reading] { reading.reset(); });
  EXPECT_TRUE(rw.try_write().has_value());
}

// ---------------------------------------------------------------------------------------------
// Misuse: destroyed with a pending wait (a debug-build assertion names the primitive)

TEST(RwlockDeathTest, DestroyingAnRwlockWithAPendingLockAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto wait_on = [](rwlock<int>& rw) -> task<void> {
    const auto reading = rw.try_read();
    const auto g = co_await rw.write();  // waits for its own read
  };
  EXPECT_DEATH(destroy_while_waiting(std::make_unique<rwlock<int>>(0), wait_on),
               "asyncband::rwlock destroyed with waiters");
}

}  // namespace
