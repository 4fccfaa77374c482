// SPDX-License-Identifier: Apache-2.0
// Regression tests from the race and lifetime review of the once family (issue 12): each test
// reproduces one bug found in review, deterministically, on one thread.
//
// "Last one out" (docs/design.md): a waiter resumed inline may destroy the primitive at once,
// even while the call that completed its wait is still returning. The tests keep the primitive on
// a page of its own that is made inaccessible when the waiter destroys it, so that any later
// access (even from inside libc, such as locking a std::mutex, where ASan does not look) faults
// at once, in every build.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <asyncband/manual_reset_event.hpp>
#include <asyncband/once.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/singleflight.hpp>
#include <asyncband/stop_token.hpp>
#include <cstddef>
#include <functional>
#include <new>
#include <optional>
#include <stdexcept>
#include <utility>

namespace {

using asyncband::runtime::task;

/// An object alone on its own pages; destroy_and_seal() destroys it and makes the pages
/// inaccessible, so that a late access faults rather than reading freed memory quietly.
template <class T>
class sealed_box {
 public:
  sealed_box() : bytes_(page_rounded(sizeof(T))) {
    page_ = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page_ == MAP_FAILED) throw std::bad_alloc();
    object_ = ::new (page_) T();
  }
  sealed_box(const sealed_box&) = delete;
  sealed_box& operator=(const sealed_box&) = delete;
  ~sealed_box() {
    if (object_ != nullptr) object_->~T();
    ::munmap(page_, bytes_);
  }

  [[nodiscard]] T* get() const noexcept { return object_; }

  void destroy_and_seal() {
    std::exchange(object_, nullptr)->~T();
    ASSERT_EQ(::mprotect(page_, bytes_, PROT_NONE), 0);
  }

 private:
  static std::size_t page_rounded(std::size_t n) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return (n + page - 1) / page * page;
  }

  std::size_t bytes_;
  void* page_ = nullptr;
  T* object_ = nullptr;
};

/// Starts a task with no scheduler on this thread: its wake-ups resume it inline.
void start(const task<void>& t) {
  t.handle().resume();
}

using int_group = asyncband::singleflight::group<int, int>;

// A follower's ticket left the group in its destructor, after the landing had woken every
// follower: the first follower resumed inline destroys the group (its call is over, the flight
// has landed), and the second one's leave() then locked the destroyed group's mutex.
TEST(test_once_review, SingleflightFollowerDoesNotTouchTheGroupAfterTheLanding) {
  sealed_box<int_group> box;
  int_group* const g = box.get();
  asyncband::manual_reset_event go;
  const auto slow = [&go]() -> task<int> {
    co_await go.wait();
    co_return 42;
  };
  const auto unused = []() -> task<int> { co_return -1; };
  int got[3] = {0, 0, 0};
  const auto leader = [&]() -> task<void> { got[0] = co_await g->work(1, slow); };
  const auto first = [&]() -> task<void> {
    got[1] = co_await g->work(1, unused);
    box.destroy_and_seal();  // the flight landed and this call is over: last one out
  };
  const auto second = [&]() -> task<void> { got[2] = co_await g->work(1, unused); };

  const task<void> tl = leader();
  const task<void> t1 = first();
  const task<void> t2 = second();
  start(tl);  // runs `slow` until it waits for `go`
  start(t1);  // follows
  start(t2);  // follows
  go.set();   // the leader lands; both followers resume inline, the first destroys the group

  EXPECT_TRUE(tl.done() && t1.done() && t2.done());
  EXPECT_EQ(got[0], 42);
  EXPECT_EQ(got[1], 42);
  EXPECT_EQ(got[2], 42);
}

// A leader whose f failed passed the run on (grant_.fail() in await_resume) and only then left
// the group, in its ticket's destructor. The follower handed the run is resumed inline, runs
// its own f, and, its call over, destroys the group: the failed leader's leave() then touched it.
TEST(test_once_review, SingleflightFailedLeaderDoesNotTouchTheGroupAfterPassingTheRunOn) {
  sealed_box<int_group> box;
  int_group* const g = box.get();
  asyncband::manual_reset_event go;
  const auto failing = [&go]() -> task<int> {
    co_await go.wait();
    throw std::runtime_error("the leader's f fails");
  };
  const auto succeeding = []() -> task<int> { co_return 7; };
  bool leader_threw = false;
  int second_got = 0;
  const auto leader = [&]() -> task<void> {
    try {
      (void)co_await g->work(1, failing);
    } catch (const std::runtime_error&) {
      leader_threw = true;
    }
  };
  const auto second = [&]() -> task<void> {
    second_got = co_await g->work(1, succeeding);
    box.destroy_and_seal();  // its wait was completed by the leader's failure: last one out
  };

  const task<void> tl = leader();
  const task<void> t2 = second();
  start(tl);
  start(t2);
  go.set();  // the leader fails; the run passes to `second`, which runs inline and lands

  EXPECT_TRUE(tl.done() && t2.done());
  EXPECT_TRUE(leader_threw);
  EXPECT_EQ(second_got, 7);
}

