// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::mpmc::bounded: sending and receiving in every form; exact capacity (also
// for capacities that are not powers of two); the counts of senders and receivers through copies
// and moves; moved-from handles; counter wrap-around; several receivers (each value received
// exactly once, FIFO among waiting receives, no overtaking by try_recv); deterministic races at
// the waiter core's test points and inside a send (two receives woken for one value, a receive
// woken then cancelled or destroyed, close against in-flight sends and waiting receives, the last
// receiver or sender going, permits held at close, a receive waiting for a write in progress);
// when_any; payloads whose move constructor throws on either side; the blocking twins; "last one
// out"; and seeded soaks on the test scheduler and on threads.
#include "asyncband/mpmc/bounded.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <latch>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "asyncband/auto_reset_event.hpp"
#include "asyncband/block_on.hpp"
#include "asyncband/manual_reset_event.hpp"
#include "asyncband/result.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/semaphore.hpp"
#include "asyncband/stop_token.hpp"
#include "asyncband/when_any.hpp"
#include "support/channel_probes.hpp"
#include "support/counted.hpp"
#include "support/destroyed_with_waiters.hpp"
#include "support/free_capacity.hpp"
#include "support/fuse_payload.hpp"
#include "support/lifetime.hpp"
#include "support/mpmc_channel.hpp"
#include "support/mpmc_receive_scenarios.hpp"
#include "support/mpmc_soak.hpp"
#include "support/probe.hpp"
#include "support/recv_many.hpp"
#include "support/stress.hpp"
#include "support/thread_hook.hpp"

namespace {

using namespace asyncband_test;
using namespace asyncband_test::mpmc_scenarios;
using namespace asyncband_test::mpmc_soak;
using asyncband::block_on;
using asyncband::result;
using asyncband::send_result;
using asyncband::send_status;
using asyncband::when_any;
namespace mpmc = asyncband::mpmc;

// ---------------------------------------------------------------------------------------------
// Channels and handles

template <class T>
using chan = channel_halves<mpmc::sender<T>, mpmc::receiver<T>>;

template <class T>
chan<T> make_channel(std::size_t capacity) {
  return halves_of(mpmc::bounded<T>(capacity));
}

/// A channel whose ring indexes start at `first_index` (for wrap-around).
template <class T>
chan<T> make_channel_at(std::size_t capacity, std::uint32_t first_index) {
  return halves_of(mpmc::detail::bounded_starting_at<T>(capacity, first_index));
}

/// The units of capacity free now, found by reserving them (and giving them back): `expected`
/// can be reserved at once, and not one more.
template <class T>
void expect_free_capacity(mpmc::sender<T>& tx, std::size_t expected) {
  if (expected > 0) {
    auto all = tx.try_reserve(expected);
    EXPECT_TRUE(all.ok()) << expected << " units should be free: " << asyncband::to_string(all.status());
  }
  if (expected < tx.capacity()) {
    EXPECT_TRUE(tx.try_reserve(expected + 1).full()) << "only " << expected << " units should be free";
  }
}

/// How the shared scenarios (support/mpmc_channel.hpp) use a bounded channel: `room` is its
/// capacity; a send that must be accepted is a try_send; the capacity is exact when the units
/// free are the capacity less the values it holds.
struct bounded_kind {
  template <class T>
  using sender = mpmc::sender<T>;
  template <class T>
  using receiver = mpmc::receiver<T>;

  template <class T>
  static chan<T> make(std::size_t room) {
    return make_channel<T>(room);
  }
  template <class T>
  static send_result<T> offer(sender<T>& tx, int v, int fuse = 0) {
    return tx.try_send(asyncband_test::make<T>(v, fuse));
  }
  template <class T>
  static void put(sender<T>& tx, int v) {
    auto r = tx.try_send(asyncband_test::make<T>(v));
    EXPECT_TRUE(r.ok()) << "try_send(" << v << "): " << asyncband::to_string(r.status());
  }
  template <class T>
  static void send_blocking(sender<T>& tx, int v) {
    EXPECT_TRUE(tx.send_blocking(asyncband_test::make<T>(v)).ok());
  }
  template <class T>
  static void expect_exact(sender<T>& tx, receiver<T>& rx) {
    expect_free_capacity(tx, tx.capacity() - rx.len());
  }
};

/// try_send that must succeed.
template <class T>
void put(mpmc::sender<T>& tx, int v) {
  bounded_kind::put(tx, v);
}

/// A channel of `capacity` on a test scheduler holding `filled` values 100, 101, ... (see
/// channel_fixture).
template <class T = int>
using fixture = channel_fixture<bounded_kind, T>;

/// A reserving coroutine's record, with the permit it received.
template <class T>
struct reserve_probe : probe {
  std::optional<mpmc::permit<T>> permit;
};

/// `co_await tx.reserve()` recorded in `p`.
template <class T>
task<void> reserve_into(mpmc::sender<T>& tx, reserve_probe<T>& p) {
  ++p.started;
  auto r = co_await tx.reserve();
  if (r.ok()) p.permit.emplace(std::move(*r));
  p.finish(r.status());
}

// ---------------------------------------------------------------------------------------------
// Sending and receiving, the queries, the handles

TEST(MpmcBounded, TrySendAndTryRecvKeepTheOrderAndTheQueries) {
  auto c = make_channel<int>(3);
  EXPECT_EQ(c.tx.capacity(), 3U);
  EXPECT_EQ(c.rx.capacity(), 3U);
  EXPECT_EQ(c.tx.sender_count(), 1U);
  EXPECT_EQ(c.tx.receiver_count(), 1U);
  EXPECT_EQ(c.rx.sender_count(), 1U);
  EXPECT_EQ(c.rx.receiver_count(), 1U);
  EXPECT_TRUE(c.rx.empty());
  EXPECT_FALSE(c.tx.is_closed());
  EXPECT_FALSE(c.rx.is_closed());
  EXPECT_TRUE(c.rx.try_recv().empty());
  put(c.tx, 1);
  put(c.tx, 2);
  EXPECT_EQ(c.rx.len(), 2U);
  EXPECT_FALSE(c.rx.empty());
  EXPECT_EQ(take(c.rx), 1);
  put(c.tx, 3);
  put(c.tx, 4);
  EXPECT_EQ(c.rx.len(), 3U);
  EXPECT_EQ(take_all(c.rx), (std::vector<int>{2, 3, 4}));
  EXPECT_TRUE(c.rx.empty());
  EXPECT_TRUE(c.rx.try_recv().empty());
}

TEST(MpmcBounded, ExactCapacityAlsoForCapacitiesThatAreNotPowersOfTwo) {
  for (const std::size_t capacity : {1U, 2U, 3U, 5U, 7U, 64U, 100U}) {
    SCOPED_TRACE(testing::Message() << "capacity " << capacity);
    count_scope counts;
    auto c = make_channel<counted>(capacity);
    mpmc::receiver<counted> other = c.rx;
    const int cap = static_cast<int>(capacity);
    for (int lap = 0; lap < 3; ++lap) {  // the same holds on every lap of the ring
      const int base = 1 + lap * 1000;
      for (int i = 0; i < cap; ++i) put(c.tx, base + i);
      EXPECT_EQ(c.rx.len(), capacity);
      EXPECT_EQ(other.len(), capacity);
      auto full = c.tx.try_send(counted(base + cap));
      EXPECT_TRUE(full.full());
      EXPECT_EQ(full.value().id(), base + cap);  // the value comes back intact
      EXPECT_TRUE(c.tx.try_reserve().full());
      EXPECT_EQ(take(lap % 2 == 0 ? c.rx : other), base);  // one place frees exactly one unit
      put(c.tx, base + cap);
      EXPECT_TRUE(c.tx.try_send(counted(-1)).full());
      EXPECT_EQ(take_all(other), range(base + 1, base + cap + 1));
    }
    expect_free_capacity(c.tx, capacity);
  }
}

TEST(MpmcBounded, CapacityThreeTakesThreeTrySendsAndRefusesTheFourth) {
  auto c = make_channel<int>(3);
  EXPECT_TRUE(c.tx.try_send(1).ok());
  EXPECT_TRUE(c.tx.try_send(2).ok());
  EXPECT_TRUE(c.tx.try_send(3).ok());
  auto fourth = c.tx.try_send(4);
  EXPECT_TRUE(fourth.full());
  EXPECT_EQ(fourth.value(), 4);
  EXPECT_EQ(c.rx.len(), 3U);
  EXPECT_EQ(take_all(c.rx), (std::vector<int>{1, 2, 3}));
}

TEST(MpmcBounded, CreationAndReservationArgumentsAreChecked) {
  EXPECT_THROW((void)mpmc::bounded<int>(0), std::invalid_argument);
  EXPECT_THROW((void)mpmc::bounded<int>(asyncband::semaphore::max() + 1), std::invalid_argument);
  EXPECT_THROW((void)mpmc::detail::bounded_starting_at<int>(0, 5), std::invalid_argument);
  auto c = make_channel<int>(3);
  EXPECT_THROW((void)c.tx.reserve_many(0), std::invalid_argument);
  EXPECT_THROW((void)c.tx.reserve_many(4), std::invalid_argument);
  EXPECT_THROW((void)c.tx.try_reserve(4), std::invalid_argument);
  EXPECT_THROW((void)c.tx.reserve_blocking(0), std::invalid_argument);
  expect_free_capacity(c.tx, 3);  // nothing was taken by the failed calls
}

TEST(MpmcBounded, EveryReceiveFormYieldsAValueThatIsThere) {
  every_receive_form_yields_a_value_that_is_there<bounded_kind>();
}

TEST(MpmcBounded, EverySendFormDeliversInOrder) {
  auto c = make_channel<int>(16);
  mpmc::sender<int> other = c.tx;
  asyncband::stop_source never;
  EXPECT_TRUE(c.tx.try_send(1).ok());
  EXPECT_TRUE(block_on(other.send(2)).ok());
  EXPECT_TRUE(block_on(c.tx.send(3, never.get_token())).ok());
  EXPECT_TRUE(other.send_blocking(4).ok());
  EXPECT_TRUE(c.tx.send_blocking(5, never.get_token()).ok());
  EXPECT_TRUE(other.send_timeout(6, 1h).ok());
  EXPECT_TRUE(c.tx.send_timeout(7, 0ms).ok());  // capacity is there: the deadline never matters
  {
    auto p = c.tx.try_reserve();
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->send(8).ok());
  }
  {
    auto p = block_on(other.reserve());
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->send(9).ok());
  }
  {
    auto p = c.tx.reserve_blocking();
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->send(10).ok());
  }
  {
    auto p = other.try_reserve_owned();
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->send(11).ok());
  }
  {
    auto p = block_on(c.tx.reserve_owned());
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->send(12).ok());
  }
  EXPECT_EQ(take_all(c.rx), range(1, 13));
}

TEST(MpmcBounded, SenderAndReceiverCountsFollowCopiesMovesAndDestruction) {
  counts_follow_copies_moves_and_destruction<bounded_kind>(
      [](mpmc::sender<int>& tx, const auto& expect_counts) {
        auto owned = tx.try_reserve_owned();  // an owned permit is a producer
        ASSERT_TRUE(owned.ok());
        expect_counts(3, 3);
      });
}

TEST(MpmcBounded, ReceiverCopiesShareTheChannelWhichDisconnectsOnlyWithTheLastOne) {
  auto c = make_channel<counted>(3);
  receiver_copies_share_the_channel_which_disconnects_only_with_the_last_one<bounded_kind>(c);
  EXPECT_TRUE(c.tx.try_reserve().closed());
}

