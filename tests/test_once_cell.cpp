// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::once_cell: get() is null while the cell is empty and while it is being
// initialised, then the value; one value, constructed once in the cell and never moved (every
// caller and every form sees the same address); a failure (f throws, T's constructor throws, or
// f yields an error to get_or_try_init) leaves the cell empty, reaches its own caller only, and
// the next waiter runs its own f; set / try_insert against a running initialiser; take and
// into_inner; a cell constructed with a value; the wait forms; cancellation; misuse; "last one
// out"; and a bounded multi-threaded stress test.
#include "asyncband/once_cell.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>
#include <version>
#ifdef __cpp_lib_expected
#include <expected>
#endif

#include "asyncband/block_on.hpp"
#include "asyncband/init_result.hpp"
#include "asyncband/manual_reset_event.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/stop_token.hpp"
#include "support/awaited_twice.hpp"
#include "support/count_scope.hpp"
#include "support/destroyed_with_waiters.hpp"
#include "support/last_one_out.hpp"
#include "support/lifetime.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"
#include "support/wait_contract.hpp"

namespace {

using namespace asyncband_test;
using asyncband::block_on;
using asyncband::init_result;
using asyncband::manual_reset_event;
using asyncband::once_cell;
using asyncband::runtime::thread_pool;

/// Thrown by counted's constructor from a negative payload: a value constructor that throws.
struct bad_value {};

/// Thrown by an initialiser that fails; carries the id of the caller whose initialiser it was.
struct init_failure {
  int id;
};

/// The cell's value type: counts its constructions by kind and records where each object was
/// made (count_scope_of checks that every one is destroyed exactly once).
class counted {
 public:
  static inline std::atomic<long> constructed{0};
  static inline std::atomic<long> destroyed{0};
  static inline std::atomic<long> values{0};  // alive
  static inline std::atomic<long> misuse{0};  // destroyed or read after its destruction
  static inline std::atomic<long> copies{0};
  static inline std::atomic<long> moves{0};

  explicit counted(int v) : v_(v) {
    if (v < 0) throw bad_value{};
    born();
  }
  counted(const counted& other) : v_(other.value()) {
    copies.fetch_add(1);
    born();
  }
  counted(counted&& other) noexcept : v_(other.value()) {
    moves.fetch_add(1);
    born();
  }
  counted& operator=(const counted&) = delete;
  counted& operator=(counted&&) = delete;
  ~counted() {
    if (v_ == gone) misuse.fetch_add(1);
    v_ = gone;
    destroyed.fetch_add(1);
    values.fetch_sub(1);
  }

  [[nodiscard]] int value() const {
    if (v_ == gone) misuse.fetch_add(1);
    return v_;
  }

  /// How many objects were constructed at `where` since the last forget_addresses().
  static long made_at(const counted* where) {
    const std::lock_guard lock(mutex());
    return std::count(addresses().begin(), addresses().end(), where);
  }
  static void forget_addresses() {
    const std::lock_guard lock(mutex());
    addresses().clear();
  }

 private:
  static constexpr int gone = -1'000'000;
  void born() {
    constructed.fetch_add(1);
    values.fetch_add(1);
    const std::lock_guard lock(mutex());
    addresses().push_back(this);
  }
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<const counted*>& addresses() {
    static std::vector<const counted*> a;
    return a;
  }

  int v_;
};

using count_scope = count_scope_of<counted>;
using cell = once_cell<counted>;

/// Counts of counted's constructions, to compare before and after a step.
struct constructions {
  long all = counted::constructed.load();
  long copies = counted::copies.load();
  long moves = counted::moves.load();
};

/// A user's own expected-like type (has_value(), value(), error()): neither std::expected nor
/// asyncband's init_result.
template <class T, class E>
class outcome {
 public:
  static outcome success(T v) { return outcome(std::in_place_index<0>, std::move(v)); }
  static outcome failure(E e) { return outcome(std::in_place_index<1>, std::move(e)); }
  [[nodiscard]] bool has_value() const noexcept { return content_.index() == 0; }
  [[nodiscard]] T& value() { return std::get<0>(content_); }
  [[nodiscard]] E& error() { return std::get<1>(content_); }

 private:
  template <std::size_t I, class A>
  outcome(std::in_place_index_t<I> i, A&& a) : content_(i, std::forward<A>(a)) {}
  std::variant<T, E> content_;
};

using try_outcome = outcome<int, std::string>;

std::string error_of(int id) {
  return "error " + std::to_string(id);
}

/// How a scripted initialiser ends.
enum class ending {
  value,   ///< yields `value` (a negative one makes counted's constructor throw)
  throws,  ///< throws init_failure{id}
  error,   ///< yields an error (a try_ initialiser; an int-yielding one throws instead)
};

/// One caller's own initialiser, scripted: it records its run, waits for `hold` when `held`,
/// then ends as `how` says.
struct cell_script {
  int id = 0;
  int value = 0;
  ending how = ending::value;
  bool held = false;
  manual_reset_event hold;
  std::vector<int>* order = nullptr;
  int runs = 0;
};

template <class R>
task<R> scripted_init(cell_script& sc) {
  ++sc.runs;
  if (sc.order != nullptr) sc.order->push_back(sc.id);
  if (sc.held) co_await sc.hold.wait();
  if constexpr (std::is_same_v<R, int>) {
    if (sc.how != ending::value) throw init_failure{sc.id};
    co_return sc.value;
  } else {
    if (sc.how == ending::throws) throw init_failure{sc.id};
    if (sc.how == ending::error) co_return R::failure(error_of(sc.id));
    co_return R::success(sc.value);
  }
}

/// get_or_init's f: yields an int, which the cell's counted is constructed from.
auto init_of(cell_script& sc) {
  return [&sc] { return scripted_init<int>(sc); };
}
/// get_or_try_init's f: yields a try_outcome.
auto try_of(cell_script& sc) {
  return [&sc] { return scripted_init<try_outcome>(sc); };
}

/// A caller's (or an observer's) record: where its value was, or what failed.
struct cell_probe : probe {
  const counted* got = nullptr;
  std::optional<int> thrown;  // init_failure's id; -1: bad_value
  std::optional<std::string> error;

