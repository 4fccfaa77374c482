// SPDX-License-Identifier: Apache-2.0
// tests/support/mpmc_receive_scenarios.hpp: the scenarios of the receiving half the MPMC channels
// share (detail/mpmc_receiver.hpp), written once and run by test_mpmc_bounded and
// test_mpmc_unbounded for their channel kind (the `Kind` of support/mpmc_channel.hpp): every
// receive form; the handles; several receivers (each value received exactly once, FIFO among
// waiting receives, no overtaking by try_recv); deterministic races at the waiter core's test
// points (two receives woken for one value, a receive woken then cancelled or destroyed, close
// and the last sender against waiting and registering receives); when_any; a receive whose move
// throws; the blocking twins; "last one out".
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <asyncband/auto_reset_event.hpp>
#include <asyncband/block_on.hpp>
#include <asyncband/manual_reset_event.hpp>
#include <asyncband/result.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/stop_token.hpp>
#include <asyncband/when_any.hpp>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "awaited_twice.hpp"
#include "channel_probes.hpp"
#include "counted.hpp"
#include "lifetime.hpp"
#include "mpmc_channel.hpp"
#include "probe.hpp"
#include "stress.hpp"
#include "thread_hook.hpp"

namespace asyncband_test::mpmc_scenarios {

using asyncband::block_on;
using asyncband::result;
using asyncband::when_any;

// ---------------------------------------------------------------------------------------------
// Receiving, the handles

template <class Kind>
void every_receive_form_yields_a_value_that_is_there() {
  auto c = Kind::template make<int>(8);
  typename Kind::template receiver<int> other = c.rx;
  for (int i = 1; i <= 7; ++i) Kind::put(c.tx, i);
  asyncband::stop_source never;
  EXPECT_EQ(*block_on(c.rx.recv()), 1);
  EXPECT_EQ(*block_on(other.recv(never.get_token())), 2);
  EXPECT_EQ(*c.rx.recv_blocking(), 3);
  EXPECT_EQ(*other.recv_blocking(never.get_token()), 4);
  EXPECT_EQ(*c.rx.recv_timeout(1h), 5);
  EXPECT_EQ(*other.recv_timeout(0ms), 6);
  test_scheduler s;
  recv_probe<int> p;
  s.spawn(receive(c.rx, p));
  EXPECT_EQ(s.run(), 1U);  // never suspended
  EXPECT_EQ(p.got(), 7);
  EXPECT_TRUE(c.rx.recv_timeout(0ms).timed_out());
  EXPECT_TRUE(other.recv_timeout(1ms).timed_out());
}

/// The counts of senders and receivers through copies, moves, assignments and destruction.
/// `extra_producer(tx, expect_counts)` runs with 2 senders and 3 receivers (a bounded channel's
/// owned permit is a producer too).
template <class Kind, class ExtraProducer>
void counts_follow_copies_moves_and_destruction(ExtraProducer extra_producer) {
  using sender = typename Kind::template sender<int>;
  using receiver = typename Kind::template receiver<int>;
  auto c = Kind::template make<int>(2);
  const auto expect_counts = [&c](std::size_t senders, std::size_t receivers) {
    EXPECT_EQ(c.tx.sender_count(), senders);
    EXPECT_EQ(c.rx.sender_count(), senders);
    EXPECT_EQ(c.tx.receiver_count(), receivers);
    EXPECT_EQ(c.rx.receiver_count(), receivers);
  };
  expect_counts(1, 1);
  {
    const sender copy = c.tx;
    expect_counts(2, 1);
    EXPECT_EQ(copy.sender_count(), 2U);
  }
  expect_counts(1, 1);
  receiver r2 = c.rx;
  expect_counts(1, 2);
  receiver r3(std::move(r2));
  expect_counts(1, 2);
  EXPECT_EQ(r2.receiver_count(), 0U);  // NOLINT(bugprone-use-after-move): moved from
  EXPECT_EQ(r2.sender_count(), 0U);    // NOLINT(bugprone-use-after-move)
  auto elsewhere = Kind::template make<int>(1);
  receiver r4 = elsewhere.rx;
  EXPECT_EQ(elsewhere.rx.receiver_count(), 2U);
  r4 = r3;  // leaves the other channel, joins this one
  EXPECT_EQ(elsewhere.rx.receiver_count(), 1U);
  expect_counts(1, 3);
  receiver& self = r4;
  r4 = self;  // self-assignment changes nothing
  expect_counts(1, 3);
  sender s2 = elsewhere.tx;
  s2 = c.tx;
  EXPECT_EQ(elsewhere.tx.sender_count(), 1U);
  expect_counts(2, 3);
  extra_producer(c.tx, expect_counts);
  expect_counts(2, 3);
  drop(r3);
  drop(r4);
  expect_counts(2, 1);
  drop(s2);
  expect_counts(1, 1);
  drop(c.tx);
  EXPECT_EQ(c.rx.sender_count(), 0U);
  EXPECT_EQ(c.rx.receiver_count(), 1U);
}

/// On channel `c` (of counted, room for 3, empty): copies of the receiver share it; it
/// disconnects only with the last one, which destroys the value left in it.
template <class Kind, class Channel>
void receiver_copies_share_the_channel_which_disconnects_only_with_the_last_one(Channel& c) {
  const count_scope counts;
  typename Kind::template receiver<counted> copy = c.rx;
  Kind::put(c.tx, 1);
  Kind::put(c.tx, 2);
  EXPECT_EQ(copy.len(), 2U);
  EXPECT_EQ(take(copy), 1);
  EXPECT_EQ(take(c.rx), 2);
  Kind::put(c.tx, 3);
  drop(c.rx);  // not the last receiver
  EXPECT_FALSE(c.tx.is_closed());
  EXPECT_EQ(c.tx.receiver_count(), 1U);
  Kind::put(c.tx, 4);
  EXPECT_EQ(take(copy), 3);
  EXPECT_EQ(counts.values(), 1);  // 4, in the channel
  drop(copy);                     // the last one: the channel disconnects, 4 is destroyed now
  EXPECT_EQ(counts.values(), 0);
  EXPECT_TRUE(c.tx.is_closed());
  EXPECT_EQ(c.tx.receiver_count(), 0U);
  auto back = Kind::offer(c.tx, 5);
  EXPECT_TRUE(back.closed());
  EXPECT_EQ(back.value().id(), 5);
}

/// Moved-from halves `tx` and `rx` of an int channel: they report nothing, refuse to work
/// (std::logic_error) and their copies are moved-from too.
template <class Kind, class Sender, class Receiver>
void expect_moved_from_halves(Sender& tx, Receiver& rx) {
  EXPECT_TRUE(tx.is_closed());
  EXPECT_EQ(tx.sender_count(), 0U);
  EXPECT_EQ(tx.receiver_count(), 0U);
  EXPECT_THROW((void)Kind::offer(tx, 1), std::logic_error);
  tx.close();  // nothing to close
  EXPECT_TRUE(rx.is_closed());
  EXPECT_EQ(rx.len(), 0U);
  EXPECT_TRUE(rx.empty());
  EXPECT_EQ(rx.sender_count(), 0U);
  EXPECT_EQ(rx.receiver_count(), 0U);
  EXPECT_THROW((void)rx.try_recv(), std::logic_error);
  EXPECT_THROW((void)rx.recv(), std::logic_error);
  asyncband::stop_source never;
  EXPECT_THROW((void)rx.recv(never.get_token()), std::logic_error);
  EXPECT_THROW((void)rx.recv_blocking(), std::logic_error);
  EXPECT_THROW((void)rx.recv_timeout(1ms), std::logic_error);
  rx.close();                        // nothing to close
  const Receiver copy_of_moved(rx);  // a copy of a moved-from receiver is moved-from
  const Sender sender_copy_of_moved(tx);
  EXPECT_EQ(copy_of_moved.receiver_count(), 0U);
  EXPECT_TRUE(copy_of_moved.is_closed());
  EXPECT_TRUE(sender_copy_of_moved.is_closed());
}

/// The moved-to halves of an int channel whose halves were moved from, after the checks of the
/// moved-from ones: no receiver or sender was added by the copies, nothing was closed, they work.
template <class Kind, class Sender, class Receiver>
void expect_moved_to_halves_untouched(Sender& tx, Receiver& rx) {
  EXPECT_EQ(rx.receiver_count(), 1U);
  EXPECT_EQ(tx.sender_count(), 1U);
  EXPECT_FALSE(tx.is_closed());
  Kind::put(tx, 1);
  EXPECT_EQ(take(rx), 1);
}

template <class Kind>
void handles_move_and_copy_assign_with_their_channel() {
  auto a = Kind::template make<int>(2);
  auto b = Kind::template make<int>(2);
  Kind::put(a.tx, 1);
  Kind::put(b.tx, 2);
  a.tx = std::move(b.tx);  // a's only sender goes: a is closed, drains
  EXPECT_EQ(take(a.rx), 1);
  EXPECT_TRUE(a.rx.try_recv().closed());
  Kind::put(a.tx, 3);  // now into b
  EXPECT_EQ(take_all(b.rx), (std::vector<int>{2, 3}));
  a.rx = b.rx;  // copy-assigned: a's receiver goes, both now receive from b
  Kind::put(a.tx, 4);
  Kind::put(a.tx, 5);
  EXPECT_EQ(take(a.rx), 4);
  EXPECT_EQ(take(b.rx), 5);
  b.rx = std::move(a.rx);  // b's old receiver goes; one receiver is left
  EXPECT_EQ(a.tx.receiver_count(), 1U);
  Kind::put(a.tx, 6);
  EXPECT_EQ(take(b.rx), 6);
  typename Kind::template sender<int>& self = a.tx;
  a.tx = std::move(self);  // self-assignment keeps the channel
  Kind::put(a.tx, 7);
  EXPECT_EQ(take(b.rx), 7);
}

template <class Kind>
void recv_before_send_suspends_and_the_send_resumes_it_once_on_its_scheduler() {
  channel_fixture<Kind> f(2);
  auto& p = f.recv(1, plain);
  expect_waiting(p);
  Kind::put(f.c.tx, 42);
  EXPECT_EQ(f.s.ready_count(), 1U);  // posted, not resumed inside the send
  EXPECT_EQ(p.resumed, 0);
  f.s.run();
  expect_got(p, 42);
  EXPECT_TRUE(f.c.rx.empty());
}

template <class Kind>
void a_coroutine_without_a_scheduler_is_resumed_inline_inside_the_send() {
  using receiver = typename Kind::template receiver<int>;
  auto c = Kind::template make<int>(1);
  std::optional<int> got;
  bool inside_send = false;
  bool resumed_inside_send = false;
  [](receiver& rx, std::optional<int>& out, bool& inside, bool& flag) -> bare_coroutine {
    auto r = co_await rx.recv();
    flag = inside;
    if (r.ok()) out = *r;
  }(c.rx, got, inside_send, resumed_inside_send);
  EXPECT_FALSE(got.has_value());
  inside_send = true;
  Kind::put(c.tx, 5);
  inside_send = false;
  EXPECT_EQ(got, 5);
  EXPECT_TRUE(resumed_inside_send);
}

// ---------------------------------------------------------------------------------------------
// Several receivers: each value to exactly one receive, FIFO among waiting receives

/// What the receivers got (`got`, one list each), when `producers` producers sent the ids
/// producer * stride + i for i = 1..per_producer: each id exactly once, and each producer's ids
/// in order within each receiver's list.
inline void expect_each_value_once_in_producer_order(const std::vector<std::vector<int>>& got, int producers,
                                                     int per_producer, int stride) {
  std::vector<int> all;
  for (const auto& out : got) {
    std::vector<int> last(static_cast<std::size_t>(producers), 0);
    for (const int v : out) {
      auto& previous = last[static_cast<std::size_t>(v / stride)];
      EXPECT_GT(v, previous) << "out of order for one receiver";
      previous = v;
    }
    all.insert(all.end(), out.begin(), out.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int> expected;
  for (int p = 0; p < producers; ++p) {
    for (int i = 1; i <= per_producer; ++i) expected.push_back(p * stride + i);
  }
  EXPECT_EQ(all, expected) << "a value lost, or received twice";
}

/// Three receives, each on its own copy of the receiver, queued in order: values sent one at a
/// time, or all at once, go to them in that order.
template <class Kind>
void waiting_receives_are_served_in_fifo_order() {
  for (const bool all_at_once : {false, true}) {
    SCOPED_TRACE(all_at_once);
    channel_fixture<Kind> f(4);
    auto& a = f.recv(1, plain);
    auto& b = f.recv(2, stoppable);
    auto& c = f.recv(3, plain);
    expect_waiting(a);
    expect_waiting(b);
    expect_waiting(c);
    for (int v = 10; v <= 12; ++v) {
      Kind::put(f.c.tx, v);
      if (!all_at_once) {
        EXPECT_EQ(f.s.ready_count(), 1U) << "one value wakes one receive";
        f.s.run();
      }
    }
    f.s.run();
    expect_got(a, 10);
    expect_got(b, 11);
    expect_got(c, 12);
    EXPECT_EQ(f.order, (std::vector<int>{1, 2, 3}));
    EXPECT_TRUE(f.c.rx.try_recv().empty());
  }
}

template <class Kind>
void cancelling_waiting_receives_in_the_middle_keeps_the_order_of_the_others() {
  channel_fixture<Kind> f(4);
  auto& a = f.recv(1);
  auto& b = f.recv(2);
  auto& c = f.recv(3);
  auto& d = f.recv(4);
  f.stop(1).request_stop();
  f.stop(2).request_stop();
  f.s.run();
  expect_ended(b, wait_status::cancelled);
  expect_ended(c, wait_status::cancelled);
  Kind::put(f.c.tx, 10);
  Kind::put(f.c.tx, 11);
  f.s.run();
  expect_got(a, 10);
  expect_got(d, 11);
}

/// A value sent while a receive waits is that receive's: neither a try_recv (of any copy) nor a
/// new receive takes it, even one that runs before the woken receive resumes.
template <class Kind>
void neither_a_try_recv_nor_a_new_receive_overtakes_a_waiting_receive() {
  channel_fixture<Kind> f(4);
  auto& a = f.recv(1, plain);
  Kind::put(f.c.tx, 10);
  EXPECT_EQ(f.s.ready_count(), 1U);
  EXPECT_TRUE(f.c.rx.try_recv().empty()) << "the value is the waiting receive's";
  EXPECT_TRUE(f.copies.front().try_recv().empty());
  recv_probe<int> b;
  b.id = 2;
  typename Kind::template receiver<int> rx_b = f.c.rx;
  auto tb = receive(rx_b, b);
  run_inline(f.s, tb);  // before the woken receive resumes
  expect_waiting(b);
  f.s.run();
  expect_got(a, 10);
  expect_waiting(b);
  Kind::put(f.c.tx, 11);
  f.s.run();
  EXPECT_EQ(b.got(), 11);
}

/// A value sent while no receive waits goes to whichever receive comes next, of any copy.
template <class Kind>
void a_value_sent_while_none_waits_goes_to_the_next_receive_of_any_copy() {
  channel_fixture<Kind> f(4);
  Kind::put(f.c.tx, 10);
  Kind::put(f.c.tx, 11);
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, stoppable);
  expect_got(a, 10);
  expect_got(b, 11);
  auto& c = f.recv(3, plain);
  expect_waiting(c);
}

/// Producers and consumers (each on its own receiver copy) on a test scheduler, in a random
/// order per seed, each consumer receiving until the channel is closed: every value is received
/// exactly once, in order per producer within each consumer. `produce(tx, producer, count)` is
/// a producer coroutine sending counted(producer * 100 + i) for i = 1..count.
template <class Kind, class Produce>
void each_value_goes_to_exactly_one_of_several_receiving_coroutines(Produce produce) {
  constexpr int kProducers = 3;
  constexpr int kConsumers = 3;
  constexpr int kPerProducer = 10;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    const count_scope counts;
    std::vector<std::vector<int>> got(kConsumers);
    {
      test_scheduler s(seed == 0 ? std::nullopt : std::optional<std::uint64_t>(seed));
      auto c = Kind::template make<counted>(1 + seed % 4);
      for (int p = 0; p < kProducers; ++p) s.spawn(produce(s, c.tx, p, kPerProducer));
      for (int k = 0; k < kConsumers; ++k) {
        s.spawn([](typename Kind::template receiver<counted> rx, std::vector<int>& out) -> task<void> {
          for (;;) {
            auto r = co_await rx.recv();
            if (!r.ok()) {
              EXPECT_TRUE(r.closed());
              break;
            }
            out.push_back(r->id());
          }
        }(c.rx, got[k]));
      }
      drop(c.tx);
      drop(c.rx);
      s.run();
    }
    expect_each_value_once_in_producer_order(got, kProducers, kPerProducer, 100);
    if (::testing::Test::HasFailure()) break;
  }
}

/// OS threads and coroutines on a pool receive from copies of one receiver while three threads
/// send: every value exactly once.
template <class Kind>
void each_value_is_received_exactly_once_by_threads_and_pool_coroutines() {
  using receiver = typename Kind::template receiver<counted>;
  constexpr int kProducers = 3;
  constexpr int kPerProducer = under_sanitizer ? 1000 : 5000;
  const count_scope counts;
  auto c = Kind::template make<counted>(8);
  std::vector<std::vector<int>> got(4);
  {
    asyncband::runtime::thread_pool pool(2);
    completion pool_done(2);
    std::vector<std::thread> threads;
    for (int k = 0; k < 2; ++k) {
      threads.emplace_back([rx = c.rx, &out = got[k]]() mutable {
        for (auto r = rx.recv_blocking(); r.ok(); r = rx.recv_blocking()) out.push_back(r->id());
      });
    }
    for (int k = 2; k < 4; ++k) {
      asyncband::runtime::spawn(pool.ref(),
                                [](asyncband::runtime::thread_pool& p, receiver rx, std::vector<int>& out,
                                   completion& done) -> task<void> {
                                  co_await p.schedule();
                                  for (;;) {
                                    auto r = co_await rx.recv();
                                    if (!r.ok()) break;
                                    out.push_back(r->id());
                                  }
                                  drop(rx);
                                  done.done();
                                }(pool, c.rx, got[k], pool_done));
    }
    drop(c.rx);
    for (int p = 0; p < kProducers; ++p) {
      threads.emplace_back([tx = c.tx, p]() mutable {
        for (int i = 1; i <= kPerProducer; ++i) Kind::send_blocking(tx, p * 100000 + i);
      });
    }
    drop(c.tx);
    for (auto& t : threads) t.join();
    pool_done.wait_or_abort(60s, "mpmc pool receivers");
  }
  expect_each_value_once_in_producer_order(got, kProducers, kPerProducer, 100000);
  ::testing::Test::RecordProperty("by_threads", static_cast<int>(got[0].size() + got[1].size()));
  ::testing::Test::RecordProperty("by_coroutines", static_cast<int>(got[2].size() + got[3].size()));
}

// ---------------------------------------------------------------------------------------------
// Deterministic races at the waiter core's test points

/// Two receives wait; one value wakes exactly one of them (the first), and the other keeps
/// waiting for the next value.
template <class Kind>
void one_value_wakes_exactly_one_of_two_waiting_receives() {
  for (const bool can_stop : {plain, stoppable}) {
    SCOPED_TRACE(can_stop);
    channel_fixture<Kind> f(4);
    auto& a = f.recv(1, can_stop);
    auto& b = f.recv(2, can_stop);
    Kind::put(f.c.tx, 10);
    EXPECT_EQ(f.s.ready_count(), 1U);
    f.s.run();
    expect_got(a, 10);
    expect_waiting(b);
    EXPECT_TRUE(f.c.rx.try_recv().empty());
    Kind::put(f.c.tx, 11);
    f.s.run();
    expect_got(b, 11);
  }
}

/// A second value is sent while the first send's wake-up has claimed the first receive and not
/// yet resolved it: each of the first two receives is woken once, with a value of its own (which
/// one is decided when each resumes and claims it), and the third still waits.
template <class Kind>
void a_second_value_sent_while_the_first_wake_up_is_claimed_wakes_the_second_receive() {
  channel_fixture<Kind> f(4);
  auto& a = f.recv(1);
  auto& b = f.recv(2);
  auto& c = f.recv(3);
  f.s.at(test_point::claimed_for_wake, [&f] { Kind::put(f.c.tx, 11); });
  Kind::put(f.c.tx, 10);
  EXPECT_EQ(f.s.pending_actions(), 0U);
  EXPECT_EQ(f.s.ready_count(), 2U);
  f.s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(b.resumed, 1);
  EXPECT_EQ((std::set<int>{a.got(), b.got()}), (std::set<int>{10, 11}));
  expect_waiting(c);
  EXPECT_TRUE(f.c.rx.try_recv().empty());
}

/// A value sent while a second receive registers (it found nothing, and is queued or about to
/// be) goes to the first, which waited longer; the second waits for the next value.
template <class Kind>
void a_value_sent_while_a_second_receive_registers_goes_to_the_first() {
  for (const test_point point : registering) {
    for (const bool can_stop : {plain, stoppable}) {
      SCOPED_TRACE(testing::Message() << "point " << static_cast<int>(point) << ", stoppable " << can_stop);
      channel_fixture<Kind> f(4);
      auto& a = f.recv(1, plain);
      f.s.at(point, [&f] { Kind::put(f.c.tx, 10); });
      auto& b = f.recv(2, can_stop);
      EXPECT_EQ(f.s.pending_actions(), 0U);
      expect_got(a, 10);
      expect_waiting(b);
      Kind::put(f.c.tx, 11);
      f.s.run();
      expect_got(b, 11);
    }
  }
}

/// A value sent while the only receive registers completes it without suspending.
template <class Kind>
void a_value_sent_while_the_only_receive_registers_completes_it_without_suspending() {
  for (const test_point point : registering) {
    for (const bool can_stop : {plain, stoppable}) {
      SCOPED_TRACE(testing::Message() << "point " << static_cast<int>(point) << ", stoppable " << can_stop);
      channel_fixture<Kind> f(2);
      f.s.at(point, [&f] { Kind::put(f.c.tx, 7); });
      auto& p = f.start_recv(1, can_stop);
      EXPECT_EQ(f.s.run(), 1U);  // one step: never suspended
      EXPECT_EQ(f.s.pending_actions(), 0U);
      expect_got(p, 7);
      f.stop(0).request_stop();  // nothing to cancel any more
      Kind::put(f.c.tx, 8);
      EXPECT_EQ(f.s.run(), 0U);
      EXPECT_EQ(take(f.c.rx), 8);
    }
  }
}

/// On channel `c` (of counted, empty, room for 1 value at least) and an already stopped token:
/// every receive form that takes a token ends cancelled at once and takes nothing, although a
/// value is there.
template <class Kind, class Channel>
void receives_with_a_stopped_token_take_nothing(Channel& c, const asyncband::stop_token& stopped) {
  Kind::put(c.tx, 3);
  EXPECT_TRUE(block_on(c.rx.recv(stopped)).cancelled());  // a value is there: still cancelled
  EXPECT_TRUE(c.rx.recv_blocking(stopped).cancelled());
  test_scheduler s;
  recv_probe<counted> p;
  s.spawn(receive(c.rx, p, stoppable, stopped));
  EXPECT_EQ(s.run(), 1U);
  expect_ended(p, wait_status::cancelled);
  EXPECT_EQ(take(c.rx), 3);  // the value stayed
  Kind::expect_exact(c.tx, c.rx);
}

/// A receive woken for a value (its unit granted, not yet resumed) is stopped: it ends cancelled
/// and takes nothing; the value goes to the next waiting receive, or stays in the channel.
template <class Kind>
void a_receive_woken_for_a_value_then_stopped_passes_it_to_the_next_waiting_receive() {
  for (const bool next_waits : {false, true}) {
    SCOPED_TRACE(next_waits);
    const count_scope counts;
    channel_fixture<Kind, counted> f(2);
    auto& a = f.recv(1, stoppable);
    recv_probe<counted>* b = next_waits ? &f.recv(2, plain) : nullptr;
    f.s.at(test_point::claimed_for_wake, [&f] { f.stop(0).request_stop(); });
    Kind::put(f.c.tx, 10);
    EXPECT_EQ(f.s.pending_actions(), 0U);
    f.s.run();
    expect_ended(a, wait_status::cancelled);
    if (next_waits) {
      expect_got(*b, 10);
      EXPECT_TRUE(f.c.rx.try_recv().empty());
    } else {
      EXPECT_EQ(f.c.rx.len(), 1U);
      EXPECT_EQ(take(f.c.rx), 10);
    }
    Kind::expect_exact(f.c.tx, f.c.rx);
  }
}

/// The stop request unlinked the first receive and released the lock; a value published before
/// the stop resolves it goes to the second receive (or stays): one resumption each.
template <class Kind>
void a_value_sent_while_a_stop_holds_the_first_receive_claimed_goes_to_the_second() {
  for (const bool next_waits : {false, true}) {
    SCOPED_TRACE(next_waits);
    channel_fixture<Kind> f(2);
    auto& a = f.recv(1, stoppable);
    recv_probe<int>* b = next_waits ? &f.recv(2, plain) : nullptr;
    f.s.at(test_point::claimed_for_cancel, [&f] { Kind::put(f.c.tx, 10); });
    f.stop(0).request_stop();
    EXPECT_EQ(f.s.pending_actions(), 0U);
    EXPECT_EQ(f.s.ready_count(), next_waits ? 2U : 1U);
    f.s.run();
    expect_ended(a, wait_status::cancelled);
    if (next_waits) {
      expect_got(*b, 10);
    } else {
      EXPECT_EQ(take(f.c.rx), 10);
    }
  }
}

/// A stop request while a receive registers cancels it; a value sent later goes to the next.
template <class Kind>
void a_stop_while_a_receive_registers_cancels_it_and_the_value_stays() {
  for (const test_point point : registering) {
    SCOPED_TRACE(static_cast<int>(point));
    channel_fixture<Kind> f(2);
    f.s.at(point, [&f] { f.stop(0).request_stop(); });
    auto& p = f.start_recv(1, stoppable);
    EXPECT_EQ(f.s.run(), 1U);
    expect_ended(p, wait_status::cancelled);
    Kind::put(f.c.tx, 5);  // nobody is queued any more
    EXPECT_EQ(f.s.run(), 0U);
    EXPECT_EQ(take(f.c.rx), 5);
  }
}

/// A suspended receive is destroyed (its frame): it takes nothing, and leaves the queue of
/// receives, so a value sent later goes to the one behind it.
template <class Kind>
void destroying_a_suspended_receive_takes_nothing() {
  for (const bool can_stop : {plain, stoppable}) {
    SCOPED_TRACE(can_stop);
    channel_fixture<Kind> f(2);
    auto& doomed = f.recv(1, can_stop);
    auto& next = f.recv(2, plain);
    f.task_of(0) = {};
    f.stop(0).request_stop();  // its stop callback went with it
    EXPECT_EQ(f.s.ready_count(), 0U);
    Kind::put(f.c.tx, 5);  // would touch freed memory if the node were still linked
    f.s.run();
    EXPECT_EQ(doomed.resumed, 0);
    expect_got(next, 5);
  }
}

/// A send has claimed a receive for its value but not resolved it when the receive's frame is
/// destroyed (on another thread): the destructor waits for the send to resolve it, and the value
/// goes to the next waiting receive, or stays in the channel. `V`: the value type (an int is
/// copied into the receive's node by a bounded channel's delivery; counted stays in its cell).
template <class Kind, class V = counted>
void a_receive_woken_for_a_value_then_destroyed_passes_it_on() {
  for (const bool next_waits : {false, true}) {
    SCOPED_TRACE(next_waits);
    const count_scope counts;
    auto c = Kind::template make<V>(2);
    typename Kind::template receiver<V> rx_b = c.rx;
    test_scheduler s;
    recv_probe<V> doomed;
    recv_probe<V> next;
    auto t = receive(c.rx, doomed);
    t.handle().resume();  // no scheduler: resumed inline by its resolver, if ever
    auto tb = receive(rx_b, next);
    if (next_waits) {
      start_on(s, tb);
      s.run();
      expect_waiting(next);
    }
    asyncband::manual_reset_event claimed;
    asyncband::manual_reset_event destroying;
    std::thread sender([&] {
      const thread_hook hook(test_point::claimed_for_wake, [&] {
        claimed.set();
        destroying.wait_blocking();  // resolve only once the destructor waits for it
      });
      Kind::put(c.tx, 5);
    });
    claimed.wait_blocking();
    {
      const thread_hook hook(test_point::awaiting_resolver, [&] { destroying.set(); });
      t = {};
    }
    sender.join();
    EXPECT_EQ(doomed.resumed, 0);
    if (next_waits) {
      EXPECT_EQ(s.ready_count(), 1U);
      s.run();
      expect_got(next, 5);
      EXPECT_TRUE(c.rx.try_recv().empty());
    } else {
      EXPECT_EQ(take(c.rx), 5);
    }
    Kind::expect_exact(c.tx, c.rx);
  }
}

/// Close lands while a send's wake-up holds the first receive claimed: that receive still gets
/// the value; the second ends closed only once the value is taken.
template <class Kind>
void close_while_a_receive_is_woken_for_the_last_value() {
  channel_fixture<Kind> f(2);
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, plain);
  f.s.at(test_point::claimed_for_wake, [&f] { f.c.rx.close(); });
  Kind::put(f.c.tx, 1);
  EXPECT_EQ(f.s.pending_actions(), 0U);
  EXPECT_EQ(f.s.ready_count(), 1U) << "b must wait until the value is taken";
  f.s.run();
  expect_got(a, 1);
  expect_ended(b, wait_status::closed);
}