TEST(MpmcBounded, MovedFromHandlesThrowLogicErrorAndReportNothing) {
  auto c = make_channel<int>(2);
  mpmc::sender<int> tx = std::move(c.tx);
  mpmc::receiver<int> rx = std::move(c.rx);
  // NOLINTBEGIN(bugprone-use-after-move): the moved-from handles are what is tested
  expect_moved_from_halves<bounded_kind>(c.tx, c.rx);
  EXPECT_EQ(c.tx.capacity(), 0U);
  EXPECT_THROW((void)c.tx.send(1), std::logic_error);
  EXPECT_THROW((void)c.tx.send_blocking(1), std::logic_error);
  EXPECT_THROW((void)c.tx.reserve(), std::logic_error);
  EXPECT_THROW((void)c.tx.try_reserve(), std::logic_error);
  EXPECT_THROW((void)c.tx.try_reserve_owned(), std::logic_error);
  EXPECT_EQ(c.rx.capacity(), 0U);
  // NOLINTEND(bugprone-use-after-move)
  expect_moved_to_halves_untouched<bounded_kind>(tx, rx);
}

TEST(MpmcBounded, HandlesMoveAndCopyAssignWithTheirChannel) {
  handles_move_and_copy_assign_with_their_channel<bounded_kind>();
}

TEST(MpmcBounded, RecvBeforeSendSuspendsAndTheSendResumesItOnceOnItsScheduler) {
  recv_before_send_suspends_and_the_send_resumes_it_once_on_its_scheduler<bounded_kind>();
}

TEST(MpmcBounded, ACoroutineWithoutASchedulerIsResumedInlineInsideTheSend) {
  a_coroutine_without_a_scheduler_is_resumed_inline_inside_the_send<bounded_kind>();
}

TEST(MpmcBounded, MoveOnlyPayloadsAreDeliveredAndHandedBackIntact) {
  auto c = make_channel<std::unique_ptr<int>>(2);
  mpmc::receiver<std::unique_ptr<int>> other = c.rx;
  auto one = std::make_unique<int>(1);
  int* const one_address = one.get();
  EXPECT_TRUE(c.tx.try_send(std::move(one)).ok());
  EXPECT_TRUE(block_on(c.tx.send(std::make_unique<int>(2))).ok());
  auto three = std::make_unique<int>(3);
  int* const three_address = three.get();
  auto full = c.tx.try_send(std::move(three));
  ASSERT_TRUE(full.full());
  EXPECT_EQ(full.value().get(), three_address);  // the very same object comes back
  auto first = other.try_recv();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->get(), one_address);
  EXPECT_TRUE(c.tx.send_blocking(std::move(full.value())).ok());
  EXPECT_EQ(**block_on(c.rx.recv()), 2);
  auto third = other.recv_blocking();
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->get(), three_address);
  c.rx.close();
  auto five = std::make_unique<int>(5);
  int* const five_address = five.get();
  auto refused = block_on(c.tx.send(std::move(five)));
  ASSERT_TRUE(refused.closed());
  EXPECT_EQ(refused.value().get(), five_address);
}

// ---------------------------------------------------------------------------------------------
// Capacity: the bound and the units free now

/// `co_await tx.reserve_many(n)` recorded in `p`.
template <class T>
task<void> reserve_many_into(mpmc::sender<T>& tx, std::size_t n, reserve_probe<T>& p) {
  ++p.started;
  auto r = co_await tx.reserve_many(n);
  if (r.ok()) p.permit.emplace(std::move(*r));
  p.finish(r.status());
}

TEST(MpmcBoundedCapacity, MaxCapacityIsTheBoundAndFreeCapacityTheUnitsFreeNow) {
  fixture<int> f(3);
  auto& tx = f.c.tx;
  auto& rx = f.c.rx;
  mpmc::sender<int> other = tx;
  reserve_probe<int> r;
  expect_free_capacity_through_reserves_and_sends(
      tx, rx,
      [&]() -> auto& {
        f.s.spawn(reserve_many_into(tx, 2, r));
        f.s.run();
        return r;
      },
      [&](int v) -> auto& { return f.send(v); }, [&] { f.s.run(); });

  put(tx, 7);
  EXPECT_EQ(other.free_capacity(), 2U);  // every copy sees the same channel
  other.close();                         // either half closes an MPMC channel
  EXPECT_EQ(tx.free_capacity(), 0U);     // closed: nothing more can be sent
  EXPECT_EQ(take(rx), 7);
  EXPECT_EQ(tx.free_capacity(), 0U);
  EXPECT_EQ(tx.max_capacity(), 3U);  // the bound stays
  EXPECT_EQ(rx.max_capacity(), 3U);

  auto gone = make_channel<int>(2);
  mpmc::receiver<int> copy = gone.rx;
  put(gone.tx, 1);
  drop(gone.rx);  // not the last receiver
  EXPECT_EQ(gone.tx.free_capacity(), 1U);
  drop(copy);  // the last one
  EXPECT_EQ(gone.tx.free_capacity(), 0U);
  EXPECT_EQ(gone.tx.max_capacity(), 2U);

  expect_moved_from_handles_report_no_capacity<mpmc::sender<int>, mpmc::receiver<int>>(make_channel<int>(2));
}

// ---------------------------------------------------------------------------------------------
// Counter wrap-around: channels whose ring indexes (both tickets) start just below 2^32

TEST(MpmcBoundedWrap, TrySendAndTryRecvOfTwoReceiversAcrossTheWrapForEveryCapacity) {
  constexpr std::uint32_t max = std::numeric_limits<std::uint32_t>::max();
  for (const std::size_t capacity : {1U, 2U, 3U, 5U, 8U}) {
    for (const std::uint32_t k : {std::uint32_t{0}, std::uint32_t{1}, std::uint32_t{2},
                                  std::uint32_t(capacity), std::uint32_t(2 * capacity + 1)}) {
      SCOPED_TRACE(testing::Message() << "capacity " << capacity << ", first index max - " << k);
      auto c = make_channel_at<int>(capacity, max - k);
      mpmc::receiver<int> other = c.rx;
      int next_send = 0;
      int next_recv = 0;
      for (int step = 0; step < 6 * static_cast<int>(capacity) + 10; ++step) {
        while (c.tx.try_send(next_send).ok()) ++next_send;
        EXPECT_EQ(c.rx.len(), capacity);
        const int n = 1 + step % static_cast<int>(capacity);
        for (int i = 0; i < n; ++i) {
          auto r = (i % 2 == 0 ? c.rx : other).try_recv();
          ASSERT_TRUE(r.ok());
          EXPECT_EQ(*r, next_recv++);
        }
      }
      for (const int v : take_all(other)) EXPECT_EQ(v, next_recv++);
      EXPECT_EQ(next_recv, next_send);
      EXPECT_EQ(c.rx.len(), 0U);
      expect_free_capacity(c.tx, capacity);
    }
  }
}

// Senders and receivers waiting across the wrap, with a permit held all along, in a random
// order per seed: every value arrives once, in order per producer for each receiver.
TEST(MpmcBoundedWrap, WaitingSendersAndReceiversAcrossTheWrap) {
  constexpr std::uint32_t max = std::numeric_limits<std::uint32_t>::max();
  constexpr int kPerProducer = 12;
  constexpr int kConsumers = 3;
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    auto c = make_channel_at<int>(2 + seed % 3, max - static_cast<std::uint32_t>(seed % 7));
    test_scheduler s(seed == 0 ? std::nullopt : std::optional<std::uint64_t>(seed));
    auto held = c.tx.try_reserve();
    ASSERT_TRUE(held.ok());
    asyncband::stop_source never;
    std::vector<std::vector<int>> received(kConsumers);
    for (int p = 0; p < 3; ++p) {
      s.spawn([](mpmc::sender<int> tx, int producer, asyncband::stop_token stop) -> task<void> {
        for (int i = 1; i <= kPerProducer; ++i) {
          const int v = producer * 100 + i;
          if (producer == 0) {
            auto r = co_await tx.send(v);
            EXPECT_TRUE(r.ok());
          } else if (producer == 1) {
            auto r = co_await tx.send(v, stop);
            EXPECT_TRUE(r.ok());
          } else {
            auto permit = co_await tx.reserve();
            EXPECT_TRUE(permit.ok());
            if (permit.ok()) {
              EXPECT_TRUE(permit->send(v).ok());
            }
          }
        }
      }(c.tx, p, never.get_token()));
    }
    for (int k = 0; k < kConsumers; ++k) {
      s.spawn([](mpmc::receiver<int> rx, std::vector<int>& out, bool can_stop,
                 asyncband::stop_token stop) -> task<void> {
        for (;;) {
          std::optional<result<int>> r;
          if (can_stop) {
            r.emplace(co_await rx.recv(stop));
          } else {
            r.emplace(co_await rx.recv());
          }
          if (!r->ok()) break;
          out.push_back(**r);
        }
      }(c.rx, received[k], k == 1, never.get_token()));
    }
    s.run();
    std::size_t total = 0;
    for (const auto& got : received) total += got.size();
    EXPECT_EQ(total, static_cast<std::size_t>(3 * kPerProducer));
    EXPECT_TRUE(held->send(999).ok());  // the permit, held all along
    drop(*held);
    drop(c.tx);
    s.run();
    std::vector<int> all;
    for (const auto& got : received) {
      all.insert(all.end(), got.begin(), got.end());
      for (int p = 0; p < 3; ++p) {
        int last = p * 100;
        for (const int v : got) {
          if (v == 999 || v / 100 != p) continue;
          EXPECT_GT(v, last) << "producer " << p << " out of order for one receiver";
          last = v;
        }
      }
    }
    std::sort(all.begin(), all.end());
    std::vector<int> expected;
    for (int p = 0; p < 3; ++p) {
      for (int i = 1; i <= kPerProducer; ++i) expected.push_back(p * 100 + i);
    }
    expected.push_back(999);
    EXPECT_EQ(all, expected);
    EXPECT_TRUE(c.rx.try_recv().closed());
    if (HasFailure()) break;
  }
}

