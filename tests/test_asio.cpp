// SPDX-License-Identifier: Apache-2.0
// Tests of the Boost.Asio bridge (asyncband/asio.hpp): every primitive awaited from asio
// coroutines (use_awaitable) on an io_context and on an asio::thread_pool, completion on the
// handler's executor and never inside the waking call, both cancellation paths (asyncband::stop_token
// and asio's cancellation slots), other completion tokens, and the destruction of an io_context
// with pending waits.
#include <gtest/gtest.h>

#include <asyncband/asio.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/stop_token.hpp>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

namespace {

namespace net = boost::asio;
namespace ab = asyncband;
using ab::wait_status;
using namespace std::chrono_literals;

// Every op is pending when the waker runs: the io_context runs the coroutines up to their
// suspension (poll), the test wakes them from the main thread, then a runner thread completes.
class asio_bridge : public ::testing::Test {
 protected:
  net::io_context ioc;
};

TEST_F(asio_bridge, each_primitive_from_use_awaitable_on_io_context) {
  ab::manual_reset_event mre;
  ab::auto_reset_event are;
  ab::latch lat(2);
  ab::barrier bar(2);
  std::optional<ab::wait_group> wg(std::in_place);
  ab::wait_group member = *wg;

  std::atomic<int> completed{0};
  std::atomic<int> leaders{0};
  std::vector<std::thread::id> threads;
  std::mutex threads_mutex;
  auto on_ioc = [&] {
    EXPECT_TRUE(ioc.get_executor().running_in_this_thread());
    const std::lock_guard lock(threads_mutex);
    threads.push_back(std::this_thread::get_id());
  };

  // One coroutine per primitive whose wait completes with a status alone.
  auto spawn_status_waiter = [&](auto& primitive) {
    net::co_spawn(
        ioc,
        [&, p = &primitive]() -> net::awaitable<void> {
          EXPECT_EQ(co_await ab::asio::async_wait(*p, net::use_awaitable), wait_status::ok);
          on_ioc();
          ++completed;
        },
        net::detached);
  };
  spawn_status_waiter(mre);
  spawn_status_waiter(are);
  spawn_status_waiter(lat);
  spawn_status_waiter(*wg);
  for (int i = 0; i < 2; ++i) {
    net::co_spawn(
        ioc,
        [&]() -> net::awaitable<void> {
          auto [status, r] = co_await ab::asio::async_wait(bar, net::use_awaitable);
          EXPECT_EQ(status, wait_status::ok);
          if (r.is_leader()) ++leaders;
          on_ioc();
          ++completed;
        },
        net::detached);
  }

  // Every coroutine is now suspended in its async_wait, but the barrier's: its second arrival
  // completed the generation (both of its waits completed, posted and run by poll).
  ioc.poll();
  EXPECT_EQ(completed.load(), 2);
  threads.clear();
  EXPECT_FALSE(wg->is_member());  // the wait left the group when it started
  EXPECT_EQ(bar.generation(), 1u);

  std::thread runner([&] { ioc.run(); });  // returns once every operation has completed
  const std::thread::id runner_id = runner.get_id();
  mre.set();
  are.notify_one();
  lat.count_down();
  lat.count_down();
  { ab::wait_group gone = std::move(member); }
  runner.join();

  EXPECT_EQ(completed.load(), 6);
  EXPECT_EQ(leaders.load(), 1);
  EXPECT_FALSE(are.is_set());                              // the permit went to the waiter
  for (const auto id : threads) EXPECT_EQ(id, runner_id);  // woken from main, completed on the runner
}

TEST(asio_bridge_pool, broadcast_to_awaitables_on_a_two_thread_pool) {
  net::thread_pool pool(2);
  ab::manual_reset_event ev;
  ab::barrier bar(4);
  ab::latch started(8);
  std::atomic<int> ok{0};
  std::atomic<int> off_pool{0};
  std::atomic<int> leaders{0};
  for (int i = 0; i < 8; ++i) {
    net::co_spawn(
        pool,
        [&]() -> net::awaitable<void> {
          started.count_down();
          const wait_status s = co_await ab::asio::async_wait(ev, net::use_awaitable);
          if (!pool.get_executor().running_in_this_thread()) ++off_pool;
          if (s == wait_status::ok) ++ok;
        },
        net::detached);
  }
  for (int i = 0; i < 4; ++i) {
    net::co_spawn(
        pool,
        [&]() -> net::awaitable<void> {
          auto [s, r] = co_await ab::asio::async_wait(bar, asyncband::stop_token{}, net::use_awaitable);
          EXPECT_EQ(s, wait_status::ok);
          if (r.is_leader()) ++leaders;
          if (!pool.get_executor().running_in_this_thread()) ++off_pool;
        },
        net::detached);
  }
  started.wait_blocking();
  ev.set();
  pool.join();  // returns once every operation has completed (each counts as work)
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(leaders.load(), 1);
  EXPECT_EQ(off_pool.load(), 0);
  EXPECT_EQ(bar.generation(), 1u);
}

TEST_F(asio_bridge, completion_runs_on_the_bound_strand) {
  auto strand = net::make_strand(ioc);
  ab::latch lat(1);
  std::atomic<int> calls{0};
  for (int i = 0; i < 4; ++i) {
    ab::asio::async_wait(lat, net::bind_executor(strand, [&](wait_status s) {
                           EXPECT_EQ(s, wait_status::ok);
                           EXPECT_TRUE(strand.running_in_this_thread());
                           ++calls;
                         }));
  }
  std::thread a([&] { ioc.run(); });
  std::thread b([&] { ioc.run(); });
  lat.count_down();
  a.join();
  b.join();
  EXPECT_EQ(calls.load(), 4);
}

TEST_F(asio_bridge, explicit_executor_is_the_default_for_plain_callbacks) {
  ab::manual_reset_event ev;
  bool called = false;
  ab::asio::async_wait(ioc.get_executor(), ev, [&](wait_status s) {
    EXPECT_EQ(s, wait_status::ok);
    EXPECT_TRUE(ioc.get_executor().running_in_this_thread());
    called = true;
  });
  std::thread setter([&] { ev.set(); });
  setter.join();
  EXPECT_FALSE(called);  // posted, not run on the setting thread
  ioc.run();
  EXPECT_TRUE(called);
}

TEST(asio_bridge_default, plain_callback_completes_on_the_system_executor) {
  ab::manual_reset_event ev;
  const std::thread::id main_thread = std::this_thread::get_id();
  std::promise<bool> ran;
  ab::asio::async_wait(ev, [&](wait_status s) {
    EXPECT_EQ(s, wait_status::ok);
    ran.set_value(std::this_thread::get_id() != main_thread);  // a system_context thread
  });
  std::future<bool> f = ran.get_future();
  ev.set();
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready) << "the handler never ran";
  EXPECT_TRUE(f.get());
}

