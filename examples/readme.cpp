// SPDX-License-Identifier: Apache-2.0
// The example in README.md, kept compiling and running by ./x demo.
#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>
#include <cstdio>
#include <thread>
#include <vector>

using asyncband::runtime::task;

task<void> worker(asyncband::runtime::thread_pool& pool, asyncband::latch& ready, int id) {
  co_await pool.schedule();  // run on the pool; wake-ups resume here too
  co_await ready.wait();     // suspends until the latch reaches zero
  std::printf("worker %d running\n", id);
}

int main() {
  asyncband::runtime::thread_pool pool(2);
  asyncband::latch ready(1);
  std::vector<task<void>> workers;
  for (int i = 0; i < 4; ++i) workers.push_back(worker(pool, ready, i));
  std::thread init([&] { /* ... set things up ... */ ready.count_down(); });
  asyncband::block_on(asyncband::runtime::when_all(std::move(workers)));
  init.join();
}
