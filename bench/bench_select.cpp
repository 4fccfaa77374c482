// SPDX-License-Identifier: Apache-2.0
// bench/bench_select.cpp: receiving from whichever of two channels has a value (a select) with
// asyncband::when_any, against the ways C++ users build it today.
//
// Names are `select/case/impl`; impl is
//   asyncband   co_await asyncband::when_any(rx0.recv(), rx1.recv()) on two asyncband::mpsc::bounded
//   (the case select/ready_loop/asyncband is select/ready with asyncband::select_loop over the
//   two receivers: the range form, its storage reused from round to round)
//   hand_built  the pattern users write without a select: an asyncband::stop_source per round and
//               runtime::when_all of two child tasks, each `co_await rx.recv(token)` and requesting
//               stop when it receives (a value received by the second child after the stop is
//               lost: the pattern is not lossless, and the benchmark only sends one per round)
//   asio        co_await (ch0.async_receive(use_awaitable) || ch1.async_receive(use_awaitable))
//               with boost::asio::experimental::awaitable_operators on two concurrent_channels
//
// Cases (one thread, capacity 64, the value alternates between the two channels)
// - select/ready: the value is sent before the select starts: the select completes at once
//   (asyncband: from its poll, without publishing anything). No asio case: with Boost 1.81, once
//   `||` has cancelled the losing async_receive, try_send on that channel fails and async_send
//   hangs until a receive is pending again (asio issue #1241, fixed after 1.81), so a value
//   cannot be sent before the select.
// - select/wake: the select waits first; the benchmark thread's try_send wakes it. asyncband and
//   hand_built resume the selecting coroutine inline in try_send; asio's completion is posted and
//   run by the io_context::poll() that follows the try_send on the same thread.
#include <benchmark/benchmark.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <variant>
#include <vector>

#include "asyncband/mpsc/bounded.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/when_all.hpp"
#include "asyncband/stop_token.hpp"
#include "asyncband/when_any.hpp"
#include "bench_support.hpp"

