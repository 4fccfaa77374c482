// SPDX-License-Identifier: Apache-2.0
// tests/support/recv_many.hpp: the batch receive (recv_many, try_recv_many and their blocking
// twins) scenarios that every channel with one runs (mpsc::bounded, mpsc::unbounded,
// mpmc::bounded, mpmc::unbounded): order and limit, limit 0, one wake-up for the values sent
// before the receive runs, the drain of a closed channel, cancellation, a when_any lost, the
// capacity given back in one hand-out, a throwing move, a buffer that cannot grow, and threads.
//
// `Kind` says how to use one channel kind, as for the MPMC scenarios (support/mpmc_channel.hpp):
//   template <class T> using sender = ...;  template <class T> using receiver = ...;
//   template <class T> static auto make(std::size_t room);   // channel_halves (bounded: capacity)
//   template <class T> static send_result<T> offer(sender<T>&, int v, int fuse = 0);
//   template <class T> static void put(sender<T>&, int v);           // must be accepted now
//   template <class T> static void send_blocking(sender<T>&, int v); // the same, from a thread
// A bounded channel's sender has free_capacity(); the scenarios check the capacity where it has.
#pragma once

#include <gtest/gtest.h>

#include <asyncband/auto_reset_event.hpp>
#include <asyncband/block_on.hpp>
#include <asyncband/detail/waiter.hpp>
#include <asyncband/result.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <asyncband/stop_token.hpp>
#include <asyncband/when_any.hpp>
#include <chrono>
#include <cstddef>
#include <deque>
#include <new>
#include <optional>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "channel_probes.hpp"
#include "counted.hpp"
#include "probe.hpp"

namespace asyncband_test::recv_many_scenarios {

using asyncband::block_on;

/// The ids of the values in a buffer, in order.
template <class T, class A>
std::vector<int> ids(const std::vector<T, A>& buffer) {
  std::vector<int> out;
  out.reserve(buffer.size());
  for (const T& v : buffer) out.push_back(id_of(v));
  return out;
}

/// A batch receiving coroutine's record: how it ended, the count it yielded, and its buffer.
template <class T>
struct many_probe : probe {
  std::vector<T> buffer;
  std::size_t count = 0;
  bool threw = false;
};

template <class T>
void record_many(many_probe<T>& p, const asyncband::result<std::size_t>& r) {
  if (r.ok()) p.count = *r;
  p.finish(r.status());
}

/// `co_await rx.recv_many(p.buffer, limit)`, or with `stop` when `can_stop`, recorded in `p`;
/// a payload_error from a throwing move is recorded too.
template <class Receiver, class T>
task<void> receive_many(Receiver& rx, std::size_t limit, many_probe<T>& p, bool can_stop = false,
                        asyncband::stop_token stop = {}) {
  ++p.started;
  try {
    if (can_stop) {
      record_many(p, co_await rx.recv_many(p.buffer, limit, std::move(stop)));
    } else {
      record_many(p, co_await rx.recv_many(p.buffer, limit));
    }
  } catch (const payload_error&) {
    p.threw = true;
    p.finish(wait_status::ok);
  }
}

/// A channel with a capacity: free_capacity() is what it holds less its values (`len`), and
/// never more.
template <class Sender>
void expect_capacity(Sender& tx, std::size_t len) {
  if constexpr (requires { tx.free_capacity(); }) {
    EXPECT_EQ(tx.free_capacity(), tx.capacity() - len) << "every value received gave its unit back, once";
  }
}

/// Counts the wake-ups (claims under a wait queue's lock) this thread makes while it lives.
class wake_up_count {
 public:
  wake_up_count() { asyncband::detail::current_test_hook = {&wake_up_count::seen, this}; }
  ~wake_up_count() { asyncband::detail::current_test_hook = {}; }
  wake_up_count(const wake_up_count&) = delete;
  wake_up_count& operator=(const wake_up_count&) = delete;
  [[nodiscard]] int count() const noexcept { return count_; }

 private:
  static void seen(void* self, test_point p) {
    if (p == test_point::woken) ++static_cast<wake_up_count*>(self)->count_;
  }
  int count_ = 0;
};

/// An allocator that throws std::bad_alloc while `refuse` is set.
template <class T>
struct refusing_allocator {
  using value_type = T;
  static inline bool refuse = false;