// Threads across the wrap: the ring's counters wrap while producers block for capacity and
// receivers block for values.
TEST(MpmcBoundedWrap, ThreadsAcrossTheWrap) {
  constexpr std::uint32_t max = std::numeric_limits<std::uint32_t>::max();
  constexpr int kPerProducer = 500;
  auto c = make_channel_at<int>(3, max - 100);
  std::vector<std::thread> producers;
  for (int p = 0; p < 2; ++p) {
    producers.emplace_back([tx = c.tx, p]() mutable {
      for (int i = 1; i <= kPerProducer; ++i) EXPECT_TRUE(tx.send_blocking(p * 10000 + i).ok());
    });
  }
  drop(c.tx);
  std::vector<std::vector<int>> got(2);
  std::vector<std::thread> consumers;
  for (int k = 0; k < 2; ++k) {
    consumers.emplace_back([rx = c.rx, &out = got[k]]() mutable {
      for (auto r = rx.recv_blocking(); r.ok(); r = rx.recv_blocking()) out.push_back(*r);
    });
  }
  drop(c.rx);
  for (auto& t : producers) t.join();
  for (auto& t : consumers) t.join();
  std::vector<int> all;
  for (const auto& out : got) {
    int last[2] = {0, 10000};
    for (const int v : out) {
      EXPECT_GT(v, last[v / 10000]);
      last[v / 10000] = v;
    }
    all.insert(all.end(), out.begin(), out.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int> expected = range(1, kPerProducer + 1);
  for (const int v : range(10001, 10001 + kPerProducer)) expected.push_back(v);
  EXPECT_EQ(all, expected);
}

// ---------------------------------------------------------------------------------------------
// Several receivers: each value to exactly one receive, FIFO among waiting receives (the shared
// scenarios of support/mpmc_receive_scenarios.hpp)

TEST(MpmcBoundedReceivers, WaitingReceivesAreServedInFifoOrder) {
  waiting_receives_are_served_in_fifo_order<bounded_kind>();
}

TEST(MpmcBoundedReceivers, CancellingWaitingReceivesInTheMiddleKeepsTheOrderOfTheOthers) {
  cancelling_waiting_receives_in_the_middle_keeps_the_order_of_the_others<bounded_kind>();
}

TEST(MpmcBoundedReceivers, NeitherATryRecvNorANewReceiveOvertakesAWaitingReceive) {
  neither_a_try_recv_nor_a_new_receive_overtakes_a_waiting_receive<bounded_kind>();
}

TEST(MpmcBoundedReceivers, AValueSentWhileNoneWaitsGoesToTheNextReceiveOfAnyCopy) {
  a_value_sent_while_none_waits_goes_to_the_next_receive_of_any_copy<bounded_kind>();
}

TEST(MpmcBoundedReceivers, EachValueGoesToExactlyOneOfSeveralReceivingCoroutines) {
  each_value_goes_to_exactly_one_of_several_receiving_coroutines<bounded_kind>(
      [](test_scheduler& /*unused*/, mpmc::sender<counted> tx, int producer, int count) -> task<void> {
        for (int i = 1; i <= count; ++i) {
          auto r = co_await tx.send(counted(producer * 100 + i));
          EXPECT_TRUE(r.ok());
        }
      });
}

TEST(MpmcBoundedThreads, EachValueIsReceivedExactlyOnceByThreadsAndPoolCoroutines) {
  each_value_is_received_exactly_once_by_threads_and_pool_coroutines<bounded_kind>();
}

// ---------------------------------------------------------------------------------------------
// Deterministic races at the waiter core's test points, and inside a send (between its claim of a
// place and its publication, where it constructs the value: a counted payload's move hook).

TEST(MpmcBoundedRace, OneValueWakesExactlyOneOfTwoWaitingReceives) {
  one_value_wakes_exactly_one_of_two_waiting_receives<bounded_kind>();
}

TEST(MpmcBoundedRace, ASecondValueSentWhileTheFirstWakeUpIsClaimedWakesTheSecondReceive) {
  a_second_value_sent_while_the_first_wake_up_is_claimed_wakes_the_second_receive<bounded_kind>();
}

TEST(MpmcBoundedRace, AValueSentWhileASecondReceiveRegistersGoesToTheFirst) {
  a_value_sent_while_a_second_receive_registers_goes_to_the_first<bounded_kind>();
}

TEST(MpmcBoundedRace, AValueSentWhileTheOnlyReceiveRegistersCompletesItWithoutSuspending) {
  a_value_sent_while_the_only_receive_registers_completes_it_without_suspending<bounded_kind>();
}

TEST(MpmcBoundedCancel, AnAlreadyStoppedTokenCancelsAtOnceAndTakesNothing) {
  const count_scope counts;
  auto c = make_channel<counted>(2);
  asyncband::stop_source stopped;
  stopped.request_stop();
  auto a = block_on(c.tx.send(counted(1), stopped.get_token()));  // capacity is there: still cancelled
  EXPECT_TRUE(a.cancelled());
  EXPECT_EQ(a.value().id(), 1);
  EXPECT_TRUE(block_on(c.tx.reserve(stopped.get_token())).cancelled());
  receives_with_a_stopped_token_take_nothing<bounded_kind>(c, stopped.get_token());
}

TEST(MpmcBoundedRace, AReceiveWokenForAValueThenStoppedPassesItToTheNextWaitingReceive) {
  a_receive_woken_for_a_value_then_stopped_passes_it_to_the_next_waiting_receive<bounded_kind>();
}

TEST(MpmcBoundedRace, AValueSentWhileAStopHoldsTheFirstReceiveClaimedGoesToTheSecond) {
  a_value_sent_while_a_stop_holds_the_first_receive_claimed_goes_to_the_second<bounded_kind>();
}

TEST(MpmcBoundedRace, AStopWhileAReceiveRegistersCancelsItAndTheValueStays) {
  a_stop_while_a_receive_registers_cancels_it_and_the_value_stays<bounded_kind>();
}

TEST(MpmcBoundedDestroy, DestroyingASuspendedReceiveTakesNothing) {
  destroying_a_suspended_receive_takes_nothing<bounded_kind>();
}

TEST(MpmcBoundedDestroy, AReceiveWokenForAValueThenDestroyedPassesItOn) {
  a_receive_woken_for_a_value_then_destroyed_passes_it_on<bounded_kind>();
}

// ---------------------------------------------------------------------------------------------
// Deliveries bind a value to the queued receive they wake. A trivially copyable value (int) is
// copied into the receive's node and its cell goes on at once; another (counted) stays in its
// cell, and the return of capacity waits until its receive takes it. A bound receive that will
// not take its value (stopped after the wake-up, its frame destroyed) gives it back, ahead of
// the others, for the next receive.

/// Records, while it lives, the ids of the values that go back to the channel for another
/// receive (mpmc::detail::on_value_reoffered_for_tests: parked after a throwing move, or given
/// back by a receive that was bound one, or had claimed one, and will not take it).
template <class T>
class reoffered_values {
 public:
  reoffered_values() {
    seen().clear();
    mpmc::detail::on_value_reoffered_for_tests.store(
        [](const void* value) { seen().push_back(id_of(*static_cast<const T*>(value))); });
  }
  reoffered_values(const reoffered_values&) = delete;
  reoffered_values& operator=(const reoffered_values&) = delete;
  ~reoffered_values() { mpmc::detail::on_value_reoffered_for_tests.store(nullptr); }
  [[nodiscard]] std::vector<int> ids() const { return seen(); }

 private:
  static std::vector<int>& seen() {
    static std::vector<int> ids;
    return ids;
  }
};

static_assert(mpmc::detail::bounded_state<int>::delivered_out,
              "int values are copied into the receive's node");
static_assert(!mpmc::detail::bounded_state<counted>::delivered_out, "counted values stay in their cell");

// Two receives queued, an int value delivered to the first (copied into its node) and the first
// stopped before it resumes: the value goes to the second receive (or, with nobody else queued,
// stays for the next try_recv, ahead of a newer value), once, and every unit comes back.
TEST(MpmcBoundedDelivery, AnIntReceiveStoppedAfterItsValueWasCopiedIntoItPassesTheValueOnOnce) {
  for (const bool next_waits : {false, true}) {
    SCOPED_TRACE(next_waits);
    const reoffered_values<int> reoffered;
    fixture<int> f(2);
    auto& a = f.recv(1, stoppable);
    recv_probe<int>* b = next_waits ? &f.recv(2, plain) : nullptr;
    put(f.c.tx, 10);  // bound to a, whose resumption is queued
    EXPECT_EQ(f.s.ready_count(), 1U);
    EXPECT_EQ(f.c.rx.len(), 1U) << "a value bound to a receive is not received yet";
    EXPECT_TRUE(f.c.rx.try_recv().empty()) << "10 is a's: nobody else takes it";
    expect_free_capacity(f.c.tx, 1);  // a holds 10's unit
    f.stop(0).request_stop();         // after the wake-up: a gives 10 back as it resumes
    f.s.run();
    expect_ended(a, wait_status::cancelled);
    EXPECT_EQ(reoffered.ids(), (std::vector<int>{10}));
    if (next_waits) {
      expect_got(*b, 10);
      EXPECT_TRUE(f.c.rx.try_recv().empty());
      expect_free_capacity(f.c.tx, 2);
    } else {
      EXPECT_EQ(f.c.rx.len(), 1U);
      expect_free_capacity(f.c.tx, 1);
      put(f.c.tx, 11);
      EXPECT_EQ(take_all(f.c.rx), (std::vector<int>{10, 11}));
      expect_free_capacity(f.c.tx, 2);
    }
    put(f.c.tx, 12);  // the ring goes on: round to the cell 10 had
    put(f.c.tx, 13);
    EXPECT_EQ(take_all(f.c.rx), (std::vector<int>{12, 13}));
    expect_free_capacity(f.c.tx, 2);
  }
}

// The same, the first receive's frame destroyed (on this thread) while the send (another thread)
// has claimed it for the value and not resolved it yet: the destructor waits for the send, then
// gives the value in its node back.
TEST(MpmcBoundedDelivery, AnIntReceiveDestroyedAfterItsValueWasCopiedIntoItPassesTheValueOnOnce) {
  const reoffered_values<int> reoffered;
  a_receive_woken_for_a_value_then_destroyed_passes_it_on<bounded_kind, int>();
  EXPECT_EQ(reoffered.ids(), (std::vector<int>{5, 5})) << "given back once in each of its two runs";
}

/// A receive woken for value 1 (bound to it) has not resumed when a try_recv claims the next
/// place, 2: each gets its own value, in order (2, then 3 for the try_recv's receiver). A value
/// that stays in its cell (not delivered_out) holds back the units of the places claimed past
/// it until its receive takes it.
template <class T>
void a_receive_woken_for_a_value_gets_it_after_a_try_recv_claimed_a_later_one() {
  const count_scope counts;
  const reoffered_values<T> reoffered;
  constexpr std::size_t held_back = mpmc::detail::bounded_state<T>::delivered_out ? 0 : 1;
  fixture<T> f(3);
  auto& a = f.recv(1);
  put(f.c.tx, 1);  // bound to a; its resumption is queued
  EXPECT_EQ(f.s.ready_count(), 1U);
  put(f.c.tx, 2);  // nobody queued: published for whoever claims it
  put(f.c.tx, 3);
  expect_free_capacity(f.c.tx, 0);
  EXPECT_EQ(take(f.c.rx), 2) << "a try_recv claims the place after the value bound to a";
  expect_free_capacity(f.c.tx, 1 - held_back);  // 1's unit is a's; 2's is back, or held back
  EXPECT_EQ(f.s.ready_count(), 1U);
  f.s.run();
  expect_got(a, 1);
  expect_free_capacity(f.c.tx, 2);
  EXPECT_EQ(take_all(f.c.rx), (std::vector<int>{3}));
  expect_free_capacity(f.c.tx, 3);
  EXPECT_TRUE(reoffered.ids().empty());
}

TEST(MpmcBoundedDelivery, AReceiveWokenForAValueGetsItThoughATryRecvClaimedALaterValueBeforeItResumed) {
  {
    SCOPED_TRACE("int: copied into the receive's node");
    a_receive_woken_for_a_value_gets_it_after_a_try_recv_claimed_a_later_one<int>();
  }
  {
    SCOPED_TRACE("counted: left in its cell");
    a_receive_woken_for_a_value_gets_it_after_a_try_recv_claimed_a_later_one<counted>();
  }
}

/// The same, and the woken receive is stopped before it resumes: its value goes back ahead of
/// the values not yet claimed, for the next receive, once.
TEST(MpmcBoundedDelivery, AValueGivenBackAfterATryRecvClaimedPastItComesBeforeTheValuesNotYetClaimed) {
  const reoffered_values<int> reoffered;
  fixture<int> f(3);
  auto& a = f.recv(1, stoppable);
  put(f.c.tx, 1);  // bound to a
  put(f.c.tx, 2);
  put(f.c.tx, 3);
  EXPECT_EQ(take(f.c.rx), 2);
  f.stop(0).request_stop();
  f.s.run();
  expect_ended(a, wait_status::cancelled);
  EXPECT_EQ(reoffered.ids(), (std::vector<int>{1}));
  EXPECT_EQ(f.c.rx.len(), 2U);
  expect_free_capacity(f.c.tx, 1);
  EXPECT_EQ(take_all(f.c.rx), (std::vector<int>{1, 3}));
  expect_free_capacity(f.c.tx, 3);
}

// A counted value delivered to a receive stays in its cell until that receive takes it. While it
// has not (its resumption queued), a try_recv takes the next value, and the unit of that place
// is held back: a send must not come round the ring (two cells) to the bound value's cell, where
// it would wait for a receive on the only thread. try_send is full, and a send waits until the
// bound receive takes its value; then it goes on, into that cell.
TEST(MpmcBoundedDelivery, ASendWaitsForTheCellOfAValueBoundToAReceiveThatHasNotResumedYet) {
  const count_scope counts;
  fixture<counted> f(2);
  auto& a = f.recv(1);
  put(f.c.tx, 1);  // place 0: bound to a, in its cell
  EXPECT_EQ(f.s.ready_count(), 1U);
  put(f.c.tx, 2);  // place 1
  EXPECT_EQ(take(f.c.rx), 2);
  expect_free_capacity(f.c.tx, 0);            // 1 holds its unit; 2's waits for 1's take
  if (::testing::Test::HasFailure()) return;  // a send now would come round to 1's cell
  {
    auto r = f.c.tx.try_send(counted(3));
    EXPECT_TRUE(r.full());
    EXPECT_EQ(r.value().id(), 3);
  }
  test_scheduler senders;  // a's resumption is queued on f.s: the send runs apart from it
  send_probe<counted> sp;
  sp.id = 4;
  auto t = send_value(f.c.tx, 4, sp);
  start_on(senders, t);
  senders.run();
  expect_waiting(sp);
  f.s.run();  // a takes 1: its cell goes on, and both units come back
  expect_got(a, 1);
  EXPECT_EQ(senders.ready_count(), 1U) << "the send was given its unit";
  senders.run();
  expect_sent(sp);
  EXPECT_EQ(take_all(f.c.rx), (std::vector<int>{4}));
  expect_free_capacity(f.c.tx, 2);
  put(f.c.tx, 5);  // places 3 and 4: round the ring once more
  put(f.c.tx, 6);
  EXPECT_EQ(take_all(f.c.rx), (std::vector<int>{5, 6}));
  expect_free_capacity(f.c.tx, 2);
}

// Receives of a when_any on two channels, both queued; a value sent to one channel is bound to
// its branch, which wins, and while that wake-up is claimed and not resolved (the other branch
// still queued) a value is sent to the other channel: the delivery commits a branch before it
// binds a value to it, so the losing branch is passed over, and its channel keeps the value
// (not bound to the loser and given back).
TEST(MpmcBoundedDelivery, OnlyTheWinningReceiveOfAWhenAnyIsBoundAValue) {
  for (const int winner : {0, 1}) {
    SCOPED_TRACE(winner);
    const reoffered_values<int> reoffered;
    auto a = make_channel<int>(2);
    auto b = make_channel<int>(2);
    test_scheduler s;
    std::optional<std::size_t> index;
    std::optional<int> value;
    s.spawn([](mpmc::receiver<int>& ra, mpmc::receiver<int>& rb, std::optional<std::size_t>& idx,
               std::optional<int>& v) -> task<void> {
      auto r = co_await when_any(ra.recv(), rb.recv());
      idx = r.index();
      if (r.index() == 0) v = *r.get<0>();
      if (r.index() == 1) v = *r.get<1>();
    }(a.rx, b.rx, index, value));
    s.run();
    s.at(test_point::claimed_for_wake, [&] { put(winner == 0 ? b.tx : a.tx, 8); });
    put(winner == 0 ? a.tx : b.tx, 7);
    EXPECT_EQ(s.pending_actions(), 0U);
    s.run();
    EXPECT_EQ(index, static_cast<std::size_t>(winner));
    EXPECT_EQ(value, 7);
    EXPECT_TRUE(reoffered.ids().empty()) << "8 was bound to the losing branch, then given back";
    EXPECT_EQ(take(winner == 0 ? b.rx : a.rx), 8);
    expect_free_capacity(a.tx, 2);
    expect_free_capacity(b.tx, 2);
  }
}

// Close (by either half) while a send writes its value, with three receives waiting: the send
// was accepted, so the first receive gets its value; the others end closed once it is taken.
TEST(MpmcBoundedRace, CloseWhileASendWritesItsValueWithReceivesWaiting) {
  for (const bool by_receiver : {false, true}) {
    SCOPED_TRACE(by_receiver);
    count_scope counts;
    fixture<counted> f(2);
    auto& a = f.recv(1, plain);
    auto& b = f.recv(2, stoppable);
    auto& c = f.recv(3, plain);
    counted::at_move(1, [&f, by_receiver] {
      if (by_receiver) {
        f.copies.back().close();
      } else {
        f.c.tx.close();
      }
      EXPECT_TRUE(f.c.rx.is_closed());
      EXPECT_TRUE(f.c.tx.try_send(counted(2)).closed());
      EXPECT_EQ(f.s.ready_count(), 0U) << "nothing is drained while the value is written";
    });
    put(f.c.tx, 1);
    f.s.run();
    expect_got(a, 1);
    expect_ended(b, wait_status::closed);
    expect_ended(c, wait_status::closed);
    EXPECT_TRUE(f.c.rx.try_recv().closed());
  }
}

TEST(MpmcBoundedRace, CloseWhileAReceiveIsWokenForTheLastValue) {
  close_while_a_receive_is_woken_for_the_last_value<bounded_kind>();
}

// Close with sends waiting for capacity and a value queued: the sends end disconnected with their
// values, the queued value still goes to a receive, and then every receive ends closed.
TEST(MpmcBoundedRace, CloseEndsWaitingSendsDisconnectedAndReceivesDrainWhatWasAccepted) {
  count_scope counts;
  fixture<counted> f(1, 1);
  auto& s1 = f.send(1, plain);
  auto& s2 = f.send(2, stoppable);
  reserve_probe<counted> r;
  f.s.spawn(reserve_into(f.c.tx, r));
  f.s.run();
  expect_waiting(s1);
  expect_waiting(r);
  f.c.rx.close();
  f.s.run();
  expect_handed_back(s1, send_status::closed);
  expect_handed_back(s2, send_status::closed);
  EXPECT_EQ(r.status, wait_status::closed);
  auto& a = f.recv(3, plain);
  auto& b = f.recv(4, plain);
  expect_got(a, 100);
  expect_ended(b, wait_status::closed);
  EXPECT_TRUE(f.c.rx.try_recv().closed());
}

TEST(MpmcBoundedRace, CloseWhileAReceiveRegisters) {
  the_end_while_a_receive_registers<bounded_kind>([](auto& tx) { tx.close(); });
}

// Permits held at close still send, and their values are received; receives end closed once every
// unit is back (used and received, or returned).
TEST(MpmcBoundedRace, PermitsHeldAtCloseStillSendAndTheirValuesAreReceived) {
  for (const bool return_one : {false, true}) {
    SCOPED_TRACE(return_one);
    fixture<> f(5);
    auto plain_permit = f.c.tx.try_reserve();
    auto owned = f.c.tx.try_reserve_owned();
    auto many = f.c.tx.try_reserve(2);
    auto spare = f.c.tx.try_reserve();
    ASSERT_TRUE(plain_permit.ok() && owned.ok() && many.ok() && spare.ok());
    f.c.tx.close();
    EXPECT_TRUE(f.c.tx.try_send(9).closed());
    EXPECT_TRUE(f.c.tx.try_reserve().closed());
    std::vector<recv_probe<int>*> r;
    for (int i = 1; i <= 5; ++i) r.push_back(&f.recv(i, i % 2 == 0));
    EXPECT_TRUE(plain_permit->send(1).ok());
    EXPECT_TRUE(owned->send(2).ok());
    EXPECT_TRUE(many->send(3).ok());
    EXPECT_TRUE(many->send(4).ok());
    f.s.run();
    for (int i = 0; i < 4; ++i) expect_got(*r[i], i + 1);
    expect_waiting(*r[4]);  // the spare unit is still out
    if (return_one) {
      drop(*spare);
    } else {
      EXPECT_TRUE(spare->send(5).ok());
    }
    f.s.run();
    if (return_one) {
      expect_ended(*r[4], wait_status::closed);
    } else {
      expect_got(*r[4], 5);
    }
    EXPECT_TRUE(f.c.rx.try_recv().closed());
  }
}

// The last receiver goes (its copies one after the other) while sends and a reservation wait for
// capacity: they end disconnected, the sends with their values; the value queued is destroyed once.
TEST(MpmcBoundedRace, TheLastReceiverGoingWakesWaitingSendsDisconnectedWithTheirValues) {
  count_scope counts;
  fixture<counted> f(1, 1);
  mpmc::receiver<counted> copy = f.c.rx;
  auto& s1 = f.send(1, plain);
  auto& s2 = f.send(2, stoppable);
  reserve_probe<counted> r;
  f.s.spawn(reserve_into(f.c.tx, r));
  f.s.run();
  drop(f.c.rx);  // not the last receiver
  f.s.run();
  expect_waiting(s1);
  expect_waiting(s2);
  expect_waiting(r);
  EXPECT_EQ(counts.values(), 3);
  drop(copy);  // the last one
  EXPECT_EQ(counts.values(), 2) << "the value received by nobody is destroyed now";
  f.s.run();
  expect_handed_back(s1, send_status::closed);
  expect_handed_back(s2, send_status::closed);
  EXPECT_EQ(r.status, wait_status::closed);
  EXPECT_FALSE(r.permit.has_value());
  EXPECT_TRUE(f.c.tx.is_closed());
}

// A unit was granted to a waiting send (a permit was returned); the last receiver goes before the
// send is resolved (at the test point) or before it resumes: the send hands its value back.
TEST(MpmcBoundedRace, TheLastReceiverGoingWhileAGrantedSendIsAboutToResumeHandsItsValueBack) {
  for (const bool at_point : {false, true}) {
    SCOPED_TRACE(at_point);
    count_scope counts;
    fixture<counted> f(1);
    auto permit = f.c.tx.try_reserve();
    ASSERT_TRUE(permit.ok());
    auto& a = f.send(1, stoppable);
    if (at_point) {
      f.s.at(test_point::claimed_for_wake, [&f] { drop(f.c.rx); });
      drop(*permit);
      EXPECT_EQ(f.s.pending_actions(), 0U);
    } else {
      drop(*permit);
      ASSERT_EQ(f.s.ready_count(), 1U);
      drop(f.c.rx);
    }
    f.s.run();
    expect_handed_back(a, send_status::closed);
    EXPECT_EQ(counts.values(), 1);  // the value handed back
  }
}

// The last receiver goes while a send waiting for capacity registers: it ends disconnected with
// its value, without suspending.
TEST(MpmcBoundedRace, TheLastReceiverGoingWhileASendRegistersEndsItDisconnected) {
  for (const test_point point : registering) {
    for (const bool can_stop : {plain, stoppable}) {
      SCOPED_TRACE(testing::Message() << "point " << static_cast<int>(point) << ", stoppable " << can_stop);
      count_scope counts;
      fixture<counted> f(1, 1);
      f.s.at(point, [&f] { drop(f.c.rx); });
      auto& p = f.start_send(1, can_stop);
      EXPECT_EQ(f.s.run(), 1U);
      EXPECT_EQ(f.s.pending_actions(), 0U);
      expect_handed_back(p, send_status::closed);
      EXPECT_EQ(counts.values(), 1);  // only the value handed back
    }
  }
}

TEST(MpmcBoundedRace, TheLastSenderGoingLetsReceivesDrainThenEndsThemClosed) {
  the_last_sender_going_lets_receives_drain_then_ends_them_closed<bounded_kind>();
}

TEST(MpmcBoundedRace, ValuesQueuedWhenTheLastSenderGoesAreStillReceivedByAnyCopy) {
  values_queued_when_the_last_sender_goes_are_still_received_by_any_copy<bounded_kind>();
}

TEST(MpmcBoundedRace, TheLastSenderGoingWhileAReceiveRegistersEndsItClosed) {
  the_end_while_a_receive_registers<bounded_kind>([](auto& tx) { drop(tx); });
}

// Owned permits are producers: after every sender is gone they still send, and receives end
// closed only once the last of them is gone.
TEST(MpmcBoundedRace, OwnedPermitsKeepTheChannelOpenAfterEverySenderIsGone) {
  fixture<> f(4);
  auto owned = f.c.tx.try_reserve_owned(2);
  ASSERT_TRUE(owned.ok());
  drop(f.c.tx);
  EXPECT_FALSE(f.c.rx.is_closed());
  EXPECT_EQ(f.c.rx.sender_count(), 1U);
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, plain);
  EXPECT_TRUE(owned->send(1).ok());
  f.s.run();
  expect_got(a, 1);
  expect_waiting(b);
  drop(*owned);  // the last producer, with one unit unused
  f.s.run();
  expect_ended(b, wait_status::closed);
}

// A receive on another thread comes while this thread is still writing place 0 and place 1 is
// published: it does not claim place 1 ahead of place 0, and does not wait for the write either
// (a receive only takes published places): it queues (test point `published`, reached while the
// write is held), and the write, once published, delivers place 0 to it. Place 1 stays for the
// next receive.
TEST(MpmcBoundedRace, AReceiveQueuesBehindAPlaceAnotherThreadIsWritingAndItsPublicationDeliversIt) {
  for (const int form : {0, 1, 2}) {
    SCOPED_TRACE(form);
    count_scope counts;
    auto c = make_channel<counted>(3);
    mpmc::sender<counted> other_tx = c.tx;
    mpmc::receiver<counted> other_rx = c.rx;
    std::latch receiver_waits(1);
    std::thread receiving;
    std::optional<int> got;
    asyncband::stop_source never;
    counted::at_move(1, [&] {  // this thread's write of place 0
      receiving = std::thread([&] {
        put(other_tx, 2);  // place 1: published
        const thread_hook hook(test_point::published, [&] { receiver_waits.count_down(); });
        std::optional<result<counted>> r;
        if (form == 0) r.emplace(other_rx.recv_blocking());
        if (form == 1) r.emplace(other_rx.recv_blocking(never.get_token()));
        if (form == 2) r.emplace(block_on(other_rx.recv()));
        if (r->ok()) got = (*r)->id();
      });
      receiver_waits.wait();  // the receive is queued
      EXPECT_EQ(c.rx.len(), 2U);
    });
    put(c.tx, 1);
    receiving.join();
    EXPECT_EQ(got, 1);
    EXPECT_EQ(take(c.rx), 2);
    EXPECT_TRUE(c.rx.try_recv().empty());
    expect_free_capacity(c.tx, 3);
  }
}

// A receive inside its own thread's write of the place at the ticket (code the write resumed
// inline) finds nothing to take now, and does not wait for that write: a try_recv is empty, and
// a receive that waits is delivered the value once the write is published.
TEST(MpmcBoundedRace, AReceiveInsideItsOwnThreadsWriteOfThePlaceAtTheTicketDoesNotWaitForIt) {
  count_scope counts;
  auto c = make_channel<counted>(3);
  std::optional<result<counted>> got;
  counted::at_move(1, [&] {
    put(c.tx, 2);  // place 1, published while place 0 is being written
    EXPECT_TRUE(c.rx.try_recv().empty()) << "place 0 is not published yet";
    // Queues: nothing to take without overtaking place 0. No scheduler: resumed inline.
    [](mpmc::receiver<counted>& rx, std::optional<result<counted>>& out) -> bare_coroutine {
      out.emplace(co_await rx.recv());
    }(c.rx, got);
    EXPECT_FALSE(got.has_value());
  });
  put(c.tx, 1);  // its publication delivers place 0 to the waiting receive, inline
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->ok());
  EXPECT_EQ((*got)->id(), 1);
  EXPECT_EQ(take(c.rx), 2);
}

