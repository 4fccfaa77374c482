// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::once_map: callers of one key share one computation, through the
// table's lock and the entry's once-cell, while the entry comes and goes.
#include <stdexcept>

#include <asyncband/once_map.hpp>

#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// Two callers of one key: the function runs once, both get its value, and the entry stays.
TEST(ModelOnceMap, CallersOfOneKeyShareOneComputation) {
  EXPECT_TRUE(model::explored(960, [] {
    asyncband::once_map<int, int> map;
    atomic<int> runs{0};
    const auto caller = [&] {
      const int v = map.compute_blocking(1, [&] {
        runs.fetch_add(1);
        return 42;
      });
      check(v == 42, "a caller got another value");
    };
    thread a(caller);
    thread b(caller);
    a.join();
    b.join();
    check(runs.load() == 1, "the function ran twice");
    check(map.get(1) == 42, "the value is not in the map");
  }));
}

// A computation that throws: the other caller runs its own (the failure is not cached), and a
// discard racing them leaves either nothing or the value.
TEST(ModelOnceMap, AFailedComputationPassesOn) {
  EXPECT_TRUE(model::explored(961, [] {
    asyncband::once_map<int, int> map;
    atomic<int> runs{0};
    thread failing([&] {
      try {
        static_cast<void>(map.compute_blocking(1, [&]() -> int {
          runs.fetch_add(1);
          throw std::runtime_error("no");
        }));
      } catch (const std::runtime_error&) {
      }
    });
    thread ok([&] {
      check(map.compute_blocking(1,
                                 [&] {
                                   runs.fetch_add(1);
                                   return 7;
                                 }) == 7,
            "wrong value");
    });
    thread discarding([&] { static_cast<void>(map.discard(1)); });
    failing.join();
    ok.join();
    discarding.join();
    const auto v = map.get(1);
    check(!v || *v == 7, "a value nobody computed");
    check(runs.load() >= 1 && runs.load() <= 2, "a computation ran too often");
  }));
}

}  // namespace