  refusing_allocator() = default;
  template <class U>
  refusing_allocator(const refusing_allocator<U>& /*unused*/) noexcept {
  }  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) {
    if (refuse) throw std::bad_alloc();
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept { std::allocator<T>().deallocate(p, n); }
  friend bool operator==(const refusing_allocator&, const refusing_allocator&) noexcept { return true; }
};

/// A `Kind` for the MPSC channels (the MPMC tests have theirs, support/mpmc_channel.hpp):
/// `Factory::make<T>(room)` returns the channel's pair; a send that does not wait is try_send
/// where there is one (bounded), else send.
template <template <class> class Sender, template <class> class Receiver, class Factory>
struct channel_kind {
  template <class T>
  using sender = Sender<T>;
  template <class T>
  using receiver = Receiver<T>;

  template <class T>
  static auto make(std::size_t room) {
    return halves_of(Factory::template make<T>(room));
  }
  template <class T>
  static asyncband::send_result<T> offer(sender<T>& tx, int v, int fuse = 0) {
    if constexpr (requires { tx.try_send(asyncband_test::make<T>(v)); }) {
      return tx.try_send(asyncband_test::make<T>(v, fuse));
    } else {
      return tx.send(asyncband_test::make<T>(v, fuse));
    }
  }
  template <class T>
  static void put(sender<T>& tx, int v) {
    auto r = offer<T>(tx, v);
    EXPECT_TRUE(r.ok()) << "send of " << v << ": " << asyncband::to_string(r.status());
  }
  template <class T>
  static void send_blocking(sender<T>& tx, int v) {
    if constexpr (requires { tx.send_blocking(v); }) {
      EXPECT_TRUE(tx.send_blocking(asyncband_test::make<T>(v)).ok());
    } else {
      put<T>(tx, v);
    }
  }
};

/// A channel of kind `Kind`, a test scheduler and a stop source: the scenarios whose batch
/// receives wait. Members go in reverse: a coroutine still waiting leaves with the scheduler,
/// before the channel.
template <class Kind>
struct batch_fixture {
  decltype(Kind::template make<int>(1)) c;
  test_scheduler s;
  asyncband::stop_source stop;

  explicit batch_fixture(std::size_t room) : c(Kind::template make<int>(room)) {}