/// The channel ends (`end(tx)`: close, or the last sender goes) while a receive registers: on an
/// empty channel, the receive ends closed without suspending; on a channel holding a value, it
/// gets the value, and the next receive ends closed.
template <class Kind, class End>
void the_end_while_a_receive_registers(End end) {
  for (const test_point point : registering) {
    for (const bool with_value : {false, true}) {
      SCOPED_TRACE(testing::Message() << "point " << static_cast<int>(point) << ", value " << with_value);
      channel_fixture<Kind> f(2);
      f.s.at(point, [&f, &end, with_value] {
        if (with_value) Kind::put(f.c.tx, 5);
        end(f.c.tx);
      });
      auto& p = f.start_recv(1, plain);
      EXPECT_EQ(f.s.run(), 1U);
      if (with_value) {
        expect_got(p, 5);
      } else {
        expect_ended(p, wait_status::closed);
      }
      EXPECT_TRUE(block_on(f.c.rx.recv()).closed());
      EXPECT_TRUE(f.c.rx.try_recv().closed());
    }
  }
}

/// The last sender goes: receives drain what was sent (the waiting ones first), then every
/// receive ends closed.
template <class Kind>
void the_last_sender_going_lets_receives_drain_then_ends_them_closed() {
  channel_fixture<Kind> f(4);
  typename Kind::template sender<int> other = f.c.tx;
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, stoppable);
  auto& c = f.recv(3, plain);
  Kind::put(f.c.tx, 1);
  drop(f.c.tx);  // not the last sender
  f.s.run();
  expect_got(a, 1);
  expect_waiting(b);
  expect_waiting(c);
  Kind::put(other, 2);
  drop(other);  // the last one
  f.s.run();
  expect_got(b, 2);
  expect_ended(c, wait_status::closed);
  auto& d = f.recv(4, plain);
  expect_ended(d, wait_status::closed);
  EXPECT_TRUE(f.c.rx.try_recv().closed());
}