  void after_wait(const cell& /*unused*/) noexcept {}
  void after_wait(const cell& /*unused*/, const counted& v) noexcept { got = &v; }
};

enum class form { init, init_stoppable, try_init };

task<void> cell_caller(cell& c, cell_script& sc, cell_probe& p, form how, asyncband::stop_token token) {
  ++p.started;
  try {
    switch (how) {
      case form::init: {
        counted& v = co_await c.get_or_init(init_of(sc));
        p.got = &v;
        p.finish(wait_status::ok);
        break;
      }
      case form::init_stoppable: {
        const auto r = co_await c.get_or_init(init_of(sc), std::move(token));
        if (r.ok()) p.got = &*r;
        p.finish(r.status());
        break;
      }
      case form::try_init: {
        auto r = co_await c.get_or_try_init(try_of(sc));
        if (r.has_value()) {
          p.got = &r.value();
        } else {
          p.error = r.error();
        }
        p.finish(wait_status::ok);
        break;
      }
    }
  } catch (const init_failure& e) {
    p.thrown = e.id;
    ++p.resumed;
  } catch (const bad_value&) {
    p.thrown = -1;
    ++p.resumed;
  }
}

/// A cell, a test scheduler and N scripted callers (caller i: script i, value 10 + i, stop[i]);
/// the counting scope is first, so it checks the values after everything else is gone.
template <std::size_t N>
struct cell_stage {
  count_scope scope;
  test_scheduler s;
  cell c;
  std::vector<int> order;
  std::array<cell_script, N> sc;
  std::array<cell_probe, N> p;
  std::array<asyncband::stop_source, N> stop;

