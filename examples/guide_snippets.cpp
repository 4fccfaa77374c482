// SPDX-License-Identifier: Apache-2.0
// examples/guide_snippets.cpp: the code that docs/guide.md quotes, compiled and run so that it
// cannot rot.
//
// Every region between a `// [guide:NAME]` line and the next `// [guide:end]` line appears in the
// guide, dedented, in the code block after `<!-- snippet: NAME -->`. `./x lint` checks that the
// two agree (scripts/guide_snippets.py; `--update` copies the regions into the guide).
//
// Each part checks what its snippet claims and the program exits with 1 if any check fails:
//   1. a wait with a stop token ends `cancelled`;
//   2. outcomes are values: a send that did not deliver hands its value back, a receive on a
//      channel whose senders are gone ends `closed`;
//   3. a waiter that was handed the mutex but whose stop came before it resumed passes the mutex
//      on to the next waiter (made deterministic with the test scheduler);
//   4. when_any: one winner; a losing receive leaves its value queued, a losing send hands its
//      value back, and the when_any's own stop token ends it with no winner;
//   5. the scheduler hook: a hand-written task type whose promise names a scheduler is resumed
//      there; one without the hook keeps to a pool through resume_on;
//   6. the blocking twins and block_on, from plain threads;
//   7. the migration snippets (the cppcoro-style lock, the std-style condition wait).
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/stop_token.hpp>

