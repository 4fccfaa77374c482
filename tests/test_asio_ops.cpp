// SPDX-License-Identifier: Apache-2.0
// Tests of the generic Boost.Asio adapter (asyncband/asio.hpp: async_op, async_outcome and the
// named forms): every primitive's operations from asio coroutines, the completion signatures and
// error codes, every kind of completion token, per-operation cancellation (before the node
// commits, and late: after a waker claimed it or it completed at the start, before its handler
// ran; each primitive's claim-vs-cancel race replayed deterministically at the waiter core's
// test points), executors, the io_context's stop and destruction with pending operations, and a
// bounded threaded stress of `||` with timers that checks nothing is lost.
#include <gtest/gtest.h>

#include <algorithm>
#include <asyncband/asio.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <asyncband/stop_token.hpp>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "support/probe.hpp"

namespace {

namespace net = boost::asio;
namespace ab = asyncband;
namespace err = asyncband::asio::error;
using ab::wait_status;
using ab::detail::test_point;
using boost::system::error_code;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------
// Completion signatures

template <class F>
using sig_t = ab::asio::op_signature_t<F>;
template <class F>
using outcome_t = ab::asio::outcome_of_t<F>;

struct lock_factory {
  ab::mutex<int>* m;
  auto operator()() const { return m->lock(); }
};
struct lock_stop_factory {
  ab::mutex<int>* m;
  auto operator()() const { return m->lock(asyncband::stop_token{}); }
};
struct event_factory {
  ab::manual_reset_event* ev;
  auto operator()() const { return ev->wait(); }
};
struct acquire_factory {
  ab::semaphore* sem;
  auto operator()() const { return sem->acquire(2); }
};
struct recv_factory {
  ab::mpsc::receiver<int>* rx;
  auto operator()() const { return rx->recv(); }
};
struct send_factory {
  ab::mpsc::sender<std::string>* tx;
  auto operator()() const { return tx->send("x"); }
};
struct barrier_factory {
  ab::barrier* bar;
  auto operator()() const { return bar->wait(); }
};
struct broadcast_recv_factory {
  ab::broadcast::overflow_receiver<int>* rx;
  auto operator()() const { return rx->recv(); }
};

static_assert(std::is_same_v<sig_t<lock_factory>, void(error_code, std::optional<ab::mutex_guard<int>>)>);
static_assert(
    std::is_same_v<sig_t<lock_stop_factory>, void(error_code, std::optional<ab::mutex_guard<int>>)>);
static_assert(std::is_same_v<sig_t<event_factory>, void(error_code)>);
static_assert(std::is_same_v<sig_t<acquire_factory>, void(error_code, ab::semaphore_permit)>);
static_assert(std::is_same_v<sig_t<recv_factory>, void(error_code, int)>);
static_assert(std::is_same_v<sig_t<send_factory>, void(error_code, std::optional<std::string>)>);
static_assert(std::is_same_v<sig_t<barrier_factory>, void(error_code, ab::barrier_wait_result)>);
static_assert(std::is_same_v<sig_t<broadcast_recv_factory>, void(error_code, int)>);

static_assert(std::is_same_v<outcome_t<lock_factory>, ab::result<ab::mutex_guard<int>>>);
static_assert(std::is_same_v<outcome_t<event_factory>, ab::result<void>>);
static_assert(std::is_same_v<outcome_t<recv_factory>, ab::result<int>>);
static_assert(std::is_same_v<outcome_t<send_factory>, ab::send_result<std::string>>);
static_assert(std::is_same_v<outcome_t<barrier_factory>, ab::result<ab::barrier_wait_result>>);
static_assert(std::is_same_v<outcome_t<broadcast_recv_factory>, ab::broadcast::recv_result<int>>);

// ---------------------------------------------------------------------------------------------
// Error codes

TEST(asio_error, cancelled_is_asio_operation_aborted) {
  const error_code ec = err::make_error_code(err::cancelled);
  EXPECT_EQ(ec, net::error::operation_aborted);
  EXPECT_EQ(ec, err::cancelled);
  EXPECT_TRUE(ec == boost::system::errc::operation_canceled);
  EXPECT_TRUE(ec == std::errc::operation_canceled);
  EXPECT_EQ(err::to_error_code(wait_status::cancelled), net::error::operation_aborted);
  EXPECT_EQ(err::to_error_code(ab::send_status::cancelled), net::error::operation_aborted);
  EXPECT_EQ(err::to_error_code(ab::broadcast::recv_status::cancelled), net::error::operation_aborted);
}

TEST(asio_error, the_other_codes_are_distinct_and_in_the_asyncband_category) {
  const error_code timeout = err::timeout;
  const error_code closed = err::closed;
  const error_code lagged = err::lagged;
  for (const error_code& ec : {timeout, closed, lagged}) {
    EXPECT_EQ(ec.category(), err::category());
    EXPECT_NE(ec, net::error::operation_aborted);
    EXPECT_FALSE(ec.message().empty());
  }
  EXPECT_NE(timeout, closed);
  EXPECT_NE(closed, lagged);
  EXPECT_STREQ(err::category().name(), "asyncband");
  EXPECT_TRUE(timeout == boost::system::errc::timed_out);
  EXPECT_FALSE(closed == boost::system::errc::operation_canceled);
  EXPECT_EQ(err::to_error_code(wait_status::ok), error_code());
  EXPECT_EQ(err::to_error_code(wait_status::closed), err::closed);
  EXPECT_EQ(err::to_error_code(wait_status::timeout), err::timeout);
  EXPECT_EQ(err::to_error_code(ab::send_status::closed), err::closed);
  EXPECT_EQ(err::to_error_code(ab::broadcast::recv_status::lagged), err::lagged);
  EXPECT_EQ(err::to_error_code(ab::broadcast::recv_status::closed), err::closed);
}

// ---------------------------------------------------------------------------------------------
// Every primitive from asio coroutines

class asio_ops : public ::testing::Test {
 protected:
  net::io_context ioc;
  auto ex() { return ioc.get_executor(); }
};

TEST_F(asio_ops, every_primitive_from_asio_coroutines) {
  ab::mutex<int> m(0);
  std::optional<ab::mutex_guard<int>> held_lock = m.try_lock();
  ab::rwlock<int> rw(0);
  std::optional<ab::rwlock_read_guard<int>> held_read = rw.try_read();
  ab::semaphore sem(0);
  auto [btx, brx] = ab::mpsc::bounded<int>(1);
  ASSERT_TRUE(btx.try_send(1).ok());  // full
  auto [utx, urx] = ab::mpsc::unbounded<std::string>();
  auto [otx, orx] = ab::oneshot::channel<int>();
  auto [ftx, frx] = ab::broadcast::overflow<int>(4);
  auto [gtx, grx] = ab::broadcast::bounded<int>(1);
  ASSERT_TRUE(gtx.try_send(1).ok());  // full
  auto [wtx, wrx] = ab::watch::channel<int>(0);
  auto ph = ab::phaser::create();
  ab::phaser_participant part = ph->enroll().value();
  ab::phaser_participant other = ph->enroll().value();
  ab::auto_reset_event are;
  ab::latch lat(1);

  std::vector<std::string> done;
  std::mutex done_mutex;
  auto finished = [&](std::string what) {
    EXPECT_TRUE(ioc.get_executor().running_in_this_thread());
    const std::lock_guard lock(done_mutex);
    done.push_back(std::move(what));
  };
  auto spawn = [&](auto body) { net::co_spawn(ioc, std::move(body), net::detached); };
  spawn([&]() -> net::awaitable<void> {
    std::optional<ab::mutex_guard<int>> g = co_await ab::asio::async_lock(m, net::use_awaitable);
    EXPECT_TRUE(g.has_value() && g->owns_lock());
    **g = 5;
    finished("mutex");
  });
  spawn([&]() -> net::awaitable<void> {
    auto g = co_await ab::asio::async_write_lock(rw, net::use_awaitable);
    **g = 6;
    finished("rwlock");
  });
  spawn([&]() -> net::awaitable<void> {
    ab::semaphore_permit p = co_await ab::asio::async_acquire(sem, 2, net::use_awaitable);
    EXPECT_EQ(p.count(), 2U);
    finished("semaphore");
  });
  spawn([&, &btx = btx]() -> net::awaitable<void> {
    std::optional<int> back = co_await ab::asio::async_send(btx, 2, net::use_awaitable);
    EXPECT_FALSE(back.has_value());
    finished("mpsc send");
  });
  spawn([&, &urx = urx]() -> net::awaitable<void> {
    std::string v = co_await ab::asio::async_recv(urx, net::use_awaitable);
    EXPECT_EQ(v, "hello");
    finished("mpsc unbounded recv");
  });
  spawn([&, &orx = orx]() -> net::awaitable<void> {
    EXPECT_EQ(co_await ab::asio::async_recv(orx, net::use_awaitable), 7);
    finished("oneshot recv");
  });
  spawn([&, &frx = frx]() -> net::awaitable<void> {
    EXPECT_EQ(co_await ab::asio::async_recv(frx, net::use_awaitable), 8);
    finished("broadcast recv");
  });
  spawn([&, &gtx = gtx]() -> net::awaitable<void> {
    std::optional<int> back = co_await ab::asio::async_send(gtx, 9, net::use_awaitable);
    EXPECT_FALSE(back.has_value());
    finished("broadcast send");
  });
  spawn([&, &wrx = wrx]() -> net::awaitable<void> {
    co_await ab::asio::async_op([&] { return wrx.changed(); }, net::use_awaitable);
    EXPECT_EQ(*wrx.borrow_and_update(), 10);
    finished("watch changed");
  });
  spawn([&]() -> net::awaitable<void> {
    ab::phase_id completed = co_await ab::asio::async_op([&] { return part.wait(); }, net::use_awaitable);
    EXPECT_EQ(completed, ab::phase_id(1));
    finished("phaser");
  });
  spawn([&]() -> net::awaitable<void> {
    co_await ab::asio::async_op([&] { return are.wait(); }, net::use_awaitable);
    finished("auto_reset_event");
  });
  spawn([&]() -> net::awaitable<void> {
    co_await ab::asio::async_op([&] { return lat.wait(); }, net::use_awaitable);
    finished("latch");
  });

  ioc.poll();  // every coroutine is now waiting in its operation
  EXPECT_TRUE(done.empty());
  std::thread runner([&] { ioc.run(); });  // returns once every operation has completed
  held_lock.reset();
  held_read.reset();
  sem.release(2);
  EXPECT_EQ(brx.try_recv().value(), 1);
  ASSERT_TRUE(utx.send("hello").ok());
  ASSERT_TRUE(otx.send(7).ok());
  ASSERT_TRUE(ftx.send(8).ok());
  EXPECT_EQ(grx.try_recv().value(), 1);
  ASSERT_TRUE(wtx.send(10).ok());
  static_cast<void>(other.arrive());
  are.notify_one();
  lat.count_down();
  runner.join();
  EXPECT_EQ(done.size(), 12U);
  EXPECT_EQ(*m.try_lock().value(), 5);
  EXPECT_EQ(*rw.try_read().value(), 6);
  EXPECT_EQ(sem.available(), 2U);
  EXPECT_EQ(brx.try_recv().value(), 2);
  EXPECT_EQ(grx.try_recv().value(), 9);
}

TEST_F(asio_ops, an_uncontended_operation_completes_posted_not_inside_the_initiation) {
  ab::mutex<int> m(0);
  ab::semaphore sem(3);
  auto [tx, rx] = ab::mpsc::bounded<int>(2);
  int calls = 0;
  ab::asio::async_op(
      ex(), [&] { return m.lock(); },
      [&](error_code ec, std::optional<ab::mutex_guard<int>> g) {
        EXPECT_FALSE(ec);
        EXPECT_TRUE(g.has_value());
        ++calls;
      });
  ab::asio::async_op(
      ex(), [&] { return sem.acquire(2); },
      [&](error_code ec, ab::semaphore_permit p) {
        EXPECT_FALSE(ec);
        EXPECT_EQ(p.count(), 2U);
        ++calls;
      });
  ab::asio::async_op(
      ex(), [&tx = tx] { return tx.send(4); },
      [&](error_code ec, std::optional<int> back) {
        EXPECT_FALSE(ec);
        EXPECT_FALSE(back.has_value());
        ++calls;
      });
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(m.try_lock().has_value());  // taken at the start, held until the handler runs
  EXPECT_TRUE(rx.try_recv().empty());      // a send is pushed when its handler runs
  ioc.run();
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(m.try_lock().has_value());
  EXPECT_EQ(sem.available(), 3U);
  EXPECT_EQ(rx.try_recv().value(), 4);
}

// ---------------------------------------------------------------------------------------------
// Failures: error codes, values handed back, the value form

TEST_F(asio_ops, a_drained_closed_channel_reports_closed) {
  auto [tx, rx] = ab::mpsc::bounded<int>(2);
  ASSERT_TRUE(tx.try_send(1).ok());
  { auto gone = std::move(tx); }
  std::vector<std::pair<error_code, int>> seen;
  for (int i = 0; i < 2; ++i) {
    ab::asio::async_recv(rx,
                         net::bind_executor(ioc, [&](error_code ec, int v) { seen.emplace_back(ec, v); }));
    ioc.run();
    ioc.restart();
  }
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_EQ(seen[0], std::make_pair(error_code(), 1));
  EXPECT_EQ(seen[1].first, err::closed);
  EXPECT_EQ(seen[1].second, 0);  // value-initialized
}

TEST_F(asio_ops, a_send_to_a_departed_receiver_hands_its_value_back) {
  auto [tx, rx] = ab::mpsc::bounded<std::string>(1);
  { auto gone = std::move(rx); }
  std::optional<std::pair<error_code, std::optional<std::string>>> seen;
  ab::asio::async_send(tx, std::string("payload"),
                       net::bind_executor(ioc, [&](error_code ec, std::optional<std::string> back) {
                         seen.emplace(ec, std::move(back));
                       }));
  ioc.run();
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->first, err::closed);
  EXPECT_EQ(seen->second, std::optional<std::string>("payload"));
}

