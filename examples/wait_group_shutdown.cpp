// SPDX-License-Identifier: Apache-2.0
// examples/wait_group_shutdown.cpp: waiting for every spawned task at shutdown.
//
// A wait_group is a handle: every copy is a member of the group until it is destroyed. A task
// that takes the group by value holds a member for as long as its frame lives, so "wait until
// every task has finished" needs no bookkeeping: wg.wait...() gives up main's own membership
// and completes when the last task's frame is destroyed.
//
// Two kinds of tasks run on a thread pool:
//   - jobs: finite work, finish on their own;
//   - listeners: serve a message queue until shutdown. They sleep in
//     `co_await queue.ready.wait(stop)`; shutdown is stop.request_stop(), which cancels those
//     waits (the result says `cancelled`), and each listener drains what is left and returns.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/stop_token.hpp>

namespace {

namespace rt = asyncband::runtime;

/// A multi-consumer queue: the auto-reset event means "something was pushed since you looked".
struct message_queue {
  std::mutex mutex;
  std::deque<int> messages;
  asyncband::auto_reset_event ready;

  void push(int m) {
    {
      const std::lock_guard lock(mutex);
      messages.push_back(m);
    }
    ready.notify_one();  // wakes one listener, or leaves a permit for the next wait
  }
  std::optional<int> pop() {
    const std::lock_guard lock(mutex);
    if (messages.empty()) return std::nullopt;
    const int m = messages.front();
    messages.pop_front();
    return m;
  }
};

struct stats {
  std::atomic<int> jobs_done{0};
  std::atomic<long> job_sum{0};
  std::atomic<int> handled{0};
  std::atomic<int> listeners_cancelled{0};
};

// `wait_group member` by value: this task is a member of the group until its frame
// is destroyed, i.e. until it has finished.
rt::task<> job([[maybe_unused]] asyncband::wait_group member, stats& s, int n) {
  long sum = 0;
  for (int i = 1; i <= n; ++i) sum += static_cast<long>(i) * i;
  s.job_sum += sum;
  ++s.jobs_done;
  co_return;
}

rt::task<> listener([[maybe_unused]] asyncband::wait_group member, message_queue& q, stats& s,
                    asyncband::stop_token stop) {
  for (;;) {
    while (auto m = q.pop()) ++s.handled;  // drain
    const asyncband::result<void> r = co_await q.ready.wait(stop);
    if (r.cancelled()) break;  // shutdown: the stop request ended the wait
  }
  while (auto m = q.pop()) ++s.handled;  // whatever arrived before shutdown is still served
  ++s.listeners_cancelled;
}

}  // namespace

int main() {
  message_queue queue;
  stats s;
  asyncband::stop_source shutdown;
  asyncband::wait_group wg;  // main's handle: the group's first member
  rt::thread_pool pool(2);   // declared last: joined before everything above is destroyed

  constexpr int kJobs = 4;
  constexpr int kListeners = 2;
  constexpr int kMessages = 50;

  for (int i = 0; i < kListeners; ++i) rt::spawn(pool.ref(), listener(wg, queue, s, shutdown.get_token()));
  for (int i = 0; i < kJobs; ++i) rt::spawn(pool.ref(), job(wg, s, 1000 * (i + 1)));
  std::printf("spawned %d tasks; members now: %zu (including main's handle, minus finished tasks)\n",
              kJobs + kListeners, wg.members());

  for (int m = 0; m < kMessages; ++m) queue.push(m);

  // Shutdown: cancel the listeners' waits, then wait (bounded) for every task to be gone.
  shutdown.request_stop();
  const asyncband::result<void> r = wg.wait_timeout(std::chrono::seconds(5));
  std::printf("wait for the group: %s; members left: %zu; main still a member: %d\n",
              asyncband::to_string(r.status()), wg.members(), wg.is_member());
  std::printf("jobs done: %d (sum %ld); listeners cancelled: %d; messages handled: %d of %d\n",
              s.jobs_done.load(), s.job_sum.load(), s.listeners_cancelled.load(), s.handled.load(),
              kMessages);

  const bool ok =
      r.ok() && s.jobs_done == kJobs && s.listeners_cancelled == kListeners && s.handled == kMessages;
  return ok ? 0 : 1;
}