  cell_stage() {
    counted::forget_addresses();
    for (std::size_t i = 0; i < N; ++i) {
      sc[i].id = p[i].id = static_cast<int>(i);
      sc[i].value = 10 + static_cast<int>(i);
      sc[i].order = &order;
    }
  }
  void spawn(std::size_t i, form how) { s.spawn(cell_caller(c, sc[i], p[i], how, stop[i].get_token())); }
  task<void> owned(std::size_t i, form how) {
    auto t = cell_caller(c, sc[i], p[i], how, stop[i].get_token());
    start_on(s, t);
    return t;
  }
  /// Sets script i up to fail as `how` says (a throwing value constructor: ending::value, -1).
  void fail(std::size_t i, ending how) {
    sc[i].how = how;
    if (how == ending::value) sc[i].value = -1;
  }
};

/// The caller got the cell's value, which came from caller `from`'s f.
template <std::size_t N>
void expect_value(const cell_stage<N>& st, std::size_t i, int from) {
  const cell_probe& p = st.p[i];
  EXPECT_EQ(p.resumed, 1) << "caller " << i;
  EXPECT_EQ(p.status, wait_status::ok) << "caller " << i;
  EXPECT_FALSE(p.thrown.has_value()) << "caller " << i;
  EXPECT_FALSE(p.error.has_value()) << "caller " << i;
  ASSERT_NE(st.c.get(), nullptr);
  EXPECT_EQ(p.got, st.c.get()) << "caller " << i;
  EXPECT_EQ(st.c.get()->value(), 10 + from);
}

void expect_waiting(const cell_probe& p) {
  EXPECT_EQ(p.started, 1) << "caller " << p.id;
  EXPECT_EQ(p.resumed, 0) << "caller " << p.id;
}

using order = std::vector<int>;

const auto set_value = [](cell& c) { (void)c.set(counted(1)); };

// ---------------------------------------------------------------------------------------------
// The value

TEST(OnceCell, GetIsNullWhileEmptyAndDuringInitialisationThenTheValue) {
  cell_stage<2> st;
  EXPECT_EQ(st.c.get(), nullptr);
  EXPECT_FALSE(st.c.is_initialized());
  st.sc[0].held = true;
  st.spawn(0, form::init);
  st.s.run();
  EXPECT_EQ(st.c.get(), nullptr);  // initialising
  EXPECT_EQ(std::as_const(st.c).get(), nullptr);
  EXPECT_FALSE(st.c.is_initialized());
  st.sc[0].hold.set();
  st.s.run();
  expect_value(st, 0, 0);
  EXPECT_TRUE(st.c.is_initialized());
  EXPECT_EQ(std::as_const(st.c).get(), st.c.get());
}

// Regression: the inherited wait_blocking() returned `auto`, so it yielded a copy of the cell's
// value instead of the T& its other forms yield (and did not compile for a move-only T).
TEST(OnceCell, WaitBlockingYieldsTheValueItselfNotACopy) {
  const count_scope scope;
  cell c;
  EXPECT_FALSE(c.set(counted(3)).has_value());
  const constructions before;
  const counted& v = c.wait_blocking();
  EXPECT_EQ(&v, c.get());
  EXPECT_EQ(counted::copies.load(), before.copies);
}

TEST(OnceCell, EveryCallerAndEveryFormGetsTheSameValueAtTheSameAddress) {
  cell_stage<3> st;
  st.sc[0].held = true;
  st.spawn(0, form::init);
  st.spawn(1, form::init_stoppable);
  st.spawn(2, form::try_init);
  std::array<cell_probe, 2> observers;
  asyncband::stop_source never;
  spawn_alternating_waiters(st.s, st.c, observers, never.get_token());
  st.s.run();
  const counted* blocked_got = nullptr;
  int runs = 0;
  const auto never_runs = [&runs] {
    ++runs;
    return 99;
  };
  std::latch parked(1);
  std::thread blocked([&] {
    const thread_hook hook(test_point::before_arm, [&parked] { parked.count_down(); });
    blocked_got = &st.c.get_or_init_blocking(never_runs);
  });
  parked.wait();
  st.sc[0].hold.set();
  st.s.run();  // completes, and unparks the blocked thread
  blocked.join();
  for (std::size_t i = 0; i < 3; ++i) expect_value(st, i, 0);
  const counted* const at = st.c.get();
  for (const auto& o : observers) EXPECT_EQ(o.got, at);
  EXPECT_EQ(blocked_got, at);

  // Every form on the initialised cell: nothing runs, nothing is made, the same address.
  const constructions before;
  asyncband::stop_source src;
  EXPECT_EQ(&block_on(st.c.get_or_init(never_runs)), at);
  EXPECT_EQ(&*block_on(st.c.get_or_init(never_runs, src.get_token())), at);
  EXPECT_EQ(&block_on(st.c.get_or_try_init(try_of(st.sc[1]))).value(), at);
  EXPECT_EQ(&st.c.get_or_init_blocking(never_runs), at);
  EXPECT_EQ(&*st.c.get_or_init_blocking(never_runs, src.get_token()), at);
  EXPECT_EQ(&*st.c.get_or_init_timeout(never_runs, 0ms), at);
  EXPECT_EQ(&st.c.get_or_try_init_blocking(try_of(st.sc[1])).value(), at);
  EXPECT_EQ(&st.c.get_or_try_init_blocking(try_of(st.sc[1]), src.get_token())->value(), at);
  EXPECT_EQ(&st.c.get_or_try_init_timeout(try_of(st.sc[1]), 0ms)->value(), at);
  EXPECT_EQ(&block_on(st.c.wait()), at);
  EXPECT_EQ(&*block_on(st.c.wait(src.get_token())), at);
  const counted& waited = st.c.wait_blocking();
  EXPECT_EQ(&waited, at);
  EXPECT_EQ(&*st.c.wait_blocking(src.get_token()), at);
  EXPECT_EQ(&*st.c.wait_timeout(0ms), at);
  EXPECT_EQ(st.c.get(), at);
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(st.sc[1].runs, 0);
  EXPECT_EQ(counted::constructed.load(), before.all);
}

TEST(OnceCell, TheValueIsConstructedOnceInTheCellAndNeverMovedAfterwards) {
  const auto check = [](cell& c, const constructions& before, bool from_payload) {
    ASSERT_NE(c.get(), nullptr);
    EXPECT_EQ(counted::made_at(c.get()), 1) << "one construction in the cell";
    if (from_payload) {  // T made from f's int: that one construction is all there is
      EXPECT_EQ(counted::constructed.load() - before.all, 1);
      EXPECT_EQ(counted::copies.load(), before.copies);
      EXPECT_EQ(counted::moves.load(), before.moves);
    }
    const constructions after_init;
    test_scheduler s;
    cell_probe other;
    s.spawn(plain_waiter(c, other));
    s.run();
    (void)c.get_or_init_blocking([] { return counted(5); });
    (void)c.wait_blocking();
    EXPECT_EQ(other.got, c.get());
    EXPECT_EQ(counted::constructed.load(), after_init.all) << "never moved nor copied once in the cell";
  };
  const count_scope scope;
  {
    counted::forget_addresses();
    cell c;
    const constructions before;
    (void)block_on(c.get_or_init([]() -> task<int> { co_return 3; }));
    check(c, before, true);
  }
  {
    counted::forget_addresses();
    cell c;
    const constructions before;
    (void)c.get_or_init_blocking([] { return 3; });
    check(c, before, true);
  }
  {
    counted::forget_addresses();
    cell c;
    const constructions before;
    (void)block_on(c.get_or_init([]() -> task<counted> { co_return counted(3); }));
    check(c, before, false);
  }
  {
    counted::forget_addresses();
    cell c;
    const constructions before;
    (void)block_on(c.get_or_init([] { return counted(3); }));  // a plain function yielding T
    check(c, before, false);
  }
  {
    counted::forget_addresses();
    const constructions before;
    cell c(std::in_place, 3);
    check(c, before, true);
  }
}

TEST(OnceCell, ACellConstructedWithAValueHoldsIt) {
  const count_scope scope;
  cell c(counted(6));
  ASSERT_NE(c.get(), nullptr);
  EXPECT_TRUE(c.is_initialized());
  EXPECT_EQ(c.get()->value(), 6);
  int runs = 0;
  EXPECT_EQ(&c.get_or_init_blocking([&runs] { return ++runs; }), c.get());
  test_scheduler s;
  cell_script sc;
  cell_probe p;
  s.spawn(cell_caller(c, sc, p, form::init, {}));
  EXPECT_EQ(s.run(), 1U);  // never suspended
  EXPECT_EQ(p.got, c.get());
  const counted& waited = c.wait_blocking();
  EXPECT_EQ(&waited, c.get());
  const auto back = c.set(counted(7));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->value(), 7);
  EXPECT_EQ(c.get()->value(), 6);
  EXPECT_EQ(runs + sc.runs, 0);
}

// ---------------------------------------------------------------------------------------------
// Failures: the cell stays empty, the failure reaches its own caller, the next waiter runs its f

