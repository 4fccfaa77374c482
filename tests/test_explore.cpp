// SPDX-License-Identifier: Apache-2.0
// The schedule explorer (asyncband/testing/explore.hpp) on small user programs: it finds the
// bugs planted in them (a lost update, a lock-order deadlock, a check-then-act race, a livelock,
// an exception), a failing schedule's replay string reproduces it exactly, and a correct program
// passes every schedule of the bounded exhaustive search, whose schedules are counted.
#include <gtest/gtest.h>

#include <asyncband/testing/explore.hpp>
#include <asyncband/testing/gtest.hpp>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

namespace ex = asyncband::testing;

// Runs `work` in `n` model threads (created in order, then joined in order).
template <class Work>
void in_threads(std::size_t n, const Work& work) {
  std::vector<ex::thread> threads;
  threads.reserve(n);
  for (std::size_t i = 0; i != n; ++i) threads.emplace_back(work);
  for (ex::thread& t : threads) t.join();
}

// Two threads increment a counter with a load and a store: an update can be lost.
void lost_update_body() {
  ex::atomic<int> counter{0};
  const auto increment = [&] {
    const int seen = counter.load();
    counter.store(seen + 1);
  };
  in_threads(2, increment);
  ex::check(counter.load() == 2, "an increment was lost");
}

TEST(Explore, PctFindsALostUpdateAndItsReplayReproducesIt) {
  const ex::result found = ex::explore({.strategy = ex::strategy::pct, .schedules = 1000}, lost_update_body);
  ASSERT_TRUE(ex::failed_with(found, ex::failure_kind::check));
  EXPECT_LE(found.schedules, 1000U);
  EXPECT_NE(found.failure->message.find("an increment was lost"), std::string::npos);
  EXPECT_EQ(found.failure->schedule.rfind("pct:seed=", 0), 0U) << found.failure->schedule;
  std::cout << "lost update: PCT found it in schedule " << found.schedules << " (" << found.failure->schedule
            << ")\n";

  // The replay runs exactly that schedule: the same operations in the same order.
  for (int i = 0; i != 3; ++i) {
    const ex::result again = ex::explore({.replay = found.failure->schedule}, lost_update_body);
    ASSERT_TRUE(ex::failed_with(again, ex::failure_kind::check));
    EXPECT_EQ(again.schedules, 1U);
    EXPECT_EQ(again.failure->schedule, found.failure->schedule);
    EXPECT_EQ(again.failure->message, found.failure->message);
    EXPECT_EQ(again.failure->steps, found.failure->steps);
    EXPECT_EQ(again.failure->trace, found.failure->trace);
  }
  // The first schedule of the exploration is another one, which passes.
  const ex::result first = ex::explore({.strategy = ex::strategy::pct, .schedules = 1}, lost_update_body);
  EXPECT_TRUE(ex::passed(first));
}

TEST(Explore, RandomAndExhaustiveFindTheLostUpdateToo) {
  const ex::result random =
      ex::explore({.strategy = ex::strategy::random, .schedules = 1000}, lost_update_body);
  ASSERT_TRUE(ex::failed_with(random, ex::failure_kind::check));
  EXPECT_EQ(random.failure->schedule.rfind("random:seed=", 0), 0U);
  EXPECT_TRUE(ex::failed_with(ex::explore({.replay = random.failure->schedule}, lost_update_body),
                              ex::failure_kind::check));

  const ex::result exhaustive =
      ex::explore({.strategy = ex::strategy::exhaustive, .preemptions = 1}, lost_update_body);
  ASSERT_TRUE(ex::failed_with(exhaustive, ex::failure_kind::check));
  EXPECT_EQ(exhaustive.failure->schedule.rfind("s:", 0), 0U);
  const ex::result again = ex::explore({.replay = exhaustive.failure->schedule}, lost_update_body);
  ASSERT_TRUE(ex::failed_with(again, ex::failure_kind::check));
  EXPECT_EQ(again.failure->trace, exhaustive.failure->trace);
  std::cout << "lost update: random found it in schedule " << random.schedules << ", exhaustive in "
            << exhaustive.schedules << " (" << exhaustive.failure->schedule << ")\n";

  // No preemption, no lost update: each thread's load and store run together.
  EXPECT_TRUE(
      ex::passed(ex::explore({.strategy = ex::strategy::exhaustive, .preemptions = 0}, lost_update_body)));
}

