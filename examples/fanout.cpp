// SPDX-License-Identifier: Apache-2.0
// examples/fanout.cpp: a price feed fanned out to a fast and a slow consumer, through the two
// broadcast channels.
//
// The feed publishes one quote per tick; the fast consumer handles each quote as it arrives; the
// slow one has time for one quote every kSlowEvery ticks. The ticks come from a simulated clock
// (an mpsc channel of tick numbers fed by a loop), not from sleeps, and every task runs on this
// thread, each wake-up resuming its task inline: the output is the same on every run. In a real
// program the tasks would run on a thread pool and the clock would be the wall clock.
//
// 1. broadcast::overflow (capacity 4): the feed never waits. The slow consumer falls behind; its
//    recv() reports lagged(n), the n quotes that were overwritten before it got to them, then
//    goes on with the oldest quote still held. The fast consumer misses nothing.
// 2. broadcast::bounded (capacity 4): nothing is lost. Once the slow consumer is 4 quotes behind,
//    `co_await tx.send(q)` waits until it has read one: the feed is held to the slow consumer's
//    pace (backpressure), and its quotes go out later than they were due. (The slow consumer's
//    receive resumes the waiting feed inline, before it returns: so the feed's line for a tick
//    comes before the slow consumer's.)
//
// 3. watch (one latest value): a configuration reloaded twice (a third attempt finds nothing to
//    change and publishes nothing). The strategy task waits with `co_await rx.changed()` and
//    reads each version through a guard (no copy, no lock); a reporting receiver that only looks
//    afterwards (`has_changed()`, `borrow_and_update()`) sees both reloads as one change, with
//    the last value (coalescing). `co_await rx.wait_for(pred)` waits for a configuration with a
//    property. When the sender goes, the strategy's changed() ends closed.
//
// Checked at the end: the fast consumer got every quote in order in both parts; in part 1 the
// slow consumer's quotes and missed counts add up to every quote, and it did lag; in part 2 it
// got every quote in order and the feed did wait. Any mismatch exits with 1.
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include <asyncband/block_on.hpp>
#include <asyncband/broadcast.hpp>
#include <asyncband/mpsc/unbounded.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/when_all.hpp>
#include <asyncband/watch.hpp>

namespace {

namespace rt = asyncband::runtime;
namespace broadcast = asyncband::broadcast;
namespace mpsc = asyncband::mpsc;

constexpr int kQuotes = 16;
constexpr std::size_t kCapacity = 4;
constexpr int kSlowEvery = 3;  // the slow consumer handles one quote every 3 ticks

struct quote {
  int seq;     // 0, 1, ... in the order the feed publishes them
  long cents;  // the price
  int due;     // the tick at which the feed had it ready
};

long price_of(int seq) {  // a deterministic random walk around 100.00
  return 10'000 + ((seq * 37) % 23) - 11;
}

/// The simulated clock: `now` and one tick channel per task that runs to the clock.
struct clock_state {
  int now = 0;
  mpsc::unbounded_sender<int> feed_tx;
  mpsc::unbounded_receiver<int> feed_rx;
  mpsc::unbounded_sender<int> slow_tx;
  mpsc::unbounded_receiver<int> slow_rx;
};

clock_state make_clock() {
  auto feed = mpsc::unbounded<int>();
  auto slow = mpsc::unbounded<int>();
  return {0, std::move(feed.first), std::move(feed.second), std::move(slow.first), std::move(slow.second)};
}

/// What a consumer saw.
struct tally {
  int received = 0;
  std::uint64_t missed = 0;
  int next = 0;  // the quote expected next
  bool in_order = true;

