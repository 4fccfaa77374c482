// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::mpmc::unbounded: several receivers on the values' semaphore, a
// cancelled receive woken for a value, and sends against close().
#include <utility>

#include <asyncband/mpmc/unbounded.hpp>
#include <asyncband/stop_token.hpp>

#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// Two receivers, two senders of one value each, then the senders are gone: each value goes to
// exactly one receive, and every receive that finds nothing ends closed.
TEST(ModelMpmcUnbounded, EachValueToOneReceiver) {
  EXPECT_TRUE(model::explored(140, [] {
    auto [tx, rx] = asyncband::mpmc::unbounded<int>();
    atomic<int> sum{0};
    const auto receive = [&](asyncband::mpmc::unbounded_receiver<int> r) {
      for (auto v = r.recv_blocking(); v.ok(); v = r.recv_blocking()) sum.fetch_add(*v);
    };
    thread a(receive, rx);
    thread b(receive, std::move(rx));
    thread s([t = tx]() mutable { check(t.send(1).ok(), "a send failed"); });
    check(tx.send(2).ok(), "a send failed");
    { const auto gone = std::move(tx); }
    s.join();
    a.join();
    b.join();
    check(sum.load() == 3, "a value was lost or received twice");
  }));
}

// A receive cancelled while a value arrives takes nothing: if it was woken for the value and
// then observed the stop, the value goes to the other receive waiting.
TEST(ModelMpmcUnbounded, CancelledReceivePassesValueOn) {
  EXPECT_TRUE(model::explored(141, [] {
    auto [tx, rx] = asyncband::mpmc::unbounded<int>();
    asyncband::stop_source stop;
    atomic<int> got{0};
    thread cancelled([&, r = rx]() mutable {
      if (r.recv_blocking(stop.get_token()).ok()) got.fetch_add(1);
    });
    thread other([&, r = std::move(rx)]() mutable {
      if (r.recv_blocking().ok()) got.fetch_add(1);
    });
    thread sender([t = tx]() mutable { check(t.send(4).ok(), "the send failed"); });
    stop.request_stop();
    sender.join();
    cancelled.join();
    tx.close();  // a receive still waiting after the value went elsewhere ends closed
    other.join();
    check(got.load() == 1, "the value was lost or received twice");
  }));
}

// A send against close() from the other half, with a receive waiting: the receive gets the
// value exactly when the send reported ok, else ends closed.
TEST(ModelMpmcUnbounded, SendRacesClose) {
  EXPECT_TRUE(model::explored(142, [] {
    auto [tx, rx] = asyncband::mpmc::unbounded<int>();
    atomic<int> received{-1};
    atomic<int> sent{-1};
    thread receiver([&, r = rx]() mutable {
      auto v = r.recv_blocking();
      received.store(v.ok() ? *v : 0);
    });
    thread sender([&, t = tx]() mutable {
      auto r = t.send(6);
      sent.store(r.ok() ? 1 : 0);
    });
    rx.close();
    sender.join();
    receiver.join();
    check(sent.load() == 1 ? received.load() == 6 : received.load() == 0,
          "the receive does not match the send");
  }));
}

}  // namespace
