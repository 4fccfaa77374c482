// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::singleflight: joining a flight against its landing, a failed leader
// handing the run to a follower, and a cancelled follower.
#include <stdexcept>

#include <asyncband/singleflight.hpp>
#include <asyncband/stop_token.hpp>

#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// Two calls for one key: the second joins the flight or, if it landed already, runs again;
// never two runs at once, and every call gets a run's result.
TEST(ModelSingleflight, CallsCoalesce) {
  EXPECT_TRUE(model::explored(180, [] {
    asyncband::singleflight::group<int, int> group;
    atomic<int> running{0};
    atomic<int> runs{0};
    const auto call = [&] {
      const int v = group.work_blocking(1, [&] {
        check(running.fetch_add(1) == 0, "two runs of one flight at once");
        running.fetch_sub(1);
        return 10 + runs.fetch_add(1);
      });
      check(v >= 10 && v < 10 + runs.load(), "a result no run produced");
    };
    thread a(call);
    thread b(call);
    a.join();
    b.join();
    check(runs.load() == 1 || runs.load() == 2, "no run, or too many");
    check(group.size() == 0, "a landed flight stayed in the group");
  }));
}

// The leader's f throws: the failure reaches it only, and the waiting follower runs its own f
// (never none while a follower waits: that would be a deadlock).
TEST(ModelSingleflight, FailedLeaderHandsOver) {
  EXPECT_TRUE(model::explored(181, [] {
    asyncband::singleflight::group<int, int> group;
    thread a([&] {
      try {
        const int v = group.work_blocking(1, []() -> int { throw std::runtime_error("leader fails"); });
        check(v == 2, "a got another value");
      } catch (const std::runtime_error&) {
      }
    });
    thread b([&] { check(group.work_blocking(1, [] { return 2; }) == 2, "b got another value"); });
    a.join();
    b.join();
    check(group.size() == 0, "a flight stayed in the group");
  }));
}

// A follower cancelled while the flight lands: it ends with the result or cancelled, the leader
// always with its result, and the flight leaves the group.
TEST(ModelSingleflight, CancelledFollower) {
  EXPECT_TRUE(model::explored(182, [] {
    asyncband::singleflight::group<int, int> group;
    asyncband::stop_source stop;
    thread leader([&] { check(group.work_blocking(1, [] { return 5; }) == 5, "the leader's result"); });
    thread follower([&] {
      auto r = group.work_blocking(
          1, [] { return 5; }, stop.get_token());
      check(r.ok() ? *r == 5 : r.status() == asyncband::wait_status::cancelled, "the follower's outcome");
    });
    stop.request_stop();
    leader.join();
    follower.join();
    check(group.size() == 0, "a flight stayed in the group");
  }));
}

}  // namespace