// Two threads take two mutexes in opposite orders.
void lock_order_body() {
  ex::mutex first;
  ex::mutex second;
  ex::thread a([&] {
    const std::lock_guard one(first);
    const std::lock_guard two(second);
  });
  ex::thread b([&] {
    const std::lock_guard one(second);
    const std::lock_guard two(first);
  });
  a.join();
  b.join();
}

TEST(Explore, FindsTheDeadlockOfALockOrderInversion) {
  const ex::result found = ex::explore({.strategy = ex::strategy::pct, .schedules = 1000}, lock_order_body);
  ASSERT_TRUE(ex::failed_with(found, ex::failure_kind::deadlock));
  const std::string& message = found.failure->message;
  // Both threads are named, with the mutex each waits for and who holds it.
  EXPECT_NE(message.find("thread 1 waits to lock mutex#2 (held by thread 2)"), std::string::npos) << message;
  EXPECT_NE(message.find("thread 2 waits to lock mutex#1 (held by thread 1)"), std::string::npos) << message;
  EXPECT_NE(message.find("thread 0 waits to join thread 1"), std::string::npos) << message;
  std::cout << "deadlock: PCT found it in schedule " << found.schedules << "\n";

  const ex::result again = ex::explore({.replay = found.failure->schedule}, lock_order_body);
  ASSERT_TRUE(ex::failed_with(again, ex::failure_kind::deadlock));
  EXPECT_EQ(again.failure->message, message);

  // With one preemption the exhaustive search finds it as well; with none it cannot (each
  // thread takes both mutexes before another runs).
  const ex::result exhaustive =
      ex::explore({.strategy = ex::strategy::exhaustive, .preemptions = 1}, lock_order_body);
  EXPECT_TRUE(ex::failed_with(exhaustive, ex::failure_kind::deadlock));
  EXPECT_TRUE(
      ex::passed(ex::explore({.strategy = ex::strategy::exhaustive, .preemptions = 0}, lock_order_body)));
}

// Check-then-act: three threads each claim a job if its flag says nobody has. Two of them can
// both see the flag clear; the losing interleaving needs a thread preempted between its check
// and its act while another thread checks.
void check_then_act_body() {
  ex::atomic<bool> claimed{false};
  ex::atomic<int> owners{0};
  ex::atomic<int> finished{0};
  const auto worker = [&] {
    finished.fetch_add(1);  // some work before the claim
    if (!claimed.load()) {
      claimed.store(true);
      owners.fetch_add(1);
    }
  };
  in_threads(3, worker);
  ex::check(owners.load() == 1, "two threads claimed the job");
}

TEST(Explore, PctOfDepthThreeFindsACheckThenActRace) {
  const ex::result found =
      ex::explore({.strategy = ex::strategy::pct, .schedules = 1000, .depth = 3}, check_then_act_body);
  ASSERT_TRUE(ex::failed_with(found, ex::failure_kind::check));
  std::cout << "check-then-act (3 threads): PCT d=3 found it in schedule " << found.schedules << "\n";
  EXPECT_TRUE(ex::failed_with(ex::explore({.replay = found.failure->schedule}, check_then_act_body),
                              ex::failure_kind::check));

  // The same claim with one exchange is correct: no schedule fails.
  const auto fixed = [] {
    ex::atomic<bool> claimed{false};
    ex::atomic<int> owners{0};
    const auto worker = [&] {
      if (!claimed.exchange(true)) owners.fetch_add(1);
    };
    in_threads(3, worker);
    ex::check(owners.load() == 1, "two threads claimed the job");
  };
  EXPECT_TRUE(ex::passed(ex::explore({.strategy = ex::strategy::pct, .schedules = 300, .depth = 3}, fixed)));
}

// Two threads each add one with fetch_add; the body checks the sum.
void fetch_add_body() {
  ex::atomic<int> counter{0};
  in_threads(2, [&] { counter.fetch_add(1); });
  ex::check(counter.load() == 2, "an increment was lost");
}