// Regression: the last receiver going inside this thread's construction of a value (place 0),
// with a later value published (place 1). The receiver's going destroyed the values received by
// nobody by claiming them one by one, and so waited for place 0's write, further up its own
// stack: a debug build asserted ("a receive from inside the construction"), a release build
// hung. Now it destroys the values up to the first place still being written, and the rest go
// with the channel.
TEST(MpmcBoundedRace, TheLastReceiverGoingInsideItsThreadsWriteOfAnEarlierPlaceDoesNotWaitForIt) {
  count_scope counts;
  auto c = make_channel<counted>(3);
  counted::at_move(1, [&] {
    put(c.tx, 2);
    drop(c.rx);
    EXPECT_EQ(counts.values(), 2) << "1 is being moved, 2 waits behind it";
  });
  put(c.tx, 1);  // accepted: it was sent before the receiver went
  EXPECT_EQ(counts.values(), 2);
  auto back = c.tx.try_send(counted(3));
  EXPECT_TRUE(back.closed());
  drop(c.tx);                     // the last reference: 1 and 2 go with the channel
  EXPECT_EQ(counts.values(), 1);  // only `back`
}

// The last receiver goes while another thread writes a value: that value is accepted, and
// destroyed once, with the channel.
TEST(MpmcBoundedRace, TheLastReceiverGoingWhileASendWritesDestroysTheValueOnceWithTheChannel) {
  count_scope counts;
  auto c = make_channel<counted>(3);
  put(c.tx, 1);
  counted::at_move(1, [&] {
    drop(c.rx);
    EXPECT_EQ(counts.values(), 1);  // 1 was destroyed with the receiver; 2 is being moved
  });
  put(c.tx, 2);
  EXPECT_EQ(counts.values(), 1);  // 2, in the channel
  drop(c.tx);
  EXPECT_EQ(counts.values(), 0);
}