  /// Starts `co_await rx.recv_many(p.buffer, limit)` on `rx` (the channel's receiver unless
  /// given; with the stop token when `can_stop`) and runs until it waits or ends.
  template <class Receiver>
  void start(many_probe<int>& p, std::size_t limit, bool can_stop, Receiver& rx) {
    s.spawn(receive_many(rx, limit, p, can_stop, stop.get_token()));
    s.run();
  }
  void start(many_probe<int>& p, std::size_t limit, bool can_stop = plain) {
    start(p, limit, can_stop, c.rx);
  }
};

// ---------------------------------------------------------------------------------------------
// The scenarios

/// Every form appends, in order, up to its limit of what is there, after what the buffer held;
/// with nothing there the try form is empty and a timed one times out, the buffer untouched.
template <class Kind>
void every_form_appends_in_order_up_to_the_limit() {
  auto c = Kind::template make<int>(8);
  for (int v = 1; v <= 7; ++v) Kind::put(c.tx, v);
  std::vector<int> buffer{-1};
  asyncband::stop_source never;
  auto a = c.rx.try_recv_many(buffer, 2);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, 2U);
  EXPECT_EQ(c.rx.len(), 5U);
  expect_capacity(c.tx, 5);
  EXPECT_EQ(*c.rx.recv_many_blocking(buffer, 2), 2U);
  EXPECT_EQ(*block_on(c.rx.recv_many(buffer, 1)), 1U);
  EXPECT_EQ(*c.rx.recv_many_blocking(buffer, 1, never.get_token()), 1U);
  EXPECT_EQ(*c.rx.recv_many_timeout(buffer, 100, std::chrono::hours(1)), 1U) << "only what is there";
  EXPECT_EQ(buffer, (std::vector<int>{-1, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(c.rx.len(), 0U);
  expect_capacity(c.tx, 0);
  EXPECT_TRUE(c.rx.try_recv_many(buffer, 4).empty());
  EXPECT_TRUE(c.rx.recv_many_timeout(buffer, 4, 1ms).timed_out());
  EXPECT_EQ(buffer.size(), 8U);
  Kind::put(c.tx, 8);  // the coroutine form, on a scheduler, with a stop token
  test_scheduler s;
  many_probe<int> p;
  s.spawn(receive_many(c.rx, 4, p, stoppable, never.get_token()));
  s.run();
  EXPECT_EQ(p.status, wait_status::ok);
  EXPECT_EQ(p.count, 1U);
  EXPECT_EQ(p.buffer, (std::vector<int>{8}));
}

/// Limit 0 yields 0 at once in every form, takes nothing and does not wait, whatever the
/// channel holds (tokio's rule); a stop already requested still ends a wait cancelled.
template <class Kind>
void a_limit_of_zero_yields_zero_at_once() {
  auto c = Kind::template make<int>(4);
  Kind::put(c.tx, 1);
  std::vector<int> buffer;
  EXPECT_EQ(*c.rx.try_recv_many(buffer, 0), 0U);
  EXPECT_EQ(*c.rx.recv_many_blocking(buffer, 0), 0U);
  EXPECT_EQ(*block_on(c.rx.recv_many(buffer, 0)), 0U);
  EXPECT_EQ(c.rx.len(), 1U);
  EXPECT_EQ(take(c.rx), 1);
  EXPECT_EQ(*c.rx.recv_many_blocking(buffer, 0), 0U) << "empty: no wait";
  EXPECT_EQ(*c.rx.try_recv_many(buffer, 0), 0U);
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(c.rx.recv_many_blocking(buffer, 0, stopped.get_token()).cancelled());
  c.rx.close();
  EXPECT_EQ(*c.rx.recv_many_blocking(buffer, 0), 0U) << "closed: 0 too";
  EXPECT_EQ(*c.rx.try_recv_many(buffer, 0), 0U);
  EXPECT_TRUE(buffer.empty());
}

/// A batch receive that waits is resumed once for the first value and takes, up to its limit,
/// every value sent before it runs; the rest stays for the next receive.
template <class Kind>
void a_waiting_batch_receive_takes_the_values_sent_before_it_runs() {
  batch_fixture<Kind> f(8);
  auto& c = f.c;
  many_probe<int> p;
  f.start(p, 3);
  expect_waiting(p);
  for (int v = 1; v <= 4; ++v) Kind::put(c.tx, v);
  EXPECT_EQ(f.s.run(), 1U) << "one resumption for the batch";
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::ok);
  EXPECT_EQ(p.count, 3U);
  EXPECT_EQ(p.buffer, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(c.rx.len(), 1U);
  expect_capacity(c.tx, 1);
  EXPECT_EQ(take_all(c.rx), (std::vector<int>{4}));
}

/// A closed channel drains in batches, then every batch receive ends closed (the try form
/// closed too) with nothing appended; a waiting one is ended closed by the last sender going.
template <class Kind>
void batches_drain_a_closed_channel_then_end_closed() {
  {
    auto c = Kind::template make<int>(4);
    for (int v = 1; v <= 3; ++v) Kind::put(c.tx, v);
    c.rx.close();
    std::vector<int> buffer;
    EXPECT_EQ(*c.rx.recv_many_blocking(buffer, 2), 2U);
    EXPECT_EQ(*c.rx.try_recv_many(buffer, 5), 1U);
    EXPECT_TRUE(c.rx.recv_many_blocking(buffer, 5).closed());
    EXPECT_TRUE(block_on(c.rx.recv_many(buffer, 5)).closed());
    EXPECT_TRUE(c.rx.try_recv_many(buffer, 5).closed());
    EXPECT_EQ(buffer, (std::vector<int>{1, 2, 3}));
  }
  batch_fixture<Kind> f(4);
  many_probe<int> p;
  f.start(p, 4);
  expect_waiting(p);
  drop(f.c.tx);
  f.s.run();
  EXPECT_EQ(p.resumed, 1);
  EXPECT_EQ(p.status, wait_status::closed);
  EXPECT_TRUE(p.buffer.empty());
}

/// A batch receive cancelled while it waits, stopped before it starts, or destroyed while it
/// waits takes nothing; the values sent later all go to the next receive.
template <class Kind>
void a_cancelled_or_destroyed_batch_receive_takes_nothing() {
  batch_fixture<Kind> f(4);
  auto& c = f.c;
  many_probe<int> cancelled;
  f.start(cancelled, 4, stoppable);
  expect_waiting(cancelled);
  f.stop.request_stop();
  f.s.run();
  EXPECT_EQ(cancelled.resumed, 1);
  EXPECT_EQ(cancelled.status, wait_status::cancelled);
  many_probe<int> doomed;
  {
    auto t = receive_many(c.rx, 4, doomed);
    start_on(f.s, t);
    f.s.run();
    expect_waiting(doomed);
  }  // destroyed while it waits: leaves the channel's queue
  Kind::put(c.tx, 1);
  Kind::put(c.tx, 2);
  EXPECT_EQ(block_on(c.rx.recv_many(cancelled.buffer, 4, f.stop.get_token())).status(),
            wait_status::cancelled)
      << "a stop already requested";
  EXPECT_TRUE(cancelled.buffer.empty());
  EXPECT_EQ(doomed.resumed, 0);
  std::vector<int> buffer;
  EXPECT_EQ(*c.rx.recv_many_blocking(buffer, 4), 2U);
  EXPECT_EQ(buffer, (std::vector<int>{1, 2}));
  expect_capacity(c.tx, 0);
}

/// A batch receive woken for a value and stopped before it resumes: the MPSC one takes the
/// values (a stop after the wake-up is too late, as for recv), the MPMC one passes its unit on
/// and takes nothing (as for recv). Either way each value is received once. Returns how the
/// receive ended.
template <class Kind>
wait_status a_batch_receive_woken_then_stopped() {
  batch_fixture<Kind> f(4);
  auto& c = f.c;
  many_probe<int> p;
  f.start(p, 4, stoppable);
  Kind::put(c.tx, 1);  // claims the receive: its resumption is queued
  Kind::put(c.tx, 2);
  f.stop.request_stop();
  f.s.run();
  EXPECT_EQ(p.resumed, 1);
  std::vector<int> all = p.buffer;
  for (const int v : take_all(c.rx)) all.push_back(v);
  EXPECT_EQ(all, (std::vector<int>{1, 2})) << "each value received once";
  EXPECT_EQ(p.count, p.buffer.size());
  expect_capacity(c.tx, 0);
  return p.status.value_or(wait_status::ok);
}

/// A batch receive that loses its when_any takes nothing.
template <class Kind>
void a_batch_receive_that_loses_a_when_any_takes_nothing() {
  auto c = Kind::template make<int>(4);
  asyncband::auto_reset_event ev(false);
  std::vector<int> buffer;
  std::optional<std::size_t> winner;
  test_scheduler s;
  s.spawn([](auto& rx, asyncband::auto_reset_event& e, std::vector<int>& b,
             std::optional<std::size_t>& w) -> task<void> {
    auto r = co_await asyncband::when_any(rx.recv_many(b, 4), e.wait());
    w = r.index();
  }(c.rx, ev, buffer, winner));
  s.run();
  EXPECT_FALSE(winner.has_value());
  ev.notify_one();
  s.run();
  EXPECT_EQ(winner, 1U);
  Kind::put(c.tx, 1);
  EXPECT_TRUE(buffer.empty());
  EXPECT_EQ(take_all(c.rx), (std::vector<int>{1}));
}

/// Bounded channels: a batch gives the units of its values back in one hand-out (one wake-up
/// under the capacity's lock, however many senders it completes), every unit exactly once.
template <class Kind>
void a_batch_gives_its_capacity_back_in_one_hand_out() {
  auto c = Kind::template make<int>(3);
  for (int v = 1; v <= 3; ++v) Kind::put(c.tx, v);
  test_scheduler s;
  std::deque<send_probe<int>> sends;
  for (int v = 4; v <= 6; ++v) {
    send_probe<int>& p = sends.emplace_back();
    p.id = v;
    s.spawn(send_value(c.tx, v, p));
  }
  s.run();
  for (const auto& p : sends) expect_waiting(p);
  std::vector<int> buffer;
  std::optional<asyncband::try_recv_result<std::size_t>> r;
  int wake_ups = 0;
  {
    const wake_up_count counting;
    r.emplace(c.rx.try_recv_many(buffer, 3));
    wake_ups = counting.count();
  }
  ASSERT_TRUE(r->ok());
  EXPECT_EQ(**r, 3U);
  EXPECT_EQ(wake_ups, 1) << "one hand-out of 3 units, not 3 of one";
  EXPECT_EQ(s.run(), 3U) << "it completes the three senders";
  for (const auto& p : sends) expect_sent(p);
  EXPECT_EQ(c.rx.len(), 3U);
  expect_capacity(c.tx, 3);
  EXPECT_EQ(*c.rx.recv_many_blocking(buffer, 8), 3U);
  EXPECT_EQ(buffer, (std::vector<int>{1, 2, 3, 4, 5, 6}));
  expect_capacity(c.tx, 0);
}

/// A move that throws in the middle of a batch: the values before it stay appended (their
/// capacity back), the exception propagates, the value stays in the channel with those after
/// it, and the next batch takes them in order. The first value throwing appends nothing.
template <class Kind>
void a_throwing_move_keeps_the_values_appended_and_leaves_the_rest() {
  const count_scope counts;
  {
    auto c = Kind::template make<counted>(4);
    ASSERT_TRUE(Kind::offer(c.tx, 1).ok());
    ASSERT_TRUE(Kind::offer(c.tx, 2, 2).ok());  // one move into the channel: the next one throws
    ASSERT_TRUE(Kind::offer(c.tx, 3).ok());
    ASSERT_TRUE(Kind::offer(c.tx, 4).ok());
    std::vector<counted> buffer;
    EXPECT_THROW((void)c.rx.recv_many_blocking(buffer, 4), payload_error);
    EXPECT_EQ(ids(buffer), (std::vector<int>{1}));
    EXPECT_EQ(c.rx.len(), 3U);
    expect_capacity(c.tx, 3);
    EXPECT_EQ(*c.rx.recv_many_blocking(buffer, 4), 3U);
    EXPECT_EQ(ids(buffer), (std::vector<int>{1, 2, 3, 4}));
    expect_capacity(c.tx, 0);

    ASSERT_TRUE(Kind::offer(c.tx, 5, 2).ok());
    ASSERT_TRUE(Kind::offer(c.tx, 6).ok());
    EXPECT_THROW((void)block_on(c.rx.recv_many(buffer, 4)), payload_error);
    EXPECT_EQ(buffer.size(), 4U) << "the first value threw: nothing appended";
    EXPECT_EQ(c.rx.len(), 2U);
    expect_capacity(c.tx, 2);
    EXPECT_EQ(*c.rx.try_recv_many(buffer, 4), 2U);
    EXPECT_EQ(ids(buffer), (std::vector<int>{1, 2, 3, 4, 5, 6}));
    expect_capacity(c.tx, 0);
  }
  EXPECT_EQ(counts.values(), 0);
}

/// The buffer grows before any value is taken: if it cannot, the exception propagates and
/// nothing leaves the channel.
template <class Kind>
void a_buffer_that_cannot_grow_takes_nothing() {
  auto c = Kind::template make<int>(4);
  Kind::put(c.tx, 1);
  Kind::put(c.tx, 2);
  std::vector<int, refusing_allocator<int>> buffer;
  buffer.reserve(1);  // room for one: a batch that grew it value by value would take that one
  refusing_allocator<int>::refuse = true;
  EXPECT_THROW((void)c.rx.try_recv_many(buffer, 2), std::bad_alloc);
  EXPECT_THROW((void)c.rx.recv_many_blocking(buffer, 2), std::bad_alloc);
  refusing_allocator<int>::refuse = false;
  EXPECT_EQ(c.rx.len(), 2U);
  expect_capacity(c.tx, 2);
  EXPECT_EQ(take(c.rx), 1) << "the units stood for the values still";
  EXPECT_EQ(*c.rx.recv_many_blocking(buffer, 2), 1U);
  EXPECT_EQ(ids(buffer), (std::vector<int>{2}));
  expect_capacity(c.tx, 0);
}

/// Producer threads and consumer threads that receive in batches of up to `limit`
/// (recv_many_blocking) until the channel ends: every value once, each producer's values in
/// order within each consumer. `consumers` > 1 only for the MPMC channels.
template <class Kind>
void threads_receive_every_value_once_in_batches(int consumers, std::size_t limit) {
  constexpr int producers = 3;
  constexpr int per_producer = under_sanitizer ? 400 : 4000;
  auto c = Kind::template make<int>(16);
  using receiver_type = typename Kind::template receiver<int>;
  std::deque<receiver_type> rxs;  // a copy each (MPMC); the one MPSC receiver moves
  for (int k = 0; k + 1 < consumers; ++k) {
    if constexpr (std::is_copy_constructible_v<receiver_type>) rxs.push_back(c.rx);
  }
  rxs.push_back(std::move(c.rx));
  std::vector<std::vector<int>> got(rxs.size());
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < rxs.size(); ++k) {
    threads.emplace_back([&got, &rxs, k, limit] {
      std::vector<int>& mine = got[k];
      receiver_type& rx = rxs[k];
      for (;;) {
        const std::size_t before = mine.size();
        auto r = rx.recv_many_blocking(mine, limit);
        if (!r.ok()) break;
        EXPECT_GE(*r, 1U);
        EXPECT_LE(*r, limit);
        EXPECT_EQ(mine.size() - before, *r);
      }
    });
  }
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([p, tx = c.tx]() mutable {
      for (int i = 0; i < per_producer; ++i) Kind::send_blocking(tx, p * per_producer + i);
    });
  }
  drop(c.tx);
  for (auto& t : threads) t.join();
  std::vector<int> seen(static_cast<std::size_t>(producers * per_producer), 0);
  for (const auto& mine : got) {
    std::vector<int> last(producers, -1);
    for (const int v : mine) {
      ASSERT_GE(v, 0);
      ASSERT_LT(v, producers * per_producer);
      ++seen[static_cast<std::size_t>(v)];
      const int p = v / per_producer;
      EXPECT_GT(v, last[static_cast<std::size_t>(p)]) << "a producer's values in order";
      last[static_cast<std::size_t>(p)] = v;
    }
  }
  for (std::size_t v = 0; v < seen.size(); ++v) ASSERT_EQ(seen[v], 1) << "value " << v;
}

/// MPSC: a batch receive is a receive: while one waits, every other receive form throws
/// std::logic_error (try_recv_many too once a value is there, the waiting one's; on the bounded
/// channel always: `idle_try_throws`), and it then completes normally; and the other way round.
template <class Kind>
void a_batch_receive_is_one_receive_at_a_time(bool idle_try_throws) {
  batch_fixture<Kind> f(4);
  auto& c = f.c;
  test_scheduler& s = f.s;
  many_probe<int> p;
  f.start(p, 4);
  expect_waiting(p);
  std::vector<int> other;
  EXPECT_THROW((void)c.rx.recv_many_blocking(other, 4), std::logic_error);
  EXPECT_THROW((void)block_on(c.rx.recv_many(other, 4)), std::logic_error);
  EXPECT_THROW((void)c.rx.recv_blocking(), std::logic_error);
  if (idle_try_throws) {
    EXPECT_THROW((void)c.rx.try_recv_many(other, 4), std::logic_error);
  } else {
    EXPECT_TRUE(c.rx.try_recv_many(other, 4).empty());
  }
  Kind::put(c.tx, 1);
  Kind::put(c.tx, 2);
  EXPECT_THROW((void)c.rx.try_recv_many(other, 4), std::logic_error)
      << "the values are the waiting receive's";
  s.run();
  EXPECT_EQ(p.status, wait_status::ok);
  EXPECT_EQ(p.buffer, (std::vector<int>{1, 2}));
  EXPECT_TRUE(other.empty());
  recv_probe<int> single;
  s.spawn(receive(c.rx, single));
  s.run();
  EXPECT_THROW((void)c.rx.recv_many_blocking(other, 4), std::logic_error);
  Kind::put(c.tx, 3);
  s.run();
  expect_got(single, 3);
}

/// MPMC: batch and single receives that wait are served in FIFO order; a batch takes, beyond
/// the value its unit stands for, only values no receive waits for; a batch receive woken for a
/// value and then stopped passes it to the next waiting receive.
template <class Kind>
void batch_receives_keep_the_fifo_order_of_the_receives() {
  batch_fixture<Kind> f(8);
  auto& c = f.c;
  test_scheduler& s = f.s;
  auto copy = c.rx;
  recv_probe<int> single;
  many_probe<int> batch;
  s.spawn(receive(c.rx, single));
  f.start(batch, 4, plain, copy);
  for (int v = 1; v <= 3; ++v) Kind::put(c.tx, v);
  s.run();
  expect_got(single, 1);
  EXPECT_EQ(batch.buffer, (std::vector<int>{2, 3}));

  many_probe<int> stopped;
  recv_probe<int> next;
  f.start(stopped, 4, stoppable, copy);
  s.spawn(receive(c.rx, next));
  s.run();
  Kind::put(c.tx, 4);  // claims the batch receive
  f.stop.request_stop();
  s.run();
  EXPECT_EQ(stopped.status, wait_status::cancelled);
  EXPECT_TRUE(stopped.buffer.empty());
  expect_got(next, 4);
  expect_capacity(c.tx, 0);
}

}  // namespace asyncband_test::recv_many_scenarios