TEST_F(asio_bridge, immediate_completion_is_posted_not_run_inside_async_wait) {
  ab::manual_reset_event ev(true);
  ab::barrier bar(1);
  int calls = 0;
  ab::asio::async_wait(ioc.get_executor(), ev, [&](wait_status s) {
    EXPECT_EQ(s, wait_status::ok);
    ++calls;
  });
  ab::asio::async_wait(ioc.get_executor(), bar, [&](wait_status s, ab::barrier_wait_result r) {
    EXPECT_EQ(s, wait_status::ok);
    EXPECT_TRUE(r.is_leader());
    ++calls;
  });
  EXPECT_EQ(calls, 0);
  ioc.run();
  EXPECT_EQ(calls, 2);
}

TEST_F(asio_bridge, completion_never_runs_inside_the_waking_call) {
  ab::manual_reset_event ev;
  bool set_returned = false;
  int calls = 0;
  for (int i = 0; i < 3; ++i) {
    ab::asio::async_wait(ioc.get_executor(), ev, [&](wait_status) {
      EXPECT_TRUE(set_returned);  // set() ran on this very thread, in a handler of this io_context
      ++calls;
    });
  }
  net::post(ioc, [&] {
    ev.set();
    set_returned = true;
  });
  ioc.run();
  EXPECT_EQ(calls, 3);
}