TEST_F(asio_ops, use_awaitable_throws_the_error_code_and_as_tuple_or_redirect_error_keep_the_values) {
  auto [tx, rx] = ab::mpsc::bounded<std::string>(1);
  { auto gone = std::move(rx); }
  auto [tx2, rx2] = ab::mpsc::bounded<int>(1);
  { auto gone = std::move(tx2); }
  int checks = 0;
  net::co_spawn(
      ioc,
      [&, &tx = tx, &rx2 = rx2]() -> net::awaitable<void> {
        try {
          co_await ab::asio::async_recv(rx2, net::use_awaitable);
          ADD_FAILURE() << "a closed receive did not throw";
        } catch (const boost::system::system_error& e) {
          EXPECT_EQ(e.code(), err::closed);
          ++checks;
        }
        auto [ec, back] =
            co_await ab::asio::async_send(tx, std::string("a"), net::as_tuple(net::use_awaitable));
        EXPECT_EQ(ec, err::closed);
        EXPECT_EQ(back, std::optional<std::string>("a"));
        ++checks;
        error_code ec2;
        std::optional<std::string> back2 =
            co_await ab::asio::async_send(tx, std::string("b"), net::redirect_error(net::use_awaitable, ec2));
        EXPECT_EQ(ec2, err::closed);
        EXPECT_EQ(back2, std::optional<std::string>("b"));
        ++checks;
      },
      net::detached);
  ioc.run();
  EXPECT_EQ(checks, 3);
}

TEST_F(asio_ops, the_value_form_yields_what_co_await_yields) {
  ab::mutex<int> m(3);
  auto [tx, rx] = ab::mpsc::bounded<std::string>(1);
  ab::manual_reset_event ev(true);
  auto [ftx, frx] = ab::broadcast::overflow<int>(1);
  ASSERT_TRUE(ftx.send(1).ok());
  ASSERT_TRUE(ftx.send(2).ok());  // overwrites 1: the receiver lags by one
  int checks = 0;
  net::co_spawn(
      ioc,
      [&, &tx = tx, &rx = rx, &frx = frx]() -> net::awaitable<void> {
        ab::result<ab::mutex_guard<int>> g =
            co_await ab::asio::async_outcome([&] { return m.lock(); }, net::use_awaitable);
        EXPECT_TRUE(g.ok());
        EXPECT_EQ(**g, 3);
        ab::send_result<std::string> s =
            co_await ab::asio::async_outcome([&] { return tx.send("v"); }, net::use_awaitable);
        EXPECT_TRUE(s.ok());
        ab::result<std::string> r =
            co_await ab::asio::async_outcome([&] { return rx.recv(); }, net::use_awaitable);
        EXPECT_EQ(r.value(), "v");
        ab::result<void> w = co_await ab::asio::async_outcome([&] { return ev.wait(); }, net::use_awaitable);
        EXPECT_TRUE(w.ok());
        ab::broadcast::recv_result<int> lag =
            co_await ab::asio::async_outcome([&] { return frx.recv(); }, net::use_awaitable);
        EXPECT_TRUE(lag.lagged());
        EXPECT_EQ(lag.missed(), 1U);
        auto [ec, v] = co_await ab::asio::async_recv(frx, net::as_tuple(net::use_awaitable));
        EXPECT_FALSE(ec);
        EXPECT_EQ(v, 2);
        checks = 1;
      },
      net::detached);
  ioc.run();
  EXPECT_EQ(checks, 1);
}

TEST_F(asio_ops, a_lagged_broadcast_receive_reports_lagged) {
  auto [tx, rx] = ab::broadcast::overflow<int>(1);
  ASSERT_TRUE(tx.send(1).ok());
  ASSERT_TRUE(tx.send(2).ok());
  std::optional<error_code> seen;
  ab::asio::async_recv(rx, net::bind_executor(ioc, [&](error_code ec, int) { seen = ec; }));
  ioc.run();
  EXPECT_EQ(seen, err::lagged);
}

TEST_F(asio_ops, a_factory_that_throws_throws_from_the_initiation_and_starts_nothing) {
  auto [tx, rx] = ab::mpsc::bounded<int>(1);
  int calls = 0;
  ab::asio::async_recv(rx, net::bind_executor(ioc, [&](error_code, int) { ++calls; }));  // pending
  EXPECT_THROW(ab::asio::async_recv(rx, net::bind_executor(ioc, [&](error_code, int) { ++calls; })),
               std::logic_error);  // one receive at a time
  ASSERT_TRUE(tx.try_send(5).ok());
  ioc.run();
  EXPECT_EQ(calls, 1);
}

// ---------------------------------------------------------------------------------------------
// Completion tokens

TEST_F(asio_ops, deferred_use_future_and_plain_callbacks) {
  ab::semaphore sem(0);
  auto [tx, rx] = ab::mpsc::bounded<int>(1);
  auto op = ab::asio::async_op(
      ex(), [&] { return sem.acquire(); }, net::deferred);
  EXPECT_EQ(sem.available(), 0U);  // nothing started: the factory runs when the op is launched
  int deferred_calls = 0;
  std::move(op)([&](error_code ec, ab::semaphore_permit p) {
    EXPECT_FALSE(ec);
    EXPECT_EQ(p.count(), 1U);
    ++deferred_calls;
  });
  std::future<int> f = ab::asio::async_op(
      ex(), [&rx = rx] { return rx.recv(); }, net::use_future);
  std::thread runner([&] { ioc.run(); });
  sem.release();
  ASSERT_TRUE(tx.try_send(11).ok());
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  EXPECT_EQ(f.get(), 11);
  runner.join();
  EXPECT_EQ(deferred_calls, 1);
}

TEST_F(asio_ops, use_future_with_the_value_form_delivers_a_failure_as_a_value) {
  // (The error-code form delivers it as an exception; not tested here: TSan cannot see the
  // reference counting of a std::exception_ptr shared across threads by the future.)
  auto [tx, rx] = ab::mpsc::bounded<int>(1);
  { auto gone = std::move(tx); }
  std::future<ab::result<int>> f = ab::asio::async_outcome(
      ex(), [&rx = rx] { return rx.recv(); }, net::use_future);
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(f.get().closed());
}

TEST_F(asio_ops, completion_runs_on_the_bound_strand) {
  auto strand = net::make_strand(ioc);
  ab::mutex<int> m(0);
  auto held = m.try_lock();
  std::atomic<int> calls{0};
  for (int i = 0; i < 4; ++i) {
    ab::asio::async_lock(
        m, net::bind_executor(strand, [&](error_code ec, std::optional<ab::mutex_guard<int>> g) {
          EXPECT_FALSE(ec);
          EXPECT_TRUE(strand.running_in_this_thread());
          ++**g;
          ++calls;
        }));
  }
  std::thread a([&] { ioc.run(); });
  std::thread b([&] { ioc.run(); });
  held.reset();
  a.join();
  b.join();
  EXPECT_EQ(calls.load(), 4);
  EXPECT_EQ(*m.try_lock().value(), 4);
}

