// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::mpmc::bounded: receives that claim published places themselves
// against sends that deliver to queued receives (the Dekker pair of a send's publication and a
// receive's queueing), a cancelled receive woken for a value, a claim given back, and the last
// receiver's departure against a send waiting for capacity.
#include <utility>

#include <asyncband/mpmc/bounded.hpp>
#include <asyncband/stop_token.hpp>

#include "counted.hpp"
#include "model.hpp"

namespace {

using model::counted;
using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// Two receivers and one value, then the last sender goes: exactly one receive gets the value,
// the other ends closed (a lost wake-up on the departure is a deadlock).
TEST(ModelMpmcBounded, TwoReceiversOneValue) {
  EXPECT_TRUE(model::explored(130, [] {
    auto [tx, rx] = asyncband::mpmc::bounded<int>(1);
    atomic<int> got{0};
    atomic<int> closed{0};
    const auto receive = [&](asyncband::mpmc::receiver<int> r) {
      auto v = r.recv_blocking();
      if (v.ok()) {
        check(*v == 8, "another value");
        got.fetch_add(1);
      } else {
        closed.fetch_add(1);
      }
    };
    thread a(receive, rx);
    thread b(receive, std::move(rx));
    thread sender([t = std::move(tx)]() mutable { check(t.send_blocking(8).ok(), "the send failed"); });
    a.join();
    b.join();
    sender.join();
    check(got.load() == 1 && closed.load() == 1, "the value was lost or received twice");
  }));
}

// A receive cancelled while the one value arrives takes nothing: if it was woken for the value,
// the value goes to the other receive; none is lost, none received twice.
TEST(ModelMpmcBounded, CancelledReceivePassesValueOn) {
  EXPECT_TRUE(model::explored(131, [] {
    auto [tx, rx] = asyncband::mpmc::bounded<int>(1);
    asyncband::stop_source stop;
    atomic<int> got{0};
    thread cancelled([&, r = rx]() mutable {
      auto v = r.recv_blocking(stop.get_token());
      if (v.ok()) got.fetch_add(1);
    });
    thread other([&, r = rx]() mutable {
      auto v = r.recv_blocking();
      if (v.ok()) got.fetch_add(1);
    });
    check(tx.send_blocking(5).ok(), "the send failed");
    stop.request_stop();
    cancelled.join();
    { const auto gone = std::move(tx); }  // the last sender goes: a receive still waiting ends closed
    other.join();
    check(got.load() == 1, "the value was lost or received twice");
    check(rx.len() == 0, "the value is still in the channel");
  }));
}

// The last receiver goes (after freeing the place) while a send waits for capacity: the send
// ends delivered (its value destroyed with the channel) or closed with its value back; every
// value is destroyed exactly once.
TEST(ModelMpmcBounded, LastReceiverDropVsWaitingSender) {
  EXPECT_TRUE(model::explored(132, [] {
    atomic<int> live{0};
    {
      auto [tx, rx] = asyncband::mpmc::bounded<counted>(1);
      check(tx.try_send(counted(1, &live)).ok(), "the empty channel was full");
      thread sender([&, t = tx]() mutable {
        auto r = t.send_blocking(counted(2, &live));
        if (!r.ok()) {
          check(r.status() == asyncband::send_status::closed, "the send ended neither ok nor closed");
          check(r.value().value() == 2, "the send handed back another value");
        }
      });
      thread a([r = rx]() mutable {
        auto v = r.recv_blocking();
        check(v.ok() && v->value() == 1, "the first value");
      });
      thread b([r = std::move(rx)]() mutable {});  // the other receiver goes
      a.join();
      b.join();
      sender.join();
    }
    check(live.load() == 0, "a value was leaked or destroyed twice");
  }));
}

// Two senders and two receivers, one value each, capacity 1: every receive ends with a value
// whichever way it gets it (a place it claims itself, or one a send delivers to it once it is
// queued). A publication slept through (the send looked for queued receives before the receive
// queued, and the receive looked at the place before it was published) is a deadlock.
TEST(ModelMpmcBounded, SendsDeliverToReceivesThatQueued) {
  EXPECT_TRUE(model::explored(133, [] {
    auto [tx, rx] = asyncband::mpmc::bounded<int>(1);
    atomic<int> sum{0};
    const auto receive = [&](asyncband::mpmc::receiver<int> r) {
      auto v = r.recv_blocking();
      check(v.ok(), "a receive ended without a value");
      if (v.ok()) sum.fetch_add(*v);
    };
    const auto send = [](asyncband::mpmc::sender<int> t, int v) {
      check(t.send_blocking(v).ok(), "a send failed");
    };
    thread a(receive, rx);
    thread b(receive, std::move(rx));
    thread one(send, tx, 1);
    thread two(send, std::move(tx), 2);
    a.join();
    b.join();
    one.join();
    two.join();
    check(sum.load() == 3, "a value was lost or received twice");
  }));
}

// One sender sends 1, 2, 3 in order and goes; a receiver drains the channel while another takes
// one value with a stop token that is requested meanwhile: a value it claimed and then did not
// take (stopped) goes back without losing its place in the order, so the draining receiver sees
// the values it gets in the order they were sent, and every value is received exactly once.
// A receive stopped after it was woken for a value gives that value back, and another receive
// may have taken later values meanwhile: that one value may come late, the others stay in order.
TEST(ModelMpmcBounded, AStoppedReceiveDelaysOnlyTheValueItGivesBack) {
  EXPECT_TRUE(model::explored(134, [] {
    auto [tx, rx] = asyncband::mpmc::bounded<int>(2);
    asyncband::stop_source stop;
    atomic<int> seen{0};  // bit v - 1: value v received
    thread sender([t = std::move(tx)]() mutable {
      for (int v = 1; v <= 3; ++v) check(t.send_blocking(v).ok(), "a send failed");
    });
    thread stopped([&, r = rx]() mutable {
      auto v = r.recv_blocking(stop.get_token());
      if (v.ok()) check((seen.fetch_or(1 << (*v - 1)) & (1 << (*v - 1))) == 0, "a value received twice");
    });
    thread drain([&, r = std::move(rx)]() mutable {
      int last = 0;
      bool late_seen = false;  // the one value the stopped receive may have given back
      for (;;) {
        auto v = r.recv_blocking();
        if (!v.ok()) break;
        if (*v < last) {
          check(!late_seen, "more than one value out of order for one receiver");
          late_seen = true;
        } else {
          last = *v;
        }
        check((seen.fetch_or(1 << (*v - 1)) & (1 << (*v - 1))) == 0, "a value received twice");
      }
    });
    stop.request_stop();
    sender.join();
    stopped.join();
    drain.join();
    check(seen.load() == 7, "a value was lost");
  }));
}

// A receive waits while values that are not trivially copyable are sent: a value delivered to
// it (if it queued in time) stays in its cell until it takes it, while another receiver takes
// the values after it and the sender sends twice the capacity. The units of the places taken
// past the bound value come back only with its take (a send coming round the ring to its cell
// would wait for it), and then all of them: a unit lost or held back for good leaves the sender
// waiting (a deadlock). Every value is received exactly once and destroyed exactly once.
TEST(ModelMpmcBounded, AValueBoundToAWaitingReceiveInItsCellHoldsBackCapacityUntilItsTake) {
  EXPECT_TRUE(model::explored(135, [] {
    atomic<int> live{0};
    atomic<int> seen{0};  // bit v - 1: value v received
    const auto mark = [&seen](int v) {
      check(v >= 1 && v <= 4, "a value never sent");
      check((seen.fetch_or(1 << (v - 1)) & (1 << (v - 1))) == 0, "a value received twice");
    };
    {
      auto [tx, rx] = asyncband::mpmc::bounded<counted>(2);
      thread waiting([&, r = rx]() mutable {
        auto v = r.recv_blocking();  // closed if the other receiver drained every value first
        if (v.ok()) mark(v->value());
      });
      thread sender([&, t = std::move(tx)]() mutable {
        for (int v = 1; v <= 4; ++v) check(t.send_blocking(counted(v, &live)).ok(), "a send failed");
      });
      for (;;) {
        auto v = rx.recv_blocking();
        if (!v.ok()) break;
        mark(v->value());
      }
      waiting.join();
      sender.join();
    }
    check(seen.load() == 15, "a value was lost");
    check(live.load() == 0, "a value was leaked or destroyed twice");
  }));
}

}  // namespace