template <class Kind>
void values_queued_when_the_last_sender_goes_are_still_received_by_any_copy() {
  channel_fixture<Kind> f(4);
  Kind::put(f.c.tx, 1);
  Kind::put(f.c.tx, 2);
  drop(f.c.tx);
  EXPECT_TRUE(f.c.rx.is_closed());
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, stoppable);
  auto& c = f.recv(3, plain);
  expect_got(a, 1);
  expect_got(b, 2);
  expect_ended(c, wait_status::closed);
}

// ---------------------------------------------------------------------------------------------
// when_any: a receive that loses takes nothing

/// The event is ready first: the receive loses, takes nothing, and a value sent later goes to
/// the next receive.
template <class Kind>
void a_receive_that_loses_at_once_takes_nothing() {
  auto c = Kind::template make<int>(2);
  asyncband::auto_reset_event ev(true);
  auto r = block_on(when_any(c.rx.recv(), ev.wait()));
  EXPECT_EQ(r.index(), 1U);
  ASSERT_TRUE(r.template has<0>());
  EXPECT_TRUE(r.template get<0>().cancelled());
  Kind::put(c.tx, 5);
  EXPECT_EQ(take(c.rx), 5);
}

/// A receive and an event wait, both queued; the event wins, and a value sent while the winner's
/// wake-up is claimed (the losing receive still queued) is not given to the loser: it stays for
/// the next receive, or goes to a receive queued behind the loser.
template <class Kind>
void a_receive_that_loses_while_queued_takes_nothing_and_does_not_hold_up_others() {
  for (const bool next_waits : {false, true}) {
    SCOPED_TRACE(next_waits);
    channel_fixture<Kind> f(2);
    asyncband::auto_reset_event ev(false);
    std::optional<std::size_t> index;
    std::optional<int> value;
    auto t = recv_or_event(f.c.rx, ev, index, value);
    start_on(f.s, t);
    f.s.run();
    EXPECT_FALSE(index.has_value());
    recv_probe<int>* next = next_waits ? &f.recv(2, plain) : nullptr;
    f.s.at(test_point::claimed_for_wake, [&f] { Kind::put(f.c.tx, 5); });
    ev.notify_one();
    f.s.run();
    EXPECT_EQ(index, 1U);
    EXPECT_FALSE(value.has_value());
    if (next_waits) {
      expect_got(*next, 5);
    } else {
      EXPECT_EQ(take(f.c.rx), 5);
    }
    EXPECT_TRUE(f.c.rx.try_recv().empty());
  }
}