/// Counts the allocations made through it.
template <class T>
struct counting_allocator {
  using value_type = T;
  std::shared_ptr<int> count;
  explicit counting_allocator(std::shared_ptr<int> c) noexcept : count(std::move(c)) {}
  template <class U>
  explicit counting_allocator(const counting_allocator<U>& other) noexcept : count(other.count) {}
  T* allocate(std::size_t n) {
    ++*count;
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept { std::allocator<T>().deallocate(p, n); }
  template <class U>
  bool operator==(const counting_allocator<U>& other) const noexcept {
    return count == other.count;
  }
};

TEST_F(asio_ops, the_operation_allocates_with_the_bound_allocator) {
  auto count = std::make_shared<int>(0);
  ab::semaphore sem(1);
  bool called = false;
  ab::asio::async_acquire(
      sem, net::bind_executor(ioc, net::bind_allocator(counting_allocator<int>(count),
                                                       [&](error_code ec, ab::semaphore_permit) {
                                                         EXPECT_FALSE(ec);
                                                         called = true;
                                                       })));
  EXPECT_GE(*count, 1);  // the operation's state
  ioc.run();
  EXPECT_TRUE(called);
}

// ---------------------------------------------------------------------------------------------
// Combinators: nothing is lost by the losing operations

TEST_F(asio_ops, or_of_two_ready_receives_leaves_the_losers_value_at_its_head) {
  using namespace net::experimental::awaitable_operators;
  auto [tx1, rx1] = ab::mpsc::bounded<int>(4);
  auto [tx2, rx2] = ab::mpsc::bounded<int>(4);
  ASSERT_TRUE(tx1.try_send(1).ok());
  ASSERT_TRUE(tx2.try_send(2).ok());
  ASSERT_TRUE(tx2.try_send(3).ok());
  std::optional<std::variant<int, int>> got;
  net::co_spawn(
      ioc,
      [&, &rx1 = rx1, &rx2 = rx2]() -> net::awaitable<void> {
        got = co_await (ab::asio::async_recv(rx1, net::use_awaitable) ||
                        ab::asio::async_recv(rx2, net::use_awaitable));
      },
      net::detached);
  ioc.run();
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(got->index(), 0U);
  EXPECT_EQ(std::get<0>(*got), 1);
  // Both receives completed at their start; the second was cancelled before its handler ran, so
  // its value is still first in its channel.
  EXPECT_EQ(rx2.try_recv().value(), 2);
  EXPECT_EQ(rx2.try_recv().value(), 3);
}

TEST_F(asio_ops, or_of_a_ready_lock_and_a_ready_event_wait_gives_the_events_permit_back) {
  using namespace net::experimental::awaitable_operators;
  ab::mutex<int> m(0);
  ab::auto_reset_event ev(true);
  std::optional<std::size_t> winner;
  std::optional<bool> set_after;
  net::co_spawn(
      ioc,
      [&]() -> net::awaitable<void> {
        // Both complete at their start (the wait takes the stored permit); the lock's handler
        // runs first, and `||` cancels the wait before its handler runs: the permit is stored
        // again. (A lock or a semaphore permit would come back anyway, released by the guard
        // `||` discards; an event's permit is not an object.)
        auto lock = ab::asio::async_lock(m, net::use_awaitable);
        auto wait = ab::asio::async_op([&] { return ev.wait(); }, net::use_awaitable);
        auto r = co_await (std::move(lock) || std::move(wait));
        winner = r.index();
        set_after = ev.is_set();
      },
      net::detached);
  ioc.run();
  EXPECT_EQ(winner, 0U);
  EXPECT_EQ(set_after, true) << "the losing wait's permit was lost";
  EXPECT_TRUE(m.try_lock().has_value());
}

TEST_F(asio_ops, and_of_a_lock_and_a_receive) {
  using namespace net::experimental::awaitable_operators;
  ab::mutex<int> m(0);
  auto [tx, rx] = ab::mpsc::bounded<int>(1);
  ASSERT_TRUE(tx.try_send(5).ok());
  bool done = false;
  net::co_spawn(
      ioc,
      [&, &rx = rx]() -> net::awaitable<void> {
        auto [g, v] = co_await (ab::asio::async_lock(m, net::use_awaitable) &&
                                ab::asio::async_recv(rx, net::use_awaitable));
        EXPECT_TRUE(g.has_value());
        EXPECT_EQ(v, 5);
        done = true;
      },
      net::detached);
  ioc.run();
  EXPECT_TRUE(done);
  EXPECT_TRUE(m.try_lock().has_value());
}

TEST_F(asio_ops, parallel_group_hands_a_losing_sends_value_back) {
  auto [tx, rx] = ab::mpsc::bounded<std::string>(1);
  ASSERT_TRUE(tx.try_send("first").ok());  // full: the send waits
  std::optional<std::string> handed_back;
  std::optional<error_code> send_ec;
  net::co_spawn(
      ioc,
      [&, &tx = tx]() -> net::awaitable<void> {
        net::steady_timer timer(ioc, 1ms);
        auto [order, ec, back, timer_ec] =
            co_await net::experimental::make_parallel_group(
                ab::asio::async_send(tx, std::string("second"), net::deferred),
                timer.async_wait(net::deferred))
                .async_wait(net::experimental::wait_for_one(), net::use_awaitable);
        EXPECT_EQ(order[0], 1U);  // the timer
        EXPECT_FALSE(timer_ec);
        send_ec = ec;
        handed_back = std::move(back);
      },
      net::detached);
  ioc.run();
  EXPECT_EQ(send_ec, net::error::operation_aborted);
  EXPECT_EQ(handed_back, std::optional<std::string>("second"));
  EXPECT_EQ(rx.try_recv().value(), "first");
  EXPECT_TRUE(rx.try_recv().empty());  // the second was never sent
  EXPECT_TRUE(tx.try_send("third").ok()) << "the losing send's unit of capacity was not given back";
}

// ---------------------------------------------------------------------------------------------
// Cancellation before the node commits: the waker skips it, the grant goes to the next waiter

/// Starts `factory`'s operation on `ioc` with its cancellation slot bound to `signal`; the
/// handler records the error_code and the value (if any).
template <class Factory, class Handler>
void start(net::io_context& ioc, net::cancellation_signal& signal, Factory factory, Handler handler) {
  ab::asio::async_op(ioc.get_executor(), std::move(factory),
                     net::bind_cancellation_slot(signal.slot(), std::move(handler)));
}

TEST_F(asio_ops, a_cancelled_pending_lock_is_skipped_by_the_unlock) {
  ab::mutex<int> m(0);
  auto held = m.try_lock();
  net::cancellation_signal sa;
  net::cancellation_signal sb;
  std::vector<std::pair<char, bool>> order;  // who completed, with the lock or not
  auto record = [&](char who) {
    return [&order, who](error_code ec, std::optional<ab::mutex_guard<int>> g) {
      EXPECT_EQ(ec ? 1 : 0, g.has_value() ? 0 : 1);
      order.emplace_back(who, g.has_value());
    };
  };
  start(
      ioc, sa, [&] { return m.lock(); }, record('a'));
  start(
      ioc, sb, [&] { return m.lock(); }, record('b'));
  ioc.poll();
  sa.emit(net::cancellation_type::terminal);
  held.reset();  // hands the lock over: to b, a was cancelled first
  ioc.run();
  ASSERT_EQ(order.size(), 2U);
  EXPECT_EQ(order[0], std::make_pair('a', false));
  EXPECT_EQ(order[1], std::make_pair('b', true));
  EXPECT_TRUE(m.try_lock().has_value());
}

TEST_F(asio_ops, partial_and_total_cancellation_cancel_and_a_second_emit_does_nothing) {
  for (auto type :
       {net::cancellation_type::terminal, net::cancellation_type::partial, net::cancellation_type::total}) {
    ab::semaphore sem(0);
    net::cancellation_signal signal;
    int calls = 0;
    start(
        ioc, signal, [&] { return sem.acquire(); },
        [&](error_code ec, ab::semaphore_permit p) {
          EXPECT_EQ(ec, net::error::operation_aborted);
          EXPECT_EQ(p.count(), 0U);
          ++calls;
        });
    ioc.poll();
    signal.emit(type);
    signal.emit(type);
    ioc.run();
    ioc.restart();
    EXPECT_EQ(calls, 1);
    sem.release();
    EXPECT_EQ(sem.available(), 1U);  // nobody queued any more
  }
}

TEST_F(asio_ops, a_barrier_wait_keeps_its_arrival_so_total_cancellation_does_not_apply) {
  ab::barrier bar(2);
  net::cancellation_signal signal;
  std::optional<error_code> seen;
  start(
      ioc, signal, [&] { return bar.wait(); }, [&](error_code ec, ab::barrier_wait_result) { seen = ec; });
  ioc.poll();
  signal.emit(net::cancellation_type::total);
  ioc.poll();
  EXPECT_FALSE(seen.has_value());
  signal.emit(net::cancellation_type::partial);
  ioc.run();
  EXPECT_EQ(seen, net::error::operation_aborted);
  EXPECT_EQ(bar.generation(), 0U);
}

TEST_F(asio_ops, a_cancellation_after_the_handler_ran_does_nothing) {
  ab::semaphore sem(1);
  net::cancellation_signal signal;
  std::optional<error_code> seen;
  std::optional<ab::semaphore_permit> kept;
  start(
      ioc, signal, [&] { return sem.acquire(); },
      [&](error_code ec, ab::semaphore_permit p) {
        seen = ec;
        kept = std::move(p);
      });
  ioc.run();
  signal.emit(net::cancellation_type::terminal);  // the slot was cleared before the handler ran
  EXPECT_EQ(seen, error_code());
  EXPECT_EQ(kept->count(), 1U);
  EXPECT_EQ(sem.available(), 0U);
}

// ---------------------------------------------------------------------------------------------
// Late cancellation: the node committed (a waker claimed it, or it completed at the start), the
// handler has not run. Each primitive's race is replayed at the core's test point: the waker has
// claimed the node and released the primitive's lock, and not yet resolved it.

class asio_late_cancel : public asio_ops {
 protected:
  /// Starts the operation whose cancellation the race replays; `handler` receives its completion.
  template <class Factory, class Handler>
  void start_late(Factory factory, Handler handler) {
    start(ioc, late_, std::move(factory), std::move(handler));
  }

  /// Lets the started operations publish, then calls `wake()`, whose waker claims the late
  /// operation's node; the operation is cancelled right then, before the waker resolves it. Then
  /// runs every completion.
  template <class Wake>
  void wake_and_run(Wake wake) {
    ioc.poll();
    sched.at(test_point::claimed_for_wake, [this] { late_.emit(net::cancellation_type::terminal); });
    wake();
    EXPECT_EQ(sched.pending_actions(), 0U) << "the wake claimed no node";
    ioc.run();
  }

  /// The race for a lone operation whose handler only records its error code.
  template <class Factory, class Wake>
  std::optional<error_code> late_outcome(Factory factory, Wake wake) {
    std::optional<error_code> seen;
    start_late(std::move(factory), [&seen](error_code ec, auto&&...) { seen = ec; });
    wake_and_run(std::move(wake));
    return seen;
  }

