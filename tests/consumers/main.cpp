// SPDX-License-Identifier: Apache-2.0
// A downstream program, as each consumer test builds it (CMake package, add_subdirectory,
// FetchContent, pkg-config, plain -I): a coroutine hands values over a bounded channel to
// another thread's blocking receive, under the version the headers declare.
#include <asyncband/asyncband.hpp>
#include <asyncband/version.hpp>

#include <cstdio>
#include <thread>

namespace {

struct detached {
  struct promise_type {
    detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

detached produce(asyncband::mpsc::sender<int> tx, asyncband::mutex<int>& sent) {
  for (int i = 1; i <= 100; ++i) {
    if (!(co_await tx.send(i)).ok()) co_return;
    auto guard = co_await sent.lock();
    ++*guard;
  }
}

}  // namespace

int main() {
  static_assert(ASYNCBAND_VERSION ==
                ASYNCBAND_VERSION_MAJOR * 10000 + ASYNCBAND_VERSION_MINOR * 100 + ASYNCBAND_VERSION_PATCH);
  static_assert(asyncband::version.minor == ASYNCBAND_VERSION_MINOR);
  asyncband::mutex<int> sent(0);
  auto [tx, rx] = asyncband::mpsc::bounded<int>(4);
  int sum = 0;
  std::thread consumer([receiver = std::move(rx), &sum]() mutable {
    while (auto v = receiver.recv_blocking()) sum += *v;
  });
  produce(std::move(tx), sent);
  consumer.join();
  const int locked = **sent.try_lock();
  std::printf("asyncband %d.%d.%d: sum %d, %d sends\n", ASYNCBAND_VERSION_MAJOR, ASYNCBAND_VERSION_MINOR,
              ASYNCBAND_VERSION_PATCH, sum, locked);
  return sum == 5050 && locked == 100 ? 0 : 1;
}