// The schedules of fetch_add_body, counted by hand. Body thread 0: spawn a, [spawn b],
// [join a], [join b], [load]; a and b: their fetch_add (a thread's first operation runs when it
// is chosen: no decision of its own) and their end, where the next thread is chosen. Brackets
// mark decisions: the thread there can go on, so choosing another is a preemption; decisions
// after a thread blocks (join) or ends are free. The 12 schedules (P: a preemption):
//   at [spawn b], a runs (P):      at [join a], 0 -> at [join b], 0 (1 P) or b (2 P); or b (2 P)
//   at [spawn b], 0 goes on:       at [join a], 0 blocks -> a, then 0 -> [join b]: 0 or b (P)
//                                                           a, then b
//                                                           b, then a
//                                  at [join a], a (P) -> then 0 -> [join b]: 0 or b (2 P)
//                                                        then b
//                                  at [join a], b (P) -> then 0 (0 blocks, a runs) or a
// Within 2 preemptions: 12; within 1: 9 (three have two); within 0: 3. (tests/support/
// explore_count.py enumerates the same.)
TEST(Explore, ExhaustiveSearchRunsEveryScheduleOfACorrectProgram) {
  for (const auto& [bound, expected] :
       {std::pair<std::size_t, std::size_t>{0, 3}, {1, 9}, {2, 12}, {5, 12}}) {
    const ex::result r =
        ex::explore({.strategy = ex::strategy::exhaustive, .preemptions = bound}, fetch_add_body);
    EXPECT_TRUE(ex::passed(r));
    EXPECT_TRUE(r.exhausted);
    EXPECT_EQ(r.schedules, expected) << "preemption bound " << bound;
  }
}

// A counter incremented with a compare-exchange loop, by two threads, twice each.
void cas_counter_body() {
  ex::atomic<int> counter{0};
  const auto increment_twice = [&] {
    for (int i = 0; i != 2; ++i) {
      int seen = counter.load(std::memory_order_relaxed);
      while (!counter.compare_exchange_weak(seen, seen + 1, std::memory_order_acq_rel,
                                            std::memory_order_relaxed)) {
      }
    }
  };
  in_threads(2, increment_twice);
  ex::check(counter.load() == 4, "an increment was lost");
}

TEST(Explore, ExhaustiveSearchPassesACompareExchangeCounter) {
  // Counted independently by tests/support/explore_count.py, an enumeration of the same
  // decisions: 3 schedules without preemption, 21 within 1, 110 within 2.
  for (const auto& [bound, expected] : {std::pair<std::size_t, std::size_t>{0, 3}, {1, 21}, {2, 110}}) {
    const ex::result r =
        ex::explore({.strategy = ex::strategy::exhaustive, .preemptions = bound}, cas_counter_body);
    EXPECT_TRUE(ex::passed(r));
    EXPECT_TRUE(r.exhausted);
    EXPECT_EQ(r.schedules, expected) << "preemption bound " << bound;
  }
  // The cap on schedules stops the search before its end.
  const ex::result capped = ex::explore(
      {.strategy = ex::strategy::exhaustive, .schedules = 10, .preemptions = 2}, cas_counter_body);
  EXPECT_TRUE(ex::passed(capped));
  EXPECT_FALSE(capped.exhausted);
  EXPECT_EQ(capped.schedules, 10U);
}

// A thread spins on a flag nobody sets: the step bound ends the run.
TEST(Explore, TheStepBoundEndsALivelock) {
  const auto body = [] {
    ex::atomic<bool> go{false};
    ex::thread spinner([&] {
      while (!go.load()) ex::yield();
    });
    spinner.join();
  };
  const ex::result r = ex::explore({.strategy = ex::strategy::pct, .schedules = 10, .max_steps = 500}, body);
  ASSERT_TRUE(ex::failed_with(r, ex::failure_kind::livelock));
  EXPECT_EQ(r.schedules, 1U);
  EXPECT_NE(r.failure->message.find("500"), std::string::npos) << r.failure->message;
  // Without yield() (a spin on the atomic alone) too, under every strategy.
  const auto busy = [] {
    ex::atomic<bool> go{false};
    ex::thread spinner([&] {
      while (!go.load()) {
      }
    });
    spinner.join();
  };
  for (const ex::strategy s : {ex::strategy::random, ex::strategy::pct, ex::strategy::exhaustive}) {
    EXPECT_TRUE(
        ex::failed_with(ex::explore({.strategy = s, .max_steps = 300}, busy), ex::failure_kind::livelock));
  }
}