  ab::runtime::test_scheduler sched;
  net::cancellation_signal late_;
};

TEST_F(asio_late_cancel, mutex_the_hand_off_goes_to_the_next_waiter) {
  ab::mutex<int> m(0);
  auto held = m.try_lock();
  net::cancellation_signal sb;
  std::vector<std::pair<char, error_code>> order;
  start_late([&] { return m.lock(); },
             [&](error_code ec, std::optional<ab::mutex_guard<int>> g) {
               EXPECT_FALSE(g.has_value());
               order.emplace_back('a', ec);
             });
  start(
      ioc, sb, [&] { return m.lock(); },
      [&](error_code ec, std::optional<ab::mutex_guard<int>> g) {
        EXPECT_TRUE(g.has_value());
        order.emplace_back('b', ec);
      });
  wake_and_run([&] { held.reset(); });  // hands the lock to a; a's cancellation comes before its handler
  ASSERT_EQ(order.size(), 2U);
  EXPECT_EQ(order[0], std::make_pair('a', error_code(net::error::operation_aborted)));
  EXPECT_EQ(order[1], std::make_pair('b', error_code()));
  EXPECT_TRUE(m.try_lock().has_value());
}

TEST_F(asio_late_cancel, rwlock_write_the_hand_off_goes_to_the_waiting_reader) {
  ab::rwlock<int> rw(0);
  auto reader = rw.try_read();
  net::cancellation_signal sr;
  std::optional<error_code> writer_ec;
  std::optional<error_code> reader_ec;
  start_late([&] { return rw.write(); },
             [&](error_code ec, std::optional<ab::rwlock_write_guard<int>>) { writer_ec = ec; });
  start(
      ioc, sr, [&] { return rw.read(); },
      [&](error_code ec, std::optional<ab::rwlock_read_guard<int>> g) {
        EXPECT_TRUE(g.has_value());
        reader_ec = ec;
      });
  wake_and_run([&] { reader.reset(); });
  EXPECT_EQ(writer_ec, net::error::operation_aborted);
  EXPECT_EQ(reader_ec, error_code());
  EXPECT_TRUE(rw.try_write().has_value());
}

TEST_F(asio_late_cancel, semaphore_the_permits_go_to_the_next_waiter_and_back) {
  ab::semaphore sem(0);
  net::cancellation_signal sb;
  std::optional<error_code> a_ec;
  std::optional<std::size_t> b_count;
  start_late([&] { return sem.acquire(2); },
             [&](error_code ec, ab::semaphore_permit p) {
               EXPECT_EQ(p.count(), 0U);
               a_ec = ec;
             });
  start(
      ioc, sb, [&] { return sem.acquire(1); },
      [&](error_code, ab::semaphore_permit p) {
        b_count = p.count();
        EXPECT_EQ(sem.available(), 1U);  // the other returned permit
      });
  wake_and_run([&] { sem.release(2); });
  EXPECT_EQ(a_ec, net::error::operation_aborted);
  EXPECT_EQ(b_count, 1U);
  EXPECT_EQ(sem.available(), 2U);
}

TEST_F(asio_late_cancel, auto_reset_event_the_permit_is_stored_again) {
  ab::auto_reset_event ev;
  EXPECT_EQ(late_outcome([&] { return ev.wait(); },
                         [&] {
                           ev.notify_one();
                           EXPECT_FALSE(ev.is_set());  // handed to the operation
                         }),
            net::error::operation_aborted);
  EXPECT_TRUE(ev.is_set());
}

TEST_F(asio_late_cancel, manual_reset_event_a_wake_that_grants_nothing_loses_to_the_cancellation) {
  ab::manual_reset_event ev;
  EXPECT_EQ(late_outcome([&] { return ev.wait(); }, [&] { ev.set(); }), net::error::operation_aborted);
  EXPECT_TRUE(ev.is_set());
}

TEST_F(asio_late_cancel, mpsc_receive_the_value_stays_at_the_head) {
  auto [tx, rx] = ab::mpsc::bounded<int>(4);
  std::optional<error_code> seen;
  start_late([&rx = rx] { return rx.recv(); },
             [&](error_code ec, int v) {
               EXPECT_EQ(v, 0);
               seen = ec;
             });
  wake_and_run([&tx = tx] {
    ASSERT_TRUE(tx.try_send(1).ok());
    ASSERT_TRUE(tx.try_send(2).ok());
  });
  EXPECT_EQ(seen, net::error::operation_aborted);
  EXPECT_EQ(rx.try_recv().value(), 1);
  EXPECT_EQ(rx.try_recv().value(), 2);
}

TEST_F(asio_late_cancel, mpsc_unbounded_receive_the_value_stays_at_the_head) {
  auto [tx, rx] = ab::mpsc::unbounded<int>();
  EXPECT_EQ(late_outcome([&rx = rx] { return rx.recv(); }, [&tx = tx] { ASSERT_TRUE(tx.send(1).ok()); }),
            net::error::operation_aborted);
  EXPECT_EQ(rx.try_recv().value(), 1);
}

TEST_F(asio_late_cancel, oneshot_receive_the_value_stays) {
  auto [tx, rx] = ab::oneshot::channel<int>();
  EXPECT_EQ(late_outcome([&rx = rx] { return rx.recv(); }, [&tx = tx] { ASSERT_TRUE(tx.send(9).ok()); }),
            net::error::operation_aborted);
  EXPECT_EQ(rx.try_recv().value(), 9);
}

TEST_F(asio_late_cancel, mpsc_send_the_value_comes_back_and_the_unit_goes_on) {
  auto [tx, rx] = ab::mpsc::bounded<std::string>(1);
  ASSERT_TRUE(tx.try_send("first").ok());
  net::cancellation_signal sb;
  std::optional<std::pair<error_code, std::optional<std::string>>> a;
  std::optional<std::pair<error_code, std::optional<std::string>>> b;
  start_late([&tx = tx] { return tx.send("second"); },
             [&](error_code ec, std::optional<std::string> back) { a.emplace(ec, std::move(back)); });
  start(
      ioc, sb, [&tx = tx] { return tx.send("third"); },
      [&](error_code ec, std::optional<std::string> back) { b.emplace(ec, std::move(back)); });
  wake_and_run(
      [&rx = rx] { EXPECT_EQ(rx.try_recv().value(), "first"); });  // frees a unit: granted to a's send
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->first, net::error::operation_aborted);
  EXPECT_EQ(a->second, std::optional<std::string>("second"));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->first, error_code());
  EXPECT_EQ(rx.try_recv().value(), "third");
  EXPECT_TRUE(rx.try_recv().empty());
}

TEST_F(asio_late_cancel, mpsc_reserve_the_unit_goes_back) {
  auto [tx, rx] = ab::mpsc::bounded<int>(1);
  ASSERT_TRUE(tx.try_send(1).ok());
  std::optional<error_code> seen;
  start_late([&tx = tx] { return tx.reserve(); },
             [&](error_code ec, std::optional<ab::mpsc::permit<int>> p) {
               EXPECT_FALSE(p.has_value());
               seen = ec;
             });
  wake_and_run([&rx = rx] { EXPECT_EQ(rx.try_recv().value(), 1); });
  EXPECT_EQ(seen, net::error::operation_aborted);
  EXPECT_TRUE(tx.try_send(2).ok());
}

TEST_F(asio_late_cancel, broadcast_send_the_value_comes_back) {
  auto [tx, rx] = ab::broadcast::bounded<int>(1);
  ASSERT_TRUE(tx.try_send(1).ok());
  std::optional<std::pair<error_code, std::optional<int>>> seen;
  start_late([&tx = tx] { return tx.send(2); },
             [&](error_code ec, std::optional<int> back) { seen.emplace(ec, back); });
  wake_and_run([&rx = rx] { EXPECT_EQ(rx.try_recv().value(), 1); });
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->first, net::error::operation_aborted);
  EXPECT_EQ(seen->second, std::optional<int>(2));
  EXPECT_TRUE(rx.try_recv().empty());
  EXPECT_TRUE(tx.try_send(3).ok());
}

TEST_F(asio_late_cancel, broadcast_receive_the_message_stays) {
  auto [tx, rx] = ab::broadcast::overflow<int>(4);
  EXPECT_EQ(late_outcome([&rx = rx] { return rx.recv(); }, [&tx = tx] { ASSERT_TRUE(tx.send(4).ok()); }),
            net::error::operation_aborted);
  EXPECT_EQ(rx.try_recv().value(), 4);
}

TEST_F(asio_late_cancel, watch_changed_the_change_stays_unseen) {
  auto [tx, rx] = ab::watch::channel<int>(0);
  EXPECT_EQ(late_outcome([&rx = rx] { return rx.changed(); }, [&tx = tx] { ASSERT_TRUE(tx.send(1).ok()); }),
            net::error::operation_aborted);
  EXPECT_TRUE(rx.has_changed());
}

TEST_F(asio_late_cancel, latch_completes_cancelled) {
  ab::latch lat(1);
  EXPECT_EQ(late_outcome([&] { return lat.wait(); }, [&] { lat.count_down(); }),
            net::error::operation_aborted);
}

TEST_F(asio_late_cancel, barrier_completes_cancelled_and_keeps_its_arrival) {
  ab::barrier bar(2);
  // The second arrival completes the generation.
  EXPECT_EQ(late_outcome([&] { return bar.wait(); }, [&] { static_cast<void>(bar.wait_blocking()); }),
            net::error::operation_aborted);
  EXPECT_EQ(bar.generation(), 1U);
}

TEST_F(asio_late_cancel, phaser_participant_completes_cancelled_and_keeps_its_arrival) {
  auto ph = ab::phaser::create();
  ab::phaser_participant a = ph->enroll().value();
  ab::phaser_participant b = ph->enroll().value();
  EXPECT_EQ(late_outcome([&] { return a.wait(); }, [&] { static_cast<void>(b.arrive()); }),
            net::error::operation_aborted);
  EXPECT_EQ(ph->phase(), ab::phase_id(1));
}

TEST_F(asio_late_cancel, wait_group_completes_cancelled) {
  std::optional<ab::wait_group> member(std::in_place);
  ab::wait_group waiter = *member;
  EXPECT_EQ(late_outcome([&] { return waiter.wait(); }, [&] { member.reset(); }),  // the last member leaves
            net::error::operation_aborted);
}

// Late, after the waker resolved the node and the completion was posted.

TEST_F(asio_ops, cancelled_after_the_wake_before_the_handler_the_lock_passes_on) {
  ab::mutex<int> m(0);
  auto held = m.try_lock();
  net::cancellation_signal signal;
  std::optional<error_code> seen;
  start(
      ioc, signal, [&] { return m.lock(); },
      [&](error_code ec, std::optional<ab::mutex_guard<int>>) { seen = ec; });
  ioc.poll();
  held.reset();  // the operation holds the lock; its completion is posted
  EXPECT_FALSE(m.try_lock().has_value());
  signal.emit(net::cancellation_type::terminal);
  ioc.run();
  EXPECT_EQ(seen, net::error::operation_aborted);
  EXPECT_TRUE(m.try_lock().has_value());
}

// Late, after an operation completed at its start (its completion posted, its handler not run).

TEST_F(asio_ops, cancelled_after_an_uncontended_start_gives_everything_back) {
  ab::mutex<int> m(0);
  ab::semaphore sem(2);
  ab::auto_reset_event ev(true);
  auto [tx, rx] = ab::mpsc::bounded<int>(2);
  ASSERT_TRUE(tx.try_send(1).ok());
  auto [tx2, rx2] = ab::mpsc::bounded<int>(1);
  std::vector<net::cancellation_signal> signals(5);
  std::vector<error_code> seen;
  start(
      ioc, signals[0], [&] { return m.lock(); },
      [&](error_code ec, std::optional<ab::mutex_guard<int>>) { seen.push_back(ec); });
  start(
      ioc, signals[1], [&] { return sem.acquire(2); },
      [&](error_code ec, ab::semaphore_permit) { seen.push_back(ec); });
  start(
      ioc, signals[2], [&] { return ev.wait(); }, [&](error_code ec) { seen.push_back(ec); });
  start(
      ioc, signals[3], [&rx = rx] { return rx.recv(); }, [&](error_code ec, int) { seen.push_back(ec); });
  start(
      ioc, signals[4], [&tx2 = tx2] { return tx2.send(7); },
      [&](error_code ec, std::optional<int> back) {
        EXPECT_EQ(back, std::optional<int>(7));
        seen.push_back(ec);
      });
  EXPECT_FALSE(m.try_lock().has_value());
  EXPECT_EQ(sem.available(), 0U);
  EXPECT_FALSE(ev.is_set());
  for (auto& s : signals) s.emit(net::cancellation_type::terminal);
  ioc.run();
  ASSERT_EQ(seen.size(), 5U);
  for (const error_code& ec : seen) EXPECT_EQ(ec, net::error::operation_aborted);
  EXPECT_TRUE(m.try_lock().has_value());
  EXPECT_EQ(sem.available(), 2U);
  EXPECT_TRUE(ev.is_set());
  EXPECT_EQ(rx.try_recv().value(), 1);
  EXPECT_TRUE(rx2.try_recv().empty());
  EXPECT_TRUE(tx2.try_send(8).ok());
}