TEST(OnceCell, AFailedInitialisationLeavesTheCellEmptyAndTheNextWaiterRunsItsOwn) {
  struct failure_kind {
    const char* name;
    ending how;
    form caller_form;
  };
  for (const failure_kind k : {failure_kind{"f throws", ending::throws, form::init},
                               failure_kind{"T's constructor throws", ending::value, form::init},
                               failure_kind{"f yields an error", ending::error, form::try_init}}) {
    SCOPED_TRACE(k.name);
    cell_stage<4> st;
    st.sc[0].held = st.sc[1].held = true;
    st.fail(0, k.how);
    st.spawn(0, k.caller_form);
    st.spawn(1, form::init);
    st.spawn(2, form::try_init);
    st.spawn(3, form::init_stoppable);
    cell_probe observer;
    st.s.spawn(plain_waiter(st.c, observer));
    st.s.run();
    const constructions before;
    st.sc[0].hold.set();
    st.s.run();
    const cell_probe& p0 = st.p[0];
    EXPECT_EQ(p0.resumed, 1);
    EXPECT_EQ(p0.got, nullptr);
    if (k.how == ending::error) {
      EXPECT_EQ(p0.error, error_of(0));  // as a value, to this caller only
    } else {
      EXPECT_EQ(p0.thrown, k.how == ending::throws ? 0 : -1);
    }
    EXPECT_EQ(st.c.get(), nullptr);
    EXPECT_EQ(counted::constructed.load(), before.all);
    EXPECT_EQ(st.order, (order{0, 1}));  // the oldest waiter runs its own f, and only it
    for (std::size_t i = 1; i < 4; ++i) expect_waiting(st.p[i]);
    expect_waiting(observer);

    st.sc[1].hold.set();
    st.s.run();
    for (std::size_t i = 1; i < 4; ++i) expect_value(st, i, 1);
    EXPECT_EQ(observer.got, st.c.get());
    EXPECT_EQ(st.order, (order{0, 1}));
  }
}

TEST(OnceCell, EveryTryErrorReachesOnlyItsOwnCallerAndTheCellStaysEmpty) {
  cell_stage<3> st;
  st.sc[0].held = true;
  for (std::size_t i = 0; i < 3; ++i) {
    st.fail(i, ending::error);
    st.spawn(i, form::try_init);
  }
  cell_probe observer;
  st.s.spawn(plain_waiter(st.c, observer));
  st.s.run();
  st.sc[0].hold.set();
  st.s.run();
  EXPECT_EQ(st.order, (order{0, 1, 2}));
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(st.p[i].resumed, 1);
    EXPECT_EQ(st.p[i].error, error_of(static_cast<int>(i)));
  }
  EXPECT_EQ(st.c.get(), nullptr);
  expect_waiting(observer);  // not ended by errors; a set() ends it
  EXPECT_FALSE(st.c.set(counted(4)).has_value());
  st.s.run();
  EXPECT_EQ(observer.got, st.c.get());
}

TEST(OnceCell, GetOrTryInitTakesAnyExpectedLikeValue) {
  const count_scope scope;
  using as_init_result = init_result<int, std::string>;
  cell by_init_result;
  auto failed = by_init_result.get_or_try_init_blocking([] { return as_init_result::with_error("no"); });
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error(), "no");
  EXPECT_EQ(by_init_result.get(), nullptr);
  auto stored = by_init_result.get_or_try_init_blocking([] { return as_init_result::with_value(4); });
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(&stored.value(), by_init_result.get());
  EXPECT_EQ(stored->value(), 4);
#ifdef __cpp_lib_expected
  cell by_expected;
  using expected = std::expected<int, std::string>;
  EXPECT_EQ(by_expected.get_or_try_init_blocking([] { return expected(std::unexpect, "no"); }).error(), "no");
  EXPECT_EQ(by_expected.get_or_try_init_blocking([] { return expected(5); })->value(), 5);
#endif
}

TEST(OnceCell, BlockingFailuresLeaveTheCellEmpty) {
  const count_scope scope;
  cell c;
  EXPECT_THROW((void)c.get_or_init_blocking([] { return -1; }), bad_value);
  EXPECT_THROW((void)c.get_or_init_blocking([]() -> int { throw init_failure{1}; }), init_failure);
  asyncband::stop_source src;
  EXPECT_THROW((void)c.get_or_init_blocking([]() -> task<int> { co_return -1; }, src.get_token()), bad_value);
  EXPECT_EQ(c.get(), nullptr);
  EXPECT_EQ(scope.values(), 0);  // nothing was left half-made
  EXPECT_EQ(c.get_or_init_blocking([] { return 2; }).value(), 2);
}

// ---------------------------------------------------------------------------------------------
// set and try_insert

TEST(OnceCell, SetWhileAnInitialiserRunsHandsTheValueBack) {
  cell_stage<1> st;
  st.sc[0].held = true;
  st.spawn(0, form::init);
  st.s.run();
  const auto back = st.c.set(counted(7));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->value(), 7);
  auto tried = st.c.try_insert(counted(8));
  EXPECT_FALSE(tried.inserted());
  EXPECT_EQ(tried.value, nullptr);  // nothing there yet
  ASSERT_TRUE(tried.rejected.has_value());
  EXPECT_EQ(tried.rejected->value(), 8);
  EXPECT_EQ(st.c.get(), nullptr);

  st.sc[0].hold.set();
  st.s.run();
  expect_value(st, 0, 0);  // f's value
  const auto late = st.c.set(counted(9));
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->value(), 9);
  EXPECT_EQ(st.c.get()->value(), 10);
}

TEST(OnceCell, SetFirstMakesEveryCallYieldItWithoutRunning) {
  cell_stage<3> st;
  EXPECT_FALSE(st.c.set(counted(7)).has_value());
  ASSERT_NE(st.c.get(), nullptr);
  EXPECT_EQ(st.c.get()->value(), 7);
  st.spawn(0, form::init);
  st.spawn(1, form::init_stoppable);
  st.spawn(2, form::try_init);
  EXPECT_EQ(st.s.run(), 3U);  // none suspended
  for (const auto& p : st.p) EXPECT_EQ(p.got, st.c.get());
  EXPECT_TRUE(st.order.empty());
}

TEST(OnceCell, SetCompletesTheWaitsOnAnEmptyCell) {
  cell_stage<1> st;
  std::array<cell_probe, 4> observers;
  asyncband::stop_source never;
  spawn_alternating_waiters(st.s, st.c, observers, never.get_token());
  st.s.run();
  for (const auto& o : observers) expect_waiting(o);
  EXPECT_FALSE(st.c.set(counted(3)).has_value());
  EXPECT_EQ(st.s.ready_count(), observers.size());  // posted, none run inline
  st.s.run();
  for (const auto& o : observers) {
    EXPECT_EQ(o.status, wait_status::ok);
    EXPECT_EQ(o.got, st.c.get());
  }
}