/// The event branch publishes first; as the receive branch is about to queue, the event is
/// notified (its branch wins) and a value is sent, which the receive branch takes as it
/// publishes: having lost, it passes its unit on, so the value stays for the next receive.
template <class Kind>
void a_receive_completing_during_its_publication_after_the_other_branch_won_passes_it_on() {
  channel_fixture<Kind> f(2);
  asyncband::auto_reset_event ev(false);
  std::optional<std::size_t> index;
  f.s.spawn([](asyncband::auto_reset_event& e, typename Kind::template receiver<int>& rx,
               std::optional<std::size_t>& idx) -> task<void> {
    auto r = co_await when_any(e.wait(), rx.recv());
    idx = r.index();
  }(ev, f.c.rx, index));
  f.s.at(test_point::queueing, [] {});  // the event branch's
  f.s.at(test_point::queueing, [&f, &ev] {
    ev.notify_one();
    Kind::put(f.c.tx, 5);
  });
  f.s.run();
  EXPECT_EQ(f.s.pending_actions(), 0U);
  EXPECT_EQ(index, 0U);
  EXPECT_EQ(take(f.c.rx), 5);
  EXPECT_TRUE(f.c.rx.try_recv().empty());
}

/// Receives of two channels: the one whose channel gets a value wins; the other takes nothing,
/// and the values sent to its channel later stay for its next receive.
template <class Kind>
void two_receives_of_two_channels() {
  using receiver = typename Kind::template receiver<int>;
  for (const int winner : {0, 1}) {
    SCOPED_TRACE(winner);
    auto a = Kind::template make<int>(2);
    auto b = Kind::template make<int>(2);
    test_scheduler s;
    std::optional<std::size_t> index;
    std::optional<int> value;
    s.spawn(
        [](receiver& ra, receiver& rb, std::optional<std::size_t>& idx, std::optional<int>& v) -> task<void> {
          auto r = co_await when_any(ra.recv(), rb.recv());
          idx = r.index();
          if (r.index() == 0) v = *r.template get<0>();
          if (r.index() == 1) v = *r.template get<1>();
        }(a.rx, b.rx, index, value));
    s.run();
    EXPECT_FALSE(index.has_value());
    Kind::put(winner == 0 ? a.tx : b.tx, 7);
    Kind::put(winner == 0 ? b.tx : a.tx, 8);  // after the winner: the loser must not take it
    s.run();
    EXPECT_EQ(index, static_cast<std::size_t>(winner));
    EXPECT_EQ(value, 7);
    EXPECT_EQ(take(winner == 0 ? b.rx : a.rx), 8);
    EXPECT_TRUE(a.rx.try_recv().empty());
    EXPECT_TRUE(b.rx.try_recv().empty());
  }
}