TEST_F(asio_bridge, stop_token_cancels_exactly_once) {
  ab::manual_reset_event ev;
  asyncband::stop_source stop;
  int calls = 0;
  wait_status seen = wait_status::ok;
  ab::asio::async_wait(ioc.get_executor(), ev, stop.get_token(), [&](wait_status s) {
    ++calls;
    seen = s;
  });
  ioc.poll();
  std::thread canceller([&] {
    stop.request_stop();
    stop.request_stop();
  });
  canceller.join();
  ev.set();  // too late: the wait was already claimed by the cancellation
  ioc.run();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, wait_status::cancelled);
}

TEST_F(asio_bridge, stop_token_from_use_awaitable) {
  ab::latch lat(1);
  asyncband::stop_source stop;
  std::optional<wait_status> seen;
  net::co_spawn(
      ioc,
      [&]() -> net::awaitable<void> {
        seen = co_await ab::asio::async_wait(lat, stop.get_token(), net::use_awaitable);
      },
      net::detached);
  ioc.poll();
  EXPECT_FALSE(seen.has_value());
  stop.request_stop();
  ioc.run();
  EXPECT_EQ(seen, wait_status::cancelled);
  EXPECT_EQ(lat.count(), 1);
}

TEST_F(asio_bridge, already_stopped_token_does_not_touch_the_primitive) {
  ab::barrier bar(1);
  asyncband::stop_source stop;
  stop.request_stop();
  int calls = 0;
  ab::asio::async_wait(ioc.get_executor(), bar, stop.get_token(),
                       [&](wait_status s, ab::barrier_wait_result r) {
                         EXPECT_EQ(s, wait_status::cancelled);
                         EXPECT_FALSE(r.is_leader());
                         ++calls;
                       });
  EXPECT_EQ(calls, 0);
  ioc.run();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(bar.generation(), 0u);  // no arrival
}

TEST_F(asio_bridge, auto_reset_permit_of_a_cancelled_wait_is_passed_on) {
  ab::auto_reset_event ev;
  asyncband::stop_source stop;
  std::vector<std::pair<char, wait_status>> order;
  ab::asio::async_wait(ioc.get_executor(), ev, stop.get_token(),
                       [&](wait_status s) { order.emplace_back('a', s); });
  ab::asio::async_wait(ioc.get_executor(), ev, [&](wait_status s) { order.emplace_back('b', s); });
  ioc.poll();
  ev.notify_one();      // claims `a` with the permit; its handler is posted, not yet run
  stop.request_stop();  // observed before `a`'s handler runs: `a` reports cancelled, passes it on
  ioc.run();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], std::make_pair('a', wait_status::cancelled));
  EXPECT_EQ(order[1], std::make_pair('b', wait_status::ok));
  EXPECT_FALSE(ev.is_set());
}

TEST_F(asio_bridge, cancellation_slot_cancels) {
  ab::manual_reset_event ev;
  net::cancellation_signal signal;
  int calls = 0;
  ab::asio::async_wait(ioc.get_executor(), ev, net::bind_cancellation_slot(signal.slot(), [&](wait_status s) {
                         EXPECT_EQ(s, wait_status::cancelled);
                         ++calls;
                       }));
  ioc.poll();
  signal.emit(net::cancellation_type::terminal);
  signal.emit(net::cancellation_type::terminal);  // no effect any more
  ioc.run();
  EXPECT_EQ(calls, 1);
  ev.set();  // nothing queued
  EXPECT_EQ(calls, 1);
}

TEST_F(asio_bridge, barrier_ignores_total_cancellation) {
  ab::barrier bar(2);
  net::cancellation_signal signal;
  std::optional<wait_status> seen;
  ab::asio::async_wait(
      ioc.get_executor(), bar,
      net::bind_cancellation_slot(signal.slot(), [&](wait_status s, ab::barrier_wait_result) { seen = s; }));
  ioc.poll();
  signal.emit(net::cancellation_type::total);  // the arrival is a side effect: not "total"
  ioc.poll();
  EXPECT_FALSE(seen.has_value());
  signal.emit(net::cancellation_type::partial);
  ioc.run();
  EXPECT_EQ(seen, wait_status::cancelled);
  EXPECT_EQ(bar.generation(), 0u);  // the cancelled wait's arrival stays: one more completes it
  ioc.restart();
  ab::asio::async_wait(ioc.get_executor(), bar, [&](wait_status s, ab::barrier_wait_result r) {
    EXPECT_EQ(s, wait_status::ok);
    EXPECT_TRUE(r.is_leader());
  });
  ioc.run();
  EXPECT_EQ(bar.generation(), 1u);
}

