// SPDX-License-Identifier: Apache-2.0
// bench/bench_asio.cpp: the Boost.Asio adapter (asyncband/asio.hpp) from asio::awaitable
// coroutines on an io_context, against the same operations on Asio's own
// experimental::concurrent_channel (Boost 1.81).
//
// Names are `asio/<case>/impl`; impl is `asyncband` (asyncband's primitive through the adapter,
// co_await ab::asio::async_...(use_awaitable)) or `asio` (a concurrent_channel, co_await
// channel.async_...(use_awaitable)). One io_context, run by the benchmark thread; the benchmark
// loop runs inside a coroutine. Every operation is co_awaited with use_awaitable, so both impls
// pay Asio's per-operation costs alike (the awaitable frame of the initiation, the handler's
// allocation, the post of the completion); what differs is the operation itself.
//
//   lock_unlock   one coroutine locks and unlocks, uncontended. asyncband: async_lock on an
//                 asyncband::mutex, the guard dropped. asio: a concurrent_channel<void(error_code)>
//                 of capacity 1 used as a lock, the usual Asio idiom: async_send locks (it waits
//                 while the one place is taken), try_receive unlocks.
//   send_recv     one coroutine sends a value and receives it back, on a channel of capacity 64
//                 that is never full nor empty when used: both operations complete at their start.
//   ping_pong     two coroutines, a producer and a consumer, on a channel of capacity 1: each
//                 message makes one of them wait (the operation queues, is woken, completes
//                 through the io_context). One iteration = one message.
//
//   bench_asio --benchmark_filter=asio/ --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>
#include <cstdint>
#include <exception>
#include <optional>
#include <utility>

#include <asyncband/asio.hpp>
#include <asyncband/asyncband.hpp>

#include "bench_support.hpp"

namespace {

namespace net = boost::asio;
namespace ab = asyncband;
using boost::system::error_code;
using u64 = std::uint64_t;

constexpr std::size_t kReadyCapacity = 64;

/// Runs `body` as a coroutine on a one-thread io_context until it (and everything it spawned)
/// is done; a coroutine that threw fails the case.
template <class Body>
void run_on_io_context(benchmark::State& state, Body body) {
  net::io_context context(1);
  std::exception_ptr error;
  net::co_spawn(context, body(context), [&error](std::exception_ptr e) {
    if (e) error = e;
  });
  context.run();
  if (error) state.SkipWithError("a coroutine threw");
}

// ---------------------------------------------------------------------------------------------
// asio/lock_unlock

void lock_unlock_asyncband(benchmark::State& state) {
  ab::mutex<u64> m(0);
  run_on_io_context(state, [&](net::io_context&) -> net::awaitable<void> {
    for (auto _ : state) {
      auto guard = co_await ab::asio::async_lock(m, net::use_awaitable);
      ++**guard;
    }
  });
  benchmark::DoNotOptimize(*m.try_lock().value());
}

void lock_unlock_asio(benchmark::State& state) {
  u64 counter = 0;
  run_on_io_context(state, [&](net::io_context& context) -> net::awaitable<void> {
    net::experimental::concurrent_channel<void(error_code)> lock(context, 1);
    for (auto _ : state) {
      co_await lock.async_send(error_code{}, net::use_awaitable);
      ++counter;
      lock.try_receive([](error_code) {});
    }
  });
  benchmark::DoNotOptimize(counter);
}

// ---------------------------------------------------------------------------------------------
// asio/send_recv

void send_recv_asyncband(benchmark::State& state) {
  auto [tx, rx] = ab::mpsc::bounded<u64>(kReadyCapacity);
  u64 sum = 0;
  run_on_io_context(state, [&, &tx = tx, &rx = rx](net::io_context&) -> net::awaitable<void> {
    u64 i = 0;
    for (auto _ : state) {
      co_await ab::asio::async_send(tx, i++, net::use_awaitable);
      sum += co_await ab::asio::async_recv(rx, net::use_awaitable);
    }
  });
  benchmark::DoNotOptimize(sum);
}

void send_recv_asio(benchmark::State& state) {
  u64 sum = 0;
  run_on_io_context(state, [&](net::io_context& context) -> net::awaitable<void> {
    net::experimental::concurrent_channel<void(error_code, u64)> channel(context, kReadyCapacity);
    u64 i = 0;
    for (auto _ : state) {
      co_await channel.async_send(error_code{}, i++, net::use_awaitable);
      sum += co_await channel.async_receive(net::use_awaitable);
    }
  });
  benchmark::DoNotOptimize(sum);
}

// ---------------------------------------------------------------------------------------------
// asio/ping_pong

void ping_pong_asyncband(benchmark::State& state) {
  u64 sum = 0;
  run_on_io_context(state, [&](net::io_context& context) -> net::awaitable<void> {
    auto [tx, rx] = ab::mpsc::bounded<u64>(1);
    net::co_spawn(
        context,
        [&sum, rx = std::move(rx)]() mutable -> net::awaitable<void> {
          for (;;) {
            auto [ec, v] = co_await ab::asio::async_recv(rx, net::as_tuple(net::use_awaitable));
            if (ec) co_return;  // closed
            sum += v;
          }
        },
        net::detached);
    u64 i = 0;
    for (auto _ : state) co_await ab::asio::async_send(tx, i++, net::use_awaitable);
    { auto done = std::move(tx); }  // closes the channel: the consumer ends
  });
  benchmark::DoNotOptimize(sum);
}

void ping_pong_asio(benchmark::State& state) {
  u64 sum = 0;
  run_on_io_context(state, [&](net::io_context& context) -> net::awaitable<void> {
    net::experimental::concurrent_channel<void(error_code, u64)> channel(context, 1);
    net::co_spawn(
        context,
        [&sum, &channel]() -> net::awaitable<void> {
          for (;;) {
            auto [ec, v] = co_await channel.async_receive(net::as_tuple(net::use_awaitable));
            if (ec) co_return;  // closed
            sum += v;
          }
        },
        net::detached);
    u64 i = 0;
    for (auto _ : state) co_await channel.async_send(error_code{}, i++, net::use_awaitable);
    channel.close();  // the consumer's pending receive ends (posted): it touches the channel no more
  });
  benchmark::DoNotOptimize(sum);
}

}  // namespace

BENCHMARK(lock_unlock_asyncband)->Name("asio/lock_unlock/asyncband");
BENCHMARK(lock_unlock_asio)->Name("asio/lock_unlock/asio");
BENCHMARK(send_recv_asyncband)->Name("asio/send_recv/asyncband");
BENCHMARK(send_recv_asio)->Name("asio/send_recv/asio");
BENCHMARK(ping_pong_asyncband)->Name("asio/ping_pong/asyncband");
BENCHMARK(ping_pong_asio)->Name("asio/ping_pong/asio");

int main(int argc, char** argv) {
  return asyncband_bench::run_benchmarks(argc, argv);
}