// A spin loop that ends once another thread sets the flag is no livelock: yield() lets the
// other thread run (under PCT the spinner's priority drops; the exhaustive search switches).
TEST(Explore, YieldLetsASpinLoopEnd) {
  const auto body = [] {
    ex::atomic<bool> go{false};
    ex::thread spinner([&] {
      while (!go.load()) ex::yield();
    });
    ex::thread setter([&] { go.store(true); });
    spinner.join();
    setter.join();
  };
  for (const ex::strategy s : {ex::strategy::random, ex::strategy::pct, ex::strategy::exhaustive}) {
    const ex::result r = ex::explore({.strategy = s, .schedules = 200, .max_steps = 1000}, body);
    EXPECT_TRUE(ex::passed(r)) << static_cast<int>(s);
  }
}

TEST(Explore, AnExceptionEscapingAModelThreadIsAFailure) {
  const auto body = [] {
    ex::atomic<int> state{0};
    ex::thread a([&] {
      if (state.exchange(1) == 2) throw std::runtime_error("b was first");
    });
    ex::thread b([&] { state.exchange(2); });
    a.join();
    b.join();
  };
  const ex::result r = ex::explore({.strategy = ex::strategy::exhaustive}, body);
  ASSERT_TRUE(ex::failed_with(r, ex::failure_kind::exception));
  EXPECT_NE(r.failure->message.find("thread 1: exception escaped the thread: b was first"), std::string::npos)
      << r.failure->message;
  EXPECT_TRUE(
      ex::failed_with(ex::explore({.replay = r.failure->schedule}, body), ex::failure_kind::exception));

  // The body's own exception too (thread 0), and a failed check in a model thread.
  EXPECT_TRUE(ex::failed_with(ex::explore({.schedules = 3}, [] { throw std::logic_error("body"); }),
                              ex::failure_kind::exception));
  const ex::result in_thread = ex::explore({.schedules = 3}, [] {
    ex::thread t([] { ex::check(false, "from a thread"); });
    t.join();
  });
  ASSERT_TRUE(ex::failed_with(in_thread, ex::failure_kind::check));
  EXPECT_NE(in_thread.failure->message.find("thread 1: check failed: from a thread"), std::string::npos);
}

// After a failure, the other model threads unwind (or, stopped in a noexcept operation, stay
// parked): the exploration returns, and the destructors of what the unwound ones hold run.
TEST(Explore, AFailedRunEndsItsOtherThreads) {
  static std::atomic<int> unwound{0};
  struct on_unwind {
    on_unwind() = default;
    on_unwind(const on_unwind&) = delete;
    on_unwind& operator=(const on_unwind&) = delete;
    ~on_unwind() { unwound.fetch_add(1); }
  };
  unwound = 0;
  const auto body = [] {
    ex::mutex m;
    ex::atomic<int> never{0};
    ex::thread holder([&] {
      const on_unwind guard;
      const std::lock_guard lock(m);
      ex::yield();
      ex::check(false, "fails while holding the mutex");
    });
    ex::thread blocked([&] {
      const on_unwind guard;  // unwound: blocked in lock(), which may throw
      const std::lock_guard lock(m);
    });
    ex::thread waiter([&] {
      const on_unwind guard;  // parked for good in wait(), which is noexcept: never destroyed
      never.wait(0);
    });
    holder.join();
    blocked.join();
    waiter.join();
  };
  // The body blocks in join; the holder takes the mutex and yields to `blocked`, which blocks
  // on it, then to the waiter, which blocks in wait(); the holder fails.
  const ex::result r = ex::explore({.replay = "s:0.0.0.1.2.3"}, body);
  ASSERT_TRUE(ex::failed_with(r, ex::failure_kind::check));
  EXPECT_NE(r.failure->trace.find("thread 3: blocks"), std::string::npos) << r.failure->trace;
  EXPECT_EQ(unwound.load(), 2);
}

TEST(Explore, SwallowingTheAbortIsReported) {
  const auto body = [] {
    ex::mutex m;
    ex::thread swallower([&] {
      try {
        for (;;) ex::yield();
      } catch (...) {  // wrong in a model thread: also catches the explorer's abort
      }
      m.lock();  // the run failed: parked here for good
      m.unlock();
    });
    ex::thread failing([] { ex::check(false, "fails"); });
    swallower.join();
    failing.join();
  };
  // The first schedule: the swallower yields to the failing thread, which fails; then the
  // swallower gets the abort in yield().
  const ex::result r = ex::explore({.strategy = ex::strategy::exhaustive, .schedules = 1}, body);
  ASSERT_TRUE(ex::failed_with(r, ex::failure_kind::check));
  EXPECT_NE(r.failure->message.find("thread 1 caught the explorer's abort exception"), std::string::npos)
      << r.failure->message;
}

