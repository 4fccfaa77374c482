// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::oneshot: the send's commit and publication against the receiver's
// close, departure and cancelled receive, under the explorer's schedules.
#include <optional>
#include <utility>

#include <asyncband/oneshot.hpp>
#include <asyncband/stop_token.hpp>

#include "counted.hpp"
#include "model.hpp"

namespace {

using model::counted;
using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// A send against the receiver's departure: the value is delivered to nobody exactly once:
// handed back (closed) if the receiver went first or while it was stored, else destroyed by the
// receiver's departure. Either way it is destroyed exactly once, and the state is freed once.
TEST(ModelOneshot, SendRacesReceiverDrop) {
  EXPECT_TRUE(model::explored(100, [] {
    atomic<int> live{0};
    {
      auto [tx, rx] = asyncband::oneshot::channel<counted>();
      std::optional<asyncband::oneshot::receiver<counted>> receiver(std::move(rx));
      thread sender([&, t = std::move(tx)]() mutable {
        auto r = t.send(counted(7, &live));
        if (!r.ok()) check(r.value().value() == 7, "a failed send handed back another value");
      });
      receiver.reset();
      sender.join();
    }
    check(live.load() == 0, "the sent value was leaked or destroyed twice");
  }));
}

// A pending receive against a send and the receiver's close(): the receive ends with the value
// exactly when the send delivered it (a send committed before the close is still received),
// else closed, and the send then hands its value back.
TEST(ModelOneshot, RecvRacesSendAndClose) {
  EXPECT_TRUE(model::explored(101, [] {
    auto [tx, rx] = asyncband::oneshot::channel<int>();
    atomic<int> received{-1};
    atomic<int> sent{-1};
    thread receiver([&, r = &rx] {
      auto v = r->recv_blocking();
      received.store(v.ok() ? *v : 0);
    });
    thread sender([&, t = std::move(tx)]() mutable {
      auto r = t.send(5);
      sent.store(r.ok() ? 1 : 0);
      if (!r.ok()) check(r.value() == 5, "a failed send handed back another value");
    });
    rx.close();
    sender.join();
    receiver.join();
    check(sent.load() == 1 ? received.load() == 5 : received.load() == 0,
          "the receive's outcome does not match the send's");
  }));
}

// A receive cancelled while the value arrives: it ends with the value or cancelled, and then
// the value is still in the channel: never lost, never taken twice. The sender's drop after
// the send must not turn the pending value into closed either.
TEST(ModelOneshot, CancelledRecvKeepsValue) {
  EXPECT_TRUE(model::explored(102, [] {
    auto [tx, rx] = asyncband::oneshot::channel<int>();
    asyncband::stop_source stop;
    atomic<int> received{-1};
    thread receiver([&, r = &rx] {
      auto v = r->recv_blocking(stop.get_token());
      if (v.ok()) {
        received.store(*v);
      } else {
        check(v.status() == asyncband::wait_status::cancelled, "the receive ended closed");
        received.store(0);
      }
    });
    thread sender([&, t = std::move(tx)]() mutable { check(t.send(9).ok(), "the send failed"); });
    stop.request_stop();
    sender.join();
    receiver.join();
    if (received.load() == 0) {
      auto again = rx.try_recv();
      check(again.ok() && *again == 9, "a cancelled receive lost the value");
    } else {
      check(received.load() == 9, "the receive got another value");
      check(rx.try_recv().status() == asyncband::recv_status::closed, "the value was there twice");
    }
  }));
}

}  // namespace
