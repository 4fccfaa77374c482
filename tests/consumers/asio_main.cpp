// SPDX-License-Identifier: Apache-2.0
// A downstream program using asyncband::asio: a coroutine of Asio's own awaits an asyncband
// event that another thread sets.
#include <asyncband/asio.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <thread>

int main() {
  boost::asio::io_context io;
  asyncband::manual_reset_event ready;
  bool woken = false;
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        co_await asyncband::asio::async_wait(ready, boost::asio::use_awaitable);
        woken = true;
      },
      boost::asio::detached);
  std::thread setter([&ready] { ready.set(); });
  io.run();
  setter.join();
  std::printf("asyncband::asio: %s\n", woken ? "woken" : "not woken");
  return woken ? 0 : 1;
}