TEST(OnceCell, TryInsertReportsWhereTheValueIs) {
  const count_scope scope;
  cell c;
  auto first = c.try_insert(counted(1));
  EXPECT_TRUE(first.inserted());
  EXPECT_EQ(first.value, c.get());
  EXPECT_FALSE(first.rejected.has_value());
  auto second = c.try_insert(counted(2));
  EXPECT_FALSE(second.inserted());
  EXPECT_EQ(second.value, c.get());  // the value already there
  ASSERT_TRUE(second.rejected.has_value());
  EXPECT_EQ(second.rejected->value(), 2);
  EXPECT_EQ(c.get()->value(), 1);
}

// ---------------------------------------------------------------------------------------------
// take and into_inner

// The empty cells live on the heap: g++ 12 -O2 reports a false -Wmaybe-uninitialized for take()
// on an empty cell whose construction it sees in the same function (the move out of the value
// sits behind the atomic "completed" check, which it cannot follow).
TEST(OnceCell, TakeAndIntoInnerLeaveTheCellEmpty) {
  const count_scope scope;
  const auto empty = std::make_unique<cell>();
  EXPECT_FALSE(empty->take().has_value());
  EXPECT_FALSE(std::move(*empty).into_inner().has_value());
  cell c;
  EXPECT_FALSE(c.set(counted(3)).has_value());
  const auto taken = c.take();
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->value(), 3);
  EXPECT_EQ(c.get(), nullptr);
  EXPECT_FALSE(c.is_initialized());
  EXPECT_EQ(c.get_or_init_blocking([] { return 4; }).value(), 4);  // empty again: a call runs
  const auto inner = std::move(c).into_inner();
  ASSERT_TRUE(inner.has_value());
  EXPECT_EQ(inner->value(), 4);
}

// ---------------------------------------------------------------------------------------------
// The wait forms: the contract shared with the events, completed by set()

TEST(OnceCellWait, StopWhileSuspendedCancelsAndResumesOnce) {
  const count_scope scope;
  cell c;
  const auto probes = stop_while_suspended_cancels_and_resumes_once<cell_probe>(c, set_value);
  EXPECT_EQ(probes.cancelled.got, nullptr);
  EXPECT_EQ(probes.other.got, c.get());
}

TEST(OnceCellWait, CompletionAtPublishedOrBeforeArmEndsTheWaitWithoutSuspending) {
  const count_scope scope;
  wake_before_suspension_completes_without_suspending([] { return cell(); }, set_value,
                                                      [](cell& c) { EXPECT_TRUE(c.is_initialized()); });
}

TEST(OnceCellWait, StopAtClaimedForWakeIsOk) {
  const count_scope scope;
  cell c;
  stop_at_claimed_for_wake(c, set_value, wait_status::ok);
}

TEST(OnceCellWait, DestroyingSuspendedWaitersUnlinksThem) {
  const count_scope scope;
  cell c;
  destroying_suspended_waiters_unlinks_them(c, set_value);
}

TEST(OnceCellWait, BlockingFormsYieldTheValue) {
  const count_scope scope;
  cell c;
  EXPECT_TRUE(c.wait_timeout(0ms).timed_out());
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(c.wait_blocking(stopped.get_token()).cancelled());
  const counted* got = nullptr;
  std::thread waiter([&] {
    const counted& v = c.wait_blocking();
    got = &v;
  });
  set_value(c);
  waiter.join();
  EXPECT_EQ(got, c.get());
  cell by_block_on;
  block_on_waits_complete_when_woken_by_another_thread<cell_probe>(by_block_on, set_value);
  cell cancelled;
  blocking_wait_is_cancelled_by_another_thread(cancelled);
}

// ---------------------------------------------------------------------------------------------
// Cancellation and destroyed callers

TEST(OnceCell, GetOrInitWithAStopToken) {
  cell_stage<4> st;
  st.stop[0].request_stop();
  st.spawn(0, form::init_stoppable);
  EXPECT_EQ(st.s.run(), 1U);
  EXPECT_EQ(st.p[0].status, wait_status::cancelled);

  st.sc[1].held = true;
  st.spawn(1, form::init);
  st.spawn(2, form::init_stoppable);
  st.spawn(3, form::try_init);
  st.s.run();
  st.stop[2].request_stop();
  st.s.run();
  EXPECT_EQ(st.p[2].resumed, 1);
  EXPECT_EQ(st.p[2].status, wait_status::cancelled);
  EXPECT_EQ(st.p[2].got, nullptr);
  st.sc[1].hold.set();
  st.s.run();
  expect_value(st, 1, 1);
  expect_value(st, 3, 1);
  EXPECT_EQ(st.order, order{1});
}

// The failing run hands the run to caller 1, whose stop is requested right then: it reports
// cancelled without running, and the run passes on to caller 2.
TEST(OnceCell, AStopAfterTheRunCameToTheCallerPassesTheRunOn) {
  cell_stage<3> st;
  st.sc[0].held = true;
  st.fail(0, ending::error);
  st.spawn(0, form::try_init);
  st.spawn(1, form::init_stoppable);
  st.spawn(2, form::try_init);
  st.s.run();
  st.sc[0].hold.set();  // f0 goes on at the next step; its error is the next wake-up
  st.s.at(test_point::claimed_for_wake, [&st] { st.stop[1].request_stop(); });
  st.s.run();
  EXPECT_EQ(st.s.pending_actions(), 0U);
  EXPECT_EQ(st.p[0].error, error_of(0));
  EXPECT_EQ(st.p[1].status, wait_status::cancelled);
  EXPECT_EQ(st.sc[1].runs, 0);
  expect_value(st, 2, 2);
  EXPECT_EQ(st.order, (order{0, 2}));
}

