// SPDX-License-Identifier: Apache-2.0
// examples/cancellation.cpp: ending waits early with asyncband::stop_token and timeouts.
//
// Every wait has cancellable forms that return asyncband::result<...> instead of throwing:
//   co_await p.wait(token)      coroutine; ok or cancelled
//   p.wait_blocking(token)      plain thread; ok or cancelled
//   p.wait_timeout(duration)    plain thread; ok or timeout
// Shown here:
//   1. a coroutine on a thread pool, suspended on an event nobody sets, cancelled from main;
//   2. a token that is already stopped: the wait ends cancelled at once, even on a set event;
//   3. a plain std::jthread whose wait_blocking(token) ends when the jthread is asked to stop;
//   4. wait_timeout: first the deadline passes, then the latch opens in time;
//   5. a cancelled auto_reset_event waiter that had already been handed the permit passes it
//      on, so the notification is not lost (made deterministic with the test scheduler).
#include <chrono>
#include <cstdio>
#include <thread>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/stop_token.hpp>

namespace {

namespace rt = asyncband::runtime;
using namespace std::chrono_literals;

// GCC 12.2 at -O2 may report a false -Wmaybe-uninitialized inside the constructor of
// libstdc++'s stop source (it hands *this to a member's constructor), depending on inlining.
// Constructing the sources out of line keeps the example warning-free.
[[gnu::noinline]] asyncband::stop_source new_stop_source() {
  return asyncband::stop_source();
}

// 1. The coroutine reports how its wait ended through `outcome`, then counts down `done`.
rt::task<> wait_for_event(rt::thread_pool& pool, asyncband::manual_reset_event& never_set,
                          asyncband::stop_token stop, asyncband::wait_status& outcome,
                          asyncband::latch& done) {
  co_await pool.schedule();
  const asyncband::result<void> r = co_await never_set.wait(stop);
  outcome = r.status();
  done.count_down();
}

void coroutine_cancelled_by_stop_source() {
  asyncband::manual_reset_event never_set;
  asyncband::latch done(1);
  asyncband::wait_status outcome = asyncband::wait_status::ok;
  asyncband::stop_source source = new_stop_source();
  {
    rt::thread_pool pool(1);
    rt::spawn(pool.ref(), wait_for_event(pool, never_set, source.get_token(), outcome, done));
    std::this_thread::sleep_for(1ms);  // not needed for correctness: lets the task reach its wait
    // The stop callback unlinks the waiter and posts the coroutine back to the pool.
    source.request_stop();
    done.wait_blocking();
  }
  std::printf("1. coroutine wait after request_stop(): %s\n", asyncband::to_string(outcome));
}

void already_stopped_token() {
  asyncband::manual_reset_event set_event(true);
  asyncband::stop_source source = new_stop_source();
  source.request_stop();
  // block_on runs the awaitable from this plain thread; no pool needed.
  const asyncband::result<void> r = asyncband::block_on(set_event.wait(source.get_token()));
  const asyncband::result<void> plain = asyncband::block_on(set_event.wait(asyncband::stop_token{}));
  std::printf("2. wait on a set event with a stopped token: %s (with a fresh token: %s)\n",
              asyncband::to_string(r.status()), asyncband::to_string(plain.status()));
}

void jthread_stop() {
#if ASYNCBAND_STD_STOP_TOKEN  // std::jthread's token is asyncband::stop_token
  asyncband::auto_reset_event never_notified;
  asyncband::wait_status outcome = asyncband::wait_status::ok;
  {
    std::jthread waiter(
        [&](asyncband::stop_token stop) { outcome = never_notified.wait_blocking(stop).status(); });
    std::this_thread::sleep_for(1ms);
  }  // ~jthread: request_stop() cancels the wait, then join()
  std::printf("3. thread blocked in wait_blocking(token), jthread destroyed: %s\n",
              asyncband::to_string(outcome));
#else
  std::printf("3. skipped: this standard library has no std::jthread\n");
#endif
}

void timeouts() {
  asyncband::latch ready(1);
  const auto first = ready.wait_timeout(2ms);  // nobody counts down: the deadline passes
  std::thread opener([&] { ready.count_down(); });
  const auto second = ready.wait_timeout(5s);  // completes as soon as the latch opens
  opener.join();
  std::printf("4. wait_timeout(2ms) on a closed latch: %s; wait_timeout(5s) with a count_down: %s\n",
              asyncband::to_string(first.status()), asyncband::to_string(second.status()));
}

// 5. The waiter below is resumed on the test scheduler, i.e. only when the program steps it.
rt::task<> permit_waiter(asyncband::auto_reset_event& ev, asyncband::stop_token stop,
                         asyncband::wait_status& outcome) {
  outcome = (co_await ev.wait(stop)).status();
}

void permit_passed_on() {
  asyncband::auto_reset_event ev;
  asyncband::wait_status outcome = asyncband::wait_status::ok;
  asyncband::stop_source source = new_stop_source();
  rt::test_scheduler sched;
  sched.spawn(permit_waiter(ev, source.get_token(), outcome));
  sched.run();            // the waiter starts and suspends on ev
  ev.notify_one();        // hands it the permit; its resumption is queued, not run yet
  source.request_stop();  // the stop arrives before it resumes...
  sched.run();            // ...so it reports cancelled and passes the permit on
  std::printf("5. waiter granted a permit, then stopped: %s; permit stored again: %s\n",
              asyncband::to_string(outcome), ev.is_set() ? "yes" : "no");
}

}  // namespace

int main() {
  coroutine_cancelled_by_stop_source();
  already_stopped_token();
  jthread_stop();
  timeouts();
  permit_passed_on();
  return 0;
}