TEST(Explore, DeadlockOfALostWakeUpOnAnAtomicWait) {
  // The waiter checks, then waits; the notifier sets and notifies. Correct: wait() re-checks.
  // Broken: notify before the store, with the waiter waiting on a stale value it read itself.
  const auto broken = [] {
    ex::atomic<int> flag{0};
    ex::atomic<int> seen{0};
    ex::thread waiter([&] {
      const int old = seen.load();
      if (flag.load() == 0) {
        seen.wait(old);  // waits for a change of `seen` that the notifier announces early
      }
    });
    ex::thread notifier([&] {
      seen.notify_one();  // nobody waits yet in some schedules: the wake-up is lost
      flag.store(1);
      seen.store(1);
    });
    waiter.join();
    notifier.join();
  };
  const ex::result r = ex::explore({.strategy = ex::strategy::exhaustive}, broken);
  // seen.store(1) without a notify after it: a waiter that waits before it sleeps for good.
  ASSERT_TRUE(ex::failed_with(r, ex::failure_kind::deadlock));
  EXPECT_NE(r.failure->message.find("thread 1 waits in wait() on atomic#"), std::string::npos)
      << r.failure->message;
}

TEST(Explore, MisusedPrimitivesAreFailures) {
  const ex::result unjoined = ex::explore({.schedules = 5}, [] {
    ex::atomic<int> x{0};
    const ex::thread forgotten([&] { x.store(1); });
  });
  ASSERT_TRUE(ex::failed_with(unjoined, ex::failure_kind::misuse));
  EXPECT_NE(unjoined.failure->message.find("destroyed while joinable"), std::string::npos);

  const ex::result not_held = ex::explore({.schedules = 5}, [] {
    ex::mutex m;
    ex::thread other([&] { m.lock(); });
    other.join();
    m.unlock();
  });
  ASSERT_TRUE(ex::failed_with(not_held, ex::failure_kind::misuse));
  EXPECT_NE(not_held.failure->message.find("thread 0: unlocks a mutex it does not hold"), std::string::npos);

  // A body exploring again: the inner explore() throws, which escapes the body.
  EXPECT_TRUE(ex::failed_with(ex::explore({.schedules = 1}, [] { static_cast<void>(ex::explore([] {})); }),
                              ex::failure_kind::exception));
}

// testing::atomic can stand in for std::atomic (asyncband::detail::atomic under ASYNCBAND_MODEL):
// the same size, the same noexcept members, the same constexpr construction.
static_assert(sizeof(ex::atomic<int>) == sizeof(std::atomic<int>));
static_assert(sizeof(ex::atomic<std::uint64_t>) == sizeof(std::atomic<std::uint64_t>));
static_assert(sizeof(ex::atomic<void*>) == sizeof(std::atomic<void*>));
static_assert(noexcept(std::declval<ex::atomic<int>&>().load()));
static_assert(noexcept(std::declval<ex::atomic<int>&>().fetch_add(1, std::memory_order_relaxed)));
static_assert(noexcept(std::declval<const ex::atomic<int>&>().wait(0)));
static_assert(noexcept(std::declval<ex::atomic<int>&>().notify_all()));
static_assert(std::is_same_v<ex::atomic<unsigned>::difference_type, std::atomic<unsigned>::difference_type>);
static_assert(std::is_same_v<ex::atomic<int*>::difference_type, std::ptrdiff_t>);
static_assert(ex::atomic<int>::is_always_lock_free == std::atomic<int>::is_always_lock_free);
constinit ex::atomic<int> constant_initialised{3};
template <class A>
concept adds = requires(A a) { a.fetch_add(1); };
template <class A>
concept ors = requires(A a) { a.fetch_or(1); };
static_assert(adds<ex::atomic<int>> && adds<ex::atomic<double>> && adds<ex::atomic<int*>>);
static_assert(!adds<ex::atomic<bool>> && !ors<ex::atomic<bool>>);  // as std::atomic<bool>
static_assert(ors<ex::atomic<unsigned>> && !ors<ex::atomic<double>>);