// A stop token given to the primitive's call keeps the core's rules.

TEST_F(asio_ops, a_stop_token_of_the_awaiter_ends_it_cancelled) {
  ab::semaphore sem(0);
  asyncband::stop_source stop;
  std::optional<error_code> seen;
  ab::asio::async_op(
      ex(), [&] { return sem.acquire(1, stop.get_token()); },
      [&](error_code ec, ab::semaphore_permit) { seen = ec; });
  ioc.poll();
  stop.request_stop();
  ioc.run();
  EXPECT_EQ(seen, net::error::operation_aborted);
  sem.release();
  EXPECT_EQ(sem.available(), 1U);
}

// ---------------------------------------------------------------------------------------------
// Executors, outstanding work, stop and destruction

TEST_F(asio_ops, a_pending_operation_is_outstanding_work) {
  ab::mutex<int> m(0);
  auto held = m.try_lock();
  bool called = false;
  ab::asio::async_lock(
      m, net::bind_executor(ioc, [&](error_code, std::optional<ab::mutex_guard<int>>) { called = true; }));
  // An io_context with no outstanding work stops as soon as it is polled or run (then run()
  // would return at once and the completion below would never run).
  ioc.poll();
  EXPECT_FALSE(ioc.stopped()) << "the pending operation does not count as outstanding work";
  EXPECT_FALSE(called);
  held.reset();
  ioc.run();  // runs the completion, then stops: the operation's work ended with it
  EXPECT_TRUE(called);
  EXPECT_TRUE(ioc.stopped());
}

TEST_F(asio_ops, a_coroutine_pending_on_an_operation_keeps_the_context_running) {
  // Under use_awaitable (bare, as_tuple, redirect_error) an operation counts no work of its own:
  // its handler's coroutine holds work on the same executor (asio::co_spawn's) while it exists.
  // Either way, the context must not run out of work while the operation is pending.
  auto [tx, rx] = ab::mpsc::bounded<int>(1);
  std::vector<int> got;
  net::co_spawn(
      ioc,
      [&rx = rx, &got]() -> net::awaitable<void> {
        got.push_back(co_await ab::asio::async_recv(rx, net::use_awaitable));
        auto [ec, v] = co_await ab::asio::async_recv(rx, net::as_tuple(net::use_awaitable));
        EXPECT_FALSE(ec);
        got.push_back(v);
        error_code ec2;
        got.push_back(co_await ab::asio::async_recv(rx, net::redirect_error(net::use_awaitable, ec2)));
        EXPECT_FALSE(ec2);
      },
      net::detached);
  for (int i = 1; i <= 3; ++i) {
    ioc.poll();
    EXPECT_FALSE(ioc.stopped()) << "no outstanding work while receive " << i << " is pending";
    ASSERT_TRUE(tx.try_send(i).ok());
  }
  ioc.poll();
  EXPECT_TRUE(ioc.stopped());
  EXPECT_EQ(got, (std::vector<int>{1, 2, 3}));

  // A staged wait the same way.
  ab::mutex<int> m(0);
  ab::condvar cv;
  bool notified = false;
  net::co_spawn(
      ioc,
      [&]() -> net::awaitable<void> {
        auto g = co_await ab::asio::async_condvar_wait(cv, *m.try_lock(), net::use_awaitable);
        notified = g.has_value();
      },
      net::detached);
  ioc.restart();
  ioc.poll();
  EXPECT_FALSE(ioc.stopped()) << "no outstanding work while the condvar wait is pending";
  cv.notify_one();
  ioc.poll();
  EXPECT_TRUE(ioc.stopped());
  EXPECT_TRUE(notified);
}

// Issue 17: the condvar forms take any guard of a mutex and complete with the same type: a
// mapped guard (wait_while on the part, through an awaitable) and an owned one (a handler).
TEST_F(asio_ops, condvar_waits_take_mapped_and_owned_guards_and_give_the_same_type_back) {
  struct two {
    int a = 0;
    int b = 0;
  };
  auto m = std::make_shared<ab::mutex<two>>();
  ab::condvar cv;
  std::optional<int> part;
  net::co_spawn(
      ioc,
      [&]() -> net::awaitable<void> {
        auto mapped = (*m->try_lock()).map([](two& v) -> int& { return v.b; });
        auto g = co_await ab::asio::async_condvar_wait_while(
            cv, std::move(mapped), [](const int& b) { return b == 0; }, net::use_awaitable);
        static_assert(std::is_same_v<decltype(g), std::optional<ab::mapped_mutex_guard<int>>>);
        if (g) part = **g;
      },
      net::detached);
  ioc.poll();
  m->try_lock().value()->b = 5;  // free while the wait waits
  cv.notify_one();
  ioc.restart();
  ioc.poll();
  EXPECT_EQ(part, 5);

  std::optional<ab::owned_mutex_guard<two>> owned;
  ab::asio::async_condvar_wait(
      cv, *ab::try_lock_owned(m),
      net::bind_executor(ioc, [&](error_code ec, std::optional<ab::owned_mutex_guard<two>> g) {
        if (!ec) owned = std::move(g);
      }));
  ioc.restart();
  ioc.poll();
  EXPECT_FALSE(m->is_locked());
  cv.notify_one();
  ioc.restart();
  ioc.poll();
  ASSERT_TRUE(owned.has_value());
  EXPECT_EQ((*owned)->b, 5);
  EXPECT_TRUE(m->is_locked());
  owned.reset();
  EXPECT_FALSE(m->is_locked());
}

TEST_F(asio_ops, a_wait_resolved_before_it_is_listed_completes_once_posted) {
  // The wake-up comes between the publication that left the receive pending and its listing
  // with the context (on another thread in real life; here at the test point, on this one):
  // the listing finds it resolved and completes it, once, through the executor.
  auto [tx, rx] = ab::mpsc::bounded<int>(1);
  ab::runtime::test_scheduler sched;
  sched.at(test_point::listing, [&tx = tx] { ASSERT_TRUE(tx.try_send(5).ok()); });
  std::vector<std::pair<error_code, int>> seen;
  ab::asio::async_recv(rx, net::bind_executor(ioc, [&](error_code ec, int v) { seen.emplace_back(ec, v); }));
  EXPECT_EQ(sched.pending_actions(), 0U);
  EXPECT_TRUE(seen.empty());   // not inside the initiation, which woke it
  EXPECT_EQ(ioc.poll(), 1U);   // one completion (poll: a lost one must not hang the test)
  EXPECT_TRUE(ioc.stopped());  // and no outstanding work left behind
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_EQ(seen[0], std::make_pair(error_code(), 5));
  EXPECT_TRUE(rx.try_recv().empty());

  // A grant the same way: the lock handed over before the listing, and released by the handler;
  // then a staged wait, notified (and re-locked at once) before the listing.
  const auto record = [](bool& locked) {
    return [&locked](error_code ec, std::optional<ab::mutex_guard<int>> g) { locked = !ec && g.has_value(); };
  };
  const auto completes_once_posted = [this](const bool& locked) {
    EXPECT_FALSE(locked);
    ioc.restart();
    EXPECT_EQ(ioc.poll(), 1U);
    EXPECT_TRUE(ioc.stopped());
    EXPECT_TRUE(locked);
  };
  ab::mutex<int> m(0);
  auto held = m.try_lock();
  sched.at(test_point::listing, [&held] { held.reset(); });
  bool locked = false;
  ab::asio::async_lock(m, net::bind_executor(ioc, record(locked)));
  completes_once_posted(locked);
  EXPECT_TRUE(m.try_lock().has_value());

  ab::condvar cv;
  sched.at(test_point::listing, [&cv] { cv.notify_one(); });
  bool relocked = false;
  ab::asio::async_condvar_wait(cv, *m.try_lock(), net::bind_executor(ioc, record(relocked)));
  completes_once_posted(relocked);
  EXPECT_TRUE(m.try_lock().has_value());
}

TEST_F(asio_ops, a_wake_while_the_io_context_is_stopped_completes_after_restart) {
  auto [tx, rx] = ab::mpsc::bounded<int>(1);
  std::optional<int> got;
  ab::asio::async_recv(rx, net::bind_executor(ioc, [&](error_code ec, int v) {
                         EXPECT_FALSE(ec);
                         got = v;
                       }));
  ioc.poll();
  ioc.stop();
  ASSERT_TRUE(tx.try_send(3).ok());
  ioc.run();  // stopped: runs nothing
  EXPECT_FALSE(got.has_value());
  ioc.restart();
  ioc.run();
  EXPECT_EQ(got, 3);
}

TEST(asio_ops_lifetime, destroying_the_io_context_destroys_pending_operations) {
  ab::mutex<int> m(0);
  auto held = m.try_lock();
  auto [tx, rx] = ab::mpsc::bounded<std::string>(1);
  ASSERT_TRUE(tx.try_send("full").ok());
  auto [tx2, rx2] = ab::mpsc::bounded<int>(1);
  auto alive = std::make_shared<int>(0);
  int calls = 0;
  {
    net::io_context ioc;
    ab::asio::async_lock(m, net::bind_executor(ioc, [&, keep = alive](error_code, auto) { ++calls; }));
    ab::asio::async_send(tx, std::string("pending"),
                         net::bind_executor(ioc, [&, keep = alive](error_code, auto) { ++calls; }));
    net::co_spawn(
        ioc,
        [&, keep = alive, &rx2 = rx2]() -> net::awaitable<void> {
          co_await ab::asio::async_recv(rx2, net::use_awaitable);
          ++calls;
        },
        net::detached);
    ioc.poll();
    EXPECT_EQ(alive.use_count(), 4);
  }
  EXPECT_EQ(alive.use_count(), 1);
  EXPECT_EQ(calls, 0);
  held.reset();
  EXPECT_TRUE(m.try_lock().has_value());  // the lock operation was unlinked
  EXPECT_EQ(rx.try_recv().value(), "full");
  EXPECT_TRUE(rx.try_recv().empty());  // the pending send never sent
  EXPECT_TRUE(tx.try_send("again").ok());
  ASSERT_TRUE(tx2.try_send(1).ok());
  EXPECT_EQ(rx2.try_recv().value(), 1);  // and the receive took nothing
}