TEST_F(asio_bridge, awaitable_operator_or_cancels_the_losing_wait) {
  using namespace net::experimental::awaitable_operators;
  ab::manual_reset_event never;
  ab::auto_reset_event are;
  std::optional<std::size_t> winner;
  net::co_spawn(
      ioc,
      [&]() -> net::awaitable<void> {
        net::steady_timer timer(ioc, 0ms);
        auto r = co_await (ab::asio::async_wait(never, net::use_awaitable) ||
                           timer.async_wait(net::use_awaitable));
        winner = r.index();
        // The losing wait was cancelled (terminal) and unlinked: a later notify stores a permit.
        are.notify_one();
      },
      net::detached);
  ioc.run();
  EXPECT_EQ(winner, 1u);
  EXPECT_TRUE(are.is_set());
}

TEST_F(asio_bridge, use_future_and_deferred) {
  ab::wait_group wg;
  ab::wait_group member = wg;
  std::future<wait_status> f = ab::asio::async_wait(ioc.get_executor(), wg, net::use_future);
  ab::latch lat(1);
  auto deferred_op = ab::asio::async_wait(ioc.get_executor(), lat, net::deferred);
  int deferred_calls = 0;
  std::move(deferred_op)([&](wait_status s) {
    EXPECT_EQ(s, wait_status::ok);
    ++deferred_calls;
  });
  std::thread runner([&] { ioc.run(); });
  { ab::wait_group gone = std::move(member); }
  lat.count_down();
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready) << "use_future wait never completed";
  EXPECT_EQ(f.get(), wait_status::ok);
  runner.join();
  EXPECT_EQ(deferred_calls, 1);
}

TEST(asio_bridge_lifetime, destroying_the_io_context_destroys_pending_waits) {
  // The primitives outlive the io_context. Its destruction abandons the pending operations:
  // their nodes are unlinked, their handlers (and the coroutine frame) destroyed, never invoked.
  ab::auto_reset_event are;
  ab::manual_reset_event mre;
  auto frame_alive = std::make_shared<int>(0);
  auto callback_alive = std::make_shared<int>(0);
  bool resumed = false;
  bool called = false;
  {
    net::io_context ioc;
    net::co_spawn(
        ioc,
        [&, keep = frame_alive]() -> net::awaitable<void> {
          co_await ab::asio::async_wait(are, net::use_awaitable);
          resumed = true;
        },
        net::detached);
    ab::asio::async_wait(ioc.get_executor(), mre, [&, keep = callback_alive](wait_status) { called = true; });
    ioc.poll();
    EXPECT_EQ(frame_alive.use_count(), 2);
    EXPECT_EQ(callback_alive.use_count(), 2);
  }
  EXPECT_EQ(frame_alive.use_count(), 1);
  EXPECT_EQ(callback_alive.use_count(), 1);
  are.notify_one();  // the waiter was unlinked: the permit is stored
  EXPECT_TRUE(are.is_set());
  mre.set();
  EXPECT_FALSE(resumed);
  EXPECT_FALSE(called);
}

TEST(asio_bridge_lifetime, destroying_the_io_context_with_a_posted_completion) {
  ab::manual_reset_event mre;
  auto alive = std::make_shared<int>(0);
  bool called = false;
  {
    net::io_context ioc;
    ab::asio::async_wait(ioc.get_executor(), mre, [&, keep = alive](wait_status) { called = true; });
    ioc.poll();
    mre.set();  // completion posted to the io_context, which never runs it
  }
  EXPECT_EQ(alive.use_count(), 1);
  EXPECT_FALSE(called);
}