TEST(Explore, ModelPrimitivesArePlainOutsideARun) {
  EXPECT_EQ(constant_initialised.load(), 3);
  ex::atomic<int> a{1};
  EXPECT_EQ(a.fetch_add(2), 1);
  EXPECT_EQ(++a, 4);
  EXPECT_EQ(a.exchange(7), 4);
  int expected = 7;
  EXPECT_TRUE(a.compare_exchange_strong(expected, 8));
  a.store(9, std::memory_order_release);
  EXPECT_EQ(a.load(std::memory_order_acquire), 9);
  ex::atomic<unsigned> bits{0b1010U};
  EXPECT_EQ(bits.fetch_or(1U), 0b1010U);
  EXPECT_EQ(bits.fetch_and(0b1001U), 0b1011U);
  EXPECT_EQ(bits.fetch_xor(1U), 0b1001U);
  EXPECT_EQ(bits.load(), 0b1000U);
  int slots[4] = {};
  ex::atomic<int*> p{slots};
  EXPECT_EQ(p.fetch_add(2), slots);
  EXPECT_EQ(p.load(), slots + 2);
  ex::atomic<bool> flag{false};
  ex::thread t([&] {
    flag.store(true);
    flag.notify_one();
  });
  flag.wait(false);
  t.join();
  EXPECT_TRUE(flag.load());
  ex::mutex m;
  { const std::lock_guard lock(m); }
  EXPECT_THROW(ex::check(false, "outside"), std::logic_error);
}

// A struct, as the library's ring positions: compared bytewise, in and out of a run.
TEST(Explore, AtomicOfAStruct) {
  struct alignas(8) place {  // lock-free (clang calls libatomic for an under-aligned one)
    std::uint32_t lap;
    std::uint32_t index;
  };
  ex::atomic<place> outside{place{1, 2}};
  place seen{1, 2};
  EXPECT_TRUE(outside.compare_exchange_strong(seen, place{3, 4}));
  EXPECT_EQ(outside.load().lap, 3U);
  const ex::result r = ex::explore({.strategy = ex::strategy::exhaustive}, [] {
    ex::atomic<place> p{place{0, 0}};
    in_threads(2, [&] {
      place old = p.load();
      while (!p.compare_exchange_weak(old, place{old.lap + 1, old.index + 2})) {
      }
    });
    ex::check(p.load().lap == 2 && p.load().index == 4, "a step was lost");
  });
  EXPECT_TRUE(ex::passed(r));
  EXPECT_TRUE(r.exhausted);
}

TEST(Explore, ABadReplayStringIsRejected) {
  for (const char* bad : {"pct:seed=1", "random", "pct:seed=x:d=3:k=1", "s:0.a", "what:seed=1"}) {
    EXPECT_THROW(ex::explore({.replay = bad}, fetch_add_body), std::invalid_argument) << bad;
  }
  // A schedule that does not fit the body: thread 2 at the first choice, in a body with one thread
  // besides the body's.
  const auto one_thread = [] {
    ex::atomic<int> x{0};
    ex::thread a([&] { x.store(1); });
    x.store(2);
    a.join();
  };
  EXPECT_TRUE(ex::failed_with(ex::explore({.replay = "s:2"}, one_thread), ex::failure_kind::nondeterminism));
}

TEST(Explore, TheResultPrintsItsReplayString) {
  const ex::result r = ex::explore({.strategy = ex::strategy::pct}, lost_update_body);
  ASSERT_FALSE(r.passed());
  std::ostringstream out;
  out << r;
  EXPECT_NE(out.str().find("replay with options.replay = \"pct:seed="), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("thread 1: load atomic#1"), std::string::npos) << out.str();
}

}  // namespace

// --- weak memory (options::weak_memory: x86-TSO store buffers) -----------------------------------