namespace {

namespace rt = asyncband::runtime;
using namespace std::chrono_literals;

bool check(bool ok, const char* what) {
  std::printf("%-72s %s\n", what, ok ? "ok" : "FAILED");
  return ok;
}

// GCC 12.2 at -O2 may report a false -Wmaybe-uninitialized inside libstdc++'s stop source
// constructor, depending on inlining (see examples/cancellation.cpp); made out of line.
[[gnu::noinline]] asyncband::stop_source new_stop_source() {
  return asyncband::stop_source();
}

// ---------------------------------------------------------------------------------------------
// 1. A stop token ends a wait with a value, not an exception.

rt::task<asyncband::wait_status> wait_until_ready(asyncband::manual_reset_event& ready,
                                                  asyncband::stop_token stop) {
  // [guide:stop-token]
  asyncband::result<void> r = co_await ready.wait(stop);  // ok, or cancelled once stop is requested
  if (r.cancelled()) {
    // the event was not set in time; nothing else changed
  }
  // [guide:end]
  co_return r.status();
}

bool stop_token_part() {
  asyncband::manual_reset_event ready;
  asyncband::stop_source stop = new_stop_source();
  rt::test_scheduler sched;
  auto waiter = sched.spawn(wait_until_ready(ready, stop.get_token()));
  sched.run();  // the waiter suspends on the event
  stop.request_stop();
  sched.run();
  return check(waiter.join() == asyncband::wait_status::cancelled,
               "1. wait(stop) after request_stop(): cancelled");
}

// ---------------------------------------------------------------------------------------------
// 2. Outcomes: what a send or receive that did not happen gives back.

bool outcomes_part() {
  // [guide:outcomes]
  auto [tx, rx] = asyncband::mpsc::bounded<std::string>(1);
  asyncband::send_result<std::string> first = tx.try_send("first");    // ok
  asyncband::send_result<std::string> second = tx.try_send("second");  // full: no room now...
  std::string kept = std::move(second).value();                        // ...and the value comes back
  asyncband::result<std::string> got = rx.recv_blocking();             // ok: "first"
  { auto last = std::move(tx); }                                       // the last sender goes
  asyncband::result<std::string> none = rx.recv_blocking();            // closed: nothing can come
  // [guide:end]
  bool ok = check(first.ok() && second.full() && kept == "second",
                  "2. try_send on a full channel: full, value back");
  ok &= check(got.ok() && *got == "first" && none.closed(), "2. recv after the last sender went: closed");

  auto [otx, orx] = asyncband::oneshot::channel<std::string>();
  orx.close();  // no value will be taken
  asyncband::send_result<std::string> lost = otx.send("reply");
  ok &= check(lost.closed() && lost.value() == "reply", "2. send to a closed receiver: closed, value back");
  return ok;
}

// ---------------------------------------------------------------------------------------------
// 3. A grant handed to a waiter whose stop came first passes on.

rt::task<asyncband::wait_status> add_one(asyncband::mutex<int>& m, asyncband::stop_token stop) {
  asyncband::result<asyncband::mutex_guard<int>> guard = co_await m.lock(std::move(stop));
  if (guard) ++**guard;
  co_return guard.status();
}

bool passes_on_part() {
  asyncband::mutex<int> m;
  rt::test_scheduler sched;
  asyncband::stop_source stop = new_stop_source();
  // [guide:passes-on]
  auto held = m.lock_blocking();                       // this thread holds the mutex
  auto a = sched.spawn(add_one(m, stop.get_token()));  // queues first, with a stop token
  auto b = sched.spawn(add_one(m, {}));                // queues second
  sched.run();
  held.unlock();        // hands the mutex to a: a now owns it, its resumption is queued
  stop.request_stop();  // a's stop comes before a runs
  sched.run();          // a reports cancelled and passes the mutex to b, which adds 1
  // [guide:end]
  const asyncband::wait_status sa = a.join();
  const asyncband::wait_status sb = b.join();
  return check(sa == asyncband::wait_status::cancelled && sb == asyncband::wait_status::ok &&
                   std::move(m).into_inner() == 1,
               "3. a lock handed to a stopped waiter went to the next one");
}

// ---------------------------------------------------------------------------------------------
// 4. when_any.

// [guide:when-any]
rt::task<std::string> next_job(asyncband::mpsc::receiver<std::string>& jobs,
                               asyncband::manual_reset_event& quit, asyncband::stop_token stop) {
  auto r = co_await asyncband::when_any(stop, jobs.recv(), quit.wait());
  if (r.cancelled()) co_return "stopped";  // the when_any's own token: no winner, nothing taken
  if (r.index() == 1) co_return "quit";    // quit won: a job the receive was woken for stays queued
  asyncband::result<std::string>& job = r.get<0>();
  co_return job ? *job : "closed";  // closed once every sender is gone and the queue is empty
}
// [guide:end]

rt::task<std::string> offer(asyncband::mpsc::sender<std::string>& out, asyncband::manual_reset_event& quit,
                            std::string msg) {
  // [guide:losing-send]
  auto r = co_await asyncband::when_any(out.send(std::move(msg)), quit.wait());
  if (r.index() == 1) {
    asyncband::send_result<std::string>& lost = r.get<0>();  // cancelled, and it holds msg:
    co_return std::move(lost).value();                       // the send that lost did not send
  }
  // [guide:end]
  co_return "sent";
}

bool when_any_part() {
  bool ok = true;
  auto [tx, rx] = asyncband::mpsc::bounded<std::string>(1);
  asyncband::manual_reset_event quit;
  const asyncband::stop_source none = new_stop_source();

  static_cast<void>(tx.try_send("job 1"));
  ok &= check(asyncband::block_on(next_job(rx, quit, none.get_token())) == "job 1",
              "4. when_any: the ready receive wins");

  static_cast<void>(tx.try_send("job 2"));  // the channel is full again
  quit.set();
  ok &= check(asyncband::block_on(offer(tx, quit, "job 3")) == "job 3",
              "4. when_any: a losing send hands its value back");
  quit.reset();

  asyncband::stop_source stop = new_stop_source();
  stop.request_stop();
  ok &= check(asyncband::block_on(next_job(rx, quit, stop.get_token())) == "stopped",
              "4. when_any(stop, ...): no winner");
  ok &= check(rx.try_recv().value() == "job 2", "4. the job nobody took is still queued");
  return ok;
}

// ---------------------------------------------------------------------------------------------
// 5. Where a waiter resumes: the scheduler hook, and resume_on for task types without it.

/// A fire-and-forget coroutine type without the hook: what cppcoro's, libcoro's and most
/// hand-written task types are.
struct detached {
  struct promise_type {
    detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

// [guide:hook]
/// The same fire-and-forget coroutine type, with the hook: its promise names a scheduler.
struct detached_on {
  struct promise_type : detached::promise_type {
    asyncband::scheduler_ref where;
    // The coroutine's first parameter is the scheduler (a promise may take the parameters).
    template <class... Rest>
    explicit promise_type(asyncband::scheduler_ref s, Rest&... /*unused*/) noexcept : where(s) {}
    asyncband::scheduler_ref asyncband_scheduler() const noexcept { return where; }  // the hook
    detached_on get_return_object() noexcept { return {}; }
  };
};

detached_on consumer(asyncband::scheduler_ref /*where*/, asyncband::latch& go, std::atomic<bool>& on_pool,
                     rt::thread_pool& pool, asyncband::latch& done) {
  co_await go.wait();                 // count_down() posts this coroutine to `where`...
  on_pool = pool.on_worker_thread();  // ...so it continues on the pool, not on the waker
  done.count_down();
}
// [guide:end]

detached foreign_consumer(rt::thread_pool& pool, asyncband::latch& go, std::atomic<bool>& on_pool,
                          asyncband::latch& done) {
  // [guide:resume-on]
  co_await asyncband::resume_on(pool, go.wait());  // without resume_on: continues on the waker
  on_pool = pool.on_worker_thread();               // true: resumed through the pool
  // [guide:end]
  done.count_down();
}

bool scheduler_part() {
  rt::thread_pool pool(2);
  bool ok = true;
  {
    asyncband::latch go(1);
    asyncband::latch done(1);
    std::atomic<bool> on_pool{false};
    consumer(pool.ref(), go, on_pool, pool, done);  // runs here until it suspends on `go`
    go.count_down();                                // the main thread wakes it
    done.wait_blocking();
    ok &= check(on_pool, "5. a task type with the hook resumes on its scheduler");
  }
  {
    asyncband::latch go(1);
    asyncband::latch done(1);
    std::atomic<bool> on_pool{false};
    foreign_consumer(pool, go, on_pool, done);
    go.count_down();
    done.wait_blocking();
    ok &= check(on_pool, "5. a task type without it keeps to the pool through resume_on");
  }
  return ok;
}

// ---------------------------------------------------------------------------------------------
// 6. The blocking twins and block_on.

bool blocking_part() {
  auto channel = asyncband::mpsc::bounded<int>(4);
  asyncband::mpsc::sender<int>& tx = channel.first;
  asyncband::mpsc::receiver<int>& rx = channel.second;
  asyncband::mutex<std::vector<int>> log;
  // [guide:blocking]
  std::thread producer([&] {
    log.lock_blocking()->push_back(1);        // parks this thread while the mutex is held
    static_cast<void>(tx.send_blocking(42));  // parks while the channel is full
  });
  asyncband::result<int> a = rx.recv_timeout(5s);  // ok (42), closed, or timeout
  // Any awaitable, from a plain thread; with a deadline, built from the token block_on stops:
  asyncband::result<int> b = asyncband::block_on([&](asyncband::stop_token t) { return rx.recv(t); }, 10ms);
  producer.join();  // b timed out: nothing was taken
  // [guide:end]
  bool ok = check(a.ok() && *a == 42 && b.timed_out(), "6. recv_timeout: ok; block_on(make, 10ms): timeout");
  ok &= check(log.lock_blocking()->size() == 1, "6. lock_blocking from a plain thread");
  return ok;
}

// ---------------------------------------------------------------------------------------------
// 7. Migration snippets.

rt::task<int> count_hit(asyncband::mutex<std::map<std::string, int>>& counts) {
  // [guide:from-cppcoro]
  // cppcoro: cppcoro::async_mutex m; std::map<std::string, int> counts;
  //          auto lock = co_await m.scoped_lock_async(); ++counts["hits"];
  auto guard = co_await counts.lock();  // asyncband::mutex<std::map<std::string, int>> counts;
  ++(*guard)["hits"];                   // the map is reachable through the guard only
  // [guide:end]
  co_return (*guard)["hits"];
}

rt::task<bool> take_when_nonempty(asyncband::mutex<std::vector<int>>& queue, asyncband::condvar& not_empty,
                                  asyncband::stop_token stop) {
  // [guide:from-std-condvar]
  // std: cv.wait(lock, stop, [&] { return !queue.empty(); });  -- the condition to go on
  auto guard = co_await queue.lock();
  auto empty = [](const std::vector<int>& q) { return q.empty(); };  // the condition to keep waiting
  auto r = co_await not_empty.wait_while(std::move(guard), empty, stop);
  if (!r) co_return false;  // cancelled: r holds no guard, the mutex is not held
  (*r)->pop_back();
  // [guide:end]
  co_return true;
}

bool migration_part() {
  asyncband::mutex<std::map<std::string, int>> counts;
  bool ok = check(asyncband::block_on(count_hit(counts)) == 1, "7. cppcoro-style lock: guard over the map");

  asyncband::mutex<std::vector<int>> queue;
  asyncband::condvar not_empty;
  const asyncband::stop_source live = new_stop_source();
  rt::test_scheduler sched;
  auto taker = sched.spawn(take_when_nonempty(queue, not_empty, live.get_token()));
  sched.run();  // waits: the queue is empty
  queue.lock_blocking()->push_back(7);
  not_empty.notify_one();
  sched.run();
  ok &= check(taker.join() && queue.lock_blocking()->empty(), "7. std-style condition wait: wait_while");
  return ok;
}

}  // namespace

int main() {
  bool ok = stop_token_part();
  ok &= outcomes_part();
  ok &= passes_on_part();
  ok &= when_any_part();
  ok &= scheduler_part();
  ok &= blocking_part();
  ok &= migration_part();
  return ok ? 0 : 1;
}
