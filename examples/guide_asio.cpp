// SPDX-License-Identifier: Apache-2.0
// examples/guide_asio.cpp: the Boost.Asio code that docs/guide.md quotes ("From Asio channels"),
// compiled and run so that it cannot rot. Built only when Boost 1.81 or later is found.
//
// Regions between `// [guide:NAME]` and `// [guide:end]` appear in the guide (checked by
// `./x lint`, scripts/guide_snippets.py). One io_context on one thread runs a producer and a
// consumer over an asyncband MPMC channel used where an Asio concurrent_channel would be, and
// checks, exiting with 1 otherwise:
//   - values arrive in order, and the receive after the last sender went ends with
//     asyncband::asio::error::closed (Asio: channel_closed after close());
//   - a receive cancelled by `||` against a timer ends with operation_aborted and takes nothing:
//     the value sent afterwards is received by the next receive;
//   - a send to a channel whose receivers are gone fails with error::closed and hands the
//     value back (an Asio channel's async_send completes with void(error_code) only).
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <asyncband/asio.hpp>
#include <asyncband/asyncband.hpp>

namespace {

namespace net = boost::asio;
namespace ab = asyncband::asio;
using namespace net::experimental::awaitable_operators;
using namespace std::chrono_literals;

struct outcome {
  std::vector<std::string> received;
  bool ended_closed = false;
  bool timed_out_empty = false;
  bool late_value_kept = false;
  bool send_handed_back = false;
};

net::awaitable<void> produce(asyncband::mpmc::sender<std::string> tx) {
  for (const char* text : {"a", "b", "c"}) {
    std::string msg = text;
    // [guide:asio-send]
    // Asio: co_await ch.async_send(error_code{}, std::move(msg), net::use_awaitable);
    auto [ec, back] = co_await ab::async_send(tx, std::move(msg), net::as_tuple(net::use_awaitable));
    if (ec) {
      // error::closed (no receiver left) or operation_aborted: `back` holds the message
    }
    // [guide:end]
    static_cast<void>(back);
  }
}  // the last sender goes: the consumer's receives end `closed` once it has drained the channel

net::awaitable<void> consume(asyncband::mpmc::receiver<std::string> rx, outcome& out) {
  for (;;) {
    // [guide:asio-recv]
    // Asio: auto [ec, msg] = co_await ch.async_receive(net::as_tuple(net::use_awaitable));
    auto [ec, msg] = co_await ab::async_recv(rx, net::as_tuple(net::use_awaitable));
    if (ec == ab::error::closed) break;  // every sender is gone and nothing is left
    if (ec) break;                       // cancelled: operation_aborted, nothing was taken
    // [guide:end]
    out.received.push_back(std::move(msg));
  }
  out.ended_closed = true;
}

net::awaitable<void> deadline_then_value(outcome& out) {
  auto ex = co_await net::this_coro::executor;
  auto [tx, rx] = asyncband::mpmc::bounded<std::string>(4);
  {
    // [guide:asio-deadline]
    net::steady_timer deadline(ex, 10ms);
    auto recv = ab::async_recv(rx, net::use_awaitable);
    auto got = co_await (std::move(recv) || deadline.async_wait(net::use_awaitable));
    if (got.index() == 1) {
      // the timer won: the receive took nothing, even if a value arrived at that instant
    }
    // [guide:end]
    out.timed_out_empty = got.index() == 1;
  }
  static_cast<void>(tx.try_send("late"));
  auto [ec, msg] = co_await ab::async_recv(rx, net::as_tuple(net::use_awaitable));
  out.late_value_kept = !ec && msg == "late";

  auto [tx2, rx2] = asyncband::mpmc::bounded<std::string>(4);
  { auto gone = std::move(rx2); }  // the only receiver goes
  auto [ec2, back] = co_await ab::async_send(tx2, std::string("unsent"), net::as_tuple(net::use_awaitable));
  out.send_handed_back = ec2 == ab::error::closed && back && *back == "unsent";
}

}  // namespace

int main() {
  net::io_context ctx;
  outcome out;
  {
    auto [tx, rx] = asyncband::mpmc::bounded<std::string>(2);  // Asio: concurrent_channel<...> ch(ctx, 2)
    net::co_spawn(ctx, consume(std::move(rx), out), net::detached);
    net::co_spawn(ctx, produce(std::move(tx)), net::detached);
  }
  net::co_spawn(ctx, deadline_then_value(out), net::detached);
  ctx.run();

  const bool in_order = out.received == std::vector<std::string>{"a", "b", "c"};
  std::printf("received a, b, c in order, then closed: %s\n", in_order && out.ended_closed ? "yes" : "NO");
  std::printf("receive cancelled by a deadline took nothing; the late value was received next: %s\n",
              out.timed_out_empty && out.late_value_kept ? "yes" : "NO");
  std::printf("send with no receiver left: closed, value handed back: %s\n",
              out.send_handed_back ? "yes" : "NO");
  return in_order && out.ended_closed && out.timed_out_empty && out.late_value_kept && out.send_handed_back
             ? 0
             : 1;
}
