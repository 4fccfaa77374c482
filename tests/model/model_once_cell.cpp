// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::once_cell: the gate's run passed from a failed initialiser to a
// waiter, a cancelled waiter passing a run on, and set() against a running initialiser.
#include <stdexcept>

#include <asyncband/once_cell.hpp>
#include <asyncband/stop_token.hpp>

#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// Two initialisers, the first one's f throws: the exception reaches that caller only, the other
// runs its own f (or already did), and both end with the one value; never two runs at once.
TEST(ModelOnceCell, OneInitializerThrows) {
  EXPECT_TRUE(model::explored(170, [] {
    asyncband::once_cell<int> cell;
    atomic<int> running{0};
    atomic<int> runs{0};
    atomic<int> threw{0};
    thread a([&] {
      try {
        const int v = cell.get_or_init_blocking([&]() -> int {
          check(running.fetch_add(1) == 0, "two initialisers at once");
          runs.fetch_add(1);
          running.fetch_sub(1);
          throw std::runtime_error("a fails");
        });
        check(v == 2, "a got another value");
      } catch (const std::runtime_error&) {
        threw.fetch_add(1);
      }
    });
    thread b([&] {
      const int v = cell.get_or_init_blocking([&] {
        check(running.fetch_add(1) == 0, "two initialisers at once");
        runs.fetch_add(1);
        running.fetch_sub(1);
        return 2;
      });
      check(v == 2, "b got another value");
    });
    a.join();
    b.join();
    check(cell.get() != nullptr && *cell.get() == 2, "the cell does not hold the value");
    check(threw.load() == runs.load() - 1, "a's exception reached nobody, or ran twice");
  }));
}

// A run passed to a waiter whose stop was requested passes on: with the first initialiser
// failing, a cancellable waiter and a plain one, the plain one always ends with the value.
TEST(ModelOnceCell, CancelledWaiterPassesRunOn) {
  EXPECT_TRUE(model::explored(171, [] {
    asyncband::once_cell<int> cell;
    asyncband::stop_source stop;
    atomic<int> outcome{-1};
    thread a([&] {
      try {
        (void)cell.get_or_init_blocking([]() -> int { throw std::runtime_error("a fails"); });
      } catch (const std::runtime_error&) {
      }
    });
    thread b([&] {
      auto r = cell.get_or_init_blocking([] { return 2; }, stop.get_token());
      if (r.ok()) {
        check(*r == 2 || *r == 3, "b got another value");
        outcome.store(1);
      } else {
        check(r.status() == asyncband::wait_status::cancelled, "b ended neither ok nor cancelled");
        outcome.store(0);
      }
    });
    thread c([&] {
      const int v = cell.get_or_init_blocking([] { return 3; });
      check(v == 2 || v == 3, "c got another value");
    });
    stop.request_stop();
    a.join();
    b.join();
    c.join();
    check(cell.get() != nullptr, "the cell stayed empty with a plain waiter");
  }));
}

// set() against a running get_or_init: set stores its value only when nobody initialises the
// cell; otherwise it hands it back, and the cell and the initialiser agree on the value.
TEST(ModelOnceCell, SetRacesInit) {
  EXPECT_TRUE(model::explored(172, [] {
    asyncband::once_cell<int> cell;
    atomic<int> set_stored{-1};
    thread setter([&] {
      const auto back = cell.set(1);
      set_stored.store(back ? 0 : 1);
      if (back) check(*back == 1, "set handed back another value");
    });
    thread init([&] {
      const int v = cell.get_or_init_blocking([] { return 2; });
      check(v == *cell.get(), "the initialiser's value is not the cell's");
    });
    setter.join();
    init.join();
    check(*cell.get() == (set_stored.load() == 1 ? 1 : 2), "set and the cell disagree");
  }));
}

}  // namespace
