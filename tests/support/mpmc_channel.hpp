// SPDX-License-Identifier: Apache-2.0
// tests/support/mpmc_channel.hpp: what the tests of the MPMC channels (mpmc::bounded,
// mpmc::unbounded) share to drive them, besides support/channel_probes.hpp: the fixture that
// starts coroutines on copies of one receiver, and a receive racing an event in a when_any.
//
// The scenarios written once for both channels (support/mpmc_receive_scenarios.hpp) take a
// `Kind` saying how to use one channel kind:
//   template <class T> using sender = ...;              // the sending half
//   template <class T> using receiver = ...;            // the receiving half
//   template <class T> static auto make(std::size_t room);
//                                                       // channel_halves with room for `room`
//                                                       // values at least (bounded: the capacity)
//   template <class T> static send_result<T> offer(sender<T>&, int v, int fuse = 0);
//                                                       // a send that does not wait, of
//                                                       // make<T>(v, fuse) (no move before it)
//   template <class T> static void put(sender<T>&, int v);  // a send that must be accepted now
//   template <class T> static void send_blocking(sender<T>&, int v);  // the same, from a thread
//   template <class T> static void expect_exact(sender<T>&, receiver<T>&);
//                                                       // what the channel holds is len()
//                                                       // (bounded: so are the units taken)
#pragma once

#include <gtest/gtest.h>

#include <asyncband/auto_reset_event.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <asyncband/stop_token.hpp>
#include <asyncband/when_any.hpp>
#include <cstddef>
#include <deque>
#include <optional>
#include <vector>

#include "channel_probes.hpp"
#include "probe.hpp"

namespace asyncband_test {

/// A channel of kind `Kind` on a test scheduler with coroutines that receive from copies of its
/// receiver or (bounded channels) send to it, queued in the order they were added, each with
/// its own stop source. Owns the coroutines (a test may destroy them); members are destroyed in
/// reverse: the coroutines first (a suspended one leaves its queue), then the receiver copies
/// and the channel.
template <class Kind, class T = int>
struct channel_fixture {
  using receiver_type = typename Kind::template receiver<T>;

  test_scheduler s;
  decltype(Kind::template make<T>(1)) c;
  std::deque<receiver_type> copies;  // a receiver copy per receive, so several receivers wait
  std::vector<int> order;            // ids of the coroutines, in the order they resumed
  std::deque<recv_probe<T>> recvs;
  std::deque<send_probe<T>> sends;
  std::deque<asyncband::stop_source> stops;
  std::vector<task<void>> tasks;

  /// A channel with room for `room` values, holding `filled` values 100, 101, ...
  explicit channel_fixture(std::size_t room, int filled = 0) : c(Kind::template make<T>(room)) {
    for (int i = 0; i < filled; ++i) Kind::put(c.tx, 100 + i);
  }
  channel_fixture(const channel_fixture&) = delete;
  channel_fixture& operator=(const channel_fixture&) = delete;
  /// Runs what is ready first: a coroutine whose resumption is queued must not be destroyed.
  ~channel_fixture() { s.run(); }

  /// Queues a receive (id `id`) on a new copy of the receiver, to start at a later step.
  recv_probe<T>& start_recv(int id, bool can_stop = stoppable) {
    return queue(recvs, id, [this, can_stop](recv_probe<T>& p, asyncband::stop_token stop) {
      return receive(copies.emplace_back(c.rx), p, can_stop, std::move(stop));
    });
  }
  /// Starts a receive and runs until nothing is ready (it waits or is done).
  recv_probe<T>& recv(int id, bool can_stop = stoppable) {
    recv_probe<T>& p = start_recv(id, can_stop);
    s.run();
    return p;
  }
  /// Queues a send of `v` that may wait (bounded channels), to start at a later step.
  send_probe<T>& start_send(int v, bool can_stop = stoppable) {
    return queue(sends, v, [this, v, can_stop](send_probe<T>& p, asyncband::stop_token stop) {
      return send_value(c.tx, v, p, can_stop, std::move(stop));
    });
  }
  /// Starts a send of `v` and runs until nothing is ready.
  send_probe<T>& send(int v, bool can_stop = stoppable) {
    send_probe<T>& p = start_send(v, can_stop);
    s.run();
    return p;
  }
  /// The stop source of the `i`-th coroutine started (receives and sends together).
  asyncband::stop_source& stop(std::size_t i) { return stops[i]; }
  task<void>& task_of(std::size_t i) { return tasks[i]; }

 private:
  /// A new probe in `probes` (id `id`) for the coroutine `start(probe, stop token)` queued on
  /// the scheduler, with a stop source of its own.
  template <class Probe, class Start>
  Probe& queue(std::deque<Probe>& probes, int id, Start start) {
    Probe& p = probes.emplace_back();
    p.id = id;
    p.order = &order;
    tasks.push_back(start(p, stops.emplace_back().get_token()));
    start_on(s, tasks.back());
    return p;
  }
};

/// `co_await when_any(rx.recv(), ev.wait())`, recording the winner and the value received.
template <class Receiver>
task<void> recv_or_event(Receiver& rx, asyncband::auto_reset_event& ev, std::optional<std::size_t>& index,
                         std::optional<int>& value) {
  auto r = co_await asyncband::when_any(rx.recv(), ev.wait());
  index = r.index();
  if (r.index() == 0 && r.template get<0>().ok()) value = id_of(*r.template get<0>());
}

}  // namespace asyncband_test