namespace {

using asyncband::runtime::task;
using asyncband_bench::inline_coroutine;
using u64 = std::uint64_t;
using error_code = boost::system::error_code;
using asio_channel = boost::asio::experimental::concurrent_channel<void(error_code, u64)>;

constexpr std::size_t kCapacity = 64;

[[noreturn]] void impossible(const char* what) {
  std::fprintf(stderr, "bench_select: %s\n", what);
  std::abort();
}

struct two_channels {
  std::pair<asyncband::mpsc::sender<u64>, asyncband::mpsc::receiver<u64>> a =
      asyncband::mpsc::bounded<u64>(kCapacity);
  std::pair<asyncband::mpsc::sender<u64>, asyncband::mpsc::receiver<u64>> b =
      asyncband::mpsc::bounded<u64>(kCapacity);
  void send(u64 i) {
    if (!((i & 1) == 0 ? a.first : b.first).try_send(i)) impossible("try_send failed");
  }
};

// --- the hand-built select, as a task yielding the value ---------------------------------------

task<asyncband::result<u64>> receive_then_stop(asyncband::mpsc::receiver<u64>& rx,
                                               asyncband::stop_source& stop) {
  auto r = co_await rx.recv(stop.get_token());
  if (r) stop.request_stop();
  co_return r;
}

task<u64> select_hand_built(two_channels& c) {
  asyncband::stop_source stop;
  auto [x, y] = co_await asyncband::runtime::when_all(receive_then_stop(c.a.second, stop),
                                                      receive_then_stop(c.b.second, stop));
  co_return x ? *x : *y;
}

/// The value a when_any of the two receives yielded.
template <class Result>
u64 received(Result& r) {
  return r.index() == 0 ? *r.template get<0>() : *r.template get<1>();
}

// --- select/ready --------------------------------------------------------------------------------

inline_coroutine ready_loop_when_any(benchmark::State& state, two_channels& c, u64& sum) {
  u64 i = 0;
  for (auto _ : state) {
    c.send(i++);
    auto r = co_await asyncband::when_any(c.a.second.recv(), c.b.second.recv());
    sum += received(r);
  }
}

inline_coroutine ready_loop_select_loop(benchmark::State& state, two_channels& c, u64& sum) {
  std::vector<asyncband::mpsc::receiver<u64>*> receivers{&c.a.second, &c.b.second};
  asyncband::select_loop loop(receivers, [](asyncband::mpsc::receiver<u64>* rx) { return rx->recv(); });
  u64 i = 0;
  for (auto _ : state) {
    c.send(i++);
    auto& round = co_await loop.next();
    sum += *round.get();
  }
}

inline_coroutine ready_loop_hand_built(benchmark::State& state, two_channels& c, u64& sum) {
  u64 i = 0;
  for (auto _ : state) {
    c.send(i++);
    sum += co_await select_hand_built(c);
  }
}

/// Runs `loop` (a ready_loop_*), which never suspends: every value is sent before its select.
template <class Loop>
void ready_inline(benchmark::State& state, Loop loop) {
  two_channels c;
  u64 sum = 0;
  loop(state, c, sum).check(state);
  benchmark::DoNotOptimize(sum);
}

void ready_asyncband(benchmark::State& state) {
  ready_inline(state, ready_loop_when_any);
}
void ready_loop(benchmark::State& state) {
  ready_inline(state, ready_loop_select_loop);
}
void ready_hand_built(benchmark::State& state) {
  ready_inline(state, ready_loop_hand_built);
}

// --- select/wake ---------------------------------------------------------------------------------

/// Selects forever (until `stop`), adding what it receives; resumed inline by each try_send.
inline_coroutine wake_loop_when_any(two_channels& c, u64& sum, const bool& stop) {
  while (!stop) {
    auto r = co_await asyncband::when_any(c.a.second.recv(), c.b.second.recv());
    sum += received(r);
  }
}

inline_coroutine wake_loop_hand_built(two_channels& c, u64& sum, const bool& stop) {
  while (!stop) sum += co_await select_hand_built(c);
}

template <class Loop>
void wake_inline(benchmark::State& state, Loop loop) {
  two_channels c;
  u64 sum = 0;
  bool stop = false;
  auto selecting = loop(c, sum, stop);
  u64 i = 0;
  for (auto _ : state) c.send(i++);
  const u64 n = i;
  stop = true;
  c.send(i);  // lets the loop see `stop`
  if (sum != n * (n + 1) / 2) state.SkipWithError("a value was not received exactly once");
}

void wake_asyncband(benchmark::State& state) {
  wake_inline(state, wake_loop_when_any);
}
void wake_hand_built(benchmark::State& state) {
  wake_inline(state, wake_loop_hand_built);
}

boost::asio::awaitable<void> asio_wake_loop(asio_channel& a, asio_channel& b, u64& sum, const bool& stop) {
  using namespace boost::asio::experimental::awaitable_operators;
  while (!stop) {
    auto r =
        co_await (a.async_receive(boost::asio::use_awaitable) || b.async_receive(boost::asio::use_awaitable));
    sum += r.index() == 0 ? std::get<0>(r) : std::get<1>(r);
  }
}

void wake_asio(benchmark::State& state) {
  boost::asio::io_context context(1);
  auto work = boost::asio::make_work_guard(context);
  asio_channel a(context, kCapacity);
  asio_channel b(context, kCapacity);
  u64 sum = 0;
  bool stop = false;
  boost::asio::co_spawn(context, asio_wake_loop(a, b, sum, stop), boost::asio::detached);
  context.poll();  // the loop starts and waits
  u64 i = 0;
  for (auto _ : state) {
    const u64 v = i++;
    if (!((v & 1) == 0 ? a : b).try_send(error_code{}, v)) impossible("asio: try_send failed");
    context.poll();
  }
  const u64 n = i;
  stop = true;
  if (!a.try_send(error_code{}, n)) impossible("asio: try_send failed");
  context.poll();
  work.reset();
  context.run();
  if (sum != n * (n + 1) / 2) state.SkipWithError("a value was not received exactly once");
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("select/ready/asyncband", ready_asyncband);
  benchmark::RegisterBenchmark("select/ready_loop/asyncband", ready_loop);
  benchmark::RegisterBenchmark("select/ready/hand_built", ready_hand_built);
  benchmark::RegisterBenchmark("select/wake/asyncband", wake_asyncband);
  benchmark::RegisterBenchmark("select/wake/hand_built", wake_hand_built);
  benchmark::RegisterBenchmark("select/wake/asio", wake_asio);
  return asyncband_bench::run_benchmarks(argc, argv);
}