// Store buffering (Dekker's pattern): each thread stores its flag, then loads the other's. With
// release stores and acquire loads, both may read 0 (C++ allows it, x86 does it); weak memory
// finds that outcome, sequential consistency never shows it. `fenced`: a seq_cst fence between
// the store and the load forbids it.
template <bool Fenced>
void store_buffering_body() {
  ex::atomic<int> x{0};
  ex::atomic<int> y{0};
  int seen_by_a = -1;
  int seen_by_b = -1;
  ex::thread a([&] {
    x.store(1, std::memory_order_release);
    if constexpr (Fenced) ex::atomic_thread_fence(std::memory_order_seq_cst);
    seen_by_a = y.load(std::memory_order_acquire);
  });
  ex::thread b([&] {
    y.store(1, std::memory_order_release);
    if constexpr (Fenced) ex::atomic_thread_fence(std::memory_order_seq_cst);
    seen_by_b = x.load(std::memory_order_acquire);
  });
  a.join();
  b.join();
  ex::check(seen_by_a == 1 || seen_by_b == 1, "both threads missed the other's store");
}

TEST(ExploreWeakMemory, FindsStoreBufferingAndReplaysIt) {
  ex::options weak{.schedules = 1000, .weak_memory = true};
  const ex::result r = ex::explore(weak, store_buffering_body<false>);
  ASSERT_TRUE(ex::failed_with(r, ex::failure_kind::check));
  std::cout << "store buffering: PCT with weak memory found it in schedule " << r.failure->schedule_number
            << "\n";
  EXPECT_NE(r.failure->schedule.find(":w=1"), std::string::npos) << r.failure->schedule;
  const ex::result again = ex::explore({.replay = r.failure->schedule}, store_buffering_body<false>);
  ASSERT_TRUE(again.failure.has_value());
  EXPECT_EQ(again.failure->trace, r.failure->trace);
}

TEST(ExploreWeakMemory, SequentialConsistencyNeverShowsStoreBuffering) {
  EXPECT_TRUE(ex::passed(ex::explore({.schedules = 1000}, store_buffering_body<false>)));
  EXPECT_TRUE(ex::passed(
      ex::explore({.strategy = ex::strategy::random, .schedules = 1000}, store_buffering_body<false>)));
}

TEST(ExploreWeakMemory, ASeqCstFenceForbidsStoreBuffering) {
  EXPECT_TRUE(ex::passed(ex::explore({.schedules = 1000, .weak_memory = true}, store_buffering_body<true>)));
  EXPECT_TRUE(
      ex::passed(ex::explore({.strategy = ex::strategy::random, .schedules = 1000, .weak_memory = true},
                             store_buffering_body<true>)));
}

// Seq_cst stores or a read-modify-write instead of the fence forbid it as well.
TEST(ExploreWeakMemory, SeqCstStoresAndReadModifyWritesDrainTheBuffer) {
  const auto body = [](bool rmw) {
    ex::atomic<int> x{0};
    ex::atomic<int> y{0};
    int seen_by_a = -1;
    int seen_by_b = -1;
    ex::thread a([&] {
      if (rmw) {
        x.fetch_add(1, std::memory_order_relaxed);
      } else {
        x.store(1);
      }
      seen_by_a = y.load(std::memory_order_relaxed);
    });
    ex::thread b([&] {
      y.store(1);
      seen_by_b = x.load(std::memory_order_relaxed);
    });
    a.join();
    b.join();
    ex::check(seen_by_a == 1 || seen_by_b == 1, "both threads missed the other's store");
  };
  for (const bool rmw : {false, true}) {
    EXPECT_TRUE(ex::passed(ex::explore({.schedules = 1000, .weak_memory = true}, [&] { body(rmw); })));
  }
}

// Message passing: a release store of a flag after the data, an acquire load of the flag before
// the data. TSO keeps stores in order, so a reader that sees the flag sees the data; and a
// thread reads its own buffered stores.
TEST(ExploreWeakMemory, MessagePassingAndOwnStoresStayInOrder) {
  EXPECT_TRUE(ex::passed(ex::explore({.schedules = 1000, .weak_memory = true}, [] {
    ex::atomic<int> data{0};
    ex::atomic<bool> ready{false};
    ex::thread writer([&] {
      data.store(42, std::memory_order_relaxed);
      ready.store(true, std::memory_order_release);
      ex::check(data.load(std::memory_order_relaxed) == 42, "a thread missed its own store");
    });
    ex::thread reader([&] {
      if (ready.load(std::memory_order_acquire))
        ex::check(data.load(std::memory_order_relaxed) == 42, "the flag overtook the data");
    });
    writer.join();
    reader.join();
    ex::check(data.load() == 42 && ready.load(), "a store never became visible");
  })));
}