  void got(const quote& q) {
    in_order = in_order && q.seq == next;
    next = q.seq + 1;
    ++received;
  }
  void lagged(std::uint64_t n) {
    missed += n;
    next += static_cast<int>(n);
  }
};

/// What the feed did: how many quotes went out later than due, and when the last one went.
struct feed_report {
  int late = 0;
  int last_at = 0;
};

/// The feed: one quote per tick. overflow: send() never waits. bounded: co_await send() waits
/// while the slow consumer is kCapacity quotes behind; a quote that goes out after its tick says
/// so.
template <broadcast::mode M>
rt::task<feed_report> feed(clock_state& clock, broadcast::sender<quote, M> tx_arg) {
  feed_report report;
  // A coroutine's parameters live as long as its frame, which when_all destroys only at the very
  // end: the sender is moved into this block, so that it goes (and the channel closes, and the
  // consumers end `closed`) when the last quote is out.
  broadcast::sender<quote, M> tx = std::move(tx_arg);
  for (int seq = 0; seq < kQuotes; ++seq) {
    const asyncband::result<int> tick = co_await clock.feed_rx.recv();
    if (!tick) break;
    const quote q{seq, price_of(seq), *tick};
    if constexpr (M == broadcast::mode::overflow) {
      if (!tx.send(q)) break;
    } else {
      const asyncband::send_result<quote> sent = co_await tx.send(q);
      if (!sent) break;
      if (clock.now != q.due) {
        ++report.late;
        std::printf("  t=%2d  feed: quote %2d went out %d ticks late (due at t=%d)\n", clock.now, seq,
                    clock.now - q.due, q.due);
      }
    }
    report.last_at = clock.now;
  }
  co_return report;
}

/// The fast consumer: handles every quote as soon as it arrives.
template <broadcast::mode M>
rt::task<tally> fast_consumer(broadcast::receiver<quote, M> rx_arg) {
  broadcast::receiver<quote, M> rx = std::move(rx_arg);  // goes when this ends (see feed)
  tally seen;
  for (;;) {
    broadcast::recv_result<quote> r = co_await rx.recv();
    if (r.closed()) break;
    if (r.lagged()) {
      seen.lagged(r.missed());
    } else if (r.ok()) {
      seen.got(*r);
    }
  }
  co_return seen;
}

/// The slow consumer: one quote per kSlowEvery ticks, and it says what it got.
template <broadcast::mode M>
rt::task<tally> slow_consumer(clock_state& clock, broadcast::receiver<quote, M> rx_arg, bool& done) {
  broadcast::receiver<quote, M> rx = std::move(rx_arg);
  tally seen;
  for (bool open = true; open;) {
    if (!co_await clock.slow_rx.recv()) break;  // its next turn
    broadcast::recv_result<quote> r = co_await rx.recv();
    if (r.lagged()) {
      // Not a quote: the count of those it will never see. The next recv() returns the oldest
      // quote still held, at once: handling it is this turn's work.
      const int first = seen.next;
      const int last = first + static_cast<int>(r.missed()) - 1;
      if (first == last) {
        std::printf("  t=%2d  slow: lagged: quote %d was overwritten\n", clock.now, first);
      } else {
        std::printf("  t=%2d  slow: lagged: quotes %d..%d were overwritten\n", clock.now, first, last);
      }
      seen.lagged(r.missed());
      r = co_await rx.recv();
    }
    open = r.ok();  // else closed: the feed is gone and every quote held was read
    if (open) {
      std::printf("  t=%2d  slow: quote %2d  %ld.%02ld  (%d more sent)\n", clock.now, r->seq, r->cents / 100,
                  r->cents % 100, static_cast<int>(rx.len()));
      seen.got(*r);
    }
  }
  done = true;  // stops the clock
  co_return seen;
}

/// Runs the clock until the feed and the slow consumer are done: every tick is one feed turn,
/// every kSlowEvery-th also one slow turn. Each send resumes its task inline, here.
rt::task<int> run_clock(clock_state& clock, const bool& slow_done) {
  for (clock.now = 0; !slow_done; ++clock.now) {
    if (!clock.feed_tx.send(clock.now)) break;
    if (clock.now % kSlowEvery == 0 && !clock.slow_tx.send(clock.now)) break;
  }
  co_return clock.now;
}

struct outcome {
  feed_report feed;
  tally fast;
  tally slow;
  int ticks;
};

template <broadcast::mode M>
outcome run(std::pair<broadcast::sender<quote, M>, broadcast::receiver<quote, M>> channel) {
  clock_state clock = make_clock();
  bool slow_done = false;
  auto& [tx, fast_rx] = channel;
  broadcast::receiver<quote, M> slow_rx = tx.subscribe();
  // Started in this order: the consumers and the feed wait for their first message or tick, then
  // the clock drives them all.
  auto [fast, slow, fed, ticks] = asyncband::block_on(rt::when_all(
      fast_consumer<M>(std::move(fast_rx)), slow_consumer<M>(clock, std::move(slow_rx), slow_done),
      feed<M>(clock, std::move(tx)), run_clock(clock, slow_done)));
  return {fed, fast, slow, ticks};
}

// ---- 3. a configuration through watch ----------------------------------------------------------

struct config {
  int version;
  long max_spread_cents;
  std::string venue;
};

/// Waits for each new configuration and applies it; ends when the sender is gone.
rt::task<int> strategy(asyncband::watch::receiver<config> rx) {
  int applied = 0;
  {
    const auto initial = rx.borrow_and_update();
    std::printf("  strategy: starts with v%d (spread %ld, %s)\n", initial->version, initial->max_spread_cents,
                initial->venue.c_str());
  }
  while ((co_await rx.changed()).ok()) {
    const auto cfg = rx.borrow_and_update();  // a guard: no copy, and the sender never waits for it
    std::printf("  strategy: applies v%d (spread %ld, %s)\n", cfg->version, cfg->max_spread_cents,
                cfg->venue.c_str());
    ++applied;
  }
  std::printf("  strategy: the configuration source is gone; keeps v%d\n", rx.borrow()->version);
  co_return applied;
}

/// Waits until the configuration names the backup venue.
rt::task<int> failover_watch(asyncband::watch::receiver<config> rx) {
  const auto is_backup = [](const config& c) { return c.venue == "backup"; };
  auto cfg = co_await rx.wait_for(is_backup);
  if (!cfg.ok()) co_return -1;
  std::printf("  failover watch: v%d switched to the backup venue\n", (*cfg)->version);
  co_return (*cfg)->version;
}

struct config_outcome {
  int applied = 0;
  int failover_version = 0;
  int report_changes = 0;
  int report_version = 0;
};

/// Reloads the configuration twice, looks at the report receiver, then goes (the sender
/// with it: the strategy's changed() ends closed).
rt::task<config_outcome> reloader(asyncband::watch::sender<config> tx,
                                  asyncband::watch::receiver<config> report) {
  config_outcome out;
  std::puts("  reload: v2 (wider spread)");
  (void)tx.send(config{2, 20, "primary"});
  std::puts("  reload: v3 (venue to backup), by modifying the current one");
  tx.send_modify([](config& c) {
    c.version = 3;
    c.venue = "backup";
  });
  const bool modified = tx.send_if_modified([](config& c) { return c.venue != "backup"; });
  std::printf("  reload: send_if_modified found nothing to change (modified = %s): no new version\n",
              modified ? "true" : "false");
  if (report.has_changed().value()) {  // two reloads since it last looked: one change
    ++out.report_changes;
    out.report_version = report.borrow_and_update()->version;
  }
  std::printf("  report: %d change since it last looked, now at v%d\n", out.report_changes,
              out.report_version);
  std::puts("  reload: the configuration source goes");
  { const auto gone = std::move(tx); }  // now, not when this task's frame goes (after when_all)
  co_return out;
}

config_outcome run_config() {
  auto [tx, rx] = asyncband::watch::channel<config>(config{1, 12, "primary"});
  auto report = tx.subscribe();
  auto [applied, failover_version, out] = asyncband::block_on(
      rt::when_all(strategy(rx), failover_watch(rx), reloader(std::move(tx), std::move(report))));
  out.applied = applied;
  out.failover_version = failover_version;
  return out;
}

}  // namespace