/// Both channels hold a value: the first receive wins at once, the second channel's value stays.
template <class Kind>
void two_ready_receives_take_only_the_first_value() {
  auto a = Kind::template make<int>(2);
  auto b = Kind::template make<int>(2);
  Kind::put(a.tx, 1);
  Kind::put(b.tx, 2);
  auto r = block_on(when_any(a.rx.recv(), b.rx.recv()));
  ASSERT_EQ(r.index(), 0U);
  EXPECT_EQ(*r.template get<0>(), 1);
  EXPECT_EQ(b.rx.len(), 1U);
  EXPECT_EQ(take(b.rx), 2);
}

// ---------------------------------------------------------------------------------------------
// A payload whose move constructor throws on receipt

/// Receives once with try_recv, recv_blocking or a coroutine recv; the move out of the channel
/// throws.
enum class recv_form { try_recv, blocking, await };

/// The move out of the channel throws: the exception propagates, the value stays in the channel,
/// and the next receive (of any copy) takes it before the newer values.
template <class Kind>
void a_throwing_move_in_recv_leaves_the_value_for_the_next_receive_before_newer_ones() {
  using receiver = typename Kind::template receiver<counted>;
  for (const recv_form form : {recv_form::try_recv, recv_form::blocking, recv_form::await}) {
    SCOPED_TRACE(static_cast<int>(form));
    const count_scope counts;
    auto c = Kind::template make<counted>(3);
    receiver other = c.rx;
    EXPECT_TRUE(Kind::offer(c.tx, 1, 2).ok());  // one move into the channel: the next one throws
    Kind::put(c.tx, 2);
    switch (form) {
      case recv_form::try_recv:
        EXPECT_THROW((void)c.rx.try_recv(), payload_error);
        break;
      case recv_form::blocking:
        EXPECT_THROW((void)c.rx.recv_blocking(), payload_error);
        break;
      case recv_form::await: {
        test_scheduler s;
        bool threw = false;
        s.spawn([](receiver& rx, bool& out) -> task<void> {
          try {
            auto r = co_await rx.recv();
            ADD_FAILURE() << "no exception; status " << static_cast<int>(r.status());
          } catch (const payload_error&) {
            out = true;
          }
        }(c.rx, threw));
        s.run();
        EXPECT_TRUE(threw);
        break;
      }
    }
    EXPECT_EQ(counts.values(), 2);  // value 1 stayed in the channel
    EXPECT_EQ(c.rx.len(), 2U);
    Kind::expect_exact(c.tx, c.rx);  // its unit stays taken
    Kind::put(c.tx, 3);
    EXPECT_EQ(take(other), 1);  // its fuse burnt out: the retry moves it
    EXPECT_EQ(take(c.rx), 2);
    EXPECT_EQ(take(other), 3);
    EXPECT_TRUE(c.rx.try_recv().empty());
    Kind::expect_exact(c.tx, c.rx);
    drop(c.tx);
    EXPECT_TRUE(other.try_recv().closed());
  }
}