// ---------------------------------------------------------------------------------------------
// when_any: a receive that loses takes nothing

TEST(MpmcBoundedWhenAny, AReceiveThatLosesAtOnceTakesNothing) {
  a_receive_that_loses_at_once_takes_nothing<bounded_kind>();
}

TEST(MpmcBoundedWhenAny, AReceiveThatLosesWhileQueuedTakesNothingAndDoesNotHoldUpOthers) {
  a_receive_that_loses_while_queued_takes_nothing_and_does_not_hold_up_others<bounded_kind>();
}

TEST(MpmcBoundedWhenAny, AReceiveCompletingDuringItsPublicationAfterTheOtherBranchWonPassesItOn) {
  a_receive_completing_during_its_publication_after_the_other_branch_won_passes_it_on<bounded_kind>();
}

TEST(MpmcBoundedWhenAny, TwoReceivesOfTwoChannels) {
  two_receives_of_two_channels<bounded_kind>();
}

TEST(MpmcBoundedWhenAny, TwoReadyReceivesTakeOnlyTheFirstValue) {
  two_ready_receives_take_only_the_first_value<bounded_kind>();
}

// A send to a full channel loses: its value comes back in the result, and no unit is taken.
TEST(MpmcBoundedWhenAny, ASendThatLosesHandsItsValueBack) {
  auto c = make_channel<std::unique_ptr<int>>(1);
  EXPECT_TRUE(c.tx.try_send(std::make_unique<int>(1)).ok());  // full
  asyncband::auto_reset_event ev(true);
  auto r = block_on(when_any(c.tx.send(std::make_unique<int>(2)), ev.wait()));
  ASSERT_EQ(r.index(), 1U);
  ASSERT_TRUE(r.has<0>());
  EXPECT_TRUE(r.get<0>().cancelled());
  ASSERT_NE(r.get<0>().value(), nullptr);
  EXPECT_EQ(*r.get<0>().value(), 2);
  EXPECT_EQ(c.rx.len(), 1U);
}

// ---------------------------------------------------------------------------------------------
// A payload whose move constructor throws

/// The ways to send one value; each throws on the value's move into the ring (the sends that
/// hold the value in an awaiter or a parameter first move it once more).
enum class send_form { try_send, send_blocking, send_timeout, permit, owned_permit, await, await_stoppable };
constexpr send_form all_send_forms[] = {
    send_form::try_send,     send_form::send_blocking, send_form::send_timeout,   send_form::permit,
    send_form::owned_permit, send_form::await,         send_form::await_stoppable};

/// Sends counted(id) with `form`; the move into the ring throws. Returns how it ended (an
/// exception propagates).
send_result<counted> send_throwing(send_form form, mpmc::sender<counted>& tx, int id) {
  asyncband::stop_source never;
  switch (form) {
    case send_form::try_send:
      return tx.try_send(counted(id, 1));
    case send_form::send_blocking:
      return tx.send_blocking(counted(id, 1));
    case send_form::send_timeout:
      return tx.send_timeout(counted(id, 1), 1h);
    case send_form::permit: {
      auto p = tx.try_reserve();
      EXPECT_TRUE(p.ok());
      return p->send(counted(id, 1));
    }
    case send_form::owned_permit: {
      auto p = tx.try_reserve_owned();
      EXPECT_TRUE(p.ok());
      return p->send(counted(id, 2));  // a parameter of its own first
    }
    case send_form::await:
      return block_on(tx.send(counted(id, 2)));  // the awaiter holds it first
    case send_form::await_stoppable:
      return block_on(tx.send(counted(id, 2), never.get_token()));
  }
  return {};
}

// The send propagates the exception and nothing is received; its place is empty, and its unit of
// capacity is back at once, without any receive or later value: the whole capacity can be sent.
// Regression: the empty place kept its unit until a receive holding a unit for a later value
// passed it, so a capacity-1 channel stayed full for good after one throwing send.
TEST(MpmcBoundedThrowing, AThrowingMoveInASendLeavesTheCapacityExactAndLosesNothing) {
  for (const std::size_t capacity : {1U, 3U}) {
    for (const send_form form : all_send_forms) {
      SCOPED_TRACE(testing::Message() << "capacity " << capacity << ", form " << static_cast<int>(form));
      count_scope counts;
      auto c = make_channel<counted>(capacity);
      EXPECT_THROW((void)send_throwing(form, c.tx, 1), payload_error);
      EXPECT_EQ(counts.values(), 0);
      EXPECT_EQ(c.rx.len(), 0U);
      EXPECT_TRUE(c.rx.try_recv().empty());
      expect_free_capacity(c.tx, capacity);
      for (int i = 0; i < static_cast<int>(capacity); ++i) put(c.tx, 2 + i);
      EXPECT_TRUE(c.tx.try_send(counted(99)).full());
      EXPECT_EQ(take_all(c.rx), range(2, 2 + static_cast<int>(capacity)));
      expect_free_capacity(c.tx, capacity);
    }
  }
}

// Empty places between values: each is passed by the receive of the value before it, so that the
// capacity is whole again once the values are received.
TEST(MpmcBoundedThrowing, AThrowingSendBetweenValuesKeepsTheOthers) {
  count_scope counts;
  auto c = make_channel<counted>(4);
  mpmc::receiver<counted> other = c.rx;
  put(c.tx, 1);
  EXPECT_THROW((void)c.tx.try_send(counted(2, 1)), payload_error);
  put(c.tx, 3);
  EXPECT_THROW((void)c.tx.try_send(counted(4, 1)), payload_error);
  EXPECT_EQ(take(c.rx), 1);
  EXPECT_EQ(take(other), 3);
  EXPECT_TRUE(c.rx.try_recv().empty());
  EXPECT_EQ(c.rx.len(), 0U);
  expect_free_capacity(c.tx, 4);
  drop(c.tx);
  EXPECT_TRUE(c.rx.try_recv().closed());
}

// Receives wait across a throwing send: it wakes none of them, its unit is back, and the next
// value goes to the first of them.
TEST(MpmcBoundedThrowing, WaitingReceivesSleepThroughAThrowingSendAndGetTheNextValues) {
  count_scope counts;
  fixture<counted> f(1);
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, stoppable);
  EXPECT_THROW((void)f.c.tx.try_send(counted(7, 1)), payload_error);
  EXPECT_EQ(f.s.ready_count(), 0U);
  auto& s = f.send(10, plain);  // capacity 1: it needs the unit the empty place had
  expect_sent(s);
  f.s.run();
  expect_got(a, 10);
  expect_waiting(b);
  put(f.c.tx, 11);
  f.s.run();
  expect_got(b, 11);
}

// Regression: on a closed channel with receives waiting and one permit outstanding, the permit's
// send throws. Its empty place kept its unit of capacity (no value followed to let a receive
// pass it), so the channel never drained and the receives waited for good although nothing
// could come any more.
TEST(MpmcBoundedThrowing, AClosedChannelWhoseLastPermitsSendThrowsEndsItsReceivesClosed) {
  count_scope counts;
  fixture<counted> f(2);
  auto permit = f.c.tx.try_reserve();
  ASSERT_TRUE(permit.ok());
  f.c.rx.close();
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, stoppable);
  EXPECT_THROW((void)permit->send(counted(1, 1)), payload_error);
  f.s.run();
  expect_ended(a, wait_status::closed);
  expect_ended(b, wait_status::closed);
  EXPECT_TRUE(f.c.rx.try_recv().closed());
}