TEST(asio_ops_lifetime, a_lock_handed_to_a_destroyed_operation_passes_on) {
  ab::mutex<int> m(0);
  auto held = m.try_lock();
  net::io_context other;
  std::optional<error_code> next;
  ab::asio::async_lock(m, net::bind_executor(other, [&](error_code ec, auto) { next = ec; }));
  {
    net::io_context ioc;
    bool called = false;
    ab::asio::async_lock(m, net::bind_executor(ioc, [&](error_code, auto) { called = true; }));
    // Queued after `other`'s: unlock twice, the first hand-off goes to `other`'s operation.
    ioc.poll();
    EXPECT_FALSE(called);
  }
  held.reset();
  other.run();
  EXPECT_EQ(next, error_code());
  EXPECT_TRUE(m.try_lock().has_value());

  // Now the destroyed context's operation is the one woken.
  auto held2 = m.try_lock();
  net::io_context waiter_ctx;
  std::optional<error_code> after;
  {
    net::io_context ioc;
    ab::asio::async_lock(m, net::bind_executor(ioc, [&](error_code, auto) { ADD_FAILURE(); }));
    ab::asio::async_lock(m, net::bind_executor(waiter_ctx, [&](error_code ec, auto) { after = ec; }));
    held2.reset();  // hands the lock to the first; its completion is posted to ioc, never run
  }
  waiter_ctx.run();
  EXPECT_EQ(after, error_code()) << "the lock handed to the destroyed operation was lost";
  EXPECT_TRUE(m.try_lock().has_value());
}

TEST(asio_ops_lifetime, a_context_made_where_a_destroyed_one_was_gets_its_own_service) {
  // The service lookup is cached per thread: a new io_context, perhaps at the address of the
  // last one, must not find the destroyed context's service (ASan: use after free).
  ab::mutex<int> m(0);
  auto held = m.try_lock();
  int calls = 0;
  for (int round = 0; round < 3; ++round) {
    std::optional<net::io_context> ioc(std::in_place);
    ab::asio::async_lock(m, net::bind_executor(*ioc, [&](error_code, auto) { ++calls; }));
    ioc->poll();
    ioc.reset();  // unlinks the pending lock
  }
  held.reset();
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(m.try_lock().has_value());
}

// ---------------------------------------------------------------------------------------------
// Bounded stress: `||` with timers on a thread pool. Every operation runs on its coroutine's
// strand (so the cancellation emitted by `||` or parallel_group is synchronized with its
// handler: the deferred send names the strand, or it would complete on the system executor,
// where the group's cancellation would race with its completion). Invariants:
// permits are conserved, every value sent is received exactly once, every send that lost to its
// timer handed its value back.

// The coroutines' executor is the strand type itself, not any_io_executor: a type-erased strand
// is a reference-counted heap object whose count Asio releases with a fence, which TSan does not
// model (it reports the last release on another thread as a race, in Asio's own code).
using pool_strand = net::strand<net::thread_pool::executor_type>;
using strand_timer = net::basic_waitable_timer<std::chrono::steady_clock,
                                               net::wait_traits<std::chrono::steady_clock>, pool_strand>;
constexpr net::use_awaitable_t<pool_strand> on_strand;

TEST(asio_ops_stress, or_with_timers_loses_no_permit_and_no_value) {
  using namespace net::experimental::awaitable_operators;
  constexpr int workers = 4;
  constexpr int rounds = 300;
  net::thread_pool pool(2);
  ab::semaphore sem(2);
  auto [tx, rx] = ab::mpsc::bounded<int>(2);
  std::atomic<int> sent{0};
  std::atomic<int> handed_back{0};
  std::vector<int> received;

  for (int w = 0; w < workers; ++w) {
    net::co_spawn(
        pool_strand(pool.get_executor()),
        [&, w, tx = tx]() mutable -> net::awaitable<void, pool_strand> {
          const pool_strand ex = co_await net::this_coro::executor;
          for (int i = 0; i < rounds; ++i) {
            strand_timer timer(ex, std::chrono::microseconds(i % 7));
            auto acquire = ab::asio::async_acquire(sem, on_strand);
            auto expiry = timer.async_wait(on_strand);
            auto r = co_await (std::move(acquire) || std::move(expiry));
            static_cast<void>(r);  // the permit (if any) is released here
            const int value = w * rounds + i;
            strand_timer timer2(ex, std::chrono::microseconds(i % 5));
            auto [order, ec, back, timer_ec] =
                co_await net::experimental::make_parallel_group(
                    ab::asio::async_send(ex, tx, value, net::deferred), timer2.async_wait(net::deferred))
                    .async_wait(net::experimental::wait_for_one(), on_strand);
            static_cast<void>(order);
            static_cast<void>(timer_ec);
            if (!ec) {
              ++sent;
            } else {
              EXPECT_EQ(ec, net::error::operation_aborted);
              EXPECT_EQ(back, std::optional<int>(value));
              ++handed_back;
            }
          }
          { auto done_sending = std::move(tx); }  // the last one gone closes the channel
        },
        net::detached);
  }
  { auto drop = std::move(tx); }  // the coroutines hold the only senders now
  net::co_spawn(
      pool_strand(pool.get_executor()),
      [&, &rx = rx]() -> net::awaitable<void, pool_strand> {
        const pool_strand ex = co_await net::this_coro::executor;
        for (;;) {
          strand_timer timer(ex, 3us);
          auto recv = ab::asio::async_op([&] { return rx.recv(); }, net::as_tuple(on_strand));
          auto expiry = timer.async_wait(on_strand);
          auto r = co_await (std::move(recv) || std::move(expiry));
          if (r.index() == 1) continue;
          auto [ec, v] = std::get<0>(r);
          if (ec == err::closed) co_return;
          received.push_back(v);
        }
      },
      net::detached);
  pool.join();
  EXPECT_EQ(sem.available(), 2U);
  EXPECT_EQ(sent.load() + handed_back.load(), workers * rounds);
  EXPECT_EQ(static_cast<int>(received.size()), sent.load());
  std::vector<int> sorted = received;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) << "a value received twice";
}

// ---------------------------------------------------------------------------------------------
// Staged waits (several waits in a row): condvar wait and wait_while, watch's wait_for. The
// operation owns a stop source; the Asio cancellation requests the stop.

struct cv_wait_factory {
  ab::condvar* cv;
  ab::mutex_guard<int>* guard;
  auto operator()(asyncband::stop_token stop) const { return cv->wait(std::move(*guard), std::move(stop)); }
};
struct watch_wait_for_factory {
  ab::watch::receiver<int>* rx;
  auto operator()(asyncband::stop_token stop) const {
    return rx->wait_for([](int v) { return v > 0; }, std::move(stop));
  }
};
static_assert(ab::asio::staged_factory<cv_wait_factory> && !ab::asio::awaiter_factory<cv_wait_factory>);
static_assert(std::is_same_v<sig_t<cv_wait_factory>, void(error_code, std::optional<ab::mutex_guard<int>>)>);
static_assert(std::is_same_v<outcome_t<cv_wait_factory>, ab::result<ab::mutex_guard<int>>>);
static_assert(
    std::is_same_v<sig_t<watch_wait_for_factory>, void(error_code, std::optional<ab::watch::borrowed<int>>)>);
static_assert(std::is_same_v<outcome_t<watch_wait_for_factory>, ab::result<ab::watch::borrowed<int>>>);

/// Two condvar waiters from Asio, each with its own cancellation signal, on one mutex.
class asio_condvar : public asio_late_cancel {
 protected:
  auto record(char who) {
    return [this, who](error_code ec, std::optional<ab::mutex_guard<int>> g) {
      EXPECT_EQ(ec ? 1 : 0, g.has_value() ? 0 : 1);
      done.emplace_back(who, ec);
    };
  }
  /// Starts a wait of `who` (holding the mutex until it has registered); its handler records
  /// the error_code and, with the guard, the value, then unlocks.
  void start_wait(char who, net::cancellation_signal& signal) {
    auto guard = m.try_lock();
    ASSERT_TRUE(guard.has_value());
    ab::asio::async_condvar_wait(ex(), cv, std::move(*guard),
                                 net::bind_cancellation_slot(signal.slot(), record(who)));
  }
  ab::mutex<int> m{0};
  ab::condvar cv;
  std::vector<std::pair<char, error_code>> done;
};

TEST_F(asio_condvar, wait_and_wait_while_from_asio_coroutines) {
  auto [wtx, wrx] = ab::watch::channel<int>(0);
  auto& rx = wrx;
  std::vector<int> seen;
  net::co_spawn(
      ioc,
      [&]() -> net::awaitable<void> {
        auto g = co_await ab::asio::async_lock(m, net::use_awaitable);
        auto notified = co_await ab::asio::async_condvar_wait(cv, std::move(*g), net::use_awaitable);
        seen.push_back(**notified);
        auto ready = co_await ab::asio::async_condvar_wait_while(
            cv, std::move(*notified), [](int v) { return v < 2; }, net::use_awaitable);
        seen.push_back(**ready);
        ready.reset();
        auto version = co_await ab::asio::async_wait_for(
            rx, [](int v) { return v == 3; }, net::use_awaitable);
        seen.push_back(**version);
      },
      net::detached);
  ioc.poll();
  for (int v = 1; v <= 2; ++v) {
    **m.try_lock() = v;
    cv.notify_one();
    ioc.poll();
  }
  ASSERT_TRUE(wtx.send(1).ok());
  ASSERT_TRUE(wtx.send(3).ok());
  ioc.run();
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3}));
}

TEST_F(asio_condvar, the_generic_form_takes_a_factory_of_a_stop_token) {
  auto guard = m.try_lock();
  std::optional<ab::result<ab::mutex_guard<int>>> got;
  ab::asio::async_outcome(
      ex(), [&](asyncband::stop_token stop) { return cv.wait(std::move(*guard), std::move(stop)); },
      [&](ab::result<ab::mutex_guard<int>> r) { got.emplace(std::move(r)); });
  ioc.poll();
  EXPECT_FALSE(got.has_value());
  EXPECT_TRUE(m.try_lock().has_value()) << "the wait unlocked the mutex once registered";
  cv.notify_all();
  ioc.run();
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->ok());
}

TEST_F(asio_condvar, cancelled_while_waiting_for_the_notification) {
  net::cancellation_signal sa;
  start_wait('a', sa);
  ioc.poll();
  sa.emit(net::cancellation_type::terminal);
  ioc.run();
  ASSERT_EQ(done.size(), 1U);
  EXPECT_EQ(done[0].second, net::error::operation_aborted);
  EXPECT_TRUE(m.try_lock().has_value()) << "a cancelled wait does not hold the mutex";
}

TEST_F(asio_condvar, total_cancellation_is_not_honoured_the_wait_would_leave_the_mutex_unlocked) {
  net::cancellation_signal sa;
  start_wait('a', sa);
  ioc.poll();
  sa.emit(net::cancellation_type::total);
  ioc.poll();
  EXPECT_TRUE(done.empty());
  cv.notify_one();
  ioc.run();
  ASSERT_EQ(done.size(), 1U);
  EXPECT_EQ(done[0].second, error_code());
}