/// The receive's move throws after another receive overtook it (started inside the first one's
/// move, and took the next value): the value is parked for the next receive, which takes it;
/// nothing is lost or received twice.
template <class Kind>
void a_receive_whose_move_throws_after_another_overtook_leaves_the_value_for_the_next_one() {
  const count_scope counts;
  auto c = Kind::template make<counted>(3);
  typename Kind::template receiver<counted> other = c.rx;
  EXPECT_TRUE(Kind::offer(c.tx, 1, 2).ok());
  Kind::put(c.tx, 2);
  Kind::put(c.tx, 3);
  counted::at_move(1, [&] { EXPECT_EQ(take(other), 2); });  // inside the move of 1, which then throws
  EXPECT_THROW((void)c.rx.try_recv(), payload_error);
  EXPECT_EQ(c.rx.len(), 2U);
  EXPECT_EQ(counts.values(), 2);
  Kind::expect_exact(c.tx, c.rx);
  EXPECT_EQ(take(c.rx), 1);  // the parked value comes first
  EXPECT_EQ(take(other), 3);
  EXPECT_TRUE(c.rx.try_recv().empty());
  Kind::expect_exact(c.tx, c.rx);
  Kind::put(c.tx, 4);  // the channel goes on
  EXPECT_EQ(take(other), 4);
}