// As above, with a value accepted before the empty place: the receive of that value passes the
// empty place, and the next receive ends closed.
TEST(MpmcBoundedThrowing, AnEmptyPlaceBehindAValueIsPassedByTheValuesReceive) {
  count_scope counts;
  fixture<counted> f(3);
  auto permit = f.c.tx.try_reserve(2);
  ASSERT_TRUE(permit.ok());
  f.c.rx.close();
  EXPECT_TRUE(permit->send(counted(1)).ok());
  EXPECT_THROW((void)permit->send(counted(2, 1)), payload_error);
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, plain);
  expect_got(a, 1);
  expect_ended(b, wait_status::closed);
}

TEST(MpmcBoundedThrowing, AThrowingMoveInRecvLeavesTheValueForTheNextReceiveBeforeNewerOnes) {
  a_throwing_move_in_recv_leaves_the_value_for_the_next_receive_before_newer_ones<bounded_kind>();
}

TEST(MpmcBoundedThrowing, AReceiveWhoseMoveThrowsAfterAnotherOvertookLeavesTheValueForTheNextOne) {
  a_receive_whose_move_throws_after_another_overtook_leaves_the_value_for_the_next_one<bounded_kind>();
}

// Regression (found by the seeded soak, in the first version of the fix above): an empty place
// behind a value whose receive throws. The receive passed the empty place before moving its
// value out; the move threw and the value was parked behind the ticket, with a unit of capacity
// free, so the next send came round the ring (two cells) to the parked value's cell and waited
// there for a receive, on the only thread: it hung. Empty places are now passed only after the
// receive's value is out, and not while a parked value holds its cell.
/// Until `done()` holds, or fails after a generous limit (a hang would otherwise stop the run).
template <class Done>
void spin_until(Done done, const char* what) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > limit) {
      ADD_FAILURE() << "timed out waiting until " << what;
      return;
    }
    std::this_thread::yield();
  }
}

/// Refuses, on this thread, the storage a park moves its cell to: the value then holds its cell
/// (the fallback when that allocation fails).
class relocation_refused {
 public:
  relocation_refused() noexcept { mpmc::detail::refuse_relocation_for_tests = true; }
  relocation_refused(const relocation_refused&) = delete;
  relocation_refused& operator=(const relocation_refused&) = delete;
  ~relocation_refused() { mpmc::detail::refuse_relocation_for_tests = false; }
};

/// The scenario below; `refuse`: the parked value holds its cell (no storage to move it to).
void empty_places_behind_a_parked_value(bool refuse) {
  count_scope counts;
  auto c = make_channel<counted>(2);
  EXPECT_THROW((void)c.tx.try_send(counted(1, 1)), payload_error);  // place 0: empty, passed at once
  EXPECT_TRUE(c.tx.try_send(counted(2, 2)).ok());                   // place 1: its receive throws
  EXPECT_THROW((void)c.tx.try_send(counted(3, 1)), payload_error);  // place 2: empty, behind 2
  {
    std::optional<relocation_refused> refused;
    if (refuse) refused.emplace();
    EXPECT_THROW((void)c.rx.try_recv(), payload_error);  // 2 is parked
  }
  expect_free_capacity(c.tx, 0);              // the parked value and the empty place hold the two units
  if (::testing::Test::HasFailure()) return;  // a send now would come round to the parked value's cell
  EXPECT_EQ(take(c.rx), 2);                   // then passes the empty place
  expect_free_capacity(c.tx, 2);
  put(c.tx, 4);  // place 3, in the cell the parked value had
  put(c.tx, 5);
  EXPECT_EQ(take_all(c.rx), (std::vector<int>{4, 5}));
  EXPECT_EQ(c.rx.len(), 0U);
}

TEST(MpmcBoundedThrowing, EmptyPlacesBehindAParkedValueArePassedOnlyOnceItIsTaken) {
  empty_places_behind_a_parked_value(false);
}

TEST(MpmcBoundedThrowing, EmptyPlacesBehindAParkedValueHoldingItsCellArePassedOnlyOnceItIsTaken) {
  empty_places_behind_a_parked_value(true);
}

/// A parked value (as above, on a ring of two cells, the receive overtaken) and a send (another
/// thread) that comes round the ring to its cell. `refuse`: no storage to move the cell to.
void a_send_coming_round_to_a_parked_values_cell(bool refuse) {
  count_scope counts;
  auto c = make_channel<counted>(2);
  mpmc::receiver<counted> other = c.rx;
  EXPECT_TRUE(c.tx.try_send(counted(1, 2)).ok());  // place 0
  put(c.tx, 2);                                    // place 1
  counted::at_move(1, [&] { EXPECT_EQ(take(other), 2); });
  {
    std::optional<relocation_refused> refused;
    if (refuse) refused.emplace();
    EXPECT_THROW((void)c.rx.try_recv(), payload_error);  // 1 parked
  }
  std::atomic<bool> sent{false};
  std::thread sender([&] {
    put(c.tx, 3);  // place 2: the cell the parked value had (or has, if refused)
    sent = true;
  });
  if (!refuse) {
    spin_until([&] { return sent.load(); }, "the send was delivered without a receive");
    EXPECT_EQ(c.rx.len(), 2U);
    expect_free_capacity(c.tx, 0);
  }
  EXPECT_EQ(take(c.rx), 1);  // the parked value first (if refused, this lets the send go on)
  sender.join();
  EXPECT_TRUE(sent.load());
  EXPECT_EQ(take(other), 3);
  EXPECT_TRUE(c.rx.try_recv().empty());
  expect_free_capacity(c.tx, 2);
  EXPECT_EQ(counts.values(), 0);
}

// A parked value leaves its cell: a send that comes round the ring to that cell is delivered at
// once, before anyone takes the parked value, which still comes first. Nothing is lost or
// received twice.
TEST(MpmcBoundedThrowing, ASendComingRoundToAParkedValuesCellIsDeliveredAtOnce) {
  a_send_coming_round_to_a_parked_values_cell(false);
}

// The fallback: if the storage to move the cell to cannot be allocated, the parked value holds
// its cell, and a send that comes round the ring to it waits until the next receive takes it
// (contract), then is delivered.
TEST(MpmcBoundedThrowing, WithoutStorageASendComingRoundToAParkedValuesCellWaitsForItsTake) {
  a_send_coming_round_to_a_parked_values_cell(true);
}

// Regression (race review): a receive whose move throws parks its value, after receives on
// another copy overtook it and a send (another thread) came round the ring to its cell. A
// receive on a third thread holds the unit of a later value and waits for that send's place.
// Nobody else receives. When the parked value held its cell, the send waited for a receive to
// take it and the receive waited for the send: both hung. The cell now goes on at once.
TEST(MpmcBoundedThrowing, AReceiveBehindASendOnAParkedValuesCellIsNotLeftWaiting) {
  count_scope counts;
  auto c = make_channel<counted>(4);
  mpmc::receiver<counted> other = c.rx;
  mpmc::receiver<counted> third = c.rx;
  mpmc::sender<counted> other_tx = c.tx;
  EXPECT_TRUE(c.tx.try_send(counted(1, 2)).ok());  // place 0: its receive's move throws
  for (int v = 2; v <= 4; ++v) put(c.tx, v);       // places 1..3
  std::thread wrapping;
  std::thread receiving;
  std::atomic<bool> sent{false};
  std::atomic<int> got{-1};
  std::latch receive_waits(1);
  counted::at_move(1, [&] {  // inside the receive's move of 1, which then throws
    EXPECT_EQ(take(other), 2);
    EXPECT_EQ(take(other), 3);
    EXPECT_EQ(take(other), 4);
    wrapping = std::thread([&] {
      put(other_tx, 5);  // place 4: the cell of place 0, whose value is being moved out
      sent = true;
    });
    spin_until([&] { return c.rx.len() == 1; }, "the send took place 4");
    put(c.tx, 6);  // place 5: a unit of items for the receive below
    receiving = std::thread([&] {
      const thread_hook hook(test_point::published, [&] { receive_waits.count_down(); });
      auto r = third.recv_blocking();
      got = r.ok() ? r->id() : 0;
    });
    receive_waits.wait();  // it is queued: place 4, at the ticket, is not published
  });
  EXPECT_THROW((void)c.rx.try_recv(), payload_error);  // 1 is parked
  spin_until([&] { return got.load() != -1; }, "the waiting receive got a value");
  wrapping.join();  // its send goes on once the park handed the cell on (were it still waiting, this hangs)
  receiving.join();
  const int first = take(c.rx);  // the value that send published
  EXPECT_TRUE(sent.load());
  EXPECT_EQ(got.load(), 1) << "the parked value goes to the next receive: the waiting one";
  EXPECT_EQ(first, 5);
  EXPECT_EQ(take_all(c.rx), (std::vector<int>{6}));
  expect_free_capacity(c.tx, 4);
  EXPECT_EQ(counts.values(), 0);
}

/// How the fuse scenarios (support/fuse_payload.hpp) use the channel. A receive that threw keeps
/// its value's unit: only the units of the values received are back.
struct mpmc_fuse_channel {
  static auto make(std::size_t capacity) { return mpmc::bounded<fuse_payload>(capacity); }
  static bool send(mpmc::sender<fuse_payload>& tx, int v) { return tx.try_send(fuse_payload(v)).ok(); }
  static void expect_value_held(mpmc::sender<fuse_payload>& tx, mpmc::receiver<fuse_payload>& rx) {
    EXPECT_GE(rx.len(), 1U);
    EXPECT_TRUE(tx.try_reserve(tx.capacity() - rx.len() + 1).full()) << "its unit stays taken";
  }
  static void expect_drained(mpmc::sender<fuse_payload>& tx, mpmc::receiver<fuse_payload>& /*unused*/) {
    EXPECT_TRUE(tx.try_reserve(tx.capacity()).ok()) << "every unit is back";
  }
};

TEST(MpmcBoundedThrowing, EveryReceiveFormMovesOnceAndTheNthMoveThrowingLosesNothing) {
  every_receive_form_with_the_nth_move_throwing<mpmc_fuse_channel>();
}

TEST(MpmcBoundedThrowing, AWaitingReceiveWhoseMoveThrowsLeavesTheValue) {
  awaiting_receive_whose_move_throws_leaves_the_value<mpmc_fuse_channel>();
}

// ---------------------------------------------------------------------------------------------
// Blocking twins

TEST(MpmcBoundedBlocking, RecvBlockingOfTwoThreadsIsWokenBySendsFromAnotherThread) {
  recv_blocking_of_two_threads_is_woken_by_sends_from_another_thread<bounded_kind>();
}

TEST(MpmcBoundedBlocking, RecvBlockingWithAStopTokenIsCancelledFromAnotherThreadAndTakesNothing) {
  recv_blocking_with_a_stop_token_is_cancelled_from_another_thread_and_takes_nothing<bounded_kind>();
}

TEST(MpmcBoundedBlocking, RecvTimeoutTimesOutAndTheValueIsReceivedLaterByAnotherCopy) {
  recv_timeout_times_out_and_the_value_is_received_later_by_another_copy<bounded_kind>();
}

TEST(MpmcBoundedBlocking, RecvTimeoutIsWokenByASendFromAnotherThread) {
  recv_timeout_is_woken_by_a_send_from_another_thread<bounded_kind>();
}

TEST(MpmcBoundedBlocking, SendBlockingWaitsForCapacityFreedOnAnotherThread) {
  auto c = make_channel<int>(1);
  put(c.tx, 1);
  std::latch waiting(1);
  std::optional<send_status> status;
  std::thread sender([&] {
    const thread_hook hook(test_point::before_arm, [&waiting] { waiting.count_down(); });
    status = c.tx.send_blocking(2).status();
  });
  waiting.wait();
  EXPECT_EQ(take(c.rx), 1);
  sender.join();
  EXPECT_EQ(status, send_status::ok);
  EXPECT_EQ(take(c.rx), 2);
}

