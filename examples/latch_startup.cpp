// SPDX-License-Identifier: Apache-2.0
// examples/latch_startup.cpp: workers wait until initialization has finished.
//
// Startup has two steps (loading the configuration, warming a cache), each counting down the
// latch `initialized` when done. Workers of two kinds start before it completes and wait on
// the same latch:
//   - plain threads block with initialized.wait_blocking(),
//   - coroutine tasks on a thread pool suspend with `co_await initialized.wait()`, which does
//     not hold a pool thread while waiting (3 tasks on 2 pool threads are fine).
// Every count_down() happens-before the end of every wait that sees zero, so the workers read
// the configuration without a lock. A second latch, `finished`, lets main wait for all workers.
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>

namespace {

namespace rt = asyncband::runtime;

constexpr int kThreadWorkers = 2;
constexpr int kTaskWorkers = 3;

struct app {
  // Written by the initializer before it counts down; read-only afterwards.
  std::string config_name;
  int cache_entries = 0;

  asyncband::latch initialized{2};  // one count per initialization step
  asyncband::latch finished{kThreadWorkers + kTaskWorkers};

  std::mutex print_mutex;
  // printf, one line at a time from any thread.
  [[gnu::format(printf, 2, 3)]] void print(const char* format, ...) {
    const std::lock_guard lock(print_mutex);
    std::va_list args;
    va_start(args, format);
    std::vprintf(format, args);
    va_end(args);
  }
};

void thread_worker(app& a, int id) {
  a.initialized.wait_blocking();
  a.print("thread worker %d: config '%s', %d cache entries\n", id, a.config_name.c_str(), a.cache_entries);
  a.finished.count_down();
}

rt::task<> task_worker(app& a, int id) {
  co_await a.initialized.wait();
  a.print("task worker %d:   config '%s', %d cache entries\n", id, a.config_name.c_str(), a.cache_entries);
  a.finished.count_down();
}

}  // namespace

int main() {
  app a;
  rt::thread_pool pool(2);  // declared after `a`: joined before `a` is destroyed

  // Start every worker first: they all find the latch closed and wait.
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreadWorkers; ++i) threads.emplace_back(thread_worker, std::ref(a), i);
  for (int i = 0; i < kTaskWorkers; ++i) rt::spawn(pool.ref(), task_worker(a, i));

  // Initialization, on its own thread, in two steps.
  std::thread initializer([&a] {
    a.config_name = "production";
    a.print("initializer: configuration loaded (count %td -> %td)\n", a.initialized.count(),
            a.initialized.count() - 1);
    a.initialized.count_down();

    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // pretend to do some work
    a.cache_entries = 128;
    a.print("initializer: cache warmed, releasing the workers\n");
    a.initialized.count_down();  // reaches zero: wakes threads and tasks alike
  });

  a.finished.wait_blocking();
  a.print("main: all %d workers ran after initialization (try_wait=%d)\n", kThreadWorkers + kTaskWorkers,
          a.initialized.try_wait());

  initializer.join();
  for (auto& t : threads) t.join();

  // Misuse is reported, not undefined: an arrival larger than the remaining count throws.
  asyncband::latch small(1);
  try {
    small.arrive(2);
  } catch (const std::invalid_argument& e) {
    a.print("arrive(2) on latch(1): %s (count still %td)\n", e.what(), small.count());
  }
  return 0;
}