TEST_F(asio_condvar, cancelled_after_the_notify_claimed_it_the_notification_goes_to_the_next_waiter) {
  net::cancellation_signal sb;
  start_wait('a', late_);
  start_wait('b', sb);
  // The notify_one claims a; a's stop comes before its re-lock, so it passes the notify_one on.
  wake_and_run([&] { cv.notify_one(); });
  ASSERT_EQ(done.size(), 2U);
  // b's completion is posted first: the pass-on happens inside a's resolution.
  EXPECT_EQ(done[0], std::make_pair('b', error_code()));
  EXPECT_EQ(done[1], std::make_pair('a', error_code(net::error::operation_aborted)));
}

TEST_F(asio_condvar, cancelled_while_re_locking_the_notification_goes_to_the_next_waiter) {
  net::cancellation_signal sa;
  net::cancellation_signal sb;
  start_wait('a', sa);
  start_wait('b', sb);
  ioc.poll();
  auto held = m.try_lock();
  cv.notify_one();  // a is notified and queues for the mutex, which is held
  ioc.poll();
  EXPECT_TRUE(done.empty());
  sa.emit(net::cancellation_type::terminal);  // a leaves the mutex queue and passes the notify_one to b
  held.reset();
  ioc.poll();  // not run(): b left waiting would keep it running
  ASSERT_EQ(done.size(), 2U);
  EXPECT_EQ(done[0], std::make_pair('a', error_code(net::error::operation_aborted)));
  EXPECT_EQ(done[1], std::make_pair('b', error_code()));
  EXPECT_TRUE(m.try_lock().has_value());
}

TEST_F(asio_condvar, cancelled_after_it_re_locked_before_its_handler_the_mutex_and_notification_go_on) {
  net::cancellation_signal sa;
  net::cancellation_signal sb;
  start_wait('a', sa);
  start_wait('b', sb);
  ioc.poll();
  cv.notify_one();  // a is notified and re-locks at once (the mutex is free): its completion is posted
  EXPECT_FALSE(m.try_lock().has_value()) << "a holds the mutex, its handler has not run";
  sa.emit(net::cancellation_type::terminal);  // late: a unlocks and passes the notify_one to b
  ioc.poll();                                 // not run(): b left waiting would keep it running
  ASSERT_EQ(done.size(), 2U);
  EXPECT_EQ(done[0], std::make_pair('a', error_code(net::error::operation_aborted)));
  EXPECT_EQ(done[1], std::make_pair('b', error_code()));
  EXPECT_TRUE(m.try_lock().has_value());
}

TEST_F(asio_condvar, a_predicate_that_throws_at_the_start_throws_from_the_initiation) {
  auto guard = m.try_lock();
  EXPECT_THROW(ab::asio::async_condvar_wait_while(
                   ex(), cv, std::move(*guard), [](int) -> bool { throw std::runtime_error("check"); },
                   [](error_code, std::optional<ab::mutex_guard<int>>) { ADD_FAILURE(); }),
               std::runtime_error);
  EXPECT_TRUE(m.try_lock().has_value()) << "the guard went with the operation";
}

TEST_F(asio_condvar, a_predicate_that_throws_later_propagates_out_of_run_with_the_mutex_unlocked) {
  auto guard = m.try_lock();
  ab::asio::async_condvar_wait_while(
      ex(), cv, std::move(*guard),
      [](int v) -> bool {
        if (v == 1) throw std::runtime_error("check");
        return true;
      },
      [](error_code, std::optional<ab::mutex_guard<int>>) { ADD_FAILURE(); });
  ioc.poll();
  **m.try_lock() = 1;
  cv.notify_all();
  EXPECT_THROW(ioc.run(), std::runtime_error);
  EXPECT_TRUE(m.try_lock().has_value());
}

TEST_F(asio_condvar, or_with_an_expired_timer_leaves_the_mutex_free_and_passes_a_late_notification_on) {
  using namespace net::experimental::awaitable_operators;
  net::cancellation_signal sb;
  start_wait('b', sb);
  std::optional<std::size_t> winner;
  net::co_spawn(
      ioc,
      [&]() -> net::awaitable<void> {
        auto g = co_await ab::asio::async_lock(m, net::use_awaitable);
        net::steady_timer timer(ioc, 0ms);
        auto first = co_await (ab::asio::async_condvar_wait(cv, std::move(*g), net::use_awaitable) ||
                               timer.async_wait(net::use_awaitable));
        winner = first.index();
      },
      net::detached);
  ioc.run_one();  // the coroutine locks and registers after b
  ioc.poll();
  cv.notify_one();  // b, registered first, takes it; the coroutine's wait loses to the timer
  ioc.run();
  EXPECT_EQ(winner, 1U);
  ASSERT_EQ(done.size(), 1U);
  EXPECT_EQ(done[0], std::make_pair('b', error_code()));
  EXPECT_TRUE(m.try_lock().has_value());
}

TEST_F(asio_condvar, destroying_the_io_context_ends_a_pending_wait_unrun) {
  auto alive = std::make_shared<int>(0);
  net::cancellation_signal sb;  // outlives b's operation
  {
    net::io_context other;
    auto guard = m.try_lock();
    ab::asio::async_condvar_wait(
        cv, std::move(*guard),
        net::bind_executor(other, [keep = alive](error_code, auto) { ADD_FAILURE(); }));
    start_wait('b', sb);  // on ioc, registered after the destroyed one
    other.poll();
  }
  EXPECT_EQ(alive.use_count(), 1);
  cv.notify_one();  // the destroyed context's wait left the condvar: b is the oldest
  ioc.poll();       // not run(): b left waiting would keep it running
  ASSERT_EQ(done.size(), 1U);
  EXPECT_EQ(done[0], std::make_pair('b', error_code()));
  EXPECT_TRUE(m.try_lock().has_value());
}

TEST_F(asio_condvar, destroying_the_io_context_with_a_woken_wait_passes_its_notification_on) {
  net::cancellation_signal sb;
  {
    net::io_context other;
    auto guard = m.try_lock();
    ab::asio::async_condvar_wait(cv, std::move(*guard),
                                 net::bind_executor(other, [](error_code, auto) { ADD_FAILURE(); }));
    start_wait('b', sb);
    cv.notify_one();  // the first re-locks: its completion is posted to `other`, which never runs it
    EXPECT_FALSE(m.try_lock().has_value());
  }
  ioc.poll();  // not run(): b left waiting would keep it running
  ASSERT_EQ(done.size(), 1U);
  EXPECT_EQ(done[0], std::make_pair('b', error_code()));
  EXPECT_TRUE(m.try_lock().has_value());
}

/// A coroutine with no scheduler: resumed inline on the thread that wakes it.
asyncband_test::bare_coroutine wait_then_lock_on(ab::condvar& cv, ab::mutex_guard<int> guard,
                                                 ab::mutex<int>& m, net::io_context& ioc, bool& resumed) {
  auto relocked = co_await cv.wait(std::move(guard));
  resumed = true;
  // Starts an operation on the context being destroyed: this takes its service's lock.
  ab::asio::async_lock(m, net::bind_executor(ioc, [](error_code, auto) { ADD_FAILURE(); }));
}

TEST_F(asio_condvar, a_waiter_woken_by_the_shutdown_runs_after_the_services_lock_is_released) {
  ab::mutex<int> other_mutex(0);
  bool resumed = false;
  std::optional<ab::mutex_guard<int>> held;  // outlives the context
  {
    net::io_context dying;
    auto guard = m.try_lock();
    ab::asio::async_condvar_wait(cv, std::move(*guard),
                                 net::bind_executor(dying, [](error_code, auto) { ADD_FAILURE(); }));
    wait_then_lock_on(cv, *other_mutex.try_lock(), m, dying, resumed);
    held = m.try_lock();
    cv.notify_one();  // the Asio wait is notified and queues for m, which is held
    EXPECT_FALSE(resumed);
    // The destruction cancels the Asio wait while it re-locks: it passes the notify_one to the
    // coroutine, which re-locks other_mutex at once and resumes inline, then starts an
    // operation on `dying` (a deadlock on the service's lock if it ran under it).
  }
  EXPECT_TRUE(resumed);
  held.reset();
  EXPECT_TRUE(m.try_lock().has_value()) << "the lock started during the shutdown was not left queued";
}

TEST_F(asio_late_cancel, watch_wait_for_cancelled_pending_then_late_the_version_is_still_there) {
  auto channel = ab::watch::channel<int>(0);
  auto& tx = channel.first;
  auto& rx = channel.second;  // named: clang 14 cannot capture a structured binding
  net::cancellation_signal signal;
  std::vector<error_code> seen;
  auto wait = [&] {
    start(ioc, signal, watch_wait_for_factory{&rx},
          [&](error_code ec, std::optional<ab::watch::borrowed<int>> g) {
            EXPECT_EQ(ec ? 1 : 0, g.has_value() ? 0 : 1);
            seen.push_back(ec);
          });
  };
  wait();
  ioc.poll();
  signal.emit(net::cancellation_type::terminal);  // pending: cancelled
  ioc.run();
  ioc.restart();
  wait();
  ioc.poll();
  ASSERT_TRUE(tx.send(5).ok());                   // completes the wait; its handler has not run
  signal.emit(net::cancellation_type::terminal);  // late
  ioc.run();
  ioc.restart();
  wait();  // the value it was woken for is still the current one
  ioc.run();
  EXPECT_EQ(seen, (std::vector<error_code>{net::error::operation_aborted, net::error::operation_aborted,
                                           error_code()}));
}

TEST_F(asio_late_cancel, watch_wait_for_cancelled_when_the_send_claimed_it_the_version_is_still_there) {
  auto channel = ab::watch::channel<int>(0);
  auto& tx = channel.first;
  auto& rx = channel.second;  // named: clang 14 cannot capture a structured binding
  const auto seen = late_outcome(watch_wait_for_factory{&rx}, [&] { ASSERT_TRUE(tx.send(5).ok()); });
  EXPECT_EQ(seen, net::error::operation_aborted);
  auto again = rx.wait_for_blocking([](int v) { return v == 5; });
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(**again, 5);
}

TEST_F(asio_ops, watch_wait_for_reports_closed_when_the_sender_goes) {
  auto [tx, rx] = ab::watch::channel<int>(0);
  std::optional<error_code> seen;
  ab::asio::async_wait_for(
      ex(), rx, [](int v) { return v > 0; },
      [&](error_code ec, std::optional<ab::watch::borrowed<int>>) { seen = ec; });
  ioc.poll();
  { auto gone = std::move(tx); }
  ioc.run();
  EXPECT_EQ(seen, error_code(err::closed));
}

// ---------------------------------------------------------------------------------------------
// The context's shutdown: every listed operation is gone (or at least no longer refers to the
// service) once wait_service::shutdown() returns, since ~io_context deletes the service right
// after. These tests run the shutdown apart from the destruction, so that an operation left
// behind is an observable leak (its handler alive) rather than a use after free of the service.

/// An io_context whose services the test shuts down before destroying them.
class shutdown_context : public net::io_context {
 public:
  using net::io_context::shutdown;
};