TEST(MpmcBoundedBlocking, SendBlockingWithAStopTokenIsCancelledFromAnotherThreadWithTheValueBack) {
  count_scope counts;
  auto c = make_channel<counted>(1);
  put(c.tx, 1);
  asyncband::stop_source stop;
  std::latch waiting(1);
  std::optional<send_status> status;
  int back = -1;
  std::thread sender([&] {
    const thread_hook hook(test_point::before_arm, [&waiting] { waiting.count_down(); });
    auto r = c.tx.send_blocking(counted(2), stop.get_token());
    status = r.status();
    if (!r.ok()) back = r.value().id();
  });
  waiting.wait();
  std::thread([&stop] { stop.request_stop(); }).join();
  sender.join();
  EXPECT_EQ(status, send_status::cancelled);
  EXPECT_EQ(back, 2);
  EXPECT_EQ(take(c.rx), 1);
  EXPECT_TRUE(c.rx.try_recv().empty());
}

TEST(MpmcBoundedBlocking, SendTimeoutTimesOutWithTheValueBack) {
  count_scope counts;
  auto c = make_channel<counted>(1);
  put(c.tx, 1);
  auto r = c.tx.send_timeout(counted(2), 1ms);
  EXPECT_TRUE(r.timed_out());
  EXPECT_EQ(r.value().id(), 2);
  auto now = c.tx.send_timeout(counted(3), 0ms);
  EXPECT_TRUE(now.timed_out());
  EXPECT_EQ(now.value().id(), 3);
  EXPECT_EQ(take(c.rx), 1);
  EXPECT_TRUE(c.rx.try_recv().empty());
}

TEST(MpmcBoundedBlocking, SendTimeoutCompletesWhenAnotherThreadFreesAUnit) {
  auto c = make_channel<int>(1);
  put(c.tx, 1);
  std::latch waiting(1);
  std::optional<send_status> status;
  std::thread sender([&] {
    const thread_hook hook(test_point::before_arm, [&waiting] { waiting.count_down(); });
    status = c.tx.send_timeout(2, 1h).status();
  });
  waiting.wait();
  EXPECT_EQ(take(c.rx), 1);
  sender.join();
  EXPECT_EQ(status, send_status::ok);
  EXPECT_EQ(take(c.rx), 2);
}

TEST(MpmcBoundedBlocking, ABlockedReceiveIsEndedClosedByTheLastSenderGoingOnAnotherThread) {
  a_blocked_receive_is_ended_closed_by_the_last_sender_going_on_another_thread<bounded_kind>();
}

// ---------------------------------------------------------------------------------------------
// "Last one out": a waiter resumed inline may destroy the channel's handles (its own, the last
// ones) at once, while the call that woke it is still inside the channel.

TEST(MpmcBoundedLifetime, AReceiveResumedInlineByThePublicationMayDestroyTheLastReceiver) {
  a_receive_resumed_inline_by_the_publication_may_destroy_the_last_receiver<bounded_kind>();
}

TEST(MpmcBoundedLifetime, AReceiveResumedInlineByTheLastSenderMayDestroyTheLastReceiver) {
  a_receive_resumed_inline_by_the_last_sender_may_destroy_the_last_receiver<bounded_kind>();
}

TEST(MpmcBoundedLifetime, AReceiveResumedInlineByTheLastUnitOfAClosedChannelMayDestroyTheReceiver) {
  auto c = make_channel<int>(2);
  auto permit = c.tx.try_reserve();
  ASSERT_TRUE(permit.ok());
  c.rx.close();
  auto rx = std::make_unique<mpmc::receiver<int>>(std::move(c.rx));
  std::optional<wait_status> status;
  [](std::unique_ptr<mpmc::receiver<int>>& receiver, std::optional<wait_status>& out) -> bare_coroutine {
    auto r = co_await receiver->recv();
    out = r.status();
    receiver.reset();
  }(rx, status);
  drop(*permit);
  EXPECT_EQ(status, wait_status::closed);
  EXPECT_EQ(rx, nullptr);
}

// The channel's handles in a World its waiter destroys (support/lifetime.hpp): the receive rows
// every MPMC channel has (add_receive_lifetime_rows), a receive woken by a co_await send, and a
// send woken by a receive or by the last receiver.
struct mpmc_sender_world {
  std::optional<mpmc::sender<int>> tx;
};

std::vector<lifetime::row> mpmc_lifetime_rows() {
  using namespace lifetime;
  using W = lifetime_world<bounded_kind>;
  using K = lifetime_waker<bounded_kind>;
  std::vector<row> rows;
  add_receive_lifetime_rows<bounded_kind>(rows, "try_send");
  rows.push_back(coroutine_row<W, K>(
      "co_send_wakes_receive", "ok", no_setup{}, [](W& w, asyncband::stop_token) { return w.ch.rx.recv(); },
      [](W* w, K&) { (void)block_on(w->ch.tx.send(1)); }));

  using S = mpmc_sender_world;
  const auto full = [](S& w, K& k) {
    auto [tx, rx] = mpmc::bounded<int>(1);
    w.tx.emplace(std::move(tx));
    k.rx.emplace(std::move(rx));
    (void)w.tx->try_send(0);
  };
  const auto send = [](S& w, asyncband::stop_token) { return w.tx->send(2); };
  rows.push_back(
      coroutine_row<S, K>("try_recv_wakes_send", "ok", full, send, [](S*, K& k) { (void)k.rx->try_recv(); }));
  rows.push_back(coroutine_row<S, K>("co_recv_wakes_send", "ok", full, send,
                                     [](S*, K& k) { (void)block_on(k.rx->recv()); }));
  rows.push_back(coroutine_row<S, K>("last_receiver_gone_wakes_send", "closed", full, send,
                                     [](S*, K& k) { k.rx.reset(); }));
  rows.push_back(coroutine_row<S, K>("receiver_close_wakes_send", "closed", full, send,
                                     [](S*, K& k) { k.rx->close(); }));
  return rows;
}

ASYNCBAND_LIFETIME_ROWS(MpmcBoundedLifetimeRows, mpmc_lifetime_rows);

// ---------------------------------------------------------------------------------------------
// Misuse

TEST(MpmcBoundedMisuse, AwaitingAReceiveAgainThrowsLogicError) {
  awaiting_a_receive_again_throws_logic_error<bounded_kind>();
}

// ---------------------------------------------------------------------------------------------
// Seeded soak on the test scheduler (support/mpmc_soak.hpp) with the bounded channel's sends: a
// co_await send with or without a stop token, try_send until not full, reserve then send, an
// owned permit, a value whose move into the channel throws, or whose first move out of it throws.

task<void> soak_send(test_scheduler& s, mpmc::sender<counted>& tx, soak_world& w, soak_producer& me, int id,
                     int form, bool last) {
  switch (form) {
    case 0: {
      auto r = co_await tx.send(counted(id));
      me.finish(id, r);
      break;
    }
    case 1: {
      auto r = co_await tx.send(counted(id), w.stop.get_token());
      me.finish(id, r);
      break;
    }
    case 2: {
      std::optional<counted> value;
      value.emplace(id);
      for (;;) {
        auto r = tx.try_send(std::move(*value));
        if (!r.full()) {
          me.finish(id, r);
          break;
        }
        value.emplace(std::move(r.value()));
        co_await yield_to{s};
      }
      break;
    }
    case 3: {
      auto p = co_await tx.reserve(w.stop.get_token());
      if (!p.ok()) {
        me.never_accepted(id, false);
        break;
      }
      co_await yield_to{s};  // the permit is held across a step
      auto r = p->send(counted(id));
      me.finish(id, r);
      break;
    }
    case 5:    // a value whose move out of the channel throws once: parked for the next receive
    case 6: {  // a value whose move into the channel throws: an empty place
      try {
        auto r = tx.try_send(counted(id, form == 5 ? 2 : 1));
        me.finish(id, r);
      } catch (const payload_error&) {
        me.never_accepted(id, true);
      }
      break;
    }
    default: {
      auto p = co_await tx.reserve_owned();
      if (!p.ok()) {
        me.never_accepted(id, false);
        break;
      }
      if (last) drop(tx);  // its last send: the owned permit outlives the sender
      co_await yield_to{s};
      auto r = p->send(counted(id));
      me.finish(id, r);
      break;
    }
  }
}

TEST(MpmcBoundedStress, SeededSoakOnTheTestSchedulerDeliversOrHandsBackEveryValueExactlyOnce) {
  run_seeded_soak("mpmc", [](int index, const std::vector<std::atomic<int>>& finals, soak_world& w) {
    return soak_one_channel<bounded_kind>(index, finals, w, 8, soak_send);
  });
}

// ---------------------------------------------------------------------------------------------
// Bounded real-thread stress (support/mpmc_soak.hpp) with the bounded channel's sends: blocking,
// with a stop token or a timeout, try_send until not full, co_await send, reserve then send, and
// values whose move into the channel (or first move out of it) throws.

void stress_send_one(mpmc::sender<counted>& tx, stop_epoch& epoch, int id, int mode, thread_round_log& log) {
  switch (mode) {
    case 0: {
      auto r = tx.send_blocking(counted(id));
      log.finish(id, r);
      return;
    }
    case 1: {
      auto r = tx.send_blocking(counted(id), epoch.token());
      log.finish(id, r);
      return;
    }
    case 2: {
      auto r = tx.send_timeout(counted(id), 50us);
      log.finish(id, r);
      return;
    }
    case 3: {
      std::optional<counted> value;
      value.emplace(id);
      for (;;) {
        auto r = tx.try_send(std::move(*value));
        if (!r.full()) {
          log.finish(id, r);
          return;
        }
        value.emplace(std::move(r.value()));
        std::this_thread::yield();
      }
    }
    case 4: {
      auto r = block_on(tx.send(counted(id), epoch.token()));
      log.finish(id, r);
      return;
    }
    case 6:    // the first receive's move of it throws: parked for the next receive
    case 7: {  // its move into the channel throws: an empty place
      try {
        auto r = tx.try_send(counted(id, mode == 6 ? 2 : 1));
        log.finish(id, r);
      } catch (const payload_error&) {
        log.never_accepted(id, true);
      }
      return;
    }
    default: {
      auto p = block_on(tx.reserve(epoch.token()));
      if (!p.ok()) {
        log.never_accepted(id, false);
        return;
      }
      auto r = p->send(counted(id));
      log.finish(id, r);
      return;
    }
  }
}

TEST(MpmcBoundedStress, ThreadsSendReceiveCancelAndCloseDeliverOrHandBackEveryValueExactlyOnce) {
  run_thread_stress("mpmc",
                    [](int round, const std::vector<std::atomic<int>>& finals, thread_stress_totals& totals) {
                      return stress_round<bounded_kind>(
                          round, finals, 8, stress_send_one, [](int mode) { return mode == 6; }, totals);
                    });
}

// --- the senders' closed() wait ----------------------------------------------------------------

/// A coroutine awaiting tx.closed() (with a stop token if `stop` is given); `done` counts its
/// resumptions, `status` says how it ended.
bare_coroutine await_closed(mpmc::sender<int>& tx, int& done, std::optional<wait_status>& status,
                            asyncband::stop_token* stop = nullptr) {
  if (stop == nullptr) {
    co_await tx.closed();
    status = wait_status::ok;
  } else {
    auto r = co_await tx.closed(*stop);
    status = r.status();
  }
  ++done;
}

TEST(MpmcBoundedClosed, ClosedWaitsUntilAReceiverClosesTheChannel) {
  auto c = make_channel<int>(2);
  int done = 0;
  std::optional<wait_status> status;
  await_closed(c.tx, done, status);
  put(c.tx, 1);  // sends still succeed: not closed
  EXPECT_EQ(done, 0);
  c.rx.close();
  EXPECT_EQ(done, 1);
  EXPECT_EQ(status, wait_status::ok);
  EXPECT_EQ(take(c.rx), 1);  // what was accepted still drains
}