int main() {
  bool ok = true;

  std::printf("1. broadcast::overflow, capacity %zu: the feed never waits, the slow consumer lags\n",
              kCapacity);
  const outcome lossy = run<broadcast::mode::overflow>(broadcast::overflow<quote>(kCapacity));
  std::printf("  fast: %d quotes, %llu missed; slow: %d quotes, %llu missed\n", lossy.fast.received,
              static_cast<unsigned long long>(lossy.fast.missed), lossy.slow.received,
              static_cast<unsigned long long>(lossy.slow.missed));
  ok = ok && lossy.fast.received == kQuotes && lossy.fast.missed == 0 && lossy.fast.in_order &&
       lossy.slow.in_order && lossy.slow.missed > 0 &&
       lossy.slow.received + static_cast<int>(lossy.slow.missed) == kQuotes;

  std::printf("\n2. broadcast::bounded, capacity %zu: nothing lost, the feed waits for the slow consumer\n",
              kCapacity);
  const outcome lossless = run<broadcast::mode::bounded>(broadcast::bounded<quote>(kCapacity));
  std::printf(
      "  fast: %d quotes, slow: %d quotes, %llu missed; %d quotes went out late, the last at t=%d (due at "
      "t=%d)\n",
      lossless.fast.received, lossless.slow.received, static_cast<unsigned long long>(lossless.slow.missed),
      lossless.feed.late, lossless.feed.last_at, kQuotes - 1);
  ok = ok && lossless.fast.received == kQuotes && lossless.fast.in_order &&
       lossless.slow.received == kQuotes && lossless.slow.missed == 0 && lossless.slow.in_order &&
       lossless.feed.late > 0;

  std::puts("\n3. watch: a configuration reloaded twice, read without copies or locks");
  const config_outcome cfg = run_config();
  ok = ok && cfg.applied == 2 && cfg.failover_version == 3 && cfg.report_changes == 1 &&
       cfg.report_version == 3;

  std::printf("\n%s\n", ok ? "all checks passed" : "CHECK FAILED");
  return ok ? 0 : 1;
}