// ---------------------------------------------------------------------------------------------
// Blocking twins

template <class Kind>
void recv_blocking_of_two_threads_is_woken_by_sends_from_another_thread() {
  auto c = Kind::template make<int>(2);
  std::vector<int> got(2, -1);
  std::latch waiting(2);
  std::vector<std::thread> receivers;
  for (int k = 0; k < 2; ++k) {
    receivers.emplace_back([rx = c.rx, &out = got[k], &waiting]() mutable {
      const thread_hook hook(test_point::before_arm, [&waiting] { waiting.count_down(); });
      auto r = rx.recv_blocking();
      if (r.ok()) out = *r;
    });
  }
  waiting.wait();  // both queued
  std::thread sender([&c] {
    Kind::put(c.tx, 1);
    Kind::put(c.tx, 2);
  });
  sender.join();
  for (auto& t : receivers) t.join();
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int>{1, 2}));
}

template <class Kind>
void recv_blocking_with_a_stop_token_is_cancelled_from_another_thread_and_takes_nothing() {
  auto c = Kind::template make<int>(2);
  asyncband::stop_source stop;
  std::latch waiting(1);
  std::optional<wait_status> status;
  std::thread receiver([&] {
    const thread_hook hook(test_point::before_arm, [&waiting] { waiting.count_down(); });
    status = c.rx.recv_blocking(stop.get_token()).status();
  });
  waiting.wait();
  std::thread([&stop] { stop.request_stop(); }).join();
  receiver.join();
  EXPECT_EQ(status, wait_status::cancelled);
  Kind::put(c.tx, 5);
  EXPECT_EQ(*c.rx.recv_blocking(), 5);
}

template <class Kind>
void recv_timeout_times_out_and_the_value_is_received_later_by_another_copy() {
  auto c = Kind::template make<int>(2);
  typename Kind::template receiver<int> other = c.rx;
  EXPECT_TRUE(c.rx.recv_timeout(1ms).timed_out());
  Kind::put(c.tx, 5);
  EXPECT_EQ(*other.recv_timeout(1h), 5);
  EXPECT_TRUE(other.recv_timeout(0ms).timed_out());
}

template <class Kind>
void recv_timeout_is_woken_by_a_send_from_another_thread() {
  auto c = Kind::template make<int>(2);
  std::latch waiting(1);
  std::optional<int> got;
  std::thread receiver([&] {
    const thread_hook hook(test_point::before_arm, [&waiting] { waiting.count_down(); });
    auto r = c.rx.recv_timeout(1h);
    if (r.ok()) got = *r;
  });
  waiting.wait();
  Kind::put(c.tx, 5);
  receiver.join();
  EXPECT_EQ(got, 5);
}