TEST(asio_ops_lifetime, the_shutdown_cancels_every_operation_when_a_cancellation_completes_another) {
  ab::semaphore sem(1);
  ab::semaphore gate(0);
  auto alive = std::make_shared<int>(0);
  int calls = 0;
  auto handler = [&] { return [&calls, keep = alive](error_code, ab::semaphore_permit) { ++calls; }; };
  shutdown_context ctx;
  ab::runtime::test_scheduler sched;
  ab::asio::async_acquire(gate, net::bind_executor(ctx, handler()));  // d: listed first, cancelled last
  // w queues behind c but is listed before c, as when another thread starts it between c's
  // queueing and c's listing.
  sched.at(test_point::published,
           [&] { ab::asio::async_acquire(sem, 1, net::bind_executor(ctx, handler())); });
  ab::asio::async_acquire(sem, 2, net::bind_executor(ctx, handler()));  // c: holds 1 of its 2 permits
  ASSERT_EQ(sched.pending_actions(), 0U);
  // The loop cancels c first; c's cancellation hands its permit to w, which completes on this
  // thread and goes to the doomed list, its `next` overwritten while the loop still walks it.
  ctx.shutdown();
  EXPECT_EQ(alive.use_count(), 1) << "d was skipped by the shutdown: left queued, referring to the service";
  gate.release();  // with the context alive, d finds its service shut down and goes
  EXPECT_EQ(alive.use_count(), 1);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(sem.available(), 1U);
}

TEST(asio_ops_lifetime,
     an_operation_started_on_a_shut_down_context_and_woken_before_its_cancellation_goes_once) {
  // The listing finds the context shut down: the operation is to cancel its wait. A wake-up
  // comes first (on another thread in real life; here at the test point, on this one): the
  // operation must still be there for the cancellation, and be destroyed once, after it.
  shutdown_context ctx;
  auto [tx, rx] = ab::mpsc::bounded<int>(1);
  auto alive = std::make_shared<int>(0);
  ab::asio::async_recv(rx, net::bind_executor(ctx, [keep = alive](error_code, int) { ADD_FAILURE(); }));
  ctx.shutdown();  // ends the first receive; the service stays (the context is not destroyed)
  EXPECT_EQ(alive.use_count(), 1);
  ab::runtime::test_scheduler sched;
  sched.at(test_point::refused, [&tx = tx] { ASSERT_TRUE(tx.try_send(5).ok()); });
  ab::asio::async_recv(rx, net::bind_executor(ctx, [keep = alive](error_code, int) { ADD_FAILURE(); }));
  EXPECT_EQ(sched.pending_actions(), 0U);
  EXPECT_EQ(alive.use_count(), 1);
  EXPECT_EQ(rx.try_recv().value(), 5);  // the value it was woken for stays in the channel

  // A staged wait the same way: notified (and re-locked) before its stop is requested.
  ab::condvar cv;
  ab::mutex<int> m(0);
  sched.at(test_point::refused, [&cv] { cv.notify_one(); });
  ab::asio::async_condvar_wait(
      ctx.get_executor(), cv, *m.try_lock(),
      [keep = alive](error_code, std::optional<ab::mutex_guard<int>>) { ADD_FAILURE(); });
  EXPECT_EQ(sched.pending_actions(), 0U);
  EXPECT_EQ(alive.use_count(), 1);
  EXPECT_TRUE(m.try_lock().has_value());
}

/// A coroutine with no scheduler, resumed inline by the wake that also claims the operation
/// started after it: it shuts the context down from inside that wake's batch.
asyncband_test::bare_coroutine shut_down_when_set(ab::manual_reset_event& ev, shutdown_context& ctx,
                                                  const std::shared_ptr<int>& alive, long& after) {
  co_await ev.wait();
  ctx.shutdown();
  after = alive.use_count();
}

TEST(asio_ops_lifetime, a_context_shut_down_by_a_waiter_resumed_inline_ends_the_operations_woken_with_it) {
  ab::manual_reset_event ev;
  shutdown_context ctx;
  auto alive = std::make_shared<int>(0);
  long after = 0;
  shut_down_when_set(ev, ctx, alive, after);
  ab::asio::async_op(
      ctx.get_executor(), [&] { return ev.wait(); }, [keep = alive](error_code) { ADD_FAILURE(); });
  ctx.poll();
  ev.set();  // claims both; the coroutine resumes first and shuts the context down
  EXPECT_EQ(after, 1) << "the operation claimed in the same batch outlived the shutdown (~io_context: "
                         "its later resolution uses the deleted service)";
  EXPECT_EQ(alive.use_count(), 1);
}

asyncband_test::bare_coroutine shut_down_when_notified(ab::condvar& cv, ab::mutex_guard<int> guard,
                                                       shutdown_context& ctx,
                                                       const std::shared_ptr<int>& alive, long& after) {
  auto relocked = co_await cv.wait(std::move(guard));
  ctx.shutdown();
  after = alive.use_count();
}

TEST(asio_ops_lifetime, a_context_shut_down_by_a_waiter_resumed_inline_ends_the_staged_waits_woken_with_it) {
  ab::condvar cv;
  ab::mutex<int> m(0);
  ab::mutex<int> other(0);
  shutdown_context ctx;
  auto alive = std::make_shared<int>(0);
  long after = 0;
  shut_down_when_notified(cv, *other.try_lock(), ctx, alive, after);
  ab::asio::async_condvar_wait(
      ctx.get_executor(), cv, *m.try_lock(),
      [keep = alive](error_code, std::optional<ab::mutex_guard<int>>) { ADD_FAILURE(); });
  ctx.poll();
  cv.notify_all();  // claims both; the coroutine re-locks, resumes first and shuts the context down
  EXPECT_EQ(after, 1) << "the staged wait claimed in the same batch outlived the shutdown (~io_context: "
                         "its later resolution uses the deleted service)";
  EXPECT_EQ(alive.use_count(), 1);
  EXPECT_TRUE(m.try_lock().has_value());
}

/// One link of an inline hand-off chain: resumed inside the unlock of the link before it (a
/// coroutine with no scheduler), it shuts the context down on turn `shutting_down`.
asyncband_test::bare_coroutine take_the_lock_in_turn(ab::mutex<int>& chain, int shutting_down,
                                                     shutdown_context& ctx, const std::shared_ptr<int>& alive,
                                                     long& after) {
  auto turn = co_await chain.lock();
  if (++*turn == shutting_down) {
    ctx.shutdown();
    after = alive.use_count();
  }
}

TEST(asio_ops_lifetime, a_context_shut_down_deep_in_an_inline_hand_off_chain_ends_the_waits_it_cancelled) {
  ab::condvar cv;
  ab::mutex<int> m(0);
  ab::mutex<int> chain(0);
  shutdown_context ctx;
  auto alive = std::make_shared<int>(0);
  long after = 0;
  ab::asio::async_condvar_wait(
      ctx.get_executor(), cv, *m.try_lock(),
      [keep = alive](error_code, std::optional<ab::mutex_guard<int>>) { ADD_FAILURE(); });
  ctx.poll();
  auto held = m.try_lock();
  cv.notify_one();  // the wait is notified and queues for m, which is held
  auto first = chain.try_lock();
  // The 16th link runs 16 batch resolutions deep (wake_batch::max_nesting): there the shutdown's
  // wake_collector hands what it collected (the cancelled re-lock's continuation) to the batch
  // being resolved, which runs it after the shutdown, when ~io_context has deleted the service.
  constexpr int links = 16;
  for (int i = 0; i < links; ++i) take_the_lock_in_turn(chain, links, ctx, alive, after);
  first.reset();
  EXPECT_EQ(after, 1) << "the wait the shutdown cancelled outlived it";
  EXPECT_EQ(alive.use_count(), 1);
  held.reset();
  EXPECT_TRUE(m.try_lock().has_value());
}

/// Resumed inline by the unlock that hands it the mutex, it destroys the condvar: nothing of
/// the condvar is in use any more as far as it can tell ("last one out").
asyncband_test::bare_coroutine destroy_the_condvar_once_locked(ab::mutex<int>& m,
                                                               std::unique_ptr<ab::condvar>& cv,
                                                               bool& destroyed) {
  auto guard = co_await m.lock();
  cv.reset();
  destroyed = true;
}

TEST_F(asio_ops, a_late_cancelled_condvar_wait_is_done_with_the_condvar_before_it_unlocks) {
  ab::mutex<int> m(0);
  auto cv = std::make_unique<ab::condvar>();
  net::cancellation_signal signal;
  std::optional<error_code> seen;
  ab::asio::async_condvar_wait(
      ex(), *cv, *m.try_lock(),
      net::bind_cancellation_slot(signal.slot(),
                                  [&](error_code ec, std::optional<ab::mutex_guard<int>>) { seen = ec; }));
  ioc.poll();
  cv->notify_one();  // re-locks at once: its completion is posted, the mutex held
  bool destroyed = false;
  destroy_the_condvar_once_locked(m, cv, destroyed);  // queues for the mutex
  EXPECT_FALSE(destroyed);
  signal.emit(
      net::cancellation_type::terminal);  // late: the completion gives the mutex and the notify_one back
  ioc.run();  // ASan: heap-use-after-free in condvar::hand_notify_one, after the unlock resumed the coroutine
  EXPECT_TRUE(destroyed);
  EXPECT_EQ(seen, net::error::operation_aborted);
}

// A bounded threaded stress of staged waits: a notifier thread notifies and takes the mutex
// (its unlock re-locks a notified wait there), while this thread, which runs the io_context,
// cancels three waits in four at a varying moment: the stop request races with the stage
// transitions on the notifier's thread. Every wait completes once, a cancelled one (in time or
// late) as aborted, without the mutex.
TEST(asio_ops_stress, staged_condvar_waits_cancelled_while_the_notifier_moves_them_on) {
  constexpr int rounds = 300;
  ab::mutex<int> m(0);
  ab::condvar cv;
  net::io_context ioc;
  std::atomic<bool> done{false};
  std::thread notifier([&] {
    while (!done.load(std::memory_order_acquire)) {
      cv.notify_one();
      auto g = m.lock_blocking();
      std::this_thread::yield();
    }
  });
  int ok = 0;
  int aborted = 0;
  for (int r = 0; r < rounds; ++r) {
    net::cancellation_signal signal;
    int calls = 0;
    ab::asio::async_condvar_wait(
        ioc.get_executor(), cv, m.lock_blocking(),
        net::bind_cancellation_slot(signal.slot(), [&](error_code ec, std::optional<ab::mutex_guard<int>> g) {
          ++calls;
          EXPECT_EQ(ec ? 1 : 0, g.has_value() ? 0 : 1);
          (ec ? aborted : ok) += 1;
        }));
    for (int i = 0; i < r % 7; ++i) std::this_thread::yield();
    if (r % 4 != 0) signal.emit(net::cancellation_type::terminal);  // else the notifier completes it
    ioc.run();
    ioc.restart();
    EXPECT_EQ(calls, 1);
  }
  done.store(true, std::memory_order_release);
  notifier.join();
  EXPECT_EQ(ok, (rounds + 3) / 4) << "a wait not cancelled completes ok";
  EXPECT_EQ(aborted, rounds - (rounds + 3) / 4) << "a cancelled wait reports aborted, in time or late";
  EXPECT_TRUE(m.try_lock().has_value());
}

}  // namespace
