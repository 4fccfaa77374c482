// SPDX-License-Identifier: Apache-2.0
// examples/events.cpp: producer/consumer signalling with auto_reset_event.
//
// A one-slot mailbox between two tasks running on a thread pool. Two auto-reset events hand
// the slot back and forth:
//   slot_free  - a permit means "the slot may be written" (starts set: the slot is empty),
//   item_ready - a permit means "the slot holds an item".
// notify_one() either wakes the task waiting on the event or stores one permit for the next
// wait, so neither side can miss a signal, whichever thread runs first. Each notify
// happens-before the wait it completes, so the plain `int` slot needs no further locking.
//
// A manual_reset_event then tells the main thread, which is not a coroutine, that the
// consumer is finished: it stays set, so a late wait_blocking() still completes.
#include <cstdio>
#include <utility>
#include <vector>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>

namespace {

namespace rt = asyncband::runtime;

constexpr int kEndOfStream = -1;

struct mailbox {
  asyncband::auto_reset_event slot_free{true};  // initially empty: the producer may write
  asyncband::auto_reset_event item_ready;
  int slot = 0;
};

rt::task<> producer(mailbox& box, std::vector<int> items) {
  items.push_back(kEndOfStream);
  for (int item : items) {
    co_await box.slot_free.wait();  // suspends (freeing the pool thread) until the slot is empty
    box.slot = item;
    box.item_ready.notify_one();
  }
}

rt::task<int> consumer(mailbox& box, std::vector<int>& received) {
  int sum = 0;
  for (;;) {
    co_await box.item_ready.wait();
    const int item = box.slot;
    box.slot_free.notify_one();  // the producer may overwrite the slot from here on
    if (item == kEndOfStream) break;
    received.push_back(item);
    sum += item;
  }
  co_return sum;
}

// The root task: moves onto the pool, then runs both sides there in parallel.
rt::task<int> run(rt::thread_pool& pool, mailbox& box, std::vector<int> items, std::vector<int>& received,
                  asyncband::manual_reset_event& done) {
  co_await pool.schedule();
  auto [nothing, sum] = co_await rt::when_all(producer(box, std::move(items)), consumer(box, received));
  (void)nothing;
  done.set();
  co_return sum;
}

}  // namespace

int main() {
  mailbox box;
  const std::vector<int> items = {3, 1, 4, 1, 5, 9, 2, 6};
  std::vector<int> received;
  asyncband::manual_reset_event done;
  int sum = 0;
  {
    rt::thread_pool pool(2);
    // block_on drives the root task from this plain thread and returns its result.
    sum = asyncband::block_on(run(pool, box, items, received, done));
  }  // the pool joins its workers here

  done.wait_blocking();  // already set: returns at once
  std::printf("consumer received %zu items:", received.size());
  for (int v : received) std::printf(" %d", v);
  std::printf("\nsum = %d (expected 31)\n", sum);

  // A stored permit is consumed by exactly one wait; notifying twice still stores only one.
  asyncband::auto_reset_event ev;
  ev.notify_one();
  ev.notify_one();
  const bool first = ev.try_wait();
  const bool second = ev.try_wait();
  std::printf("two notifies with nobody waiting: first try_wait=%d, second try_wait=%d\n", first, second);
  return (sum == 31 && first && !second) ? 0 : 1;
}