TEST(MpmcBoundedClosed, ClosedCompletesWhenTheLastReceiverGoesAndNotBefore) {
  auto c = make_channel<int>(2);
  std::optional<mpmc::receiver<int>> other(c.rx);
  int done = 0;
  std::optional<wait_status> status;
  await_closed(c.tx, done, status);
  drop(c.rx);
  EXPECT_EQ(done, 0);  // a receiver is left
  other.reset();
  EXPECT_EQ(done, 1);
  EXPECT_TRUE(c.tx.try_send(2).closed());
}

TEST(MpmcBoundedClosed, ClosedOnAClosedChannelCompletesAtOnceInEveryForm) {
  auto c = make_channel<int>(2);
  c.tx.close();
  int done = 0;
  std::optional<wait_status> status;
  await_closed(c.tx, done, status);
  EXPECT_EQ(done, 1);
  c.tx.closed_blocking();
  EXPECT_TRUE(c.tx.closed_blocking(asyncband::stop_token{}).ok());
  EXPECT_TRUE(c.tx.closed_timeout(std::chrono::milliseconds(0)).ok());
}

TEST(MpmcBoundedClosed, AStoppedClosedWaitEndsCancelledOnceAndALaterCloseFindsNobody) {
  auto c = make_channel<int>(2);
  asyncband::stop_source source;
  asyncband::stop_token token = source.get_token();
  int done = 0;
  std::optional<wait_status> status;
  await_closed(c.tx, done, status, &token);
  EXPECT_EQ(done, 0);
  source.request_stop();
  EXPECT_EQ(done, 1);
  EXPECT_EQ(status, wait_status::cancelled);
  c.rx.close();
  EXPECT_EQ(done, 1);
}

TEST(MpmcBoundedClosed, ClosedTimeoutTimesOutOnAnOpenChannel) {
  auto c = make_channel<int>(2);
  EXPECT_EQ(c.tx.closed_timeout(std::chrono::milliseconds(1)).status(), wait_status::timeout);
}

TEST(MpmcBoundedClosed, ClosedBlockingIsWokenByTheLastReceiverGoingOnAnotherThread) {
  auto c = make_channel<int>(2);
  std::latch waiting(1);
  std::thread t([&] {
    waiting.count_down();
    c.tx.closed_blocking();
  });
  waiting.wait();
  drop(c.rx);  // whether the thread sleeps yet or not, it returns
  t.join();
  EXPECT_TRUE(c.tx.is_closed());
}

TEST(MpmcBoundedClosed, AClosedWaitResumedInlineMayDestroyEveryHandleInsideTheClose) {
  count_scope counts;
  auto c = make_channel<counted>(2);
  auto tx = std::make_unique<mpmc::sender<counted>>(std::move(c.tx));
  auto rx = std::make_unique<mpmc::receiver<counted>>(std::move(c.rx));
  ASSERT_TRUE(tx->try_send(counted(1)).ok());
  bool done = false;
  [](std::unique_ptr<mpmc::sender<counted>>& sender, std::unique_ptr<mpmc::receiver<counted>>& receiver,
     bool& out) -> bare_coroutine {
    co_await sender->closed();
    sender.reset();    // inside the receiver's close(): the last sender
    receiver.reset();  // and the last receiver: the channel goes, with the value nobody received
    out = true;
  }(tx, rx, done);
  EXPECT_FALSE(done);
  rx->close();
  EXPECT_TRUE(done);
  EXPECT_EQ(tx, nullptr);
  EXPECT_EQ(rx, nullptr);
}

TEST(MpmcBoundedClosed, AClosedWaitResumedInlineByTheLastReceiverGoingMayDestroyTheLastSender) {
  auto c = make_channel<int>(2);
  auto tx = std::make_unique<mpmc::sender<int>>(std::move(c.tx));
  bool done = false;
  [](std::unique_ptr<mpmc::sender<int>>& sender, bool& out) -> bare_coroutine {
    co_await sender->closed();
    sender.reset();  // inside the last receiver's departure
    out = true;
  }(tx, done);
  drop(c.rx);
  EXPECT_TRUE(done);
  EXPECT_EQ(tx, nullptr);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Batch receives (issue 17): recv_many, try_recv_many and their blocking twins
// (support/recv_many.hpp).

namespace {

using namespace asyncband_test::recv_many_scenarios;

TEST(MpmcBoundedRecvMany, EveryFormAppendsInOrderUpToTheLimit) {
  every_form_appends_in_order_up_to_the_limit<bounded_kind>();
}
TEST(MpmcBoundedRecvMany, ALimitOfZeroYieldsZeroAtOnce) {
  a_limit_of_zero_yields_zero_at_once<bounded_kind>();
}
TEST(MpmcBoundedRecvMany, AWaitingBatchReceiveTakesTheValuesSentBeforeItRuns) {
  a_waiting_batch_receive_takes_the_values_sent_before_it_runs<bounded_kind>();
}
TEST(MpmcBoundedRecvMany, BatchesDrainAClosedChannelThenEndClosed) {
  batches_drain_a_closed_channel_then_end_closed<bounded_kind>();
}
TEST(MpmcBoundedRecvMany, ACancelledOrDestroyedBatchReceiveTakesNothing) {
  a_cancelled_or_destroyed_batch_receive_takes_nothing<bounded_kind>();
}
TEST(MpmcBoundedRecvMany, ABatchReceiveWokenThenStoppedPassesItsValueOn) {
  EXPECT_EQ(a_batch_receive_woken_then_stopped<bounded_kind>(), wait_status::cancelled);
}
// A batch receive and a single receive queued; an int value delivered to the batch receive
// (copied into its node), which is stopped before it resumes: the value goes to the receive
// behind it, once; the values sent later are there for a batch, and every unit comes back.
TEST(MpmcBoundedRecvMany, ABatchReceiveStoppedAfterAnIntWasCopiedIntoItPassesItToTheNextReceive) {
  const reoffered_values<int> reoffered;
  batch_fixture<bounded_kind> f(4);
  mpmc::receiver<int> rx_b = f.c.rx;
  many_probe<int> batch;
  recv_probe<int> next;
  f.start(batch, 4, stoppable);
  f.s.spawn(receive(rx_b, next));
  f.s.run();
  expect_waiting(batch);
  expect_waiting(next);
  put(f.c.tx, 1);  // bound to the batch receive
  EXPECT_EQ(f.s.ready_count(), 1U);
  expect_free_capacity(f.c.tx, 3);
  f.stop.request_stop();
  f.s.run();
  EXPECT_EQ(batch.resumed, 1);
  EXPECT_EQ(batch.status, wait_status::cancelled);
  EXPECT_TRUE(batch.buffer.empty());
  expect_got(next, 1);
  EXPECT_EQ(reoffered.ids(), (std::vector<int>{1}));
  expect_free_capacity(f.c.tx, 4);
  put(f.c.tx, 2);
  put(f.c.tx, 3);
  std::vector<int> buffer;
  auto r = f.c.rx.try_recv_many(buffer, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2U);
  EXPECT_EQ(buffer, (std::vector<int>{2, 3}));
  expect_free_capacity(f.c.tx, 4);
}
/// An allocator whose construct() runs `hook` once first: code that runs in the middle of a
/// batch receive, between the values it takes.
template <class T>
struct hooked_allocator {
  using value_type = T;
  static inline std::function<void()> hook;
  hooked_allocator() = default;
  template <class U>
  explicit hooked_allocator(const hooked_allocator<U>& /*unused*/) noexcept {}
  T* allocate(std::size_t n) { return std::allocator<T>().allocate(n); }
  void deallocate(T* p, std::size_t n) noexcept { std::allocator<T>().deallocate(p, n); }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if (hook) std::exchange(hook, nullptr)();
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  bool operator==(const hooked_allocator& /*unused*/) const noexcept { return true; }
};

// Two int values given back (each a record with a copy of its value) while a batch receive is
// taking the first: the second reuses the first's record slot, and the batch still gets the
// first value, not the second twice (found by review: a record handed out a pointer into its
// slot, which the next give-back overwrote under the reader).
TEST(MpmcBoundedRecvMany, AValueGivenBackWhileABatchTakesAnEarlierOneGivenBackIsNotOverwritten) {
  const reoffered_values<int> reoffered;
  fixture<int> f(4);
  auto& a = f.recv(1, stoppable);
  auto& c = f.recv(2, stoppable);
  put(f.c.tx, 1);  // bound to a
  put(f.c.tx, 2);  // bound to c
  f.stop(0).request_stop();
  ASSERT_TRUE(f.s.step());  // a resumes stopped: 1 goes back, a record
  expect_ended(a, wait_status::cancelled);
  put(f.c.tx, 3);
  std::vector<int, hooked_allocator<int>> batch;
  hooked_allocator<int>::hook = [&f] {  // while the batch holds record 1: c gives 2 back
    f.stop(1).request_stop();
    f.s.run();
  };
  auto r = f.c.rx.try_recv_many(batch, 10);
  ASSERT_TRUE(r.ok());
  expect_ended(c, wait_status::cancelled);
  EXPECT_EQ(std::vector<int>(batch.begin(), batch.end()), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(reoffered.ids(), (std::vector<int>{1, 2}));
  EXPECT_TRUE(f.c.rx.try_recv().empty());
  expect_free_capacity(f.c.tx, 4);
}
TEST(MpmcBoundedRecvMany, BatchAndSingleReceivesKeepTheirFifoOrder) {
  batch_receives_keep_the_fifo_order_of_the_receives<bounded_kind>();
}
TEST(MpmcBoundedRecvMany, ABatchReceiveThatLosesAWhenAnyTakesNothing) {
  a_batch_receive_that_loses_a_when_any_takes_nothing<bounded_kind>();
}
TEST(MpmcBoundedRecvMany, ABatchGivesItsCapacityBackInOneHandOut) {
  a_batch_gives_its_capacity_back_in_one_hand_out<bounded_kind>();
}
TEST(MpmcBoundedRecvMany, AThrowingMoveKeepsTheValuesAppendedAndLeavesTheRest) {
  a_throwing_move_keeps_the_values_appended_and_leaves_the_rest<bounded_kind>();
}
TEST(MpmcBoundedRecvMany, ABufferThatCannotGrowTakesNothing) {
  a_buffer_that_cannot_grow_takes_nothing<bounded_kind>();
}
TEST(MpmcBoundedRecvMany, ProducerAndConsumerThreadsExchangeEveryValueOnceInBatches) {
  threads_receive_every_value_once_in_batches<bounded_kind>(2, 16);
}

// A receive (single or batch) yields while it spins on a small channel only, as on an MPSC one
// (detail::yielding_receive_capacity, 1024; literals pin the measured choice); a send, an
// acquisition of capacity, yields at every capacity.
TEST(MpmcBoundedSpin, ABlockingReceiveYieldsWhileSpinningOnlyOnASmallChannel) {
  using state = asyncband::mpmc::detail::bounded_state<int>;
  const std::pair<std::size_t, bool> cases[] = {{1, true},    {64, true},    {256, true},
                                                {1024, true}, {1025, false}, {4096, false}};
  for (const auto& [capacity, yields] : cases) {
    state s(capacity, 0);
    asyncband::mpmc::detail::recv_wait<state> receive(&s);
    EXPECT_EQ(asyncband::detail::spins_by_yielding(receive), yields) << "capacity " << capacity;
    std::vector<int> buffer;
    asyncband::mpmc::detail::recv_many_wait<state, std::vector<int>> batch(&s, buffer, 4);
    EXPECT_EQ(asyncband::detail::spins_by_yielding(batch), yields) << "capacity " << capacity;
    asyncband::detail::semaphore_waiter send(&s.capacity(), 1);
    EXPECT_TRUE(asyncband::detail::spins_by_yielding(send)) << "capacity " << capacity;
    s.close();  // its destructor checks that every unit of capacity came back
  }
}

}  // namespace
