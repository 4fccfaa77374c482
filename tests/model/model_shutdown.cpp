// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::shutdown: the signal against waiting receivers, the sender's
// wait_done against the receivers' departures, and the receivers' stop tokens cancelling a
// wait on another primitive.
#include <utility>

#include <asyncband/mpsc/unbounded.hpp>
#include <asyncband/shutdown.hpp>

#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// shutdown() against two receivers waiting in is_shutdown_blocking(): both wake (a lost
// wake-up is a deadlock), and see the signal.
TEST(ModelShutdown, SignalWakesWaiters) {
  EXPECT_TRUE(model::explored(190, [] {
    auto [tx, rx] = asyncband::shutdown::make_pair();
    const auto wait = [](asyncband::shutdown::receiver r) {
      r.is_shutdown_blocking();
      check(r.is_shutdown_now(), "woken before the signal");
    };
    thread a(wait, rx);
    thread b(wait, std::move(rx));
    tx.shutdown();
    a.join();
    b.join();
  }));
}

// wait_done_blocking() against two receivers leaving on other threads: it returns once the last
// one is gone (a lost wake-up is a deadlock), never before.
TEST(ModelShutdown, WaitDoneWaitsForLastReceiver) {
  EXPECT_TRUE(model::explored(191, [] {
    auto [tx, rx] = asyncband::shutdown::make_pair();
    atomic<int> left{0};
    const auto leave = [&](asyncband::shutdown::receiver r) {
      r.reset();
      left.fetch_add(1);
    };
    thread a(leave, rx);
    thread b(leave, std::move(rx));
    tx.shutdown();
    tx.wait_done_blocking();
    check(tx.receivers() == 0, "wait_done returned with a receiver left");
    a.join();
    b.join();
    check(left.load() == 2, "a receiver did not leave");
  }));
}

// A receiver's stop_token() cancels a receive on a channel when shutdown races a send: the
// receive ends with the value or cancelled, and the value is then still in the channel.
TEST(ModelShutdown, StopTokenCancelsReceive) {
  EXPECT_TRUE(model::explored(192, [] {
    auto [tx, rx] = asyncband::shutdown::make_pair();
    auto [jobs, queue] = asyncband::mpsc::unbounded<int>();
    atomic<int> received{-1};
    thread worker([&, r = std::move(rx), q = &queue]() mutable {
      auto v = q->recv_blocking(r.stop_token());
      received.store(v.ok() ? *v : 0);
      if (!v.ok()) check(v.status() == asyncband::wait_status::cancelled, "the receive ended closed");
    });
    thread producer([&, j = &jobs] { check(j->send(1).ok(), "the send failed"); });
    tx.shutdown();
    tx.wait_done_blocking();  // the worker's receiver is gone: its receive is over
    producer.join();
    worker.join();
    auto rest = queue.try_recv();
    check(received.load() == 0 ? rest.ok() && *rest == 1 : received.load() == 1 && !rest.ok(),
          "the value was lost or received twice");
  }));
}

}  // namespace