TEST(asio_bridge_lifetime, a_permit_handed_to_a_destroyed_operation_passes_on) {
  // notify_one hands the permit to the asio operation (its completion is posted, never run);
  // destroying the io_context then destroys the operation, and the permit goes to the next
  // waiter instead of being lost.
  ab::auto_reset_event are;
  bool called = false;
  {
    net::io_context ioc;
    ab::asio::async_wait(ioc.get_executor(), are, [&](wait_status) { called = true; });
    ioc.poll();
    are.notify_one();
    EXPECT_FALSE(are.is_set());  // handed over, not stored
  }
  EXPECT_FALSE(called);
  EXPECT_TRUE(are.is_set());  // passed on: nobody else waits, so it is stored again
  EXPECT_TRUE(are.wait_timeout(0ms).ok());
}

// Bounded stress: callbacks on a two-thread asio pool, a notifier and a canceller on plain
// threads. Invariant: every operation completes exactly once; permits are never duplicated.
TEST(asio_bridge_stress, auto_reset_event_with_concurrent_cancellation) {
  constexpr int ops = 200;
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  net::thread_pool pool(2);
  ab::auto_reset_event ev;
  std::vector<asyncband::stop_source> stops(ops);
  std::vector<std::atomic<int>> calls(ops);
  std::atomic<int> done{0};
  std::atomic<int> ok{0};
  std::atomic<int> notifies{0};
  for (int i = 0; i < ops; ++i) {
    ab::asio::async_wait(pool.get_executor(), ev, stops[i].get_token(), [&, i](wait_status s) {
      calls[i].fetch_add(1);
      if (s == wait_status::ok) ok.fetch_add(1);
      done.fetch_add(1);
    });
  }
  std::thread canceller([&] {
    for (int i = 0; i < ops; i += 2) stops[i].request_stop();
  });
  std::thread notifier([&] {
    while (done.load() < ops && std::chrono::steady_clock::now() < deadline) {
      ev.notify_one();
      notifies.fetch_add(1);
      std::this_thread::yield();
    }
  });
  canceller.join();
  notifier.join();
  for (int i = 0; i < ops; ++i) stops[i].request_stop();  // ends whatever is left, if the deadline hit
  pool.join();
  EXPECT_EQ(done.load(), ops);
  for (int i = 0; i < ops; ++i) EXPECT_EQ(calls[i].load(), 1) << "operation " << i;
  EXPECT_LE(ok.load(), notifies.load());
}

// Last one out through the bridge (review of issue 11): an async_wait on a wait group leaves
// first; when that departure is the last member's, it resumes a scheduler-less waiter inline,
// which may destroy the handle. The bridge must not read the handle afterwards (it did: its
// begin() left, then the wait node was built from the destroyed handle).
ab::runtime::task<void> wait_then_drop(ab::wait_group wg, std::unique_ptr<ab::wait_group>& victim,
                                       bool& resumed) {
  co_await wg.wait();
  resumed = true;
  victim.reset();
}

TEST_F(asio_bridge, a_wait_group_wait_whose_departure_lets_a_waiter_destroy_the_handle) {
  auto holder = std::make_unique<ab::wait_group>();
  bool resumed = false;
  ab::runtime::task<void> dropper = wait_then_drop(*holder, holder, resumed);
  dropper.handle().resume();  // leaves its copy; waits for the holder's departure
  ASSERT_FALSE(resumed);
  std::optional<wait_status> outcome;
  ab::asio::async_wait(ioc.get_executor(), *holder, [&outcome](wait_status s) { outcome = s; });
  EXPECT_TRUE(resumed);
  EXPECT_EQ(holder, nullptr);
  ioc.run();
  EXPECT_EQ(outcome, wait_status::ok);
}

// ---------------------------------------------------------------------------------------------
// The once family from asio coroutines, with initialisers that are asio::awaitables.

// An initialiser that counts its runs and suspends on `gate` (awaited through the bridge)
// before yielding `value` or throwing.
struct asio_initializer {
  ab::manual_reset_event* gate;
  int* runs;
  int value;
  bool fails = false;
  net::awaitable<int> operator()() const {
    ++*runs;
    co_await ab::asio::async_wait(*gate, net::use_awaitable);
    if (fails) throw std::runtime_error("initialiser failed");
    co_return value;
  }
};