// Regression (as for once): a stop requested after the completion claimed a cancellable
// get_or_init comes too late; it yields the value, not cancelled.
TEST(OnceCell, AStopAfterTheCompletionClaimedTheCallerYieldsTheValue) {
  cell_stage<2> st;
  st.sc[0].held = true;
  st.spawn(0, form::init);
  st.spawn(1, form::init_stoppable);
  st.s.run();
  st.sc[0].hold.set();
  st.s.at(test_point::claimed_for_wake, [&st] { st.stop[1].request_stop(); });
  st.s.run();
  EXPECT_EQ(st.s.pending_actions(), 0U);
  expect_value(st, 0, 0);
  expect_value(st, 1, 0);
}

TEST(OnceCell, DestroyingTheInitialisingCallerPassesTheRunOnAndMakesNothing) {
  cell_stage<2> st;
  st.sc[0].held = true;
  auto doomed = st.owned(0, form::init);
  st.spawn(1, form::try_init);
  st.s.run();
  const constructions before;
  doomed = {};
  EXPECT_EQ(st.c.get(), nullptr);
  EXPECT_EQ(st.s.ready_count(), 1U);
  st.s.run();
  expect_value(st, 1, 1);
  EXPECT_EQ(st.p[0].resumed, 0);
  EXPECT_EQ(counted::constructed.load() - before.all, 1);
  EXPECT_EQ(st.order, (order{0, 1}));
}

// ---------------------------------------------------------------------------------------------
// Blocking twins

TEST(OnceCell, TheTimeoutAndStopFormsEndWhileAnotherThreadInitialises) {
  const count_scope scope;
  cell c;
  std::latch running(1);
  std::latch proceed(1);
  std::thread initialiser([&] {
    (void)c.get_or_init_blocking([&] {
      running.count_down();
      proceed.wait();
      return 1;
    });
  });
  running.wait();
  int runs = 0;
  const auto mine = [&runs] { return ++runs; };
  EXPECT_TRUE(c.get_or_init_timeout(mine, 1ms).timed_out());
  EXPECT_TRUE(c.get_or_init_timeout(mine, 0ms).timed_out());
  EXPECT_TRUE(
      c.get_or_try_init_timeout([] { return init_result<int, int>::with_value(2); }, 0ms).timed_out());
  asyncband::stop_source src;
  std::thread stopper([&src] { src.request_stop(); });
  EXPECT_TRUE(c.get_or_init_blocking(mine, src.get_token()).cancelled());  // before or while waiting
  stopper.join();
  proceed.count_down();
  initialiser.join();
  const auto done = c.get_or_init_timeout(mine, 0ms);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(&*done, c.get());
  EXPECT_EQ(done->value(), 1);
  EXPECT_EQ(runs, 0);
}

// ---------------------------------------------------------------------------------------------
// Misuse

// A get_or_try_init awaiter waited, ran its own f when the run came to it, and got its error:
// awaiting it again (the cell is still empty, so it would suspend) throws std::logic_error.
task<void> hold_the_run_then_fail(cell& c, cell_script& sc) {
  const auto r = co_await c.get_or_try_init(try_of(sc));
  EXPECT_FALSE(r.has_value());
}

TEST(OnceCell, AwaitingATryInitAgainAfterItSuspendedThrows) {
  const count_scope scope;
  cell c;
  cell_script holder;
  holder.held = true;
  holder.how = ending::error;
  const auto holding = hold_the_run_then_fail(c, holder);
  holding.handle().resume();  // no scheduler: its f waits for `hold`, holding the run
  cell_script mine;
  mine.how = ending::error;
  expect_awaiting_again_throws_logic_error([&] { return c.get_or_try_init(try_of(mine)); },
                                           [&holder] { holder.hold.set(); });
  EXPECT_TRUE(holding.done());
  EXPECT_EQ(mine.runs, 1);
  EXPECT_EQ(c.get(), nullptr);
}

TEST(OnceCellDeathTest, DestroyingACellWithAPendingWaitAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto wait_on = [](once_cell<int>& c) -> task<void> { (void)co_await c.wait(); };
  EXPECT_DEATH(destroy_while_waiting(std::make_unique<once_cell<int>>(), wait_on),
               "asyncband::once_cell destroyed with pending calls");
}

// ---------------------------------------------------------------------------------------------
// "Last one out": a waiter that sees the value may destroy the cell at once, while the call
// that stored it (set, or the initialising run) is still returning.

using text_cell = once_cell<std::string>;

TEST(OnceCellLifetime, TheWaiterMayDestroyTheCellWhileTheStoringCallReturns) {
  const auto make = [] { return std::make_unique<text_cell>(); };
  const auto wait = [](text_cell& c) { EXPECT_EQ(c.wait_blocking(), "stored"); };
  waiter_destroys_while_the_waker_returns(
      make, [](text_cell& c) { EXPECT_FALSE(c.set("stored").has_value()); }, wait);
  waiter_destroys_while_the_waker_returns(
      make, [](text_cell& c) { (void)c.get_or_init_blocking([] { return "stored"; }); }, wait);
}

struct cell_world {
  text_cell c;
};

/// The completing side: a caller holding the cell's run (its f waits for `release`), and how
/// that run will end.
struct cell_waker : lifetime::waker_base {
  manual_reset_event release;
  ending how = ending::value;
  task<void> runner;
};

task<void> held_cell_run(text_cell& c, cell_waker& k) {
  try {
    (void)co_await c.get_or_try_init([&k]() -> task<outcome<std::string, int>> {
      co_await k.release.wait();
      if (k.how == ending::throws) throw init_failure{0};
      if (k.how == ending::error) co_return outcome<std::string, int>::failure(0);
      co_return outcome<std::string, int>::success("held");
    });
  } catch (const init_failure&) {
  }
}

/// Setup: a caller with no scheduler takes the cell's run and holds it.
struct hold_the_cell_run {
  ending how = ending::value;
  void operator()(cell_world& w, cell_waker& k) const {
    k.how = how;
    k.runner = held_cell_run(w.c, k);
    k.runner.handle().resume();
  }
};

