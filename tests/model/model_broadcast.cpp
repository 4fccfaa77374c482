// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::broadcast: lag on the overflow ring against overwriting sends,
// capacity handed back by the slowest receiver of a bounded ring, and a cancelled receive.
#include <cstdint>
#include <utility>

#include <asyncband/broadcast.hpp>
#include <asyncband/stop_token.hpp>

#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// Overflow ring of capacity 1, three messages sent while two receivers read: each receiver
// sees increasing messages, the messages received plus those reported missed add up to three,
// and the last one is always received (it is never overwritten).
TEST(ModelBroadcast, OverflowLagAddsUp) {
  EXPECT_TRUE(model::explored(150, [] {
    auto [tx, rx] = asyncband::broadcast::overflow<int>(1);
    auto rx2 = rx.resubscribe();
    const auto receive = [](asyncband::broadcast::overflow_receiver<int> r) {
      std::uint64_t seen = 0;
      int last = 0;
      for (;;) {
        auto m = r.recv_blocking();
        if (m.closed()) break;
        if (m.lagged()) {
          seen += m.missed();
          continue;
        }
        check(m.ok(), "a receive failed");
        check(*m > last, "messages out of order or twice");
        last = *m;
        ++seen;
      }
      check(seen == 3, "received and missed messages do not add up");
      check(last == 3, "the last message was not received");
    };
    thread a(receive, std::move(rx));
    thread b(receive, std::move(rx2));
    for (int i = 1; i != 4; ++i) check(tx.send(i).ok(), "a send failed");
    { const auto gone = std::move(tx); }
    a.join();
    b.join();
  }));
}

// Bounded ring of capacity 1: the sender waits for the slower of two receivers before each
// message, and the last reader's unit wakes it (a lost wake-up is a deadlock); each receiver
// gets every message in order.
TEST(ModelBroadcast, BoundedWaitsForSlowest) {
  EXPECT_TRUE(model::explored(151, [] {
    auto [tx, rx] = asyncband::broadcast::bounded<int>(1);
    auto rx2 = rx.resubscribe();
    const auto receive = [](asyncband::broadcast::bounded_receiver<int> r) {
      int expected = 1;
      for (auto m = r.recv_blocking(); !m.closed(); m = r.recv_blocking()) {
        check(m.ok() && *m == expected, "a message lost, twice or out of order");
        ++expected;
      }
      check(expected == 4, "a message was lost");
    };
    thread a(receive, std::move(rx));
    thread b(receive, std::move(rx2));
    thread sender([t = std::move(tx)]() mutable {
      for (int i = 1; i != 4; ++i) check(t.send_blocking(i).ok(), "a send failed");
    });
    a.join();
    b.join();
    sender.join();
  }));
}

// A receive cancelled while a message arrives moves its cursor only if it returns the message:
// a cancelled receive leaves the message for the next one.
TEST(ModelBroadcast, CancelledRecvKeepsPosition) {
  EXPECT_TRUE(model::explored(152, [] {
    auto [tx, rx] = asyncband::broadcast::overflow<int>(2);
    asyncband::stop_source stop;
    atomic<int> received{-1};
    thread receiver([&, r = &rx] {
      auto m = r->recv_blocking(stop.get_token());
      if (m.ok()) {
        received.store(*m);
      } else {
        check(m.cancelled(), "the receive ended neither ok nor cancelled");
        received.store(0);
      }
    });
    thread sender([&, t = &tx] { check(t->send(7).ok(), "the send failed"); });
    stop.request_stop();
    sender.join();
    receiver.join();
    auto next = rx.try_recv();
    if (received.load() == 0) {
      check(next.ok() && *next == 7, "a cancelled receive lost the message");
    } else {
      check(received.load() == 7 && next.empty(), "the message was received twice");
    }
  }));
}

}  // namespace