TEST_F(asio_bridge, get_or_init_runs_one_asio_initialiser_for_every_caller) {
  ab::once_cell<int> cell;
  ab::manual_reset_event gate;
  int runs = 0;
  std::vector<const int*> seen;
  for (int i = 0; i < 3; ++i) {
    net::co_spawn(
        ioc,
        [&, i]() -> net::awaitable<void> {
          auto r = co_await ab::asio::get_or_init(cell, asio_initializer{&gate, &runs, 10 + i});
          EXPECT_TRUE(r.ok());
          seen.push_back(&*r);
        },
        net::detached);
  }
  ioc.poll();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(cell.get(), nullptr);
  gate.set();
  ioc.restart();
  ioc.run();
  ASSERT_EQ(seen.size(), 3U);
  ASSERT_NE(cell.get(), nullptr);
  EXPECT_EQ(*cell.get(), 10);
  for (const int* p : seen) EXPECT_EQ(p, cell.get());
}

TEST_F(asio_bridge, a_failed_asio_run_reaches_its_caller_only_and_the_next_caller_runs_its_own) {
  ab::once o;
  ab::manual_reset_event gate;
  int runs = 0;
  std::vector<std::string> outcomes;
  const auto call = [&](bool fails) -> net::awaitable<void> {
    try {
      auto r = co_await ab::asio::call_once(o, [&, fails]() -> net::awaitable<void> {
        co_await asio_initializer{&gate, &runs, 0, fails}();
      });
      outcomes.push_back(r.ok() ? "ok" : "not ok");
    } catch (const std::runtime_error&) {
      outcomes.emplace_back("threw");
    }
  };
  net::co_spawn(ioc, call(true), net::detached);
  net::co_spawn(ioc, call(false), net::detached);
  net::co_spawn(ioc, call(false), net::detached);
  ioc.poll();
  gate.set();
  ioc.restart();
  ioc.run();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(outcomes, (std::vector<std::string>{"threw", "ok", "ok"}));
  EXPECT_TRUE(o.is_completed());
}

TEST_F(asio_bridge, a_follower_cancelled_through_its_slot_ends_cancelled_and_the_flight_goes_on) {
  ab::singleflight::group<int, int> flights;
  ab::manual_reset_event gate;
  int runs = 0;
  std::vector<int> results;
  std::optional<ab::result<int>> cancelled_one;
  net::cancellation_signal signal;
  const auto call = [&]() -> net::awaitable<void> {
    auto r = co_await ab::asio::work(flights, 1, asio_initializer{&gate, &runs, 7});
    results.push_back(r.ok() ? *r : -1);
  };
  net::co_spawn(ioc, call(), net::detached);
  net::co_spawn(
      ioc,
      [&]() -> net::awaitable<void> {
        cancelled_one = co_await ab::asio::work(flights, 1, asio_initializer{&gate, &runs, 8});
      },
      net::bind_cancellation_slot(signal.slot(), net::detached));
  net::co_spawn(ioc, call(), net::detached);
  ioc.poll();
  signal.emit(net::cancellation_type::terminal);
  ioc.poll();
  ASSERT_TRUE(cancelled_one.has_value());
  EXPECT_TRUE(cancelled_one->cancelled());
  gate.set();
  ioc.restart();
  ioc.run();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(results, (std::vector<int>{7, 7}));
  EXPECT_EQ(flights.size(), 0U);
}

TEST_F(asio_bridge, once_map_compute_with_a_plain_function_from_an_asio_coroutine) {
  ab::once_map<int, std::string> map;
  int runs = 0;
  std::vector<std::string> results;
  for (int i = 0; i < 2; ++i) {
    net::co_spawn(
        ioc,
        [&]() -> net::awaitable<void> {
          auto r = co_await ab::asio::compute(map, 3, [&runs] {
            ++runs;
            return std::string("three");
          });
          results.push_back(*r);
        },
        net::detached);
  }
  ioc.run();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(results, (std::vector<std::string>{"three", "three"}));
  EXPECT_EQ(map.get(3), std::optional<std::string>("three"));
}

}  // namespace