template <class Kind>
void a_blocked_receive_is_ended_closed_by_the_last_sender_going_on_another_thread() {
  auto c = Kind::template make<int>(1);
  std::latch waiting(1);
  std::optional<wait_status> status;
  std::thread receiver([&] {
    const thread_hook hook(test_point::before_arm, [&waiting] { waiting.count_down(); });
    status = c.rx.recv_blocking().status();
  });
  waiting.wait();
  drop(c.tx);
  receiver.join();
  EXPECT_EQ(status, wait_status::closed);
}

// ---------------------------------------------------------------------------------------------
// "Last one out": a waiter resumed inline may destroy the channel's handles (its own, the last
// ones) at once, while the call that woke it is still inside the channel.

template <class Kind>
void a_receive_resumed_inline_by_the_publication_may_destroy_the_last_receiver() {
  using receiver = typename Kind::template receiver<counted>;
  const count_scope counts;
  auto c = Kind::template make<counted>(3);
  auto rx = std::make_unique<receiver>(std::move(c.rx));
  int got = -1;
  [](std::unique_ptr<receiver>& r_owner, int& out) -> bare_coroutine {
    auto r = co_await r_owner->recv();
    out = r.ok() ? r->id() : -1;
    r_owner.reset();
  }(rx, got);
  Kind::put(c.tx, 1);
  EXPECT_EQ(got, 1);
  EXPECT_EQ(rx, nullptr);
  EXPECT_TRUE(Kind::offer(c.tx, 2).closed());
}

template <class Kind>
void a_receive_resumed_inline_by_the_last_sender_may_destroy_the_last_receiver() {
  using receiver = typename Kind::template receiver<int>;
  auto c = Kind::template make<int>(2);
  auto rx = std::make_unique<receiver>(std::move(c.rx));
  std::optional<wait_status> status;
  [](std::unique_ptr<receiver>& r_owner, std::optional<wait_status>& out) -> bare_coroutine {
    auto r = co_await r_owner->recv();
    out = r.status();
    r_owner.reset();  // inside the sender's departure
  }(rx, status);
  EXPECT_FALSE(status.has_value());
  drop(c.tx);  // the last handle after the receiver: it deletes the channel on its way out
  EXPECT_EQ(status, wait_status::closed);
  EXPECT_EQ(rx, nullptr);
}

/// The channel's handles in a World its waiter destroys (support/lifetime.hpp).
template <class Kind>
struct lifetime_world {
  decltype(Kind::template make<int>(1)) ch = Kind::template make<int>(1);
};
template <class Kind>
struct lifetime_waker : lifetime::waker_base {
  std::optional<typename Kind::template sender<int>> tx;
  std::optional<typename Kind::template receiver<int>> rx;
};

/// The rows of a receive that its waker lets destroy everything: a receive woken by a send (named
/// `send_name`: try_send, send), the last sender, close or stop; a receive whose grant passes on
/// to the next receive; a crowd of receives served one by one; a thread blocked in a receive.
template <class Kind>
void add_receive_lifetime_rows(std::vector<lifetime::row>& rows, const std::string& send_name) {
  using namespace lifetime;
  using W = lifetime_world<Kind>;
  using K = lifetime_waker<Kind>;
  const auto recv = [](W& w, asyncband::stop_token) { return w.ch.rx.recv(); };
  const auto recv_cancellable = [](W& w, asyncband::stop_token t) { return w.ch.rx.recv(std::move(t)); };
  const auto offer = [](W* w, auto&) { (void)Kind::offer(w->ch.tx, 1); };
  rows.push_back(coroutine_row<W, K>(send_name + "_wakes_receive", "ok", no_setup{}, recv, offer));
  rows.push_back(coroutine_row<W, K>(send_name + "_wakes_cancellable_receive", "ok", no_setup{},
                                     recv_cancellable, offer));
  rows.push_back(coroutine_row<W, K>(
      "copied_sender_wakes_receive", "ok", [](W& w, K& k) { k.tx.emplace(w.ch.tx); }, recv,
      [](W*, K& k) { (void)Kind::offer(*k.tx, 1); }));
  rows.push_back(coroutine_row<W, K>(
      "last_sender_gone_wakes_receive", "closed", [](W& w, K& k) { k.tx.emplace(std::move(w.ch.tx)); }, recv,
      [](W*, K& k) { k.tx.reset(); }));
  rows.push_back(coroutine_row<W, K>("close_wakes_receive", "closed", no_setup{}, recv,
                                     [](W* w, K&) { w->ch.tx.close(); }));
  rows.push_back(
      coroutine_row<W, K>("stop_receive", "cancelled", no_setup{}, recv_cancellable, request_stop{}));
  // A, claimed for the value, is stopped at once: its grant passes to B, which resumes inside
  // A's pass-on and destroys everything.
  rows.push_back(
      pass_on_row<W, K>("stopped_receive_passes_its_value_on", no_setup{}, recv_cancellable, recv, offer));
  // Twenty receives get a value each (more than the nesting limit of inline resolution), the
  // last one destroys everything.
  rows.push_back(crowd_row<W, K>(
      "crowd_of_receives_served_one_by_one", 20, "ok", [](W& w, K& k) { k.tx.emplace(w.ch.tx); },
      recv_cancellable, recv,
      [](W*, K& k, asyncband::stop_source&) {
        for (int i = 0; i <= 20; ++i) {
          while (!Kind::offer(*k.tx, i).ok()) {
          }
        }
      }));
  rows.push_back(thread_row<W, K>(
      send_name + "_wakes_blocked_receive_thread", "ok", no_setup{},
      [](W& w, asyncband::stop_token t) { return w.ch.rx.recv_blocking(std::move(t)); }, offer));
}

// ---------------------------------------------------------------------------------------------
// Misuse

template <class Kind>
void awaiting_a_receive_again_throws_logic_error() {
  auto c = Kind::template make<int>(2);
  asyncband::stop_source never;
  expect_awaiting_again_throws_logic_error([&c] { return c.rx.recv(); }, [&c] { Kind::put(c.tx, 1); });
  expect_awaiting_again_throws_logic_error([&c, &never] { return c.rx.recv(never.get_token()); },
                                           [&c] { Kind::put(c.tx, 2); });
}

}  // namespace asyncband_test::mpmc_scenarios