std::vector<lifetime::row> cell_rows() {
  using lifetime::coroutine_row;
  using W = cell_world;
  using K = cell_waker;
  using asyncband::stop_token;
  const auto set = [](W* w, K& /*unused*/) { (void)w->c.set("set"); };
  const auto release = [](W* /*unused*/, K& k) { k.release.set(); };
  const auto wait = [](W& w, stop_token) { return w.c.wait(); };
  const auto wait_stoppable = [](W& w, stop_token t) { return w.c.wait(std::move(t)); };
  const auto init = [](W& w, stop_token) { return w.c.get_or_init([] { return std::string("mine"); }); };
  const auto init_stoppable = [](W& w, stop_token t) {
    return w.c.get_or_init([] { return std::string("mine"); }, std::move(t));
  };
  std::vector<lifetime::row> rows;
  const lifetime::no_setup none;
  rows.push_back(coroutine_row<W, K>("once_cell_set_completes_wait", "ok", none, wait, set));
  rows.push_back(
      coroutine_row<W, K>("once_cell_set_completes_wait_cancellable", "ok", none, wait_stoppable, set));
  rows.push_back(
      coroutine_row<W, K>("once_cell_run_completes_get_or_init", "ok", hold_the_cell_run{}, init, release));
  rows.push_back(coroutine_row<W, K>("once_cell_run_completes_get_or_init_cancellable", "ok",
                                     hold_the_cell_run{}, init_stoppable, release));
  rows.push_back(coroutine_row<W, K>("once_cell_error_hands_the_waiter_its_run", "ok",
                                     hold_the_cell_run{ending::error}, init, release));
  rows.push_back(coroutine_row<W, K>("once_cell_exception_hands_the_waiter_its_run", "ok",
                                     hold_the_cell_run{ending::throws}, init, release));
  rows.push_back(lifetime::crowd_row<W, K>("once_cell_set_completes_crowd", 20, "ok", none, wait_stoppable,
                                           wait, [set](W* w, K& k, asyncband::stop_source&) { set(w, k); }));
  rows.push_back(lifetime::crowd_row<W, K>(
      "once_cell_run_completes_crowd", 20, "ok", hold_the_cell_run{}, init_stoppable, wait,
      [release](W* w, K& k, asyncband::stop_source&) { release(w, k); }));
  rows.push_back(lifetime::thread_row<W, K>(
      "once_cell_set_completes_blocked_wait", "ok", none,
      [](W& w, stop_token t) { return w.c.wait_blocking(std::move(t)); }, set));
  rows.push_back(lifetime::thread_row<W, K>(
      "once_cell_run_completes_blocked_get_or_init", "ok", hold_the_cell_run{},
      [](W& w, stop_token t) {
        return w.c.get_or_init_blocking([] { return std::string("mine"); }, std::move(t));
      },
      release));
  return rows;
}

class once_cell_lifetime : public testing::TestWithParam<lifetime::row> {};

TEST_P(once_cell_lifetime, WaiterResumedInlineDestroysEverything) {
  const lifetime::row& r = GetParam();
  const lifetime::watchdog guard(r.name, std::chrono::seconds(30));
  r.body();
}

