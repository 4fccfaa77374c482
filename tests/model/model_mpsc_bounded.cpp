// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::mpsc::bounded: the capacity's hand-over from a receive to a blocked
// send, a send cancelled as a place frees, and the receiver's departure against a waiting send.
#include <optional>
#include <utility>

#include <asyncband/mpsc/bounded.hpp>
#include <asyncband/stop_token.hpp>

#include "counted.hpp"
#include "model.hpp"

namespace {

using model::counted;
using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// A full channel of capacity 1 and two blocked senders: each receive frees the place for one of
// them (a lost wake-up is a deadlock), and the receiver gets every value once, the first first.
TEST(ModelMpscBounded, ReceiveWakesBlockedSenders) {
  EXPECT_TRUE(model::explored(110, [] {
    auto [tx, rx] = asyncband::mpsc::bounded<int>(1);
    check(tx.try_send(1).ok(), "the empty channel was full");
    thread a([t = tx]() mutable { check(t.send_blocking(2).ok(), "a send failed"); });
    thread b([t = tx]() mutable { check(t.send_blocking(4).ok(), "a send failed"); });
    int sum = 0;
    for (int i = 0; i != 3; ++i) {
      auto v = rx.recv_blocking();
      check(v.ok(), "a receive failed");
      if (i == 0) check(*v == 1, "the first value was not received first");
      sum += *v;
    }
    a.join();
    b.join();
    check(sum == 7, "a value was lost or received twice");
    check(rx.try_recv().status() == asyncband::recv_status::empty, "a value too many");
  }));
}

// A send waiting for capacity is cancelled while a receive frees the place: it ends delivered
// or cancelled with its value, and the unit of capacity is never lost (a unit granted to the
// cancelled send goes back): afterwards one try_send fits.
TEST(ModelMpscBounded, CancelledSendKeepsCapacity) {
  EXPECT_TRUE(model::explored(111, [] {
    auto [tx, rx] = asyncband::mpsc::bounded<int>(1);
    asyncband::stop_source stop;
    check(tx.try_send(1).ok(), "the empty channel was full");
    atomic<int> delivered{-1};
    thread sender([&, t = tx]() mutable {
      auto r = t.send_blocking(2, stop.get_token());
      if (!r.ok()) check(r.status() == asyncband::send_status::cancelled && r.value() == 2, "wrong failure");
      delivered.store(r.ok() ? 1 : 0);
    });
    thread canceller([&] { stop.request_stop(); });
    auto first = rx.recv_blocking();
    check(first.ok() && *first == 1, "the first value");
    canceller.join();
    sender.join();
    if (delivered.load() == 1) {
      auto second = rx.try_recv();
      check(second.ok() && *second == 2, "a delivered send was not received");
    }
    check(rx.try_recv().status() == asyncband::recv_status::empty, "a value too many");
    check(tx.try_send(3).ok(), "the unit of capacity of the cancelled send was lost");
  }));
}

// The receiver takes one value (freeing the place) and goes, while a send waits for capacity:
// the send ends delivered (its value then destroyed with the channel) or closed with its value
// back; every value is destroyed exactly once.
TEST(ModelMpscBounded, ReceiverDropVsWaitingSender) {
  EXPECT_TRUE(model::explored(112, [] {
    atomic<int> live{0};
    {
      auto [tx, rx] = asyncband::mpsc::bounded<counted>(1);
      check(tx.try_send(counted(1, &live)).ok(), "the empty channel was full");
      thread sender([&, t = tx]() mutable {
        auto r = t.send_blocking(counted(2, &live));
        if (!r.ok()) {
          check(r.status() == asyncband::send_status::closed, "the send ended neither ok nor closed");
          check(r.value().value() == 2, "the send handed back another value");
        }
      });
      thread receiver([r = std::move(rx)]() mutable {
        auto v = r.recv_blocking();
        check(v.ok() && v->value() == 1, "the first value");
      });  // the receiver goes here
      receiver.join();
      sender.join();
    }
    check(live.load() == 0, "a value was leaked or destroyed twice");
  }));
}

// One send against the receiver going to sleep: the receiver's sleep flag and the publication
// are a Dekker pair (each side stores, fences, then looks at the other's), so with weak memory a
// missing fence on either side lets both miss each other, and the receiver sleeps through the
// value (a deadlock). The sender stays alive, so its departure cannot mask a lost wake-up.
TEST(ModelMpscBounded, SendWakesSleepingReceiver) {
  EXPECT_TRUE(model::explored(115, [] {
    auto [tx, rx] = asyncband::mpsc::bounded<int>(1);
    thread sender([t = &tx] { check(t->send_blocking(7).ok(), "the send failed"); });
    auto v = rx.recv_blocking();
    check(v.ok() && *v == 7, "the value was not received");
    sender.join();
  }));
}

}  // namespace
