// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::mpsc::unbounded: the list's links and the count of values pending
// against close(), the last sender's departure and a cancelled receive.
#include <utility>

#include <asyncband/mpsc/unbounded.hpp>
#include <asyncband/stop_token.hpp>

#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// Two senders send and go while the receiver drains: it gets both values, then closed once the
// last sender is gone (a lost wake-up on the last departure is a deadlock).
TEST(ModelMpscUnbounded, LastSenderGoneEndsDrain) {
  EXPECT_TRUE(model::explored(120, [] {
    auto [tx, rx] = asyncband::mpsc::unbounded<int>();
    thread a([t = tx]() mutable { check(t.send(1).ok(), "a send failed"); });
    thread b([t = std::move(tx)]() mutable { check(t.send(2).ok(), "a send failed"); });
    int sum = 0;
    int count = 0;
    for (auto v = rx.recv_blocking(); v.ok(); v = rx.recv_blocking()) {
      sum += *v;
      ++count;
    }
    a.join();
    b.join();
    check(count == 2 && sum == 3, "a value was lost or received twice");
  }));
}

// Sends against close(): a send that reports ok is received, one that fails hands its value
// back; the receiver ends closed after exactly the accepted values, in order.
TEST(ModelMpscUnbounded, SendRacesClose) {
  EXPECT_TRUE(model::explored(121, [] {
    auto [tx, rx] = asyncband::mpsc::unbounded<int>();
    atomic<int> accepted{0};
    atomic<int> received{0};
    thread sender([&, t = std::move(tx)]() mutable {
      for (int i = 1; i != 3; ++i) {
        auto r = t.send(i);
        if (r.ok()) {
          accepted.fetch_add(i);
        } else {
          check(r.value() == i, "a failed send handed back another value");
        }
      }
    });
    thread receiver([&, r = &rx] {
      r->close();
      int sum = 0;
      int last = 0;
      for (auto v = r->recv_blocking(); v.ok(); v = r->recv_blocking()) {
        check(*v > last, "out of order");
        last = *v;
        sum += *v;
      }
      received.store(sum);
    });
    receiver.join();
    sender.join();
    check(received.load() == accepted.load(), "an accepted value was not received, or a refused one was");
  }));
}

// A receive cancelled while a value arrives takes nothing: the value is received by it or
// is still in the channel.
TEST(ModelMpscUnbounded, CancelledRecvKeepsValue) {
  EXPECT_TRUE(model::explored(122, [] {
    auto [tx, rx] = asyncband::mpsc::unbounded<int>();
    asyncband::stop_source stop;
    atomic<int> received{-1};
    thread receiver([&, r = &rx] {
      auto v = r->recv_blocking(stop.get_token());
      received.store(v.ok() ? *v : 0);
      if (!v.ok()) check(v.status() == asyncband::wait_status::cancelled, "the receive ended closed");
    });
    thread sender([&, t = tx]() mutable { check(t.send(3).ok(), "the send failed"); });
    stop.request_stop();
    sender.join();
    receiver.join();
    auto rest = rx.try_recv();
    if (received.load() == 0) {
      check(rest.ok() && *rest == 3, "a cancelled receive lost the value");
    } else {
      check(received.load() == 3 && !rest.ok(), "the value was received twice");
    }
  }));
}

// One send against the receiver going to sleep: the receiver's sleep flag and the publication
// are a Dekker pair (each side stores, fences, then looks at the other's), so with weak memory a
// missing fence on either side lets both miss each other, and the receiver sleeps through the
// value (a deadlock). The sender stays alive, so its departure cannot mask a lost wake-up.
TEST(ModelMpscUnbounded, SendWakesSleepingReceiver) {
  EXPECT_TRUE(model::explored(125, [] {
    auto [tx, rx] = asyncband::mpsc::unbounded<int>();
    thread sender([t = &tx] { check(t->send(7).ok(), "the send failed"); });
    auto v = rx.recv_blocking();
    check(v.ok() && *v == 7, "the value was not received");
    sender.join();
  }));
}

}  // namespace