// A caller destroyed while its run is in progress fails the run (its grant's destructor) and
// only afterwards drops its stop callback. The caller handed the run is resumed inline, completes
// the once and, its call over, destroys it and requests stop on a token it shares with the
// destroyed caller: the stop callback still registered then cancelled its node on the destroyed
// once's wait queue.
TEST(test_once_review, CallerDestroyedMidRunDropsItsStopCallbackBeforePassingTheRunOn) {
  sealed_box<asyncband::once> box;
  asyncband::once* const o = box.get();
  asyncband::stop_source shared_stop;  // one source for the whole service, say
  asyncband::manual_reset_event first_go;
  asyncband::manual_reset_event never;
  const auto failing = [&first_go]() -> task<void> {
    co_await first_go.wait();
    throw std::runtime_error("the first run fails");
  };
  const auto hanging = [&never]() -> task<void> { co_await never.wait(); };
  const auto quick = []() -> task<void> { co_return; };
  bool first_threw = false;
  bool third_done = false;
  const auto first = [&]() -> task<void> {
    try {
      co_await o->call_once(failing);
    } catch (const std::runtime_error&) {
      first_threw = true;
    }
  };
  const auto destroyed = [&]() -> task<void> {
    (void)co_await o->call_once(hanging, shared_stop.get_token());
  };
  const auto third = [&]() -> task<void> {
    co_await o->call_once(quick);
    third_done = true;
    box.destroy_and_seal();      // its wait was completed by the destroyed caller's run passing on
    shared_stop.request_stop();  // the service stops: every callback on the token runs now
  };

  const task<void> t1 = first();
  std::optional<task<void>> t2(destroyed());
  const task<void> t3 = third();
  start(t1);       // runs `failing` until it waits
  start(*t2);      // queued (its stop callback registered)
  start(t3);       // queued behind it
  first_go.set();  // the first run fails: the run passes to t2, whose `hanging` starts inline
  ASSERT_TRUE(first_threw);
  ASSERT_FALSE(t2->done());
  t2.reset();  // destroyed mid-run: the run passes to t3, which completes and destroys the once

  EXPECT_TRUE(t1.done() && t3.done());
  EXPECT_TRUE(third_done);
}

// The same stop callback on the success path: a caller that queued (its stop callback
// registered) and was then handed the run kept the callback for the whole run, and dropped it only
// in await_resume. Its own run completes the once and wakes a waiter inline, which destroys the
// once and requests stop on the shared token before the run has returned to its caller.
TEST(test_once_review, RunnerDropsItsStopCallbackBeforeItsRunCompletesTheOnce) {
  sealed_box<asyncband::once> box;
  asyncband::once* const o = box.get();
  asyncband::stop_source shared_stop;
  asyncband::manual_reset_event first_go;
  asyncband::manual_reset_event second_go;
  const auto failing = [&first_go]() -> task<void> {
    co_await first_go.wait();
    throw std::runtime_error("the first run fails");
  };
  const auto succeeding = [&second_go]() -> task<void> { co_await second_go.wait(); };
  bool first_threw = false;
  bool runner_ok = false;
  bool waiter_done = false;
  const auto first = [&]() -> task<void> {
    try {
      co_await o->call_once(failing);
    } catch (const std::runtime_error&) {
      first_threw = true;
    }
  };
  const auto runner = [&]() -> task<void> {
    runner_ok = (co_await o->call_once(succeeding, shared_stop.get_token())).ok();
  };
  const auto waiter = [&]() -> task<void> {
    co_await o->wait();
    waiter_done = true;
    box.destroy_and_seal();      // completed by the runner's call, which is still returning
    shared_stop.request_stop();  // the service stops
  };

  const task<void> t1 = first();
  const task<void> t2 = runner();
  const task<void> t3 = waiter();
  start(t1);       // runs `failing` until it waits
  start(t2);       // queued (its stop callback registered)
  start(t3);       // waits for completion
  first_go.set();  // the first run fails: the run passes to t2, whose `succeeding` starts inline
  ASSERT_TRUE(first_threw);
  second_go.set();  // t2's run completes the once: t3 resumes inline inside it

  EXPECT_TRUE(t1.done() && t2.done() && t3.done());
  EXPECT_TRUE(waiter_done);
  EXPECT_TRUE(runner_ok);
}

/// Counts the values alive, to see one constructed over another (never destroyed).
struct counted {
  static inline int alive = 0;
  int v;
  explicit counted(int x) : v(x) { ++alive; }
  counted(const counted& other) : v(other.v) { ++alive; }
  counted& operator=(const counted&) = default;
  ~counted() { --alive; }
};

/// Key equality that throws once, when armed.
struct throwing_eq {
  static inline bool armed = false;
  bool operator()(int a, int b) const {
    if (std::exchange(armed, false)) throw std::runtime_error("Eq throws");
    return a == b;
  }
};

// The flight leaves the group (published(): a lookup by key, running Hash and Eq) after the
// value is constructed in its cell and before the gate completes. If Eq threw there, the run
// failed with the value alive in a cell whose gate is not completed: the next runner constructed
// its own over it, and the first was never destroyed.
TEST(test_once_review, SingleflightValueDoesNotOutliveAFailedLanding) {
  {
    asyncband::singleflight::group<int, counted, std::hash<int>, throwing_eq> g;
    asyncband::manual_reset_event go;
    const auto first_f = [&go]() -> task<counted> {
      co_await go.wait();
      co_return counted(1);
    };
    const auto second_f = []() -> task<counted> { co_return counted(2); };
    bool leader_threw = false;
    int second_got = 0;
    const auto leader = [&]() -> task<void> {
      try {
        (void)co_await g.work(1, first_f);
      } catch (const std::runtime_error&) {
        leader_threw = true;
      }
    };
    const auto second = [&]() -> task<void> { second_got = (co_await g.work(1, second_f)).v; };

    const task<void> tl = leader();
    const task<void> t2 = second();
    start(tl);
    start(t2);
    throwing_eq::armed = true;  // the landing's lookup throws
    go.set();                   // the leader fails; the run passes to `second`, which lands

    EXPECT_TRUE(tl.done() && t2.done());
    EXPECT_TRUE(leader_threw);
    EXPECT_EQ(second_got, 2);
    EXPECT_EQ(g.size(), 0U);
  }
  EXPECT_EQ(counted::alive, 0) << "a value constructed in a flight's cell was never destroyed";
}

}  // namespace