INSTANTIATE_TEST_SUITE_P(test_once_cell, once_cell_lifetime, testing::ValuesIn(cell_rows()),
                         [](const testing::TestParamInfo<lifetime::row>& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// Stress: per round, pool tasks and plain threads initialise one cell with every form (some
// cancellably, a stop requested mid-round in some rounds; initialisers that hop threads and
// throw or yield an error at random) while a thread set()s it and two pool tasks wait().
// Invariants: never two initialisers at a time; exactly one value stored (by an f or by set);
// every ok caller got the stored value, at the cell's one address; every other caller got its
// own exception or error, or was cancelled (only with a token).

/// The stress's value: made from the winner's id, with memory of its own (TSan sees its writes).
struct stress_value {
  int winner;
  std::string text;
  explicit stress_value(int w) : winner(w), text("value of " + std::to_string(w)) {}
};

constexpr int stress_pool_callers = 4;  // caller 0: never fails, never cancelled
constexpr int stress_thread_callers = 2;
constexpr int stress_callers = stress_pool_callers + stress_thread_callers;
constexpr int stress_setter = stress_callers;  // its id
constexpr int stress_observers = 2;

struct cell_stress_round {
  once_cell<stress_value> c;
  std::uint32_t failing;  // caller i's f fails when bit i is set: throws if i is odd, else an error
  std::atomic<int> active{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> runs{0};
  std::atomic<int> stored{0};  // values stored: by an f, or by set
  std::atomic<int> winner{-1};
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};  // own exception or own error
  std::atomic<int> cancelled{0};
  std::atomic<int> bad{0};
  asyncband::stop_source stop;
  wait_tally waits;
  completion finished;

  cell_stress_round(std::uint32_t failing_mask, int participants)
      : failing(failing_mask & ~1U), finished(participants) {}

  [[nodiscard]] bool fails(int i) const { return ((failing >> i) & 1U) != 0; }
  void enter() {
    if (active.fetch_add(1) != 0) overlaps.fetch_add(1);
    runs.fetch_add(1);
  }
  /// The end of caller i's run: what its f yields (throws for an odd failing caller).
  outcome<int, int> leave(int i) {
    active.fetch_sub(1);
    if (!fails(i)) {
      winner.store(i);
      stored.fetch_add(1);
      return outcome<int, int>::success(i);
    }
    if (i % 2 == 1) throw init_failure{i};
    return outcome<int, int>::failure(i);
  }
  auto hopping(thread_pool& pool, int i) {
    return [this, &pool, i]() -> task<outcome<int, int>> {
      enter();
      co_await pool.schedule();
      co_return leave(i);
    };
  }
  auto plain(int i) {
    return [this, i] {
      enter();
      return leave(i);
    };
  }
  /// For get_or_init: the winner's id, or an exception (an error becomes one).
  int leave_init(int i) {
    auto r = leave(i);
    if (!r.has_value()) throw init_failure{r.error()};
    return r.value();
  }
  auto hopping_init(thread_pool& pool, int i) {
    return [this, &pool, i]() -> task<int> {
      enter();
      co_await pool.schedule();
      co_return leave_init(i);
    };
  }
  auto plain_init(int i) {
    return [this, i] {
      enter();
      return leave_init(i);
    };
  }
  [[nodiscard]] bool holds(const stress_value& v) const {
    return &v == c.get() && v.text == "value of " + std::to_string(v.winner);
  }
  void got(const stress_value& v) {
    ok.fetch_add(1);
    if (!holds(v)) bad.fetch_add(1);
  }
  void returned_error(int i, int error) { (error == i ? failed : bad).fetch_add(1); }
  void cancelled_one(bool stoppable) { (stoppable ? cancelled : bad).fetch_add(1); }
  void record(wait_status st) {  // an observer's (stress_waiter)
    waits.record(st, [this] { return c.get() != nullptr && holds(*c.get()); });
  }
};

task<void> stress_pool_caller(cell_stress_round& r, thread_pool& pool, int i) {
  try {
    switch (i) {
      case 0:
        r.got(co_await r.c.get_or_init(r.hopping_init(pool, 0)));
        break;
      case 1: {
        const auto res = co_await r.c.get_or_init(r.hopping_init(pool, 1), r.stop.get_token());
        if (res.ok()) {
          r.got(*res);
        } else {
          r.cancelled_one(true);
        }
        break;
      }
      case 2: {
        const auto res = co_await r.c.get_or_try_init(r.hopping(pool, 2));
        if (res.has_value()) {
          r.got(res.value());
        } else {
          r.returned_error(2, res.error());
        }
        break;
      }
      default: {
        const auto res = co_await r.c.get_or_try_init(r.plain(i), r.stop.get_token());
        if (!res.ok()) {
          r.cancelled_one(true);
        } else if (res->has_value()) {
          r.got(res->value());
        } else {
          r.returned_error(i, res->error());
        }
      }
    }
  } catch (const init_failure& e) {
    r.returned_error(i, e.id);
  }
  r.finished.done();
}

TEST(OnceCellStress, OneInitialiserAtATimeOneValueEveryCallerGetsItOrItsOwnFailure) {
  thread_pool pool(2);
  stress_totals totals;
  int failed = 0;
  const int rounds = repeat_for(300, 1s, [&](int round) {
    std::minstd_rand rng(static_cast<std::uint32_t>(round) + 1);
    const bool cancel_this_round = round % 3 == 0;
    const int participants = stress_callers + stress_observers + 1 + (cancel_this_round ? 1 : 0);
    auto r = std::make_unique<cell_stress_round>(static_cast<std::uint32_t>(rng()), participants);
    for (int i = 1; i < stress_pool_callers; ++i) {  // caller 0 comes last: the others' runs may fail
      asyncband::runtime::spawn(pool.ref(), stress_pool_caller(*r, pool, i));
    }
    for (int i = 0; i < stress_observers; ++i) {
      asyncband::runtime::spawn(pool.ref(), stress_waiter(*r, r->c, i == 1));
    }
    std::vector<std::thread> threads;
    threads.emplace_back([&r, i = stress_pool_callers] {
      try {
        r->got(r->c.get_or_init_blocking(r->plain_init(i)));
      } catch (const init_failure& e) {
        r->returned_error(i, e.id);
      }
      r->finished.done();
    });
    threads.emplace_back([&r, &pool, i = stress_pool_callers + 1] {
      try {
        const auto res = r->c.get_or_try_init_blocking(r->hopping(pool, i), r->stop.get_token());
        if (!res.ok()) {
          r->cancelled_one(true);
        } else if (res->has_value()) {
          r->got(res->value());
        } else {
          r->returned_error(i, res->error());
        }
      } catch (const init_failure& e) {
        r->returned_error(i, e.id);
      }
      r->finished.done();
    });
    threads.emplace_back([&r] {
      if (!r->c.set(stress_value(stress_setter)).has_value()) {
        r->winner.store(stress_setter);
        r->stored.fetch_add(1);
      }
      r->finished.done();
    });
    if (cancel_this_round) {
      threads.emplace_back([&r] {
        r->stop.request_stop();
        r->finished.done();
      });
    }
    asyncband::runtime::spawn(pool.ref(), stress_pool_caller(*r, pool, 0));
    r->finished.wait_or_abort(30s, "once_cell stress");
    for (auto& t : threads) t.join();

    EXPECT_EQ(r->overlaps.load(), 0) << "round " << round << ": two initialisers at a time";
    EXPECT_EQ(r->stored.load(), 1) << "round " << round;
    EXPECT_EQ(r->bad.load(), 0) << "round " << round;
    EXPECT_EQ(r->ok.load() + r->failed.load() + r->cancelled.load(), stress_callers) << "round " << round;
    const int f_stored = r->winner.load() == stress_setter ? 0 : 1;
    EXPECT_EQ(r->runs.load(), r->failed.load() + f_stored)
        << "round " << round << ": a failure reached nobody";
    const stress_value* const v = r->c.get();
    EXPECT_TRUE(v != nullptr && v->winner == r->winner.load()) << "round " << round;
    if (!cancel_this_round) {
      EXPECT_EQ(r->cancelled.load(), 0) << "round " << round;
    }
    r->waits.expect_round(round, stress_observers, 1, cancel_this_round);
    totals.add(r->waits);
    failed += r->failed.load();
    return !HasFailure();
  });
  totals.expect_and_record(rounds);
  EXPECT_GT(failed, 0) << "no initialiser failed in any round: the failure path went untested";
  RecordProperty("callers_failed", failed);
}

}  // namespace
