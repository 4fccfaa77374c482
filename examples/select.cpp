// SPDX-License-Identifier: Apache-2.0
// examples/select.cpp: an order router that waits on several sources at once with
// asyncband::when_any, and a fan-in over N feeds with asyncband::select_loop, both losing nothing.
//
// 1. The router, a coroutine on a 2-thread pool, waits for whichever comes first of: a new order
//    (bounded MPSC channel), a cancel (unbounded MPSC channel), or the quit event. Two producer
//    threads send orders and cancels while it runs; a third thread sets quit once they are done
//    (quit is polled first: whatever the router has not routed by then is drained).
//    A when_any's losing receives never take a value: it stays at the head of its channel for the
//    next round. So after quit wins, whatever is still queued is drained, and the counts must add
//    up exactly: routed + drained == sent, for orders and for cancels.
// 2. A consumer fans in four feeds (one bounded channel each, fed by four threads) with a
//    select_loop: each round waits for whichever feed has a value; the loop's storage is reused
//    from round to round. Every value must arrive exactly once, in order per feed.
//
// The senders live until the consumers are done: a receive on a channel whose senders are all
// gone completes at once (closed), so it would win every round of a select that includes it.
//
// Any mismatch exits with 1.
#include <asyncband/block_on.hpp>
#include <asyncband/manual_reset_event.hpp>
#include <asyncband/mpsc/bounded.hpp>
#include <asyncband/mpsc/unbounded.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/when_any.hpp>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

namespace {

using asyncband::runtime::task;
using asyncband::runtime::thread_pool;

constexpr int kOrders = 20000;
constexpr int kCancels = 5000;

struct router_counts {
  int routed_orders = 0;
  int routed_cancels = 0;
  int drained_orders = 0;
  int drained_cancels = 0;
};

task<router_counts> route(thread_pool& pool, asyncband::mpsc::receiver<int>& orders,
                          asyncband::mpsc::unbounded_receiver<int>& cancels,
                          asyncband::manual_reset_event& quit) {
  co_await pool.schedule();
  router_counts n;
  for (;;) {
    // Polled in this order: quit first, so that once it is set the router stops at once.
    auto r = co_await asyncband::when_any(quit.wait(), orders.recv(), cancels.recv());
    if (r.index() == 0) break;
    if (r.index() == 1 && r.get<1>().ok()) ++n.routed_orders;
    if (r.index() == 2 && r.get<2>().ok()) ++n.routed_cancels;
  }
  // quit won: the receives that lost left every value where it was.
  while (orders.try_recv()) ++n.drained_orders;
  while (cancels.try_recv()) ++n.drained_cancels;
  co_return n;
}

bool router_part() {
  thread_pool pool(2);
  auto [order_tx, order_rx] = asyncband::mpsc::bounded<int>(64);
  auto [cancel_tx, cancel_rx] = asyncband::mpsc::unbounded<int>();
  asyncband::manual_reset_event quit;
  // The senders stay alive until the router is done: a channel whose senders are all gone would
  // make its receive complete `closed` at once, round after round.
  std::thread orders([&tx = order_tx] {
    for (int i = 0; i < kOrders; ++i) static_cast<void>(tx.send_blocking(i));
  });
  std::thread cancels([&tx = cancel_tx] {
    for (int i = 0; i < kCancels; ++i) static_cast<void>(tx.send(i));
  });
  std::thread quitter([&] {
    orders.join();
    cancels.join();
    quit.set();  // the router may be anywhere: between rounds, or waiting on all three
  });
  const router_counts n = asyncband::block_on(route(pool, order_rx, cancel_rx, quit));
  quitter.join();
  std::printf("router: orders routed %d + drained %d = %d of %d; cancels routed %d + drained %d = %d of %d\n",
              n.routed_orders, n.drained_orders, n.routed_orders + n.drained_orders, kOrders,
              n.routed_cancels, n.drained_cancels, n.routed_cancels + n.drained_cancels, kCancels);
  return n.routed_orders + n.drained_orders == kOrders && n.routed_cancels + n.drained_cancels == kCancels;
}

constexpr int kFeeds = 4;
constexpr int kPerFeed = 5000;

task<bool> fan_in(thread_pool& pool, std::vector<asyncband::mpsc::receiver<int>>& feeds) {
  co_await pool.schedule();
  std::vector<int> next(kFeeds, 0);
  asyncband::select_loop loop(feeds, [](asyncband::mpsc::receiver<int>& rx) { return rx.recv(); });
  bool in_order = true;
  for (int received = 0; received < kFeeds * kPerFeed; ++received) {
    auto& round = co_await loop.next();
    const std::size_t feed = round.index();
    in_order = in_order && round.get().ok() && *round.get() == next[feed];
    ++next[feed];
  }
  for (int n : next) in_order = in_order && n == kPerFeed;
  co_return in_order;
}

bool fan_in_part() {
  thread_pool pool(2);
  std::vector<asyncband::mpsc::receiver<int>> feeds;
  std::vector<asyncband::mpsc::sender<int>> senders;  // alive until the end: no feed closes early
  std::vector<std::thread> producers;
  for (int f = 0; f < kFeeds; ++f) {
    auto [tx, rx] = asyncband::mpsc::bounded<int>(16);
    feeds.push_back(std::move(rx));
    senders.push_back(std::move(tx));
  }
  for (auto& tx : senders) {
    producers.emplace_back([&tx] {
      for (int i = 0; i < kPerFeed; ++i) static_cast<void>(tx.send_blocking(i));
    });
  }
  const bool ok = asyncband::block_on(fan_in(pool, feeds));
  for (auto& t : producers) t.join();
  std::printf("fan-in: %d feeds x %d values, each received once and in order: %s\n", kFeeds, kPerFeed,
              ok ? "yes" : "NO");
  return ok;
}

}  // namespace

int main() {
  const bool router_ok = router_part();
  const bool fan_in_ok = fan_in_part();
  return router_ok && fan_in_ok ? 0 : 1;
}
